"""Produce throughput and latency: oncelog against the raw PostgreSQL write ceiling, in the same run.

    .venv/bin/python -m bench.produce [--quick] [--json PATH] [--repeat N] [--only b1000,...]
    .venv/bin/python bench/produce.py  [same options]

The server is ``ONCELOG_DATABASE_URL`` when set (it needs CREATEDB), else the embedded default
cluster, started the way the CLI starts it (durable settings). The run works in a database of its
own, created and migrated to head first and dropped at the end.

For every value size (100 B, 1 KiB), partition count (1, 8) and batch size (1, 100, 1000 records):

* raw_copy and raw_unnest, the raw ceiling: the same rows (topic_id, partition, offset,
  producer_id, producer_epoch, sequence, key, value, headers NULL, timestamp) written into a plain
  table with the same columns and primary key, one commit per batch, by psycopg 3 binary COPY, and by
  ``INSERT ... SELECT ... FROM unnest(%b::bytea[], %b::bytea[]) WITH ORDINALITY`` with binary array
  parameters (keys and values as arrays, the offsets and sequences numbered from the batch's first,
  as the store numbers them; the constant columns as parameters). Each run's ceiling is the faster of
  the two in that run, and every ratio is taken against it;
* store: ``oncelog.store.log.produce``, idempotent, one autocommit call per batch;
* producer: ``oncelog.Producer`` with ``max_batch_records`` = the batch size and a long linger, so
  batches leave full (tuned); records/s from the first ``send`` to the end of ``flush``;
* producer_defaults (1000-record batches only): ``oncelog.Producer(url)`` with nothing set, sending
  the same records to the same partitions;
* producer_aio (1000-record batches only): ``oncelog.aio.Producer``, tuned as the Producer, sending
  from a coroutine (``await send()``, the futures dropped, then ``await flush()``), reported against
  the Producer (``ratio_aio_producer``).

With 8 partitions, raw and store use one writer thread (and connection) per partition (store: one
producer id per thread); the Producer is one Producer sending round-robin to the 8 partitions.
Both tables are emptied and a CHECKPOINT is requested before each measurement.

Each measurement runs ``--repeat`` times (default 3), every kind back to back, in reverse order on
every other repeat; records/s is the median run, a ratio the median of the paired per-run ratios
(the machine's load drifts). Every kind also reports its client cost per record: process CPU time
and GC-tracked allocations over the timed span (see ClientCost), each the median over the runs.

Targets (#16), at 1000-record batches, each the lowest of the four cases: store call >= 0.8 of the
raw ceiling, tuned Producer >= 0.8 of the store call, Producer(url) >= 0.7 of the tuned Producer;
and the Producer's single-record p50 <= 2x the raw single-row write's.

Latency: one record at a time, waiting for each acknowledgement (Producer with linger_ms=0, the
store call alone, and raw single-row writes in autocommit, one commit each: an INSERT, one round
trip, and a binary COPY; the baseline is the faster p50 of the two).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa

from oncelog import Producer
from oncelog.aio import Producer as AsyncProducer
from oncelog.embedded import EmbeddedPostgres, default_data_dir
from oncelog.store import cluster, create_engine, migrate
from oncelog.store import log as store_log
from oncelog.store import topics as store_topics
from oncelog.store.engine import database_url, redact
from oncelog.store.records import RecordIn

VALUE_SIZES = (100, 1024)
PARTITION_COUNTS = (1, 8)
BATCH_SIZES = (1, 100, 1000)
#: Records per case (all partitions together), by batch size.
FULL_COUNTS = {1: 3_000, 100: 100_000, 1000: 100_000}
QUICK_COUNTS = {1: 16, 100: 800, 1000: 8_000}
FULL_LATENCY_SAMPLES = 2_000
QUICK_LATENCY_SAMPLES = 20
#: The issue's targets (#16): ratios of records/s at 1000-record batches (at least), and the Producer's
#: single-record p50 as a multiple of the raw single-row write's (at most).
STORE_TARGET = 0.8  # the store call against the raw ceiling
PRODUCER_TARGET = 0.8  # the tuned Producer against the store call
DEFAULTS_TARGET = 0.7  # Producer(url) with nothing set against the tuned Producer
LATENCY_TARGET = 2.0  # Producer p50 at most this many times the raw single-row write's

#: Distinct keys and values cycled through (values are random bytes: nothing compresses).
POOL = 1024
KEY_FORMAT = b"key-%08d"  # 12-byte keys
RAW_PRODUCER_ID = 1_000_000
RAW_TOPIC_ID = 1

RAW_TABLE = "bench_raw.records"
RAW_COLUMNS = '(topic_id, partition, "offset", producer_id, producer_epoch, sequence, key, value, headers, "timestamp")'
RAW_TYPES = ["int4", "int4", "int8", "int8", "int2", "int4", "bytea", "bytea", "jsonb", "timestamptz"]
RAW_DDL = f"""
CREATE SCHEMA bench_raw;
CREATE TABLE {RAW_TABLE} (
    topic_id integer NOT NULL,
    partition integer NOT NULL,
    "offset" bigint NOT NULL,
    producer_id bigint,
    producer_epoch smallint,
    sequence integer,
    key bytea,
    value bytea,
    headers jsonb,
    "timestamp" timestamptz NOT NULL,
    PRIMARY KEY (topic_id, partition, "offset")
);
"""
RAW_COPY = f"COPY {RAW_TABLE} {RAW_COLUMNS} FROM STDIN (FORMAT BINARY)"
RAW_INSERT = f"INSERT INTO {RAW_TABLE} {RAW_COLUMNS} VALUES (%s, %s, %s, %s, %s, %s, %b, %b, NULL, %s)"
# Keys and values as binary arrays, offsets and sequences numbered in the server from the batch's
# first (as the store's produce function numbers them), the constant columns as scalars: the fastest
# INSERT of these rows measured here (1.2x the same with offset and sequence arrays too).
RAW_UNNEST = (
    f"INSERT INTO {RAW_TABLE} {RAW_COLUMNS} "
    "SELECT %(topic_id)b::int4, %(partition)b::int4, %(offset)b::int8 + n - 1, %(producer_id)b::int8, 0::int2, "
    "(%(sequence)b::int8 + n - 1)::int4, k, v, NULL, %(timestamp)b::timestamptz "
    "FROM unnest(%(keys)b::bytea[], %(values)b::bytea[]) WITH ORDINALITY AS t(k, v, n)"
)
#: The two raw ways of writing a batch, by their JSON key, and their names in the report.
RAW_METHODS = {"raw_copy": "binary COPY", "raw_unnest": "INSERT ... unnest"}
#: The raw single-row writes of the latency measurement (the faster p50 is the baseline).
RAW_LATENCY = {"raw": "single-row INSERT", "raw_copy": "single-row binary COPY"}
#: The batch size of the defaults case and of the targets.
DEFAULTS_BATCH = 1000

SERVER_SETTINGS = (
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_sync_method",
    "wal_level",
    "shared_buffers",
    "max_wal_size",
    "checkpoint_timeout",
    "wal_compression",
)


# --- results ------------------------------------------------------------------------------------


@dataclass
class Measurement:
    """One timed run: ``records`` written in ``seconds``."""

    records: int
    seconds: float
    payload_bytes: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / self.seconds / 1e6

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "seconds": round(self.seconds, 6),
            "records_per_s": round(self.records_per_s, 1),
            "mb_per_s": round(self.mb_per_s, 3),
            **self.extra,
        }


@dataclass(frozen=True)
class Config:
    value_size: int
    partitions: int
    batch: int
    per_partition: int

    @property
    def records(self) -> int:
        return self.per_partition * self.partitions

    @property
    def label(self) -> str:
        size = "1 KiB" if self.value_size == 1024 else f"{self.value_size} B"
        return f"{size}, {self.partitions} part, batch {self.batch}"

    @property
    def key(self) -> str:
        return f"{self.value_size}B/{self.partitions}p/b{self.batch}"


def per_partition_count(total: int, batch: int, partitions: int) -> int:
    """Records per partition: the total split evenly, in whole batches (at least one batch)."""
    return max(batch, (total // partitions) // batch * batch)


# --- server and database ------------------------------------------------------------------------


@dataclass
class Target:
    cluster_url: str
    description: str
    stop: Callable[[], object] | None


def resolve_target() -> Target:
    """ONCELOG_DATABASE_URL, else the embedded default cluster (durable), started like the CLI does."""
    external = os.environ.get("ONCELOG_DATABASE_URL")
    if external:
        return Target(external, f"ONCELOG_DATABASE_URL {redact(external)}", None)
    # The CLI's default data dir, durable settings.
    server = EmbeddedPostgres(default_data_dir(os.environ.get("XDG_DATA_HOME")))
    was_running = server.status().running
    url = server.start()
    how = "already running" if was_running else "started for this run, stopped at the end"
    # Stop it again only if this run started it (the CLI leaves a running server alone).
    return Target(url, f"embedded default cluster in {server.data_dir} ({how})", None if was_running else server.stop)


def with_database(url: str, name: str, *, driver: str = "postgresql+psycopg") -> str:
    return database_url(url).set(database=name, drivername=driver).render_as_string(hide_password=False)


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "nproc_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "psycopg": f"{psycopg.__version__} ({psycopg.pq.__impl__}, libpq {psycopg.pq.version()})",
        "sqlalchemy": sa.__version__,
        "platform": platform.platform(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        meminfo = Path("/proc/meminfo").read_text()
        kb = int(next(line.split()[1] for line in meminfo.splitlines() if line.startswith("MemTotal:")))
        info["memory_gib"] = round(kb / 1024 / 1024, 1)
    except (OSError, StopIteration, ValueError):
        info["memory_gib"] = None
    try:
        cpu = Path("/proc/cpuinfo").read_text()
        info["cpu"] = next(line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        info["cpu"] = None
    return info


def code_info() -> dict[str, Any]:
    """Which oncelog was measured: the git commit (and whether the tree had changes) and migration head."""
    info: dict[str, Any] = {"migration_head": migrate.head(), "git": None}
    root = Path(__file__).resolve().parent.parent
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        info["git"] = rev.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    return info


def server_info(conninfo: str) -> dict[str, Any]:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in SERVER_SETTINGS}  # type: ignore[index]
        superuser = conn.execute("SHOW is_superuser").fetchone()[0]  # type: ignore[index]
    return {"version": version, "settings": settings, "superuser": superuser == "on"}


class Bench:
    """The run's database: oncelog migrated to head, plus the raw baseline table."""

    def __init__(self, cluster_url: str, name: str) -> None:
        self.name = name
        self.sa_url = with_database(cluster_url, name)
        self.conninfo = with_database(cluster_url, name, driver="postgresql")
        self.engine = create_engine(self.sa_url, pool_size=12, max_overflow=4)
        migrate.upgrade(self.engine)
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(RAW_DDL)
        self.checkpoint_ok = True
        self._topics = 0

    def reset(self) -> None:
        """Empty both logs and ask for a checkpoint, so every measurement starts alike."""
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {RAW_TABLE}")
            conn.execute("TRUNCATE oncelog.records")
            if self.checkpoint_ok:
                try:
                    conn.execute("CHECKPOINT")
                except psycopg.Error:
                    self.checkpoint_ok = False  # needs superuser or pg_checkpoint: skip

    def new_topic(self, partitions: int) -> tuple[str, int]:
        self._topics += 1
        name = f"bench-{self._topics}"
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            topic_id = store_topics.create_topic(conn, name=name, partitions=partitions)
        return name, topic_id

    def close(self) -> None:
        self.engine.dispose()


