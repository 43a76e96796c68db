"""Everything a migration installs in a schema, read from PostgreSQL's catalogue, for comparisons.

Functions (their whole definition as PostgreSQL prints it, comment and grants; no grants at all
and the owner's default grants compare equal, as they are equal), tables and views
(columns with types, defaults, nullability and comments; view queries and options; grants;
row-level security), constraints, indexes, sequences, triggers and policies with their comments.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

_QUERIES = {
    "function": """
        SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), obj_description(p.oid, 'pg_proc'),
               coalesce(p.proacl, acldefault('f'::"char", p.proowner))::text
        FROM pg_proc p WHERE p.pronamespace = {ns}""",
    "relation": """
        SELECT c.relname, c.relkind, CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) END, c.reloptions::text,
               obj_description(c.oid, 'pg_class'),
               coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", c.relowner))::text,
               c.relrowsecurity,
               (SELECT array_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' '
                                 || a.attnotnull::text || ' ' || a.attidentity::text || ' '
                                 || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ': '
                                 || coalesce(col_description(c.oid, a.attnum), '') ORDER BY a.attnum)
                FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)::text
        FROM pg_class c WHERE c.relnamespace = {ns} AND c.relkind IN ('r', 'v', 'S')""",
    "constraint": """
        SELECT c.conrelid::regclass::text || '.' || c.conname, pg_get_constraintdef(c.oid),
               c.condeferrable, c.condeferred
        FROM pg_constraint c WHERE c.connamespace = {ns}""",
    "index": """
        SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid)
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = {ns}""",
    "trigger": """
        SELECT t.tgname, pg_get_triggerdef(t.oid), obj_description(t.oid, 'pg_trigger')
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = {ns} AND NOT t.tgisinternal""",
    "policy": """
        SELECT p.polname, p.polcmd, p.polroles::text, pg_get_expr(p.polqual, p.polrelid),
               obj_description(p.oid, 'pg_policy')
        FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE c.relnamespace = {ns}""",
}


#: The schema's oid, or none while it does not exist (before the first revision).
_NAMESPACE = "(SELECT n.oid FROM pg_namespace n WHERE n.nspname = %(s)s)"


def catalogue(conn: sa.Connection, schema: str = "oncelog") -> dict[str, dict[str, tuple[Any, ...]]]:
    """Every object of ``schema`` by kind, then by name: a value to compare with ``==``. Alembic's
    own version table is left out: alembic, not a revision, creates it."""
    out: dict[str, dict[str, tuple[Any, ...]]] = {}
    for kind, query in _QUERIES.items():
        rows = conn.exec_driver_sql(query.replace("{ns}", _NAMESPACE), {"s": schema}).all()
        out[kind] = {row[0]: tuple(row[1:]) for row in rows if "alembic_version" not in row[0]}
    return out


def differences(a: dict[str, dict[str, tuple[Any, ...]]], b: dict[str, dict[str, tuple[Any, ...]]]) -> list[str]:
    """What differs between two catalogues, one line per object (empty: identical)."""
    out: list[str] = []
    for kind in sorted(a.keys() | b.keys()):
        left, right = a.get(kind, {}), b.get(kind, {})
        out += [f"{kind} {name}: only before" for name in sorted(left.keys() - right.keys())]
        out += [f"{kind} {name}: only after" for name in sorted(right.keys() - left.keys())]
        out += [f"{kind} {name}: changed" for name in sorted(left.keys() & right.keys()) if left[name] != right[name]]
    return out
