"""A standalone consumer's commit checked in one place.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-27

Revision 0027 wrote the standalone consumer's check (no members, else UNKNOWN_MEMBER_ID) and the
unknown-partition check into txn_offset_commit_v1 beside their twins in offset_commit_v1. Both
functions now call group_standalone_commit_v1 (the group row locked and created if unknown,
expired members removed, OL402 while members remain) and offset_partitions_known_v1 (OL101).
One behaviour changes: a standalone OffsetCommit no longer counts members past their session
timeout, as the transactional one and the offset reset already did not. A standalone
transactional commit records generation -1 whatever generation it named. The downgrade restores
both functions as revision 0028 had them and drops the two helpers.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0029_standalone_commit_once", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0028."""
    frozen.apply("0029_standalone_commit_once", "down", schema)
