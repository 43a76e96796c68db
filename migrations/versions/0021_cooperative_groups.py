"""Consumer groups without double ownership: a partition changes hands only after its owner lets go.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26

The assignor's answer is now a target (target_assignments, KIP-848's target assignment);
member_assignments says who owns each partition now. A partition passes to its target member
only once its owner has let go of it: the owner's heartbeat (heartbeat_v2) names the partitions
it still holds, and those it no longer names and no longer targets are released. A member that
leaves or times out lets go of everything. Offset commits (offset_commit_v1,
txn_offset_commit_v1) are checked against ownership: a member commits for a partition it owns,
naming a generation no older than the one in which it took it, so a member may commit in
on_revoke and a zombie still cannot. A member is bound to the principal that joined it
(group_members.owner). A change of target or owner NOTIFYs the group channel
(group_listen_v1), so members heartbeat at once. Subscriptions may name topics that do not
exist yet. Adds the sticky assignor and the Reconciling state; join_group_v1 and heartbeat_v1
give way to join_group_v2 and heartbeat_v2.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("0021_cooperative_groups", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision 0020."""
    frozen.apply("0021_cooperative_groups", "down", schema)