# --- data ---------------------------------------------------------------------------------------


class Data:
    """Keys, values and records cycled through by every case of one value size."""

    def __init__(self, value_size: int) -> None:
        self.value_size = value_size
        self.keys = [KEY_FORMAT % i for i in range(POOL)]
        self.values = [os.urandom(value_size) for _ in range(POOL)]
        self.records = [RecordIn(self.values[i], self.keys[i]) for i in range(POOL)]
        self.record_bytes = len(self.keys[0]) + value_size

    def columns(self, first: int, count: int) -> tuple[list[bytes], list[bytes]]:
        """The keys and the values of records ``first`` to ``first + count - 1``."""
        keys, values = self.keys, self.values
        return [keys[i % POOL] for i in range(first, first + count)], [
            values[i % POOL] for i in range(first, first + count)
        ]

    def batches(self, first: int, count: int, batch: int) -> list[list[RecordIn]]:
        return [
            [self.records[i % POOL] for i in range(start, min(start + batch, first + count))]
            for start in range(first, first + count, batch)
        ]


# --- throughput ---------------------------------------------------------------------------------


class ClientCost:
    """What a measurement costs this process: CPU time and garbage collections, from start() to stop().

    CPU: ``time.process_time()``, every thread of the process (the caller's, the Producer's sender thread,
    psycopg and libpq).

    Allocations: CPython (3.11 to 3.13) runs an automatic collection when the GC-tracked objects allocated minus
    those deallocated since the last collection exceed the gen0 threshold (``gc.get_threshold()[0]``, 700 by
    default), whichever generation it then collects. So the collections (counted by a ``gc.callbacks`` hook)
    times that threshold count the GC-tracked objects (class instances, tuples, lists, dicts: containers)
    that were allocated and still alive at the next collection, to within one threshold per collection.
    Objects that reference counting frees before then, and untracked ones (bytes, str, int), are not counted:
    this is the garbage the collector has to trace, the allocation cost that grows with the records in flight.
    """

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.gc_seconds = 0.0
        self.cpu_seconds = 0.0
        self._cpu_started = 0.0
        self._gc_started = 0.0

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        # Collections hold the GIL from start to stop: one at a time, whatever thread triggers them.
        if phase == "start":
            self.collections[info["generation"]] += 1
            self._gc_started = time.perf_counter()
        else:
            self.gc_seconds += time.perf_counter() - self._gc_started

    def start(self) -> None:
        """Start counting (one ClientCost measures one span)."""
        gc.callbacks.append(self._on_gc)
        self._cpu_started = time.process_time()

    def stop(self) -> None:
        """Stop counting: ``cpu_seconds``, ``collections`` and ``gc_seconds`` hold the span's figures."""
        self.cpu_seconds = time.process_time() - self._cpu_started
        gc.callbacks.remove(self._on_gc)

    def per_record(self, records: int) -> dict[str, Any]:
        """The figures a Measurement carries."""
        threshold = gc.get_threshold()[0]
        return {
            "client_cpu_us_per_record": round(self.cpu_seconds / records * 1e6, 3),
            "gc_allocations_per_record": round(sum(self.collections) * threshold / records, 3),
            "gc_collections": list(self.collections),
            "gc_seconds": round(self.gc_seconds, 4),
        }


