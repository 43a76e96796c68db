"""Foundation schema: topics, the log, producers, the transaction journal, groups and offsets.

Revision ID: 0001
Revises:
Create Date: 2026-11-21

Beyond the tables (generated from oncelog.store.schema, then reviewed), this revision installs:
the settings row, the offset commit sequence, and two triggers that make the persisted
transaction state machine and its append-only history impossible to bypass from any client.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Create the foundation tables, sequence, settings row and journal triggers."""
    frozen.apply("0001_foundation", "up", schema)


def downgrade(schema: str) -> None:
    """Remove everything upgrade() created."""
    frozen.apply("0001_foundation", "down", schema)
