"""The journal's guard names the pruning function that exists (expire_txn_history_v2, since 0017).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-25

Changed (frozen from store/sql by scripts/freeze_revision.py): txn_history_guard_v1().
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0018_guard_names_v2", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0017."""
    frozen.apply("0018_guard_names_v2", "down", schema)
