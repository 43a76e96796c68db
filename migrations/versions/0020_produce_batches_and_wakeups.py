"""Produce requests for many partitions at once, and readers woken by the writes they wait for.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26

produce_batches_v1 appends up to 64 batches, to any partitions, in one database transaction
(Kafka's ProduceRequest), each batch refused or appended on its own: one round trip and one
commit where the producer made one per partition.

A read_committed or read_uncommitted reader with nothing to read registers its wait
(fetch_wait_v1, in the unlogged fetch_waiters) and LISTENs. The writes check for waiters under
their partitions' locks and answer the producer with the waited-on partitions' wake tokens
(produce_batches_v1's wake, and produce_end_txn_v3 and end_txn_v2, which are v2 and v1 with the
tokens of the commit's partitions), which it then NOTIFYs on the schema's channel
(wake_channel_v1) in a transaction of its own, since a NOTIFY inside the producers' commits
serialises them on a database-wide lock.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0020_produce_batches_and_wakeups", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0019."""
    frozen.apply("0020_produce_batches_and_wakeups", "down", schema)
