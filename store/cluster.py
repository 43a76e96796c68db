"""Server-level SQL: databases inside a PostgreSQL cluster (not oncelog's own schema).

Used by the embedded server to create the oncelog database and by the test suite to clone a
migrated template database per test.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy.engine import URL

from oncelog.errors import ConfigurationError
from oncelog.store.engine import database_url

_DBNAME_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _dbname(name: str) -> str:
    if not _DBNAME_RE.match(name):
        raise ConfigurationError(f"invalid database name {name!r}")
    return name


def _admin_engine(url: str | URL) -> sa.Engine:
    # CREATE/DROP DATABASE cannot run inside a transaction block.
    return sa.create_engine(
        database_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool
    )


def database_exists(url: str | URL, name: str) -> bool:
    """Whether the cluster behind ``url`` has a database ``name``."""
    engine = _admin_engine(url)
    try:
        with engine.connect() as conn:
            return bool(conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).scalar())
    finally:
        engine.dispose()


def create_database(url: str | URL, name: str, *, template: str | None = None, exist_ok: bool = False) -> None:
    """Create database ``name`` (optionally as a copy of ``template``) in the cluster behind ``url``."""
    name = _dbname(name)
    if exist_ok and database_exists(url, name):
        return
    # FILE_COPY copies the template's files directly: for small templates it is much faster
    # than the default WAL_LOG strategy, and it is what makes a fresh database per test cheap.
    clause = f" TEMPLATE {_dbname(template)} STRATEGY FILE_COPY" if template else ""
    engine = _admin_engine(url)
    try:
        with engine.connect() as conn:
            try:
                conn.exec_driver_sql(f"CREATE DATABASE {name}{clause}")
            except sa.exc.ProgrammingError as exc:
                if not (exist_ok and getattr(exc.orig, "sqlstate", None) == "42P04"):
                    raise
    finally:
        engine.dispose()


def drop_database(url: str | URL, name: str) -> None:
    """Drop database ``name`` if it exists, disconnecting its sessions first."""
    engine = _admin_engine(url)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {_dbname(name)} WITH (FORCE)")
    finally:
        engine.dispose()
