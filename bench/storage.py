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

Every step is repeated ``--repeat`` times (default 2; 1 with --quick) on fresh data, the median kept.
The 100M figures scale the measured per-record costs linearly (a B-tree's depth grows by one level
somewhere on the way, so they are a floor, not a promise).
"""

from __future__ import annotations

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
