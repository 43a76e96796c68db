"""``oncelog.Producer``: the idempotent and transactional producer.

``send()`` serializes a record, picks its partition and queues it; a background sender thread
sends each partition's batches in order over one autocommit connection (each batch is one
``produce_v2`` call: one round trip, one database transaction).

Exactly-once delivery per partition comes from the store's duplicate detection: a batch keeps its
producer id, epoch and sequence numbers across retries, so a retry after a lost reply is answered
with the original offsets instead of appending again. When a batch's outcome stays unknown until
``delivery_timeout_ms`` (or the store's sequence state disagrees with ours), the producer bumps its
epoch and restarts its sequences (KIP-360) and carries on.

With a ``transactional_id`` every batch joins the current transaction, which the store opens on
the first write and names by its number on every call; ``commit_transaction`` sends what is still
queued, for every partition, with the consumer offsets of ``send_offsets_to_transaction`` and
EndTxn in one call (one database transaction), so readers see all of it or none of it.

This module is the public API (Kafka's ``KafkaProducer``) and wires the parts: the batches wait in
the :class:`~oncelog.accumulator.RecordAccumulator`, the :class:`~oncelog.sender.Sender` thread
sends them, and the :class:`~oncelog.txn_manager.TransactionManager` owns the identity, the
sequences, the KIP-360 recovery and the transaction state (docs/design.md, "The producer client").
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

from oncelog import errors, validate
from oncelog.accumulator import ProducerBatch, RecordAccumulator
from oncelog.client import Client
from oncelog.metrics import WindowedRate
from oncelog.partitioner import DefaultPartitioner, Partitioner
from oncelog.producer_store import DatabaseStore, ProducerStore
from oncelog.record_future import RecordFuture
from oncelog.sender import Sender, SenderMetrics, fail_batch
from oncelog.serde import Serializer, resolve_serializer, serialize_bytes
from oncelog.store import runtime, topics
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.store.records import Headers, encode_headers, record_size
from oncelog.txn_manager import TransactionManager
from oncelog.txn_state import TxnState
from oncelog.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    PreparedTransaction,
    RecordMetadata,
    TopicPartition,
)
from oncelog.waker import ReaderWaker

__all__ = ["Callback", "Producer"]

logger = logging.getLogger(__name__)

Callback = Callable[[RecordMetadata | None, BaseException | None], None]

#: Kafka's request.timeout.ms default: no single request waits longer than this.
_REQUEST_TIMEOUT_MS = 30_000


class Producer(Client):
    """Send records to topics; retries never duplicate or reorder a record within a partition.

    >>> with Producer(url, linger_ms=5) as producer:
    ...     meta = producer.send("orders", b"value", key=b"key").result()
    """

    def __init__(
        self,
        database_url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        client_id: str | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        enable_idempotence: bool = True,
        linger_ms: float = 5,
        batch_size: int = 1 << 20,
        max_batch_records: int = 10_000,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: float = 60_000,
        max_in_flight: int = 5,
        delivery_timeout_ms: float = 120_000,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 1000,
        metadata_max_age_ms: float = 300_000,
        key_serializer: str | Serializer | None = "bytes",
        value_serializer: str | Serializer | None = "bytes",
        partitioner: Partitioner | None = None,
        send_offsets_with_commit: bool = True,
        wake_readers: bool = True,
    ) -> None:
        _check_config(
            linger_ms=linger_ms,
            batch_size=batch_size,
            max_batch_records=max_batch_records,
            buffer_memory=buffer_memory,
            max_in_flight=max_in_flight,
            delivery_timeout_ms=delivery_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
        )
        _check_config(max_block_ms=max_block_ms, metadata_max_age_ms=metadata_max_age_ms)
        # An int32 (the store's column), checked even without a transactional_id, as Kafka does.
        validate.integer("transaction_timeout_ms", transaction_timeout_ms, low=1, error=errors.ConfigurationError)
        if not isinstance(enable_idempotence, bool):
            raise errors.ConfigurationError(f"enable_idempotence must be True or False, not {enable_idempotence!r}")
        if not isinstance(wake_readers, bool):
            raise errors.ConfigurationError(f"wake_readers must be True or False, not {wake_readers!r}")
        if not isinstance(send_offsets_with_commit, bool):
            raise errors.ConfigurationError(
                f"send_offsets_with_commit must be True or False, not {send_offsets_with_commit!r}"
            )
        if partitioner is not None and not callable(partitioner):
            raise errors.ConfigurationError("partitioner must be callable or None")
        if transactional_id is not None:
            if not enable_idempotence:
                raise errors.ConfigurationError("a transactional producer needs enable_idempotence=True")
            validate.text("transactional_id", transactional_id, error=errors.ConfigurationError, max_length=255)
            if not transactional_id:
                raise errors.ConfigurationError("transactional_id must be a string of 1 to 255 characters")
        super().__init__(
            database_url,
            schema=schema,
            pool_size=2,
            request_timeout_ms=_attempt_timeout(delivery_timeout_ms) * 1000,
            client_id=client_id,
        )
        self.transactional_id = transactional_id
        self._prepared = False
        self._linger = linger_ms / 1000
        self._max_block = max_block_ms / 1000
        self._backoff = (retry_backoff_ms / 1000, retry_backoff_max_ms / 1000)
        self._buffer_memory = buffer_memory
        # Outside transactions, the sender sends up to this many requests at once, each on its own
        # connection with other partitions (docs/design.md, "The producer's lanes").
        self.max_in_flight = max_in_flight
        self._metadata_max_age = metadata_max_age_ms / 1000
        self._key_ser = resolve_serializer(key_serializer)
        self._value_ser = resolve_serializer(value_serializer)
        self._default_partitioner = DefaultPartitioner()
        self._partitioner: Partitioner = partitioner or self._default_partitioner
        # topic -> (fetched at, metadata, its TopicPartitions by number)
        self._metadata: dict[str, tuple[float, topics.TopicMetadata, list[TopicPartition]]] = {}
        self._metrics = _ProducerMetrics()

        # The parts (Kafka's KafkaProducer / RecordAccumulator / Sender / TransactionManager): the
        # accumulator and the sender's fields are guarded by _cond, shared with send() and flush();
        # identity, sequences and transaction state by the manager's own lock.
        store = _store(self)
        attempt_timeout = _attempt_timeout(delivery_timeout_ms)
        # Readers waiting on what this producer writes are woken from a thread of its own, outside
        # the writes' transactions (docs/design.md, "Waking readers").
        self._waker = self._new_waker(store, attempt_timeout)
        wake = self._waker.wake if wake_readers else None
        self._manager = TransactionManager(
            store,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            idempotent=enable_idempotence,
            request_timeout=self._timeouts.request_ms / 1000 if self._timeouts else attempt_timeout,
            max_block=self._max_block,
            backoff=retry_backoff_ms / 1000,
            backoff_max=retry_backoff_max_ms / 1000,
            metric=self._metrics.bump,
            offsets_with_commit=send_offsets_with_commit,
            wake=wake,
        )
        self._cond = self._new_condition()
        self._acc = RecordAccumulator(batch_size=batch_size, max_batch_records=max_batch_records)
        self._sender = Sender(
            store,
            self._manager,
            self._acc,
            self._cond,
            linger=self._linger,
            delivery_timeout=delivery_timeout_ms / 1000,
            attempt_timeout=attempt_timeout,
            backoff=retry_backoff_ms / 1000,
            backoff_max=retry_backoff_max_ms / 1000,
            metrics=self._metrics,
            wake=wake,
            lanes=self._sender_lanes(max_in_flight),
        )
        self._start_sender()

    # --- what runs the sender (oncelog.aio runs it as a task of its event loop instead) ---------

    def _new_condition(self) -> threading.Condition:
        return threading.Condition(threading.Lock())

    def _new_waker(self, store: ProducerStore, request_timeout: float) -> ReaderWaker:
        return ReaderWaker(store, request_timeout=request_timeout, metric=self._metrics.bump)

    def _sender_lanes(self, max_in_flight: int) -> int:
        return max_in_flight

    def _start_sender(self) -> None:
        self._sender_thread = threading.Thread(target=self._sender.run, name="oncelog-producer-sender", daemon=True)
        self._sender_thread.start()

    # --- public API -------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        headers: Headers | Mapping[str, bytes | None] | None = None,
        timestamp: datetime | float | None = None,
        callback: Callback | None = None,
    ) -> RecordFuture:
        """Queue a record; the future resolves with its RecordMetadata once acknowledged.

        Bad input (serialization, unknown topic or partition, a record over the topic's
        max_message_bytes) raises a typed error here and queues nothing. ``timestamp`` is a
        datetime or milliseconds since the epoch; ``callback(metadata, exception)`` runs on the
        sender thread when the record completes.

        The future is a :class:`~oncelog.record_future.RecordFuture`: a light handle on its
        batch's outcome (all records of a batch complete together), and a
        ``concurrent.futures.Future`` for ``wait()``, ``as_completed()`` and asyncio.
        """
        if self._sender.closing or self._closed:
            raise errors.ProducerClosedError()
        self._manager.require_in_transaction()
        # Every argument is checked before anything is queued: a bad one raises here, typed. The
        # common case (bytes in, no headers, no timestamp) takes the short branch of each check:
        # this runs once per record.
        now = time.monotonic()
        topic_meta = self._fresh_metadata(topic, now)
        if callback is not None:
            validate.callback("callback", callback)
        if key is None or (type(key) is bytes and self._key_ser is serialize_bytes):
            key_bytes = key
        else:
            key_bytes = validate.serialized("key", self._key_ser, key)
        if value is None or (type(value) is bytes and self._value_ser is serialize_bytes):
            value_bytes = value
        else:
            value_bytes = validate.serialized("value", self._value_ser, value)
        headers_json = None if headers is None else encode_headers(validate.headers(headers))
        ts = None if timestamp is None else validate.record_timestamp(timestamp)
        meta, tps = topic_meta
        if partition is None:
            partition = self._partitioner(topic, key_bytes, meta.partitions)
        if (
            type(partition) is not int and (isinstance(partition, bool) or not isinstance(partition, int))
        ) or not 0 <= partition < meta.partitions:
            raise errors.UnknownTopicOrPartitionError(
                f"partition {partition!r} of topic {topic!r} does not exist ({meta.partitions} partitions)"
            )
        size = record_size(key_bytes, value_bytes, headers_json)
        if size > meta.max_message_bytes:
            raise errors.RecordTooLargeError(
                f"a record of {size} bytes exceeds max_message_bytes {meta.max_message_bytes} of topic {topic!r}"
            )
        with self._cond:
            if self._acc.buffered_bytes + size > self._buffer_memory and self._acc.buffered_bytes > 0:
                self._wait_for_buffer(size, now + self._max_block)
            txn_number = self._manager.txn_number if self._manager.transactional else None
            batch, future = self._acc.append(
                tps[partition], key_bytes, value_bytes, headers_json, ts, size=size, now=now, txn_number=txn_number
            )
            if batch.full or batch.count == 1:
                # A new batch starts its linger clock; a full one is ready now.
                self._cond.notify_all()
            if callback is not None:
                future.add_record_callback(callback)
        if batch.full:
            if key_bytes is None and self._partitioner is self._default_partitioner:
                # The sticky partition's batch is complete: the next keyless records go elsewhere.
                self._default_partitioner.on_new_batch(topic, meta.partitions, partition)
            self._hand_over()
        return future

    def _hand_over(self) -> None:
        """A batch is full: let the sender (notified) start on it now."""
        # Hand the GIL to the sender thread: a woken thread otherwise waits for CPython's switch
        # interval (5 ms) while this thread keeps appending, and a transaction's batches then all
        # wait for its commit.
        time.sleep(0)

    def _wait_for_buffer(self, size: int, deadline: float) -> None:
        """Under the lock: wait until ``size`` more bytes fit in buffer_memory (max_block_ms)."""
        while self._acc.buffered_bytes + size > self._buffer_memory and self._acc.buffered_bytes > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._sender.closing:
                raise errors.DeliveryTimeoutError(
                    f"buffer_memory ({self._buffer_memory} bytes) stayed full for max_block_ms"
                )
            self._cond.wait(remaining)

    def flush(self, timeout: float | None = None) -> None:
        """Send every queued record now and wait until all have completed (or ``timeout`` passes)."""
        validate.timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._sender.flushing += 1
            self._cond.notify_all()
            try:
                while len(self._acc) or self._sender.in_flight:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise errors.DeliveryTimeoutError("flush timed out with records still queued")
                    if not self._sender_thread.is_alive():
                        raise errors.ProducerClosedError("the sender thread has stopped")
                    self._cond.wait(remaining if remaining is not None else 0.5)
            finally:
                self._sender.flushing -= 1

    # --- transactions ----------------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id: fence every older instance (aborting its open
        transaction) and get the epoch this instance writes with. Call once, first."""
        validate.timeout("timeout", timeout)
        manager = self._require_transactional()
        started = time.monotonic()
        manager.init_transactions(timeout)
        self._metrics.bump("txn_init_time_ms_total", (time.monotonic() - started) * 1000)

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on commit or abort together."""
        manager = self._require_transactional()
        started = time.monotonic()
        manager.begin_transaction()
        self._metrics.bump("txn_begin_time_ms_total", (time.monotonic() - started) * 1000)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is queued and commit the transaction: all of its records become visible to
        read_committed readers at once, on every partition.

        An abortable error (a send failed, the transaction timed out) leaves the producer in
        ABORTABLE_ERROR: call :meth:`abort_transaction`, then carry on. A fatal error (fenced by
        another instance) means this producer must be closed.
        """
        validate.timeout("timeout", timeout)
        manager = self._require_transactional()
        started = time.monotonic()
        # From here the sender sends everything still queued together with the offsets and EndTxn.
        manager.begin_commit()
        # A timeout here leaves the state COMMITTING_TRANSACTION: the application calls
        # commit_transaction() again, and the sender keeps retrying the batches sent with EndTxn
        # until its outcome is known (which decides the transaction's).
        self.flush(timeout)
        if timeout is not None:  # the flush and the EndTxn share the caller's one timeout
            timeout = max(timeout - (time.monotonic() - started), 0.0)
        manager.finish_commit(timeout)
        self._metrics.bump("txn_commit_total")
        self._metrics.bump("txn_commit_time_ms_total", (time.monotonic() - started) * 1000)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent are dropped (their futures fail with
        TransactionAbortedError), the rest are marked aborted and never reach read_committed
        readers. After an error, the producer also bumps its epoch (KIP-360) and carries on."""
        validate.timeout("timeout", timeout)
        manager = self._require_transactional()
        started = time.monotonic()
        manager.begin_abort()
        with self._cond:
            self._drop_unsent()
            while len(self._acc) or self._sender.in_flight:
                self._cond.wait(0.5)
        manager.finish_abort(timeout)
        self._metrics.bump("txn_abort_total")
        self._metrics.bump("txn_abort_time_ms_total", (time.monotonic() - started) * 1000)

    def _drop_unsent(self) -> None:
        """Under the lock, as an abort begins: fail the batches not being sent (never sent, or
        waiting for a retry); the batches in flight finish as the abort lets them."""
        for batch in self._acc.remove_all_except(self._sender.sending):
            self._manager.dropped_unsent(batch)
            fail_batch(batch, errors.TransactionAbortedError("the transaction was aborted before this record was sent"))
        self._cond.notify_all()

    def prepare_transaction(self, timeout: float | None = None) -> PreparedTransaction:
        """Flush the transaction and hand it over still open, for another party to end in a
        database transaction of its own (``oncelog.store.txn.end_txn``), e.g. a Spark driver
        committing every task's output at once. Like Kafka's KIP-939 prepare. This producer is
        closed afterwards; the store aborts the transaction at its timeout if nobody ends it."""
        validate.timeout("timeout", timeout)
        state = self._require_transactional().require_transactional()  # the state machine
        state.require_can_commit()
        self.flush(timeout)
        # The offsets held for the commit go now: whoever ends the transaction does not have them.
        self._manager.flush_offsets(timeout)
        if state.has_error:
            state.require_can_commit()  # raises the error a send recorded
        prepared = self._manager.prepared()
        self._prepared = True
        self.close(timeout)
        return prepared

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata,
        timeout: float | None = None,
    ) -> None:
        """Commit a consumer group's offsets inside the current transaction (KIP-447): they become
        the group's committed offsets exactly when the transaction commits, and vanish if it aborts.

        ``offsets`` are the next offsets to read (positions), per partition. They travel with the
        commit (one call for the queued records, the offsets and EndTxn), where the store checks
        the member, its generation and (beyond Kafka) that it owns those partitions: a member that
        missed a rebalance gets an abortable error from :meth:`commit_transaction` (Kafka raises
        it here; docs/deviations.md, 42): abort the transaction, its output is dropped. Offsets of
        a second group in the same transaction send the first group's at once. With
        ``send_offsets_with_commit=False`` they are sent here, as Kafka does (TxnOffsetCommit, a
        round trip of its own; a refusal is raised by this call).
        """
        validate.timeout("timeout", timeout)
        pairs = validate.offset_map(offsets)
        if not isinstance(group_metadata, ConsumerGroupMetadata):
            raise errors.InvalidRequestError("group_metadata must be Consumer.group_metadata()'s ConsumerGroupMetadata")
        manager = self._require_transactional()
        started = time.monotonic()
        manager.txn_offset_commit(pairs, group_metadata, timeout)
        self._metrics.bump("txn_send_offsets_total")
        self._metrics.bump("txn_send_offsets_time_ms_total", (time.monotonic() - started) * 1000)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Producer]:
        """``with producer.transaction():`` begins, commits on a clean exit, and aborts on an
        exception (unless the error is fatal: a fenced producer cannot abort), re-raising it."""
        self.begin_transaction()
        try:
            yield self
        except BaseException as exc:
            fatal = (isinstance(exc, errors.OncelogError) and exc.fatal) or self._manager.is_fatal
            if not fatal:
                self.abort_transaction()
            raise
        self.commit_transaction()

    @property
    def transaction_state(self) -> TxnState | None:
        """The client transaction state (None for a non-transactional producer)."""
        return self._manager.state

    def _require_transactional(self) -> TransactionManager:
        self._manager.require_transactional()
        if self._closed or self._sender.closing:
            raise errors.ProducerClosedError()
        return self._manager

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (up to ``timeout`` seconds), then release everything.

        An open transaction is aborted first (best effort; the store would abort it at its
        timeout anyway)."""
        validate.timeout("timeout", timeout)
        if self._closed:
            return
        if (
            not self._prepared
            and self._manager.identity is not None
            # ABORTING_TRANSACTION: an abort that timed out, which may be carried on.
            and self._manager.state
            in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING_TRANSACTION)
        ):
            try:
                self.abort_transaction(timeout)
            except errors.OncelogError:
                logger.warning("could not abort the open transaction while closing", exc_info=True)
        with self._cond:
            self._sender.closing = True
            self._cond.notify_all()
        self._sender_thread.join(timeout)
        if self._sender_thread.is_alive():
            # The sender is still retrying: fail what is left, it will not be sent by us.
            with self._cond:
                for batch in list(self._acc.batches()):
                    fail_batch(batch, errors.ProducerClosedError("closed before the record was acknowledged"))
            self._sender_thread.join(5)
        self._waker.close(timeout if timeout is not None else 5)
        self._manager.close()
        super().close()

    def partitions_for(self, topic: str) -> list[int]:
        """The partition numbers of ``topic``."""
        validate.text("topic", topic, error=errors.InvalidTopicError)
        return list(range(self._topic_metadata(topic, refresh=True).partitions))

    def metrics(self) -> dict[str, float]:
        """Kafka's producer metrics, as a plain dict (export: :func:`oncelog.metrics.register_prometheus`).

        Totals since the producer was created (``*_total``; ``txn_*_time_ms_total`` is the time spent
        in each transaction call), maxima, averages per request (one request appends one batch to
        one partition), and rates over the last 30 to 60 seconds (``*_rate``, per second).
        """
        return self._metrics.snapshot()

    @property
    def producer_id(self) -> int | None:
        """The producer id in use (None before the first send, or without idempotence)."""
        ident = self._manager.identity
        return ident.producer_id if ident else None

    @property
    def producer_epoch(self) -> int | None:
        """The epoch in use (None before the first send, or without idempotence)."""
        ident = self._manager.identity
        return ident.epoch if ident else None

    # --- metadata ---------------------------------------------------------------------------

    def _fresh_metadata(self, topic: str, now: float) -> tuple[topics.TopicMetadata, list[TopicPartition]]:
        """The topic's metadata and its partitions, cached for metadata_max_age_ms (send()'s path:
        a hit costs one lookup)."""
        try:
            cached = self._metadata.get(topic)
        except TypeError:  # unhashable: not a topic name
            cached = None
        if cached is not None and now - cached[0] < self._metadata_max_age:
            return cached[1], cached[2]
        meta = self._topic_metadata(topic, refresh=True)
        return meta, self._metadata[topic][2]

    def _topic_metadata(self, topic: str, refresh: bool = False) -> topics.TopicMetadata:
        validate.text("topic", topic, error=errors.InvalidTopicError)
        now = time.monotonic()
        cached = self._metadata.get(topic)
        if cached and not refresh and now - cached[0] < self._metadata_max_age:
            return cached[1]
        meta = self._fetch_metadata(topic, now + self._max_block)
        self._metadata[topic] = (now, meta, [TopicPartition(topic, p) for p in range(meta.partitions)])
        return meta

    def _fetch_metadata(self, topic: str, deadline: float) -> topics.TopicMetadata:
        """The topic's metadata from the store, asked again after a retriable error (the database
        unreachable or restarting) with backoff until ``deadline``: as Kafka's send() blocks up to
        max.block.ms for metadata. Past it, the last error, saying how long it was tried."""
        delay, delay_max = self._backoff
        while True:
            try:
                with self._request() as conn:
                    return topics.topic_metadata(conn, name=topic)
            except errors.OncelogError as exc:
                remaining = deadline - time.monotonic()
                if not exc.retriable or self._closed:
                    raise
                if remaining <= 0:
                    raise type(exc)(
                        f"no metadata for topic {topic!r} within max_block_ms ({self._max_block * 1000:.0f} ms): {exc}"
                    ) from exc
                runtime.sleep(min(delay, remaining))
                delay = min(delay * 2, delay_max)


