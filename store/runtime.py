"""How store calls wait: on the caller's thread, or inside an asyncio event loop.

The clients' logic is written once, as plain calls. :mod:`oncelog.aio` runs that same logic on
the event loop: each client call runs in a greenlet (SQLAlchemy's ``greenlet_spawn``, the way its
``AsyncConnection.run_sync`` works), over an engine on psycopg's async connections, so every wait
for the database suspends the greenlet and hands the loop back instead of blocking it.

The statements go through SQLAlchemy, which does that by itself. What store code does beside them
goes through this module instead, which does the same for the few places that talk to psycopg or
the clock directly: :func:`sleep` (a backoff), :func:`driver_cursor` (the hot read path's binary,
prepared statements) and :func:`notifications` (LISTEN's wake-ups).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.util.concurrency import await_only, in_greenlet

__all__ = ["LoopLock", "cursor", "driver_cursor", "notifications", "on_event_loop", "sleep"]


def on_event_loop() -> bool:
    """Whether this code runs in a greenlet of :mod:`oncelog.aio` (an event loop's thread)."""
    return bool(in_greenlet())


class LoopLock:
    """A lock that code in greenlets of one event loop holds across a store call: waiting for it
    suspends the greenlet and lets the loop run (a thread lock would stop the loop's one thread,
    and with it the greenlet holding the lock: a deadlock)."""

    def __init__(self) -> None:
        self._lock: asyncio.Lock | None = None

    def __enter__(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        await_only(self._lock.acquire())

    def __exit__(self, *exc: object) -> None:
        if self._lock is not None:
            self._lock.release()


def sleep(seconds: float) -> None:
    """Wait ``seconds``: ``time.sleep`` on a thread; on the event loop, ``asyncio.sleep``, so
    the loop serves other tasks meanwhile."""
    if on_event_loop():
        await_only(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


class _LoopCursor:
    """A psycopg async cursor driven from a greenlet: the calls the store makes on a cursor."""

    def __init__(self, cursor: psycopg.AsyncCursor[Any]) -> None:
        self._cursor = cursor

    def execute(self, query: str, params: Any = None, *, prepare: bool | None = None) -> _LoopCursor:
        await_only(self._cursor.execute(query, params, prepare=prepare))
        return self

    def fetchall(self) -> list[Any]:
        return list(await_only(self._cursor.fetchall()))

    def fetchone(self) -> Any:
        return await_only(self._cursor.fetchone())

    def close(self) -> None:
        await_only(self._cursor.close())


def driver_cursor(conn: sa.Connection, *, binary: bool = False) -> contextlib.AbstractContextManager[Any]:
    """A psycopg cursor on ``conn``'s own driver connection (``execute``, ``fetchall``,
    ``fetchone``), inside whatever transaction ``conn`` is in; on the event loop, the async
    connection's cursor behind the same calls."""
    return cursor(conn.connection.driver_connection, binary=binary)


@contextlib.contextmanager
def cursor(driver: Any, *, binary: bool = False) -> Iterator[Any]:
    """A cursor of a psycopg connection; of an async one (used on the event loop), behind the
    calls of a plain cursor."""
    if isinstance(driver, psycopg.AsyncConnection):
        cursor = _LoopCursor(driver.cursor(binary=binary))
        try:
            yield cursor
        finally:
            cursor.close()
        return
    if not isinstance(driver, psycopg.Connection):
        raise TypeError(f"oncelog runs on psycopg 3, not {type(driver).__name__}")
    with driver.cursor(binary=binary) as cur:
        yield cur


def notifications(conn: sa.Connection, timeout: float) -> list[psycopg.Notify]:
    """The notifications ``conn`` (which LISTENs) received: those the driver queued already, else
    the first to arrive within ``timeout`` seconds (0: only queued ones), with every other one
    that came in the same read; [] if none."""
    driver = conn.connection.driver_connection
    if isinstance(driver, psycopg.AsyncConnection):
        return await_only(_collect(driver, timeout))
    if not isinstance(driver, psycopg.Connection):
        raise TypeError(f"oncelog runs on psycopg 3, not {type(driver).__name__}")
    # stop_after=1 ends the wait at the first arrival, and still yields the whole batch it came
    # in (several NOTIFYs in one packet). Closed at once: psycopg holds the connection's lock
    # while its generator is open.
    with contextlib.closing(driver.notifies(timeout=timeout, stop_after=1)) as notes:
        return list(notes)


async def _collect(driver: psycopg.AsyncConnection[Any], timeout: float) -> list[psycopg.Notify]:
    return [note async for note in driver.notifies(timeout=timeout, stop_after=1)]
