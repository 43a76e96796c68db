"""The partitioned log and the idempotent producer: the functions that are the only way to write it.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21

Installs, with versioned names so every client (ours, psql, JDBC) gets the same rules:
  init_producer_id_v1   InitProducerId without a transactional id (and the KIP-360 epoch bump)
  produce_v1            Produce one batch to one partition: validate, detect duplicates, append
  fetch_v1, list_offsets_v1
  create_topic_v1, delete_topic_v1, create_partitions_v1, alter_topic_config_v1
  expire_producers_v1, enforce_retention_v1 (maintenance)

Lock order, everywhere: the producer row (FOR SHARE, so an epoch bump, which takes it FOR UPDATE,
waits for in-flight appends and fences later ones), then partition rows in (topic_id, partition)
order, then that producer's sequence-state row for the partition.

Every function is SECURITY DEFINER with a pinned search_path, and EXECUTE is revoked from PUBLIC:
the owner grants it to the roles that may call it.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Add the log byte count and install the log's protocol functions."""
    frozen.apply("0002_idempotent_log", "up", schema)


def downgrade(schema: str) -> None:
    """Drop the functions and the byte count."""
    frozen.apply("0002_idempotent_log", "down", schema)