#: The ClientCost figures of a Measurement, reported as their median over the runs.
COST_FIGURES = ("client_cpu_us_per_record", "gc_allocations_per_record", "gc_seconds")


def run_threads(workers: Sequence[Callable[[threading.Barrier], None]], cost: ClientCost | None = None) -> float:
    """Run each worker in a thread; time from the common start (a barrier) until the last ends. ``cost``
    measures the same span (the workers connect before the barrier: their setup is not counted)."""
    barrier = threading.Barrier(len(workers) + 1)
    errors: list[BaseException] = []

    def wrap(worker: Callable[[threading.Barrier], None]) -> None:
        try:
            worker(barrier)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=wrap, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()
    if cost is not None:
        cost.start()
    started = time.perf_counter()
    try:
        for t in threads:
            t.join()
    finally:
        elapsed = time.perf_counter() - started
        if cost is not None:
            cost.stop()
    if errors:
        raise errors[0]
    return elapsed


@dataclass(frozen=True)
class RawBatch:
    """One batch of raw rows: offsets and sequences from ``first``, one key and value per row."""

    topic_id: int
    partition: int
    first: int
    keys: Sequence[bytes]
    values: Sequence[bytes]
    timestamp: datetime


def raw_copy(conn: psycopg.Connection[Any], batch: RawBatch) -> None:
    """Write ``batch`` with binary COPY (no commit)."""
    b = batch
    with conn.cursor() as cur, cur.copy(RAW_COPY) as copy:
        copy.set_types(RAW_TYPES)
        for i, (key, value) in enumerate(zip(b.keys, b.values, strict=True), b.first):
            copy.write_row((b.topic_id, b.partition, i, RAW_PRODUCER_ID, 0, i, key, value, None, b.timestamp))


