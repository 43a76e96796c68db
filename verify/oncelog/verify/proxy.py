"""The fault-injecting TCP proxy of ``oncelog verify``.

:class:`FaultProxy` sits between the clients and PostgreSQL. Idempotent producers exist because a
network can lose a request *or* its reply, and the client cannot tell which happened; the proxy
reproduces exactly those situations against a real server::

    with FaultProxy("127.0.0.1", pg_port) as proxy:
        conn = psycopg.connect(proxy.url_for(url), autocommit=True)
        proxy.cut_after_next_reply(precise=True)
        conn.execute("INSERT ...")      # raises OperationalError, yet the row is committed

The nemesis that schedules faults through it is :mod:`oncelog.verify.faults`.

The proxy's semantics, in one place:

* The proxy listens on 127.0.0.1 only. It connects only to a loopback upstream unless built with
  ``allow_remote=True`` (``oncelog verify`` against a user's server elsewhere).
* Each client connection gets its own upstream connection and two daemon pump threads (one per
  direction); an accept thread serves the listener. Every blocking call has a short timeout so a
  pump notices shutdown promptly, and ``close()`` joins all of them.
* ``cut_after_next_reply`` and ``cut_before_next_request`` are one-shot. They are claimed by the
  *first* matching event on *any* connection whose session is established (the server has sent
  its first ReadyForQuery, i.e. startup and authentication are over). Arming one and then opening
  a connection therefore hits that connection's first query, not its handshake. If the same fault
  is armed twice before it fires, it still fires once.
* A "cut" resets the connection: both sockets are shut down and then closed with ``SO_LINGER`` 0,
  so the client sees the server vanish and the server sees the client vanish. Bytes already handed
  to the kernel may or may not arrive, as with a real reset.
* ``stall`` is a window of time, not an event: while it lasts every chunk either pump reads is
  held before being forwarded (on all connections, old and new). The kernel still buffers what
  peers send, so a peer's ``send`` usually succeeds during a stall; only delivery is delayed.
* ``cut_all`` and ``block_new_connections`` act immediately / while set.

Protocol awareness (needed for the precise mode and to know when a session is established): the
proxy follows the server->client byte stream as PostgreSQL messages (type byte + int32 length).
The startup phase is special: the client's first packets carry no type byte, and the server answers
an SSLRequest/GSSENCRequest with one bare byte ('N', 'S' or 'G'). The proxy tracks the client's
startup packets to know when such a bare byte is owed. If the server accepts encryption ('S'/'G')
the stream becomes opaque: the proxy cannot see message boundaries, so request/reply faults fire on
the next raw bytes of that connection (possibly mid-handshake) and the precise mode degrades to the
simple one. **Clients should use ``sslmode=disable``** (and ``gssencmode=disable`` where GSSAPI is
configured); a server without SSL answers 'N', which the proxy handles, so ``prefer`` also works.

Prepared statements: psycopg prepares a query on its 5th execution on a connection (the default
``prepare_threshold``), sending an extra Parse/Sync round trip *before* the real request. That
round trip claims a one-shot fault, so a "reply lost" fault silently becomes a fault on the
preparation. Tests that arm faults on a long-lived connection should connect with
``prepare_threshold=None`` (or count executions) so the fault lands on the request they mean.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import logging
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, Self
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = [
    "FAULT_CUT_AFTER_REPLY",
    "FAULT_CUT_ALL",
    "FAULT_CUT_BEFORE_REQUEST",
    "FAULT_STALL",
    "FaultProxy",
    "ProxyStats",
]

_LOG = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
_CHUNK = 65536
# How often a blocked pump or the accept loop re-checks for shutdown. Shutdown also wakes them
# directly (socket.shutdown), so this only bounds the worst case.
_POLL_SECONDS = 0.2
_CONNECT_TIMEOUT_SECONDS = 5.0
_JOIN_TIMEOUT_SECONDS = 5.0

# Codes of the untyped packets a client may send before its StartupMessage.
_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_CANCEL_REQUEST = 80877102
# Anything longer than this in the startup phase is not PostgreSQL; stop interpreting the stream.
_MAX_STARTUP_PACKET = 10_000

_READY_FOR_QUERY = ord("Z")
_COPY_IN_RESPONSE = ord("G")
_COPY_BOTH_RESPONSE = ord("W")
# Server messages the proxy reacts to; others are skipped without being reported (cheap on big
# results made of many DataRow messages).
_INTERESTING = frozenset({_READY_FOR_QUERY, _COPY_IN_RESPONSE, _COPY_BOTH_RESPONSE})

# Keys of ProxyStats.faults_fired.
FAULT_CUT_AFTER_REPLY = "cut_after_next_reply"
FAULT_CUT_BEFORE_REQUEST = "cut_before_next_request"
FAULT_STALL = "stall"
FAULT_CUT_ALL = "cut_all"


@dataclass(frozen=True)
class ProxyStats:
    """A consistent snapshot of what the proxy has done so far."""

    connections_accepted: int
    """Client connections accepted and proxied (refused ones are not counted here)."""
    connections_refused: int
    """Connections accepted then closed at once because of ``block_new_connections(True)``."""
    connections_open: int
    """Proxied connections whose pumps have not finished yet."""
    upstream_failures: int
    """Accepted connections dropped because the upstream server could not be reached."""
    bytes_client_to_server: int
    """Bytes forwarded (or being forwarded) from clients to the server."""
    bytes_server_to_client: int
    """Bytes forwarded (or being forwarded) from the server to clients."""
    bytes_dropped: int
    """Bytes read by the proxy and discarded by a fault (either direction)."""
    chunks_stalled: int
    """Chunks that had to wait for a stall to end before being forwarded."""
    faults_fired: Mapping[str, int] = field(default_factory=dict)
    """How often each fault fired: ``cut_after_next_reply`` / ``cut_before_next_request`` (times
    a connection was cut), ``stall`` (calls), ``cut_all`` (connections cut)."""


class _ProtocolDesync(Exception):
    """The byte stream does not look like the PostgreSQL protocol."""


class _StartupFramer:
    """Follows the untyped packets a client sends before (and including) its StartupMessage."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.done = False

    def feed(self, data: bytes) -> list[int]:
        """Consume client bytes; return the request codes of the startup packets completed."""
        if self.done:
            return []
        self._buf += data
        codes: list[int] = []
        while len(self._buf) >= 8:
            length, code = struct.unpack_from("!ii", self._buf)
            if not 8 <= length <= _MAX_STARTUP_PACKET:
                raise _ProtocolDesync(f"startup packet length {length}")
            if len(self._buf) < length:
                break
            del self._buf[:length]
            codes.append(code)
            if code not in (_SSL_REQUEST, _GSSENC_REQUEST, _CANCEL_REQUEST):
                # A StartupMessage: everything after it is typed messages, which the proxy does
                # not need to interpret on the client side.
                self.done = True
                self._buf.clear()
                break
        return codes


