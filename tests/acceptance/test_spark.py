"""oncelog.spark against real Spark (local mode, ``local[2,4]``) and a real PostgreSQL.

One SparkSession serves the whole module (the ``spark`` fixture of ``conftest.py``). Every test gets its own
database (``db_url``), so topics and transactional ids never collide between tests.

What is checked:

* ``read_committed``: exactly the committed and plain records, with the documented columns; nothing
  of aborted or open transactions; nothing at or after an open transaction's first offset in its
  partition (the last stable offset), not even plain records; splitting into tasks changes the
  number of Spark partitions, never the rows; under a writer committing 4-partition transactions
  meanwhile, every DataFrame holds each transaction on all 4 partitions or none, although each task
  reads over its own connection (in its own snapshot).
* Repeatability: fixed ranges (``plan_ranges`` once, ``read_ranges`` twice) and an exported snapshot.
* ``write`` (Arrow batches appended by each task in its own transaction, committed by the driver in
  one database transaction): exactly once with a task that fails after appending its rows and is
  retried; ``already_committed`` on re-run; a job that dies after its tasks appended and before the
  driver's commit leaves nothing visible and a re-run commits once; two concurrent attempts of one
  task that both append (what speculation would produce): the later one fences the earlier, only
  one can commit; an attempt fenced in the middle of its appends fails and none of its rows are
  ever read; rows land where oncelog's Producer would put them (partition column, else murmur2 of
  the key, else the task's partition); columns it cannot write are refused up front.
* ``run_pipeline``: exactly-once output and offsets, incremental runs, the last stable offset of
  the input respected, and a crash between the tasks' prepare and the driver's commit.
* ``session`` and ``jdbc_target`` configuration errors and secrets.

Speculative execution cannot be exercised for real here: Spark never launches a speculative copy of
a task on a host that already runs an attempt of it (``TaskSetManager``: ``!hasAttemptOnHost``), and
local mode has one host; a session with ``spark.speculation=true`` and a tiny multiplier/quantile
just waits for the slow attempt (tried: no second attempt is ever launched). The race that
speculation would create is driven directly instead (two attempts of the writer's task code with
the same transactional id, interleaved by hand). Attacks by other principals on a running job:
``test_spark_hostile.py``.
"""

from __future__ import annotations

import base64
import json
import math
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from pyspark.errors import PythonException

import oncelog
import oncelog.spark
from oncelog import Producer, TopicPartition, errors
from oncelog.errors import ConfigurationError, InvalidRequestError, ProducerFencedError
from oncelog.partitioner import partition_for_key
from oncelog.spark import reader as spark_reader
from oncelog.spark.pipeline import transactional_id_prefix
from oncelog.spark.task import TaskPlan, run_task
from oncelog.spark.writer import run_write_tasks
from oncelog.store import groups, log, topics, txn
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.store.records import decode_headers
from tests.support.spark_hooks import FailAttempts, read_log

pytestmark = [pytest.mark.spark]

COLUMNS = ["topic", "partition", "offset", "key", "value", "headers", "timestamp", "producer_id"]
DTYPES = {
    "topic": "string",
    "partition": "int",
    "offset": "bigint",
    "key": "binary",
    "value": "binary",
    "headers": "string",
    "timestamp": "timestamp",
    "producer_id": "bigint",
}


# --- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture
def admin(engine: sa.Engine) -> Iterator[sa.Connection]:
    """An autocommit connection to this test's database."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        yield c


def b(v: Any) -> bytes | None:
    return None if v is None else bytes(v)


def values(df: Any) -> list[str]:
    """The values of a DataFrame's rows, decoded, sorted (duplicates kept)."""
    return sorted(bytes(r.value).decode() for r in df.collect())


def row_tuples(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (r.topic, r.partition, r.offset, b(r.key), b(r.value), r.headers, r.timestamp, r.producer_id) for r in rows
    )


def committed_in_store(conn: sa.Connection, topic: str, partitions: int) -> dict[tuple[int, int], Any]:
    """The committed records of ``topic`` per (partition, offset), read by the store itself
    (``fetch_v3`` in one snapshot): the oracle for what Spark must return."""
    got = log.fetch_many(conn, {(topic, p): 0 for p in range(partitions)}, max_records=1_000_000)
    return {(p, r.offset): r for (_, p), part in got.items() for r in part.records}


def high_watermarks(conn: sa.Connection, topic: str) -> dict[int, int]:
    return {o.partition: o.high_watermark for o in log.list_offsets(conn, topic=topic)}


def send_txn(url: str, tid: str, topic: str, records: list[tuple[int, bytes]], *, commit: bool) -> None:
    """One transaction of ``records`` [(partition, value)]: committed, or flushed (so the records
    are in the log) and aborted."""
    with Producer(url, transactional_id=tid, linger_ms=1) as p:
        p.init_transactions()
        p.begin_transaction()
        for part, value in records:
            p.send(topic, value, partition=part)
        if commit:
            p.commit_transaction()
        else:
            p.flush()
            p.abort_transaction()


