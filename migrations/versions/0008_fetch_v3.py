"""A leaner many-partition fetch: fetch_v3, and fetch_v2 rebuilt on top of it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-21

fetch_v2 repeated the topic name and a kind string on every record row and carried six columns
that are NULL on record rows: on a 500-record read about half the time went into producing and
decoding those (measured: 0.6 of a raw SELECT of the same rows,
fetch_v3 0.8, both as rows of plain tuples). Installs:

  fetch_bounds_v1  phase 1 of a fetch, shared: each partition's bounds and where this read stops
  fetch_v3         the fetch: one row per partition (bounds array), then records keyed by the
                   partition's position in the request
  fetch_v2         same result as before, now a view of fetch_v3 (for clients of the old name)

Both still read every partition in ONE snapshot (a STABLE function sees the snapshot of its
calling statement), so a committed transaction is returned on all of its partitions or on none.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install fetch_bounds_v1 and fetch_v3; rebuild fetch_v2 on fetch_v3."""
    frozen.apply("0008_fetch_v3", "up", schema)


def downgrade(schema: str) -> None:
    """Restore fetch_v2's own implementation, then drop fetch_v3 and fetch_bounds_v1."""
    frozen.apply("0008_fetch_v3", "down", schema)
