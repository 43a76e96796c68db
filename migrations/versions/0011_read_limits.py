"""Read limits for planned reads (Spark), callable by the reader role.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-21

A Spark job plans its reads as ranges below each partition's last stable offset, pulled back so
that a committed transaction is read on all of its partitions or on none (consistent_limits_v1).
That planning called consistent_limits_v1 directly and mapped topic names through the topics
table: both work only for the schema owner, so a job running as the reader role (as docs/security
says it should) failed with "permission denied". read_limits_v1 does the same work with the
owner's rights behind a checked interface, and is granted to the reader, client and admin roles
(and held to topic READ ACLs when they are enforced).
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install read_limits_v1 for every oncelog role."""
    frozen.apply("0011_read_limits", "up", schema)


def downgrade(schema: str) -> None:
    """Drop read_limits_v1."""
    frozen.apply("0011_read_limits", "down", schema)