def send_plain(url: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    with Producer(url, linger_ms=1) as p:
        for f in [p.send(topic, value, partition=part) for part, value in records]:
            f.result(timeout=30)


def open_txn(url: str, tid: str, topic: str, records: list[tuple[int, bytes]]) -> Producer:
    """A transaction left open (flushed: its records are in the log). The caller ends it."""
    p = Producer(url, transactional_id=tid, linger_ms=1)
    p.init_transactions()
    p.begin_transaction()
    for part, value in records:
        p.send(topic, value, partition=part)
    p.flush()
    return p


def ongoing(conn: sa.Connection, prefix: str) -> list[str]:
    return [
        s.transactional_id
        for s in txn.list_transactions(conn, states=["Ongoing"])
        if s.transactional_id.startswith(prefix)
    ]


# --- 1. read_committed: contents, columns, last stable offset ---------------------------------------


def test_read_committed_excludes_aborted_and_open_transactions(spark: Any, db_url: str, admin: sa.Connection) -> None:
    t = "rc"
    topics.create_topic(admin, name=t, partitions=3)
    hdrs = [("trace", b"abc"), ("trace", None), ("\u00e9t\u00e9", b"\x00\xff")]
    with Producer(db_url, linger_ms=1) as p:  # plain (idempotent, non-transactional) records with key + headers
        p.send(t, b"plain-0a", key=b"k0", partition=0, headers=hdrs).result(timeout=30)
        p.send(t, b"plain-1a", partition=1).result(timeout=30)
    send_txn(db_url, "committed", t, [(0, b"c1-0"), (1, b"c1-1"), (2, b"c1-2")], commit=True)
    send_txn(db_url, "aborted", t, [(0, b"a-0"), (1, b"a-1"), (2, b"a-2")], commit=False)
    send_plain(db_url, t, [(2, b"plain-2a")])
    holder = open_txn(db_url, "open", t, [(0, b"o-0")])
    try:
        # After the open transaction's first offset on partition 0: held back there (even plain
        # records and a later committed transaction); plain records are returned on the other
        # partitions, and the later committed transaction on all of its partitions or on none.
        send_plain(db_url, t, [(0, b"plain-0b"), (1, b"plain-1b")])
        send_txn(db_url, "committed", t, [(0, b"c2-0"), (1, b"c2-1")], commit=True)
        oracle = committed_in_store(admin, t, 3)

        df = oncelog.spark.read_committed(spark, db_url, [t])
        assert df.columns == COLUMNS
        assert dict(df.dtypes) == DTYPES
        rows = df.collect()
        got = {(r.partition, bytes(r.value).decode()) for r in rows}
        assert len(rows) == len(got)
        assert got == {
            (0, "plain-0a"), (0, "c1-0"),
            (1, "plain-1a"), (1, "c1-1"), (1, "plain-1b"),
            (2, "c1-2"), (2, "plain-2a"),
        }  # fmt: skip
        # The last stable offset of partition 0 is the open transaction's first offset.
        lso0 = {o.partition: o.last_stable_offset for o in log.list_offsets(admin, topic=t)}[0]
        assert max(r.offset for r in rows if r.partition == 0) < lso0
        assert high_watermarks(admin, t)[0] > lso0 + 1  # plain-0b and c2-0 are in the log, past the LSO

        # Every column equals what the store itself returns for read_committed.
        assert {(r.partition, r.offset) for r in rows} == set(oracle)
        for r in rows:
            want = oracle[(r.partition, r.offset)]
            assert r.topic == t
            assert b(r.key) == want.key
            assert bytes(r.value) == want.value
            assert r.producer_id == want.producer_id and r.producer_id is not None
            assert r.timestamp.timestamp() == want.timestamp.timestamp()
            stored = None if r.headers is None else json.loads(r.headers)
            assert decode_headers(stored) == want.headers
        first = next(r for r in rows if bytes(r.value) == b"plain-0a")
        assert b(first.key) == b"k0"
        assert json.loads(first.headers) == [
            {"key": "trace", "value": base64.b64encode(b"abc").decode()},
            {"key": "trace", "value": None},
            {"key": "\u00e9t\u00e9", "value": base64.b64encode(b"\x00\xff").decode()},
        ]
        assert next(r for r in rows if bytes(r.value) == b"plain-1a").headers is None
        # The transactional records carry the transactional producer's id, not the plain one's.
        assert first.producer_id != next(r for r in rows if bytes(r.value) == b"c1-0").producer_id
    finally:
        holder.abort_transaction()
        holder.close()

    # Once the open transaction aborted, partition 0 is readable up to its end, without it.
    after = {(r.partition, bytes(r.value).decode()) for r in oncelog.spark.read_committed(spark, db_url, [t]).collect()}
    assert after - got == {(0, "plain-0b"), (0, "c2-0"), (1, "c2-1")}


# --- 2. splitting into tasks ----------------------------------------------------------------------


def test_max_records_per_task_splits_ranges_without_changing_rows(
    spark: Any, db_url: str, engine: sa.Engine, admin: sa.Connection
) -> None:
    t = "split"
    topics.create_topic(admin, name=t, partitions=3)
    for i in range(6):  # partition 0: 6 committed transactions of 3 + 1 aborted of 2, markers between
        send_txn(db_url, "w", t, [(0, f"p0-{i}-{j}".encode()) for j in range(3)], commit=True)
        if i == 2:
            send_txn(db_url, "w", t, [(0, b"x"), (0, b"y")], commit=False)
    send_plain(db_url, t, [(1, f"p1-{j}".encode()) for j in range(7)])  # partition 1: 7 plain; partition 2 empty

    whole = oncelog.spark.read_committed(spark, db_url, [t])
    assert whole.rdd.getNumPartitions() == 2  # one task per non-empty partition
    expected_rows = row_tuples(whole.collect())
    assert len(expected_rows) == 6 * 3 + 7

    ranges = spark_reader.plan_ranges(engine, [t], "earliest")
    hw = high_watermarks(admin, t)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 0, hw[0]), (1, 0, 7), (2, 0, 0)]
    for k in (3, 5):
        df = oncelog.spark.read_committed(spark, db_url, [t], max_records_per_task=k)
        slices = [(r.partition, lo, min(lo + k, r.end)) for r in ranges for lo in range(r.start, r.end, k)]
        assert df.rdd.getNumPartitions() == sum(math.ceil((r.end - r.start) / k) for r in ranges) == len(slices)
        parts = df.rdd.glom().collect()
        # Spark partition i holds exactly the rows of slice i (a slice may be empty: markers, aborted).
        for (partition, lo, hi), rows in zip(slices, parts, strict=True):
            assert all(r.partition == partition and lo <= r.offset < hi for r in rows)
        assert row_tuples([r for rows in parts for r in rows]) == expected_rows

    # A start position per partition; partitions not named start at the log start.
    df = oncelog.spark.read_committed(spark, db_url, [t], {TopicPartition(t, 0): 10}, max_records_per_task=4)
    assert row_tuples(df.collect()) == [r for r in expected_rows if r[1] != 0 or r[2] >= 10]

    # Nothing to read: one task, no rows, the same columns.
    topics.create_topic(admin, name="empty", partitions=2)
    empty = oncelog.spark.read_committed(spark, db_url, ["empty"], max_records_per_task=1)
    assert empty.rdd.getNumPartitions() == 1
    assert empty.columns == COLUMNS and dict(empty.dtypes) == DTYPES
    assert empty.count() == 0

    with pytest.raises(ConfigurationError):
        oncelog.spark.read_committed(spark, db_url, [t], max_records_per_task=0)


