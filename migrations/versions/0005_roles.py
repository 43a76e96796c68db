"""Roles that cannot break the rules.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21

Three group roles per installation, named after the schema (``oncelog_admin``, ``oncelog_client``,
``oncelog_reader`` for the default schema), created when missing (the migrating user then needs
CREATEROLE; otherwise create them beforehand), and granted to login roles by the operator:

* reader: SELECT on the documented views only (Spark, BI tools, psql analysts). Views run with
  their owner's rights, so a reader sees committed records without any access to base tables.
* client: the protocol functions (produce, fetch, transactions, groups, offsets) and the views.
* admin: everything a client has, plus the administration functions (topics, operator aborts,
  maintenance) and read access to every table.

Nobody but the owner (the migrating user) can INSERT, UPDATE or DELETE a base table: every write
goes through a SECURITY DEFINER function with a pinned search_path that checks its arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Create the roles if missing and grant each exactly what it needs."""
    frozen.apply("0005_roles", "up", schema)


def downgrade(schema: str) -> None:
    """Revoke everything granted here; drop the roles unless other databases still use them."""
    frozen.apply("0005_roles", "down", schema)
