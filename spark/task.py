"""One Spark write task: its rows, as Arrow batches, appended to a topic in ONE open transaction.

The task runs in a Python worker under ``DataFrame.mapInArrow``: rows arrive as Arrow record
batches (columns ``value`` and, when the write has them, ``key`` and ``partition``), never as
pickled Python rows. Each batch is routed to partitions with numpy (a given partition, else
Kafka's murmur2 of the key, else the task's own partition), kept as Arrow arrays per partition,
and sent with ``produce_v2`` in batches of many records: one round trip and one call of the
store's checks (ACLs, record size, the transaction's epoch and number, sequences) per batch.

The transaction is the task's: transactional id ``<job>-<task index>``. Initialising it fences
every earlier attempt of the same task (a retry, a speculative copy) and aborts that attempt's
open transaction, so a zombie attempt's rows can never be committed; the task leaves its own
transaction open and reports its identity to the driver, which commits every task's transaction
in one database transaction (:mod:`oncelog.spark.writer`).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa

from oncelog.errors import ConfigurationError
from oncelog.spark.partitioning import partitions_for_keys
from oncelog.store import create_engine, log, txn
from oncelog.store.records import RecordColumns
from oncelog.types import PreparedTransaction

#: Called in each task as ``hook(task_index, attempt_number)`` after its rows are sent and before
#: it reports its transaction: a failure injected here makes Spark retry the task (tests and the
#: demo use it).
TaskHook = Callable[[int, int], None]

#: Sequences are 31-bit and wrap to 0 (Kafka's rule; produce_v2 applies it too).
_SEQUENCE_MODULUS = 2**31

#: What every task reports: one row (see :class:`TaskReport`), as a Spark DDL schema.
REPORT_SCHEMA = (
    "task int, records bigint, transactional_id string, producer_id bigint, epoch int, txn_number bigint, "
    "input_s double, convert_s double, append_s double"
)


@dataclass(frozen=True)
class TaskPlan:
    """What every task of one write needs (pickled to the executors with the task)."""

    database_url: str = field(repr=False)
    schema: str
    topic: str
    job_id: str
    num_partitions: int
    transaction_timeout_ms: int
    batch_records: int = 10_000
    batch_bytes: int = 8 << 20
    hook: TaskHook | None = None

    def __post_init__(self) -> None:
        if self.num_partitions < 1:
            raise ConfigurationError("the topic has no partitions")
        if self.batch_records < 1 or self.batch_bytes < 1:
            raise ConfigurationError("batch_records and batch_bytes must be at least 1")

    def transactional_id(self, index: int) -> str:
        """The transactional id of task ``index``: ``<job>-<index>``."""
        return f"{self.job_id}-{index}"


@dataclass(frozen=True)
class TaskReport:
    """What a task hands the driver: its open transaction (None when it had no rows), how many
    records it appended, and where its time went (seconds: waiting for input rows, which is
    Spark reading and transforming them; routing them in Python; appending them)."""

    task: int
    records: int
    prepared: PreparedTransaction | None
    input_s: float = 0.0
    convert_s: float = 0.0
    append_s: float = 0.0

    @classmethod
    def from_row(cls, row: Any) -> TaskReport:
        """The report a task sent as a Spark row of :data:`REPORT_SCHEMA`."""
        prepared = None
        if row.txn_number is not None:
            prepared = PreparedTransaction(row.transactional_id, row.producer_id, row.epoch, row.txn_number)
        return cls(row.task, row.records, prepared, row.input_s, row.convert_s, row.append_s)


class _Timer:
    """Seconds spent per phase, measured with perf_counter."""

    def __init__(self) -> None:
        self.seconds = {"input": 0.0, "convert": 0.0, "append": 0.0}
        self._phase = "convert"
        self._since = time.perf_counter()

    def switch(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[self._phase] += now - self._since
        self._phase, self._since = phase, now


class _Appender:
    """The task's transaction: per-partition buffers of Arrow arrays, sent with produce_v2."""

    def __init__(self, conn: sa.Connection, plan: TaskPlan, index: int, timer: _Timer) -> None:
        self._conn = conn
        self._plan = plan
        self._timer = timer
        self.tid = plan.transactional_id(index)
        timer.switch("append")
        # Fences every earlier attempt of this task and aborts its open transaction.
        ident = txn.init_producer_id(
            conn, transactional_id=self.tid, transaction_timeout_ms=plan.transaction_timeout_ms
        )
        timer.switch("convert")
        self.producer_id, self.epoch = ident.producer_id, ident.epoch
        self.txn_number = ident.txn_number + 1  # the transaction this attempt opens
        self.records = 0
        self._sequences: dict[int, int] = {}
        self._chunks: dict[int, list[tuple[Any, Any]]] = {}
        self._rows: dict[int, int] = {}
        self._bytes: dict[int, int] = {}

    def add(self, partition: int, keys: Any, values: Any) -> None:
        """Queue rows for ``partition``; send the partition's rows once they fill a batch."""
        self._chunks.setdefault(partition, []).append((keys, values))
        self._rows[partition] = self._rows.get(partition, 0) + len(values)
        size = values.nbytes + (keys.nbytes if keys is not None else 0)
        self._bytes[partition] = self._bytes.get(partition, 0) + size
        if self._rows[partition] >= self._plan.batch_records or self._bytes[partition] >= self._plan.batch_bytes:
            self._send(partition)
        elif sum(self._bytes.values()) >= 4 * self._plan.batch_bytes:
            # Many partitions each short of a batch: bound the memory the task holds.
            self._send(max(self._bytes, key=lambda p: self._bytes[p]))

    def finish(self, first: int) -> None:
        """Send every partition's remaining rows, from partition ``first`` on (tasks start at
        different partitions, so that two tasks seldom wait for the same partition's lock)."""
        n = self._plan.num_partitions
        for partition in sorted(self._chunks, key=lambda p: (p - first) % n):
            self._send(partition)

    def _send(self, partition: int) -> None:
        import pyarrow as pa  # noqa: PLC0415 - the optional spark extra

        chunks = self._chunks.pop(partition, [])
        self._rows.pop(partition, None)
        self._bytes.pop(partition, None)
        if not chunks:
            return
        values = pa.concat_arrays([v for _, v in chunks])
        keys = pa.concat_arrays([k for k, _ in chunks]) if chunks[0][0] is not None else None
        sizes = _row_sizes(keys, values)
        start = 0
        while start < len(values):
            end = _slice_end(sizes, start, self._plan.batch_records, self._plan.batch_bytes)
            value_list = values.slice(start, end - start).to_pylist()
            key_list = keys.slice(start, end - start).to_pylist() if keys is not None else [None] * (end - start)
            sequence = self._sequences.get(partition, 0)
            self._timer.switch("append")
            log.produce(
                self._conn,
                topic=self._plan.topic,
                partition=partition,
                records=RecordColumns(key_list, value_list),
                producer_id=self.producer_id,
                producer_epoch=self.epoch,
                base_sequence=sequence,
                transactional_id=self.tid,
                txn_number=self.txn_number,
            )
            self._timer.switch("convert")
            self._sequences[partition] = (sequence + end - start) % _SEQUENCE_MODULUS
            self.records += end - start
            start = end


