"""A standalone consumer's offsets in a transaction, as Kafka takes them.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-27

txn_offset_commit_v1 refused every TxnOffsetCommit without a member: a consumer that assigns
itself its partitions (no group membership; Kafka's empty member id and generation -1) could not
commit its offsets in a transaction, which Kafka's coordinator accepts while the group has no
members. It now takes them under the same rule as a standalone OffsetCommit: the group row locked
(created if unknown, as Kafka does), members past their session timeout removed, and
UNKNOWN_MEMBER_ID (OL402) while any member is left, so a member that lost its partitions still
cannot commit without the member checks. Such pending offsets carry member '' and generation -1.
The downgrade restores the function as revision 0026 had it.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0027_standalone_txn_offsets", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0026."""
    frozen.apply("0027_standalone_txn_offsets", "down", schema)
