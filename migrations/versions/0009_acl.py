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
as revision 0008 does for fetch_v2; tests/test_acl.py checks that the round trip restores every
definition, grant and comment exactly.

The views run with their owner's rights, so row-level security on the base tables could not see
the reader; each view is rebuilt as a ``security_barrier`` view over its original query, filtered
per row with acl_allowed_v1 (barrier: a caller's own leaky function in a WHERE clause cannot see
rows the filter drops). ``txn_history``, which the client role reads directly, gets a real
row-level security policy instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INTERNAL_FUNCTIONS = [
    "acl_caller_v1()",
    "acl_bypass_v1(oid)",
    "acl_match_v1(oid, text, text, text)",
    "acl_require_v1(text, text[], text)",
    "acl_validate_v1(text, text, text, text, text)",
]
ADMIN_FUNCTIONS = [
    "create_acl_v1(text, text, text, text, text)",
    "delete_acls_v1(text, text, text, text, text)",
    "describe_acls_v1(text, text, text, text, text)",
    "set_acl_enforcement_v1(boolean)",
]
#: Granted to every oncelog role: a caller asks only about itself (no principal argument).
ALLOWED_FUNCTION = "acl_allowed_v1(text, text, text)"

# The admin role's name is written into acl_bypass_v1 at upgrade (it depends on the schema).
CREATE_SQL = r"""
INSERT INTO acl_settings DEFAULT VALUES;

-- The principal of the calling session: the role chosen with SET ROLE, else the login role. Not
-- current_user: inside a SECURITY DEFINER function that is the function's owner. SET ROLE can
-- only name a role the login is a member of (PostgreSQL checks that), so honouring it can narrow
-- what a session may do but never widen it. NULL if that role no longer exists (then nothing is
-- allowed). These helpers are plpgsql, not sql: plpgsql keeps its plans for the session, while a
-- sql function that cannot be inlined (a SET clause prevents it) is planned again on every call.
CREATE FUNCTION acl_caller_v1() RETURNS oid
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $fn$
BEGIN
    RETURN to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none' THEN session_user::text
                                       ELSE current_setting('role') END));
END
$fn$;
COMMENT ON FUNCTION acl_caller_v1() IS
  'Internal: the ACL principal of the session (the SET ROLE role, else session_user), as a role oid.';

-- Members (with inherited privileges) of the schema owner, of the admin role, and superusers are
-- not subject to ACLs. current_user is the owner here: this runs inside SECURITY DEFINER functions.
CREATE FUNCTION acl_bypass_v1(p_role oid) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $fn$
BEGIN
    RETURN p_role IS NOT NULL
       AND (pg_has_role(p_role, current_user, 'USAGE')
            OR coalesce(pg_has_role(p_role, to_regrole('@ADMIN_ROLE@'), 'USAGE'), false));
END
$fn$;
COMMENT ON FUNCTION acl_bypass_v1(oid) IS
  'Internal: true when the role has the privileges of the schema owner or of the admin role (ACLs do not apply).';

-- Whether some ACL allows p_operation on the resource. A principal matches every role that has
-- its privileges (membership with INHERIT, as for GRANTs). DESCRIBE is implied by READ and WRITE,
-- everything by ALL (Kafka's implications); a literal '*' names every resource of its type.
CREATE FUNCTION acl_match_v1(p_role oid, p_resource_type text, p_name text, p_operation text) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- A principal that no longer exists matches nobody (to_regrole gives NULL).
    RETURN EXISTS (
        SELECT 1 FROM acls a
        WHERE a.resource_type = p_resource_type
          AND (a.operation = p_operation OR a.operation = 'all'
               OR (p_operation = 'describe' AND a.operation IN ('read', 'write')))
          AND CASE a.pattern_type
                  WHEN 'literal' THEN a.resource_name = p_name OR a.resource_name = '*'
                  ELSE starts_with(p_name, a.resource_name)
              END
          AND pg_has_role(p_role, to_regrole(quote_ident(a.principal)), 'USAGE'));
END
$fn$;
COMMENT ON FUNCTION acl_match_v1(oid, text, text, text) IS
  'Internal: whether an ACL allows the role p_operation on the named resource (DESCRIBE is implied by READ '
  'and WRITE, everything by ALL; a literal * matches every name; prefixed patterns match by prefix).';

-- The check the protocol functions make (only while enforcement is on): the caller must be
-- allowed p_operation on every name (NULL names are skipped: they name no resource, and the
-- function refuses them itself). Raises TOPIC_ / GROUP_ / TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
CREATE FUNCTION acl_require_v1(p_resource_type text, p_names text[], p_operation text) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_role oid;
    v_denied text;
BEGIN
    IF coalesce(cardinality(array_remove(p_names, NULL)), 0) = 0 THEN
        RETURN;  -- no resource named (a produce outside a transaction names no transactional id)
    END IF;
    v_role := acl_caller_v1();
    IF acl_bypass_v1(v_role) THEN
        RETURN;
    END IF;
    SELECT x.n INTO v_denied FROM unnest(p_names) WITH ORDINALITY AS x(n, i)
    WHERE x.n IS NOT NULL AND (v_role IS NULL OR NOT acl_match_v1(v_role, p_resource_type, x.n, p_operation))
    ORDER BY x.i
    LIMIT 1;
    IF v_denied IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = CASE p_resource_type WHEN 'topic' THEN 'OL501' WHEN 'group' THEN 'OL502' ELSE 'OL503' END,
            MESSAGE = format('role %s is not authorized to %s %s %L (no ACL allows it)',
                             coalesce(v_role::regrole::text, current_setting('role')),
                             p_operation, replace(p_resource_type, '_', ' '), v_denied);
    END IF;
END
$fn$;
COMMENT ON FUNCTION acl_require_v1(text, text[], text) IS
  'Internal: raises OL501 (topic), OL502 (group) or OL503 (transactional id) unless the calling session may '
  'perform p_operation on every named resource.';

CREATE FUNCTION acl_allowed_v1(p_resource_type text, p_name text, p_operation text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_role oid;
BEGIN
    IF NOT (SELECT acl_settings.enforce FROM acl_settings) THEN
        RETURN true;
    END IF;
    v_role := acl_caller_v1();
    RETURN v_role IS NOT NULL
       AND (acl_bypass_v1(v_role) OR acl_match_v1(v_role, p_resource_type, p_name, p_operation));
END
$fn$;
COMMENT ON FUNCTION acl_allowed_v1(text, text, text) IS
  'Whether the calling session may perform p_operation (read, write, describe) on a resource (topic, group, '
  'transactional_id): always while enforcement is off. Filters the views and txn_history; a caller can only '
  'ask about itself.';

-- Argument checks of the ACL administration (InvalidRequest, OL000).
CREATE FUNCTION acl_validate_v1(p_principal text, p_resource_type text, p_resource_name text, p_pattern_type text,
                                p_operation text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $fn$
BEGIN
    IF p_principal IS NULL OR NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = p_principal) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('principal %L is not a role of this server', p_principal);
    END IF;
    IF p_resource_type IS NULL OR p_resource_type NOT IN ('topic', 'group', 'transactional_id') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('resource type %L is not topic, group or transactional_id', p_resource_type);
    END IF;
    IF p_pattern_type IS NULL OR p_pattern_type NOT IN ('literal', 'prefixed') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('pattern type %L is not literal or prefixed', p_pattern_type);
    END IF;
    IF p_operation IS NULL OR p_operation NOT IN ('read', 'write', 'describe', 'all')
       OR (p_resource_type = 'group' AND p_operation = 'write')
       OR (p_resource_type = 'transactional_id' AND p_operation = 'read') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('operation %L does not apply to a %s (topic: read, write, describe, all; group: read, '
                             'describe, all; transactional_id: write, describe, all)', p_operation,
                             replace(coalesce(p_resource_type, 'resource'), '_', ' '));
    END IF;
    IF p_resource_name IS NULL OR length(p_resource_name) NOT BETWEEN 1 AND 255
       OR (p_resource_type = 'topic' AND NOT (
               (p_resource_name ~ '^[A-Za-z0-9._-]{1,249}$'
                AND (p_pattern_type = 'prefixed' OR p_resource_name NOT IN ('.', '..')))
               OR (p_pattern_type = 'literal' AND p_resource_name = '*')))
       OR (p_pattern_type = 'prefixed' AND p_resource_name = '*') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('%L is not a valid %s %s (a literal * means every name)', p_resource_name,
                             p_pattern_type, replace(p_resource_type, '_', ' '));
    END IF;
END
$fn$;
COMMENT ON FUNCTION acl_validate_v1(text, text, text, text, text) IS
  'Internal: checks an ACL (an existing role as principal; resource type, pattern type and operation that fit; '
  'a valid name or prefix); raises OL000.';

CREATE FUNCTION create_acl_v1(p_principal text, p_resource_type text, p_resource_name text,
                              p_pattern_type text DEFAULT 'literal', p_operation text DEFAULT 'all')
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
BEGIN
    PERFORM acl_validate_v1(p_principal, p_resource_type, p_resource_name, p_pattern_type, p_operation);
    INSERT INTO acls (principal, resource_type, resource_name, pattern_type, operation, created_by)
    VALUES (p_principal, p_resource_type, p_resource_name, p_pattern_type, p_operation, session_user)
    ON CONFLICT ON CONSTRAINT pk_acls DO NOTHING;
    RETURN FOUND;
END
$fn$;
COMMENT ON FUNCTION create_acl_v1(text, text, text, text, text) IS
  'CreateAcls: allows the principal (a role) an operation on the topics, groups or transactional ids named '
  'literally or by prefix. Returns false when the same ACL already exists. OL000 on a bad argument.';

CREATE FUNCTION delete_acls_v1(p_principal text DEFAULT NULL, p_resource_type text DEFAULT NULL,
                               p_resource_name text DEFAULT NULL, p_pattern_type text DEFAULT NULL,
                               p_operation text DEFAULT NULL)
RETURNS TABLE (principal text, resource_type text, resource_name text, pattern_type text, operation text)
LANGUAGE sql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
    WITH gone AS (
        DELETE FROM acls a
        WHERE (p_principal IS NULL OR a.principal = p_principal)
          AND (p_resource_type IS NULL OR a.resource_type = p_resource_type)
          AND (p_resource_name IS NULL OR a.resource_name = p_resource_name)
          AND (p_pattern_type IS NULL OR a.pattern_type = p_pattern_type)
          AND (p_operation IS NULL OR a.operation = p_operation)
        RETURNING a.principal, a.resource_type, a.resource_name, a.pattern_type, a.operation)
    SELECT g.principal, g.resource_type, g.resource_name, g.pattern_type, g.operation FROM gone g
    ORDER BY g.principal, g.resource_type, g.resource_name, g.pattern_type, g.operation
$fn$;
COMMENT ON FUNCTION delete_acls_v1(text, text, text, text, text) IS
  'DeleteAcls: removes the ACLs matching the filter (NULL matches anything; names match exactly, not as '
  'patterns) and returns them.';

CREATE FUNCTION describe_acls_v1(p_principal text DEFAULT NULL, p_resource_type text DEFAULT NULL,
                                 p_resource_name text DEFAULT NULL, p_pattern_type text DEFAULT NULL,
                                 p_operation text DEFAULT NULL)
RETURNS TABLE (principal text, resource_type text, resource_name text, pattern_type text, operation text,
               created_at timestamptz, created_by text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
    SELECT a.principal, a.resource_type, a.resource_name, a.pattern_type, a.operation, a.created_at, a.created_by
    FROM acls a
    WHERE (p_principal IS NULL OR a.principal = p_principal)
      AND (p_resource_type IS NULL OR a.resource_type = p_resource_type)
      AND (p_resource_name IS NULL OR a.resource_name = p_resource_name)
      AND (p_pattern_type IS NULL OR a.pattern_type = p_pattern_type)
      AND (p_operation IS NULL OR a.operation = p_operation)
    ORDER BY a.principal, a.resource_type, a.resource_name, a.pattern_type, a.operation
$fn$;
COMMENT ON FUNCTION describe_acls_v1(text, text, text, text, text) IS
  'DescribeAcls: the ACLs matching the filter (NULL matches anything), with who created them and when.';

CREATE FUNCTION set_acl_enforcement_v1(p_enforce boolean) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_before boolean;
BEGIN
    IF p_enforce IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'enforce ACLs: true or false';
    END IF;
    SELECT x.enforce INTO v_before FROM acl_settings x FOR UPDATE;
    UPDATE acl_settings x SET enforce = p_enforce, changed_at = now(), changed_by = session_user;
    RETURN v_before;
END
$fn$;
COMMENT ON FUNCTION set_acl_enforcement_v1(boolean) IS
  'Switches ACL enforcement on or off for this installation (calls that start after the switch commits see it); '
  'returns the previous setting.';
"""