def _row_sizes(keys: Any, values: Any) -> npt.NDArray[np.int64]:
    """Bytes of each row (key + value), as the batch limit counts them."""
    import pyarrow.compute as pc  # noqa: PLC0415 - the optional spark extra

    sizes: npt.NDArray[np.int64] = pc.fill_null(pc.binary_length(values), 0).to_numpy().astype(np.int64)
    if keys is not None:
        sizes += pc.fill_null(pc.binary_length(keys), 0).to_numpy().astype(np.int64)
    return sizes


def _slice_end(sizes: npt.NDArray[np.int64], start: int, max_records: int, max_bytes: int) -> int:
    """The end of the batch that starts at ``start``: at most ``max_records`` rows and
    ``max_bytes`` bytes, and at least one row."""
    end = min(len(sizes), start + max_records)
    cumulative = np.cumsum(sizes[start:end])
    fits = int(np.searchsorted(cumulative, max_bytes, side="right"))
    return start + max(1, min(fits, end - start))


def route(batch: Any, num_partitions: int, task_index: int) -> npt.NDArray[np.int64]:
    """The partition of each row of ``batch``: its ``partition`` column where given (not null),
    else Kafka's murmur2 of its ``key`` (where oncelog's Producer would put it), else, for a row
    with neither, the task's own partition (``task_index % num_partitions``: keyless rows are
    spread by task)."""
    import pyarrow.compute as pc  # noqa: PLC0415 - the optional spark extra

    n = batch.num_rows
    names = batch.schema.names
    parts = np.full(n, task_index % num_partitions, dtype=np.int64)
    todo = np.ones(n, dtype=bool)
    if "partition" in names:
        given = batch.column("partition")
        todo = ~given.is_valid().to_numpy(zero_copy_only=False)
        parts = np.where(todo, parts, pc.fill_null(given, 0).to_numpy(zero_copy_only=False).astype(np.int64))
    if "key" in names and todo.any():
        keys = batch.column("key")
        hashed = todo & keys.is_valid().to_numpy(zero_copy_only=False)
        if hashed.any():
            rows = np.flatnonzero(hashed)
            parts[rows] = partitions_for_keys(keys.take(rows), num_partitions)
    return parts


