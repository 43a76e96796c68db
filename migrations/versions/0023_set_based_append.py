"""Many batches appended at once, a commit's markers in one statement per table; offsets by time.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27

append_batches_v1 (internal) appends every batch of a request with one statement per table: one
size and header check, one locking read of the sequence states, one INSERT of every record, one
update each of partitions, txn_partitions and the sequence windows (producer_window_push_v1, which
produce_v2 now calls too: the window is written once). produce_batches_v1 and
produce_end_txn_v2 hand it their requests once they hold every lock; it takes only the common case
(each batch new, next in its sequence, valid, alone in its partition) and otherwise writes nothing,
so the batches go through produce_v2 as before and every duplicate's answer and refusal still come
from there. produce_batches_v1 no longer opens a subtransaction per batch in that case.
txn_complete_v1 locks the transaction's partitions in order and writes markers, spans and the
partitions' next offsets in one statement each instead of a loop per partition. A single batch
still goes to produce_v2, whose simpler statements cost less for one. Signatures and answers are
unchanged (tests/integration/test_set_based_append.py compares both paths).

outbox_flush_v1 (the commit of records sent with send_v1) locks every partition the transaction
sent to in order, appends them through append_batches_v1 when there are several, and wakes the
readers waiting on them with a NOTIFY that the commit delivers (a rollback drops it); not on a
server that allows prepared transactions, since PostgreSQL cannot prepare a transaction that has
notified. fetch_wait_v1 waits out the appends in flight for 250 ms at most: a prepared transaction
holds its partitions until it is resolved, and a reader must not hang on it.

list_offsets_for_times_v1 is ListOffsets by timestamp for clients (Kafka's offsetsForTimes, with
DESCRIBE on the topic): the first record at or after a time per partition, below the last stable
offset and not aborted for read_committed. unknown_partition_v1 is the existence check it shares
with read_limits_v1.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0023_set_based_append", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0022."""
    frozen.apply("0023_set_based_append", "down", schema)