def raw_unnest(conn: psycopg.Connection[Any], batch: RawBatch) -> None:
    """Write ``batch``, the same rows as :func:`raw_copy`, with one INSERT ... unnest of binary arrays (no commit)."""
    params = {
        "topic_id": batch.topic_id,
        "partition": batch.partition,
        "offset": batch.first,
        "producer_id": RAW_PRODUCER_ID,
        "sequence": batch.first,
        "timestamp": batch.timestamp,
        "keys": batch.keys,
        "values": batch.values,
    }
    conn.execute(RAW_UNNEST, params, prepare=True)


RAW_WRITERS: dict[str, Callable[[psycopg.Connection[Any], RawBatch], None]] = {
    "raw_copy": raw_copy,
    "raw_unnest": raw_unnest,
}


def raw_throughput(bench: Bench, cfg: Config, data: Data, method: str) -> Measurement:
    """The raw ceiling: ``method`` (a RAW_WRITERS key), one commit per batch, a thread per partition."""
    bench.reset()
    write = RAW_WRITERS[method]

    def writer(partition: int) -> Callable[[threading.Barrier], None]:
        def run(barrier: threading.Barrier) -> None:
            n, batch = cfg.per_partition, cfg.batch
            with psycopg.connect(bench.conninfo) as conn:
                barrier.wait()
                for first in range(0, n, batch):
                    count = min(batch, n - first)
                    keys, values = data.columns(first, count)
                    write(conn, RawBatch(RAW_TOPIC_ID, partition, first, keys, values, datetime.now(UTC)))
                    conn.commit()

        return run

    cost = ClientCost()
    seconds = run_threads([writer(p) for p in range(cfg.partitions)], cost)
    with psycopg.connect(bench.conninfo) as conn:
        written = conn.execute(f"SELECT count(*) FROM {RAW_TABLE}").fetchone()
    if written is None or written[0] != cfg.records:
        raise RuntimeError(f"{cfg.key}: {method} wrote {written} rows, expected {cfg.records}")
    return Measurement(cfg.records, seconds, cfg.records * data.record_bytes, cost.per_record(cfg.records))


def store_writer(
    bench: Bench, topic: str, partition: int, batches: Sequence[list[RecordIn]]
) -> Callable[[threading.Barrier], None]:
    """A thread's work for :func:`run_threads`: ``batches`` into ``partition`` by the store call,
    as one idempotent producer of its own (one connection, autocommit, a call per batch)."""

    def run(barrier: threading.Barrier) -> None:
        with bench.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            ident = store_log.init_producer_id(conn)
            barrier.wait()
            sequence = 0
            for records in batches:
                store_log.produce(
                    conn,
                    topic=topic,
                    partition=partition,
                    records=records,
                    producer_id=ident.producer_id,
                    producer_epoch=ident.epoch,
                    base_sequence=sequence,
                )
                sequence += len(records)

    return run


def store_throughput(bench: Bench, cfg: Config, data: Data) -> Measurement:
    bench.reset()
    topic, _ = bench.new_topic(cfg.partitions)
    batches = data.batches(0, cfg.per_partition, cfg.batch)  # the same list for every partition
    cost = ClientCost()
    seconds = run_threads([store_writer(bench, topic, p, batches) for p in range(cfg.partitions)], cost)
    check_written(bench, topic, cfg)
    return Measurement(cfg.records, seconds, cfg.records * data.record_bytes, cost.per_record(cfg.records))


