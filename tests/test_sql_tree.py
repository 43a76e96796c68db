"""Head equals the tree: a database migrated to head holds exactly what ``store/sql`` installs.

Every function (its whole definition as PostgreSQL prints it: arguments, result, language,
security, volatility, settings, body), its comment and its grants; every view (query, options,
comments of the view and its columns, grants); every trigger and policy with its comment; every
table's grants and row-level security. The migrations install them; then the test drops them all,
loads the files instead, and compares the catalogue before and after.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import sqlalchemy as sa

from oncelog.store import create_engine, migrate, sqltree

_FUNCTIONS = """
SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), obj_description(p.oid, 'pg_proc'), p.proacl::text
FROM pg_proc p WHERE p.pronamespace = 'oncelog'::regnamespace
"""
_RELATIONS = """
SELECT c.relname, c.relkind, CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) END, c.reloptions::text,
       obj_description(c.oid, 'pg_class'), c.relacl::text, c.relrowsecurity,
       (SELECT array_agg(a.attname || ': ' || coalesce(col_description(c.oid, a.attnum), '') ORDER BY a.attnum)
        FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)::text
FROM pg_class c WHERE c.relnamespace = 'oncelog'::regnamespace AND c.relkind IN ('r', 'v')
"""
_TRIGGERS = """
SELECT t.tgname, pg_get_triggerdef(t.oid), obj_description(t.oid, 'pg_trigger')
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace = 'oncelog'::regnamespace AND NOT t.tgisinternal
"""
_POLICIES = """
SELECT p.polname, p.polcmd, p.polroles::text, pg_get_expr(p.polqual, p.polrelid), obj_description(p.oid, 'pg_policy')
FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE c.relnamespace = 'oncelog'::regnamespace
"""


def _catalogue(conn: sa.Connection) -> dict[str, dict[str, tuple[Any, ...]]]:
    out: dict[str, dict[str, tuple[Any, ...]]] = {}
    for kind, query in (("function", _FUNCTIONS), ("relation", _RELATIONS), ("trigger", _TRIGGERS)):
        out[kind] = {row[0]: tuple(row[1:]) for row in conn.exec_driver_sql(query).all()}
    out["policy"] = {row[0]: tuple(row[1:]) for row in conn.exec_driver_sql(_POLICIES).all()}
    return out


def test_a_database_at_head_holds_exactly_what_the_sql_files_install(empty_db_url: str) -> None:
    engine = create_engine(empty_db_url)
    try:
        migrate.upgrade(engine)
        with engine.begin() as conn:
            migrated = _catalogue(conn)
            # Everything the files define goes: views and functions (with the triggers and the
            # policy that depend on them), and every grant on the tables.
            for name, (kind, *_rest) in migrated["relation"].items():
                if kind == "v":
                    conn.exec_driver_sql(f"DROP VIEW IF EXISTS {name} CASCADE")
            for signature in migrated["function"]:
                conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {signature} CASCADE")
            for name, (kind, *_rest) in migrated["relation"].items():
                if kind == "r":
                    conn.exec_driver_sql(f"REVOKE ALL ON {name} FROM oncelog_reader, oncelog_client, oncelog_admin")
            conn.exec_driver_sql("ALTER TABLE txn_history DISABLE ROW LEVEL SECURITY")
            emptied = _catalogue(conn)
            assert emptied["function"] == {} and emptied["trigger"] == {} and emptied["policy"] == {}
            driver = conn.connection.driver_connection
            assert driver is not None
            for name in sqltree.FILES:
                driver.execute(sqltree.text(name))  # as psql would: no parameters, many statements
            loaded = _catalogue(conn)
        for kind in migrated:
            assert loaded[kind].keys() == migrated[kind].keys(), kind
            for name, definition in migrated[kind].items():
                assert loaded[kind][name] == definition, f"{kind} {name}: store/sql differs from the migrations"
    finally:
        engine.dispose()


def test_every_sql_file_is_listed_and_every_listed_file_exists() -> None:
    present = {p.name[: -len(".sql")] for p in resources.files("oncelog.store").joinpath("sql").iterdir()}
    assert present == set(sqltree.FILES)
    for name in sqltree.FILES:
        assert sqltree.text(name).strip()
