"""Writing a DataFrame to a topic exactly once, all or nothing.

Each Spark task sends its rows in a transaction of its own, transactional id ``<job>-<task>``:
a retried or speculative attempt of the same task initialises the same id, which fences the
earlier attempt (the zombie) and aborts its open transaction. A task prepares (flushes and hands
over) its transaction instead of committing it; the driver then commits every task's transaction
in ONE database transaction, together with anything else the job must commit (a pipeline's input
offsets). A job that dies before that commit leaves only open transactions, which the store
aborts (at the next run, or at their timeout): nothing of it is ever visible.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from oncelog.errors import ConfigurationError, InvalidRequestError
from oncelog.store import create_engine, txn
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.types import PreparedTransaction

_JOB_RE = re.compile(r"^[A-Za-z0-9._:-]{1,200}$")

#: Called in each task as ``hook(task_index, attempt_number)`` after its rows are sent and before
#: it prepares: a failure injected here makes Spark retry the task (tests and the demo use it).
TaskHook = Callable[[int, int], None]


@dataclass(frozen=True)
class TaskOutput:
    """What a task reports back to the driver."""

    records: int
    prepared: PreparedTransaction | None


@dataclass
class WriteResult:
    """The outcome of :func:`write`."""

    job_id: str
    records: int = 0
    transactions: list[str] = field(default_factory=list)
    already_committed: bool = False


def _encode(value: Any, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes | bytearray):
        return None if value is None else bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise InvalidRequestError(f"the {what} column must be binary or string, not {type(value).__name__}")


def _task_writer(
    *,
    database_url: str,
    schema: str,
    topic: str,
    job_id: str,
    key_col: str | None,
    value_col: str,
    partition_col: str | None,
    transaction_timeout_ms: int,
    hook: TaskHook | None,
) -> Callable[[int, Iterator[Any]], Iterator[TaskOutput]]:
    def run(index: int, rows: Iterator[Any]) -> Iterator[TaskOutput]:
        from pyspark import TaskContext  # noqa: PLC0415 - imported in the executor's worker

        from oncelog.producer import Producer  # noqa: PLC0415 - imported in the executor's worker

        first = next(rows, None)
        if first is None:
            yield TaskOutput(0, None)
            return
        producer = Producer(
            database_url,
            schema=schema,
            transactional_id=f"{job_id}-{index}",
            transaction_timeout_ms=transaction_timeout_ms,
            linger_ms=5,
            batch_size=1 << 20,
        )
        try:
            # Fences every earlier attempt of this task and aborts its open transaction.
            producer.init_transactions()
            producer.begin_transaction()
            count = 0
            for row in _chain(first, rows):
                producer.send(
                    topic,
                    _encode(row[value_col], "value"),
                    key=_encode(row[key_col], "key") if key_col else None,
                    partition=row[partition_col] if partition_col else None,
                )
                count += 1
            if hook is not None:
                ctx = TaskContext.get()
                hook(index, ctx.attemptNumber() if ctx else 0)
            prepared = producer.prepare_transaction()
        finally:
            producer.close()
        yield TaskOutput(count, prepared)

    return run


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


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
) -> WriteResult:
    """Write ``df``'s rows (``value_col``, optional ``key_col`` and ``partition_col``; binary or
    string) to ``topic``, exactly once and all or nothing.

    With a ``job_id``, running the same job again after it committed writes nothing
    (``already_committed``); after a crash before the commit, it writes everything once.
    ``also_commit(conn)`` runs in the driver's final database transaction (a pipeline commits its
    input offsets there).
    """
    job = job_id or f"spark-{uuid.uuid4()}"
    if not _JOB_RE.match(job):
        raise ConfigurationError("job_id: 1 to 200 of letters, digits, '.', '_', ':', '-'")
    columns = set(df.columns)
    for col in (value_col, key_col, partition_col):
        if col is not None and col not in columns:
            raise ConfigurationError(f"the DataFrame has no column {col!r} (it has {sorted(columns)})")
    engine = create_engine(database_url, schema=schema, poolclass=sa.NullPool)
    try:
        # Exactly this job's task ids: "<job>-<task index>" (a job whose id starts like another's
        # is another job).
        pattern = f"^{re.escape(job)}-[0-9]+$"
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            if txn.committed_transactional_ids(conn, pattern=pattern):
                return WriteResult(job, already_committed=True)
            # A crashed earlier run of this job may have left prepared transactions, possibly more
            # than this run has tasks: abort them all now (their output must never be seen), rather
            # than let them hold the topic's last stable offset until their timeout.
            txn.abort_open_transactions(conn, pattern=pattern)
        selected = df.select(*[c for c in (key_col, value_col, partition_col) if c])
        runner = _task_writer(
            database_url=database_url,
            schema=schema,
            topic=topic,
            job_id=job,
            key_col=key_col,
            value_col=value_col,
            partition_col=partition_col,
            transaction_timeout_ms=transaction_timeout_ms,
            hook=task_hook,
        )
        outputs: list[TaskOutput] = selected.rdd.mapPartitionsWithIndex(runner).collect()
        prepared = [o.prepared for o in outputs if o.prepared is not None]
        # One database transaction commits every task's output (and the caller's extra work): all
        # or nothing. A task attempt that lost a race was fenced and its transaction aborted, so
        # only the identities Spark reports for the successful attempts can commit here.
        with engine.begin() as conn:
            for p in sorted(prepared, key=lambda p: p.transactional_id):
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
        return WriteResult(job, sum(o.records for o in outputs), [p.transactional_id for p in prepared])
    finally:
        engine.dispose()
