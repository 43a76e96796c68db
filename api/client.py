"""What every client (Producer, Consumer, Admin) shares: its engine and a safe repr."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, Self

import sqlalchemy as sa

from oncelog import kafka_config, validate
from oncelog.errors import ConfigurationError
from oncelog.store import create_engine, redact
from oncelog.store.engine import CLIENT_GRACE_S, DEFAULT_SCHEMA, Timeouts, bounded
from oncelog.store.errors import mapped_errors

#: Kafka's request.timeout.ms default: how long one request of a client may take, unless it says.
DEFAULT_REQUEST_TIMEOUT_MS = 30_000


class Client:
    """A connection pool to one oncelog schema; a context manager that closes it."""

    #: Whether the client's calls run on an asyncio event loop (:mod:`oncelog.aio`): its engine
    #: is then on psycopg's async connections, used from greenlets of the loop.
    _event_loop = False

    def __init__(
        self,
        database_url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        pool_size: int = 2,
        request_timeout_ms: float | None = DEFAULT_REQUEST_TIMEOUT_MS,
        client_id: str | None = None,
        **engine_kwargs: Any,
    ):
        """``client_id`` (Kafka's ``client.id``) names the client's connections to the server: it
        is their ``application_name``, shown in ``pg_stat_activity`` and the server's log (which
        keep its first 63 bytes)."""
        validate.optional_text("client_id", client_id, error=ConfigurationError)
        if client_id is not None:
            connect_args = dict(engine_kwargs.pop("connect_args", {}))
            connect_args.setdefault("application_name", client_id)
            engine_kwargs["connect_args"] = connect_args
        self.client_id = client_id
        self._url_redacted = redact(database_url)
        self._schema = schema
        # Every connection carries the client's own bound on one request (statement and lock
        # timeouts, keepalives, TCP user timeout), so no call waits unbounded on a lock or a
        # dead peer; None leaves the server's defaults (no bound).
        self._timeouts = None if request_timeout_ms is None else Timeouts.for_request(request_timeout_ms)
        self._engine: sa.Engine = create_engine(
            database_url,
            schema=schema,
            timeouts=self._timeouts,
            event_loop=self._event_loop,
            pool_size=pool_size,
            max_overflow=8,
            **engine_kwargs,
        )
        self._closed = False

    @classmethod
    def from_config(cls, database_url: str, config: Mapping[str, Any], **overrides: Any) -> Self:
        """A client configured the way Kafka's clients are: ``config`` maps Kafka's names
        (``linger.ms``, ``transactional.id``, ``group.id``, ``isolation.level``, ...) or this
        client's keywords to values; ``overrides`` are keywords given beside it. A key this client
        does not take, a broker-only setting (``bootstrap.servers``) and a setting it cannot honour
        (``acks=1``) raise ConfigurationError naming the key (:mod:`oncelog.kafka_config`).

        >>> producer = Producer.from_config(url, {"linger.ms": 5, "transactional.id": "billing-1"})
        """
        return cls(database_url, **kafka_config.with_overrides(config, overrides, cls, cls.__name__))

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

    @contextlib.contextmanager
    def _request(self, waits: float = 0.0) -> Iterator[sa.Connection]:
        """A connection for one request, cut if the request outlives the request timeout (the
        server cancels a statement at that timeout itself; this bounds a stalled network).
        ``waits``: seconds the caller may legitimately spend in the block beyond one request
        (a client-side wait between statements), added to the bound."""
        bound = None if self._timeouts is None else self._timeouts.request_ms / 1000 + CLIENT_GRACE_S + waits
        with self._connect() as conn, bounded(conn, bound):
            yield conn

    def close(self) -> None:
        """Release the connection pool."""
        if not self._closed:
            self._closed = True
            self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
