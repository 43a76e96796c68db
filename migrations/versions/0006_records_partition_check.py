"""Check that records belong to a partition once per statement, not once per row.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21

The foreign key from records to partitions ran its check query for every inserted row: about half
the cost of a 1000-record append (measured). The same guarantee now comes from two statement-level
triggers over transition tables: an insert of any batch is checked with one query, and deleting
partitions (directly, or by cascade from a topic) deletes their records, as the cascade did.
Appends already lock their partition row, so a partition cannot vanish under an append.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Replace the per-row foreign key with statement-level triggers."""
    frozen.apply("0006_records_partition_check", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the foreign key."""
    frozen.apply("0006_records_partition_check", "down", schema)