class _BackendFramer:
    """Splits the server->client stream into messages, incrementally and without copying bodies."""

    def __init__(self) -> None:
        self.bare_bytes_owed = 0
        """Single-byte answers (to SSLRequest/GSSENCRequest) expected before the next message."""
        self.encrypted = False
        self._header = bytearray()
        self._body_left = 0
        self._type = 0

    def feed(self, data: bytes) -> list[tuple[int, int]]:
        """Consume server bytes; return ``(type, end offset in data)`` of interesting messages.

        A bare answer byte is reported with its own value as the type (e.g. ``ord('N')``). After
        an 'S'/'G' answer the rest of the stream is encrypted and nothing more is reported.
        """
        events: list[tuple[int, int]] = []
        i, n = 0, len(data)
        while i < n and not self.encrypted:
            if self._body_left:
                take = min(self._body_left, n - i)
                i += take
                self._body_left -= take
                if not self._body_left and self._type in _INTERESTING:
                    events.append((self._type, i))
                continue
            if self.bare_bytes_owed and not self._header:
                self.bare_bytes_owed -= 1
                answer = data[i]
                i += 1
                events.append((answer, i))
                if answer != ord("N"):
                    self.encrypted = True
                continue
            need = 5 - len(self._header)
            self._header += data[i : i + need]
            i += min(need, n - i)
            if len(self._header) < 5:
                break
            self._type = self._header[0]
            length = int.from_bytes(self._header[1:5], "big")
            self._header.clear()
            if length < 4:
                raise _ProtocolDesync(f"message {chr(self._type)!r} length {length}")
            self._body_left = length - 4
            if not self._body_left and self._type in _INTERESTING:
                events.append((self._type, i))
        return events