def test_a_compacted_topic_reads_as_each_keys_latest_record_across_the_holes(
    spark: Any, db_url: str, admin: sa.Connection
) -> None:
    """Compaction leaves holes in the offsets (issue #22): Spark's offset ranges step over them and
    read exactly what a reader of the compacted topic sees, however the ranges are split."""
    t = "compacted"
    topics.create_topic(admin, name=t, partitions=1, config={"cleanup_policy": "compact"})
    with Producer(db_url) as producer:
        for i in range(60):
            producer.send(t, f"v{i}".encode(), key=f"k{i % 7}".encode(), partition=0)
    with oncelog.Admin(db_url) as ours:
        assert ours.compact(t, force=True).removed == 60 - 7
    expected = [(f"k{i % 7}".encode(), f"v{i}".encode()) for i in range(53, 60)]  # each key's last, by offset
    for per_task in (1_000_000, 4):
        df = oncelog.spark.read_committed(spark, db_url, [t], max_records_per_task=per_task)
        rows = sorted(df.collect(), key=lambda r: r.offset)
        assert [(b(r.key), b(r.value)) for r in rows] == expected
        assert [r.offset for r in rows] == list(range(53, 60))


# --- 3. atomicity across partitions under a concurrent writer ---------------------------------------

CROSS = "cross"
CROSS_PARTITIONS = 4


def aborted_index(k: int) -> bool:
    return k % 7 == 3


