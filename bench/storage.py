"""Storage: what a record costs on disk, what retention costs, and both scaled to 100M records.

    .venv/bin/python -m bench.storage [--quick] [--json PATH] [--repeat N]

The server is ``ONCELOG_DATABASE_URL`` when set (it needs CREATEDB), else the embedded default cluster
(see ``bench/produce.py``, whose setup this reuses), in a database of its own.

For each value size (100 B and 1 KiB values, 12-byte keys), on a 4-partition topic:

1. **Growth.** The store call (``store.log.produce``, idempotent, 1000-record batches, one writer per
   partition) writes the records in two halves; after each, the ``records`` heap, its TOAST table and
   its indexes are measured (``pg_relation_size``, ``pg_indexes_size``). Bytes per record are the
   second half's growth over its records (the marginal cost, past the first pages).
2. **Retention, as oncelog does it.** ``DeleteRecords`` moves every partition's log start to its
   middle, then ``enforce_retention`` passes (10,000 records per partition per call) delete the rows
   below it, until a pass deletes nothing; then ``VACUUM`` makes their space reusable. Timed, with the
   WAL each step writes (``pg_current_wal_lsn``).
3. **The same deletion on raw tables** (baselines, the same rows copied first): a ``DELETE`` of the
   same offsets from a plain table with the same columns and primary key, then ``VACUUM``; and a
   table partitioned by offset range (four ranges per topic partition's offsets, ``PARTITION BY
   RANGE ("offset")``) whose two lower partitions are dropped (``DROP TABLE``), what retention would do
   if ``records`` were partitioned so.
4. **What such partitioning costs every call** (once, 100 B values): two tables of ``records``' columns
   hold the same rows, one plain and one partitioned into segments of each topic partition's offsets
   (``PARTITION BY RANGE (topic_id, partition, "offset")``: the only layout whose segments retention
   could drop one partition at a time), ``HOT_PARTITIONS`` topic partitions of ``HOT_SEGMENTS``
   segments each. The same PL/pgSQL append (1, 10 and 1000 records, ``INSERT ... SELECT FROM unnest``)
   and fetch (10 and 1000 records from a consumer near the end, and 10 from anywhere in the log, with
   the readable end as the upper bound) run on both, paired and alternating, medians kept. The lock
   each segment operation takes on the parent is read from ``pg_locks``.

Every step is repeated ``--repeat`` times (default 2; 1 with --quick) on fresh data, the median kept.
The 100M figures scale the measured per-record costs linearly (a B-tree's depth grows by one level
somewhere on the way, so they are a floor, not a promise).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from bench.produce import (
    Bench,
    Data,
    log,
    machine_info,
    result_fields,
    run_main,
    run_threads,
    scratch_database,
    store_writer,
    titled,
)
from bench.report import storage_section
from oncelog.store import topics as store_topics

VALUE_SIZES = (100, 1024)
FULL_RECORDS = {100: 1_000_000, 1024: 400_000}
QUICK_RECORDS = {100: 20_000, 1024: 8_000}
PARTITIONS = 4
BATCH = 1000
RETENTION_BATCH = 10_000
SCALE_TO = 100_000_000
RAW_SCHEMA = "bench_storage"
HOT_PARTITIONS = 16
HOT_SEGMENTS = {True: 8, False: 48}  # by --quick
HOT_SEGMENT_OFFSETS = {True: 1000, False: 5000}
HOT_CALLS = {True: 60, False: 600}  # paired calls per measure (a tenth for 1000-record calls)
HOT_VALUE = 100


def relation_sizes(conninfo: str) -> dict[str, int]:
    """Bytes of the records heap, its TOAST table and its indexes."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_relation_size(c.oid), coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0), "
            "pg_indexes_size(c.oid) FROM pg_class c WHERE c.oid = 'oncelog.records'::regclass"
        ).fetchone()
    assert row is not None
    return {"heap": int(row[0]), "toast": int(row[1]), "indexes": int(row[2])}


def write(bench: Bench, topic: str, data: Data, first: int, per_partition: int) -> float:
    """``per_partition`` records into each partition, offsets from ``first``; seconds taken."""
    batches = data.batches(first, per_partition, BATCH)
    return run_threads([store_writer(bench, topic, p, batches) for p in range(PARTITIONS)])


