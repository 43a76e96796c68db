"""Compaction at the speed of a DELETE: one window per pass, and deletions planned by primary key.

Revision ID: 0035
Revises: 0034
Create Date: 2026-11-27

``compact_v2`` planned its deletions with a join of the chunk's keys and the clean section, which
PostgreSQL, estimating the ranges from parameters, ran as a nested loop over every pair: 37k
records examined per second where a DELETE of the same rows ran at 990k (bench/compaction.py). A
window over the clean section and the chunk, partitioned by key, finds the same rows in one sort;
the bytes of a record are written out in it, since a function with its own search_path is never
inlined and its call per row was most of what was left; the deleted rows' bytes come from the
plan rather than from the DELETE, and the DELETE joins the planned offsets within their range
(with statistics from when the table was small, ``= ANY (array)`` was planned as a scan of the
whole partition). ``enforce_retention_v2`` writes the byte count out again for the same reason.

Changed (frozen from store/sql by scripts/freeze_revision.py): compact_v2(text, integer, boolean), enforce_retention_v2(integer).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0035_compaction_window", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0034."""
    frozen.apply("0035_compaction_window", "down", schema)