class CommittingWriter(threading.Thread):
    """Transactions k = 0, 1, ...: one record ``k:p`` on each of the 4 partitions; every 7th aborted
    (after a flush, so its records are in the log)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.started_committing = threading.Event()
        self.completed = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Producer(self.url, transactional_id="cross-writer", linger_ms=0) as p:
                p.init_transactions()
                k = 0
                while not self.stop.is_set() and k < 100_000:
                    p.begin_transaction()
                    for part in range(CROSS_PARTITIONS):
                        p.send(CROSS, f"{k}:{part}".encode(), partition=part)
                    if aborted_index(k):
                        p.flush()
                        p.abort_transaction()
                    else:
                        p.commit_transaction()
                    k += 1
                    self.completed = k
                    if k >= 10:
                        self.started_committing.set()
        except BaseException as exc:  # reported by the test
            self.error = exc
            self.started_committing.set()


def test_read_committed_is_atomic_across_partitions_under_concurrent_commits(
    spark: Any, db_url: str, engine: sa.Engine, admin: sa.Connection
) -> None:
    topics.create_topic(admin, name=CROSS, partitions=CROSS_PARTITIONS)
    writer = CommittingWriter(db_url)
    writer.start()
    counts = []
    try:
        assert writer.started_committing.wait(60)
        for i in range(10):
            # Half the reads split each partition into many small tasks: more connections, more
            # snapshots taken at different moments, all bounded by the offsets fixed by the driver.
            per_task = 1_000_000
            if i % 2:  # about 4 slices per partition (the writer keeps adding: a few more)
                longest = max(r.end - r.start for r in spark_reader.plan_ranges(engine, [CROSS], "earliest"))
                per_task = max(1, longest // 4)
            rows = oncelog.spark.read_committed(spark, db_url, [CROSS], max_records_per_task=per_task).collect()
            seen: dict[int, list[int]] = {}
            for r in rows:
                k, part = (int(x) for x in bytes(r.value).decode().split(":"))
                assert part == r.partition
                seen.setdefault(k, []).append(part)
            partial = {k: parts for k, parts in seen.items() if sorted(parts) != list(range(CROSS_PARTITIONS))}
            assert not partial, f"read {i}: transactions seen on some partitions only (or twice): {partial}"
            assert not [k for k in seen if aborted_index(k)], f"read {i}: aborted transactions returned"
            # A single writer commits in order, so every read is a prefix of its committed transactions.
            n = max(seen, default=-1) + 1
            assert set(seen) == {k for k in range(n) if not aborted_index(k)}
            counts.append(n)
            assert writer.error is None
    finally:
        writer.stop.set()
        writer.join(60)
    assert writer.error is None
    assert counts == sorted(counts)
    assert len(set(counts)) > 1, f"the writer committed nothing while the reads ran: {counts}"


# --- 4. repeatable reads ----------------------------------------------------------------------------


def test_fixed_ranges_and_exported_snapshot_are_repeatable(
    spark: Any, db_url: str, engine: sa.Engine, admin: sa.Connection
) -> None:
    t = "rep"
    topics.create_topic(admin, name=t, partitions=2)

    def batch(tag: str) -> None:
        send_txn(db_url, "rep-w", t, [(p, f"{tag}-{p}-{j}".encode()) for p in range(2) for j in range(3)], commit=True)
        send_txn(db_url, "rep-w", t, [(0, f"{tag}-aborted".encode())], commit=False)
        send_plain(db_url, t, [(1, f"{tag}-plain".encode())])

    batch("a")
    ranges = spark_reader.plan_ranges(engine, [t], "earliest")
    first = row_tuples(spark_reader.read_ranges(spark, db_url, ranges, max_records_per_task=3).collect())
    batch("b")
    holder = open_txn(db_url, "rep-open", t, [(0, b"open")])  # an open transaction after the bounds
    try:
        second = row_tuples(spark_reader.read_ranges(spark, db_url, ranges).collect())
        assert first == second
        assert len(first) == 2 * 3 + 1
        fresh = values(oncelog.spark.read_committed(spark, db_url, [t]))
        assert len(fresh) == 2 * (2 * 3 + 1)  # the commits in between did land
    finally:
        holder.abort_transaction()
        holder.close()

    # An exported snapshot: every read inside the block sees the data as of the export, though
    # each read_committed fixes new bounds and commits land before, between and after the reads.
    with spark_reader.exported_snapshot(db_url) as snap:
        batch("c")  # committed after the export: invisible inside the block
        in_snap_1 = row_tuples(oncelog.spark.read_committed(spark, db_url, [t], snapshot=snap).collect())
        batch("d")
        in_snap_2 = row_tuples(
            oncelog.spark.read_committed(spark, db_url, [t], snapshot=snap, max_records_per_task=2).collect()
        )
    assert in_snap_1 == in_snap_2
    assert sorted(bytes(r[4]).decode() for r in in_snap_1) == fresh  # as of the export: batches a and b
    assert len(values(oncelog.spark.read_committed(spark, db_url, [t]))) == 4 * (2 * 3 + 1)


# --- 5. write(): exactly once -----------------------------------------------------------------------

OUT = "out"


def make_df(spark: Any, n: int, slices: int, tag: str = "v") -> Any:
    data = [(f"k{i % 5}".encode(), f"{tag}{i}", i % 2) for i in range(n)]
    return spark.createDataFrame(spark.sparkContext.parallelize(data, slices), "key binary, value string, p int")


def test_write_exactly_once_with_a_retried_task(spark: Any, db_url: str, admin: sa.Connection, tmp_path: Path) -> None:
    topics.create_topic(admin, name=OUT, partitions=2)
    df = make_df(spark, 40, 4)
    hook = FailAttempts(task=1, attempts=frozenset({0}), log_path=str(tmp_path / "hook.log"))

    result = oncelog.spark.write(df, db_url, OUT, job_id="job-a", partition_col="p", task_hook=hook)
    calls = read_log(tmp_path / "hook.log")
    assert (1, 0) in calls and (1, 1) in calls  # task 1 failed once and Spark retried it
    assert not result.already_committed
    assert result.records == 40
    assert sorted(result.transactions) == [f"job-a-{i}" for i in range(4)]

    out = oncelog.spark.read_committed(spark, db_url, [OUT]).collect()
    assert sorted(bytes(r.value).decode() for r in out) == sorted(f"v{i}" for i in range(40))
    for r in out:  # key and partition columns honoured
        i = int(bytes(r.value).decode()[1:])
        assert b(r.key) == f"k{i % 5}".encode() and r.partition == i % 2
    # The failed attempt's records did reach the log, and were aborted by the retry's fencing.
    hw = high_watermarks(admin, OUT)
    assert sum(hw.values()) > 40 + 4  # 40 records + commit markers, plus the failed attempt's records
    assert all(
        s.state == "CompleteCommit" for s in txn.list_transactions(admin) if s.transactional_id.startswith("job-a-")
    )

    again = oncelog.spark.write(make_df(spark, 40, 4), db_url, OUT, job_id="job-a", partition_col="p")
    assert again.already_committed and again.records == 0 and again.transactions == []
    assert high_watermarks(admin, OUT) == hw
    assert len(oncelog.spark.read_committed(spark, db_url, [OUT]).collect()) == 40


def driver_commit(conn: sa.Connection, p: Any) -> str:
    """What write()'s driver does with each prepared transaction (EndTxn commit)."""
    return txn.end_txn(
        conn,
        transactional_id=p.transactional_id,
        producer_id=p.producer_id,
        epoch=p.epoch,
        txn_number=p.txn_number,
        commit=True,
    )


def plan_for(db_url: str, topic: str, job_id: str, partitions: int, **kw: Any) -> TaskPlan:
    """The plan write() hands its tasks."""
    return TaskPlan(
        database_url=db_url,
        schema=DEFAULT_SCHEMA,
        topic=topic,
        job_id=job_id,
        num_partitions=partitions,
        transaction_timeout_ms=600_000,
        **kw,
    )


def prepare_without_commit(df: Any, db_url: str, topic: str, job_id: str, partitions: int = 1) -> list[Any]:
    """What write() does up to, not including, the driver's final commit (the driver "crashes"
    there): every task appends its rows and leaves its transaction open."""
    reports = run_write_tasks(df, plan_for(db_url, topic, job_id, partitions))
    return [r.prepared for r in reports if r.prepared is not None]


