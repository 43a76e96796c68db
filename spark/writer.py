"""Writing a DataFrame to a topic exactly once, all or nothing.

Each Spark task appends its rows in a transaction of its own, transactional id ``<job>-<task>``
(:mod:`oncelog.spark.task`): rows reach the task's Python worker as Arrow batches
(``mapInArrow``), never pickled row by row, and go to the store in batches of many records
through ``produce_v2``, which checks them as it checks every producer's. A retried or speculative
attempt of the same task initialises the same id, which fences the earlier attempt (the zombie)
and aborts its open transaction. A task leaves its transaction open and reports it; the driver
then commits every task's transaction in ONE database transaction, together with anything else
the job must commit (a pipeline's input offsets). Nothing of a job that fails before that commit
is ever visible: when its Spark job fails, the driver aborts the transactions its tasks left open;
when the driver itself dies, they stay open until the next run of the job, or their timeout,
aborts them.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from oncelog.errors import ConfigurationError, InvalidRequestError
from oncelog.spark.task import REPORT_SCHEMA, TaskHook, TaskPlan, TaskReport, arrow_task
from oncelog.store import create_engine, topics, txn
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.store.errors import mapped_errors

__all__ = ["TaskHook", "TaskPlan", "TaskReport", "WriteResult", "run_write_tasks", "write"]

_JOB_RE = re.compile(r"^[A-Za-z0-9._:-]{1,200}$")

#: Spark types a key or value column may have (strings are written as their UTF-8 bytes).
_BYTES_TYPES = ("BinaryType", "StringType")
#: Spark types a partition column may have.
_INTEGER_TYPES = ("ByteType", "ShortType", "IntegerType", "LongType")


@dataclass
class WriteResult:
    """The outcome of :func:`write`.

    ``phases``: wall-clock seconds of the driver's steps: ``prepare`` (the re-run check, aborting
    what a crashed run left open, the topic's partitions), ``tasks`` (the Spark job: reading and
    transforming the rows, appending them) and ``commit`` (the one database transaction).
    ``task_seconds``: the tasks' time summed over tasks: ``input`` (waiting for rows: Spark
    reading and transforming them), ``convert`` (routing them in Python) and ``append`` (the
    store's calls).
    """

    job_id: str
    records: int = 0
    transactions: list[str] = field(default_factory=list)
    already_committed: bool = False
    phases: dict[str, float] = field(default_factory=dict)
    task_seconds: dict[str, float] = field(default_factory=dict)


def _check_columns(df: Any, key_col: str | None, value_col: str, partition_col: str | None) -> None:
    types = {f.name: type(f.dataType).__name__ for f in df.schema.fields}
    for col in (value_col, key_col, partition_col):
        if col is not None and col not in types:
            raise ConfigurationError(f"the DataFrame has no column {col!r} (it has {sorted(types)})")
    for col, what in ((value_col, "value"), (key_col, "key")):
        if col is not None and types[col] not in _BYTES_TYPES:
            raise InvalidRequestError(f"the {what} column must be binary or string, not {types[col]}")
    if partition_col is not None and types[partition_col] not in _INTEGER_TYPES:
        raise InvalidRequestError(f"the partition column must be an integer column, not {types[partition_col]}")


def _rows(df: Any, key_col: str | None, value_col: str, partition_col: str | None) -> Any:
    """The DataFrame the tasks read: ``value`` and, when given, ``key`` as binary (a string column
    as its UTF-8 bytes, cast in the JVM) and ``partition`` as a 64-bit integer."""
    from pyspark.sql import functions as F  # noqa: PLC0415 - the optional spark extra

    cols = [F.col(value_col).cast("binary").alias("value")]
    if key_col is not None:
        cols.append(F.col(key_col).cast("binary").alias("key"))
    if partition_col is not None:
        cols.append(F.col(partition_col).cast("long").alias("partition"))
    return df.select(*cols)


def _abort_quietly(engine: sa.Engine, pattern: str) -> None:
    """Abort the open transactions of a failed job, best effort: the error that failed the job is
    the one to report, whatever goes wrong here (the next run, or the timeout, aborts what is left)."""
    with contextlib.suppress(Exception), engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        txn.abort_open_transactions(conn, pattern=pattern)


def run_write_tasks(
    df: Any, plan: TaskPlan, *, key_col: str | None = "key", value_col: str = "value", partition_col: str | None = None
) -> list[TaskReport]:
    """The Spark job of a write: every task appends its rows in its own transaction and leaves it
    open (:mod:`oncelog.spark.task`); returns what the tasks report. :func:`write` commits them."""
    _check_columns(df, key_col, value_col, partition_col)
    rows = _rows(df, key_col, value_col, partition_col).mapInArrow(arrow_task(plan), REPORT_SCHEMA).collect()
    return [TaskReport.from_row(r) for r in rows]


# A lost or refused connection is a retriable DatabaseUnavailableError, as from every client.
@mapped_errors()
def write(
    df: Any,
    database_url: str,
    topic: str,
    *,
    job_id: str | None = None,
    schema: str = DEFAULT_SCHEMA,
    key_col: str | None = "key",
    value_col: str = "value",
    partition_col: str | None = None,
    transaction_timeout_ms: int = 600_000,
    task_hook: TaskHook | None = None,
    also_commit: Callable[[sa.Connection], None] | None = None,
    batch_records: int = 10_000,
    batch_bytes: int = 8 << 20,
) -> WriteResult:
    """Write ``df``'s rows (``value_col``, optional ``key_col`` and ``partition_col``; binary or
    string, the partition an integer) to ``topic``, exactly once and all or nothing.

    With a ``job_id``, running the same job again after it committed writes nothing
    (``already_committed``); after a crash before the commit, it writes everything once.
    ``also_commit(conn)`` runs in the driver's final database transaction (a pipeline commits its
    input offsets there). A row's partition is its ``partition_col`` value when given and not
    null, else Kafka's murmur2 of its key (as oncelog's Producer places it), else the task's
    (``task index % partitions``). Each task sends at most ``batch_records`` records and about
    ``batch_bytes`` bytes per call of the store.
    """
    job = job_id or f"spark-{uuid.uuid4()}"
    if not _JOB_RE.match(job):
        raise ConfigurationError("job_id: 1 to 200 of letters, digits, '.', '_', ':', '-'")
    _check_columns(df, key_col, value_col, partition_col)
    for name, value in (("batch_records", batch_records), ("batch_bytes", batch_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"{name} must be a positive integer, not {value!r}")
    started = time.perf_counter()
    engine = create_engine(database_url, schema=schema, poolclass=sa.NullPool)
    try:
        # Exactly this job's task ids: "<job>-<task index>" (a job whose id starts like another's
        # is another job).
        pattern = f"^{re.escape(job)}-[0-9]+$"
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            if txn.committed_transactional_ids(conn, pattern=pattern):
                return WriteResult(job, already_committed=True)
            # A crashed earlier run of this job may have left open transactions, possibly more
            # than this run has tasks: abort them all now (their output must never be seen), rather
            # than let them hold the topic's last stable offset until their timeout.
            txn.abort_open_transactions(conn, pattern=pattern)
            num_partitions = topics.topic_metadata(conn, name=topic).partitions
        plan = TaskPlan(
            database_url=database_url,
            schema=schema,
            topic=topic,
            job_id=job,
            num_partitions=num_partitions,
            transaction_timeout_ms=transaction_timeout_ms,
            batch_records=batch_records,
            batch_bytes=batch_bytes,
            hook=task_hook,
        )
        prepared_at = time.perf_counter()
        try:
            reports = run_write_tasks(df, plan, key_col=key_col, value_col=value_col, partition_col=partition_col)
        except BaseException:
            # The Spark job failed (a task failed for good, or it was cancelled): nothing will
            # commit the transactions the other tasks left open, and until they end they hold the
            # topic's last stable offset, so every read_committed reader of those partitions
            # waits. Abort them now rather than at the next run or their timeout.
            _abort_quietly(engine, pattern)
            raise
        tasks_done = time.perf_counter()
        prepared = sorted((r.prepared for r in reports if r.prepared is not None), key=lambda p: p.transactional_id)
        # One database transaction commits every task's output (and the caller's extra work): all
        # or nothing. A task attempt that lost a race was fenced and its transaction aborted, so
        # only the identities Spark reports for the successful attempts can commit here.
        try:
            with engine.begin() as conn:
                for p in prepared:
                    txn.end_txn(
                        conn,
                        transactional_id=p.transactional_id,
                        producer_id=p.producer_id,
                        epoch=p.epoch,
                        txn_number=p.txn_number,
                        commit=True,
                    )
                if also_commit is not None:
                    also_commit(conn)
        except BaseException:
            # Rolled back (or, the connection lost, perhaps committed): the tasks' transactions
            # still open must not hold the topic's last stable offset until their timeout.
            # Committed ones are not open, and are left as they are.
            _abort_quietly(engine, pattern)
            raise
        return WriteResult(
            job,
            sum(r.records for r in reports),
            [p.transactional_id for p in prepared],
            phases={
                "prepare": prepared_at - started,
                "tasks": tasks_done - prepared_at,
                "commit": time.perf_counter() - tasks_done,
            },
            task_seconds={
                "input": sum(r.input_s for r in reports),
                "convert": sum(r.convert_s for r in reports),
                "append": sum(r.append_s for r in reports),
            },
        )
    finally:
        engine.dispose()
