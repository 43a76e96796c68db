"""``oncelog.aio.Consumer``: read partitions by offset, alone or in a consumer group, for asyncio.

The same consumer as :class:`oncelog.Consumer` (read_committed by default, one snapshot per poll,
KIP-447 positions, the store's assignments) on the event loop: its fetches and LISTEN waits run
on psycopg's async connections, and a group member's heartbeats are a task of the loop.

Rebalance callbacks may be plain functions or coroutine functions (awaited where the sync
consumer calls them, inside ``subscribe()`` and ``poll()``); they may await this consumer's own
calls (``await consumer.commit(...)``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Self

from sqlalchemy.util.concurrency import await_only

from oncelog import errors, kafka_config, validate
from oncelog.aio._loop import CallLock, call
from oncelog.consumer import Consumer as SyncConsumer
from oncelog.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)

__all__ = ["AsyncRebalanceCallback", "Consumer"]

logger = logging.getLogger(__name__)

#: A rebalance callback: called with the partitions, may return an awaitable (it is awaited).
AsyncRebalanceCallback = Callable[[set[TopicPartition]], Awaitable[None] | None]

#: The longest a group member's poll keeps the consumer to itself: its other calls from other
#: tasks (a commit, a position) get a turn at least this often while the application waits.
_POLL_SLICE_S = 1.0


class _LoopConsumer(SyncConsumer):
    """The synchronous consumer on the event loop's engine, with no threads."""

    _event_loop = True


def _on_loop(callback: AsyncRebalanceCallback | None) -> Callable[[set[TopicPartition]], None] | None:
    """``callback`` as the sync consumer calls it (in a greenlet of the loop): a coroutine it
    returns is awaited there."""
    if callback is None:
        return None
    if not callable(callback):
        raise errors.ConfigurationError(f"a rebalance callback must be callable, not {callback!r}")

    def run(partitions: set[TopicPartition]) -> None:
        result = callback(partitions)
        if inspect.isawaitable(result):
            await_only(result)

    return run


