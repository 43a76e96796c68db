"""``oncelog.aio.Producer``: the idempotent and transactional producer, for asyncio.

The same producer as :class:`oncelog.Producer` (its accumulator, transaction manager and sender,
with the same rules, errors and recovery), run on the event loop: the sender is a task of the
loop instead of a thread, every database call runs on psycopg's async connections, and waits
(a flush, a full buffer, a commit) are awaited. No call blocks the loop or starts a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Mapping
from datetime import datetime
from typing import Any, Self

from oncelog import errors, kafka_config, validate
from oncelog.aio._loop import CallLock, LoopCondition, Signal, call
from oncelog.client import Client
from oncelog.producer import Producer as SyncProducer
from oncelog.producer_store import ProducerStore
from oncelog.record_future import RecordFuture
from oncelog.store import runtime, topics
from oncelog.store.records import Headers
from oncelog.txn_state import TxnState
from oncelog.types import ConsumerGroupMetadata, OffsetAndMetadata, PreparedTransaction, RecordMetadata, TopicPartition
from oncelog.waker import ReaderWaker

__all__ = ["Producer", "SendFuture"]

#: A transaction close() aborts: open, failed, or an abort that did not finish (timed out or cancelled).
_OPEN_STATES = (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING_TRANSACTION)

logger = logging.getLogger(__name__)


class _BufferFull(Exception):
    """send() would have to wait for room in buffer_memory: on the loop, the caller awaits it."""


class _NeedsTheStore(Exception):
    """send() would have to ask the store (a topic's metadata) outside a greenlet of the loop."""


class SendFuture:
    """What :meth:`Producer.send` returns: the record's RecordMetadata once acknowledged, as an
    awaitable (``await future``, ``asyncio.gather``) with asyncio.Future's reading methods.

    One handle on the record's batch (all of a batch's records complete together), not an
    asyncio.Future per record: a waiter is made only for a record someone awaits."""

    __slots__ = ("_record",)

    def __init__(self, record: RecordFuture) -> None:
        self._record = record

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        record = self._record
        if not record.done():
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def wake(metadata: RecordMetadata | None, exc: BaseException | None) -> None:
                if not waiter.done():  # (cancelled: the awaiting task was)
                    waiter.set_result(None)

            # Called where the batch completes: the sender's task, on this loop.
            record.add_record_callback(wake)
            yield from waiter.__await__()
        return record.result(0)

    def done(self) -> bool:
        """Whether the record was acknowledged or failed."""
        return self._record.done()

    def result(self) -> RecordMetadata:
        """Where the record landed; its error; asyncio.InvalidStateError while on its way."""
        if not self._record.done():
            raise asyncio.InvalidStateError("the record is still on its way")
        return self._record.result(0)

    def exception(self) -> BaseException | None:
        """The record's error (None once acknowledged); asyncio.InvalidStateError while on its way."""
        if not self._record.done():
            raise asyncio.InvalidStateError("the record is still on its way")
        return self._record.exception(0)

    def add_done_callback(self, fn: Callable[[SendFuture], object]) -> None:
        """Call ``fn(future)`` when the record completes (at once if it has), on the loop."""

        def call_fn(metadata: RecordMetadata | None, exc: BaseException | None) -> None:
            fn(self)

        self._record.add_record_callback(call_fn)

    def __repr__(self) -> str:
        return f"<SendFuture {self._record!r}>"


class _LoopWaker(ReaderWaker):
    """Wakes waiting readers from a task of the loop (the same calls as the thread's)."""

    def __init__(
        self, store: ProducerStore, *, request_timeout: float, metric: Callable[[str, float], None] | None
    ) -> None:
        super().__init__(store, request_timeout=request_timeout, metric=metric)
        self._task: asyncio.Task[None] | None = None

    def wake(self, tokens: Iterable[str]) -> None:
        if self._closing:
            return
        self._pending.update(tokens)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="oncelog-reader-waker")

    async def _drain(self) -> None:
        while self._pending:
            todo = sorted(self._pending)
            self._pending.clear()
            await call(self._send, todo)

    async def aclose(self, timeout: float | None) -> None:
        """Send what is pending (within ``timeout``), then release the connection."""
        self._closing = True
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except TimeoutError:
                task.cancel()  # before its connection is released under it
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await call(self._release, invalidate=False)


