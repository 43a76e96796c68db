"""A transaction's appends to different partitions run side by side: they share its transactions row.

Revision ID: 0039
Revises: 0038
Create Date: 2026-11-28

Each transactional append used to hold its transactions row FOR UPDATE until it committed, so a
transaction's appends to four partitions went through the database one after the other, even
from a client that sends them at once (librdkafka sends one Produce per partition). The new
``txn_check_v2`` takes the row FOR SHARE for an append (``produce_v2``, ``produce_batches_v1``)
to a transaction already open, and FOR UPDATE for everything that changes the row, as before:
a commit, an abort, an epoch bump and expiry still wait for every append in flight, and no
append starts while one of them holds the row. ``txn_check_v1`` is ``txn_check_v2`` with the row
always FOR UPDATE, for its other callers.

Changed (frozen from store/sql by scripts/freeze_revision.py): +txn_check_v2(text, bigint, smallint, bigint, boolean, boolean), produce_batches_v1(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[]), produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamp with time zone[], text, bigint), txn_check_v1(text, bigint, smallint, bigint, boolean).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0039"
down_revision: str | None = "0038"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0039_transactional_appends_side_by_side", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0038."""
    frozen.apply("0039_transactional_appends_side_by_side", "down", schema)
