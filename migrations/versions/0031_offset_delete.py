"""OffsetDelete: an operator removes a consumer group's committed offsets (Kafka's deleteConsumerGroupOffsets).

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-27

``offset_delete_v1`` (issue #19: OffsetDelete was not served) removes the committed offsets of
the partitions named, except those of topics a live member subscribes to, as Kafka's group
coordinator does; for the admin role only, like the group's other operator changes.

Changed (frozen from store/sql by scripts/freeze_revision.py): +offset_delete_v1(text, text[], integer[]).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0031_offset_delete", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0030."""
    frozen.apply("0031_offset_delete", "down", schema)