class Consumer:
    """Read records from asyncio code. Takes the keywords of :class:`oncelog.Consumer`
    (``read_ahead`` excepted: it reads on a thread).

    >>> async with Consumer(url, group_id="billing") as consumer:
    ...     await consumer.subscribe(["orders"])
    ...     async for record in consumer:
    ...         ...
    """

    def __init__(self, database_url: str, **config: Any) -> None:
        self._sync = _LoopConsumer(database_url, **config)
        self._calls = CallLock()
        self._beats: asyncio.Task[None] | None = None
        self._stopping = False  # the heartbeat task is to end
        self._waiting = False  # it waits for the next beat (not in a beat)
        self._handing: Iterator[ConsumerRecord] | None = None
        self._commits: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    def from_config(cls, database_url: str, config: Mapping[str, Any], **overrides: Any) -> Self:
        """A consumer configured with Kafka's names (``group.id``, ``isolation.level``,
        ``auto.offset.reset``, ...), as :meth:`oncelog.Consumer.from_config`."""
        return cls(database_url, **kafka_config.with_overrides(config, overrides, SyncConsumer, cls.__name__))

    def __repr__(self) -> str:
        return repr(self._sync)

    @property
    def group_id(self) -> str | None:
        """The consumer group (None: no group)."""
        return self._sync.group_id

    @property
    def isolation_level(self) -> str:
        """``read_committed`` or ``read_uncommitted``."""
        return self._sync.isolation_level

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- assignment and positions ---------------------------------------------------------------

    async def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (replacing any earlier assignment); no group membership."""
        async with self._calls:
            await call(self._sync.assign, list(partitions))

    async def subscribe(
        self,
        topics: Iterable[str] = (),
        on_assign: AsyncRebalanceCallback | None = None,
        on_revoke: AsyncRebalanceCallback | None = None,
        on_lost: AsyncRebalanceCallback | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
    ) -> None:
        """Join the consumer group, as :meth:`oncelog.Consumer.subscribe`, and start heartbeating."""
        async with self._calls:
            await call(
                self._sync.subscribe,
                topics,
                _on_loop(on_assign),
                _on_loop(on_revoke),
                _on_loop(on_lost),
                pattern=pattern,
            )
        if self._beats is None or self._beats.done():
            self._stopping = self._waiting = False
            self._beats = asyncio.get_running_loop().create_task(self._heartbeats(), name="oncelog-consumer-heartbeat")

    async def unsubscribe(self) -> None:
        """Leave the group and drop the assignment."""
        await self._stop_heartbeats()
        async with self._calls:
            await call(self._sync.unsubscribe)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now."""
        return self._sync.assignment()

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` at the next poll."""
        self._sync.seek(partition, offset)

    async def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read from the log start of these (default: all assigned) partitions."""
        async with self._calls:
            await call(self._sync.seek_to_beginning, partitions)

    async def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read from the end of these (default: all assigned) partitions."""
        async with self._calls:
            await call(self._sync.seek_to_end, partitions)

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record poll will return for ``partition``."""
        async with self._calls:
            return await call(self._sync.position, partition)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        async with self._calls:
            return await call(self._sync.beginning_offsets, partitions)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The end of each partition for this consumer (last stable offset for read_committed)."""
        async with self._calls:
            return await call(self._sync.end_offsets, partitions)

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, datetime | float]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """As :meth:`oncelog.Consumer.offsets_for_times`."""
        async with self._calls:
            return await call(self._sync.offsets_for_times, timestamps)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop returning records from these partitions until resumed."""
        self._sync.pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Return records from these partitions again."""
        self._sync.resume(partitions)

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return self._sync.paused()

    # --- offsets --------------------------------------------------------------------------------

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        *,
        asynchronous: bool = False,
    ) -> asyncio.Task[None] | None:
        """Commit offsets (default: the current positions) for the group, as
        :meth:`oncelog.Consumer.commit`. ``asynchronous=True`` takes the offsets and membership
        now and commits them in a task of the loop, in the order asked, returning the task."""
        if not isinstance(asynchronous, bool):
            raise errors.InvalidRequestError(f"asynchronous must be True or False, not {asynchronous!r}")
        if not asynchronous:
            async with self._calls:
                await call(self._sync.commit, offsets)
            return None
        # As the sync consumer's: the offsets and the membership as they are now.
        sync = self._sync
        group_id = sync._require_group()
        wanted = validate.offset_map(sync._subscriptions.positions() if offsets is None else offsets)
        member = sync._membership() if wanted else None
        previous = self._commits

        async def run() -> None:
            if previous is not None:
                with contextlib.suppress(Exception):
                    await previous  # in the order asked; a failed one is superseded, as in Kafka
            if wanted:
                # Without the calls' lock (a commit holds no thread lock across its wait): a
                # rebalance callback, inside poll(), may await it.
                await call(sync._commit_now, group_id, wanted, member)

        self._commits = asyncio.get_running_loop().create_task(run(), name="oncelog-commit")
        return self._commits

    async def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (waiting, for read_committed, while a transaction holds
        pending offsets for a partition)."""
        async with self._calls:
            return await call(self._sync.committed, partitions)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's identity, for ``Producer.send_offsets_to_transaction``."""
        return self._sync.group_metadata()

    # --- reading --------------------------------------------------------------------------------

    async def poll(self, timeout: float = 0.0) -> list[ConsumerRecord]:
        """Records from the assigned, unpaused partitions, waiting up to ``timeout`` seconds for
        some, as :meth:`oncelog.Consumer.poll`; the loop runs other tasks meanwhile."""
        if self._closed:
            raise errors.IllegalStateError("the consumer is closed")
        self._handing = None  # positions move on with this poll: what was not handed out is read again
        limit = validate.INT32_MAX / 1000
        wait = validate.number("timeout", timeout, low=-limit, high=limit, error=errors.InvalidRequestError)
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            remaining = max(deadline - time.monotonic(), 0.0)
            # In slices for a group member: its other calls (commits) get their turns.
            wait = min(remaining, _POLL_SLICE_S) if self._sync.group_id is not None else remaining
            async with self._calls:
                records = await call(self._sync.poll, wait)
            if records or time.monotonic() >= deadline:
                return records

    async def getone(self) -> ConsumerRecord:
        """The next record, waiting as long as it takes (aiokafka's ``getone``)."""
        return await self.__anext__()

    async def getmany(self, timeout_ms: float = 0) -> dict[TopicPartition, list[ConsumerRecord]]:
        """One poll's records by partition, waiting up to ``timeout_ms`` (aiokafka's ``getmany``)."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in await self.poll(timeout_ms / 1000):
            out.setdefault(record.topic_partition, []).append(record)
        return out

    def __aiter__(self) -> Self:
        """Records one at a time as they come (``async for record in consumer``), as
        :meth:`oncelog.Consumer.__iter__`: a ``commit()`` in the loop's body covers the records
        handed out so far; iteration ends when the consumer is closed or after
        ``consumer_timeout_ms`` with no record."""
        return self

    async def __anext__(self) -> ConsumerRecord:
        idle_since = time.monotonic()
        iter_timeout = self._sync._iter_timeout
        while not self._closed:
            if self._handing is not None:
                record = next(self._handing, None)
                if record is not None:
                    return record
                self._handing = None
            wait = 1.0
            if iter_timeout is not None:
                wait = min(wait, iter_timeout - (time.monotonic() - idle_since))
                if wait <= 0:
                    break
            records = await self.poll(wait)
            if records:
                idle_since = time.monotonic()
                self._handing = self._sync._hand_out(records)
        raise StopAsyncIteration

    def metrics(self) -> dict[str, float]:
        """Kafka's consumer metrics, as :meth:`oncelog.Consumer.metrics`."""
        return self._sync.metrics()

    def partition_metrics(self) -> dict[tuple[str, int], dict[str, float]]:
        """Per assigned partition: ``records_lag`` and ``position``."""
        return self._sync.partition_metrics()

    async def close(self) -> None:
        """Commit (with auto-commit), leave the group, and release everything, as
        :meth:`oncelog.Consumer.close`."""
        if self._closed:
            return
        self._closed = True
        await self._stop_heartbeats()
        if self._commits is not None:
            with contextlib.suppress(Exception):
                await self._commits  # the async commits on their way, in order
        async with self._calls:
            await call(self._sync.close)

    # --- heartbeats -----------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        """The heartbeat thread's loop (``ConsumerCoordinator``), as a task: each beat between
        the consumer's calls."""
        coordinator = self._sync._coordinator
        if coordinator is None:
            return
        try:
            while not self._stopping:
                # Until the next beat is due or the group changes (LISTEN on the group store's
                # own connection).
                self._waiting = True
                try:
                    await call(coordinator.wait_for_change)
                finally:
                    self._waiting = False
                # Not behind the consumer's calls (a poll, a committed() waiting on a pending
                # transaction): as the thread's, a beat waits only for the coordinator's own
                # lock, which is the loop's (runtime.LoopLock).
                if self._stopping or not await call(coordinator.heartbeat_once):
                    return
        finally:
            await asyncio.shield(call(coordinator.close))

    async def _stop_heartbeats(self) -> None:
        beats, self._beats = self._beats, None
        if beats is None or beats.done():
            return
        self._stopping = True
        if self._waiting:
            beats.cancel()  # in its wait; a beat under way is let finish, then the task ends
        with contextlib.suppress(asyncio.CancelledError):
            await beats