def test_write_driver_crash_before_commit_then_rerun(spark: Any, db_url: str, admin: sa.Connection) -> None:
    topics.create_topic(admin, name=OUT, partitions=2)
    send_plain(db_url, OUT, [(0, b"before"), (1, b"before")])  # committed output of someone else
    df = make_df(spark, 30, 3)

    prepared = prepare_without_commit(df, db_url, OUT, "job-crash", partitions=2)
    assert sorted(p.transactional_id for p in prepared) == ["job-crash-0", "job-crash-1", "job-crash-2"]
    assert sorted(ongoing(admin, "job-crash-")) == ["job-crash-0", "job-crash-1", "job-crash-2"]
    assert sum(high_watermarks(admin, OUT).values()) == 2 + 30  # the records are in the log ...
    assert values(oncelog.spark.read_committed(spark, db_url, [OUT])) == ["before", "before"]  # ... not visible

    result = oncelog.spark.write(df, db_url, OUT, job_id="job-crash")
    assert not result.already_committed and result.records == 30
    assert values(oncelog.spark.read_committed(spark, db_url, [OUT])) == sorted(
        ["before"] * 2 + [f"v{i}" for i in range(30)]
    )
    assert ongoing(admin, "job-crash-") == []
    # The prepared transactions of the crashed run were fenced: the driver can no longer commit them.
    with pytest.raises(ProducerFencedError):
        driver_commit(admin, prepared[0])
    assert oncelog.spark.write(df, db_url, OUT, job_id="job-crash").already_committed
    assert len(values(oncelog.spark.read_committed(spark, db_url, [OUT]))) == 32


def test_write_job_failing_for_good_leaves_nothing_then_rerun(
    spark: Any, db_url: str, admin: sa.Connection, tmp_path: Path
) -> None:
    topics.create_topic(admin, name=OUT, partitions=1)
    df = make_df(spark, 30, 3)
    hook = FailAttempts(task=2, log_path=str(tmp_path / "hook.log"))  # every attempt of task 2
    with pytest.raises(PythonException, match="InjectedTaskFailure"):
        oncelog.spark.write(df, db_url, OUT, job_id="job-fail", task_hook=hook)
    assert [a for i, a in read_log(tmp_path / "hook.log") if i == 2] == [0, 1, 2, 3]  # local[2,4]: 4 attempts
    assert sum(high_watermarks(admin, OUT).values()) > 0  # tasks did write ...
    assert oncelog.spark.read_committed(spark, db_url, [OUT]).count() == 0  # ... nothing is visible
    # The failed job's driver aborted what its tasks left open: nothing holds the partition's last
    # stable offset back until a re-run or a timeout.
    assert ongoing(admin, "job-fail-") == []
    [offsets] = log.list_offsets(admin, topic=OUT)
    assert offsets.last_stable_offset == offsets.high_watermark

    result = oncelog.spark.write(df, db_url, OUT, job_id="job-fail")
    assert result.records == 30 and not result.already_committed
    assert values(oncelog.spark.read_committed(spark, db_url, [OUT])) == sorted(f"v{i}" for i in range(30))
    assert ongoing(admin, "job-fail-") == []


def test_write_rerun_with_fewer_tasks_after_crash(spark: Any, db_url: str, admin: sa.Connection) -> None:
    """A job that died after its 4 tasks prepared, re-run with the same job id over a DataFrame that
    now has 2 partitions (Spark does not promise the same partitioning across runs: AQE, a changed
    parallelism): tasks 2 and 3 of the crashed run are never fenced by the re-run."""
    topics.create_topic(admin, name=OUT, partitions=1)
    df = make_df(spark, 20, 4)
    prepare_without_commit(df, db_url, OUT, "job-shrink")
    assert len(ongoing(admin, "job-shrink-")) == 4

    result = oncelog.spark.write(df.coalesce(2), db_url, OUT, job_id="job-shrink")
    assert result.records == 20
    # The writer's contract: a job that dies before its commit leaves open transactions "which
    # the store aborts (at the next run, or at their timeout)": this was the next run. Until they
    # are aborted they hold the topic's last stable offset below the committed output.
    assert values(oncelog.spark.read_committed(spark, db_url, [OUT])) == sorted(f"v{i}" for i in range(20))
    assert ongoing(admin, "job-shrink-") == []


def test_write_job_id_that_prefixes_another_job_is_not_already_committed(
    spark: Any, db_url: str, admin: sa.Connection
) -> None:
    topics.create_topic(admin, name=OUT, partitions=1)
    first = oncelog.spark.write(make_df(spark, 4, 2, tag="x"), db_url, OUT, job_id="export-2")
    assert first.records == 4
    # "export" has never run: its transactional ids are export-0, export-1, not export-2-0.
    second = oncelog.spark.write(make_df(spark, 4, 2, tag="y"), db_url, OUT, job_id="export")
    assert not second.already_committed
    assert second.records == 4
    assert values(oncelog.spark.read_committed(spark, db_url, [OUT])) == [f"{c}{i}" for c in "xy" for i in range(4)]


def arrow_rows(values: list[str], per_batch: int) -> list[pa.RecordBatch]:
    """A task's input as mapInArrow hands it over: Arrow batches of value (binary) rows."""
    data = [v.encode() for v in values]
    return [
        pa.RecordBatch.from_pydict({"value": pa.array(data[i : i + per_batch], pa.binary())})
        for i in range(0, len(data), per_batch)
    ]


