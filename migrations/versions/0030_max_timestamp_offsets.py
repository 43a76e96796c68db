"""ListOffsets for the largest timestamp (Kafka's MAX_TIMESTAMP, -3, KIP-734).

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-27

``list_offsets_max_timestamp_v1`` answers, per partition, the data record with the largest
timestamp that a reader of the isolation level could read (issue #19: the broker refused -3 with
INVALID_REQUEST, which Kafka's admin clients ask for with ``OffsetSpec.maxTimestamp()``). Where a
reader of either isolation level stops is written once, ``readable_end_v1``, which
``list_offsets_for_times_v1`` now calls too (its answers unchanged).

Changed (frozen from store/sql by scripts/freeze_revision.py): +list_offsets_max_timestamp_v1(text[], integer[], boolean), +readable_end_v1(integer, integer, bigint, boolean), list_offsets_for_times_v1(text[], integer[], timestamp with time zone[], boolean).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0030_max_timestamp_offsets", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0029."""
    frozen.apply("0030_max_timestamp_offsets", "down", schema)