class _ProducerMetrics(SenderMetrics):
    """The producer's counters (Kafka's producer metrics), fed by every part."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = dict.fromkeys(_COUNTERS, 0)
        self._record_rate = WindowedRate()
        self._request_rate = WindowedRate()

    def bump(self, name: str, by: float = 1) -> None:
        """Add ``by`` to the counter ``name``."""
        with self._lock:
            self._values[name] += by

    def sent(self, batch: ProducerBatch, latency_ms: float) -> None:
        """``batch`` was acknowledged after a request of ``latency_ms``."""
        with self._lock:
            m = self._values
            m["record_send_total"] += batch.count
            m["batch_send_total"] += 1
            m["batch_size_total"] += batch.size
            m["batch_size_max"] = max(m["batch_size_max"], batch.size)
            m["request_latency_total_ms"] += latency_ms
            m["request_latency_max_ms"] = max(m["request_latency_max_ms"], latency_ms)
        self._record_rate.record(batch.count)
        self._request_rate.record()

    def snapshot(self) -> dict[str, float]:
        """Every metric: the counters, with averages and rates derived from them."""
        with self._lock:
            m = dict(self._values)
        batches = m["batch_send_total"] or 1
        m["batch_size_avg"] = m.pop("batch_size_total") / batches
        m["request_latency_avg_ms"] = m.pop("request_latency_total_ms") / batches
        m["records_per_request_avg"] = m["record_send_total"] / batches
        m["record_send_rate"] = self._record_rate.rate()
        m["request_rate"] = self._request_rate.rate()
        return m


_COUNTERS = (
    "record_send_total",
    "record_retry_total",
    "record_error_total",
    "batch_send_total",
    "batch_size_max",
    "batch_size_total",
    "request_latency_total_ms",
    "request_latency_max_ms",
    "epoch_bump_total",
    "producer_id_reset_total",
    "txn_init_time_ms_total",
    "txn_begin_time_ms_total",
    "txn_commit_time_ms_total",
    "txn_abort_time_ms_total",
    "txn_commit_total",
    "txn_abort_total",
    "txn_send_offsets_time_ms_total",
    "txn_send_offsets_total",
    "reader_wakeup_total",
)


def _store(client: Client) -> ProducerStore:
    """The store the producer's parts talk to: the database, through the client's connections
    (a seam: the sender's unit tests put a fake store here)."""
    return DatabaseStore(client._connect)


def _attempt_timeout(delivery_timeout_ms: float) -> float:
    """Seconds one send of a batch may take: a quarter of delivery_timeout_ms, at most Kafka's
    request.timeout.ms. One sender sends every partition's batches in turn on one connection, so
    a batch waiting for a partition's lock must give the batches behind it a turn well before their
    deadlines; it is retried (a lock timeout appends nothing) until its own deadline."""
    return max(min(_REQUEST_TIMEOUT_MS, delivery_timeout_ms / 4), 1) / 1000


def _check_config(**values: float) -> None:
    """Settings in milliseconds, bytes or counts: each a finite number from 0 to int32's maximum
    (a NaN linger would compare false everywhere and never send), then the rules of each."""
    for name, value in values.items():
        validate.number(name, value, error=errors.ConfigurationError)
    if "linger_ms" not in values:
        return
    for name in ("batch_size", "max_batch_records", "buffer_memory", "delivery_timeout_ms"):
        if values[name] <= 0:
            raise errors.ConfigurationError(f"{name} must be positive")
    if not 1 <= values["max_in_flight"] <= 5:
        raise errors.ConfigurationError("max_in_flight must be between 1 and 5 (Kafka's limit for idempotence)")
    if not 0 < values["retry_backoff_ms"] <= values["retry_backoff_max_ms"]:
        raise errors.ConfigurationError("need 0 < retry_backoff_ms <= retry_backoff_max_ms")