def test_two_concurrent_attempts_of_one_task_only_one_commits(db_url: str, admin: sa.Connection) -> None:
    """What speculative execution produces: attempt A of task 0 has appended its rows and is slow; a
    copy B of the same task (same transactional id) starts, appends the same rows and reports. B's
    init fences A and aborts A's open transaction (A's rows stay in the log, aborted), so A's
    transaction can never commit; B's commits once."""
    topics.create_topic(admin, name=OUT, partitions=1)
    plan = plan_for(db_url, OUT, "spec", 1)
    rows = [f"r{i}" for i in range(10)]
    a_sent = threading.Event()
    b_done = threading.Event()

    def slow_a(index: int, attempt: int) -> None:
        a_sent.set()
        assert b_done.wait(60)

    a_result: list[Any] = []
    thread = threading.Thread(
        target=lambda: a_result.append(run_task(replace(plan, hook=slow_a), arrow_rows(rows, 4), 0, 0)), daemon=True
    )
    thread.start()
    assert a_sent.wait(60)
    b = run_task(plan, arrow_rows(rows, 4), 0, 1)
    b_done.set()
    thread.join(60)
    [a] = a_result

    assert a.records == b.records == 10 and a.prepared is not None and b.prepared is not None
    assert a.prepared.transactional_id == b.prepared.transactional_id == "spec-0"
    assert a.prepared.epoch < b.prepared.epoch
    with pytest.raises(ProducerFencedError):
        driver_commit(admin, a.prepared)
    assert driver_commit(admin, b.prepared) == "committed"
    got = committed_in_store(admin, OUT, 1)
    assert sorted(r.value.decode() for r in got.values()) == sorted(rows)
    # Both attempts' rows reached the log: A's 10 and the abort marker B's init wrote, then B's 10
    # and its commit marker. Only B's are readable.
    assert sum(high_watermarks(admin, OUT).values()) == 10 + 1 + 10 + 1


def test_a_zombie_attempt_fenced_while_appending_lands_nothing(db_url: str, admin: sa.Connection) -> None:
    """Attempt A appends part of its rows, then stalls (a slow input); attempt B of the same task
    runs whole. A's next append is refused as fenced, so A fails: none of its rows, those appended
    before the fence included, can ever be read."""
    topics.create_topic(admin, name=OUT, partitions=1)
    plan = plan_for(db_url, OUT, "zombie", 1, batch_records=3)
    a_first_sent = threading.Event()
    b_done = threading.Event()
    a_rows = [f"a{i}" for i in range(9)]

    def stalling_input() -> Iterator[pa.RecordBatch]:
        batches = arrow_rows(a_rows, 3)
        yield batches[0]  # 3 rows: one batch of batch_records, appended at once
        yield batches[1]  # asked for only once the first batch is appended
        a_first_sent.set()
        assert b_done.wait(60)
        yield batches[2]

    a_result: list[BaseException] = []

    def attempt_a() -> None:
        try:
            run_task(plan, stalling_input(), 0, 0)
        except BaseException as exc:
            a_result.append(exc)

    thread = threading.Thread(target=attempt_a, daemon=True)
    thread.start()
    assert a_first_sent.wait(60)
    b = run_task(plan, arrow_rows([f"b{i}" for i in range(5)], 2), 0, 1)
    b_done.set()
    thread.join(60)
    assert len(a_result) == 1 and isinstance(a_result[0], ProducerFencedError)
    assert b.prepared is not None
    assert driver_commit(admin, b.prepared) == "committed"
    got = committed_in_store(admin, OUT, 1)
    assert sorted(r.value.decode() for r in got.values()) == [f"b{i}" for i in range(5)]
    aborted = {r.value for r in log.read_log(admin, topics=[OUT]) if r.control_type is None and r.aborted}
    assert aborted == {f"a{i}".encode() for i in range(6)}  # A's first two batches: in the log, aborted


def test_write_places_rows_as_the_producer_does(spark: Any, db_url: str, admin: sa.Connection) -> None:
    """Without a partition column, a keyed row lands where oncelog's Producer (Kafka's murmur2)
    puts its key, and a keyless one on its task's partition; with one, its value wins where it is
    not null. String columns are written as their UTF-8 bytes."""
    for t in ("by-key", "by-col"):
        topics.create_topic(admin, name=t, partitions=5)
    data = [(f"k\u00e9{i}" if i % 4 else None, f"v\u00e9{i}", (i % 5) if i % 3 == 0 else None) for i in range(300)]
    df = spark.createDataFrame(spark.sparkContext.parallelize(data, 3), "k string, v string, p int")
    assert oncelog.spark.write(df, db_url, "by-key", key_col="k", value_col="v").records == 300
    assert oncelog.spark.write(df, db_url, "by-col", key_col="k", value_col="v", partition_col="p").records == 300

    def placed(topic: str) -> dict[str, tuple[int, bytes | None]]:
        got = committed_in_store(admin, topic, 5)
        assert len(got) == 300
        return {r.value.decode(): (partition, r.key) for (partition, _), r in got.items()}

    by_key, by_col = placed("by-key"), placed("by-col")
    for i, (k, v, p) in enumerate(data):
        task = i // 100  # parallelize() cuts 300 rows into 3 slices of 100
        hashed = partition_for_key(k.encode(), 5) if k is not None else task % 5
        assert by_key[v] == (hashed, None if k is None else k.encode())
        assert by_col[v] == (p if p is not None else hashed, None if k is None else k.encode())