def wal_lsn(conn: psycopg.Connection[Any]) -> str:
    return str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])  # type: ignore[index]


def timed_with_wal(conninfo: str, step: Callable[[psycopg.Connection[Any]], object]) -> tuple[float, int]:
    """Seconds ``step(conn)`` takes (autocommit) and the WAL bytes written meanwhile (the whole
    server's: nothing else runs in a benchmark)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        before = wal_lsn(conn)
        started = time.perf_counter()
        step(conn)
        seconds = time.perf_counter() - started
        after = wal_lsn(conn)
        wal = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", (after, before)).fetchone()[0]  # type: ignore[index]
    return seconds, int(wal)


def retention(bench: Bench, topic: str, cut: int) -> dict[str, float]:
    """oncelog's way: DeleteRecords to ``cut`` in every partition, retention passes, VACUUM."""

    def passes(conn: psycopg.Connection[Any]) -> None:
        while conn.execute("SELECT oncelog.enforce_retention_v2(%s)", (RETENTION_BATCH,)).fetchone()[0]:  # type: ignore[index]
            pass

    with bench.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        store_topics.delete_records(conn, name=topic, offsets=dict.fromkeys(range(PARTITIONS), cut))
    delete_s, delete_wal = timed_with_wal(bench.conninfo, passes)
    vacuum_s, vacuum_wal = timed_with_wal(bench.conninfo, lambda c: c.execute("VACUUM oncelog.records"))
    return {"delete_s": delete_s, "delete_wal": delete_wal, "vacuum_s": vacuum_s, "vacuum_wal": vacuum_wal}


