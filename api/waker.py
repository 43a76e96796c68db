"""Waking the readers that wait for what a producer just wrote.

A reader with nothing to read registers its wait in the store and LISTENs (``fetch_wait_v2``);
the store tells a producer, in the answer to a write, which of the written partitions have a
reader waiting (their wake tokens, ``topic_id:partition``). The producer then sends the NOTIFY
from here (``wake_readers_v1``, which also ends the readers' one-shot registrations, so the
writes after it do not name the partition until its readers wait again): on a thread and a
connection of its own, in a transaction of its own, after the write committed. A NOTIFY inside
the write's transaction would hold PostgreSQL's database-wide notification lock through the
commit and serialise every producer's commits (measured: 4 producers kept 0.79 of their commit
rate).

Requests are coalesced: while one wake-up is on its way, the tokens asked for meanwhile wait for
the next NOTIFY, which carries them all (one NOTIFY, its payload the tokens). Waking is best effort: a failure is logged
and forgotten, since a waiting reader also looks again on its own within its poll interval.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from oncelog import errors
from oncelog.producer_store import ProducerStore

__all__ = ["ReaderWaker"]

logger = logging.getLogger(__name__)


class ReaderWaker:
    """Sends a producer's wake-ups (:func:`oncelog.store.log.wake_readers`) from its own thread.

    ``request_timeout`` bounds each wake-up call; ``metric(name, by)`` counts the notifications
    sent (``reader_wakeup_total``). The thread and its connection start with the first wake-up.
    """

    def __init__(
        self,
        store: ProducerStore,
        *,
        request_timeout: float,
        metric: Callable[[str, float], None] | None = None,
    ) -> None:
        self._store = store
        self._request_timeout = request_timeout
        self._metric = metric or (lambda name, by: None)
        self._cond = threading.Condition(threading.Lock())
        self._pending: set[str] = set()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._conn: Any = None  # only the waker's thread touches it

    def wake(self, tokens: Iterable[str]) -> None:
        """Wake the readers of the partitions of ``tokens`` (the wake tokens writes answered
        with) soon; returns at once."""
        with self._cond:
            if self._closing:
                return
            self._pending.update(tokens)
            if self._thread is None or not self._thread.is_alive():
                # The first wake-up, or the thread ended on a failure nobody planned for: the
                # producer's later wake-ups must not wait on a thread that is gone.
                self._thread = threading.Thread(target=self._run, name="oncelog-reader-waker", daemon=True)
                self._thread.start()
            self._cond.notify()

    def close(self, timeout: float | None = None) -> None:
        """Send what is pending (within ``timeout``), then stop the thread and release its connection."""
        with self._cond:
            self._closing = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._pending and not self._closing:
                        self._cond.wait()
                    if not self._pending:
                        return
                    todo = sorted(self._pending)
                    self._pending.clear()
                self._send(todo)
        finally:
            self._release(invalidate=False)

    def _send(self, tokens: list[str]) -> None:
        try:
            if self._conn is None:
                self._conn = self._store.connect()
            with self._store.request(self._conn, self._request_timeout):
                sent = self._store.wake_readers(self._conn, tokens)
        except errors.OncelogError as exc:
            # The readers look again by themselves within their poll interval: nothing is lost.
            logger.debug("could not wake the readers of %s: %s", tokens, exc)
            self._release(invalidate=not isinstance(exc, errors.RequestTimeoutError))
            return
        except Exception:
            # Not the store's refusal nor a lost connection (a bug): said loudly, and the thread
            # goes on, so the wake-ups after this one still leave.
            logger.warning("could not wake the readers of %s", tokens, exc_info=True)
            self._release(invalidate=True)
            return
        self._metric("reader_wakeup_total", sent)

    def _release(self, *, invalidate: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._store.release(conn, invalidate=invalidate)
