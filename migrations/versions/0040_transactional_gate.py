"""A gate in front of the transactions row, and a transactional append joins its partition under the partition's lock.

Revision ID: 0040
Revises: 0039
Create Date: 2026-11-28

A review of 0039 found two faults, both reproduced here before this revision:

* PostgreSQL grants a row's FOR SHARE at once while only share locks are held, even to a
  session that comes after a FOR UPDATE already waiting. Appends that overlap without a gap
  could hold a commit, an abort or a fence off for as long as they kept coming (2.6 s in the
  test, unbounded in principle). ``txn_gate_v1`` takes an advisory lock on the id's hash just
  before the row: shared by appends, exclusive by every call that waits for the row FOR UPDATE
  (``txn_check_v2``'s exclusive path, ``end_txn_v1``, ``init_transactional_producer_id_v1``,
  ``abort_transaction_v1``, ``produce_end_txn_v1``/``v2``). A heavyweight lock queues, so an
  append that comes after a waiting commit now waits behind it.
* ``produce_v2`` inserted the transaction's ``txn_partitions`` row before locking the partition,
  while ``produce_batches_v1`` locks its partitions first: two appends sharing the transactions
  row, one of each, to a partition not yet in the transaction, deadlocked (37 deadlocks in 150
  rounds of the test). The row is now inserted under the partition's lock.

Changed (frozen from store/sql by scripts/freeze_revision.py): +txn_gate_v1(text, boolean), abort_transaction_v1(text), append_batches_v2(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], boolean), end_txn_v1(text, bigint, smallint, bigint, boolean), init_transactional_producer_id_v1(text, integer, bigint, smallint), produce_batches_v1(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[]), produce_end_txn_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamp with time zone[], text, bigint), produce_end_txn_v2(text, bigint, smallint, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], text, text, text, integer, text[], integer[], bigint[], text[]), produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamp with time zone[], text, bigint), txn_check_v2(text, bigint, smallint, bigint, boolean, boolean).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0040"
down_revision: str | None = "0039"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0040_transactional_gate", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0039."""
    frozen.apply("0040_transactional_gate", "down", schema)
