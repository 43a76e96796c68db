"""Consumer groups and offsets inside transactions (KIP-447).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21

Installs:
  join_group_v1, heartbeat_v1, leave_group_v1   membership; the store computes the assignment
  offset_commit_v1, offset_fetch_v1              plain commits, and fetch with require_stable
  txn_offset_commit_v1                           TxnOffsetCommit: offsets pending in a transaction
  views: group_status, group_offsets, pending_group_offsets

Lock order: the transactions row (transactional calls only), then the group row, then partition
rows. Membership calls take the group row FOR NO KEY UPDATE, which does not block the foreign-key
checks (FOR KEY SHARE) of offset writes, so a commit applying offsets never waits for a heartbeat.

Beyond Kafka: a member may commit offsets (plain or transactional) only for partitions assigned
to it in the generation it names (Kafka's KIP-1287 proposal, UNASSIGNED_PARTITION).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the group protocol."""
    frozen.apply("0004_groups", "up", schema)


def downgrade(schema: str) -> None:
    """Remove the group protocol."""
    frozen.apply("0004_groups", "down", schema)
