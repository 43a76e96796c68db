"""One-shot wait registrations: a busy partition costs one NOTIFY per wait of its readers.

Revision ID: 0042
Revises: 0041
Create Date: 2026-11-28

A registration (``fetch_wait_v1``, revision 0020) lasted its whole time (a second or more), and
was shared by every reader of the partition, so every write while it held answered with the
partition's wake token and its producer sent a NOTIFY, although the reader was busy reading
what the previous NOTIFY announced. Four producers committing one-record transactions kept
0.70 of their commit rate with a consumer waiting; nearly every commit sent a NOTIFY.

* ``fetch_waiters``: two columns, ``committed_once_until`` and ``uncommitted_once_until``, for
  one-shot registrations beside the lasting ones (``committed_until``, ``uncommitted_until``).
* ``fetch_wait_v2``: ``fetch_wait_v1`` for one wait: the registration also ends with the first
  wake-up sent for it. Both call ``fetch_wait_register_v1``, the registration written once.
* ``wake_readers_v1``: what a producer calls after its write committed, in a transaction of its
  own (clients sent ``pg_notify`` themselves): it ends the one-shot registrations of the tokens'
  partitions and NOTIFYs the channel in the same transaction, so every reader whose registration
  it ended is listening when the NOTIFY is delivered. A row a reader is registering on is
  skipped (SKIP LOCKED). Tokens are checked (canonical ``topic_id:partition``, as readers match
  the NOTIFY's text; at most 10000): ``OL000`` otherwise.
* ``fetch_wait_register_v1`` waits at most 250 ms for a ``fetch_waiters`` row another session
  holds (anyone may keep a transaction open after ``wake_readers_v1``); past that it registers
  nothing and answers no rows, for ``fetch_wait_v1`` as for ``fetch_wait_v2``.
* ``fetch_waiting_v1``, ``txn_waiters_v1``, ``txn_abort_waiters_v1``: a partition is waited on
  while either kind of registration holds.
* ``wake_payloads_v1``: the payloads (each token once, 350 to a payload: under 8000 bytes for the
  longest tokens), for ``wake_notify_v1`` (which sent 500) and ``wake_readers_v1``.
* ``wake_channel_v1``: plpgsql instead of sql: PostgreSQL 15 planned the sql function's query
  again in every transaction (about 30 us of each wake-up).

The Consumer registers with ``fetch_wait_v2`` once its partitions stay quiet for 5 ms, and drops
its registration after every wake-up for its partitions and after a poll that returned records;
every wake-up that brought it nothing doubles its spacing (a flood). The broker does not keep a
registration the store did not make.
Clients of earlier versions keep working: their lasting registrations are not ended by a
wake-up, and their plain ``pg_notify`` ends no one-shot registration. Clients of this version
need the schema at this revision (upgrade the schema first).

Changed (frozen from store/sql by scripts/freeze_revision.py): +fetch_wait_register_v1(text[], integer[], boolean, integer, boolean), +fetch_wait_v2(text[], integer[], boolean, integer), +wake_payloads_v1(text[]), +wake_readers_v1(text[]), fetch_wait_v1(text[], integer[], boolean, integer), fetch_waiting_v1(text, integer, boolean, boolean), txn_abort_waiters_v1(bigint, bigint), txn_waiters_v1(bigint, bigint), wake_channel_v1(), wake_notify_v1(text[]).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0042"
down_revision: str | None = "0041"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0042_one_shot_wakeups", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0041."""
    frozen.apply("0042_one_shot_wakeups", "down", schema)