def run_task(plan: TaskPlan, batches: Iterable[Any], index: int, attempt: int) -> TaskReport:
    """Append the rows of ``batches`` (Arrow record batches) as task ``index``, attempt
    ``attempt``: initialise the task's transactional id (fencing earlier attempts), send every row
    in the task's transaction, run the hook, and report the still open transaction."""
    timer = _Timer()
    engine = create_engine(plan.database_url, schema=plan.schema, poolclass=sa.NullPool)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            appender = _Appender(conn, plan, index, timer)
            rows = iter(batches)
            while True:
                timer.switch("input")
                batch = next(rows, None)
                timer.switch("convert")
                if batch is None:
                    break
                _add_batch(appender, batch, plan.num_partitions, index)
            appender.finish(index % plan.num_partitions)
    finally:
        engine.dispose()
    if plan.hook is not None:
        plan.hook(index, attempt)
    timer.switch("convert")
    prepared = None
    if appender.records:
        prepared = PreparedTransaction(appender.tid, appender.producer_id, appender.epoch, appender.txn_number)
    s = timer.seconds
    return TaskReport(index, appender.records, prepared, s["input"], s["convert"], s["append"])


def _add_batch(appender: _Appender, batch: Any, num_partitions: int, index: int) -> None:
    """Route one batch's rows and queue them per partition (one gather per partition; none when
    the whole batch goes to one partition, the usual case for a DataFrame split by partition)."""
    import pyarrow as pa  # noqa: PLC0415 - the optional spark extra

    if batch.num_rows == 0:
        return
    parts = route(batch, num_partitions, index)
    has_key = "key" in batch.schema.names
    keys, values = (batch.column("key") if has_key else None), batch.column("value")
    if (parts == parts[0]).all():
        appender.add(int(parts[0]), keys, values)
        return
    order = np.argsort(parts, kind="stable")  # stable: a partition's rows keep the task's order
    sorted_parts = parts[order]
    bounds = [0, *(np.flatnonzero(np.diff(sorted_parts)) + 1).tolist(), len(order)]
    for lo, hi in itertools.pairwise(bounds):
        take = pa.array(order[lo:hi])
        appender.add(int(sorted_parts[lo]), keys.take(take) if keys is not None else None, values.take(take))


def report_batch(report: TaskReport) -> Any:
    """``report`` as the one-row Arrow record batch of :data:`REPORT_SCHEMA`."""
    import pyarrow as pa  # noqa: PLC0415 - the optional spark extra

    p = report.prepared
    return pa.RecordBatch.from_arrays(
        [
            pa.array([report.task], pa.int32()),
            pa.array([report.records], pa.int64()),
            pa.array([p.transactional_id if p else None], pa.string()),
            pa.array([p.producer_id if p else None], pa.int64()),
            pa.array([p.epoch if p else None], pa.int32()),
            pa.array([p.txn_number if p else None], pa.int64()),
            pa.array([report.input_s], pa.float64()),
            pa.array([report.convert_s], pa.float64()),
            pa.array([report.append_s], pa.float64()),
        ],
        names=[
            "task",
            "records",
            "transactional_id",
            "producer_id",
            "epoch",
            "txn_number",
            "input_s",
            "convert_s",
            "append_s",
        ],
    )


def arrow_task(plan: TaskPlan) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function ``mapInArrow`` runs in every task (a module-level function with the plan
    bound, so cloudpickle ships it by reference)."""
    return functools.partial(_spark_task, plan)


def _spark_task(plan: TaskPlan, batches: Iterator[Any]) -> Iterator[Any]:
    from pyspark import TaskContext  # noqa: PLC0415 - imported in the executor's worker

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("the write task runs inside a Spark task only")
    yield report_batch(run_task(plan, batches, ctx.partitionId(), ctx.attemptNumber()))