def test_write_refuses_columns_it_cannot_write(spark: Any, db_url: str, admin: sa.Connection) -> None:
    topics.create_topic(admin, name=OUT, partitions=1)
    df = spark.createDataFrame([(1, "a", "0", 1.5)], "n int, s string, ps string, f double")
    with pytest.raises(InvalidRequestError, match="value column must be binary or string, not IntegerType"):
        oncelog.spark.write(df, db_url, OUT, key_col=None, value_col="n")
    with pytest.raises(InvalidRequestError, match="key column must be binary or string, not DoubleType"):
        oncelog.spark.write(df, db_url, OUT, key_col="f", value_col="s")
    with pytest.raises(InvalidRequestError, match="partition column must be an integer column"):
        oncelog.spark.write(df, db_url, OUT, key_col=None, value_col="s", partition_col="ps")
    with pytest.raises(ConfigurationError, match="no column 'missing'"):
        oncelog.spark.write(df, db_url, OUT, key_col="missing", value_col="s")
    with pytest.raises(ConfigurationError, match="batch_records"):
        oncelog.spark.write(df, db_url, OUT, key_col=None, value_col="s", batch_records=0)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        oncelog.spark.write(df, db_url, "no-such-topic", key_col=None, value_col="s")
    # Partitions the topic does not have are refused by the store, in the task.
    with pytest.raises(PythonException, match="UnknownTopicOrPartitionError"):
        oncelog.spark.write(df, db_url, OUT, key_col=None, value_col="s", partition_col="n")
    assert oncelog.spark.read_committed(spark, db_url, [OUT]).count() == 0


# --- 6. run_pipeline --------------------------------------------------------------------------------

IN = "pin"
POUT = "pout"
GROUP = "g1"


def shout(df: Any) -> Any:
    from pyspark.sql import functions as F  # noqa: PLC0415 - the optional spark extra

    return df.select(F.col("key"), F.concat(F.lit("T:"), F.col("value").cast("string")).alias("value"))


def group_offsets(conn: sa.Connection, partitions: int) -> dict[int, int | None]:
    got = groups.offset_fetch(conn, group_id=GROUP, partitions=[(IN, p) for p in range(partitions)])
    return {p: got[(IN, p)].offset for p in range(partitions)}


def test_run_pipeline_exactly_once(spark: Any, db_url: str, admin: sa.Connection, tmp_path: Path) -> None:
    topics.create_topic(admin, name=IN, partitions=3)
    topics.create_topic(admin, name=POUT, partitions=2)

    def run(**kw: Any) -> Any:
        return oncelog.spark.run_pipeline(
            spark, db_url, input_topics=[IN], output_topic=POUT, group=GROUP, transform=shout, **kw
        )

    def output() -> list[str]:
        return values(oncelog.spark.read_committed(spark, db_url, [POUT]))

    send_txn(db_url, "in-w", IN, [(0, b"a"), (1, b"b"), (2, b"c")], commit=True)
    send_txn(db_url, "in-w", IN, [(0, b"x"), (1, b"y")], commit=False)
    send_plain(db_url, IN, [(2, b"d")])
    send_txn(db_url, "in-w", IN, [(0, b"e")], commit=True)

    first = run()
    hw = high_watermarks(admin, IN)
    assert first.output_records == 5
    assert first.input_offsets == sum(hw.values())  # records, aborted records and markers consumed
    assert output() == ["T:a", "T:b", "T:c", "T:d", "T:e"]
    assert group_offsets(admin, 3) == hw
    assert [(r.partition, r.end) for r in first.ranges] == sorted(hw.items())

    again = run()
    assert (again.input_offsets, again.output_records) == (0, 0)
    assert output() == ["T:a", "T:b", "T:c", "T:d", "T:e"]

    # New input, with a transaction left open on partition 1: read up to its first offset only.
    send_txn(db_url, "in-w", IN, [(0, b"f"), (1, b"g")], commit=True)
    holder = open_txn(db_url, "in-open", IN, [(1, b"h")])
    send_txn(db_url, "in-w", IN, [(1, b"i")], commit=True)  # after the open one: held back too
    try:
        third = run()
        assert third.output_records == 2
        assert output() == ["T:a", "T:b", "T:c", "T:d", "T:e", "T:f", "T:g"]
        lso = {o.partition: o.last_stable_offset for o in log.list_offsets(admin, topic=IN)}
        assert group_offsets(admin, 3) == lso and lso[1] < high_watermarks(admin, IN)[1]
        holder.commit_transaction()
    finally:
        holder.close()
    fourth = run()
    assert fourth.output_records == 2
    assert output() == ["T:a", "T:b", "T:c", "T:d", "T:e", "T:f", "T:g", "T:h", "T:i"]
    assert group_offsets(admin, 3) == high_watermarks(admin, IN)

    # A Spark job that fails after some tasks appended: task 2 fails on every attempt. local[2]:
    # task 2 only starts once task 0 or 1 has finished, i.e. appended its rows. (A driver that
    # dies before its commit: test_write_driver_crash_before_commit_then_rerun.)
    send_txn(db_url, "in-w", IN, [(0, b"j"), (1, b"k"), (2, b"l")], commit=True)
    offsets_before = group_offsets(admin, 3)
    out_hw_before = sum(high_watermarks(admin, POUT).values())
    hook = FailAttempts(task=2, log_path=str(tmp_path / "hook.log"))
    with pytest.raises(PythonException, match="InjectedTaskFailure"):
        run(task_hook=hook)
    assert {a for i, a in read_log(tmp_path / "hook.log") if i == 2} == {0, 1, 2, 3}
    assert ongoing(admin, transactional_id_prefix(GROUP) + "-") == []  # aborted by the failed job's driver
    assert sum(high_watermarks(admin, POUT).values()) > out_hw_before  # output records are in the log ...
    assert output() == ["T:a", "T:b", "T:c", "T:d", "T:e", "T:f", "T:g", "T:h", "T:i"]  # ... not visible
    assert group_offsets(admin, 3) == offsets_before

    fifth = run()
    assert fifth.output_records == 3
    assert ongoing(admin, transactional_id_prefix(GROUP) + "-") == []
    want = sorted(f"T:{c}" for c in "abcdefghijkl")
    assert output() == want  # every committed input record exactly once
    assert group_offsets(admin, 3) == high_watermarks(admin, IN)
    assert run().output_records == 0
    assert output() == want


