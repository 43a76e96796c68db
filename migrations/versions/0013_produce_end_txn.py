"""A transaction's last batch and its commit in one database transaction: produce_end_txn_v1.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-21

``commit_transaction`` flushed the transaction (its last batch: one round trip and one commit) and
then sent EndTxn (another round trip and another commit, each commit a WAL flush). Both requests
are idempotent on retry, so the producer may send them together: produce_end_txn_v1 appends the
batch (produce_v2) and commits the transaction (end_txn_v1) in one database transaction, so both
happen or neither does, one round trip and one WAL flush per commit fewer. The rules are those of
the two functions it calls, in their lock order (the transactions row first).

A retry after a lost reply finds the transaction already committed; produce_v2 would then refuse
the batch (its transaction is no longer open), so the retry is answered here: EndTxn's own retry
answer (``already_committed``, after the same epoch checks) and the batch's offsets from the
producer's sequence state, where duplicate detection finds them too.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install produce_end_txn_v1 for the client and admin roles (as produce_v2 and end_txn_v1)."""
    frozen.apply("0013_produce_end_txn", "up", schema)


def downgrade(schema: str) -> None:
    """Drop produce_end_txn_v1."""
    frozen.apply("0013_produce_end_txn", "down", schema)
