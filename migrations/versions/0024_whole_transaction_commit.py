"""A transaction sent whole with its commit writes its markers with its records.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27

When produce_end_txn_v2 gets a transaction the store has not seen yet (the last one of its
transactional id is complete and this is the next, so every record of it is in the call), the
set-based append now takes it with its commit: append_batches_v2 (append_batches_v1 with
p_commit) writes each partition's commit marker in the same INSERT as the records, moves each
partition's next offset once, writes the transaction's spans directly (each batch is the whole
transaction in its partition) and leaves txn_partitions alone, since no other session can see the
transaction open. produce_end_txn_v2 then completes it with txn_complete_v1 (state, pending
offsets) without end_txn_v1's second round of checks: txn_check_v1 made them under the same lock.
A single batch takes this path too. Anything else (a transaction sent earlier, or a request that
is not the common case) goes the way it went before, with the same answers and errors.

txn_complete_v1 skips its marker, span and offset statements when the transaction wrote no record
through txn_partitions (an empty transaction, or one whose markers are already written).
produce_batches_v1 and outbox_flush_v1 call append_batches_v2 without the commit.

Without consumer offsets, such a transaction is not even opened first: produce_end_txn_v2 checks
the owner and the epoch under the producer row's lock (as txn_check_v1 would, before any partition
is locked), appends, and moves the transactions row from its last state to CompleteCommit with the
next number in one update. txn_transition_v1 allows that step only with the next number and the
same producer, and journals it as the three steps it stands for (Ongoing, PrepareCommit,
CompleteCommit), so txn_history reads as before. Likewise txn_complete_v1 moves Ongoing to
CompleteCommit or CompleteAbort in one update, journaled through PrepareCommit or PrepareAbort: the
Prepare states never outlived the database transaction that set them. Each update of that row
costs about 0.2 ms of server time (its checks, the trigger, the journal row).

Measured on the embedded server (store call, 10 records, 1000 calls): server CPU per commit
2.7 -> 2.0-2.4 ms on 4 partitions (p50 4.3 -> 2.9-3.3 ms); pg_stat_statements and perf show the
rest spread over about 20 statements, each paying its executor start and its table's CHECK
constraints.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0024_whole_transaction_commit", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0023."""
    frozen.apply("0024_whole_transaction_commit", "down", schema)
