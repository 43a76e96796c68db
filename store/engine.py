"""Connections to the oncelog database.

The schema that holds oncelog's objects is configurable (default ``oncelog``). Every connection
made here sets ``search_path`` to that schema, so store code and the migrations name objects
unqualified and one installation can live beside another in the same database.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from oncelog.errors import ConfigurationError

DEFAULT_SCHEMA = "oncelog"
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def validate_schema(schema: str) -> str:
    """Return ``schema`` if it is a plain lower-case identifier, else raise ConfigurationError.

    Only plain identifiers are accepted, so the name can be written into DDL and ``search_path``
    without quoting rules becoming part of the security model.
    """
    if not _SCHEMA_RE.match(schema):
        raise ConfigurationError(f"invalid schema name {schema!r}: use lower-case letters, digits and '_' (at most 63)")
    return schema


def database_url(url: str | URL) -> URL:
    """Parse a PostgreSQL URL and pin the psycopg 3 driver.

    Accepts ``postgresql://``, ``postgres://`` and ``postgresql+psycopg://``; anything else is a
    ConfigurationError (the message never contains the password).
    """
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except sa.exc.ArgumentError as exc:
        raise ConfigurationError("invalid database URL (expected postgresql://user@host:port/dbname)") from exc
    backend = parsed.get_backend_name()
    if backend not in ("postgresql", "postgres"):
        raise ConfigurationError(f"unsupported database URL scheme {backend!r}: oncelog needs postgresql://")
    return parsed.set(drivername="postgresql+psycopg")


def redact(url: str | URL) -> str:
    """The URL as text with any password replaced by ``***``, safe for logs and errors."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except sa.exc.ArgumentError:
        return "<invalid database URL>"
    return parsed.render_as_string(hide_password=True)


def create_engine(url: str | URL, *, schema: str = DEFAULT_SCHEMA, **kwargs: Any) -> sa.Engine:
    """An engine whose connections use ``schema`` as their search_path.

    ``pg_temp`` is named last so a temporary table can never shadow an oncelog table.
    """
    schema = validate_schema(schema)
    connect_args = dict(kwargs.pop("connect_args", {}))
    connect_args.setdefault("options", f"-c search_path={schema},pg_temp")
    return sa.create_engine(
        database_url(url),
        connect_args=connect_args,
        pool_pre_ping=True,
        **kwargs,
    )
