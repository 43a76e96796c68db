"""LeaveGroup v3 and later: members leave, or are removed, by member id or group instance id (KIP-345).

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-27

``leave_group_members_v1`` (issue #19: LeaveGroup was served up to v1) removes a batch of
members, each by member id or by group instance id (static members), and rebalances once. A
principal removes the members it joined; the owner and the admin role any, as Kafka's
removeMembersFromConsumerGroup.

Changed (frozen from store/sql by scripts/freeze_revision.py): +leave_group_members_v1(text, text[], text[]).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0032_leave_group_members", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0031."""
    frozen.apply("0032_leave_group_members", "down", schema)
