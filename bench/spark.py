"""Spark read and write-back throughput, each against what Spark's JDBC source does with the same
rows in the same run.

    .venv/bin/python -m bench.spark [--quick] [--pairs N] [--json PATH]

* Reads: the committed view (oncelog.spark.read_committed) against a Spark JDBC read of the raw
  log table, the same rows and the same task split: a warm-up pair, then ``--pairs`` pairs in
  alternating order, the median of the per-pair ratios. Target: committed view >= 0.8 of raw.
* Write-back: oncelog.spark.write of a cached DataFrame (the pipeline's output rows: key, value,
  partition) against Spark's JDBC writer (``df.write.jdbc``, ``batchsize`` 10,000 and
  ``reWriteBatchedInserts=true``) of the same DataFrame into a plain table with the same columns.
  One warm-up pair (the JVM's JIT more than doubles the JDBC writer's rate over the first runs),
  then ``--pairs`` pairs in alternating order; the ratio is the median of the per-pair ratios.
  Target: >= 0.5.
* The exactly-once pipeline's records/s end to end, and where its time goes (``plan``: fixing the
  bounds; ``read_transform``, ``stage``, ``append``: the Spark job's wall time split in proportion
  to the time its tasks spent waiting for rows, routing them and appending them; ``commit``).

The server is ``ONCELOG_DATABASE_URL`` when set, else the embedded default cluster (durable); the
run works in a database of its own, dropped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench.produce import code_info, machine_info, resolve_target, server_info, with_database
from oncelog import Admin
from oncelog.spark import read_committed, run_pipeline, session, write
from oncelog.spark.demo import upper_case
from oncelog.spark.jdbc import jdbc_target
from oncelog.spark.writer import WriteResult
from oncelog.store import cluster, create_engine, log, migrate
from oncelog.store.records import RecordIn

#: The committed view's read rate against the raw JDBC read (the issue's target).
TARGET = 0.8
#: oncelog.spark.write's rate against Spark's JDBC writer of the same rows (the issue's target).
WRITE_BACK_TARGET = 0.5

#: The write-back baseline: a plain table with the DataFrame's columns, no key, no index.
RAW_WRITE_TABLE = "bench_raw.spark_write"
RAW_WRITE_DDL = (
    f"CREATE SCHEMA IF NOT EXISTS bench_raw; CREATE TABLE {RAW_WRITE_TABLE} (key bytea, value bytea, partition integer)"
)
#: Spark's JDBC writer as fast as it goes here: large batches, rewritten into multi-row INSERTs.
RAW_WRITE_BATCH = "10000"


def load(url: str, records: int, partitions: int) -> None:
    """``records`` 100-byte values over ``partitions`` partitions, in 1000-record batches."""
    with Admin(url) as admin:
        admin.create_topic("bench", partitions=partitions)
        admin.create_topic("bench-out", partitions=partitions)
    engine = create_engine(url)
    value = b"x" * 100
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            pid = log.init_producer_id(conn)
            for p in range(partitions):
                for base in range(0, records // partitions, 1000):
                    n = min(1000, records // partitions - base)
                    log.produce(
                        conn,
                        topic="bench",
                        partition=p,
                        records=[RecordIn(value, f"{base + i}".encode()) for i in range(n)],
                        producer_id=pid.producer_id,
                        producer_epoch=pid.epoch,
                        base_sequence=base,
                    )
    finally:
        engine.dispose()


def timed_count(df: Any) -> tuple[int, float]:
    started = time.perf_counter()
    n = df.count()
    return n, time.perf_counter() - started


def wall_phases(result: WriteResult, plan_s: float | None = None) -> dict[str, float]:
    """Where a write's wall time went: the driver's steps as measured, and the Spark job's wall time
    split in proportion to the time its tasks spent waiting for rows (reading and transforming
    them), routing them into batches (staging) and appending them."""
    tasks = result.phases.get("tasks", 0.0)
    spent = result.task_seconds
    total = sum(spent.values()) or 1.0
    phases = {} if plan_s is None else {"plan": plan_s}
    phases |= {
        "prepare": result.phases.get("prepare", 0.0),
        "read_transform": tasks * spent.get("input", 0.0) / total,
        "stage": tasks * spent.get("convert", 0.0) / total,
        "append": tasks * spent.get("append", 0.0) / total,
        "commit": result.phases.get("commit", 0.0),
    }
    return {k: round(v, 3) for k, v in phases.items()}


def checkpoint(conninfo: str) -> None:
    """Start each measured write from a clean checkpoint, when the role may ask for one."""
    # Needs superuser or pg_checkpoint: without, measure without.
    with psycopg.connect(conninfo, autocommit=True) as conn, contextlib.suppress(psycopg.Error):
        conn.execute("CHECKPOINT")


def write_back(spark: Any, url: str, conninfo: str, partitions: int, pairs: int) -> dict[str, Any]:
    """oncelog.spark.write against Spark's JDBC writer, the same cached DataFrame, in pairs."""
    from pyspark.sql import functions as F  # noqa: PLC0415 - the optional spark extra

    # The pipeline's output rows, binary as the log stores them (both writers get the same bytes).
    out = upper_case(read_committed(spark, url, ["bench"]))
    df = out.select("key", F.col("value").cast("binary").alias("value"), "partition").cache()
    records = int(df.count())
    with Admin(url) as admin:
        admin.create_topic("bench-wb", partitions=partitions)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(RAW_WRITE_DDL)
    jdbc = jdbc_target(url)
    props = {**jdbc.properties, "batchsize": RAW_WRITE_BATCH}

    def raw() -> float:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {RAW_WRITE_TABLE}")
        checkpoint(conninfo)
        started = time.perf_counter()
        df.write.jdbc(
            url=jdbc.url + "?reWriteBatchedInserts=true", table=RAW_WRITE_TABLE, mode="append", properties=props
        )
        return records / (time.perf_counter() - started)

    runs = 0

    def ours() -> tuple[float, WriteResult]:
        nonlocal runs
        runs += 1
        checkpoint(conninfo)
        started = time.perf_counter()
        result = write(df, url, "bench-wb", job_id=f"bench-wb-{runs}", partition_col="partition")
        elapsed = time.perf_counter() - started
        if result.records != records:
            raise RuntimeError(f"oncelog.spark.write wrote {result.records} records, not {records}")
        return records / elapsed, result

    raw()  # the warm-up pair: JIT, Python workers, buffer cache
    ours()
    measured: list[tuple[float, float, WriteResult]] = []  # (raw rows/s, oncelog rows/s, its result)
    for i in range(pairs):
        # Alternate the order, so that neither side always runs after the other.
        if i % 2:
            ours_rate, result = ours()
            raw_rate = raw()
        else:
            raw_rate = raw()
            ours_rate, result = ours()
        measured.append((raw_rate, ours_rate, result))
    df.unpersist()
    ratios = [ours_rate / raw_rate for raw_rate, ours_rate, _ in measured]
    median_pair = sorted(range(pairs), key=lambda i: ratios[i])[(pairs - 1) // 2]
    return {
        "write_back": {
            "records": records,
            "oncelog_rows_per_s": round(statistics.median(m[1] for m in measured), 1),
            "raw_jdbc_rows_per_s": round(statistics.median(m[0] for m in measured), 1),
            "ratio": round(statistics.median(ratios), 3),
            "target": WRITE_BACK_TARGET,
            "phases_s": wall_phases(measured[median_pair][2]),
        },
        "write_back_pairs": [
            {
                "raw_jdbc_rows_per_s": round(raw_rate, 1),
                "oncelog_rows_per_s": round(ours_rate, 1),
                "ratio": round(ratio, 3),
                "task_s": {k: round(v, 3) for k, v in result.task_seconds.items()},
            }
            for (raw_rate, ours_rate, result), ratio in zip(measured, ratios, strict=True)
        ],
    }


def run(quick: bool, pairs: int) -> dict[str, Any]:
    started_run = time.perf_counter()
    records, partitions, per_task = (4_000, 2, 2_000) if quick else (400_000, 4, 100_000)
    target = resolve_target()
    name = f"oncelog_bench_spark_{uuid.uuid4().hex[:8]}"
    cluster.create_database(target.cluster_url, name)
    url = with_database(target.cluster_url, name)
    spark = None
    try:
        engine = create_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        load(url, records, partitions)
        spark = session(**{"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        jdbc = jdbc_target(url)
        # Raw: the records table itself, same predicates (one task per offset slice).
        preds = [
            f'topic_id = 1 AND partition = {p} AND "offset" >= {lo} AND "offset" < {lo + per_task}'
            for p in range(partitions)
            for lo in range(0, records // partitions, per_task)
        ]
        raw_table = (
            '(SELECT topic_id, partition, "offset", key, value, headers::text AS headers, "timestamp", producer_id '
            "FROM oncelog.records) AS r"
        )

        def raw_read() -> tuple[int, float]:
            raw_df = spark.read.jdbc(url=jdbc.url, table=raw_table, predicates=preds, properties=dict(jdbc.properties))
            return timed_count(raw_df.select("value"))

        def view_read() -> tuple[int, float]:
            return timed_count(read_committed(spark, url, ["bench"], max_records_per_task=per_task).select("value"))

        raw_read(), view_read()  # warms the JVM and the buffer cache
        # Paired like the write-back: one read a few seconds long swings with the machine, so the
        # ratio is the median of per-pair ratios, in alternating order.
        reads: list[tuple[float, float]] = []
        for i in range(pairs):
            if i % 2 == 0:
                (n_raw, t_raw), (n_view, t_view) = raw_read(), view_read()
            else:
                (n_view, t_view), (n_raw, t_raw) = view_read(), raw_read()
            reads.append((n_raw / t_raw, n_view / t_view))
        ratios = [view / raw for raw, view in reads]
        results: dict[str, Any] = {
            "records": records,
            "partitions": partitions,
            "tasks": len(preds),
            "raw_rows_per_s": statistics.median(raw for raw, _ in reads),
            "committed_rows_per_s": statistics.median(view for _, view in reads),
            "ratio": statistics.median(ratios),
            "read_pair_ratios": [round(r, 3) for r in ratios],
            "rows": [n_raw, n_view],
        }
        conninfo = with_database(target.cluster_url, name, driver="postgresql")
        results |= write_back(spark, url, conninfo, partitions, pairs)
        checkpoint(conninfo)
        started = time.perf_counter()
        result = run_pipeline(
            spark, url, input_topics=["bench"], output_topic="bench-out", group="bench", transform=upper_case
        )
        elapsed = time.perf_counter() - started
        results["pipeline_records"] = result.output_records
        results["pipeline_records_per_s"] = result.output_records / elapsed
        if result.write is not None:
            results["pipeline_phases_s"] = wall_phases(result.write, result.phases.get("plan"))
        results["machine"] = machine_info()
        results["server"] = target.description
        # The same run metadata as the other benchmarks record, for bench/report.py (added fields only:
        # "server" above stays the target's description).
        results["benchmark"] = "spark"
        results["quick"] = quick
        results["when"] = datetime.now(UTC).isoformat(timespec="seconds")
        results["oncelog"] = code_info()
        results["postgres"] = server_info(conninfo)
        results["ratio_target"] = TARGET
        results["seconds"] = round(time.perf_counter() - started_run, 1)
        return results
    finally:
        if spark is not None:
            spark.stop()
        cluster.drop_database(target.cluster_url, name)
        if target.stop is not None:
            target.stop()


def render(r: dict[str, Any]) -> str:
    wb = r["write_back"]
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in wb["phases_s"].items())
    per_pair = ", ".join(f"{p['ratio']:.2f}" for p in r["write_back_pairs"])
    pipeline_phases = ", ".join(f"{k} {v:.2f} s" for k, v in r.get("pipeline_phases_s", {}).items())
    return "\n".join(
        [
            f"## Spark reads ({r['records']:,} records of 100 B, {r['partitions']} partitions, {r['tasks']} tasks; "
            "medians of the pairs)",
            "",
            "| read | rows/s | ratio |",
            "|---|---:|---:|",
            f"| raw JDBC read of the records table | {r['raw_rows_per_s']:,.0f} | 1.00 |",
            f"| read_committed (committed_records view) | {r['committed_rows_per_s']:,.0f} | {r['ratio']:.2f} |",
            "",
            f"committed view vs raw: ratio {r['ratio']:.2f} (target >= 0.8), the median of "
            f"{len(r.get('read_pair_ratios', [r['ratio']]))} pair(s): "
            + ", ".join(f"{x:.2f}" for x in r.get("read_pair_ratios", [r["ratio"]])),
            "",
            f"## Spark write-back ({wb['records']:,} records, median of {len(r['write_back_pairs'])} pairs)",
            "",
            "| write | rows/s | ratio |",
            "|---|---:|---:|",
            f"| Spark JDBC writer into a plain table | {wb['raw_jdbc_rows_per_s']:,.0f} | 1.00 |",
            f"| oncelog.spark.write | {wb['oncelog_rows_per_s']:,.0f} | {wb['ratio']:.2f} |",
            "",
            f"write-back vs raw JDBC: ratio {wb['ratio']:.2f} (target >= {wb['target']}); per pair: {per_pair}",
            f"where the median pair's write went: {phases}",
            f"exactly-once pipeline end to end: {r['pipeline_records']:,} records at "
            f"{r['pipeline_records_per_s']:,.0f} records/s ({pipeline_phases})",
            f"server: {r['server']}; machine: {r['machine']['nproc']} cores, Python {r['machine']['python']}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.spark", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny counts (a smoke test, not a measurement)")
    parser.add_argument("--pairs", type=int, default=None, help="measured write-back pairs (default 5; 1 with --quick)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)
    pairs = args.pairs if args.pairs is not None else (1 if args.quick else 5)
    if pairs < 1:
        parser.error("--pairs must be at least 1")
    result = run(args.quick, pairs)
    print(render(result))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
