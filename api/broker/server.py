"""The broker's network side: an asyncio TCP server speaking Kafka's framing.

Each connection's requests are answered in the order they came (Kafka's rule: a client pipelines
requests on a connection and matches answers by order and correlation id). They run one at a
time, except Produce requests for different partitions (in a transaction or not), which are
appended side by side (see ``Broker._serve``). The store's calls run on a thread pool; the event loop only
reads, decodes, encodes and writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import ssl
import struct
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from oncelog import errors
from oncelog.broker.acls import AclHandlers
from oncelog.broker.admin import AdminHandlers
from oncelog.broker.auth import PLAIN, Principals, parse_plain
from oncelog.broker.codec import (
    MAX_REQUEST_BYTES,
    REQUEST_CLASSES,
    api_versions_refusal,
    decode_request,
    encode_response,
    peek,
)
from oncelog.broker.common import API_RANGES, CLIENT_ID, FETCH_AHEAD, PRINCIPAL_ENGINE, Database, FetchAhead, Node
from oncelog.broker.describe import DescribeHandlers
from oncelog.broker.groups import GroupHandlers
from oncelog.broker.handlers import Handlers
from oncelog.broker.inbox import Inbox
from oncelog.broker.replicas import ReplicaHandlers
from oncelog.broker.wakeups import FetchWakeups
from oncelog.errors import ConfigurationError
from oncelog.producer_store import DatabaseStore
from oncelog.store import create_engine
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.waker import ReaderWaker

__all__ = ["Broker", "Listener", "parse_listener", "serve_in_thread"]

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
#: How long a TLS client may take to finish its handshake.
_TLS_HANDSHAKE_TIMEOUT_S = 30.0
#: Bounds each wake-up the broker sends, and what closing waits for the pending ones: a reader
#: that is not woken looks again by itself within its poll interval.
_WAKE_TIMEOUT_S = 5.0
_API_VERSIONS = 18
_PRODUCE = 0
_FETCH = 1
#: How old a Fetch read ahead may be when it answers (librdkafka sends its next Fetch within
#: milliseconds of an answer while it catches up); older, it is read afresh.
_FETCH_AHEAD_FRESH_S = 0.1
#: How many requests, and bytes of them, a connection may have between read and answered (one of any
#: size when it has none): librdkafka keeps up to five in flight, Kafka's Java client five too.
_READ_AHEAD_FRAMES, _READ_AHEAD_BYTES = 16, 16 * 1024 * 1024
#: How many of a connection's appends run at once, so that one client does not take every store thread.
_SIDE_BY_SIDE = 4
#: How long a closing connection's last answers may take to be written (a client that does not read
#: them has its connection cut instead).
_LAST_ANSWERS_S = 30.0
#: The answer that has the connection closed (once the answers before it are written).
_CLOSE = object()
#: What a client may ask before it authenticated, when the broker requires SASL: ApiVersions,
#: SaslHandshake, SaslAuthenticate.
_BEFORE_AUTHENTICATION = frozenset({18, 17, 36})
#: Kafka's UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE and SASL_AUTHENTICATION_FAILED.
_UNSUPPORTED_SASL_MECHANISM, _ILLEGAL_SASL_STATE, _SASL_AUTHENTICATION_FAILED = 33, 34, 58


@dataclass(frozen=True, slots=True)
class Listener:
    """A host and port."""

    host: str
    port: int


def parse_listener(text: str) -> Listener:
    """``HOST:PORT`` (``[v6addr]:PORT`` for IPv6); ConfigurationError otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigurationError(f"a listener is HOST:PORT, not {text!r}")
    return Listener(host, int(port))