DROP_SQL = """
DROP POLICY IF EXISTS txn_history_acl ON txn_history;
ALTER TABLE txn_history DISABLE ROW LEVEL SECURITY;
"""

#: The policy on the one base table a non-admin role reads that names protected resources. The
#: sub-select runs once per query (an InitPlan), so while enforcement is off no row pays a call.
POLICY_SQL = """
ALTER TABLE txn_history ENABLE ROW LEVEL SECURITY;
CREATE POLICY txn_history_acl ON txn_history FOR SELECT
    USING ((SELECT NOT acl_settings.enforce FROM acl_settings)
           OR acl_allowed_v1('transactional_id', transactional_id, 'describe'));
COMMENT ON POLICY txn_history_acl ON txn_history IS
  'With ACL enforcement on, roles other than the owner see the history of the transactional ids they may describe.';
"""

# The checks of each protocol function: (resource type, array of names, operation), in Kafka's
# order (the transactional id before the group, the group before the topics).
_TXN_WRITE = ("transactional_id", "ARRAY[p_transactional_id]", "write")
_GROUP_READ = ("group", "ARRAY[p_group_id]", "read")
CHECKS: dict[tuple[str, str], list[tuple[str, str, str]]] = {
    ("0002_idempotent_log", "fetch_v1"): [("topic", "ARRAY[p_topic]", "read")],
    ("0002_idempotent_log", "list_offsets_v1"): [("topic", "ARRAY[p_topic]", "describe")],
    ("0003_transactions", "produce_v2"): [_TXN_WRITE, ("topic", "ARRAY[p_topic]", "write")],
    ("0003_transactions", "init_transactional_producer_id_v1"): [_TXN_WRITE],
    ("0003_transactions", "add_partitions_to_txn_v1"): [_TXN_WRITE, ("topic", "p_topics", "write")],
    ("0003_transactions", "end_txn_v1"): [_TXN_WRITE],
    ("0004_groups", "join_group_v1"): [_GROUP_READ, ("topic", "p_topics", "read")],
    ("0004_groups", "heartbeat_v1"): [_GROUP_READ],
    ("0004_groups", "leave_group_v1"): [_GROUP_READ],
    ("0004_groups", "offset_commit_v1"): [_GROUP_READ, ("topic", "p_topics", "read")],
    ("0004_groups", "offset_fetch_v1"): [_GROUP_READ, ("topic", "p_topics", "read")],
    ("0004_groups", "txn_offset_commit_v1"): [_TXN_WRITE, _GROUP_READ, ("topic", "p_topics", "read")],
    # fetch_v2 (since 0008) is a view of fetch_v3, so it is checked there.
    ("0008_fetch_v3", "fetch_v3"): [("topic", "p_topics", "read")],
}

