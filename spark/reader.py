"""Reading committed records into a DataFrame over JDBC, with bounds fixed by the driver."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from oncelog.errors import ConfigurationError, UnstableOffsetCommitError
from oncelog.spark.jdbc import jdbc_target
from oncelog.store import create_engine, groups, log, spark_sql
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.store.errors import mapped_errors
from oncelog.types import TopicPartition

#: Start positions: "earliest", "committed:<group>", or explicit offsets per partition.
Start = str | Mapping[TopicPartition, int]


@dataclass(frozen=True)
class ReadRange:
    """Records [start, end) of one partition, every one of them decided (end <= its LSO)."""

    topic: str
    partition: int
    start: int
    end: int


def plan_ranges(
    engine: sa.Engine, topics: Iterable[str], start: Start, *, wait_stable_s: float = 60.0
) -> list[ReadRange]:
    """Fix, in one query, the last stable offset of every partition of ``topics`` and the start of
    each read (a group's committed offsets are waited for while a transaction holds them)."""
    names = list(dict.fromkeys(topics))
    if not names:
        raise ConfigurationError("read at least one topic")
    # Autocommit: a transaction past its timeout that holds the group's offsets is aborted here (as
    # a reader) before the bounds are fixed, and that abort must be committed, not rolled back.
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        starts: dict[tuple[str, int], int] = {}
        if isinstance(start, str) and start.startswith("committed:"):
            partitions = [(b.topic or "", b.partition) for b in log.stable_bounds(conn, topics=names)]
            starts = _committed_starts(conn, start.split(":", 1)[1], partitions, wait_stable_s)
        bounds = log.stable_bounds(conn, topics=names)
        if isinstance(start, Mapping):
            starts = {(tp[0], tp[1]): int(off) for tp, off in start.items()}
        elif start != "earliest" and not (isinstance(start, str) and start.startswith("committed:")):
            raise ConfigurationError("start is 'earliest', 'committed:<group>' or {TopicPartition: offset}")
        planned = []
        for b in bounds:
            topic = b.topic or ""
            begin = max(starts.get((topic, b.partition), b.log_start_offset), b.log_start_offset)
            planned.append((topic, b.partition, begin, max(begin, b.last_stable_offset)))
        # A committed transaction spanning these partitions is read on all of them or none.
        limits = log.consistent_limits(conn, planned)
    return [ReadRange(t, p, begin, limits[(t, p)]) for t, p, begin, _ in planned]


def _committed_starts(
    conn: sa.Connection, group: str, partitions: list[tuple[str, int]], wait_stable_s: float
) -> dict[tuple[str, int], int]:
    answers = groups.offset_fetch_stable(conn, group_id=group, partitions=partitions, wait_s=wait_stable_s)
    unstable = [k for k, a in answers.items() if a.error == "unstable_offset_commit"]
    if unstable:
        raise UnstableOffsetCommitError(f"offsets of {unstable} stay pending in an open transaction")
    return {k: a.offset for k, a in answers.items() if a.offset is not None}


def predicates(ranges: Iterable[ReadRange], max_records_per_task: int) -> list[str]:
    """One WHERE clause per Spark task: each partition's range, split into slices of at most
    ``max_records_per_task`` offsets. (JDBC lowerBound/upperBound only set strides and filter
    nothing; explicit predicates give exact ranges.)"""
    out = []
    for r in ranges:
        lo = r.start
        while lo < r.end:
            hi = min(lo + max_records_per_task, r.end)
            out.append(spark_sql.range_predicate(r.topic, r.partition, lo, hi))
            lo = hi
    return out


def read_ranges(
    spark: Any,
    database_url: str,
    ranges: Iterable[ReadRange],
    *,
    schema: str = DEFAULT_SCHEMA,
    max_records_per_task: int = 1_000_000,
    snapshot: str | None = None,
) -> Any:
    """A DataFrame of exactly these committed ranges (see :func:`read_committed`)."""
    if max_records_per_task < 1:
        raise ConfigurationError("max_records_per_task must be at least 1")
    target = jdbc_target(database_url, schema=schema)
    props = dict(target.properties)
    if snapshot is not None:
        props["sessionInitStatement"] = spark_sql.snapshot_init_statement(snapshot)
    # No range to read still needs one task, for an empty DataFrame with the right columns.
    preds = predicates(ranges, max_records_per_task) or [spark_sql.range_predicate("none", 0, 0, 0)]
    return spark.read.jdbc(
        url=target.url, table=spark_sql.committed_records_table(target.schema), predicates=preds, properties=props
    )


# A lost or refused connection is a retriable DatabaseUnavailableError, as from every client.
@mapped_errors()
def read_committed(
    spark: Any,
    database_url: str,
    topics: Iterable[str],
    start: Start = "earliest",
    *,
    schema: str = DEFAULT_SCHEMA,
    max_records_per_task: int = 1_000_000,
    snapshot: str | None = None,
) -> Any:
    """A DataFrame (topic, partition, offset, key, value, headers, timestamp, producer_id) of the
    committed records of ``topics`` from ``start`` up to bounds fixed now, read through JDBC from
    the ``committed_records`` view (never from base tables).

    ``snapshot``: an id from :func:`exported_snapshot`; every task then reads in that one database
    snapshot (for reading several views together).
    """
    engine = create_engine(database_url, schema=schema, poolclass=sa.NullPool)
    try:
        ranges = plan_ranges(engine, topics, start)
    finally:
        engine.dispose()
    return read_ranges(
        spark, database_url, ranges, schema=schema, max_records_per_task=max_records_per_task, snapshot=snapshot
    )


@contextlib.contextmanager
def exported_snapshot(database_url: str, *, schema: str = DEFAULT_SCHEMA) -> Iterator[str]:
    """``with exported_snapshot(url) as snap: read_committed(..., snapshot=snap)``: every task of
    the reads inside the block sees one database snapshot (materialise them inside the block)."""
    engine = create_engine(database_url, schema=schema, poolclass=sa.NullPool)
    try:
        with spark_sql.exported_snapshot(engine) as snapshot:
            yield snapshot
    finally:
        engine.dispose()
