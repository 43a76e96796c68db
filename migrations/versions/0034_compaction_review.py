"""Compaction, after review (issue #22): appends never wait on a pass's scan; exact counts under races.

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-27

``compact_v2`` replaces ``compact_v1``: a pass plans its deletions (the chunk and the scan of the
clean section) before it takes the partition's lock, then deletes the planned rows by primary
key under it, so appends wait for the deletion only; a plan made stale by another pass stands
down. It also reports the clean section's end, probes for young records only as far as it goes
(``cleanable_end_v2``), keeps at most 64 checkpoints, takes a NULL force as false, and counts a
commit marker's transaction as gone once its records are below the log start. ``dirty_ratio_v2``
scales the clean section's bytes once the log start has passed part of it (``clean_start``, a
new column): kept whole, a compact,delete topic read as clean and was never compacted again.

``enforce_retention_v2`` reads a partition's byte count again under its lock before the size
cut (a pass committed meanwhile made it cut too much). ``append_batches_v2`` leaves a request
with a keyless record for a compacted topic to ``produce_v2``, so only that batch is refused,
not the whole request. ``send_v1`` refuses such a record at the send. ``alter_topic_config_v1``
waits for the appends in flight when a topic is compacted, so no keyless record is acknowledged
after it. ``compaction_status_v1`` checks the ACL before the topic exists.

Changed (frozen from store/sql by scripts/freeze_revision.py): -cleanable_end_v1(integer, integer, bigint, bigint, bigint, timestamp with time zone), -compact_v1(text, integer, boolean), -dirty_ratio_v1(bigint, bigint, bigint, bigint), +cleanable_end_v2(integer, integer, bigint, bigint, bigint, bigint, timestamp with time zone), +compact_v2(text, integer, boolean), +dirty_ratio_v2(bigint, bigint, bigint, bigint, bigint), alter_topic_config_v1(text, jsonb), append_batches_v2(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], boolean), compaction_status_v1(text), enforce_retention_v2(integer), send_v1(text, bytea, bytea, jsonb, integer), topic_config_v1(jsonb), view committed_records, grants on cleaner_state.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0034_compaction_review", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0033."""
    frozen.apply("0034_compaction_review", "down", schema)