def test_run_pipeline_leaves_other_groups_transactions_alone(spark: Any, db_url: str, admin: sa.Connection) -> None:
    """A pipeline run first aborts what a crashed earlier run of ITS group left open. Group "g"'s
    run must not abort the open transaction of a pipeline of group "g-eu" still writing (its
    transactional ids are ``<prefix of g-eu>-<ms>-<task>``)."""
    topics.create_topic(admin, name=IN, partitions=1)
    topics.create_topic(admin, name=POUT, partitions=1)
    send_plain(db_url, IN, [(0, b"a")])
    other_id = transactional_id_prefix("g-eu") + "-1700000000000-0"
    other = open_txn(db_url, other_id, POUT, [(0, b"g-eu output")])
    try:
        result = oncelog.spark.run_pipeline(
            spark, db_url, input_topics=[IN], output_topic=POUT, group="g", transform=shout
        )
        assert result.output_records == 1
        assert ongoing(admin, transactional_id_prefix("g-eu") + "-") == [other_id]
        other.commit_transaction()  # group g-eu's run goes on and commits
    finally:
        other.close()
    assert values(oncelog.spark.read_committed(spark, db_url, [POUT])) == ["T:a", "g-eu output"]


def test_two_runs_of_one_group_at_once_write_once(spark: Any, db_url: str, admin: sa.Connection) -> None:
    """Two runs of one group overlap (a scheduler started the next before the last ended): both
    read the same input. The one that commits second finds the group's offsets moved past where
    it started, commits nothing (ConcurrentRunError), and leaves no transaction open: the output
    holds each input record once."""
    topics.create_topic(admin, name=IN, partitions=2)
    topics.create_topic(admin, name=POUT, partitions=1)
    send_plain(db_url, IN, [(0, b"a"), (1, b"b")])

    def run(transform: Any) -> Any:
        return oncelog.spark.run_pipeline(
            spark, db_url, input_topics=[IN], output_topic=POUT, group=GROUP, transform=transform
        )

    other: list[Any] = []

    def overlapped(df: Any) -> Any:
        # This run has fixed its input; another run of the group runs whole meanwhile.
        other.append(run(shout))
        return shout(df)

    with pytest.raises(errors.ConcurrentRunError, match="run it again"):
        run(overlapped)
    assert other[0].output_records == 2
    assert ongoing(admin, transactional_id_prefix(GROUP) + "-") == []
    assert values(oncelog.spark.read_committed(spark, db_url, [POUT])) == ["T:a", "T:b"]
    assert group_offsets(admin, 2) == high_watermarks(admin, IN)
    assert run(shout).output_records == 0


# --- 7. configuration -------------------------------------------------------------------------------


def test_session_without_jdbc_jar_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError) as err:
        oncelog.spark.session(jdbc_jar="/nonexistent.jar")
    message = str(err.value)
    assert "apt-get install" in message and "libpostgresql-jdbc-java" in message
    assert "ONCELOG_JDBC_JAR" in message and "/nonexistent.jar" in message

    monkeypatch.setenv("ONCELOG_JDBC_JAR", "/nonexistent/from-env.jar")
    with pytest.raises(ConfigurationError, match=r"from-env\.jar"):
        oncelog.spark.session()


def test_jdbc_target_hides_the_password() -> None:
    target = oncelog.spark.jdbc_target("postgresql://alice:s3cr%40t@db.example:6543/logs")
    assert target.url == "jdbc:postgresql://db.example:6543/logs"
    assert target.properties["user"] == "alice"
    assert target.properties["password"] == "s3cr@t"
    assert target.properties["driver"] == "org.postgresql.Driver"
    for shown in (repr(target), str(target), f"{target}", repr([target])):
        assert "s3cr" not in shown
        assert "alice" in shown and "db.example" in shown
    with pytest.raises(ConfigurationError):
        oncelog.spark.jdbc_target("postgresql:///logs")  # no host: Spark's JDBC needs TCP
    # libpq's query parameter form: the password goes in the properties, never in the JDBC URL.
    query = oncelog.spark.jdbc_target("postgresql://alice@db.example/logs?password=s3cr%40t")
    assert query.properties["password"] == "s3cr@t"
    assert "s3cr" not in query.url and "s3cr" not in repr(query)


def test_read_committed_through_a_multi_host_url(spark: Any, db_url: str, admin: sa.Connection) -> None:
    """libpq's multi-host URL, a dead address first: the driver's connection, the exported
    snapshot and every task's JDBC connection (pgjdbc's form, targetServerType=primary) reach
    the server behind the second address."""
    topics.create_topic(admin, name="mh", partitions=2)
    send_txn(db_url, "mh-tx", "mh", [(0, b"one"), (1, b"two")], commit=True)
    real = sa.make_url(db_url)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    auth = real.username + (f":{real.password}" if real.password else "") if real.username else ""
    url = (
        f"postgresql://{auth}@127.0.0.1:{dead},{real.host}:{real.port}/{real.database}?target_session_attrs=read-write"
    )
    assert values(oncelog.spark.read_committed(spark, url, ["mh"])) == ["one", "two"]
