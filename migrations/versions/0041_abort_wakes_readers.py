"""An abort wakes the read_committed readers waiting on its partitions.

Revision ID: 0041
Revises: 0040
Create Date: 2026-11-28

An open transaction holds the last stable offset of every partition it wrote to. Its abort shows
none of its own records, but it lets read_committed readers see what committed behind it: other
producers' transactions and idempotent appends. Until now only a commit named the partitions a
waiting reader should be woken on (``end_txn_v2.wake``), so such a reader saw those records only
at its own next look, up to ``fetch_max_backoff_ms`` (200 ms by default) later.

* ``txn_abort_waiters_v1``: the wake tokens of the partitions a just aborted transaction wrote to
  on which a read_committed reader waits. It runs under the partition locks the abort took, so
  the abort's marker is each such partition's last record.
* ``end_txn_v2`` answers an abort (``aborted``) with those tokens, as it answers a commit; the
  producer NOTIFYs them outside the transaction, as for a commit.
* An abort no producer asked for in the call (a timeout, a new instance fencing the old one,
  expiry, an operator's abort: every caller of ``txn_fence_abort_v1``) has nobody to hand the
  tokens to, so ``txn_fence_abort_v1`` NOTIFYs them from inside its own transaction, delivered at
  the commit. Such aborts are rare, so the commit's wait for the notification lock is rarely paid.
* ``wake_notify_v1``: that NOTIFY, written once for the two writes with no producer to send it
  after the commit: the fence's abort and ``outbox_flush_v1`` (revision 0023), which had its own
  copy. Payloads of at most 500 tokens; nothing on a server that allows PREPARE TRANSACTION.

Comments only: ``txn_gate_v1`` names the revision that brought it (0040), and ``txn_check_v2``'s
header comment is rewrapped.

Changed (frozen from store/sql by scripts/freeze_revision.py): +txn_abort_waiters_v1(bigint, bigint), +wake_notify_v1(text[]), end_txn_v2(text, bigint, smallint, bigint, boolean), outbox_flush_v1(), txn_check_v2(text, bigint, smallint, bigint, boolean, boolean), txn_fence_abort_v1(text, boolean), txn_gate_v1(text, boolean).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0041"
down_revision: str | None = "0040"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0041_abort_wakes_readers", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0040."""
    frozen.apply("0041_abort_wakes_readers", "down", schema)
