"""Compaction: how fast it thins a compacted topic, and what it costs producers writing meanwhile.

    .venv/bin/python -m bench.compaction [--quick] [--json PATH] [--repeat N]

The server is ``ONCELOG_DATABASE_URL`` when set (it needs CREATEDB), else the embedded default cluster
(see ``bench/produce.py``, whose setup this reuses), in a database of its own.

A 4-partition topic with ``cleanup_policy=compact`` is written by the store call (idempotent,
1000-record batches, one writer per partition) with 100-byte values and 12-byte keys cycled from a
pool of 1024 per partition, so all but the last record of each key is superseded.

1. **Throughput.** ``Admin.compact(force=True)`` (passes of 50,000 offsets, one database
   transaction each) compacts the whole topic: records examined per second. The baseline is the
   same deletion done by PostgreSQL alone on a plain copy of the rows (same columns and primary
   key): one ``DELETE`` of every row that a later row of its partition and key supersedes. Both are
   followed by nothing else (no VACUUM); the ratio is the raw DELETE's time over compaction's.
2. **Producers meanwhile.** Three topics are filled alike. The writers then append as many records
   again to one of them alone; to another while a loop compacts it without pause (forced passes of
   5,000 offsets, each its own transaction, on the partitions the writers append to); and to the
   third while the loop compacts a fourth topic. Records/s with compaction running over records/s
   without: the cost to producers, and (the third) how much of it is the CPU the loop takes rather
   than its locks. The order rotates, ``--repeat`` rounds (default 3; 1 with --quick), medians kept.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Sequence
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
from bench.report import compaction_section
from oncelog.store import compaction as store_compaction
from oncelog.store import topics as store_topics

PARTITIONS = 4
BATCH = 1000
VALUE_SIZE = 100
FULL_RECORDS = 400_000
QUICK_RECORDS = 16_000
PASS_OFFSETS = 50_000
LOOP_PASS_OFFSETS = 5_000
RAW_SCHEMA = "bench_compaction"


def compacted_topic(bench: Bench) -> str:
    name, _ = bench.new_topic(PARTITIONS)
    with bench.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        store_topics.alter_topic_config(conn, name=name, config={"cleanup_policy": "compact"})
    return name


def fill(bench: Bench, topic: str, data: Data, first: int, per_partition: int) -> float:
    """``per_partition`` records into each partition; seconds taken."""
    batches = data.batches(first, per_partition, BATCH)
    return run_threads([store_writer(bench, topic, p, batches) for p in range(PARTITIONS)])


def compact_all(bench: Bench, topic: str, batch: int) -> tuple[float, int, int]:
    """Forced passes until none is needed: seconds, records examined, records removed."""
    examined = removed = 0
    with bench.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        started = time.perf_counter()
        while (done := store_compaction.compact(conn, topic=topic, batch=batch, force=True)) is not None:
            examined += done.examined
            removed += done.removed
        return time.perf_counter() - started, examined, removed


def raw_dedupe(conninfo: str, topic_id: int) -> tuple[float, int]:
    """The same rows in a plain table; one DELETE of every superseded row: seconds, rows deleted."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {RAW_SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {RAW_SCHEMA}")
        conn.execute(
            f"CREATE TABLE {RAW_SCHEMA}.plain (LIKE oncelog.records INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING INDEXES)"
        )
        conn.execute(f"INSERT INTO {RAW_SCHEMA}.plain SELECT * FROM oncelog.records WHERE topic_id = %s", (topic_id,))
        conn.execute(f"VACUUM ANALYZE {RAW_SCHEMA}.plain")
        started = time.perf_counter()
        deleted = conn.execute(
            f"DELETE FROM {RAW_SCHEMA}.plain r USING (SELECT DISTINCT ON (partition, key) partition, key, "
            f'"offset" FROM {RAW_SCHEMA}.plain ORDER BY partition, key, "offset" DESC) l '
            'WHERE r.partition = l.partition AND r.key = l.key AND r."offset" < l."offset"'
        ).rowcount
        return time.perf_counter() - started, int(deleted)


def topic_id_of(bench: Bench, topic: str) -> int:
    with bench.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        return store_topics.describe_topic(conn, name=topic).topic_id


