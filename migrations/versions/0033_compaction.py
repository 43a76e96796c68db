"""Compacted topics: Kafka's cleanup.policy=compact, transaction-aware (issue #22).

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-27

Topics get Kafka's compaction settings (cleanup_policy, min_compaction_lag_ms,
max_compaction_lag_ms, delete_retention_ms, min_cleanable_dirty_ratio, with Kafka's defaults), and
``cleaner_state`` keeps compaction's progress per partition. ``compact_v1`` (admin only) runs one
bounded pass on the dirtiest partition that needs one; ``compaction_status_v1`` reports it. The
insert trigger (``records_insert_check_v2``, replacing ``records_partition_check_v1``) refuses a
record without a key on a compacted topic. ``enforce_retention_v2`` leaves a topic that is only
compacted alone, and now locks a partition row before it counts the bytes leaving the log (so a
compaction pass committed meanwhile is not counted twice) and never moves a log start back.

Changed (frozen from store/sql by scripts/freeze_revision.py): -records_partition_check_v1(), +cleanable_end_v1(integer, integer, bigint, bigint, bigint, timestamp with time zone), +compact_v1(text, integer, boolean), +compaction_status_v1(text), +dirty_ratio_v1(bigint, bigint, bigint, bigint), +ms_before_v1(timestamp with time zone, bigint), +record_bytes_v1(bytea, bytea, jsonb), +records_insert_check_v2(), alter_topic_config_v1(text, jsonb), create_topic_v1(text, integer, jsonb), enforce_retention_v2(integer), topic_config_v1(jsonb), trigger records_insert_check, trigger records_partition_check.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0033_compaction", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0032."""
    frozen.apply("0033_compaction", "down", schema)
