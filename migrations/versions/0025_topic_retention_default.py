"""New topics keep their records 7 days unless they say otherwise, as Kafka's do.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27

A topic created without a retention used to keep its records for ever, unlike Kafka's, whose
default is log.retention.ms, 7 days. settings.log_retention_ms (default 604800000; NULL keeps
records for ever) is now the retention of every topic that sets none: topics.retention_ms NULL
follows it, and -1 keeps records for ever, as Kafka's -1 does (retention_bytes takes -1 as no limit
too, stored as NULL). enforce_retention_v2 applies the setting; create_topic_v1, alter_topic_config_v1
and topic_config_v1 take -1. Resetting retention_ms (a JSON null) makes the topic follow the
default again.

Existing topics lose nothing: those without a retention are set to -1 on the way up, so they keep
their records for ever as they did. On the way down, topics that followed the default get its value
written in, and -1 becomes NULL again.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0025_topic_retention_default", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0024."""
    frozen.apply("0025_topic_retention_default", "down", schema)