# Each view's filter, on the columns of its original query (``v``). The sub-select on the left is
# an InitPlan: evaluated once per query, it spares every row the call while enforcement is off.
VIEW_FILTERS: dict[tuple[str, str], str] = {
    ("0003_transactions", "partition_offsets"): "acl_allowed_v1('topic', v.topic, 'describe')",
    ("0003_transactions", "committed_records"): "acl_allowed_v1('topic', v.topic, 'read')",
    ("0003_transactions", "transaction_status"): "acl_allowed_v1('transactional_id', v.transactional_id, 'describe')",
    ("0004_groups", "group_status"): "acl_allowed_v1('group', v.group_id, 'describe')",
    ("0004_groups", "group_offsets"): (
        "acl_allowed_v1('group', v.group_id, 'describe') AND acl_allowed_v1('topic', v.topic, 'describe')"
    ),
    ("0004_groups", "pending_group_offsets"): (
        "acl_allowed_v1('group', v.group_id, 'describe') AND acl_allowed_v1('topic', v.topic, 'describe')"
    ),
}


def _revision(name: str) -> ModuleType:
    return importlib.import_module(f"oncelog.migrations.versions.{name}")


def _roles(schema: str) -> dict[str, str]:
    return dict(_revision("0005_roles").roles(schema))


