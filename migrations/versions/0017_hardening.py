"""Hardening: a producer id is its principal's, the time is the server's, decisions under their locks,
nothing malformed gets in.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-25

What a client holding only the client role could do before this revision, and what stops it now
(docs/security.md lists every function; docs/design.md the lock each decision is taken under):

* Forged producer ids. produce_v2 without a transactional id accepted any producer id, and its error
  texts told the current epoch and the expected sequence, so a client could append under another
  producer's id and displace its next batch. Producer ids are not secret (every fetch returns them,
  as Kafka's do), so the capability is the principal: ``producers.owner`` records the role that
  called InitProducerId (``acl_caller_v1``, the principal ACLs use), and every call that names a
  producer id is refused for any other role (UNKNOWN_PRODUCER_ID for idempotent ids, PRODUCER_FENCED
  for transactional ones) before anything about the id is read out or locked. A producer id that
  serves a transactional id is refused on the non-transactional path (INVALID_PRODUCER_ID_MAPPING),
  which also closes the race in which a plain batch landed inside the producer's own transaction.
  Ids issued before this revision have no owner and are refused to everyone: idempotent producers
  re-initialise by themselves (KIP-360); transactional producers must initialise again.
* The caller's clock. expire_transactions_v1(p_now) let any client pass 'infinity' and abort every
  open transaction. The maintenance functions are replaced by versions without a time argument
  (expire_transactions_v2, expire_producers_v2, enforce_retention_v2, expire_txn_history_v2) that read
  server_now_v1(): the server's clock, or ``clock.frozen_at`` while the owner sets it (tests).
* Deadlocks between commits. produce_end_txn_v1 appended its last batch (locking that partition)
  before EndTxn locked every partition in order; it now takes the transactions row, the producer row
  and every partition of the transaction in (topic_id, partition) order before appending. Offset rows
  are written in key order everywhere.
* Check before lock. produce_end_txn_v1 decided "retry of a committed call" from an unlocked read; it
  now decides under the transactions row's lock. After epoch exhaustion any holder of the old
  (id, 32766) could claim the rotated id as a "retried rotation"; the retired id now records which
  identity asked for the rotation (its last_epoch) and takes the fencing epoch. A member's offset
  commit without a generation skipped the generation check; it is now ILLEGAL_GENERATION.
* Poison pills. Headers that readers cannot decode and timestamps outside what a reader can
  represent were accepted. produce_v2 now checks headers' shape and base64 (headers_valid_v1) and
  bounds timestamps to [1970-01-01, now + the topic's message_timestamp_after_max_ms] (Kafka's
  message.timestamp.after.max.ms, KIP-937; one hour by default), which also stops one far-future
  record from holding time-based retention back for good (INVALID_TIMESTAMP, OL109).

Its SQL is frozen in sql/0017_hardening.up.sql (the upgrade's definitions in full) and
sql/0017_hardening.down.sql (for the downgrade, the definitions of revision 0016 as the database
held them).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Bind producer ids to principals, take time from the server, lock before deciding, validate records."""
    frozen.apply("0017_hardening", "up", schema)


def downgrade(schema: str) -> None:
    """Restore revision 0016's functions, grants and comments; drop what 0017 added."""
    frozen.apply("0017_hardening", "down", schema)
