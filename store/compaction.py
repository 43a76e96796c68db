"""Compaction of topics whose cleanup_policy is compact (Kafka's log cleaner): one bounded pass per
call, and each partition's progress.

The rules are ``compact_v2``'s (store/sql/compaction.sql); these functions only call it. Each pass
is meant to be its own database transaction (an autocommit connection): a pass plans its
deletions first, then holds its partition's row lock only while it deletes the planned rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from oncelog.store.errors import mapped_errors


@dataclass(frozen=True, slots=True)
class CompactionPass:
    """What one pass of compaction did in one partition."""

    topic: str
    partition: int
    #: Records read in the dirty section.
    examined: int
    #: Records deleted: superseded, aborted, keyless, and tombstones and markers past their retention.
    removed: int
    #: Bytes (keys, values, headers) of the removed records.
    removed_bytes: int
    #: The partition's dirty ratio before the pass.
    dirty_ratio: float
    #: The end of the partition's clean section after the pass.
    clean_offset: int
    #: Offsets above the clean section (up to the high watermark this pass saw).
    dirty_offsets: int
    #: Whether a pass there now would find more: the pass stopped at its batch, not at the
    #: cleanable end, or tombstones and markers past the delete horizon are left.
    more: bool


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """The passes of one compaction run, with their totals."""

    passes: list[CompactionPass]

    @property
    def examined(self) -> int:
        """Records read in dirty sections."""
        return sum(p.examined for p in self.passes)

    @property
    def removed(self) -> int:
        """Records removed."""
        return sum(p.removed for p in self.passes)

    @property
    def removed_bytes(self) -> int:
        """Bytes of the records removed."""
        return sum(p.removed_bytes for p in self.passes)

    @property
    def partitions(self) -> list[tuple[str, int]]:
        """The partitions compacted, in the order first met."""
        return list(dict.fromkeys((p.topic, p.partition) for p in self.passes))

    def __str__(self) -> str:
        return (
            f"compacted {len(self.partitions)} partition(s) in {len(self.passes)} pass(es): examined "
            f"{self.examined} records, removed {self.removed} ({self.removed_bytes} bytes)"
        )


@dataclass(frozen=True, slots=True)
class PartitionCompaction:
    """One partition's compaction state (``oncelog topics describe``, metrics)."""

    partition: int
    cleanup_policy: str
    log_start_offset: int
    #: The end of the clean section: below it each key has at most one record.
    clean_offset: int
    high_watermark: int
    log_bytes: int
    #: The share of live bytes not yet compacted.
    dirty_ratio: float
    examined_records: int
    removed_records: int
    removed_bytes: int
    cleaned_at: datetime | None


def compact(
    conn: sa.Connection, *, topic: str | None = None, batch: int = 50_000, force: bool = False
) -> CompactionPass | None:
    """One pass on the dirtiest partition that needs one (of ``topic`` if given; with ``force``,
    whatever its dirty ratio); None when none does. UnknownTopicOrPartitionError for an unknown
    topic, ConfigurationError for one that is not compacted."""
    with mapped_errors():
        row = conn.exec_driver_sql(
            "SELECT topic, partition, examined, removed, removed_bytes, dirty_ratio, clean_offset, dirty_offsets, more "
            "FROM compact_v2(%(topic)s, %(batch)s, %(force)s)",
            {"topic": topic, "batch": batch, "force": force},
        ).one_or_none()
    if row is None:
        return None
    return CompactionPass(
        topic=row.topic,
        partition=int(row.partition),
        examined=int(row.examined),
        removed=int(row.removed),
        removed_bytes=int(row.removed_bytes),
        dirty_ratio=float(row.dirty_ratio),
        clean_offset=int(row.clean_offset),
        dirty_offsets=int(row.dirty_offsets),
        more=bool(row.more),
    )


def compaction_status(conn: sa.Connection, *, topic: str) -> list[PartitionCompaction]:
    """Every partition of ``topic``: its clean section, dirty ratio and what compaction removed."""
    with mapped_errors():
        rows = conn.exec_driver_sql("SELECT * FROM compaction_status_v1(%(topic)s)", {"topic": topic}).all()
    return [
        PartitionCompaction(
            partition=int(r.partition),
            cleanup_policy=r.cleanup_policy,
            log_start_offset=int(r.log_start_offset),
            clean_offset=int(r.clean_offset),
            high_watermark=int(r.high_watermark),
            log_bytes=int(r.log_bytes),
            dirty_ratio=float(r.dirty_ratio),
            examined_records=int(r.examined_records),
            removed_records=int(r.removed_records),
            removed_bytes=int(r.removed_bytes),
            cleaned_at=r.cleaned_at,
        )
        for r in rows
    ]
