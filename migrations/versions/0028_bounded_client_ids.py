"""A group member's client id is bounded.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-27

join_group_v2 took any client id and made the member id from it: a client id longer than the 255
characters a member id may have failed the group_members check constraint, which reached the
client as an unmapped integrity error. join_group_v2 now refuses a client id longer than 255
characters (OL000, INVALID_REQUEST), and member ids take the first 200 characters of the client
id before their UUID (group_member_id_v1, written once for both places that make one). The
downgrade restores join_group_v2 as revision 0027 had it and drops group_member_id_v1.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0028_bounded_client_ids", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0027."""
    frozen.apply("0028_bounded_client_ids", "down", schema)
