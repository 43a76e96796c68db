"""The exactly-once pipeline: committed input from a group's offsets up to fixed bounds, a
transform, the output written, and the input offsets committed in the same database transaction
as the output. Re-running after a crash at any point neither skips nor duplicates."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from oncelog import errors
from oncelog.errors import ConfigurationError
from oncelog.spark.reader import ReadRange, plan_ranges, read_ranges
from oncelog.spark.writer import TaskHook, WriteResult, write
from oncelog.store import create_engine, groups, txn
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.store.errors import mapped_errors

Transform = Callable[[Any], Any]


@dataclass
class PipelineResult:
    """What one run read, wrote and committed."""

    group: str
    input_offsets: int  # offsets consumed from the input (records, markers and aborted records)
    output_records: int
    ranges: list[ReadRange] = field(default_factory=list)
    write: WriteResult | None = None
    #: Wall-clock seconds: ``plan`` (aborting a crashed run's transactions, fixing the bounds),
    #: then the write's phases (:class:`~oncelog.spark.writer.WriteResult`).
    phases: dict[str, float] = field(default_factory=dict)
    #: The run's number, in its transactional ids (``<prefix>-<run>-<task>``).
    run_id: int = 0
    #: The run asked for by its number had committed before: nothing was read or written now.
    already_committed: bool = False


#: How long a run's commit waits for another run of its group to finish committing.
_COMMIT_LOCK_TIMEOUT_MS = 60_000


def transactional_id_prefix(group: str) -> str:
    """The prefix of the transactional ids a pipeline of ``group`` uses (``<prefix>-<run>-<task>``).

    The group enters as a hash: any group name works, and one group's ids never match another's.
    """
    return f"oncelog-pipeline-{hashlib.sha256(group.encode()).hexdigest()[:16]}"


# A lost or refused connection is a retriable DatabaseUnavailableError, as from every client.
@mapped_errors()
def run_pipeline(
    spark: Any,
    database_url: str,
    *,
    input_topics: Iterable[str],
    output_topic: str,
    group: str,
    transform: Transform,
    schema: str = DEFAULT_SCHEMA,
    max_records_per_task: int = 1_000_000,
    transaction_timeout_ms: int = 600_000,
    task_hook: TaskHook | None = None,
    commit_retries: int = 5,
    run_id: int | None = None,
) -> PipelineResult:
    """Run one exactly-once pass of ``transform`` from ``input_topics`` to ``output_topic``.

    ``spark`` is a SparkSession, or a function that makes one: it is then called only when there
    is something to read, so a run with nothing to do starts no Spark.

    The group's committed offsets (waited for while a transaction holds them) start the read; the
    last stable offsets fixed now end it. ``transform(df)`` gets the committed input DataFrame and
    returns one with ``value`` (and optional ``key``, ``partition``) columns. The output and the
    new input offsets commit in one database transaction. The group must have no live members:
    the pipeline commits as a standalone consumer.

    ``run_id`` numbers the run (default: the time in milliseconds); its transactions are named
    with it. A run whose number committed output before is not run again (``already_committed``,
    no Spark started): a retry of run N after a lost report does not take up input that arrived
    since. (The transaction journal keeps every transactional id's last commit past its
    retention. A run that wrote no record leaves no transaction: its retry reads on from the
    group's offsets, as any run.)

    Two runs of the group at once (overlapping schedules) read the same input: the one that
    commits second finds the offsets moved past where it started and commits nothing
    (ConcurrentRunError). Output is written once either way.
    """
    if run_id is not None and (isinstance(run_id, bool) or not isinstance(run_id, int) or run_id < 0):
        raise ConfigurationError(f"run_id must be an integer >= 0, not {run_id!r}")
    run = int(time.time() * 1000) if run_id is None else run_id
    topics = list(dict.fromkeys(input_topics))
    started = time.perf_counter()
    engine = create_engine(database_url, schema=schema, poolclass=sa.NullPool)
    prefix = transactional_id_prefix(group)
    job_id = f"{prefix}-{run}"
    try:
        if run_id is not None:
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                if txn.committed_transactional_ids(conn, pattern=f"^{re.escape(job_id)}-[0-9]+$"):
                    return PipelineResult(
                        group, 0, 0, phases={"plan": time.perf_counter() - started}, run_id=run, already_committed=True
                    )
        # A previous run that died before its commit left open transactions: abort them now
        # rather than at their timeout (their output must never be seen; the run redoes it).
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            txn.abort_open_transactions(conn, pattern=f"^{prefix}-[0-9]+-[0-9]+$")
        ranges = plan_ranges(engine, topics, f"committed:{group}")
        todo = [r for r in ranges if r.end > r.start]
        input_offsets = sum(r.end - r.start for r in todo)
        if not todo:
            return PipelineResult(group, 0, 0, ranges, phases={"plan": time.perf_counter() - started}, run_id=run)
        planned = time.perf_counter() - started
        if callable(spark):  # a factory (a SparkSession is not callable)
            spark = spark()
        source = read_ranges(spark, database_url, todo, schema=schema, max_records_per_task=max_records_per_task)
        output = transform(source)
        offsets = {(r.topic, r.partition): (r.end, "") for r in ranges}
        starts = {(r.topic, r.partition): r.start for r in ranges}

        def commit_offsets(conn: sa.Connection) -> None:
            # Two runs of the group at once (a scheduler that overlapped them) read the same input;
            # both outputs would stand. In the output's own commit, under a lock the group's runs
            # share, the offsets must not have moved past where this run started.
            groups.lock_standalone_commit(conn, group_id=group, timeout_ms=_COMMIT_LOCK_TIMEOUT_MS)
            now = groups.offset_fetch(conn, group_id=group, partitions=list(starts), require_stable=False)
            moved = sorted(k for k, a in now.items() if a.offset is not None and a.offset > starts[k])
            if moved:
                raise errors.ConcurrentRunError(
                    f"another run of group {group!r} committed offsets for {moved[:3]} since this run "
                    "fixed its input; nothing of this run was committed: run it again"
                )
            groups.offset_commit(conn, group_id=group, offsets=offsets)

        result = _write_with_retries(
            output,
            database_url,
            output_topic,
            job_id=job_id,
            schema=schema,
            partition_col="partition" if "partition" in output.columns else None,
            key_col="key" if "key" in output.columns else None,
            transaction_timeout_ms=transaction_timeout_ms,
            task_hook=task_hook,
            also_commit=commit_offsets,
            retries=commit_retries,
        )
        return PipelineResult(
            group, input_offsets, result.records, ranges, result, phases={"plan": planned, **result.phases}, run_id=run
        )
    finally:
        engine.dispose()


def _write_with_retries(output: Any, database_url: str, topic: str, *, retries: int, **kwargs: Any) -> WriteResult:
    """Retry a write that failed retriably (a deadlock with another job's commit, a lost
    connection) under the same job id: if the failed attempt's final commit did land, ``write``
    finds the job committed and does nothing; otherwise the tasks run again, fencing the old ones."""
    attempt = 0
    while True:
        try:
            return write(output, database_url, topic, **kwargs)
        except errors.OncelogError as exc:
            attempt += 1
            if not exc.retriable or attempt > retries:
                raise
            time.sleep(min(0.1 * 2**attempt, 2.0))
