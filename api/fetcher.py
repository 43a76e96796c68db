"""The consumer's reads: one kept connection, and one fetch read ahead while the caller works.

Kafka's consumer sends its next fetch as soon as it has handed records over, so the broker
works while the application processes them. ``Fetcher`` does the same with the database: when
a poll returns records, the fetch from where they end runs on a worker thread (its wait on the
server releases the GIL) while the application processes them. The next poll takes that answer
if it asks for exactly what was read ahead (same positions, same partitions, same isolation),
and otherwise waits it out and reads afresh: a seek, a pause or a rebalance costs one wasted
fetch. A consumer that works between polls reads faster; one that does not gains nothing. The
price is freshness: an answer read ahead misses what was committed while the application worked,
so a record can wait one more poll, and the consume-transform-produce pipeline's
produce-to-visible latency rises at the same throughput; hence the Consumer's ``read_ahead`` is
off by default. Both effects were measured once, when the read ahead was added (bench/run does not
repeat them); docs/guide-consumer.md gives the figures.

The connection is used by one thread at a time: the worker while a read ahead is in flight,
the caller's thread otherwise (every caller-side use waits for the read ahead first).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import sqlalchemy as sa

from oncelog import errors
from oncelog.store import log, txn
from oncelog.store.engine import bounded, caller_deadline
from oncelog.store.records import PartitionFetch, WaitRegistration

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: What a fetch asks for: the positions (order does not matter), records per partition, isolation.
Request = tuple[frozenset[tuple[tuple[str, int], int]], int, bool]
#: A fetch's answer, per partition (store.log.fetch_many).
Answer = dict[tuple[str, int], PartitionFetch[Any]]


class Fetcher:
    """poll()'s fetches on one kept connection (a pool checkout pings the server first: a second
    round trip per poll), with at most one fetch read ahead. Its methods are called from the
    caller's thread only; the worker touches the connection only while a read ahead is out."""

    def __init__(
        self,
        connect: Callable[[], sa.Connection],
        record_type: type[Any] | None,
        *,
        request_timeout: float | None = None,
    ) -> None:
        """``record_type``: a named tuple the store builds each record as (see
        store.log.fetch_many_tagged); None for store.log.FetchedRecord. ``request_timeout``:
        seconds after which a read ahead's connection is cut (so waiting for it is bounded)."""
        self._connect = connect
        self._request_timeout = request_timeout
        self._record_type = record_type
        self._conn: sa.Connection | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: tuple[Request, Future[Answer]] | None = None
        self._listening = False  # the kept connection LISTENs (a new connection does not)

    def fetch(
        self,
        positions: Mapping[tuple[str, int], int],
        per_partition: int,
        read_committed: bool,
        *,
        timeout: float | None = None,
    ) -> Answer:
        """The answer for these positions: the fetch read ahead if it asked for exactly this and
        found records, else a new fetch. An empty answer read ahead is not used: it was taken
        before the application processed the last poll, and returning it would make poll() back
        off before looking again. An error drops the connection (the next fetch opens another).
        ``timeout``: seconds after which the connection is cut (a stalled network) and the fetch
        fails with DatabaseUnavailableError."""
        request = _request(positions, per_partition, read_committed)
        ahead = self._settle_ahead()
        if ahead is not None and ahead[0] == request and any(part.records for part in ahead[1].values()):
            return ahead[1]

        def fetch(conn: sa.Connection) -> Answer:
            with bounded(conn, timeout):
                return self._fetch(conn, positions, per_partition, read_committed)

        with caller_deadline(timeout):  # getting the connection (a ping, a reconnect) too
            return self._on_connection(fetch)

    def read_ahead(self, positions: Mapping[tuple[str, int], int], per_partition: int, read_committed: bool) -> None:
        """Send the fetch for these positions now, on the worker thread; :meth:`fetch` takes its
        answer. Called only right after :meth:`fetch`, with nothing in flight."""
        conn = self._connection()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oncelog-fetch")
        wanted = dict(positions)
        future = self._pool.submit(self._bounded_fetch, conn, wanted, per_partition, read_committed)
        self._ahead = (_request(wanted, per_partition, read_committed), future)

    def register_wait(
        self, partitions: list[tuple[str, int]], *, read_committed: bool, wait_ms: int, timeout: float
    ) -> WaitRegistration:
        """Register a wait for writes to ``partitions`` and LISTEN on the kept connection
        (:func:`oncelog.store.log.fetch_wait`, one-shot: it ends with the first wake-up sent for
        it). Wake-ups queued before are forgotten first, since the fetch that must follow sees
        what they announced; one that arrives with the registration's answer is kept, as it may
        have ended the registration just made. No tokens: the store could not register it."""
        self._settle_ahead()

        def register(conn: sa.Connection) -> WaitRegistration:
            with bounded(conn, timeout):
                log.drain_wakeups(conn)
                return log.fetch_wait(conn, partitions, read_committed=read_committed, wait_ms=wait_ms, one_shot=True)

        with caller_deadline(timeout):
            registration = self._on_connection(register)
        self._listening = True
        return registration

    @property
    def listening(self) -> bool:
        """Whether the kept connection LISTENs for wake-ups (a replaced one must register again)."""
        return self._listening and self._conn is not None

    def await_wakeup(self, registration: WaitRegistration, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a write to a registered partition to be announced."""
        return self._on_connection(lambda conn: log.await_wakeup(conn, registration, timeout))

    def expire_transactions(self) -> None:
        """Abort transactions open past their timeout (a reader that meets one does it itself)."""
        self._settle_ahead()
        self._on_connection(txn.expire_transactions)

    def drop(self) -> None:
        """Discard the connection (after an error: it may be broken)."""
        self._settle_ahead()
        conn, self._conn = self._conn, None
        self._listening = False
        if conn is not None:
            try:
                conn.invalidate()
                conn.close()
            except Exception:  # a broken connection may fail to close; it is discarded anyway
                logger.debug("closing a broken connection failed", exc_info=True)

    def close(self) -> None:
        """Wait for a read ahead, stop the worker and release the connection."""
        self._settle_ahead()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        conn, self._conn = self._conn, None
        self._listening = False
        if conn is not None:
            try:
                # Back in the pool, a LISTENing connection would collect wake-ups for whoever
                # uses it next; a broken one is discarded by the pool's ping anyway.
                log.stop_waiting(conn)
            except errors.OncelogError:
                logger.debug("could not stop listening before releasing the connection", exc_info=True)
            conn.close()

    def _fetch(
        self, conn: sa.Connection, positions: Mapping[tuple[str, int], int], per_partition: int, read_committed: bool
    ) -> Answer:
        if self._record_type is None:
            return log.fetch_many(conn, positions, max_records=per_partition, read_committed=read_committed)
        return log.fetch_many_tagged(
            conn, positions, self._record_type, max_records=per_partition, read_committed=read_committed
        )

    def _bounded_fetch(
        self, conn: sa.Connection, positions: Mapping[tuple[str, int], int], per_partition: int, read_committed: bool
    ) -> Answer:
        with bounded(conn, self._request_timeout):
            return self._fetch(conn, positions, per_partition, read_committed)

    def _on_connection(self, call: Callable[[sa.Connection], T]) -> T:
        """``call`` on the kept connection (none is read ahead on it now); dropped if it fails."""
        conn = self._connection()
        try:
            return call(conn)
        except BaseException:
            self.drop()
            raise

    def _connection(self) -> sa.Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def _settle_ahead(self) -> tuple[Request, Answer] | None:
        """Wait for the fetch in flight, if any; its request and answer, or None if it failed
        (the connection is then dropped, and the caller fetches afresh)."""
        if self._ahead is None:
            return None
        request, future = self._ahead
        self._ahead = None
        try:
            return request, future.result()
        except Exception:
            logger.debug("a fetch read ahead failed; fetching again", exc_info=True)
            self.drop()
            return None


def _request(positions: Mapping[tuple[str, int], int], per_partition: int, read_committed: bool) -> Request:
    return frozenset(positions.items()), per_partition, read_committed
