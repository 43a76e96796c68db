"""A transaction's commit in one round trip: every partition's last batches, the consumer offsets and EndTxn (produce_end_txn_v2).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-25

A transactional producer committed each partition's batch as a database transaction of its own
and then EndTxn (with the last batch since 0013): a 4-partition transaction cost 4 round trips and
4 commits. produce_end_txn_v2 takes every batch still queued at commit_transaction, for any
number of partitions, the consumer offsets of send_offsets_to_transaction and EndTxn, and does
all of it in one database transaction, in the documented lock order (the transactions row, the
group, the producer row, every partition in order). produce_end_txn_v1 stays for callers of the
SQL interface.

Changed (frozen from store/sql by scripts/freeze_revision.py): +produce_end_txn_v2(text, bigint, smallint, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], text, text, text, integer, text[], integer[], bigint[], text[]).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0019_one_round_trip_commit", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0018."""
    frozen.apply("0019_one_round_trip_commit", "down", schema)
