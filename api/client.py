"""What every client (Producer, Consumer, Admin) shares: its engine and a safe repr."""

from __future__ import annotations

from typing import Any, Self

import sqlalchemy as sa

from oncelog.store import create_engine, redact
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.store.errors import mapped_errors


class Client:
    """A connection pool to one oncelog schema; a context manager that closes it."""

    def __init__(self, database_url: str, *, schema: str = DEFAULT_SCHEMA, pool_size: int = 2, **engine_kwargs: Any):
        self._url_redacted = redact(database_url)
        self._schema = schema
        self._engine: sa.Engine = create_engine(
            database_url, schema=schema, pool_size=pool_size, max_overflow=8, **engine_kwargs
        )
        self._closed = False

    @property
    def schema(self) -> str:
        """The schema holding oncelog's objects."""
        return self._schema

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._url_redacted!r}, schema={self._schema!r})"

    def _connect(self) -> sa.Connection:
        """A pooled connection in autocommit: each protocol call is its own database transaction."""
        with mapped_errors():  # a refused or dropped connection is a retriable DatabaseUnavailableError
            return self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")

    def close(self) -> None:
        """Release the connection pool."""
        if not self._closed:
            self._closed = True
            self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
