"""The compaction_status view: each compacted partition's clean section, dirty ratio and what was removed.

Revision ID: 0036
Revises: 0035
Create Date: 2026-11-28

For psql and monitoring (issue #22: compaction's figures as metrics), readable by the three roles
and filtered by the reader's ACLs (``describe`` on the topic) like ``partition_offsets``.
``dirty_ratio_v2``, arithmetic over its arguments, is granted to them so the view can call it.
``compaction_status_v1`` checked the ACL even while enforcement was off, so a client without ACLs
was refused; it checks only while enforcement is on, as every other function.

Changed (frozen from store/sql by scripts/freeze_revision.py): compaction_status_v1(text), dirty_ratio_v2(bigint, bigint, bigint, bigint, bigint), view compaction_status.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0036_compaction_status_view", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0035."""
    frozen.apply("0036_compaction_status_view", "down", schema)
