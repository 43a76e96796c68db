"""Records in the caller's own database transaction: the transactional outbox.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27

send_v1 (and send, its stable name for psql, triggers and JDBC) checks a record and stages it in
outbox_records inside whatever transaction the caller is in; a deferred constraint trigger
(outbox_flush_v1) appends the transaction's staged records at its commit through produce_v2,
partitions in lock order. The partitions' row locks are taken at commit, not at send, so a slow
application transaction holds no producer up; a rollback leaves nothing, not even an offset.
Keys are partitioned with Kafka's murmur2 (murmur2_v1), as the Producer does.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0022_outbox", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0021."""
    frozen.apply("0022_outbox", "down", schema)