def throughput(bench: Bench, data: Data, records: int, repeat: int) -> dict[str, Any]:
    per_partition = records // PARTITIONS
    runs: list[dict[str, float]] = []
    for r in range(repeat):
        log(f"compaction throughput: {records:,} records, run {r + 1} of {repeat}")
        bench.reset()
        topic = compacted_topic(bench)
        fill(bench, topic, data, 0, per_partition)
        raw_s, raw_deleted = raw_dedupe(bench.conninfo, topic_id_of(bench, topic))
        seconds, examined, removed = compact_all(bench, topic, PASS_OFFSETS)
        runs.append(
            {
                "seconds": seconds,
                "examined": float(examined),
                "removed": float(removed),
                "raw_s": raw_s,
                "raw_deleted": float(raw_deleted),
            }
        )
    med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
    return {
        "records": per_partition * PARTITIONS,
        "runs": runs,
        "median": med,
        "examined_per_s": round(med["examined"] / med["seconds"], 1),
        "removed_per_s": round(med["removed"] / med["seconds"], 1),
        "raw_deleted_per_s": round(med["raw_deleted"] / med["raw_s"], 1),
        "ratio_to_raw_delete": round(med["raw_s"] / med["seconds"], 3),
    }


class Cleaner(threading.Thread):
    """Forced compaction passes on one topic, without pause, until ``stop`` is set."""

    def __init__(self, bench: Bench, topic: str) -> None:
        super().__init__(name="compaction-loop")
        self.bench, self.topic = bench, topic
        self.stop = threading.Event()
        self.passes = self.removed = 0

    def run(self) -> None:
        with self.bench.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            while not self.stop.is_set():
                done = store_compaction.compact(conn, topic=self.topic, batch=LOOP_PASS_OFFSETS, force=True)
                if done is None:
                    time.sleep(0.001)  # nothing dirty yet: the writers are about to add some
                    continue
                self.passes += 1
                self.removed += done.removed


def produce_alone_and_beside(bench: Bench, data: Data, records: int, repeat: int) -> dict[str, Any]:
    """The same appends three ways: alone; into the partitions a loop compacts; while the loop
    compacts another topic (the CPU it takes, without its locks)."""
    per_partition = records // PARTITIONS
    runs: list[dict[str, float]] = []
    variants = ("alone", "beside", "elsewhere")
    for r in range(repeat):
        log(f"produce beside compaction: {records:,} records, round {r + 1} of {repeat}")
        bench.reset()
        alone, beside, elsewhere, other = (compacted_topic(bench) for _ in range(4))
        for topic in (alone, beside, elsewhere):
            fill(bench, topic, data, 0, per_partition)
        fill(bench, other, data, 0, 4 * per_partition)  # enough to keep the loop busy throughout
        run: dict[str, float] = {}
        for which in variants[r % 3 :] + variants[: r % 3]:
            if which == "alone":
                run["alone_s"] = fill(bench, alone, data, per_partition, per_partition)
                continue
            target = beside if which == "beside" else elsewhere
            cleaner = Cleaner(bench, beside if which == "beside" else other)
            cleaner.start()
            try:
                run[f"{which}_s"] = fill(bench, target, data, per_partition, per_partition)
            finally:
                cleaner.stop.set()
                cleaner.join()
            run[f"{which}_passes"], run[f"{which}_removed"] = float(cleaner.passes), float(cleaner.removed)
        run["ratio"] = run["alone_s"] / run["beside_s"]
        run["ratio_elsewhere"] = run["alone_s"] / run["elsewhere_s"]
        runs.append(run)
    appended = per_partition * PARTITIONS
    med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
    return {
        "records": appended,
        "runs": runs,
        "median": med,
        "alone_per_s": round(appended / med["alone_s"], 1),
        "beside_per_s": round(appended / med["beside_s"], 1),
        "elsewhere_per_s": round(appended / med["elsewhere_s"], 1),
        "ratio": round(med["ratio"], 3),
        "ratio_elsewhere": round(med["ratio_elsewhere"], 3),
    }


def run(quick: bool, repeat: int) -> dict[str, Any]:
    started = time.perf_counter()
    machine = machine_info()
    records = QUICK_RECORDS if quick else FULL_RECORDS
    data = Data(VALUE_SIZE)
    with scratch_database() as (bench, server):
        rate = throughput(bench, data, records, repeat)
        beside = produce_alone_and_beside(bench, data, records, repeat)
    return {
        **result_fields("compaction", quick, repeat, machine, server),
        "database": bench.name,
        "settings": {
            "partitions": PARTITIONS,
            "batch": BATCH,
            "value_bytes": VALUE_SIZE,
            "keys_per_partition": len(data.keys),
            "pass_offsets": PASS_OFFSETS,
            "loop_pass_offsets": LOOP_PASS_OFFSETS,
            "repeat": repeat,
        },
        "throughput": rate,
        "produce": beside,
        "seconds": round(time.perf_counter() - started, 1),
    }


def render(result: dict[str, Any]) -> str:
    return titled("# oncelog compaction benchmark", result["quick"], compaction_section(result))


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(
        argv,
        prog="bench.compaction",
        doc=__doc__,
        repeat_help="runs of each measurement (default 3; 1 with --quick)",
        default_repeat=3,
        run=run,
        render=render,
    )


if __name__ == "__main__":
    sys.exit(main())