class _LoopProducer(SyncProducer):
    """The synchronous producer's parts, on the event loop's engine, with no threads: the
    asyncio :class:`Producer` runs the sender and does every wait."""

    _event_loop = True

    def _new_condition(self) -> LoopCondition:
        self.signal = Signal()
        self.hand_over = False
        return LoopCondition(self.signal)

    def _new_waker(self, store: ProducerStore, request_timeout: float) -> ReaderWaker:
        return _LoopWaker(store, request_timeout=request_timeout, metric=self._metrics.bump)

    def _sender_lanes(self, max_in_flight: int) -> int:
        return 1  # the lanes are threads; on the loop, one request at a time

    def _start_sender(self) -> None:
        pass  # Producer._run_sender, a task started with the first call on the loop

    def _wait_for_buffer(self, size: int, deadline: float) -> None:
        raise _BufferFull()

    def _hand_over(self) -> None:
        self.hand_over = True  # send() yields to the loop, where the sender task is ready to run

    def _fetch_metadata(self, topic: str, deadline: float) -> topics.TopicMetadata:
        if not runtime.on_event_loop():
            raise _NeedsTheStore()  # send() itself: it asks again from a greenlet
        return super()._fetch_metadata(topic, deadline)

    def _dispose(self) -> None:
        """Release the connection pool (what Client.close does; the rest is the caller's)."""
        Client.close(self)


