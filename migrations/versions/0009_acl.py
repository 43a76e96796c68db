"""Optional per-topic access control: Kafka-style ACLs, enforced in the functions and the views.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-21

Off by default: nothing changes until an admin calls ``set_acl_enforcement_v1(true)``. From then
on a client or reader role may do only what an ACL allows (the admin role and the schema owner
bypass them). The model and its reasons are in docs/acl.md. Installs:

  acls, acl_settings        the ACLs (principal, resource type, pattern, name, operation), and the
                            installation's switch; only the owner writes them (through the functions)
  acl_caller_v1, acl_bypass_v1, acl_match_v1, acl_require_v1
                            internal: who is calling, whether the caller bypasses ACLs, whether an
                            ACL allows, and the check the protocol functions make (OL501..OL503)
  acl_allowed_v1            "may I?": the filter of the views and of txn_history's row-level policy
  create_acl_v1, delete_acls_v1, describe_acls_v1, set_acl_enforcement_v1
                            administration, for the admin role

The protocol functions keep their names, signatures and grants (so psql and JDBC callers are held
to the ACLs too): each is re-created from the text its own revision installed with one block
added at the top of its body, before any lock is taken or any row written (none of them changed
since the revision that installed it). The block reads one flag and does nothing more while
enforcement is off. Downgrading re-creates the original text, cut from the same revision module,
as revision 0008 does for fetch_v2; tests/integration/test_acl.py checks that the round trip restores every
definition, grant and comment exactly.

The views run with their owner's rights, so row-level security on the base tables could not see
the reader; each view is rebuilt as a ``security_barrier`` view over its original query, filtered
per row with acl_allowed_v1 (barrier: a caller's own leaky function in a WHERE clause cannot see
rows the filter drops). ``txn_history``, which the client role reads directly, gets a real
row-level security policy instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Create the ACL tables and functions; add the checks to the protocol functions and views."""
    frozen.apply("0009_acl", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the original functions and views, then drop the ACLs."""
    frozen.apply("0009_acl", "down", schema)
