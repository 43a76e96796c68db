"""alembic environment: one connection, one schema, one transaction.

The connection and schema normally come injected by :mod:`oncelog.store.migrate`
(``config.attributes``). Run through the plain alembic CLI instead, it reads the URL from
``sqlalchemy.url`` or ``ONCELOG_DATABASE_URL`` and the schema from ``-x schema=NAME``.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Connection

from oncelog.errors import ConfigurationError
from oncelog.store.engine import DEFAULT_SCHEMA, create_engine, validate_schema
from oncelog.store.schema import metadata

config = context.config


def _schema() -> str:
    name = config.attributes.get("schema") or context.get_x_argument(as_dictionary=True).get("schema")
    return validate_schema(name or DEFAULT_SCHEMA)


def _run(connection: Connection, schema: str) -> None:
    # The schema must exist before alembic creates its version table inside it. SET LOCAL keeps
    # the search_path change inside this transaction, so an injected connection is left as it was;
    # SQL functions created with "SET search_path FROM CURRENT" pin this value.
    connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    connection.exec_driver_sql(f"SET LOCAL search_path TO {schema}, pg_temp")
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # The version table lives in the schema through search_path; naming the schema here
        # would make autogenerate mistake the table for an unknown one.
        version_table_schema=None,
        include_schemas=False,
        compare_type=True,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations(schema=schema)


def run_migrations_online() -> None:
    """Run the migrations on the injected connection, or on one made from the URL."""
    schema = _schema()
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection, schema)
        return
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("ONCELOG_DATABASE_URL")
    if not url:
        raise ConfigurationError("no database: set ONCELOG_DATABASE_URL or sqlalchemy.url")
    engine = create_engine(url, schema=schema)
    try:
        with engine.begin() as conn:
            _run(conn, schema)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise ConfigurationError("offline (--sql) migrations are not supported; run against a database")
run_migrations_online()