class Producer:
    """Send records to topics from asyncio code; retries never duplicate or reorder a record
    within a partition. Takes the keywords of :class:`oncelog.Producer`.

    >>> async with Producer(url, transactional_id="billing-1") as producer:
    ...     await producer.init_transactions()
    ...     async with producer.transaction():
    ...         await producer.send("orders", b"value", key=b"key")
    ...     meta = await producer.send_and_wait("orders", b"value")
    """

    def __init__(self, database_url: str, **config: Any) -> None:
        self._sync = _LoopProducer(database_url, **config)
        self._calls = CallLock()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    def from_config(cls, database_url: str, config: Mapping[str, Any], **overrides: Any) -> Self:
        """A producer configured with Kafka's names (``linger.ms``, ``transactional.id``, ...),
        as :meth:`oncelog.Producer.from_config`."""
        return cls(database_url, **kafka_config.with_overrides(config, overrides, SyncProducer, cls.__name__))

    def __repr__(self) -> str:
        return repr(self._sync)

    @property
    def transactional_id(self) -> str | None:
        """The transactional id (None for an idempotent producer)."""
        return self._sync.transactional_id

    @property
    def client_id(self) -> str | None:
        """The ``client_id`` its connections carry (``application_name``)."""
        return self._sync.client_id

    async def start(self) -> None:
        """Start the sender (done by the first call otherwise); aiokafka's ``start()``."""
        self._ensure_sender()

    async def __aenter__(self) -> Self:
        self._ensure_sender()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- sending ----------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        headers: Headers | Mapping[str, bytes | None] | None = None,
        timestamp: datetime | float | None = None,
    ) -> SendFuture:
        """Queue a record and return a future of its RecordMetadata (aiokafka's ``send``):
        ``await (await producer.send(...))``. Bad input raises a typed error here and queues
        nothing; with buffer_memory full this waits for room, up to ``max_block_ms``."""
        task = self._task
        if task is None or task.done():
            self._ensure_sender()
        sync = self._sync
        deadline: float | None = None
        fetch = False
        while True:
            try:
                if fetch:
                    handle = await call(
                        sync.send, topic, value, key, partition=partition, headers=headers, timestamp=timestamp
                    )
                else:
                    handle = sync.send(topic, value, key, partition=partition, headers=headers, timestamp=timestamp)
                break
            except _NeedsTheStore:
                # The topic's metadata is to be fetched: send() again where it may wait for the
                # store (retried up to max_block_ms).
                fetch = True
            except _BufferFull:
                now = time.monotonic()
                deadline = now + sync._max_block if deadline is None else deadline
                if now >= deadline or sync._sender.closing:
                    raise errors.DeliveryTimeoutError(
                        f"buffer_memory ({sync._buffer_memory} bytes) stayed full for max_block_ms"
                    ) from None
                await sync.signal.wait(deadline - now)
        if sync.hand_over:
            # A batch is full: the sender starts on it now, not after the application's next
            # wait (which, in a loop of sends, may be the commit: a transaction's batches
            # would all wait for it).
            sync.hand_over = False
            await asyncio.sleep(0)
        return SendFuture(handle)

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        headers: Headers | Mapping[str, bytes | None] | None = None,
        timestamp: datetime | float | None = None,
    ) -> RecordMetadata:
        """Send a record and wait until it is acknowledged."""
        future = await self.send(topic, value, key, partition=partition, headers=headers, timestamp=timestamp)
        return await future

    async def flush(self, timeout: float | None = None) -> None:
        """Send every queued record now and wait until all have completed (or ``timeout`` passes)."""
        validate.timeout("timeout", timeout)
        self._ensure_sender()
        sync = self._sync
        sender, acc, cond = sync._sender, sync._acc, sync._cond
        deadline = None if timeout is None else time.monotonic() + timeout
        with cond:
            sender.flushing += 1
            cond.notify_all()
        try:
            while len(acc) or sender.in_flight:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise errors.DeliveryTimeoutError("flush timed out with records still queued")
                if self._task is None or self._task.done():
                    raise errors.ProducerClosedError("the sender has stopped")
                # Looked at again at least twice a second, as the sync flush does: a sender
                # that stopped without a last notification is seen.
                await sync.signal.wait(0.5 if remaining is None else min(remaining, 0.5))
        finally:
            with cond:
                sender.flushing -= 1

    # --- transactions -----------------------------------------------------------------------------

    async def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id: fence every older instance (aborting its open
        transaction) and get the epoch this instance writes with. Call once, first."""
        self._ensure_sender()
        async with self._calls:
            await call(self._sync.init_transactions, timeout)

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on commit or abort together."""
        self._sync.begin_transaction()

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is queued and commit the transaction, as :meth:`oncelog.Producer.commit_transaction`:
        an abortable error leaves the producer in ABORTABLE_ERROR (call :meth:`abort_transaction`),
        a fatal one (fenced) means it must be closed."""
        validate.timeout("timeout", timeout)
        manager = self._sync._require_transactional()
        async with self._calls:
            started = time.monotonic()
            manager.begin_commit()
            await self.flush(timeout)
            if timeout is not None:  # the flush and the EndTxn share the caller's one timeout
                timeout = max(timeout - (time.monotonic() - started), 0.0)
            await call(manager.finish_commit, timeout)
            self._sync._metrics.bump("txn_commit_total")
            self._sync._metrics.bump("txn_commit_time_ms_total", (time.monotonic() - started) * 1000)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent are dropped (their futures fail with
        TransactionAbortedError), the rest never reach read_committed readers; after an error,
        the producer bumps its epoch (KIP-360) and carries on."""
        validate.timeout("timeout", timeout)
        sync = self._sync
        manager = sync._require_transactional()
        async with self._calls:
            started = time.monotonic()
            manager.begin_abort()
            with sync._cond:
                sync._drop_unsent()
            while len(sync._acc) or sync._sender.in_flight:
                if self._task is None or self._task.done():
                    break  # nothing is in flight without a sender
                await sync.signal.wait(0.5)
            await call(manager.finish_abort, timeout)
            sync._metrics.bump("txn_abort_total")
            sync._metrics.bump("txn_abort_time_ms_total", (time.monotonic() - started) * 1000)

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata,
        timeout: float | None = None,
    ) -> None:
        """Commit a consumer group's offsets inside the current transaction (KIP-447), as
        :meth:`oncelog.Producer.send_offsets_to_transaction`."""
        async with self._calls:
            await call(self._sync.send_offsets_to_transaction, offsets, group_metadata, timeout)

    async def prepare_transaction(self, timeout: float | None = None) -> PreparedTransaction:
        """Flush the transaction and hand it over still open, as
        :meth:`oncelog.Producer.prepare_transaction`; this producer is closed afterwards."""
        validate.timeout("timeout", timeout)
        state = self._sync._require_transactional().require_transactional()
        state.require_can_commit()
        async with self._calls:
            await self.flush(timeout)
            await call(self._sync._manager.flush_offsets, timeout)
            if state.has_error:
                state.require_can_commit()  # raises the error a send recorded
            prepared = self._sync._manager.prepared()
            self._sync._prepared = True
        await self.close(timeout)
        return prepared

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Producer]:
        """``async with producer.transaction():`` begins, commits on a clean exit, and aborts on
        an exception (unless the error is fatal: a fenced producer cannot abort), re-raising it."""
        self.begin_transaction()
        try:
            yield self
        except BaseException as exc:
            fatal = (isinstance(exc, errors.OncelogError) and exc.fatal) or self._sync._manager.is_fatal
            if not fatal:
                await self.abort_transaction()
            raise
        await self.commit_transaction()

    @property
    def transaction_state(self) -> TxnState | None:
        """The client transaction state (None for a non-transactional producer)."""
        return self._sync.transaction_state

    # --- the rest ---------------------------------------------------------------------------------

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition numbers of ``topic``."""
        return await call(self._sync.partitions_for, topic)

    def metrics(self) -> dict[str, float]:
        """Kafka's producer metrics, as :meth:`oncelog.Producer.metrics`."""
        return self._sync.metrics()

    @property
    def producer_id(self) -> int | None:
        """The producer id in use (None before the first send, or without idempotence)."""
        return self._sync.producer_id

    @property
    def producer_epoch(self) -> int | None:
        """The epoch in use (None before the first send, or without idempotence)."""
        return self._sync.producer_epoch

    async def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (up to ``timeout`` seconds), then release everything. An open
        transaction is aborted first (best effort; the store would abort it at its timeout)."""
        validate.timeout("timeout", timeout)
        if self._closed:
            return
        # After any call in progress (a coordinator call holds a thread lock across its wait,
        # which releasing the coordinator connection below takes).
        async with self._calls:
            await self._close(timeout)

    async def _close(self, timeout: float | None) -> None:
        if self._closed:
            return
        sync = self._sync
        manager = sync._manager
        if not sync._prepared and manager.identity is not None and manager.state in _OPEN_STATES:
            try:
                await self.abort_transaction(timeout)
            except errors.OncelogError:
                logger.warning("could not abort the open transaction while closing", exc_info=True)
        self._closed = True
        with sync._cond:
            sync._sender.closing = True
            sync._cond.notify_all()
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except TimeoutError:
                # The sender is still retrying: fail what is left, it will not be sent by us.
                with sync._cond:
                    sync._sender.fail_queued(errors.ProducerClosedError("closed before the record was acknowledged"))
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, errors.OncelogError):
                    await task
        waker = sync._waker
        if isinstance(waker, _LoopWaker):
            await waker.aclose(timeout if timeout is not None else 5)
        await call(manager.close)
        await call(sync._dispose)

    # --- the sender task --------------------------------------------------------------------------

    def _ensure_sender(self) -> None:
        if self._closed or self._sync._sender.closing:
            raise errors.ProducerClosedError()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run_sender(), name="oncelog-producer-sender")
        elif self._task.done():
            raise errors.ProducerClosedError("the sender has stopped")

    async def _run_sender(self) -> None:
        """The sender's loop (:meth:`oncelog.sender.Sender.run`), awaiting instead of blocking."""
        sync = self._sync
        sender, cond = sync._sender, sync._cond
        try:
            while True:
                with cond:
                    batches, at = sender.claim_ready()
                if batches is None:
                    return
                if batches:
                    await call(sender.send_claimed, batches)
                    continue
                await sync.signal.wait(None if at is None else max(at - time.monotonic(), 0.0))
        except BaseException as exc:  # never leave futures hanging if the sender dies
            if not isinstance(exc, asyncio.CancelledError):
                logger.exception("oncelog producer sender failed")
            with cond:
                sender.fail_queued(errors.ProducerClosedError(f"the sender stopped: {exc!r}"))
            raise
        finally:
            await call(sender.release)
