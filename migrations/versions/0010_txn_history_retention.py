"""Retention for the transaction journal's history.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-21

txn_history gains about three rows per transaction (Ongoing, Prepare*, Complete*) and was
append-only with no way to shrink: at 100 transactions per second, 26 million rows a day. Now the
maintenance loop prunes rows older than ``settings.txn_history_retention_ms`` (default 7 days, as
transactional.id.expiration.ms), except the newest CompleteCommit row of each transactional id, so
"has this transactional id ever committed?" (how a re-run Spark job learns it already finished)
keeps its answer for ever. Nothing else may delete history: the guard trigger lets a DELETE through
only inside expire_txn_history_v1 (which marks its own transaction), and still refuses every UPDATE.

Installs:
  expire_txn_history_v1  maintenance: prune history past the retention, in batches
  txn_history_guard_v1   trigger: UPDATE refused; DELETE only from expire_txn_history_v1
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Add the retention setting, the guard trigger and the pruning function."""
    frozen.apply("0010_txn_history_retention", "up", schema)


def downgrade(schema: str) -> None:
    """Back to the plain append-only trigger; drop the setting."""
    frozen.apply("0010_txn_history_retention", "down", schema)
