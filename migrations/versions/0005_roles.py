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

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VIEWS = [
    "committed_records",
    "partition_offsets",
    "transaction_status",
    "group_status",
    "group_offsets",
    "pending_group_offsets",
]

CLIENT_FUNCTIONS = [
    "init_producer_id_v1(bigint, smallint)",
    "produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[], text, bigint)",
    "fetch_v1(text, integer, bigint, integer)",
    "fetch_v2(text[], integer[], bigint[], integer, boolean)",
    "list_offsets_v1(text)",
    "init_transactional_producer_id_v1(text, integer, bigint, smallint)",
    "add_partitions_to_txn_v1(text, bigint, smallint, bigint, text[], integer[])",
    "end_txn_v1(text, bigint, smallint, bigint, boolean)",
    "expire_transactions_v1(timestamptz)",
    "join_group_v1(text, text, text, text, text[], integer, text)",
    "heartbeat_v1(text, text, text)",
    "leave_group_v1(text, text)",
    "offset_commit_v1(text, text, text, integer, text[], integer[], bigint[], text[])",
    "offset_fetch_v1(text, text[], integer[], boolean)",
    "txn_offset_commit_v1(text, bigint, smallint, bigint, text, text, text, integer, text[], integer[], bigint[], text[])",
]

ADMIN_FUNCTIONS = [
    "create_topic_v1(text, integer, jsonb)",
    "delete_topic_v1(text)",
    "create_partitions_v1(text, integer)",
    "alter_topic_config_v1(text, jsonb)",
    "topic_config_v1(jsonb)",
    "abort_transaction_v1(text)",
    "expire_producers_v1(timestamptz)",
    "enforce_retention_v1(integer, timestamptz)",
]

#: Tables a client reads: the catalogue to route records (names, partition counts, size limits),
#: and the transaction journal (a Spark job learns from it whether it already committed).
CLIENT_TABLES = ["topics", "partitions", "settings", "txn_history"]


def roles(schema: str) -> dict[str, str]:
    """The role names of an installation in ``schema``."""
    return {kind: f"{schema}_{kind}" for kind in ("reader", "client", "admin")}


def upgrade(schema: str) -> None:
    """Create the roles if missing and grant each exactly what it needs."""
    r = roles(schema)
    for name in r.values():
        op.execute(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{name}') THEN "
            f"CREATE ROLE {name} NOLOGIN; END IF; END $$"
        )
    # Nothing is granted to PUBLIC in this schema: functions were created with EXECUTE revoked.
    op.execute(f"REVOKE ALL ON SCHEMA {schema} FROM PUBLIC")
    op.execute(f"GRANT USAGE ON SCHEMA {schema} TO {r['reader']}, {r['client']}, {r['admin']}")
    views = ", ".join(VIEWS)
    op.execute(f"GRANT SELECT ON {views} TO {r['reader']}, {r['client']}, {r['admin']}")
    op.execute(f"GRANT SELECT ON {', '.join(CLIENT_TABLES)} TO {r['client']}")
    op.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {r['admin']}")
    for fn in CLIENT_FUNCTIONS:
        op.execute(f"GRANT EXECUTE ON FUNCTION {fn} TO {r['client']}, {r['admin']}")
    for fn in ADMIN_FUNCTIONS:
        op.execute(f"GRANT EXECUTE ON FUNCTION {fn} TO {r['admin']}")
    for kind, name in r.items():
        op.execute(f"COMMENT ON ROLE {name} IS 'oncelog {kind} role of schema {schema} (grant it to login roles)'")


def downgrade(schema: str) -> None:
    """Revoke everything granted here; drop the roles unless other databases still use them."""
    r = roles(schema)
    names = ", ".join(r.values())
    op.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {names}")
    op.execute(f"REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {schema} FROM {names}")
    op.execute(f"REVOKE ALL ON SCHEMA {schema} FROM {names}")
    for name in r.values():
        # Roles are cluster-wide: another database migrated by oncelog may still grant to them.
        op.execute(
            f"DO $$ BEGIN DROP ROLE IF EXISTS {name}; EXCEPTION WHEN dependent_objects_still_exist THEN NULL; END $$"
        )
