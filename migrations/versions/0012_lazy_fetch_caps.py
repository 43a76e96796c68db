"""fetch_bounds_v1 finds the record cap only when the all-or-none check needs it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-21

A read_committed fetch looked for each partition's record cap (the offset after its
``max_records``-th readable record) with an index scan of its own, before the records were read by
another: every fetch scanned its range twice. The cap only bounds the transactions that the
all-or-none check (consistent_limits_v1) looks at, and that check runs only when an open
transaction holds some requested partition back; so the caps are now found only then. Measured
before: read_committed fetch_many at 0.66 of a raw binary SELECT, read_uncommitted (no cap) 0.70.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Replace fetch_bounds_v1's body (same signature: grants and comment stay)."""
    frozen.apply("0012_lazy_fetch_caps", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the 0008 body."""
    frozen.apply("0012_lazy_fetch_caps", "down", schema)