def raw_copies(conninfo: str, per_partition: int) -> None:
    """The topic's rows in a plain table and in a table partitioned by offset range."""
    quarter = per_partition // 4
    bounds = [0, quarter, 2 * quarter, 3 * quarter]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {RAW_SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {RAW_SCHEMA}")
        conn.execute(
            f"CREATE TABLE {RAW_SCHEMA}.plain (LIKE oncelog.records INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING INDEXES)"
        )
        conn.execute(
            f"CREATE TABLE {RAW_SCHEMA}.parted (LIKE oncelog.records INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            'INCLUDING INDEXES) PARTITION BY RANGE ("offset")'
        )
        for i, low in enumerate(bounds):
            high = "MAXVALUE" if i == len(bounds) - 1 else str(bounds[i + 1])
            conn.execute(
                f"CREATE TABLE {RAW_SCHEMA}.parted_{i} PARTITION OF {RAW_SCHEMA}.parted "
                f"FOR VALUES FROM ({low}) TO ({high})"
            )
        conn.execute(f"INSERT INTO {RAW_SCHEMA}.plain SELECT * FROM oncelog.records")
        conn.execute(f"INSERT INTO {RAW_SCHEMA}.parted SELECT * FROM oncelog.records")
        conn.execute(f"VACUUM ANALYZE {RAW_SCHEMA}.plain, {RAW_SCHEMA}.parted")


def raw_deletions(conninfo: str, cut: int) -> dict[str, float]:
    """The same offsets deleted from the plain table (DELETE, VACUUM) and dropped as partitions."""
    delete_s, delete_wal = timed_with_wal(
        conninfo, lambda c: c.execute(f'DELETE FROM {RAW_SCHEMA}.plain WHERE "offset" < %s', (cut,))
    )
    vacuum_s, vacuum_wal = timed_with_wal(conninfo, lambda c: c.execute(f"VACUUM {RAW_SCHEMA}.plain"))

    def drop(conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            conn.execute(f"DROP TABLE {RAW_SCHEMA}.parted_0, {RAW_SCHEMA}.parted_1")

    drop_s, drop_wal = timed_with_wal(conninfo, drop)
    return {
        "raw_delete_s": delete_s,
        "raw_delete_wal": delete_wal,
        "raw_vacuum_s": vacuum_s,
        "raw_vacuum_wal": vacuum_wal,
        "drop_s": drop_s,
        "drop_wal": drop_wal,
    }


def hot_tables(conn: psycopg.Connection[Any], segments: int, segment_offsets: int) -> int:
    """The plain and the segmented table, each filled with every partition's first ``segments - 1``
    segments (the last one, open-ended, takes the appends), and their append and fetch functions.
    Returns the offsets written per topic partition."""
    conn.execute(f"DROP SCHEMA IF EXISTS {RAW_SCHEMA} CASCADE")
    conn.execute(f"CREATE SCHEMA {RAW_SCHEMA}")
    like = "(LIKE oncelog.records INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)"
    conn.execute(f"CREATE TABLE {RAW_SCHEMA}.hot_plain {like}")
    conn.execute(f'CREATE TABLE {RAW_SCHEMA}.hot_parted {like} PARTITION BY RANGE (topic_id, partition, "offset")')
    for p in range(HOT_PARTITIONS):
        for s in range(segments):
            high = f"{(s + 1) * segment_offsets}" if s < segments - 1 else "MAXVALUE"
            conn.execute(
                f"CREATE TABLE {RAW_SCHEMA}.hot_parted_{p}_{s} PARTITION OF {RAW_SCHEMA}.hot_parted "
                f"FOR VALUES FROM (1, {p}, {s * segment_offsets}) TO (1, {p}, {high})"
            )
    filled = (segments - 1) * segment_offsets
    for table in ("hot_plain", "hot_parted"):
        conn.execute(
            f'INSERT INTO {RAW_SCHEMA}.{table} (topic_id, partition, "offset", producer_id, producer_epoch, sequence, '
            "key, value) SELECT 1, p, o, 1, 0, o, sha224(int8send(o)), "
            f"substr(sha512(int8send(o)) || sha512(int8send(-o)), 1, {HOT_VALUE}) "
            f"FROM generate_series(0, {HOT_PARTITIONS - 1}) p, generate_series(0, {filled - 1}) o"
        )
        # The same statement shapes as the store's: a set-based append and a bounded, ordered read.
        conn.execute(
            f"CREATE FUNCTION {RAW_SCHEMA}.{table}_append(p int, base bigint, keys bytea[], vals bytea[]) "
            f"RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog AS $$ BEGIN "
            f'INSERT INTO {RAW_SCHEMA}.{table} (topic_id, partition, "offset", producer_id, producer_epoch, '
            "sequence, key, value) SELECT 1, p, base + o - 1, 1, 0, base + o - 1, k, v "
            "FROM unnest(keys, vals) WITH ORDINALITY AS u(k, v, o); END $$"
        )
        conn.execute(
            f"CREATE FUNCTION {RAW_SCHEMA}.{table}_fetch(p int, start bigint, stop bigint, n int) "
            'RETURNS TABLE("offset" bigint, key bytea, value bytea) LANGUAGE plpgsql STABLE '
            "SET search_path = pg_catalog AS $$ BEGIN "
            f'RETURN QUERY SELECT r."offset", r.key, r.value FROM {RAW_SCHEMA}.{table} r '
            'WHERE r.topic_id = 1 AND r.partition = p AND r."offset" >= start AND r."offset" < stop '
            'AND NOT r.aborted ORDER BY r."offset" LIMIT n; END $$'
        )
    conn.execute(f"VACUUM ANALYZE {RAW_SCHEMA}.hot_plain, {RAW_SCHEMA}.hot_parted")
    return filled


def segment_locks(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """The lock each segment operation takes on the partitioned parent, read from pg_locks (each
    rolled back). Only the two marked concurrent leave readers and writers running."""
    parent = f"{RAW_SCHEMA}.hot_parted"
    bounds = "FOR VALUES FROM (2, 0, 0) TO (2, 0, 10)"
    steps = {
        "create partition of": f"CREATE TABLE {RAW_SCHEMA}.hot_new PARTITION OF {parent} {bounds}",
        "attach": f"CREATE TABLE {RAW_SCHEMA}.hot_new (LIKE {parent} INCLUDING ALL); "
        f"ALTER TABLE {parent} ATTACH PARTITION {RAW_SCHEMA}.hot_new {bounds}",
        "detach": f"ALTER TABLE {parent} DETACH PARTITION {RAW_SCHEMA}.hot_parted_0_0",
        "drop": f"DROP TABLE {RAW_SCHEMA}.hot_parted_0_0",
    }
    found: dict[str, str] = {}
    for name, sql in steps.items():
        with conn.transaction(force_rollback=True):
            for statement in sql.split("; "):
                conn.execute(statement)
            rows = conn.execute(
                "SELECT l.mode FROM pg_locks l WHERE l.pid = pg_backend_pid() AND l.relation = %s::regclass",
                (parent,),
            ).fetchall()
        found[name] = max((str(mode) for (mode,) in rows), key=LOCK_STRENGTH.index)
    # DETACH ... CONCURRENTLY cannot run in a transaction block (so in no function either): its lock is
    # PostgreSQL's documented one, not read here.
    found["detach concurrently (outside any transaction)"] = "ShareUpdateExclusiveLock"
    return found


LOCK_STRENGTH = [
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
]


def hot_path(conninfo: str, quick: bool) -> dict[str, Any]:
    """Appends and fetches on the plain and the segmented table, paired (step 4 above)."""
    segments, segment_offsets, calls = HOT_SEGMENTS[quick], HOT_SEGMENT_OFFSETS[quick], HOT_CALLS[quick]
    log(f"storage: hot path, {HOT_PARTITIONS} partitions x {segments} segments of {segment_offsets:,} offsets")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        filled = hot_tables(conn, segments, segment_offsets)
        locks = segment_locks(conn)
    rng = random.Random(7)  # noqa: S311 (reproducible partitions and positions, not cryptography)
    ends = {table: dict.fromkeys(range(HOT_PARTITIONS), filled) for table in ("hot_plain", "hot_parted")}
    conns = {table: psycopg.connect(conninfo, autocommit=True) for table in ends}

    def append(table: str, n: int) -> float:
        p = rng.randrange(HOT_PARTITIONS)
        keys = [rng.randbytes(12) for _ in range(n)]
        values = [rng.randbytes(HOT_VALUE) for _ in range(n)]
        started = time.perf_counter()
        conns[table].execute(f"SELECT {RAW_SCHEMA}.{table}_append(%s, %s, %s, %s)", (p, ends[table][p], keys, values))
        seconds = time.perf_counter() - started
        ends[table][p] += n
        return seconds

    def fetch(table: str, n: int, near_end: bool) -> float:
        p = rng.randrange(HOT_PARTITIONS)
        end = ends[table][p]
        start = end - n - rng.randrange(2 * segment_offsets) if near_end else rng.randrange(end - n)
        started = time.perf_counter()
        rows = (
            conns[table]
            .execute(f"SELECT * FROM {RAW_SCHEMA}.{table}_fetch(%s, %s, %s, %s)", (p, start, end, n))
            .fetchall()
        )
        seconds = time.perf_counter() - started
        if len(rows) != n:
            raise RuntimeError(f"{table}: fetched {len(rows)} records, not {n}")
        return seconds

    measures: dict[str, Callable[[str], float]] = {
        "append 1": lambda t: append(t, 1),
        "append 10": lambda t: append(t, 10),
        "append 1000": lambda t: append(t, 1000),
        "fetch 10 near the end": lambda t: fetch(t, 10, True),
        "fetch 1000 near the end": lambda t: fetch(t, 1000, True),
        "fetch 10 anywhere": lambda t: fetch(t, 10, False),
    }
    rows: list[dict[str, Any]] = []
    try:
        for name, call in measures.items():
            n = max(calls // 10, 10) if "1000" in name else calls
            for _ in range(max(n // 10, 3)):  # warm both: plans cached, pages read
                call("hot_plain")
                call("hot_parted")
            plain: list[float] = []
            parted: list[float] = []
            for i in range(n):
                order = (("hot_plain", plain), ("hot_parted", parted))
                for table, into in order if i % 2 else order[::-1]:
                    into.append(call(table))
            plain_ms, parted_ms = statistics.median(plain) * 1000, statistics.median(parted) * 1000
            rows.append(
                {
                    "measure": name,
                    "calls": n,
                    "plain_ms": round(plain_ms, 4),
                    "partitioned_ms": round(parted_ms, 4),
                    "ratio": round(parted_ms / plain_ms, 2),
                }
            )
    finally:
        for conn in conns.values():
            conn.close()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {RAW_SCHEMA} CASCADE")
    return {
        "partitions": HOT_PARTITIONS,
        "segments_per_partition": segments,
        "segment_offsets": segment_offsets,
        "leaf_tables": HOT_PARTITIONS * segments,
        "value_bytes": HOT_VALUE,
        "rows": rows,
        "locks": locks,
    }


def measure(bench: Bench, value_size: int, records: int, repeat: int) -> dict[str, Any]:
    data = Data(value_size)
    per_partition = records // PARTITIONS
    half = per_partition // 2
    runs: list[dict[str, float]] = []
    for r in range(repeat):
        log(f"storage: {value_size} B values, {records:,} records, run {r + 1} of {repeat}")
        bench.reset()
        topic, _ = bench.new_topic(PARTITIONS)
        first_s = write(bench, topic, data, 0, half)
        at_half = relation_sizes(bench.conninfo)
        second_s = write(bench, topic, data, half, per_partition - half)
        at_full = relation_sizes(bench.conninfo)
        grown = per_partition - half
        run: dict[str, float] = {
            "write_s": first_s + second_s,
            **{f"{k}_bytes": float(v) for k, v in at_full.items()},
            **{f"{k}_per_record": (at_full[k] - at_half[k]) / (grown * PARTITIONS) for k in at_full},
        }
        raw_copies(bench.conninfo, per_partition)
        run.update(retention(bench, topic, half))
        run.update(raw_deletions(bench.conninfo, half))
        run["deleted"] = half * PARTITIONS
        runs.append(run)
    med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
    per_record = med["heap_per_record"] + med["toast_per_record"] + med["indexes_per_record"]
    deleted = med["deleted"]
    retention_per_record = (med["delete_s"] + med["vacuum_s"]) / deleted
    raw_per_record = (med["raw_delete_s"] + med["raw_vacuum_s"]) / deleted
    return {
        "value_bytes": value_size,
        "records": per_partition * PARTITIONS,
        "runs": runs,
        "median": med,
        "bytes_per_record": round(per_record, 1),
        "heap_per_record": round(med["heap_per_record"], 1),
        "indexes_per_record": round(med["indexes_per_record"], 1),
        "toast_per_record": round(med["toast_per_record"], 1),
        "retention_records_per_s": round(deleted / med["delete_s"], 1),
        "retention_wal_per_record": round((med["delete_wal"] + med["vacuum_wal"]) / deleted, 1),
        "raw_delete_records_per_s": round(deleted / med["raw_delete_s"], 1),
        "ratio_retention_to_raw_delete": round(raw_per_record / retention_per_record, 3),
        "drop_s": round(med["drop_s"], 4),
        "scaled": {
            "records": SCALE_TO,
            "table_gib": round(per_record * SCALE_TO / 2**30, 1),
            # Deleting all of them by retention (DELETE passes and VACUUM), and by dropping partitions.
            "retention_hours": round(retention_per_record * SCALE_TO / 3600, 2),
            "raw_delete_hours": round(raw_per_record * SCALE_TO / 3600, 2),
            "retention_wal_gib": round((med["delete_wal"] + med["vacuum_wal"]) / deleted * SCALE_TO / 2**30, 1),
        },
    }


def run(quick: bool, repeat: int) -> dict[str, Any]:
    started = time.perf_counter()
    machine = machine_info()
    counts = QUICK_RECORDS if quick else FULL_RECORDS
    with scratch_database() as (bench, server):
        cases = [measure(bench, size, counts[size], repeat) for size in VALUE_SIZES]
        segmented = hot_path(bench.conninfo, quick)
    return {
        **result_fields("storage", quick, repeat, machine, server),
        "database": bench.name,
        "settings": {
            "partitions": PARTITIONS,
            "batch": BATCH,
            "retention_batch": RETENTION_BATCH,
            "repeat": repeat,
            "scale_to": SCALE_TO,
        },
        "cases": cases,
        "hot_path": segmented,
        "seconds": round(time.perf_counter() - started, 1),
    }


def render(result: dict[str, Any]) -> str:
    return titled("# oncelog storage benchmark", result["quick"], storage_section(result))


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(
        argv,
        prog="bench.storage",
        doc=__doc__,
        repeat_help="runs per value size on fresh data (default 2; 1 with --quick)",
        default_repeat=2,
        run=run,
        render=render,
    )


if __name__ == "__main__":
    sys.exit(main())
