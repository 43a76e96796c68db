"""What the asyncio clients share: running a client call on the loop, and waiting for its state.

A call of the synchronous clients' logic runs in a greenlet (:func:`call`), where each database
wait suspends it and hands the loop back (:mod:`oncelog.store.runtime`). Between calls, the
coroutines wait on the loop for what that logic announces with ``notify_all`` (:class:`Signal`).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from sqlalchemy.util.concurrency import greenlet_spawn

__all__ = ["CallLock", "LoopCondition", "Signal", "call"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def call(fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Run ``fn`` on the event loop: its database waits (SQLAlchemy's, and those of
    :mod:`oncelog.store.runtime`) yield to the loop instead of blocking it."""
    result: _T = await greenlet_spawn(functools.partial(fn, *args, **kwargs))
    return result


class Signal:
    """Wakes the coroutines waiting for a change (a batch completed, a batch became ready).

    :meth:`fire` may be called from any code running on the loop's thread, a greenlet included,
    and from another thread (the wake-up then goes through ``call_soon_threadsafe``).
    """

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def fire(self) -> None:
        """Wake every coroutine waiting now."""
        loop = self._loop
        if loop is None or not self._waiters:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Until the next :meth:`fire`, or ``timeout`` seconds (None: no bound). Check what you
        wait for before calling, with no ``await`` in between, so no change is missed."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            pass
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)


class LoopCondition(threading.Condition):
    """The lock and condition the producer's parts share, whose notifications also fire a
    :class:`Signal`: on the loop, nobody blocks in ``wait()``; coroutines await the signal."""

    def __init__(self, signal: Signal) -> None:
        super().__init__(threading.Lock())
        self.signal = signal

    def wait(self, timeout: float | None = None) -> bool:
        """Refused: on the loop's thread it would stop the loop (and nothing would notify it)."""
        raise RuntimeError("a thread wait on the event loop's condition: await its signal instead")

    def notify(self, n: int = 1) -> None:
        super().notify(n)
        self.signal.fire()

    def notify_all(self) -> None:
        super().notify_all()
        self.signal.fire()


class CallLock:
    """One client call at a time, re-entrant for the task that holds it.

    The clients' logic keeps some thread locks across a database wait (a producer's coordinator
    calls): two of its calls interleaved on the loop's one thread could deadlock it, so calls
    that may take them run one at a time (docs/design.md, "The asyncio clients"). The task
    holding the lock may call again (a rebalance callback asking a position inside poll), as a
    thread may in the sync clients.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._owner: asyncio.Task[Any] | None = None
        self._depth = 0

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is not None and task is self._owner:
            self._depth += 1
            return
        await self._lock.acquire()
        self._owner, self._depth = task, 1

    async def __aexit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            self._lock.release()