def _cut(module: str, start_marker: str, end_marker: str) -> str:
    """The one statement of ``module``'s CREATE_SQL that starts with ``start_marker``, through
    ``end_marker``. Refuses to guess: the marker must occur exactly once."""
    sql: str = _revision(module).CREATE_SQL
    if sql.count(start_marker) != 1:
        raise RuntimeError(f"{start_marker!r} occurs {sql.count(start_marker)} times in revision {module}")
    start = sql.index(start_marker)
    end = sql.index(end_marker, start) + len(end_marker)
    return sql[start:end]


def original_function(module: str, name: str) -> str:
    """``name``'s definition as revision ``module`` installed it, as a CREATE OR REPLACE (which
    keeps the function's grants and comment)."""
    text = _cut(module, f"CREATE FUNCTION {name}(", "\n$fn$;")
    return text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def checked_function(module: str, name: str, checks: list[tuple[str, str, str]]) -> str:
    """``name``'s original definition with the ACL checks as the first statements of its body."""
    text = original_function(module, name)
    body = "\nBEGIN\n"  # the top-level block's BEGIN is the only unindented one
    if body not in text:
        raise RuntimeError(f"no top-level BEGIN in {name} of revision {module}")
    calls = "".join(
        f"        PERFORM acl_require_v1('{kind}', {names}, '{operation}');\n" for kind, names, operation in checks
    )
    block = (
        "    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement\n"
        "    -- is off this one lookup is all it costs.\n"
        "    IF (SELECT acl_settings.enforce FROM acl_settings) THEN\n"
        f"{calls}"
        "    END IF;\n"
    )
    return text.replace(body, body + block, 1)


