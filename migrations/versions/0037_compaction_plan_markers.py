"""Compaction plans its marker and tombstone deletions too, before the lock: no walk along a span under it.

Revision ID: 0037
Revises: 0036
Create Date: 2026-11-28

A review of ``compact_v2`` found that deciding whether a commit marker's transaction still had
records walked the transaction's whole span by primary key, with the partition row locked: a
transaction that wrote one record at the start and one at the end of a busy quarter of an hour
spans millions of other producers' offsets, and every append to the partition waited for the
walk (any client with a transactional id can make such a span). Now the pass's one scan, made
before the lock, finds all of it with a second window, by transaction: a commit marker goes when
no data record of its transaction survives the pass (its records all lie below it, within the
scan); tombstones and abort markers of the horizon's window are planned in the same scan. Under
the lock the pass only deletes the planned offsets. A pass also stands down only when another
pass ran since its plan, not when a log start moved (deletions and bytes already count only from
the log start held under the lock): with a second coordinator or retention running, it stood
down again and again.

Changed (frozen from store/sql by scripts/freeze_revision.py): compact_v2(text, integer, boolean).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0037_compaction_plan_markers", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0036."""
    frozen.apply("0037_compaction_plan_markers", "down", schema)