class Broker:
    """Serves the Kafka protocol on ``listen`` over the store behind ``engine``.

    ``advertised``: the address clients are told to connect to (Metadata); by default the
    listening one (with port 0, the port the system chose). ``auto_create_partitions``: a
    Metadata request for an unknown topic that allows it creates the topic with this many
    partitions (Kafka's auto.create.topics.enable and num.partitions); None (the default): never.
    ``principals``: clients must authenticate with SASL/PLAIN as PostgreSQL roles, and each
    connection then reaches the store as its role (:mod:`oncelog.broker.auth`; the broker closes
    them when it closes); None: every client reaches it as ``engine``'s role. ``tls``: clients
    connect with TLS (Kafka's SSL or, with ``principals``, SASL_SSL; :func:`oncelog.broker.tls.
    server_tls_context`); None: in plain text. Use as ``async with``, or :meth:`start` and
    :meth:`close`.
    """

    def __init__(
        self,
        engine: sa.Engine,
        listen: Listener,
        *,
        advertised: Listener | None = None,
        node_id: int = 1,
        threads: int = 8,
        auto_create_partitions: int | None = None,
        principals: Principals | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        # Autocommit: each store call is its own database transaction, as the store's functions
        # are written to be called.
        self._engine = Database(engine.execution_options(isolation_level="AUTOCOMMIT"))
        self._principals = principals
        self._tls = tls
        self._listen = listen
        self._advertised = advertised
        self._node_id = node_id
        self._auto_create = auto_create_partitions
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="oncelog-broker-store")
        # Readers waiting on what the clients write (oncelog's Consumers; docs/design.md, "Waking
        # readers") are woken as oncelog's Producer wakes them: the store names their partitions in
        # its answers, and the NOTIFY goes out on a thread and connection of the broker's own,
        # after the write committed. Any role may NOTIFY, so the broker's role sends them all.
        self._waker = ReaderWaker(DatabaseStore(self._engine.own_connection), request_timeout=_WAKE_TIMEOUT_S)
        # And the Fetches waiting for records are woken by those NOTIFYs, whoever wrote.
        self._wakeups = FetchWakeups(self._engine.own_connection)
        self._server: asyncio.Server | None = None
        self._handlers: Handlers | None = None
        self._dispatch: dict[int, Callable[[Any, Any], Awaitable[Any]]] = {}
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> Listener:
        """Where the broker listens (the system's port, when asked for port 0)."""
        if self._server is None:
            raise RuntimeError("the broker is not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return Listener(host, port)

    async def start(self) -> None:
        """Bind and start accepting connections."""
        self._server = await asyncio.start_server(
            self._serve,
            self._listen.host,
            self._listen.port,
            ssl=self._tls,
            # A client that connects and never finishes its handshake must not hold a task forever.
            ssl_handshake_timeout=_TLS_HANDSHAKE_TIMEOUT_S if self._tls is not None else None,
        )
        node = self._advertised or self.address
        self._handlers = Handlers(
            self._engine,
            Node(self._node_id, node.host, node.port),
            self._run,
            auto_create_partitions=self._auto_create,
            wake=self._waker.wake,
            wakeups=self._wakeups,
        )
        h = self._handlers
        g, t = GroupHandlers(self._engine, h.node, self._run), h.transactions
        # Kafka's name of this listener's security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL.
        protocol = ("SASL_" if self._principals is not None else "") + ("SSL" if self._tls is not None else "PLAINTEXT")
        a = AdminHandlers(
            self._engine,
            self._run,
            node=h.node,
            security_protocol=protocol,
            auto_create_partitions=self._auto_create,
        )
        d = DescribeHandlers(self._engine, self._run)
        acls = AclHandlers(self._engine, self._run)
        r = ReplicaHandlers(self._engine, self._run, h.node)
        self._dispatch = {
            0: h.produce,
            1: h.fetch,
            2: h.list_offsets,
            3: h.metadata,
            8: g.offset_commit,
            9: g.offset_fetch,
            10: g.find_coordinator,
            11: g.join_group,
            12: g.heartbeat,
            13: g.leave_group,
            14: g.sync_group,
            15: d.describe_groups,
            16: d.list_groups,
            18: h.api_versions,
            19: a.create_topics,
            20: a.delete_topics,
            21: a.delete_records,
            22: h.init_producer_id,
            24: t.add_partitions,
            25: t.add_offsets,
            26: t.end_txn,
            28: t.txn_offset_commit,
            29: acls.describe_acls,
            30: acls.create_acls,
            31: acls.delete_acls,
            32: a.describe_configs,
            33: a.alter_configs,
            34: r.alter_replica_log_dirs,
            35: r.describe_log_dirs,
            37: a.create_partitions,
            42: a.delete_groups,
            43: r.elect_leaders,
            44: a.incremental_alter_configs,
            45: r.alter_partition_reassignments,
            46: r.list_partition_reassignments,
            47: a.offset_delete,
            61: d.describe_producers,
            65: d.describe_transactions,
            66: d.list_transactions,
            75: h.describe_topic_partitions,
            17: self._sasl_handshake,
            36: self._sasl_authenticate,
        }
        if set(self._dispatch) != set(API_RANGES):
            raise RuntimeError("the dispatch table and API_RANGES name different APIs")
        here = self.address
        logger.info("oncelog broker listening on %s:%s (advertised %s:%s)", here.host, here.port, node.host, node.port)

    async def serve_forever(self) -> None:
        """Start (if needed) and serve until cancelled."""
        if self._server is None:
            await self.start()
        server = self._server
        if server is None:
            raise RuntimeError("the broker did not start")
        await server.serve_forever()

    async def close(self) -> None:
        """Stop accepting, close every connection, and release the store's threads and the
        principals' engines."""
        if self._server is not None:
            self._server.close()
            # Again while any is left: a connection accepted just before is served by a task that
            # joins the set only when it first runs.
            while self._connections:
                connections = list(self._connections)
                for task in connections:
                    task.cancel()
                await asyncio.gather(*connections, return_exceptions=True)
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        self._pool.shutdown(wait=True, cancel_futures=True)
        await asyncio.to_thread(self._waker.close, _WAKE_TIMEOUT_S)  # what is pending, then its thread
        await asyncio.to_thread(self._wakeups.close)
        if self._principals is not None:
            self._principals.close()

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # The thread runs in this task's context: the connection's principal (PRINCIPAL_ENGINE).
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: context.run(fn, *args, **kwargs))

    async def _sasl_handshake(self, request: Any, response_class: Any) -> Any:
        offered = [PLAIN] if self._principals is not None else []
        code = 0 if request.mechanism in offered else _UNSUPPORTED_SASL_MECHANISM
        return response_class(version=request.version, error_code=code, mechanisms=offered)

    async def _sasl_authenticate(self, request: Any, response_class: Any) -> Any:
        def answer(code: int, message: str | None = None) -> Any:
            return response_class(
                version=request.version, error_code=code, error_message=message, auth_bytes=b"", session_lifetime_ms=0
            )

        if self._principals is None or PRINCIPAL_ENGINE.get() is not None:
            return answer(_ILLEGAL_SASL_STATE, "not expecting SASL authentication now")
        try:
            user, password = parse_plain(bytes(request.auth_bytes))
            engine = await self._run(self._principals.authenticate, user, password)
        except (errors.OncelogError, UnicodeDecodeError):
            # One message for every failure: the client learns nothing of which part was wrong.
            return answer(_SASL_AUTHENTICATION_FAILED, "authentication failed: wrong user name or password")
        PRINCIPAL_ENGINE.set(engine)  # this connection's task, from now on
        return answer(0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: a task reads its requests ahead, this one starts answering them in
        order, and a third writes the answers in that same order.

        Produce requests for partitions no earlier request still being appended names are
        appended at once (up to _SIDE_BY_SIDE of them), each on a database connection of its
        own: librdkafka keeps five in flight, one partition each, and the store takes one
        producer's appends to different partitions side by side, in one transaction or not. Every other request
        waits until all before it are answered, and runs in this task, so it sees what they wrote
        and what it sets in the connection's context (its SASL principal) holds for the requests
        after it.
        """
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        # This task's context is the connection's: its Fetch read ahead lives there.
        ahead = FetchAhead(_FETCH_AHEAD_FRESH_S)
        FETCH_AHEAD.set(ahead)
        peer = writer.get_extra_info("peername")
        inbox = Inbox(max_frames=_READ_AHEAD_FRAMES, max_bytes=_READ_AHEAD_BYTES)
        # Unbounded: the inbox bounds what is between read and answered, these answers included.
        answers: asyncio.Queue[tuple[asyncio.Future[Any], int] | None] = asyncio.Queue()
        reading = asyncio.create_task(self._read(reader, inbox, peer))
        writing = asyncio.create_task(self._write(writer, answers, inbox))
        started: set[asyncio.Future[Any]] = set()  # every append of this connection not done
        appending: dict[tuple[str, int], asyncio.Future[Any]] = {}  # a partition's latest append
        gate = asyncio.Semaphore(_SIDE_BY_SIDE)
        aborted = False
        try:
            while not writing.done() and (frame := await inbox.get()) is not None:
                decoded = self._decode(frame, peer)
                if not isinstance(decoded, _Request) or decoded.api_key != _FETCH:
                    # It may write, delete or change what a Fetch after it must see.
                    ahead.drop()
                answer: asyncio.Future[Any]
                if isinstance(decoded, _Request) and _side_by_side(decoded):
                    names = _partitions(decoded.request)
                    earlier = {id(f): f for f in (appending.get(tp) for tp in names) if f is not None}
                    answer = asyncio.ensure_future(self._respond_after(list(earlier.values()), gate, decoded, peer))
                    started.add(answer)
                    answer.add_done_callback(started.discard)
                    appending.update(dict.fromkeys(names, answer))
                    answer.add_done_callback(functools.partial(_forget, appending, names))
                else:
                    # Everything before it answered first: as one request at a time would have it.
                    if started:
                        await asyncio.wait(list(started))
                    answer = asyncio.get_running_loop().create_future()
                    answer.set_result(
                        decoded if not isinstance(decoded, _Request) else await self._respond(decoded, peer)
                    )
                answers.put_nowait((answer, len(frame)))
                if answer.done() and answer.result() is _CLOSE:
                    break
        except asyncio.CancelledError:
            # close() cancels every connection: the connection ends here. Returning (not raising)
            # keeps asyncio's server callback from logging the cancellation as an error.
            aborted = True
        finally:
            reading.cancel()
            ahead.drop()
            answers.put_nowait(None)
            try:
                if aborted:
                    writing.cancel()
                # The writer writes the answers still due, unless it stopped (at _CLOSE, or a
                # connection it cannot write to); a client that does not read them gets a bound.
                await asyncio.wait([writing], timeout=_LAST_ANSWERS_S)
            except asyncio.CancelledError:
                aborted = True
            finally:
                aborted = aborted or not writing.done()
                for pending in (reading, writing, *started):
                    pending.cancel()
                try:
                    await asyncio.gather(reading, writing, *started, return_exceptions=True)
                    if aborted:
                        writer.transport.abort()  # what is unwritten is dropped: never wait on the client
                    else:
                        writer.close()
                        await asyncio.wait_for(writer.wait_closed(), _LAST_ANSWERS_S)
                except (Exception, asyncio.CancelledError):
                    # Not closed in time, or close() cancelled this wait: cut it.
                    aborted = True
                    writer.transport.abort()
                finally:
                    # Only now: close() waits for every connection in this set to be closed.
                    if task is not None:
                        self._connections.discard(task)
                    logger.debug("connection from %s ended%s", peer, " (cut)" if aborted else "")

    @staticmethod
    async def _read(reader: asyncio.StreamReader, inbox: Inbox, peer: Any) -> None:
        """Read a connection's request frames into ``inbox`` until it ends, or sends a size no
        request has (a client speaking something else): then the inbox is closed, and so is the
        connection once what came before is answered."""
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                # A bigger size prefix is a client speaking something else: its connection is closed.
                if not 0 < size <= MAX_REQUEST_BYTES:
                    logger.warning("closing %s: a request of %s bytes", peer, size)
                    return
                await inbox.put(await reader.readexactly(size))
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            return  # the client closed the connection, or it broke
        finally:
            await inbox.close()

    @staticmethod
    async def _write(
        writer: asyncio.StreamWriter, answers: asyncio.Queue[tuple[asyncio.Future[Any], int] | None], inbox: Inbox
    ) -> None:
        """Write the answers in the order their requests came, each once it is ready, releasing
        its request's room in the inbox; at _CLOSE, or when the client cannot be written to, stop
        taking requests."""
        try:
            while (item := await answers.get()) is not None:
                answer, size = item
                framed = await answer
                await inbox.release(size)
                if framed is _CLOSE:
                    return
                if isinstance(framed, bytes):
                    writer.write(framed)
                    await writer.drain()
        except (ConnectionError, ssl.SSLError):
            return
        finally:
            await inbox.close(drop=True)

    async def _respond_after(
        self, earlier: list[asyncio.Future[Any]], gate: asyncio.Semaphore, request: _Request, peer: Any
    ) -> Any:
        """The answer to an append that runs beside others, once the ``earlier`` appends to its
        partitions are done, and while ``gate`` has room (one connection does not take every store
        thread)."""
        if earlier:
            await asyncio.wait(earlier)
        async with gate:
            return await self._respond(request, peer)

    async def _respond(self, decoded: _Request, peer: Any) -> bytes | object | None:
        """The framed answer to a decoded request; None when it gets none (acks=0), _CLOSE when
        answering it failed (a bug of ours: this client's connection ends, the broker serves on)."""
        try:
            response = await self._dispatch[decoded.api_key](decoded.request, decoded.response_class)
            if response is None:
                return None
            return encode_response(response, decoded.correlation_id)
        except Exception:
            logger.exception(
                "closing %s: answering API key %s version %s failed", peer, decoded.api_key, decoded.request.version
            )
            return _CLOSE

    def _decode(self, frame: bytes, peer: Any) -> _Request | bytes | object:
        """``frame``'s request, or what answers it at once: the ApiVersions refusal (error 35), or
        _CLOSE for a request the connection may not send or we cannot read (as Kafka's brokers do)."""
        if len(frame) < 8:
            logger.warning("closing %s: a request too short for its header", peer)
            return _CLOSE
        api_key, version, correlation_id = peek(frame)
        served = API_RANGES.get(api_key)
        if api_key == _API_VERSIONS and served is not None and version > served[1]:
            return api_versions_refusal(correlation_id, [(k, lo, hi) for k, (lo, hi) in sorted(API_RANGES.items())])
        if served is None or not served[0] <= version <= served[1]:
            logger.warning("closing %s: API key %s version %s is not served", peer, api_key, version)
            return _CLOSE
        if self._principals is not None and PRINCIPAL_ENGINE.get() is None and api_key not in _BEFORE_AUTHENTICATION:
            logger.warning("closing %s: API key %s before SASL authentication", peer, api_key)
            return _CLOSE
        request_class, response_class = REQUEST_CLASSES[api_key]
        try:
            client_id, request = decode_request(frame, request_class, version)
        except Exception:  # whatever the bytes were, they were not this request
            logger.warning(
                "closing %s: a malformed request (API key %s version %s)", peer, api_key, version, exc_info=True
            )
            return _CLOSE
        CLIENT_ID.set(client_id)  # this connection's context: its store calls and JoinGroup read it
        return _Request(api_key, correlation_id, request, response_class)


@dataclass(frozen=True, slots=True)
class _Request:
    """A decoded request, with what its answer needs."""

    api_key: int
    correlation_id: int
    request: Any
    response_class: Any


def _side_by_side(decoded: _Request) -> bool:
    """Whether ``decoded`` may be appended beside the requests before it: a Produce, in a
    transaction or not (the store lets one transaction's appends to different partitions share
    its transactions row, revision 0039; its AddPartitionsToTxn before them and its EndTxn after
    them run alone, so each still sees what came before it)."""
    return decoded.api_key == _PRODUCE


def _partitions(request: Any) -> list[tuple[str, int]]:
    return [(t.name, p.index) for t in request.topic_data for p in t.partition_data]


def _forget(appending: dict[tuple[str, int], asyncio.Future[Any]], names: list[tuple[str, int]], done: Any) -> None:
    """An append is done: its partitions no longer wait on it (unless a later append took them)."""
    for tp in names:
        if appending.get(tp) is done:
            del appending[tp]


@contextlib.contextmanager
def serve_in_thread(database_url: str, *, schema: str = DEFAULT_SCHEMA, **options: Any) -> Iterator[str]:
    """A :class:`Broker` over ``database_url`` on a free loopback port, served from an event loop
    on a thread of its own until the block ends; yields its bootstrap address (``host:port``).
    For tests and benchmarks that run Kafka clients beside the broker; ``options`` go to the
    Broker."""
    engine = create_engine(database_url, schema=schema, pool_size=8, max_overflow=8)
    loop = asyncio.new_event_loop()
    server = Broker(engine, Listener("127.0.0.1", 0), **options)
    loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, name="oncelog-broker", daemon=True)
    thread.start()
    try:
        here = server.address
        yield f"{here.host}:{here.port}"
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
        engine.dispose()
