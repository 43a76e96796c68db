"""Empty Fetches woken by the store's wake-ups, not only by their own next look.

A Fetch that finds nothing waits up to its ``max_wait_ms`` for records (Kafka's purgatory).
Looking again on a timer alone costs a reader up to the timer's longest step (100 ms) after
every write it waits for. So the broker waits as oncelog's Consumer does (docs/design.md,
"Waking readers"): it registers the wait in the store (``fetch_wait_v1``), and a write to a
waited-on partition answers its producer with the partition's wake token, which the producer
(oncelog's, or a broker's for its Kafka clients) NOTIFYs.

One session per broker, on a thread of its own, registers the waits of every connection's
Fetches and LISTENs; the tokens it hears are handed to the event loop, where each waiting Fetch
has an event for its own. A registration lasts :data:`REGISTRATION_MS` and is kept for the
partitions and isolation it was made for, so a reader that keeps waiting registers about once
per that time. The timer stays: a Fetch whose wait could not be registered (the broker's role
may not read the topic, the database is away) looks on its timer as before, and so does one
in the moments before its registration completes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator

import sqlalchemy as sa

from oncelog import errors
from oncelog.store import log
from oncelog.store.engine import bounded, set_request_timeout

__all__ = ["REGISTRATION_MS", "FetchWakeups", "Waiter"]

logger = logging.getLogger(__name__)

#: How long a registration holds in the store. Writers name a waited-on partition (and its
#: readers get a NOTIFY) while it holds, so longer means fewer registrations but more NOTIFYs
#: after the readers stopped waiting.
REGISTRATION_MS = 10_000
#: Kept for a little less than it holds: the clocks differ by a round trip.
_KEPT_S = REGISTRATION_MS / 1000 - 1.0
#: How long the listening session waits for a NOTIFY before it looks for new registrations to
#: make: the most a registration waits to be sent (the Fetch looks on its timer meanwhile).
_SLICE_S = 0.02
#: Bounds each registration (its bounded wait for appends in flight is 250 ms).
_REGISTER_TIMEOUT_S = 5.0
#: After the session failed (the database away), how long before it tries again.
_RETRY_S = 1.0
#: The most registrations kept answered on the event loop (each names its partitions): a client
#: that asks for ever other partition sets must not grow the broker without end.
_KEPT_MAX = 1024

_Key = tuple[frozenset[tuple[str, int]], bool]
#: A registration's tokens, and the session it was made on (None: not made, do not keep it).
_Answer = tuple[frozenset[str], int | None]


class Waiter:
    """One Fetch's wait: registered once for its partitions, then woken by their tokens."""

    def __init__(self, wakeups: FetchWakeups) -> None:
        self._wakeups = wakeups
        self._event = asyncio.Event()
        self._tokens: frozenset[str] = frozenset()
        self.registered = False

    async def register(self, partitions: Iterable[tuple[str, int]], read_committed: bool, timeout: float) -> None:
        """Register the wait (or find it registered), for ``timeout`` seconds at most (the
        Fetch's deadline: a registration queued behind others must not hold its answer back);
        from then on a write to one of the partitions sets this waiter. Look once more after it:
        a write that committed before the registration woke nobody. Without a registration the
        Fetch waits on its timer alone."""
        self.registered = True
        wanted = frozenset(partitions)
        if not wanted:
            return
        try:
            # Shielded: a registration cut short by this deadline still completes for the next Fetch.
            self._tokens = await asyncio.wait_for(
                asyncio.shield(self._wakeups.register(wanted, read_committed)), max(timeout, 0.0)
            )
        except TimeoutError:
            return
        self._wakeups.add(self._tokens, self._event)

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a wake-up; whether one came (since the last wait)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), max(timeout, 0.0))
        woken = self._event.is_set()
        self._event.clear()
        return woken

    def close(self) -> None:
        """Stop listening for this Fetch."""
        self._wakeups.remove(self._tokens, self._event)


