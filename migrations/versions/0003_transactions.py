"""Transactions: the coordinator in SQL, zombie fencing, read_committed.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21

Installs:
  init_transactional_producer_id_v1  InitProducerId with a transactional id (fencing, KIP-360)
  add_partitions_to_txn_v1           AddPartitionsToTxn
  produce_v2                         Produce, idempotent or transactional (replaces produce_v1)
  end_txn_v1                         EndTxn: commit or abort in one database transaction
  abort_transaction_v1               an operator's abort (updates the coordinator state too)
  expire_transactions_v1             maintenance: time out transactions, expire transactional ids
  fetch_v2                           Fetch of many partitions in ONE snapshot, read_committed or not
  views: partition_offsets, committed_records, transaction_status

Lock order (everywhere): the transactions row of a transactional id, then the producer row, then
partition rows in (topic_id, partition) order, then sequence-state rows. A commit or abort holds
the transactions row FOR UPDATE while it writes its markers, so no append of that producer, and
no epoch bump, can interleave with it.

Every transaction is named on every call by (producer id, epoch, txn_number): a delayed call from
transaction N can never open, commit or abort transaction N+1.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Flag aborted records, install the coordinator, and replace produce_v1 with produce_v2."""
    frozen.apply("0003_transactions", "up", schema)


def downgrade(schema: str) -> None:
    """Remove the coordinator and restore produce_v1."""
    frozen.apply("0003_transactions", "down", schema)
