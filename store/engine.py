"""Connections to the oncelog database.

The schema that holds oncelog's objects is configurable (default ``oncelog``). Every connection
made here sets ``search_path`` to that schema, so store code and the migrations name objects
unqualified and one installation can live beside another in the same database.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import create_async_engine

from oncelog.errors import ConfigurationError, DatabaseUnavailableError
from oncelog.store.errors import mapped_errors

logger = logging.getLogger(__name__)

DEFAULT_SCHEMA = "oncelog"
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def validate_schema(schema: str) -> str:
    """Return ``schema`` if it is a plain lower-case identifier, else raise ConfigurationError.

    Only plain identifiers are accepted, so the name can be written into DDL and ``search_path``
    without quoting rules becoming part of the security model.
    """
    # fullmatch: `$` would also match before a trailing newline.
    if not isinstance(schema, str) or not _SCHEMA_RE.fullmatch(schema):
        raise ConfigurationError(f"invalid schema name {schema!r}: use lower-case letters, digits and '_' (at most 63)")
    return schema


#: What a password is replaced with wherever a URL is shown.
MASK = "***"
# A connection parameter holding a secret: libpq's ``password`` and ``sslpassword`` (compared in
# lower case: libpq's own keywords are case-sensitive, but a masked look-alike costs nothing).
_SECRET_KEY = re.compile(r"password", re.IGNORECASE)
# In text that does not parse as a URL, the same secrets by pattern: a ``key=value`` pair (a libpq
# keyword/value string, or a query parameter: the value ends at whitespace, '&' or '#'; a quoted
# value at its closing quote) and the password of a URL's userinfo (up to the last '@', so a
# password with an unencoded '@' is masked whole).
_SECRET_PAIR = re.compile(r"(\b\w*password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|[^\s&#]*)", re.IGNORECASE)
_USERINFO_PASSWORD = re.compile(r"(://[^:/?#@\s]*:)\S*@")


def database_url(url: str | URL) -> URL:
    """Parse a PostgreSQL URL and pin the psycopg 3 driver.

    Accepts ``postgresql://``, ``postgres://`` and ``postgresql+psycopg://``; anything else
    (another scheme, a libpq keyword/value string, a malformed URL, not a string at all) is a
    ConfigurationError whose message shows the URL through :func:`redact`, never its password.
    """
    if isinstance(url, URL):
        parsed = url
    elif isinstance(url, str):
        try:
            parsed = make_url(_hosts_as_query(url))
        # ValueError: urllib and SQLAlchemy refuse some malformed URLs (a port that is not a
        # number, an unclosed IPv6 bracket) with it. `from None`: their messages quote the URL,
        # password included, and a chained exception is printed with every traceback.
        except (sa.exc.ArgumentError, ValueError):
            raise ConfigurationError(_invalid_url_message(url)) from None
    else:
        raise ConfigurationError(
            f"the database URL must be a str (postgresql://user@host:port/dbname), not {type(url).__name__}"
        )
    backend = parsed.get_backend_name()
    if backend not in ("postgresql", "postgres"):
        raise ConfigurationError(f"unsupported database URL scheme {backend!r}: oncelog needs postgresql://")
    if parsed.host and "@" in parsed.host:
        # An unencoded '@' in the password: SQLAlchemy splits at the first '@' and the rest of
        # the password would be taken for (and shown as) the host name.
        raise ConfigurationError(f"{_invalid_url_message(url)}; percent-encode '@' in the password as %40")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise ConfigurationError(f"invalid database URL {redact(parsed)}: port {parsed.port} is not 1 to 65535")
    for host, port in url_hosts(parsed):
        if not host or (port is not None and not 0 < port < 65536):
            raise ConfigurationError(f"invalid database URL {redact(parsed)}: a host is HOST or HOST:PORT (1 to 65535)")
    return parsed.set(drivername="postgresql+psycopg")


# The authority of a URL with several hosts: libpq's postgresql://user@h1:5432,h2:5433/db.
_MULTI_HOST = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^@/?#]*@)?(?P<hosts>[^/?#@]*,[^/?#@]*)(?P<rest>.*)$",
    re.DOTALL,
)


def _hosts_as_query(url: str) -> str:
    """libpq's multi-host URL (``postgresql://u@h1:5432,h2:5433/db``) in the form SQLAlchemy
    parses and psycopg's dialect passes on to libpq (``postgresql://u@/db?host=h1,h2&port=5432,5433``;
    a host without a port gets libpq's default); any other URL unchanged. libpq then tries the
    hosts in order, and ``target_session_attrs`` (``read-write``, ``primary``, ...) picks which
    of them it keeps."""
    match = _MULTI_HOST.match(url)
    if match is None:
        return url
    hosts, ports = [], []
    for entry in match["hosts"].split(","):
        item = entry.strip()
        if item.startswith("[") and "]" in item:  # [v6addr] or [v6addr]:port
            host, _, tail = item[1:].partition("]")
            port = tail.removeprefix(":")
        else:
            host, _, port = item.rpartition(":") if item.count(":") == 1 else (item, "", "")
        hosts.append(host)
        ports.append(port)
    rest, hash_, fragment = match["rest"].partition("#")
    path, _, query = rest.partition("?")
    added = f"host={quote_plus(','.join(hosts))}"
    if any(ports):
        added += f"&port={quote_plus(','.join(ports))}"
    query = f"{added}&{query}" if query else added
    return f"{match['scheme']}{match['userinfo'] or ''}{path or '/'}?{query}{hash_}{fragment}"


def url_hosts(url: URL) -> list[tuple[str, int | None]]:
    """The (host, port) pairs a URL names, in libpq's order: its one host, or the ``host`` query
    parameters (``host=h1,h2&port=5432,5433``, or ``host=h1:5432&host=h2:5433``). A port that
    is not a number is -1."""
    raw = url.query.get("host")
    if raw is None:
        return [] if url.host is None else [(url.host, url.port)]
    if isinstance(raw, tuple):  # host=h1:p1&host=h2:p2
        pairs = [item.rpartition(":")[::2] if ":" in item else (item, "") for item in raw]
        return [(h, _port(p) if p else None) for h, p in pairs]
    names = raw.split(",")
    port_text = url.query.get("port", "")
    ports = (port_text if isinstance(port_text, str) else ",".join(port_text)).split(",")
    if len(ports) == 1:
        ports = ports * len(names)
    return [(h, _port(p) if p else None) for h, p in zip(names, ports, strict=False)]


def _port(text: str) -> int:
    return int(text) if text.isdigit() else -1


def _invalid_url_message(url: str | URL) -> str:
    text = url if isinstance(url, str) else ""
    hint = "expected postgresql://user@host:port/dbname"
    if "://" not in text and "=" in text:
        hint += " (libpq keyword/value strings are not accepted; write the same settings as a URL)"
    return f"invalid database URL {redact(url)}: {hint}"


def redact(url: object) -> str:
    """The URL as text with every password replaced by ``***``, safe for reprs, logs and errors.

    The one masking helper of oncelog. It masks the password of the userinfo
    (``user:password@host``), query parameters named like ``password`` (``?password=``,
    ``&sslpassword=``, also percent-encoded), and, in text that is not a URL (a libpq
    keyword/value string such as ``host=db password=x``, a malformed URL), every
    ``...password=value`` pair and whatever stands between ``user:`` and ``@``.
    """
    if not isinstance(url, str | URL):
        return f"<not a database URL: {type(url).__name__}>"
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except (sa.exc.ArgumentError, ValueError):
        return _mask_text(str(url))
    if parsed.host and "@" in parsed.host:
        # An unencoded '@' in the password put part of it in the host: mask the text instead.
        return _mask_text(str(url))
    query = parsed.query
    base = parsed.set(query={}).render_as_string(hide_password=True)
    if not query:
        return base
    pairs = []
    for key, value in query.items():
        values = value if isinstance(value, tuple) else (value,)
        for v in values:
            shown = MASK if _SECRET_KEY.search(key) else quote_plus(v)
            pairs.append(f"{quote_plus(key)}={shown}")
    return f"{base}?{'&'.join(pairs)}"


def _mask_text(text: str) -> str:
    """Mask secrets by pattern in text that does not parse as a URL."""
    text = _USERINFO_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    return _SECRET_PAIR.sub(lambda m: f"{m.group(1)}{MASK}", text)


@dataclass(frozen=True)
class Timeouts:
    """How long a client lets one request take, applied to each of its connections.

    ``request_ms`` becomes the connection's ``statement_timeout`` and ``lock_timeout`` (the server
    cancels a statement that runs or waits for a lock longer, SQLSTATE 57014 / 55P03, mapped to
    RequestTimeoutError), libpq's ``connect_timeout`` and ``tcp_user_timeout`` (a connection whose
    sent data stays unacknowledged that long is dropped). TCP keepalives find a dead peer on an
    idle connection within ``keepalive_idle_s + keepalive_interval_s * keepalive_count``.

    None of these can bound a stalled network path whose TCP endpoint still answers (a proxy, a
    NAT, a hung server process): :func:`bounded` does that from the client side.
    """

    request_ms: int
    keepalive_idle_s: int = 10
    keepalive_interval_s: int = 3
    keepalive_count: int = 3

    @classmethod
    def for_request(cls, request_ms: float) -> Timeouts:
        """Limits for a client whose requests should each take at most ``request_ms``."""
        if not request_ms > 0:
            raise ConfigurationError("a request timeout must be positive")
        return cls(request_ms=max(1, math.ceil(request_ms)))

    def connect_args(self) -> dict[str, Any]:
        """libpq connection parameters (psycopg passes them through)."""
        return {
            # libpq takes whole seconds and treats anything below 2 as 2.
            "connect_timeout": max(2, math.ceil(self.request_ms / 1000)),
            "keepalives": 1,
            "keepalives_idle": self.keepalive_idle_s,
            "keepalives_interval": self.keepalive_interval_s,
            "keepalives_count": self.keepalive_count,
            "tcp_user_timeout": self.request_ms,
        }

    def options(self) -> str:
        """The ``-c`` settings for the server side of each connection."""
        return f"-c statement_timeout={self.request_ms} -c lock_timeout={self.request_ms}"


def create_engine(
    url: str | URL,
    *,
    schema: str = DEFAULT_SCHEMA,
    timeouts: Timeouts | None = None,
    event_loop: bool = False,
    **kwargs: Any,
) -> sa.Engine:
    """An engine whose connections use ``schema`` as their search_path.

    ``pg_temp`` is named last so a temporary table can never shadow an oncelog table. With
    ``timeouts``, every connection carries the client's statement and lock timeouts, keepalives
    and TCP user timeout (no timeouts for the migrations and maintenance scripts, which may
    legitimately run long).

    ``event_loop``: the engine of an :mod:`oncelog.aio` client, on psycopg's async connections.
    It is the synchronous face of SQLAlchemy's async engine, usable only inside a greenlet of
    the event loop (see :mod:`oncelog.store.runtime`); every store function takes its
    connections as it takes any other.
    """
    schema = validate_schema(schema)
    target = database_url(url)
    connect_args = dict(kwargs.pop("connect_args", {}))
    options = f"-c search_path={schema},pg_temp"
    if timeouts is not None:
        options = f"{options} {timeouts.options()}"
        for key, value in timeouts.connect_args().items():
            connect_args.setdefault(key, value)
    given = target.query.get("options")
    if given is not None:
        # libpq's options from the URL (``?options=-c synchronous_commit=local``) are kept, ours
        # after them: the last setting of a name wins, so search_path and the timeouts stay the
        # client's, and connect_args' options would replace the URL's altogether.
        options = " ".join([*((given,) if isinstance(given, str) else given), options])
        target = target.difference_update_query(["options"])
    connect_args.setdefault("options", options)
    if event_loop:
        async_engine = create_async_engine(
            target.set(drivername="postgresql+psycopg_async"),
            connect_args=connect_args,
            pool_pre_ping=True,
            **kwargs,
        )
        engine = async_engine.sync_engine
    else:
        engine = sa.create_engine(
            target,
            connect_args=connect_args,
            pool_pre_ping=True,
            **kwargs,
        )
    if timeouts is not None:
        request_ms = timeouts.request_ms

        @sa.event.listens_for(engine, "connect")
        def _note_timeout(dbapi_connection: Any, record: Any) -> None:
            # What the options above gave the session: set_request_timeout() need not SET it again.
            record.info[_TIMEOUT_KEY] = request_ms

        # A pool checkout pings the server first: on a stalled network that ping would wait for
        # ever, before the caller holds a connection it could bound. Cut it like any request (the
        # pool then discards the connection and opens another, bounded by connect_timeout).
        ping = engine.dialect.do_ping
        ping_bound = request_ms / 1000 + CLIENT_GRACE_S

        def bounded_ping(dbapi_connection: Any) -> bool:
            fd = _driver_fd(dbapi_connection)
            if fd is None:
                return bool(ping(dbapi_connection))
            deadline = time.monotonic() + ping_bound
            caller = _CALLER_DEADLINE.get()
            token = _WATCHDOG.arm(fd, deadline if caller is None else min(deadline, caller))
            try:
                return bool(ping(dbapi_connection))
            finally:
                _WATCHDOG.disarm(token)

        engine.dialect.do_ping = bounded_ping  # type: ignore[method-assign]

        @sa.event.listens_for(engine, "do_connect")
        def _caller_connect_timeout(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> None:
            # A connection opened for a caller with a deadline (a poll) gives up by then; libpq
            # counts whole seconds, at least 2.
            caller = _CALLER_DEADLINE.get()
            if caller is not None:
                left = max(2, math.ceil(caller - time.monotonic()))
                cparams["connect_timeout"] = min(int(cparams.get("connect_timeout", left)), left)

    return engine


#: How long after its server-side timeout (which the server enforces itself) a request's
#: connection is cut by the client: the margin for the answer to travel back.
CLIENT_GRACE_S = 0.5

#: The deadline (time.monotonic()) of the caller's call in progress on this thread, if it set one
#: (:func:`caller_deadline`): pool pings and new connections made for it end by then too.
_CALLER_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("oncelog_deadline", default=None)


@contextlib.contextmanager
def caller_deadline(seconds: float | None) -> Iterator[None]:
    """Within the block, getting a connection (a pool checkout's ping, a new connection) is
    bounded by ``seconds`` from now (None: by the engine's timeouts only); see :func:`bounded`
    for the requests on it."""
    if seconds is None:
        yield
        return
    token = _CALLER_DEADLINE.set(time.monotonic() + max(seconds, 0.0))
    try:
        yield
    finally:
        _CALLER_DEADLINE.reset(token)


#: conn.info key: the statement/lock timeout (ms) this connection's session has now.
_TIMEOUT_KEY = "oncelog.request_timeout_ms"


def set_request_timeout(conn: sa.Connection, timeout_ms: int) -> None:
    """Give ``conn``'s session this statement_timeout and lock_timeout (milliseconds, >= 1).

    Session-level, because the clients' connections are in autocommit (``SET LOCAL`` would end with
    the SET's own transaction); remembered on the pooled connection so the SET is sent only when
    the value changes (a producer's batches nearing their delivery deadline), never per request.
    """
    timeout_ms = max(1, int(timeout_ms))
    if conn.info.get(_TIMEOUT_KEY) == timeout_ms:
        return
    with mapped_errors():
        conn.exec_driver_sql(
            "SELECT set_config('statement_timeout', %(ms)s, false), set_config('lock_timeout', %(ms)s, false)",
            {"ms": f"{timeout_ms}ms"},
        )
    conn.info[_TIMEOUT_KEY] = timeout_ms


class _Watchdog:
    """One daemon thread that cuts the sockets of requests past their client-side deadline.

    A stalled network whose TCP endpoint still acknowledges (a proxy, a NAT box, a server host
    whose PostgreSQL process hangs) never trips statement_timeout (the server has no query) nor
    tcp_user_timeout (the data is acknowledged): only the client can give up. Shutting the socket
    down makes libpq's blocked read fail at once, on whatever thread waits in it, without touching
    the connection object from this thread. Registering is a dict insert under a lock (no thread
    start, no wake-up per request), so it costs a request a few microseconds; the thread looks
    every ``_TICK`` seconds, which is the precision of the bound. The bound counts time the
    process ran: a stopped and resumed process gets its answer, not a cut connection.
    """

    _TICK = 0.05
    #: A tick this much later than asked means the process did not run in between (SIGSTOP, a
    #: paused VM, a laptop asleep), not that the network stalled: see _run().
    _PAUSE = 0.25

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._due: dict[int, tuple[float, int, int]] = {}  # token -> (deadline, socket fd, its inode)
        self._fired: set[int] = set()
        self._next = 0
        self._thread: threading.Thread | None = None

    def arm(self, fd: int, deadline: float) -> int:
        try:
            inode = os.fstat(fd).st_ino
        except OSError:
            inode = -1  # already closed: shutting it down later would fail harmlessly
        with self._lock:
            self._next += 1
            token = self._next
            self._due[token] = (deadline, fd, inode)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="oncelog-watchdog", daemon=True)
                self._thread.start()
            return token

    def disarm(self, token: int) -> bool:
        """Forget ``token``; True if its deadline had fired (the connection was cut)."""
        with self._lock:
            self._due.pop(token, None)
            if token in self._fired:
                self._fired.discard(token)
                return True
            return False

    def _run(self) -> None:
        last = time.monotonic()
        while True:
            time.sleep(self._TICK)
            now = time.monotonic()
            paused = now - last - self._TICK
            last = now
            with self._lock:
                if paused > self._PAUSE:
                    # The whole process was stopped: an answer that arrived meanwhile sits unread
                    # in the socket, and the waiting thread resumes with this one. Time the
                    # process did not run is not the network's: every deadline moves by it, so a
                    # frozen and resumed client (a zombie producer) reads its answer instead of
                    # failing with a cut connection (DatabaseUnavailableError).
                    self._due = {t: (d + paused, fd, ino) for t, (d, fd, ino) in self._due.items()}
                # Cut under the lock: disarm() cannot return (and the fd be closed and reused by
                # another connection) while the socket is being shut down.
                for token, (deadline, fd, inode) in list(self._due.items()):
                    if now >= deadline:
                        del self._due[token]
                        self._fired.add(token)
                        _shutdown(fd, inode)


def _shutdown(fd: int, inode: int) -> None:
    try:
        if os.fstat(fd).st_ino != inode:
            # The driver closed the connection in the meantime (an error inside the bounded
            # block) and the descriptor now names another socket: not ours to cut.
            return
        # A duplicate descriptor: shutting it down shuts the shared socket (so libpq's read ends),
        # closing it leaves libpq's own descriptor open for libpq to close.
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        logger.debug("could not shut down socket %s", fd, exc_info=True)


_WATCHDOG = _Watchdog()


def _driver_fd(driver: Any) -> int | None:
    # The pool hands the ping SQLAlchemy's adapter of an async connection (oncelog.aio): its
    # driver_connection is psycopg's.
    driver = getattr(driver, "driver_connection", driver)
    try:
        return int(driver.pgconn.socket) if driver is not None else None
    except Exception:  # a closed or broken connection has no socket: nothing to watch
        return None


def _socket_fd(conn: sa.Connection) -> int | None:
    try:
        driver = conn.connection.driver_connection
    except Exception:  # an invalidated connection: nothing to watch
        return None
    return _driver_fd(driver)


@contextlib.contextmanager
def discarded_if_lost(conn: sa.Connection) -> Iterator[sa.Connection]:
    """``conn`` for a block of store calls; should one of them find it lost (a
    DatabaseUnavailableError: the server closed it, or :func:`bounded` cut it), it is
    invalidated, so that closing it does not hand it back to the pool, whose reset of a dead
    connection fails and logs a traceback for every request that was on one."""
    try:
        yield conn
    except DatabaseUnavailableError:
        conn.invalidate()
        raise


@contextlib.contextmanager
def bounded(conn: sa.Connection, seconds: float | None) -> Iterator[None]:
    """Give up on ``conn`` after ``seconds`` (None: no bound) of the block, whatever the network does.

    Past the deadline the connection is cut and the block's database call fails with
    DatabaseUnavailableError (retriable; as for any lost connection, the outcome of a write in
    flight is unknown and the connection is unusable: discard it).
    """
    fd = _socket_fd(conn) if seconds is not None else None
    if fd is None or seconds is None:
        yield
        return
    token = _WATCHDOG.arm(fd, time.monotonic() + max(seconds, 0.0))
    fired = False
    try:
        yield
    except DatabaseUnavailableError as exc:
        fired = _WATCHDOG.disarm(token)
        if fired:
            raise DatabaseUnavailableError(f"no answer from the database within {seconds:.3g} s") from exc
        raise
    finally:
        if not fired:
            _WATCHDOG.disarm(token)
