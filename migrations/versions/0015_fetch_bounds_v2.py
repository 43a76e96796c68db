"""A fetch's bounds in one statement: fetch_bounds_v2 behind fetch_v3, replacing fetch_bounds_v1.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-21

fetch_bounds_v1 looked up each requested partition with two statements of its own (the partition
row, then its open transactions for the last stable offset), assigned array elements one by one and
handed its answer to fetch_v3 as rows to read back; its final query was planned afresh on every
call. fetch_bounds_v2 looks up all partitions in one statement and answers with one row of arrays
(OUT parameters), which fetch_v3 reads into arrays of its own. The all-or-none check that runs when
an open transaction holds a partition back is unchanged. fetch_v3 keeps its result, grants and
comment; fetch_bounds_v1 (internal, fetch_v3 its only caller) is dropped.

Measured on the read bench's log (4 partitions, 125 records each per call, read_committed), calls
timed inside the server (medians of 30 rounds of 200, alternated): the bounds 98 -> 59 us, fetch_v3
586-640 -> 570-622 us, where a raw SELECT of the same rows takes 219-246 us. Most of the rest is
plpgsql's RETURN QUERY storing the rows before returning them (~76 us for 500 rows) and running
four record queries instead of one (~40 us). From a client, per call (~1.5 ms): 15-80 us less.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install fetch_bounds_v2, rebuild fetch_v3 on it, drop fetch_bounds_v1."""
    frozen.apply("0015_fetch_bounds_v2", "up", schema)


def downgrade(schema: str) -> None:
    """Restore fetch_bounds_v1 (owner only, as 0008 made it) and fetch_v3, then drop fetch_bounds_v2."""
    frozen.apply("0015_fetch_bounds_v2", "down", schema)