def producer_throughput(bench: Bench, cfg: Config, data: Data, *, tuned: bool = True, aio: bool = False) -> Measurement:
    """The Producer: tuned to the case's batch size (``tuned``), or ``Producer(url)`` with nothing set;
    with ``aio``, oncelog.aio's Producer, sending from one coroutine on an event loop of its own."""
    bench.reset()
    topic, _ = bench.new_topic(cfg.partitions)
    keys, values, parts, total = data.keys, data.values, cfg.partitions, cfg.records
    settings: dict[str, Any] = (
        {
            "linger_ms": 0 if cfg.batch == 1 else 10_000,  # batches leave when full (or at flush)
            "batch_size": 1 << 30,  # count records, not bytes
            "max_batch_records": cfg.batch,
            "buffer_memory": 64 * 1024 * 1024,
        }
        if tuned
        else {}
    )
    cost = ClientCost()

    def send_all() -> tuple[float, dict[str, float]]:
        with Producer(bench.sa_url, **settings) as producer:
            producer.partitions_for(topic)  # topic metadata cached before the clock starts
            cost.start()
            started = time.perf_counter()
            try:
                # The futures are dropped, as a sender that does not need them drops them: holding 100k
                # of them would make the collector trace the bench's list, not the Producer's garbage.
                for i in range(total):
                    j = i % POOL
                    producer.send(topic, values[j], key=keys[j], partition=i % parts)
                producer.flush()
            finally:
                seconds = time.perf_counter() - started
                cost.stop()
            return seconds, producer.metrics()

    async def send_all_aio() -> tuple[float, dict[str, float]]:
        async with AsyncProducer(bench.sa_url, **settings) as producer:
            await producer.partitions_for(topic)
            cost.start()
            started = time.perf_counter()
            try:
                for i in range(total):
                    j = i % POOL
                    await producer.send(topic, values[j], key=keys[j], partition=i % parts)
                await producer.flush()
            finally:
                seconds = time.perf_counter() - started
                cost.stop()
            return seconds, producer.metrics()

    seconds, metrics = asyncio.run(send_all_aio()) if aio else send_all()
    # Every record acknowledged, none failed, and the log holds exactly them.
    if int(metrics["record_send_total"]) != total or metrics["record_error_total"]:
        raise RuntimeError(f"{cfg.key}: {total} records sent, the Producer's metrics say {metrics}")
    check_written(bench, topic, cfg)
    extra = {
        "batches": int(metrics["batch_send_total"]),
        "records_per_batch_avg": round(metrics["records_per_request_avg"], 1),
        **cost.per_record(total),
    }
    return Measurement(total, seconds, total * data.record_bytes, extra)


def check_written(bench: Bench, topic: str, cfg: Config) -> None:
    with bench.engine.connect() as conn:
        ends = [p.high_watermark for p in store_log.list_offsets(conn, topic=topic)]
    if ends != [cfg.per_partition] * cfg.partitions:
        raise RuntimeError(f"{cfg.key}: expected {cfg.per_partition} records per partition, the log holds {ends}")


# --- latency ------------------------------------------------------------------------------------