def original_view(module: str, name: str) -> str:
    """``name``'s definition as revision ``module`` installed it, as a CREATE OR REPLACE."""
    text = _cut(module, f"CREATE VIEW {name} AS\n", ";\n")
    return text.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1)


def filtered_view(module: str, name: str, condition: str) -> str:
    """``name`` rebuilt as a security barrier view over its original query, filtered by ``condition``.
    Same columns in the same order, so dependent views and the comments stay."""
    query = _cut(module, f"CREATE VIEW {name} AS\n", ";\n")[len(f"CREATE VIEW {name} AS\n") : -2]
    return (
        f"CREATE OR REPLACE VIEW {name} WITH (security_barrier) AS\n"
        f"SELECT * FROM (\n{query}\n) v\n"
        f"WHERE (SELECT NOT acl_settings.enforce FROM acl_settings) OR ({condition});\n"
    )


def upgrade(schema: str) -> None:
    """Create the ACL tables and functions; add the checks to the protocol functions and views."""
    op.create_table(
        "acls",
        sa.Column(
            "resource_type",
            sa.Text(),
            nullable=False,
            comment="What the ACL protects: topic, group or transactional_id.",
        ),
        sa.Column(
            "resource_name",
            sa.Text(),
            nullable=False,
            comment="A name (literal; * is every name) or a name prefix (prefixed).",
        ),
        sa.Column("pattern_type", sa.Text(), nullable=False, comment="literal or prefixed."),
        sa.Column(
            "principal",
            sa.Text(),
            nullable=False,
            comment="The PostgreSQL role allowed; every role with its privileges (its members) is allowed too.",
        ),
        sa.Column(
            "operation",
            sa.Text(),
            nullable=False,
            comment="read, write, describe (implied by read and write) or all.",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the ACL was created.",
        ),
        sa.Column(
            "created_by",
            sa.Text(),
            server_default=sa.text("SESSION_USER"),
            nullable=False,
            comment="The login role that created it.",
        ),
        sa.CheckConstraint(
            "resource_type IN ('topic', 'group', 'transactional_id')", name=op.f("ck_acls_resource_type_valid")
        ),
        sa.CheckConstraint("pattern_type IN ('literal', 'prefixed')", name=op.f("ck_acls_pattern_type_valid")),
        sa.CheckConstraint(
            "operation IN ('read', 'write', 'describe', 'all') AND NOT (resource_type = 'group' AND operation = "
            "'write') AND NOT (resource_type = 'transactional_id' AND operation = 'read')",
            name=op.f("ck_acls_operation_valid"),
        ),
        sa.CheckConstraint("length(resource_name) BETWEEN 1 AND 255", name=op.f("ck_acls_resource_name_length")),
        sa.PrimaryKeyConstraint(
            "resource_type", "resource_name", "pattern_type", "principal", "operation", name=op.f("pk_acls")
        ),
        comment="Access control lists (Kafka's ACLs, allow only): which role may do what to which topics, groups "
        "and transactional ids. Enforced only while acl_settings.enforce is on.",
    )
    op.create_table(
        "acl_settings",
        sa.Column(
            "id",
            sa.SmallInteger(),
            server_default=sa.text("1"),
            nullable=False,
            comment="Always 1: this table has exactly one row.",
        ),
        sa.Column(
            "enforce",
            sa.Boolean(),
            server_default=sa.text("false"),
            nullable=False,
            comment="Whether ACLs are enforced (off: every role may do what its grants allow, as before ACLs).",
        ),
        sa.Column(
            "changed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When enforcement was last switched.",
        ),
        sa.Column(
            "changed_by",
            sa.Text(),
            nullable=True,
            comment="The login role that last switched it (NULL: never switched).",
        ),
        sa.CheckConstraint("id = 1", name=op.f("ck_acl_settings_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_acl_settings")),
        comment="Whether this installation enforces its ACLs (one row; set_acl_enforcement_v1).",
    )
    r = _roles(schema)
    op.execute(CREATE_SQL.replace("@ADMIN_ROLE@", r["admin"]))
    for fn in [*INTERNAL_FUNCTIONS, *ADMIN_FUNCTIONS, ALLOWED_FUNCTION]:
        op.execute(f"REVOKE ALL ON FUNCTION {fn} FROM PUBLIC")
    for fn in ADMIN_FUNCTIONS:
        op.execute(f"GRANT EXECUTE ON FUNCTION {fn} TO {r['admin']}")
    op.execute(f"GRANT EXECUTE ON FUNCTION {ALLOWED_FUNCTION} TO {r['reader']}, {r['client']}, {r['admin']}")
    # Like settings: clients may see whether enforcement is on; the admin role reads every table.
    op.execute(f"GRANT SELECT ON acl_settings TO {r['client']}, {r['admin']}")
    op.execute(f"GRANT SELECT ON acls TO {r['admin']}")
    for (module, name), checks in CHECKS.items():
        op.execute(checked_function(module, name, checks))
    for (module, name), condition in VIEW_FILTERS.items():
        op.execute(filtered_view(module, name, condition))
    op.execute(POLICY_SQL)


def downgrade(schema: str) -> None:
    """Restore the original functions and views, then drop the ACLs."""
    op.execute(DROP_SQL)
    for module, name in VIEW_FILTERS:
        op.execute(original_view(module, name))
        # CREATE OR REPLACE VIEW keeps options it is not given: the barrier goes explicitly.
        op.execute(f"ALTER VIEW {name} RESET (security_barrier)")
    for module, name in CHECKS:
        op.execute(original_function(module, name))
    for fn in [ALLOWED_FUNCTION, *ADMIN_FUNCTIONS, *reversed(INTERNAL_FUNCTIONS)]:
        op.execute(f"DROP FUNCTION IF EXISTS {fn}")
    op.drop_table("acl_settings")
    op.drop_table("acls")
