"""Head equals the tree: a database migrated to head holds exactly what ``store/sql`` installs.

Every function (its whole definition as PostgreSQL prints it: arguments, result, language,
security, volatility, settings, body), its comment and its grants; every view (query, options,
comments of the view and its columns, grants); every trigger and policy with its comment; every
table's grants and row-level security. The migrations install them; then the test drops them all,
loads the files instead, and compares the catalogue before and after.
"""

from __future__ import annotations

from importlib import resources

from oncelog.store import create_engine, migrate, sqltree
from tests.support.catalogue import catalogue, differences


def test_a_database_at_head_holds_exactly_what_the_sql_files_install(empty_db_url: str) -> None:
    engine = create_engine(empty_db_url)
    try:
        migrate.upgrade(engine)
        with engine.begin() as conn:
            migrated = catalogue(conn)
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
            emptied = catalogue(conn)
            assert emptied["function"] == {} and emptied["trigger"] == {} and emptied["policy"] == {}
            driver = conn.connection.driver_connection
            assert driver is not None
            for name in sqltree.FILES:
                driver.execute(sqltree.text(name))  # as psql would: no parameters, many statements
            loaded = catalogue(conn)
        assert differences(migrated, loaded) == [], "store/sql differs from the migrations at head"
    finally:
        engine.dispose()


def test_every_sql_file_is_listed_and_every_listed_file_exists() -> None:
    present = {p.name[: -len(".sql")] for p in resources.files("oncelog.store").joinpath("sql").iterdir()}
    assert present == set(sqltree.FILES)
    for name in sqltree.FILES:
        assert sqltree.text(name).strip()