class FetchWakeups:
    """The broker's one listening session: registers the waits of empty Fetches in the store and
    hands the wake-ups it hears to their :class:`Waiter` s, on the event loop.

    ``connect``: a connection of the broker's own role (autocommit; a refused one is a
    DatabaseUnavailableError), so the registrations need its role to read the topics; without
    that right a Fetch waits on its timer alone. The thread starts with the
    first registration (and again, should it have ended); :meth:`close` stops it and releases
    the session.
    """

    def __init__(self, connect: Callable[[], sa.Connection]) -> None:
        self._connect = connect
        self._loop: asyncio.AbstractEventLoop | None = None
        self._requests: queue.SimpleQueue[tuple[_Key, concurrent.futures.Future[_Answer]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closing = threading.Event()
        #: Which session LISTENs now: a registration made on an earlier one may be gone (an
        #: unlogged table does not survive a crash of the server), so it is made again.
        self._session = 0
        # Tokens heard and not yet handed to the loop, with one hand-over scheduled at a time
        # however many NOTIFYs arrive (any role may NOTIFY: a flood must not flood the loop).
        self._heard: set[str] = set()
        self._heard_lock = threading.Lock()
        # The event loop's alone (no lock): who waits on which token, and what each registration
        # is good for (its tokens), until when, on which session.
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self._kept: dict[_Key, tuple[frozenset[str], float, int]] = {}

    @contextlib.contextmanager
    def waiter(self) -> Iterator[Waiter]:
        """A :class:`Waiter` for one Fetch, listening until the block ends."""
        w = Waiter(self)
        try:
            yield w
        finally:
            w.close()

    async def register(self, partitions: frozenset[tuple[str, int]], read_committed: bool) -> frozenset[str]:
        """The tokens a wake-up for ``partitions`` carries, once their wait is registered (empty
        when it could not be: the Fetch then looks on its timer only). A registration still held
        answers at once."""
        key = (partitions, read_committed)
        now = time.monotonic()
        kept = self._kept.get(key)
        if kept is not None and kept[1] > now and kept[2] == self._session:
            return kept[0]
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if not self._ensure_thread():
            return frozenset()
        done: concurrent.futures.Future[_Answer] = concurrent.futures.Future()
        self._requests.put((key, done))
        tokens, session = await asyncio.wrap_future(done)
        if session is not None:
            self._keep(key, (tokens, time.monotonic() + _KEPT_S, session))
        return tokens

    def add(self, tokens: frozenset[str], event: asyncio.Event) -> None:
        """Set ``event`` at each wake-up naming one of ``tokens`` (on the event loop)."""
        for token in tokens:
            self._waiting.setdefault(token, set()).add(event)

    def remove(self, tokens: frozenset[str], event: asyncio.Event) -> None:
        """Undo :meth:`add` (on the event loop)."""
        for token in tokens:
            events = self._waiting.get(token)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[token]

    def close(self) -> None:
        """Stop the thread and release the session (registrations in flight answer empty)."""
        self._closing.set()
        with self._start_lock:
            thread = self._thread
        if thread is not None:
            thread.join(_REGISTER_TIMEOUT_S + 1)
        self._answer_all()

    def _keep(self, key: _Key, kept: tuple[frozenset[str], float, int]) -> None:
        self._kept[key] = kept
        if len(self._kept) > _KEPT_MAX:
            now = time.monotonic()
            for old in [k for k, (_, until, session) in self._kept.items() if until <= now or session != self._session]:
                del self._kept[old]
            while len(self._kept) > _KEPT_MAX:  # the oldest first (a dict keeps its order)
                del self._kept[next(iter(self._kept))]

    def _ensure_thread(self) -> bool:
        """Start the thread if it is not running; whether it runs (not once closing)."""
        with self._start_lock:
            if self._closing.is_set():
                return False
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="oncelog-broker-wakeups", daemon=True)
                self._thread.start()
            return True

    def _hear(self, tokens: set[str]) -> None:
        with self._heard_lock:
            first = not self._heard
            self._heard |= tokens
        if first and self._loop is not None:
            self._loop.call_soon_threadsafe(self._dispatch)

    def _dispatch(self) -> None:
        with self._heard_lock:
            tokens, self._heard = self._heard, set()
        for token in tokens:
            for event in self._waiting.get(token, ()):
                event.set()

    def _run(self) -> None:
        conn: sa.Connection | None = None
        channel = ""
        try:
            while not self._closing.is_set():
                try:
                    if conn is None:
                        conn = self._connect()
                        with bounded(conn, _REGISTER_TIMEOUT_S):
                            set_request_timeout(conn, int(_REGISTER_TIMEOUT_S * 1000))
                            channel = log.wake_channel(conn)
                            # LISTEN at once: registrations the last session made still stand.
                            log.fetch_wait(conn, [], read_committed=True, wait_ms=0)
                    self._serve_requests(conn)
                    tokens = log.wakeups(conn, channel, _SLICE_S)
                    if tokens:
                        self._hear(tokens)
                except Exception as exc:  # whatever it was, the Fetches must not wait on a dead thread
                    if isinstance(exc, errors.OncelogError):
                        logger.debug("the broker's wake-up session failed; Fetches look on their timers: %s", exc)
                    else:
                        logger.warning("the broker's wake-up session failed", exc_info=True)
                    self._session += 1  # what it registered may be gone with it
                    self._answer_all()
                    self._release(conn)
                    conn = None
                    self._closing.wait(_RETRY_S)
        finally:
            self._release(conn)
            self._answer_all()

    def _serve_requests(self, conn: sa.Connection) -> None:
        while True:
            try:
                key, done = self._requests.get_nowait()
            except queue.Empty:
                return
            if not done.set_running_or_notify_cancel():
                continue  # its Fetch is gone
            try:
                answer = self._register(conn, key)
            except BaseException:
                done.set_result((frozenset(), None))
                raise
            done.set_result(answer)

    def _register(self, conn: sa.Connection, key: _Key) -> _Answer:
        partitions, read_committed = key
        session = self._session
        try:
            with bounded(conn, _REGISTER_TIMEOUT_S):
                registration = log.fetch_wait(
                    conn, sorted(partitions), read_committed=read_committed, wait_ms=REGISTRATION_MS
                )
        except errors.OncelogError as exc:
            if isinstance(exc, errors.DatabaseUnavailableError | errors.RequestTimeoutError):
                raise
            # Refused (the broker's role may not read a topic): those Fetches use their timers,
            # and ask again once this answer lapses, in case the right was granted meanwhile.
            logger.debug("no wake-ups for %s: %s", sorted(partitions), exc)
            return frozenset(), session
        if not registration.tokens:
            # Not registered (a session kept the registration rows locked past the store's
            # bound): these Fetches use their timers, and the next one asks again.
            return frozenset(), None
        return registration.tokens, session

    def _answer_all(self) -> None:
        """Answer every registration still queued: empty, not kept (their Fetches use timers)."""
        while True:
            try:
                _, done = self._requests.get_nowait()
            except queue.Empty:
                return
            if done.set_running_or_notify_cancel():
                done.set_result((frozenset(), None))

    @staticmethod
    def _release(conn: sa.Connection | None) -> None:
        if conn is None:
            return
        try:
            conn.invalidate()  # it LISTENs: never back into the pool
            conn.close()
        except Exception:  # a broken connection may fail to close; it is discarded anyway
            logger.debug("closing the wake-up session failed", exc_info=True)