class _Connection:
    """One proxied client connection and its upstream connection."""

    def __init__(self, cid: int, client: socket.socket, server: socket.socket) -> None:
        self.id = cid
        self.client = client
        self.server = server
        # Guards the protocol-tracking state below, shared by the two pumps.
        self.lock = threading.Lock()
        self.startup = _StartupFramer()
        self.backend = _BackendFramer()
        self.established = False
        """The server has sent its first ReadyForQuery: startup and authentication are over."""
        self.opaque = False
        """Message boundaries are invisible (encrypted or unparseable stream)."""
        # Precise cut_after_next_reply state; guarded by the proxy's lock, not self.lock.
        self.withholding = False
        self.withheld = bytearray()
        self._shut = False
        self._closed = False
        self._pumps_left = 2

    @property
    def is_shut(self) -> bool:
        return self._shut

    def eligible(self) -> bool:
        """Whether request/reply faults may fire on this connection now."""
        with self.lock:
            return self.established or self.opaque

    def shutdown(self, *, reset: bool) -> bool:
        """End the connection for both peers and wake both pumps; return False if already done.

        Only ``shutdown`` is used here, never ``close``: the pumps may be inside ``recv``/``send`` on
        these sockets, and closing a descriptor under another thread risks it being reused. The
        last pump to exit closes the sockets (see :meth:`pump_finished`).
        """
        with self.lock:
            if self._shut:
                return False
            self._shut = True
        for sock in (self.client, self.server):
            if reset:
                # Linger 0 turns the eventual close() into a RST: an abrupt network failure.
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return True

    def pump_finished(self) -> bool:
        """Record that one pump exited; close the sockets after the second. True when closed."""
        with self.lock:
            self._pumps_left -= 1
            last = self._pumps_left == 0
        if last:
            self.close_sockets()
        return last

    def close_sockets(self) -> None:
        """Close both sockets (idempotent)."""
        with self.lock:
            if self._closed:
                return
            self._closed = True
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.close()


def _upstream_address(host: str, allow_remote: bool) -> str:
    """The address to connect to: any host with ``allow_remote``, else a loopback IP only."""
    if allow_remote:
        if not host:
            raise ValueError("upstream host must not be empty")
        return host
    return _loopback_address(host)


def _loopback_address(host: str) -> str:
    """The loopback IP to connect to for ``host``; refuse anything else (no DNS lookups)."""
    if host == "localhost":
        return LOOPBACK
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"upstream host must be 'localhost' or a loopback IP, not {host!r}") from None
    if not addr.is_loopback:
        raise ValueError(f"upstream host must be a loopback address, not {host!r}")
    return str(addr)


