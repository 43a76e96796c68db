"""Kafka's DeleteRecords and DeleteGroups, for the admin role.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-27

delete_records_v1(topic, partitions, offsets) moves each partition's log start up to the offset
given (-1: the high watermark; never beyond it, never back), under the partition rows locked in
key order as appends take them, and answers each partition's low watermark; maintenance removes
the records below it, as it does after retention. delete_group_v1(group_id) deletes a group with
no live members and no offsets pending in an open transaction, and its committed offsets, under
its groups row taken FOR UPDATE. Both are for the admin role only (Kafka asks DELETE on the
topic or group, which the store's ACLs do not have).

The live-member check that reset_group_offsets_v1 made is now group_require_no_members_v1, which
both operator calls use (same message, same OL410). The downgrade drops the three new functions
and restores reset_group_offsets_v1 as it was.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0026_delete_records_and_groups", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0025."""
    frozen.apply("0026_delete_records_and_groups", "down", schema)
