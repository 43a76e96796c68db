"""The operator's offset reset (``oncelog groups reset-offsets``).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-21

Installs:
  reset_group_offsets_v1   sets a consumer group's committed offsets, like Kafka's
                           kafka-consumer-groups.sh --reset-offsets --execute

The targets (earliest, latest, an offset, a shift, a point in time) are computed by the client;
this function is the only write. As in Kafka's tool, the group must have no live members
(NON_EMPTY_GROUP, OL410): a running consumer would overwrite the reset with its next commit. Every
offset must lie within [log start offset, high watermark] of its partition (OFFSET_OUT_OF_RANGE,
OL108). A group that does not exist yet is created, as Kafka's tool does for a new group id.

Lock order: the group row (FOR NO KEY UPDATE, as every group call), then committed-offset rows.
Partition rows are read, not locked: appenders hold them until commit, and a reset must not wait
behind a long transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the offset reset, for the admin role only."""
    frozen.apply("0007_operator", "up", schema)


def downgrade(schema: str) -> None:
    """Remove the offset reset (dropping a function drops its grants)."""
    frozen.apply("0007_operator", "down", schema)