class FaultProxy:
    """TCP proxy on 127.0.0.1 in front of a loopback PostgreSQL server, with arm-able faults.

    All public methods are thread-safe. See the module docstring for the exact fault semantics.
    """

    def __init__(self, upstream_host: str, upstream_port: int, *, allow_remote: bool = False) -> None:
        self._allow_remote = allow_remote
        self._upstream = (_upstream_address(upstream_host, allow_remote), upstream_port)
        self.port: int = 0
        """The port the proxy listens on (127.0.0.1); set by :meth:`start`."""
        self._lock = threading.Lock()
        self._stall_cond = threading.Condition(self._lock)
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._conns: dict[int, _Connection] = {}
        self._ids = itertools.count(1)
        self._started = False
        self._closing = threading.Event()
        # Armed faults.
        self._cut_reply: Literal["simple", "precise"] | None = None
        self._cut_request = False
        self._stall_until = 0.0
        self._block_new = False
        # Statistics.
        self._accepted = 0
        self._refused = 0
        self._upstream_failures = 0
        self._bytes_up = 0
        self._bytes_down = 0
        self._bytes_dropped = 0
        self._chunks_stalled = 0
        self._fired: Counter[str] = Counter()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        """Bind 127.0.0.1 on a free port and start serving in background (daemon) threads."""
        with self._lock:
            if self._started:
                raise RuntimeError("FaultProxy already started")
            if self._closing.is_set():
                raise RuntimeError("FaultProxy is closed")
            self._started = True
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind((LOOPBACK, 0))
            listener.listen(128)
            listener.settimeout(_POLL_SECONDS)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name=f"faultproxy-{self.port}-accept", daemon=True
        )
        self._accept_thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, reset every connection, join all threads, close all sockets.

        Idempotent, and safe to call whether or not :meth:`start` was called.
        """
        with self._lock:
            if self._closing.is_set():
                return
            self._closing.set()
            conns = list(self._conns.values())
            self._stall_cond.notify_all()  # stalled pumps must not wait out the stall
        if self._listener is not None:
            # Wakes accept() at once on Linux; the accept timeout covers other platforms.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
        for conn in conns:
            conn.shutdown(reset=True)
        deadline = time.monotonic() + _JOIN_TIMEOUT_SECONDS
        if self._accept_thread is not None:
            self._accept_thread.join(max(0.0, deadline - time.monotonic()))
        # The accept thread has stopped (or is stuck), so no new thread can appear in the list.
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            leftovers = list(self._conns.values())
            self._conns.clear()
        for conn in leftovers:
            # Only reached if a pump failed to exit within the join timeout; better a late EBADF
            # in that pump than a leaked socket.
            _LOG.warning("faultproxy: connection %d did not shut down in time", conn.id)
            conn.close_sockets()

    def __enter__(self) -> Self:
        if not self._started:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def alive_threads(self) -> int:
        """Number of proxy threads still running (0 after a clean :meth:`close`)."""
        with self._lock:
            threads = list(self._threads)
        if self._accept_thread is not None:
            threads.append(self._accept_thread)
        return sum(t.is_alive() for t in threads)

    # -- addressing --------------------------------------------------------------------------

    def set_upstream(self, host: str, port: int) -> None:
        """Point new connections at another address (a restarted server that moved to another
        port); current connections keep theirs. The loopback rule of the constructor applies."""
        address = (_upstream_address(host, self._allow_remote), port)
        with self._lock:
            self._upstream = address

    @property
    def upstream(self) -> tuple[str, int]:
        """The ``(host, port)`` new connections are forwarded to."""
        with self._lock:
            return self._upstream

    def url_for(self, database_url: str) -> str:
        """``database_url`` (``postgresql://`` or ``postgresql+driver://``) pointed at the proxy.

        User, password, database and query parameters are kept verbatim (no re-encoding);
        ``host``, ``hostaddr`` and ``port`` query parameters are dropped because libpq would let
        them override the proxy's address. Nothing is added: pass ``sslmode=disable`` yourself.
        """
        if not self.port:
            raise RuntimeError("FaultProxy.start() has not been called")
        parts = urlsplit(database_url)
        if parts.scheme.split("+", 1)[0] not in ("postgresql", "postgres"):
            raise ValueError(f"not a PostgreSQL URL: {parts.scheme!r}")
        userinfo, at, _hosts = parts.netloc.rpartition("@")
        netloc = f"{userinfo}{at}{LOOPBACK}:{self.port}"
        kept = [
            item
            for item in parts.query.split("&")
            if item and unquote(item.partition("=")[0]) not in ("host", "hostaddr", "port")
        ]
        return urlunsplit((parts.scheme, netloc, parts.path, "&".join(kept), parts.fragment))

    # -- faults ------------------------------------------------------------------------------

    def cut_after_next_reply(self, *, precise: bool = False) -> None:
        """Arm (one-shot): let the next request through, lose its reply, reset the connection.

        ``precise=False``: the next server->client chunk on any established connection is
        dropped and that connection is reset. The server has necessarily processed *something*
        by then, but a reply can span several chunks (or the server may send an unsolicited
        message), so this only guarantees "the first chunk after arming was lost".

        ``precise=True``: the next client->server chunk on any established connection claims the
        fault; that request is forwarded in full, and from then on everything the server sends on
        that connection is withheld until a complete ReadyForQuery ('Z') arrives, at which point the
        whole withheld reply is dropped and the connection reset. So the server has finished
        (committed, in autocommit mode or for COMMIT) and the client receives no byte of the reply.
        Exception: when the server answers COPY FROM STDIN with CopyInResponse (or CopyBoth), what
        was withheld so far is released, since the client must see it to send the data; the reply
        after the COPY data is then lost. Arm while the connection is idle: a reply still in
        flight from an earlier request could be mistaken for the new request's reply.
        """
        with self._lock:
            self._cut_reply = "precise" if precise else "simple"

    def cut_before_next_request(self) -> None:
        """Arm (one-shot): drop the next client->server chunk on any established connection
        and reset that connection, so the server never sees the request."""
        with self._lock:
            self._cut_request = True

    def disarm(self) -> None:
        """Cancel armed one-shot faults that have not fired, and end any stall.

        A precise cut already claimed by a connection (withholding its reply) still completes.
        """
        with self._lock:
            self._cut_reply = None
            self._cut_request = False
            self._stall_until = 0.0
            self._stall_cond.notify_all()

    def stall(self, seconds: float) -> None:
        """Hold forwarding in both directions, on all connections, for ``seconds`` from now.

        Returns immediately. Overlapping stalls extend to the latest end. Chunks already being
        written when the stall begins complete; later ones wait.
        """
        if seconds < 0:
            raise ValueError("stall duration must be >= 0")
        with self._lock:
            self._stall_until = max(self._stall_until, time.monotonic() + seconds)
            self._fired[FAULT_STALL] += 1

    def resume(self) -> None:
        """End a stall now (lets a test release held traffic on an event rather than a timer)."""
        with self._lock:
            self._stall_until = 0.0
            self._stall_cond.notify_all()

    @property
    def stalled(self) -> bool:
        """Whether a stall is in effect right now."""
        with self._lock:
            return time.monotonic() < self._stall_until

    def cut_all(self) -> int:
        """Reset every current connection now (both sides); return how many were cut."""
        with self._lock:
            conns = list(self._conns.values())
        cut = sum(conn.shutdown(reset=True) for conn in conns)
        with self._lock:
            self._fired[FAULT_CUT_ALL] += cut
        return cut

    def block_new_connections(self, flag: bool) -> None:
        """While set, accept new connections and close them at once (existing ones continue)."""
        with self._lock:
            self._block_new = flag

    @property
    def stats(self) -> ProxyStats:
        """A snapshot of the counters."""
        with self._lock:
            return ProxyStats(
                connections_accepted=self._accepted,
                connections_refused=self._refused,
                connections_open=len(self._conns),
                upstream_failures=self._upstream_failures,
                bytes_client_to_server=self._bytes_up,
                bytes_server_to_client=self._bytes_down,
                bytes_dropped=self._bytes_dropped,
                chunks_stalled=self._chunks_stalled,
                faults_fired=dict(self._fired),
            )

    # -- serving -----------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._closing.is_set():
            try:
                client, _addr = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._closing.is_set():
                    return
                _LOG.debug("faultproxy: accept failed", exc_info=True)
                time.sleep(_POLL_SECONDS)  # e.g. EMFILE: do not spin
                continue
            with self._lock:
                refuse = self._block_new or self._closing.is_set()
                if refuse:
                    self._refused += 1
            if refuse:
                client.close()
                continue
            thread = threading.Thread(
                target=self._serve, args=(client,), name=f"faultproxy-{self.port}-conn", daemon=True
            )
            with self._lock:
                self._threads = [t for t in self._threads if t.is_alive()]
                self._threads.append(thread)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        """Connect upstream, then pump client->server here and server->client in a new thread."""
        with self._lock:
            upstream = self._upstream
        try:
            server = socket.create_connection(upstream, timeout=_CONNECT_TIMEOUT_SECONDS)
        except OSError:
            _LOG.debug("faultproxy: upstream %s unreachable", upstream, exc_info=True)
            with self._lock:
                self._upstream_failures += 1
            client.close()
            return
        for sock in (client, server):
            sock.settimeout(_POLL_SECONDS)
            # Protocol messages are small and latency-bound; do not let Nagle batch them.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(next(self._ids), client, server)
        down = threading.Thread(
            target=self._pump,
            args=(conn, False),
            name=f"faultproxy-{self.port}-c{conn.id}-down",
            daemon=True,
        )
        with self._lock:
            if self._closing.is_set():
                registered = False
            else:
                registered = True
                self._conns[conn.id] = conn
                self._accepted += 1
                self._threads.append(down)
        if not registered:
            conn.close_sockets()
            return
        down.start()
        self._pump(conn, True)

    def _pump(self, conn: _Connection, upstream: bool) -> None:
        """Copy one direction of ``conn`` until EOF, error, fault or proxy shutdown."""
        src, dst = (conn.client, conn.server) if upstream else (conn.server, conn.client)
        try:
            while not conn.is_shut and not self._closing.is_set():
                try:
                    data = src.recv(_CHUNK)
                except TimeoutError:
                    continue
                except OSError:
                    # ECONNRESET and friends: the peer is gone; take the other side down too.
                    conn.shutdown(reset=False)
                    break
                if not data:
                    if not upstream:
                        self._drop_withheld_at_eof(conn)
                    # Orderly EOF: pass the half-close on; the other pump continues until the
                    # other peer closes too (PostgreSQL and libpq both close on EOF).
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    break
                self._wait_out_stall(conn)
                if conn.is_shut or self._closing.is_set():
                    break
                out = self._from_client(conn, data) if upstream else self._from_server(conn, data)
                if out is None:  # a fault cut the connection
                    break
                # Counted before sending, so that whatever a peer has received is already in
                # the stats when it looks (a test may read them right after its query returns).
                with self._lock:
                    if upstream:
                        self._bytes_up += len(out)
                    else:
                        self._bytes_down += len(out)
                if out and not self._send_all(conn, dst, out):
                    conn.shutdown(reset=False)
                    break
        except Exception:
            # A pump must never raise into the thread machinery (pytest turns that into a test
            # failure somewhere unrelated); log it and reset the connection instead.
            _LOG.exception("faultproxy: pump failed on connection %d", conn.id)
            conn.shutdown(reset=True)
        finally:
            if conn.pump_finished():
                with self._lock:
                    self._conns.pop(conn.id, None)

    def _send_all(self, conn: _Connection, dst: socket.socket, data: bytes) -> bool:
        """Write all of ``data``; False if the connection ended first.

        Not ``sendall``: with a socket timeout it may raise after a partial write, leaving the
        stream in an unknown state. ``send`` either writes some bytes or times out having
        written none, so retrying after a timeout is exact.
        """
        view = memoryview(data)
        while view:
            if conn.is_shut or self._closing.is_set():
                return False
            try:
                sent = dst.send(view)
            except TimeoutError:
                continue
            except OSError:
                return False
            view = view[sent:]
        return True

    def _wait_out_stall(self, conn: _Connection) -> None:
        with self._stall_cond:
            counted = False
            while not conn.is_shut and not self._closing.is_set():
                remaining = self._stall_until - time.monotonic()
                if remaining <= 0:
                    return
                if not counted:
                    self._chunks_stalled += 1
                    counted = True
                # Bounded wait so a cut/close of this connection is noticed while stalled.
                self._stall_cond.wait(min(remaining, _POLL_SECONDS))

    def _cut(self, conn: _Connection, fault: str, dropped: int) -> None:
        """Record a fault firing on ``conn`` (caller holds self._lock) and reset ``conn``."""
        self._fired[fault] += 1
        self._bytes_dropped += dropped
        # shutdown() takes only conn.lock, never self._lock, so calling it here cannot deadlock.
        conn.shutdown(reset=True)

    def _from_client(self, conn: _Connection, data: bytes) -> bytes | None:
        """Apply faults to a client->server chunk; return what to forward, None if cut."""
        with conn.lock:
            if not conn.opaque and not conn.startup.done:
                try:
                    for code in conn.startup.feed(data):
                        if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                            # Recorded before the packet is forwarded, hence before the answer
                            # can reach the other pump.
                            conn.backend.bare_bytes_owed += 1
                except _ProtocolDesync as exc:
                    _LOG.warning("faultproxy: connection %d: %s; stream now opaque", conn.id, exc)
                    conn.opaque = True
            eligible = conn.established or conn.opaque
            opaque = conn.opaque
        if not eligible:
            return data
        with self._lock:
            if self._cut_request:
                self._cut_request = False
                self._cut(conn, FAULT_CUT_BEFORE_REQUEST, len(data))
                return None
            if self._cut_reply == "precise" and not opaque and not conn.withholding:
                # Claimed before forwarding, so the reply cannot overtake the claim.
                self._cut_reply = None
                conn.withholding = True
        return data

    def _from_server(self, conn: _Connection, data: bytes) -> bytes | None:
        """Track the protocol and apply faults to a server->client chunk; None if cut."""
        with conn.lock:
            was_eligible = conn.established or conn.opaque
            events: list[tuple[int, int]] = []
            if not conn.opaque:
                try:
                    events = conn.backend.feed(data)
                except _ProtocolDesync as exc:
                    _LOG.warning("faultproxy: connection %d: %s; stream now opaque", conn.id, exc)
                    conn.opaque = True
                if conn.backend.encrypted:
                    conn.opaque = True
                if not conn.established and any(t == _READY_FOR_QUERY for t, _ in events):
                    conn.established = True
            opaque = conn.opaque
        with self._lock:
            if conn.withholding:
                return self._withhold(conn, data, events)
            mode = self._cut_reply
            if mode is not None and was_eligible and (mode == "simple" or opaque):
                # Opaque streams have no visible ReadyForQuery: precise degrades to simple.
                self._cut_reply = None
                self._cut(conn, FAULT_CUT_AFTER_REPLY, len(data))
                return None
        return data

    def _withhold(self, conn: _Connection, data: bytes, events: list[tuple[int, int]]) -> bytes | None:
        """Precise cut in progress (caller holds self._lock): buffer until ReadyForQuery."""
        base = len(conn.withheld)
        conn.withheld += data
        release = 0
        for msg_type, end in events:
            if msg_type == _READY_FOR_QUERY:
                dropped = len(conn.withheld)
                conn.withheld.clear()
                conn.withholding = False
                self._cut(conn, FAULT_CUT_AFTER_REPLY, dropped)
                return None
            if msg_type in (_COPY_IN_RESPONSE, _COPY_BOTH_RESPONSE):
                # The server now waits for COPY data: holding this back would deadlock the test.
                release = base + end
        if release:
            out = bytes(conn.withheld[:release])
            del conn.withheld[:release]
            return out
        return b""

    def _drop_withheld_at_eof(self, conn: _Connection) -> None:
        """The server closed while a precise cut was withholding: the reply is lost anyway."""
        with self._lock:
            if conn.withholding:
                conn.withholding = False
                self._fired[FAULT_CUT_AFTER_REPLY] += 1
                self._bytes_dropped += len(conn.withheld)
                conn.withheld.clear()


# ------------------------------------------------------------------------------------------------
# The nemesis: a seeded plan of fault windows, each healed when it ends
# ------------------------------------------------------------------------------------------------
