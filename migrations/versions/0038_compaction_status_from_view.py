"""compaction_status_v1 reads the compaction_status view; record_bytes_v1, no longer used, is dropped.

Revision ID: 0038
Revises: 0037
Create Date: 2026-11-28

A last reading of the compaction change: ``compaction_status_v1`` wrote out the view's query a
second time; it now checks the ACL and the topic as before and returns the view's rows for the
topic (none for a topic that is not compacted). ``record_bytes_v1`` lost its last caller in 0037
(the byte count is written out in the hot paths, where a function with a pinned search_path
cannot be inlined).

Changed (frozen from store/sql by scripts/freeze_revision.py): -record_bytes_v1(bytea, bytea, jsonb), compaction_status_v1(text).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0038"
down_revision: str | None = "0037"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0038_compaction_status_from_view", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0037."""
    frozen.apply("0038_compaction_status_from_view", "down", schema)
