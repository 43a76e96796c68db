"""Migrations are reversible and match the models; the schema documents itself."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sqlalchemy as sa

from oncelog.errors import SchemaNotReadyError
from oncelog.store import create_engine, migrate
from oncelog.store.migrate import SchemaDriftError
from oncelog.store.schema import metadata


def _objects(conn: sa.Connection, schema: str) -> dict[str, set[str]]:
    """Every object in ``schema``, by kind, that a migration may create."""
    q = {
        "relations": "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = :s",
        "functions": "SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = :s",
        "types": "SELECT typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
        "WHERE n.nspname = :s AND t.typtype NOT IN ('c', 'b') ",
    }
    return {k: set(conn.execute(sa.text(v), {"s": schema}).scalars()) for k, v in q.items()}


@pytest.mark.parametrize("schema", ["oncelog", "tenant_b"])
def test_round_trip(empty_db_url: str, schema: str) -> None:
    engine = create_engine(empty_db_url, schema=schema)
    try:
        assert migrate.current(engine, schema=schema) is None
        migrate.upgrade(engine, schema=schema)
        assert migrate.current(engine, schema=schema) == migrate.head()
        migrate.check(engine, schema=schema)
        with engine.connect() as conn:
            installed = _objects(conn, schema)
        assert {t.name for t in metadata.sorted_tables} <= installed["relations"]
        assert "txn_transition_v1" in installed["functions"]

        migrate.downgrade(engine, schema=schema, revision="base")
        assert migrate.current(engine, schema=schema) is None
        with engine.connect() as conn:
            left = _objects(conn, schema)
        # Only alembic's own version table (and its index) may stay behind.
        assert left["relations"] <= {"alembic_version", "alembic_version_pkc"}
        assert left["functions"] == set()
        assert left["types"] == set()

        migrate.upgrade(engine, schema=schema)
        migrate.check(engine, schema=schema)
        with engine.connect() as conn:
            assert _objects(conn, schema) == installed
    finally:
        engine.dispose()


def test_check_writes_nothing_to_stdout(db_url: str) -> None:
    """Callers own stdout (``oncelog verify --json`` prints JSON there): run in a process of its
    own, since alembic binds sys.stdout when it is imported."""
    code = "import sys; from oncelog.store import create_engine, migrate; migrate.check(create_engine(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", code, db_url], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_check_reports_drift(engine: sa.Engine) -> None:
    migrate.check(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE topics ADD COLUMN surprise integer")
    with pytest.raises(SchemaDriftError) as info:
        migrate.check(engine)
    assert "surprise" in str(info.value)


def test_check_reports_missing_constraint(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE topics DROP CONSTRAINT uq_topics_name")
    with pytest.raises(SchemaDriftError):
        migrate.check(engine)


def test_check_on_unmigrated_database(empty_db_url: str) -> None:
    engine = create_engine(empty_db_url)
    try:
        with pytest.raises(SchemaNotReadyError, match="oncelog db upgrade"):
            migrate.check(engine)
    finally:
        engine.dispose()


def test_every_table_and_column_has_a_comment(engine: sa.Engine) -> None:
    in_schema = (
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'oncelog' AND c.relkind IN ('r', 'v', 'm')"
    )
    with engine.connect() as conn:
        tables = (
            conn.execute(sa.text(f"SELECT c.relname {in_schema} AND obj_description(c.oid, 'pg_class') IS NULL"))
            .scalars()
            .all()
        )
        columns = (
            conn.execute(
                sa.text(
                    "SELECT c.relname || '.' || a.attname FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
                    "WHERE n.nspname = 'oncelog' AND c.relkind IN ('r', 'v', 'm') "
                    "AND col_description(c.oid, a.attnum) IS NULL"
                )
            )
            .scalars()
            .all()
        )
        functions = (
            conn.execute(
                sa.text(
                    "SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                    "WHERE n.nspname = 'oncelog' AND obj_description(p.oid, 'pg_proc') IS NULL"
                )
            )
            .scalars()
            .all()
        )
    assert tables == []
    assert columns == []
    assert functions == []


def test_functions_pin_their_search_path(engine: sa.Engine) -> None:
    """Every function runs with the schema it was installed in, whatever the caller's search_path."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT proname, proconfig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'oncelog'"
            )
        ).all()
    assert rows
    for name, config in rows:
        assert config is not None and "search_path=oncelog, pg_temp" in config, name
