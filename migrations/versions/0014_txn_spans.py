"""Committed transactions' spans per partition replace the per-record transaction index.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-21

A read_committed fetch returns a committed transaction on all of the requested partitions or on
none (consistent_limits_v1). Its probe asked "has this transaction a record at or past another
partition's read limit?" through a partial index on records (producer_id, txn_number): one index
entry per transactional record, written by every append. Measured with store calls alternated on
one connection (130-record batches, medians of 1200): that index was almost all of a transactional
append's extra cost over an idempotent one (+250-330 us of ~2.5-2.9 ms; +0-115 us without it).

The probe needs only each committed transaction's last data record per partition. EndTxn (commit)
now writes that, one row per partition, into txn_spans, read from the producer's sequence state
(its last batch there is this transaction's: a producer has one open transaction and its plain
writes beside it are refused), so appends write nothing more than an idempotent append does.
Retention drops the spans that end below a partition's log start; a deleted topic takes its own.
Rows are backfilled from the log for transactions committed before this revision.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Create txn_spans, fill it, switch the probe and EndTxn to it, drop the per-record index."""
    frozen.apply("0014_txn_spans", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the index and the functions as they were, then drop txn_spans."""
    frozen.apply("0014_txn_spans", "down", schema)