def summarize(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {
        "samples": len(ms),
        "p50_ms": round(statistics.median(ms), 4),
        "p99_ms": round(ms[max(0, math.ceil(0.99 * len(ms)) - 1)], 4),
        "max_ms": round(ms[-1], 4),
        "mean_ms": round(statistics.fmean(ms), 4),
    }


def timed_loop(n: int, op: Callable[[int], object], warmup: int = 20) -> list[float]:
    for i in range(warmup):
        op(i)
    samples = []
    for i in range(warmup, warmup + n):
        t = time.perf_counter()
        op(i)
        samples.append(time.perf_counter() - t)
    return samples


def latencies(bench: Bench, n: int, data: Data) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    key, value = data.keys[0], data.values[0]

    bench.reset()
    topic, _ = bench.new_topic(1)
    with Producer(bench.sa_url, linger_ms=0) as producer:
        producer.partitions_for(topic)
        out["producer"] = summarize(
            timed_loop(n, lambda _i: producer.send(topic, value, key=key, partition=0).result(timeout=60))
        )

    bench.reset()
    topic, _ = bench.new_topic(1)
    with bench.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        ident = store_log.init_producer_id(conn)
        record = [RecordIn(value, key)]
        out["store"] = summarize(
            timed_loop(
                n,
                lambda i: store_log.produce(
                    conn,
                    topic=topic,
                    partition=0,
                    records=record,
                    producer_id=ident.producer_id,
                    producer_epoch=ident.epoch,
                    base_sequence=i,
                ),
            )
        )

    bench.reset()
    with psycopg.connect(bench.conninfo, autocommit=True) as pg:

        def insert(i: int) -> None:
            pg.execute(
                RAW_INSERT, (RAW_TOPIC_ID, 0, i, RAW_PRODUCER_ID, 0, i, key, value, datetime.now(UTC)), prepare=True
            )

        def copy(i: int) -> None:
            raw_copy(pg, RawBatch(RAW_TOPIC_ID, 1, i, [key], [value], datetime.now(UTC)))

        out["raw"] = summarize(timed_loop(n, insert))
        out["raw_copy"] = summarize(timed_loop(n, copy))
    return out


# --- the run ------------------------------------------------------------------------------------


def paired(runs: Sequence[Measurement], baselines: Sequence[float]) -> float:
    """The median of the per-run ratios (each run's records/s over its baseline's, measured beside it)."""
    return round(statistics.median(m.records_per_s / b for m, b in zip(runs, baselines, strict=True)), 3)


def median_run(measured: Sequence[Measurement]) -> dict[str, Any]:
    """The median run (by records/s) as a dict, with every run's records/s; the client cost figures are
    each their own median over the runs."""
    ordered = sorted(measured, key=lambda m: m.records_per_s)
    out = {
        **ordered[(len(ordered) - 1) // 2].as_dict(),
        "runs_records_per_s": [round(m.records_per_s, 1) for m in measured],
    }
    for name in COST_FIGURES:
        if all(name in m.extra for m in measured):
            out[name] = round(statistics.median(m.extra[name] for m in measured), 4)
    return out


def ceiling(copy: Sequence[Measurement], unnest: Sequence[Measurement]) -> dict[str, Any]:
    """Each run's raw ceiling, the faster of its two raw writes; which one was faster, and how often."""
    pairs = list(zip(copy, unnest, strict=True))
    runs = [max(c.records_per_s, u.records_per_s) for c, u in pairs]
    faster = ["raw_unnest" if u.records_per_s > c.records_per_s else "raw_copy" for c, u in pairs]
    return {
        "records_per_s": round(statistics.median(runs), 1),
        "runs_records_per_s": [round(r, 1) for r in runs],
        # The method that was faster in most runs (ties: unnest, the one named by the issue).
        "faster": max(RAW_METHODS, key=lambda k: (faster.count(k), k == "raw_unnest")),
        "runs_faster": faster,
        "ratio_unnest_copy": paired(unnest, [c.records_per_s for c in copy]),
    }


def measure_case(bench: Bench, cfg: Config, data: Data, repeat: int) -> dict[str, Any]:
    """Every kind, ``repeat`` times back to back (reversed on every other repeat); each reported by its
    median run, every ratio by the median of its per-run ratios."""
    measure: dict[str, Callable[[], Measurement]] = {
        "raw_copy": lambda: raw_throughput(bench, cfg, data, "raw_copy"),
        "raw_unnest": lambda: raw_throughput(bench, cfg, data, "raw_unnest"),
        "store": lambda: store_throughput(bench, cfg, data),
        "producer": lambda: producer_throughput(bench, cfg, data),
    }
    if cfg.batch == DEFAULTS_BATCH:
        measure["producer_defaults"] = lambda: producer_throughput(bench, cfg, data, tuned=False)
        measure["producer_aio"] = lambda: producer_throughput(bench, cfg, data, aio=True)
    runs: dict[str, list[Measurement]] = {kind: [] for kind in measure}
    for rep in range(repeat):
        for kind in list(measure) if rep % 2 == 0 else list(measure)[::-1]:
            runs[kind].append(measure[kind]())
    case: dict[str, Any] = {
        "key": cfg.key,
        "label": cfg.label,
        "value_size": cfg.value_size,
        "partitions": cfg.partitions,
        "batch": cfg.batch,
        "records": cfg.records,
        "loadavg_1min_after": round(os.getloadavg()[0], 2),
    }
    for kind, measured in runs.items():
        case[kind] = median_run(measured)
    case["ceiling"] = ceiling(runs["raw_copy"], runs["raw_unnest"])
    # Each run measures the raw writes and oncelog back to back: the median of the paired ratios is
    # steadier than a ratio of medians when the machine's load drifts.
    # (A raw method's ratio is 1.00 in the runs it was the faster.)
    for kind, measured in runs.items():
        case[f"ratio_{kind}"] = paired(measured, case["ceiling"]["runs_records_per_s"])
    case["ratio_producer_store"] = paired(runs["producer"], [m.records_per_s for m in runs["store"]])
    if "producer_defaults" in runs:
        defaults = runs["producer_defaults"]
        case["ratio_defaults_tuned"] = paired(defaults, [m.records_per_s for m in runs["producer"]])
        case["ratio_defaults_store"] = paired(defaults, [m.records_per_s for m in runs["store"]])
    if "producer_aio" in runs:
        case["ratio_aio_producer"] = paired(runs["producer_aio"], [m.records_per_s for m in runs["producer"]])
    return case


def target_record(
    what: str, value: float, goal: float, cases: dict[str, float] | None = None, *, at_most: bool = False
) -> dict[str, Any]:
    """One of the issue's targets as the JSON records it: ``value`` (the lowest of ``cases``) held to at least
    ``goal`` (a ratio of rates), or to at most ``goal`` (``at_most``: a latency as a multiple of its baseline)."""
    return {
        "what": what,
        "target": goal,
        "op": "<=" if at_most else ">=",
        "value": value,
        "met": value <= goal if at_most else value >= goal,
        **({"cases": cases} if cases is not None else {}),
    }


def targets(cases: Sequence[dict[str, Any]], latency: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    """The issue's targets, from the 1000-record cases and the latencies."""
    out: dict[str, dict[str, Any]] = {}
    for key, field_, what, goal in (
        ("store_vs_ceiling", "ratio_store", "store call / raw ceiling", STORE_TARGET),
        ("producer_vs_store", "ratio_producer_store", "Producer (tuned) / store call", PRODUCER_TARGET),
        ("defaults_vs_tuned", "ratio_defaults_tuned", "Producer(url) defaults / tuned Producer", DEFAULTS_TARGET),
    ):
        by_case = {c["key"]: c[field_] for c in cases if field_ in c}
        if by_case:
            out[key] = target_record(what, min(by_case.values()), goal, by_case)
    base = min(latency[k]["p50_ms"] for k in RAW_LATENCY)
    out["latency_p50"] = target_record(
        "Producer single-record p50 / raw single-row write p50 (the faster)",
        round(latency["producer"]["p50_ms"] / base, 3),
        LATENCY_TARGET,
        at_most=True,
    )
    return out


def target_lines(targets: dict[str, dict[str, Any]]) -> list[str]:
    """The targets as the benchmarks print them: one line each, with the value, the target and the verdict."""
    lines = []
    for t in targets.values():
        cases = f" [{', '.join(f'{k} {v:.2f}' for k, v in t['cases'].items())}]" if "cases" in t else ""
        verdict = "met" if t["met"] else "not met"
        lines.append(f"- {t['what']}: {t['value']:.2f} (target {t['op']} {t['target']:g}: {verdict}){cases}")
    return lines


def run(quick: bool, repeat: int, only: Sequence[str] = ()) -> dict[str, Any]:
    counts = QUICK_COUNTS if quick else FULL_COUNTS
    started = time.perf_counter()
    machine = machine_info()
    target = resolve_target()
    name = f"oncelog_bench_{uuid.uuid4().hex[:10]}"
    bench: Bench | None = None
    try:
        cluster.create_database(target.cluster_url, name)
        bench = Bench(target.cluster_url, name)
        server = server_info(bench.conninfo)
        server["target"] = target.description
        log(f"server: {target.description}; PostgreSQL {server['version']}; {fmt_settings(server['settings'])}")
        cases = []
        for value_size in VALUE_SIZES:
            data = Data(value_size)
            for partitions in PARTITION_COUNTS:
                for batch in BATCH_SIZES:
                    cfg = Config(value_size, partitions, batch, per_partition_count(counts[batch], batch, partitions))
                    if only and not any(part in cfg.key for part in only):
                        continue
                    case = measure_case(bench, cfg, data, repeat)
                    cases.append(case)
                    log(
                        f"{cfg.label}: raw COPY {case['raw_copy']['records_per_s']:,.0f}/s, "
                        f"unnest {case['raw_unnest']['records_per_s']:,.0f}/s "
                        f"(ceiling {case['ceiling']['records_per_s']:,.0f}/s), "
                        f"store {case['store']['records_per_s']:,.0f}/s ({case['ratio_store']:.2f}), "
                        f"producer {case['producer']['records_per_s']:,.0f}/s ({case['ratio_producer']:.2f})"
                    )
        if not cases:
            raise SystemExit(f"no case matches --only {','.join(only)}")
        latency = latencies(bench, QUICK_LATENCY_SAMPLES if quick else FULL_LATENCY_SAMPLES, Data(100))
        server["checkpoint_before_each_case"] = bench.checkpoint_ok
    finally:
        if bench is not None:
            bench.close()
        cluster.drop_database(target.cluster_url, name)
        if target.stop is not None:
            target.stop()
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    headline_cases = [c for c in cases if c["batch"] == DEFAULTS_BATCH]
    return {
        "benchmark": "produce",
        "quick": quick,
        "repeat": repeat,
        "database": name,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "oncelog": code_info(),
        "server": server,
        "cases": cases,
        "latency": latency,
        # What ClientCost counted with (the allocations per record are collections x gen0 threshold).
        "gc_threshold": list(gc.get_threshold()),
        "headline": {
            "target": STORE_TARGET,
            "cases": len(headline_cases),
            "ratio_store_min": min(c["ratio_store"] for c in headline_cases),
            "ratio_producer_min": min(c["ratio_producer"] for c in headline_cases),
            "targets": targets(headline_cases, latency),
        }
        if headline_cases
        else None,
        "seconds": round(time.perf_counter() - started, 1),
    }


#: The oncelog rows of a throughput case, by their JSON key.
CASE_TITLES = {
    "store": "store.log.produce",
    "producer": "Producer",
    "producer_defaults": "Producer(url), defaults",
    "producer_aio": "oncelog.aio.Producer, tuned",
}
LATENCY_TITLES = {
    "producer": "Producer (linger_ms=0): send + wait for the future",
    "store": "store.log.produce, 1 record, autocommit",
    "raw": "raw: single-row INSERT, autocommit (one round trip + commit)",
    "raw_copy": "raw: single-row binary COPY, autocommit",
}


def fmt_settings(settings: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def log(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


def render(result: dict[str, Any]) -> str:
    m, s = result["machine"], result["server"]
    lines = [
        "# oncelog produce benchmark" + (" (--quick: tiny counts, numbers not meaningful)" if result["quick"] else ""),
        "",
        f"- machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB RAM, {m['platform']}; "
        f"load average {m['loadavg_start'][0]} at start, {m['loadavg_end'][0]} at end",
        f"- Python {m['python']}, psycopg {m['psycopg']}, SQLAlchemy {m['sqlalchemy']}",
        f"- oncelog: git {result['oncelog']['git'] or 'unknown (not a git checkout)'}, "
        f"migrations at {result['oncelog']['migration_head']}",
        f"- server: {s['target']}",
        f"- PostgreSQL {s['version']}: {fmt_settings(s['settings'])}",
        "- each measurement starts from empty tables"
        f"{' after a CHECKPOINT' if s['checkpoint_before_each_case'] else ''}; "
        "raw = the same rows in a plain table with the same columns and primary key, one commit per batch, by "
        "binary COPY and by INSERT ... unnest of binary arrays; the ceiling = the faster of the two in each run; "
        f"records/s: the median of {result['repeat']} run(s); ratio: the median of the per-run ratios "
        "(every kind measured back to back) against that run's ceiling; MB = 10^6 bytes of key + value",
        "",
        "## Throughput",
        "",
        "| case | records | records/s | MB/s | client CPU us/record | GC-tracked allocations/record "
        "| ratio (to the raw ceiling) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in result["cases"]:
        ceil = c["ceiling"]
        for kind, title in (*RAW_METHODS.items(), *CASE_TITLES.items()):
            r = c.get(kind)
            if r is None:
                continue
            cell = f"{c[f'ratio_{kind}']:.2f}"
            if kind in RAW_METHODS:
                cell += f" (the ceiling in {ceil['runs_faster'].count(kind)} of {len(ceil['runs_faster'])} run(s))"
            lines.append(
                f"| {title}, {c['label']} | {c['records']:,} | {r['records_per_s']:,.0f} | {r['mb_per_s']:.1f} "
                f"| {r['client_cpu_us_per_record']:.2f} | {r['gc_allocations_per_record']:.2f} | {cell} |"
            )
    lines += [
        "",
        "Client CPU: process CPU time (every thread) over the timed span, per record. GC-tracked allocations: "
        f"automatic garbage collections in that span x the gen0 threshold ({result['gc_threshold'][0]}), per "
        "record: the container objects still alive at the next collection (bench.produce.ClientCost).",
    ]
    lines += [
        "",
        "## Single-record latency (100 B values, 1 partition, one record in flight)",
        "",
        "| path | samples | p50 ms | p99 ms | max ms | mean ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind, title in LATENCY_TITLES.items():
        r = result["latency"][kind]
        lines.append(
            f"| {title} | {r['samples']} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} "
            f"| {r['max_ms']:.3f} | {r['mean_ms']:.3f} |"
        )
    h = result["headline"]
    lines.append("")
    if h:
        lines.append(f"Targets at {DEFAULTS_BATCH}-record batches (the lowest of the {h['cases']} cases):")
        lines += target_lines(h["targets"])
    lines.append(f"(run took {result['seconds']} s)")
    return "\n".join(lines) + "\n"


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def scratch_database() -> Iterator[tuple[Bench, dict[str, Any]]]:
    """A database of its own on the benchmarks' server (ONCELOG_DATABASE_URL, or the embedded
    default cluster), with its :class:`Bench` and the server's facts; dropped afterwards."""
    target = resolve_target()
    name = f"oncelog_bench_{uuid.uuid4().hex[:10]}"
    cluster.create_database(target.cluster_url, name)
    bench: Bench | None = None
    try:
        bench = Bench(target.cluster_url, name)
        server = server_info(bench.conninfo)
        server["target"] = target.description
        log(f"server: {target.description}; PostgreSQL {server['version']}; {fmt_settings(server['settings'])}")
        yield bench, server
    finally:
        if bench is not None:
            bench.close()
        cluster.drop_database(target.cluster_url, name)
        if target.stop is not None:
            target.stop()


def result_fields(
    benchmark: str, quick: bool, repeat: int, machine: dict[str, Any], server: dict[str, Any]
) -> dict[str, Any]:
    """The fields every benchmark's JSON result starts with (the machine's load average taken now, at the end)."""
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return {
        "benchmark": benchmark,
        "quick": quick,
        "repeat": repeat,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "oncelog": code_info(),
        "server": server,
    }


def titled(title: str, quick: bool, section: list[str]) -> str:
    """A benchmark's markdown: its title (marked when --quick), then its section."""
    if quick:
        title += " (--quick: tiny counts, numbers not meaningful)"
    return "\n".join([title, "", *section])


def bench_parser(prog: str, doc: str, repeat_help: str) -> argparse.ArgumentParser:
    """The options every benchmark takes: --quick, --json PATH and --repeat N."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true", help="tiny record counts (a smoke test, not a measurement)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--repeat", type=int, metavar="N", help=repeat_help)
    return parser


def repeat_count(parser: argparse.ArgumentParser, args: argparse.Namespace, default: int) -> int:
    """--repeat, or ``default`` (1 with --quick); refused below 1."""
    repeat: int = args.repeat if args.repeat is not None else (1 if args.quick else default)
    if repeat < 1:
        parser.error("--repeat must be at least 1")
    return repeat


def emit(result: dict[str, Any], rendered: str, json_path: str | None) -> None:
    """Print the markdown; write the JSON results too when asked."""
    sys.stdout.write(rendered)
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")


def run_main(
    argv: Sequence[str] | None,
    *,
    prog: str,
    doc: str,
    repeat_help: str,
    default_repeat: int,
    run: Callable[[bool, int], dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
) -> int:
    """The command line of a benchmark that takes only the common options: parse them, run with
    --quick and --repeat, print the markdown and write the JSON when asked."""
    parser = bench_parser(prog, doc, repeat_help)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    result = run(args.quick, repeat_count(parser, args, default_repeat))
    emit(result, render(result), args.json)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(
        "bench.produce", __doc__, "runs per measurement, the median reported (default 3; 1 with --quick)"
    )
    parser.add_argument(
        "--only",
        metavar="KEYS",
        help="comma-separated parts of case keys to run, e.g. 'b1000' or '100B/1p/b1000' (default: every case)",
    )
    args = parser.parse_args(argv)
    # On SIGTERM (e.g. a timeout), unwind normally so the run's database is still dropped.
    signal.signal(signal.SIGTERM, _terminate)
    repeat = repeat_count(parser, args, 3)
    only = [part.strip() for part in args.only.split(",") if part.strip()] if args.only else []
    result = run(args.quick, repeat, only)
    emit(result, render(result), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
