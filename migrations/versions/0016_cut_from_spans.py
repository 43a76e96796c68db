"""The all-or-none cut reads where a transaction starts from its span, not from the log.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-21

When an open transaction holds some requested partition back, a read_committed fetch checks the
committed transactions it would return (consistent_limits_v1) and pulls a partition's limit back to
the first record of any that it could return only in part. That first record was found by joining
the partition's whole readable range (from the read's position to its limit) with those
transactions: with nothing torn the plan still read every record in the range. Measured on the
read bench's log (4 partitions of ~50,000 records, one open transaction on partition 0, reading
4 x 125 records from offset 1000): 35 ms per fetch, of which ~20 ms in that join per partition
checked, against ~1.7 ms without the open transaction.

A committed transaction's span (txn_spans, revision 0014) holds its first record per partition:
that is where it starts here unless it began below the read's position (an earlier read returned
its first part), and then its first record from the position on is found by an index scan that
stops at it (the transaction has a record among those this read would return). Same limits, and
the fetch no longer depends on how long the partition is.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Replace consistent_limits_v1's body (same signature: grants and comment stay)."""
    frozen.apply("0016_cut_from_spans", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the body of revision 0014."""
    frozen.apply("0016_cut_from_spans", "down", schema)
