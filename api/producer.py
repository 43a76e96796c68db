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
the first write and names by its number on every call; ``commit_transaction`` flushes and ends it
with one EndTxn (one database transaction), so readers see all of it or none of it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from oncelog import errors, validate
from oncelog.accumulator import PendingRecord, ProducerBatch, RecordAccumulator
from oncelog.client import Client
from oncelog.metrics import WindowedRate
from oncelog.partitioner import DefaultPartitioner, Partitioner
from oncelog.serde import Serializer, resolve_serializer
from oncelog.store import groups, log, topics, txn
from oncelog.store.engine import CLIENT_GRACE_S, DEFAULT_SCHEMA, bounded, set_request_timeout
from oncelog.store.records import Headers, ProducerIdAndEpoch, RecordIn, encode_headers, record_size
from oncelog.txn_state import TransactionStateMachine, TxnState
from oncelog.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    PreparedTransaction,
    RecordMetadata,
    TopicPartition,
)

logger = logging.getLogger(__name__)

Callback = Callable[[RecordMetadata | None, BaseException | None], None]

#: Kafka's sequence space: 31 bits, wrapping to 0.
_SEQUENCE_MODULUS = 2**31
#: Errors meaning the store's sequence state for us is not what we think: restart under a new epoch.
_RESEQUENCE = (errors.OutOfOrderSequenceError, errors.UnknownProducerIdError, errors.InvalidProducerEpochError)
#: How many times one batch may be taken up and re-sequenced under a new identity before it fails
#: (each round is a bump or a fresh id and a send; more rounds mean the identity is being taken
#: away as fast as we get one).
_MAX_RESEQUENCE_TRIES = 6
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
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        enable_idempotence: bool = True,
        linger_ms: float = 5,
        batch_size: int = 16384,
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
        if partitioner is not None and not callable(partitioner):
            raise errors.ConfigurationError("partitioner must be callable or None")
        if transactional_id is not None:
            if not enable_idempotence:
                raise errors.ConfigurationError("a transactional producer needs enable_idempotence=True")
            validate.text("transactional_id", transactional_id, error=errors.ConfigurationError, max_length=255)
            if not transactional_id:
                raise errors.ConfigurationError("transactional_id must be a string of 1 to 255 characters")
        super().__init__(
            database_url, schema=schema, pool_size=2, request_timeout_ms=_attempt_timeout(delivery_timeout_ms) * 1000
        )
        self._idempotent = enable_idempotence
        self.transactional_id = transactional_id
        self._txn_timeout_ms = transaction_timeout_ms
        self._txn = TransactionStateMachine(transactional_id) if transactional_id else None
        self._txn_number = 0
        self._init_timed_out = False  # init_transactions() ran out of time: it may be called again
        self._txn_aborting = False
        self._txn_needs_bump = False
        self._prepared = False
        self._linger = linger_ms / 1000
        self._max_block = max_block_ms / 1000
        self._buffer_memory = buffer_memory
        # One sender thread sends one batch at a time for the whole producer (docs/design.md), so
        # this has no effect beyond being validated for Kafka parity.
        self.max_in_flight = max_in_flight
        self._delivery_timeout = delivery_timeout_ms / 1000
        self._backoff = retry_backoff_ms / 1000
        self._backoff_max = retry_backoff_max_ms / 1000
        self._metadata_max_age = metadata_max_age_ms / 1000
        self._key_ser = resolve_serializer(key_serializer)
        self._value_ser = resolve_serializer(value_serializer)
        self._default_partitioner = DefaultPartitioner()
        self._partitioner: Partitioner = partitioner or self._default_partitioner

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._acc = RecordAccumulator(batch_size=batch_size, max_batch_records=max_batch_records)
        self._metadata: dict[str, tuple[float, topics.TopicMetadata]] = {}
        self._flushing = 0
        self._closing = False
        self._in_flight = 0
        self._sending: set[int] = set()  # ids of the batches the sender holds right now
        # commit_transaction() names the transaction it commits here; the sender then sends that
        # transaction's last batch together with EndTxn (one database transaction, one round trip:
        # produce_end_txn_v1) and, once that committed, names it in _committed_with_batch. Under _cond.
        self._commit_number: int | None = None
        self._committed_with_batch: int | None = None

        # Sender-thread state (only the sender thread touches these after start).
        self._attempt_timeout = _attempt_timeout(delivery_timeout_ms)
        self._identity: ProducerIdAndEpoch | None = None
        self._need_bump = False
        self._next_sequence: dict[TopicPartition, int] = {}
        self._conn: sa.Connection | None = None
        # The coordinator calls' own connection (InitProducerId, EndTxn, TxnOffsetCommit), kept
        # between calls: a pool checkout pings the server first, a second round trip per commit.
        # The lock serialises those calls, so application threads never share it at once.
        self._coord_conn: sa.Connection | None = None
        self._coord_lock = threading.Lock()

        self._metrics_lock = threading.Lock()
        self._metrics: dict[str, float] = {
            "record_send_total": 0,
            "record_retry_total": 0,
            "record_error_total": 0,
            "batch_send_total": 0,
            "batch_size_max": 0,
            "batch_size_total": 0,
            "request_latency_total_ms": 0.0,
            "request_latency_max_ms": 0.0,
            "epoch_bump_total": 0,
            "producer_id_reset_total": 0,
            "txn_init_time_ms_total": 0.0,
            "txn_begin_time_ms_total": 0.0,
            "txn_commit_time_ms_total": 0.0,
            "txn_abort_time_ms_total": 0.0,
            "txn_commit_total": 0,
            "txn_abort_total": 0,
            "txn_send_offsets_time_ms_total": 0.0,
            "txn_send_offsets_total": 0,
        }
        self._record_rate = WindowedRate()
        self._request_rate = WindowedRate()
        self._sender = threading.Thread(target=self._run_sender, name="oncelog-producer-sender", daemon=True)
        self._sender.start()

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
    ) -> Future[RecordMetadata]:
        """Queue a record; the future resolves with its RecordMetadata once acknowledged.

        Bad input (serialization, unknown topic or partition, a record over the topic's
        max_message_bytes) raises a typed error here and queues nothing. ``timestamp`` is a
        datetime or milliseconds since the epoch; ``callback(metadata, exception)`` runs on the
        sender thread when the record completes.
        """
        if self._closing or self._closed:
            raise errors.ProducerClosedError()
        if self._txn is not None:
            self._txn.require_in_transaction()
        # Every argument is checked before anything is queued: a bad one raises here, typed.
        validate.text("topic", topic, error=errors.InvalidTopicError)
        validate.callback("callback", callback)
        key_bytes = validate.serialized("key", self._key_ser, key)
        value_bytes = validate.serialized("value", self._value_ser, value)
        header_list = validate.headers(headers)
        ts = validate.record_timestamp(timestamp)
        meta = self._topic_metadata(topic)
        if partition is None:
            partition = self._partitioner(topic, key_bytes, meta.partitions)
        if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < meta.partitions:
            raise errors.UnknownTopicOrPartitionError(
                f"partition {partition!r} of topic {topic!r} does not exist ({meta.partitions} partitions)"
            )
        size = record_size(key_bytes, value_bytes, encode_headers(header_list))
        if size > meta.max_message_bytes:
            raise errors.RecordTooLargeError(
                f"a record of {size} bytes exceeds max_message_bytes {meta.max_message_bytes} of topic {topic!r}"
            )
        future: Future[RecordMetadata] = Future()
        if callback is not None:
            _attach(future, callback)
        record = PendingRecord(key_bytes, value_bytes, header_list, ts, size, future)
        tp = TopicPartition(topic, partition)
        deadline = time.monotonic() + self._max_block
        with self._cond:
            while self._acc.buffered_bytes + size > self._buffer_memory and self._acc.buffered_bytes > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closing:
                    raise errors.DeliveryTimeoutError(
                        f"buffer_memory ({self._buffer_memory} bytes) stayed full for max_block_ms"
                    )
                self._cond.wait(remaining)
            txn_number = self._txn_number if self._txn is not None else None
            batch = self._acc.append(tp, record, time.monotonic(), txn_number)
            if batch.full or len(batch.records) == 1:
                # A new batch starts its linger clock; a full one is ready now.
                self._cond.notify_all()
        if batch.full:
            if key_bytes is None and self._partitioner is self._default_partitioner:
                # The sticky partition's batch is complete: the next keyless records go elsewhere.
                self._default_partitioner.on_new_batch(topic, meta.partitions, partition)
            # Hand the GIL to the sender (notified above) so it starts on the full batch now:
            # a woken thread otherwise waits for CPython's switch interval (5 ms) while this
            # thread keeps appending, and a transaction's batches then all wait for its commit.
            time.sleep(0)
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Send every queued record now and wait until all have completed (or ``timeout`` passes)."""
        validate.timeout("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while len(self._acc) or self._in_flight:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise errors.DeliveryTimeoutError("flush timed out with records still queued")
                    if not self._sender.is_alive():
                        raise errors.ProducerClosedError("the sender thread has stopped")
                    self._cond.wait(remaining if remaining is not None else 0.5)
            finally:
                self._flushing -= 1

    # --- transactions ----------------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id: fence every older instance (aborting its open
        transaction) and get the epoch this instance writes with. Call once, first."""
        validate.timeout("timeout", timeout)
        state = self._require_transactional()
        retry = state.state is TxnState.INITIALIZING and self._init_timed_out
        if state.state is not TxnState.UNINITIALIZED and not retry:
            raise errors.IllegalStateError(f"init_transactions() was already called (state {state.state.name})")
        started = time.monotonic()
        if not retry:
            state.transition_to(TxnState.INITIALIZING)
        try:
            self._init_identity(bump=False, timeout=timeout)
        except errors.OncelogError as exc:
            # As in Kafka, a call that ran out of time (the store unreachable, say) may be repeated:
            # a first InitProducerId that did land only bumped an epoch nobody has used yet.
            self._init_timed_out = exc.retriable
            raise
        self._init_timed_out = False
        state.transition_to(TxnState.READY)
        self._bump_metric("txn_init_time_ms_total", (time.monotonic() - started) * 1000)

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on commit or abort together."""
        state = self._require_transactional()
        started = time.monotonic()
        state.require_can_begin()
        self._txn_number += 1
        state.transition_to(TxnState.IN_TRANSACTION)
        self._bump_metric("txn_begin_time_ms_total", (time.monotonic() - started) * 1000)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is queued and commit the transaction: all of its records become visible to
        read_committed readers at once, on every partition.

        An abortable error (a send failed, the transaction timed out) leaves the producer in
        ABORTABLE_ERROR: call :meth:`abort_transaction`, then carry on. A fatal error (fenced by
        another instance) means this producer must be closed.
        """
        validate.timeout("timeout", timeout)
        state = self._require_transactional()
        started = time.monotonic()
        if not state.require_can_commit():
            state.transition_to(TxnState.COMMITTING_TRANSACTION)
        with self._cond:
            self._commit_number = self._txn_number
        # A timeout here leaves the state COMMITTING_TRANSACTION: the application calls
        # commit_transaction() again, and the sender keeps retrying a batch sent with EndTxn
        # until its outcome is known (which decides the transaction's).
        self.flush(timeout)
        if timeout is not None:  # the flush and the EndTxn share the caller's one timeout
            timeout = max(timeout - (time.monotonic() - started), 0.0)
        with self._cond:
            committed, self._committed_with_batch = self._committed_with_batch == self._txn_number, None
        if state.has_error:
            state.require_can_commit()  # raises the error a send recorded
        if not committed:  # nothing was left to send with EndTxn
            self._end_txn(commit=True, timeout=timeout)
        state.transition_to(TxnState.READY)
        self._bump_metric("txn_commit_total")
        self._bump_metric("txn_commit_time_ms_total", (time.monotonic() - started) * 1000)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent are dropped (their futures fail with
        TransactionAbortedError), the rest are marked aborted and never reach read_committed
        readers. After an error, the producer also bumps its epoch (KIP-360) and carries on."""
        validate.timeout("timeout", timeout)
        state = self._require_transactional()
        started = time.monotonic()
        after_error = state.state is TxnState.ABORTABLE_ERROR
        if not state.require_can_abort():
            state.transition_to(TxnState.ABORTING_TRANSACTION)
        self._txn_needs_bump |= after_error
        with self._cond:
            self._txn_aborting = True
            for batch in self._acc.remove_all_except(self._sending):
                self._txn_needs_bump |= batch.sent_once  # its outcome is unknown
                _fail(batch, errors.TransactionAbortedError("the transaction was aborted before this record was sent"))
            self._cond.notify_all()
            while len(self._acc) or self._in_flight:
                self._cond.wait(0.5)
            self._txn_aborting = False
        try:
            outcome = self._end_txn(commit=False, timeout=timeout)
        except errors.InvalidProducerEpochError:
            # The store already aborted this transaction at its timeout and bumped the epoch (it
            # says so only as long as it remembers the epoch before the bump): the abort is done,
            # and the KIP-360 bump below takes the producer to the current epoch.
            outcome = "already_aborted_timed_out"
        if outcome.endswith("timed_out"):
            self._txn_needs_bump = True
        if self._txn_needs_bump:
            state.transition_to(TxnState.INITIALIZING)
            self._init_identity(bump=True, timeout=timeout)
            self._txn_needs_bump = False
        state.transition_to(TxnState.READY)
        self._bump_metric("txn_abort_total")
        self._bump_metric("txn_abort_time_ms_total", (time.monotonic() - started) * 1000)

    def prepare_transaction(self, timeout: float | None = None) -> PreparedTransaction:
        """Flush the transaction and hand it over still open, for another party to end in a
        database transaction of its own (``oncelog.store.txn.end_txn``), e.g. a Spark driver
        committing every task's output at once. Like Kafka's KIP-939 prepare. This producer is
        closed afterwards; the store aborts the transaction at its timeout if nobody ends it."""
        validate.timeout("timeout", timeout)
        state = self._require_transactional()
        state.require_can_commit()
        self.flush(timeout)
        if state.has_error:
            state.require_can_commit()  # raises the error a send recorded
        assert self._identity is not None and self.transactional_id is not None  # in a transaction
        prepared = PreparedTransaction(
            self.transactional_id, self._identity.producer_id, self._identity.epoch, self._txn_number
        )
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

        ``offsets`` are the next offsets to read (positions), per partition. The store checks the
        member, its generation and (beyond Kafka) that it owns those partitions; a member that
        missed a rebalance gets an abortable error: abort the transaction, its output is dropped.
        """
        validate.timeout("timeout", timeout)
        pairs = validate.offset_map(offsets)
        if not isinstance(group_metadata, ConsumerGroupMetadata):
            raise errors.InvalidRequestError("group_metadata must be Consumer.group_metadata()'s ConsumerGroupMetadata")
        state = self._require_transactional()
        state.require_in_transaction()
        assert self._identity is not None and self.transactional_id is not None  # in a transaction
        started = time.monotonic()
        ident, tid, number = self._identity, self.transactional_id, self._txn_number
        try:
            self._retrying(
                timeout,
                lambda conn: groups.txn_offset_commit(
                    conn,
                    transactional_id=tid,
                    producer_id=ident.producer_id,
                    epoch=ident.epoch,
                    txn_number=number,
                    group_id=group_metadata.group_id,
                    member_id=group_metadata.member_id,
                    group_instance_id=group_metadata.group_instance_id,
                    generation=group_metadata.generation_id,
                    offsets=pairs,
                ),
            )
        except (
            errors.UnknownMemberIdError,
            errors.IllegalGenerationError,
            errors.FencedInstanceIdError,
            errors.UnassignedPartitionError,
            errors.GroupIdNotFoundError,
        ) as exc:
            # The consumer is the zombie, not this producer: as in Kafka, the transaction can only
            # abort; the producer itself carries on.
            failed = errors.TransactionAbortableError(f"the consumer's offsets were refused: {exc}")
            state.transition_to_abortable_error(failed)
            raise failed from exc
        except errors.OncelogError as exc:
            self._record_txn_error(exc)
            raise
        self._bump_metric("txn_send_offsets_total")
        self._bump_metric("txn_send_offsets_time_ms_total", (time.monotonic() - started) * 1000)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Producer]:
        """``with producer.transaction():`` begins, commits on a clean exit, and aborts on an
        exception (unless the error is fatal: a fenced producer cannot abort), re-raising it."""
        self.begin_transaction()
        try:
            yield self
        except BaseException as exc:
            fatal = (isinstance(exc, errors.OncelogError) and exc.fatal) or (
                self._txn is not None and self._txn.is_fatal
            )
            if not fatal:
                self.abort_transaction()
            raise
        self.commit_transaction()

    @property
    def transaction_state(self) -> TxnState | None:
        """The client transaction state (None for a non-transactional producer)."""
        return self._txn.state if self._txn is not None else None

    def _require_transactional(self) -> TransactionStateMachine:
        if self._txn is None:
            raise errors.IllegalStateError("this producer has no transactional_id")
        if self._closed or self._closing:
            raise errors.ProducerClosedError()
        return self._txn

    def _retrying(self, timeout: float | None, what: Callable[[sa.Connection], Any]) -> Any:
        """Run a coordinator call, retrying retriable failures (a lost reply is safe: every
        coordinator call is idempotent for the same arguments) until ``timeout``/max_block_ms."""
        deadline = time.monotonic() + (self._max_block if timeout is None else timeout)
        delay = self._backoff
        request = self._timeouts.request_ms / 1000 if self._timeouts else self._attempt_timeout
        while True:
            try:
                with self._coord_lock:
                    if self._coord_conn is None:
                        self._coord_conn = self._connect()
                    try:
                        # Each attempt ends by the caller's deadline: the server cancels it (a lock
                        # held elsewhere), or the client cuts a stalled connection shortly after.
                        bound = max(min(deadline - time.monotonic(), request), 0.001)
                        with bounded(self._coord_conn, bound + CLIENT_GRACE_S):
                            set_request_timeout(self._coord_conn, int(bound * 1000) or 1)
                            return what(self._coord_conn)
                    except errors.OncelogError as exc:
                        if exc.retriable:  # the connection may be gone: the next try opens a new one
                            self._drop_coord_connection()
                        raise
            except errors.OncelogError as exc:
                if not exc.retriable or time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, self._backoff_max)

    def _drop_coord_connection(self) -> None:
        conn, self._coord_conn = self._coord_conn, None
        if conn is not None:
            _discard(conn)

    def _init_identity(self, *, bump: bool, timeout: float | None) -> None:
        assert self._txn is not None and self.transactional_id is not None  # callers checked
        tid = self.transactional_id
        current = self._identity
        try:
            ident = self._retrying(
                timeout,
                lambda conn: txn.init_producer_id(
                    conn,
                    transactional_id=tid,
                    transaction_timeout_ms=self._txn_timeout_ms,
                    producer_id=current.producer_id if bump and current else None,
                    epoch=current.epoch if bump and current else None,
                ),
            )
        except errors.OncelogError as exc:
            # As in Kafka, a failed InitProducerId (bad timeout, fenced, unknown mapping) leaves
            # nothing to abort: the producer cannot go on. Retriable errors were retried above
            # until the timeout; init_transactions() may then be called again (not so the bump).
            if not (exc.retriable and not bump):
                self._txn.transition_to_fatal_error(exc)
            raise
        self._identity = ProducerIdAndEpoch(ident.producer_id, ident.epoch)
        self._txn_number = ident.txn_number
        self._next_sequence.clear()
        if bump:
            self._bump_metric("epoch_bump_total")

    def _end_txn(self, *, commit: bool, timeout: float | None) -> str:
        assert self._identity is not None and self.transactional_id is not None  # initialised
        ident, tid, number = self._identity, self.transactional_id, self._txn_number
        try:
            return str(
                self._retrying(
                    timeout,
                    lambda conn: txn.end_txn(
                        conn,
                        transactional_id=tid,
                        producer_id=ident.producer_id,
                        epoch=ident.epoch,
                        txn_number=number,
                        commit=commit,
                    ),
                )
            )
        except errors.OncelogError as exc:
            self._record_txn_error(exc)
            raise

    def _record_txn_error(self, exc: errors.OncelogError) -> None:
        """Move the transaction state machine to the error state ``exc`` calls for."""
        if self._txn is None or exc.retriable:
            return
        if exc.fatal:
            self._txn.transition_to_fatal_error(exc)
        elif self._txn.state is not TxnState.ABORTING_TRANSACTION:
            self._txn_needs_bump = True
            self._txn.transition_to_abortable_error(exc)

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (up to ``timeout`` seconds), then release everything.

        An open transaction is aborted first (best effort; the store would abort it at its
        timeout anyway)."""
        validate.timeout("timeout", timeout)
        if self._closed:
            return
        if (
            self._txn is not None
            and not self._prepared
            and self._identity is not None
            and self._txn.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR)
        ):
            try:
                self.abort_transaction(timeout)
            except errors.OncelogError:
                logger.warning("could not abort the open transaction while closing", exc_info=True)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._sender.join(timeout)
        if self._sender.is_alive():
            # The sender is still retrying: fail what is left, it will not be sent by us.
            with self._cond:
                for batch in list(self._acc.batches()):
                    _fail(batch, errors.ProducerClosedError("closed before the record was acknowledged"))
            self._sender.join(5)
        with self._coord_lock:
            if self._coord_conn is not None:
                self._coord_conn.close()
                self._coord_conn = None
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
        with self._metrics_lock:
            m = dict(self._metrics)
        batches = m["batch_send_total"] or 1
        m["batch_size_avg"] = m.pop("batch_size_total") / batches
        m["request_latency_avg_ms"] = m.pop("request_latency_total_ms") / batches
        m["records_per_request_avg"] = m["record_send_total"] / batches
        m["record_send_rate"] = self._record_rate.rate()
        m["request_rate"] = self._request_rate.rate()
        return m

    @property
    def producer_id(self) -> int | None:
        """The producer id in use (None before the first send, or without idempotence)."""
        return self._identity.producer_id if self._identity else None

    @property
    def producer_epoch(self) -> int | None:
        """The epoch in use (None before the first send, or without idempotence)."""
        return self._identity.epoch if self._identity else None

    # --- metadata ---------------------------------------------------------------------------

    def _topic_metadata(self, topic: str, refresh: bool = False) -> topics.TopicMetadata:
        now = time.monotonic()
        cached = self._metadata.get(topic)
        if cached and not refresh and now - cached[0] < self._metadata_max_age:
            return cached[1]
        with self._request() as conn:
            meta = topics.topic_metadata(conn, name=topic)
        self._metadata[topic] = (now, meta)
        return meta

    # --- the sender thread ------------------------------------------------------------------

    def _run_sender(self) -> None:
        try:
            while True:
                with self._cond:
                    batches = self._wait_for_ready()
                    if batches is None:
                        return
                    for b in batches:
                        b.full = True  # closed: nothing more is appended to a batch being sent
                    self._in_flight = len(batches)
                    self._sending = {b.id for b in batches}
                for b in batches:
                    self._send_batch(b)
                    with self._cond:
                        self._sending.discard(b.id)
                with self._cond:
                    self._in_flight = 0
                    self._cond.notify_all()
        except BaseException as exc:  # never leave futures hanging if the sender dies
            logger.exception("oncelog producer sender failed")
            with self._cond:
                for batch in list(self._acc.batches()):
                    _fail(batch, errors.ProducerClosedError(f"the sender thread failed: {exc!r}"))
                self._cond.notify_all()
            raise
        finally:
            self._drop_connection(invalidate=False)

    def _wait_for_ready(self) -> list[ProducerBatch] | None:
        """Under the lock: the batches to send next, or None when closing with nothing left."""
        while True:
            now = time.monotonic()
            self._expire_unsent(now)
            flush = self._flushing > 0 or self._closing
            ready = self._acc.ready(now, self._linger, flush)
            if ready:
                return ready
            if self._closing and not len(self._acc):
                return None
            wake = self._acc.next_wakeup(now, self._linger)
            self._cond.wait(wake if wake is not None else None)

    def _expire_unsent(self, now: float) -> None:
        """Batches never sent that waited past delivery_timeout fail (no unknown outcome, no bump)."""
        for batch in list(self._acc.batches()):
            if not batch.sent_once and now - batch.created > self._delivery_timeout:
                try:
                    self._acc.complete(batch)
                except RuntimeError:
                    continue  # not a head batch: it expires when it becomes one
                _fail(batch, errors.DeliveryTimeoutError("not sent within delivery_timeout_ms"))
                self._cond.notify_all()

    def _connection(self) -> sa.Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def _drop_connection(self, *, invalidate: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _discard(conn, invalidate=invalidate)

    def _ensure_identity(self, batch: ProducerBatch) -> bool:
        """Get a producer id, or bump the epoch (KIP-360), before sequencing anything. Returns
        False when ``batch`` must wait: a bump is due but other batches still have an unknown
        outcome, and those are settled under the old epoch first (re-sequencing one of them under
        the new epoch could append it twice; Kafka likewise bumps only with nothing in flight)."""
        if not self._idempotent or self._txn is not None or (self._identity is not None and not self._need_bump):
            return True  # a transactional producer gets its identity from init_transactions()
        if self._identity is not None:
            if batch.unknown_outcome and batch.base_sequence is not None:
                return True  # settle this one first, under its old epoch and sequence
            with self._cond:
                unsettled = any(b.unknown_outcome for b in self._acc.batches() if b is not batch)
            if unsettled:
                return False
        conn = self._connection()
        if self._identity is None:
            with self._bounded_request(conn, batch):
                self._identity = log.init_producer_id(conn)
        else:
            old = self._identity
            try:
                with self._bounded_request(conn, batch):
                    self._identity = log.init_producer_id(conn, producer_id=old.producer_id, epoch=old.epoch)
                self._bump_metric("epoch_bump_total")
            except (errors.InvalidProducerEpochError, errors.InvalidProducerIdMappingError) as exc:
                # The bump is impossible: someone else moved this id's epoch (an operator's
                # bump, a database restored to an earlier point). Like Kafka's producer when it
                # cannot bump, start afresh under a new producer id: no batch has an unknown
                # outcome now (checked above), so nothing sent under the old id can be doubled.
                logger.warning(
                    "producer id %s epoch %s cannot be bumped (%s); continuing under a new producer id",
                    old.producer_id,
                    old.epoch,
                    exc,
                )
                with self._bounded_request(conn, batch):
                    self._identity = log.init_producer_id(conn)
                self._bump_metric("producer_id_reset_total")
            logger.info(
                "producer bumped to id %s epoch %s; sequences restart at 0",
                self._identity.producer_id,
                self._identity.epoch,
            )
        self._need_bump = False
        self._next_sequence.clear()
        with self._cond:
            for b in self._acc.batches():
                b.base_sequence = b.epoch = b.producer_id = None
        return True

    def _remaining(self, batch: ProducerBatch, now: float) -> float | None:
        """Seconds left before ``batch``'s delivery deadline; None for a batch sent with EndTxn,
        which has none (its first attempt may have committed: only its answer can tell)."""
        return None if batch.ends_txn else batch.created + self._delivery_timeout - now

    @contextlib.contextmanager
    def _bounded_request(self, conn: sa.Connection, batch: ProducerBatch) -> Iterator[None]:
        """One request for ``batch``, bounded by its remaining delivery time and the attempt
        timeout: the server cancels it past that (statement and lock timeouts: a retriable
        RequestTimeoutError, nothing written), and should the network stall instead, the
        connection is cut shortly after (DatabaseUnavailableError, outcome unknown)."""
        remaining = self._remaining(batch, time.monotonic())
        bound = self._attempt_timeout if remaining is None else min(self._attempt_timeout, remaining)
        bound = max(bound, 0.001)
        with bounded(conn, bound + CLIENT_GRACE_S):
            set_request_timeout(conn, int(bound * 1000) or 1)
            yield

    def _send_batch(self, batch: ProducerBatch) -> None:
        started = time.monotonic()
        if self._txn is not None and (self._txn.has_error or self._txn_aborting):
            # The transaction cannot commit any more: do not send into it.
            cause = self._txn.last_error
            aborted = errors.TransactionAbortedError("the transaction is aborting")
            self._finish_failed(batch, cause if self._txn.is_fatal and cause else aborted)
            return
        remaining = self._remaining(batch, started)
        if remaining is not None and remaining <= 0:
            # Every path of a batch ends at its deadline: a retry (or a wait for the producer's
            # identity) due after it is not made.
            expired = errors.DeliveryTimeoutError("not acknowledged within delivery_timeout_ms")
            if self._txn is not None:
                self._on_txn_error(batch, expired, started)  # retriable, out of time: abortable
            else:
                self._expire(batch, expired)
            return
        batch.tries += 1
        sent = False  # whether this attempt's request may have reached the store
        try:
            if not self._ensure_identity(batch):
                batch.next_attempt_at = time.monotonic() + self._backoff
                return
            if self._idempotent and batch.base_sequence is None:
                assert self._identity is not None  # set by _ensure_identity
                batch.producer_id, batch.epoch = self._identity.producer_id, self._identity.epoch
                batch.base_sequence = self._next_sequence.get(batch.tp, 0)
                self._next_sequence[batch.tp] = (batch.base_sequence + len(batch.records)) % _SEQUENCE_MODULUS
            batch.attempts += 1
            batch_args: dict[str, Any] = {
                "topic": batch.tp.topic,
                "partition": batch.tp.partition,
                "records": [RecordIn(r.value, r.key, r.headers, r.timestamp) for r in batch.records],
                "producer_id": batch.producer_id,
                "producer_epoch": batch.epoch,
                "base_sequence": batch.base_sequence,
                "transactional_id": self.transactional_id,
                "txn_number": batch.txn_number,
            }
            conn = self._connection()
            sent = True
            if batch.ends_txn or self._commits_with(batch):
                batch.ends_txn = True
                with self._bounded_request(conn, batch):
                    result, _ = log.produce_end_txn(conn, **batch_args)  # committed (or already)
            else:
                with self._bounded_request(conn, batch):
                    result = log.produce(conn, **batch_args)
        except errors.OncelogError as exc:
            self._on_error(batch, exc, started, sent=sent)
            return
        self._record_latency(started, batch)
        with self._cond:
            if batch.ends_txn:
                self._committed_with_batch = batch.txn_number  # before flush() sees the batch complete
            self._acc.complete(batch)
            self._cond.notify_all()
        for i, rec in enumerate(batch.records):
            if not rec.future.done():
                rec.future.set_result(
                    RecordMetadata(
                        topic=batch.tp.topic,
                        partition=batch.tp.partition,
                        offset=result.base_offset + i,
                        timestamp=rec.timestamp or result.log_append_time,
                    )
                )

    def _commits_with(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` is the last one of the transaction commit_transaction() is committing:
        then it carries EndTxn. No record can join the transaction once its commit has begun, so
        a batch alone in the accumulator stays the last; a retry of it carries EndTxn again (a
        retry after a commit that landed is answered as already committed, migration 0013)."""
        if self._txn is None or batch.txn_number is None:
            return False
        with self._cond:
            return self._commit_number == batch.txn_number and len(self._acc) == 1 and not self._txn_aborting

    def _on_error(self, batch: ProducerBatch, exc: errors.OncelogError, started: float, *, sent: bool = True) -> None:
        """A batch's attempt failed; ``sent``: its request may have reached the store (False for a
        failure before it: connecting, or re-initialising the producer id)."""
        now = time.monotonic()
        if self._txn is not None:
            self._on_txn_error(batch, exc, now)
            return
        if exc.retriable:
            # Unknown outcome (connection lost, server restarting) or a transient conflict:
            # resend the same batch with the same sequence until the delivery timeout. A statement
            # the server cancelled at its timeout (RequestTimeoutError: a partition lock held by
            # someone else) was rolled back: its connection is fine, and it appended nothing.
            if not isinstance(exc, errors.RequestTimeoutError):
                self._drop_connection(invalidate=True)
                batch.unknown_outcome |= self._idempotent and sent
            if now - batch.created <= self._delivery_timeout:
                self._schedule_retry(batch, now, exc)
                return
            self._expire(batch, errors.DeliveryTimeoutError(f"not acknowledged within delivery_timeout_ms: {exc}"))
            return
        in_time = now - batch.created <= self._delivery_timeout
        if self._idempotent and isinstance(exc, _RESEQUENCE) and in_time and batch.tries < _MAX_RESEQUENCE_TRIES:
            # The store rejected the batch (nothing was appended) because its sequence state for
            # us differs from ours (expired, or an epoch mismatch): new epoch, same batch.
            # (Had an earlier attempt landed, this retry would have been answered as a duplicate.)
            batch.unknown_outcome = False
            self._need_bump = True
            self._schedule_retry(batch, now, exc)
            return
        # A definite rejection: nothing was appended, so the sequence this batch took is free
        # again for the next batch of the partition.
        if (
            self._idempotent
            and batch.base_sequence is not None
            and batch.epoch == (self._identity.epoch if self._identity else None)
        ):
            self._next_sequence[batch.tp] = batch.base_sequence
        self._finish_failed(batch, exc)

    def _expire(self, batch: ProducerBatch, exc: errors.DeliveryTimeoutError) -> None:
        """Fail an idempotent batch at its delivery deadline."""
        if batch.unknown_outcome:
            # An attempt may have landed: neither reusing nor skipping its sequence is safe, so
            # the next batch starts a new epoch (KIP-360).
            self._need_bump = self._idempotent
        elif (
            self._idempotent
            and batch.base_sequence is not None
            and batch.epoch == (self._identity.epoch if self._identity else None)
        ):
            # Every attempt was refused or never reached the store (a lock timeout rolls back):
            # its sequence is free again for the partition's next batch.
            self._next_sequence[batch.tp] = batch.base_sequence
        self._finish_failed(batch, exc)

    def _on_txn_error(self, batch: ProducerBatch, exc: errors.OncelogError, now: float) -> None:
        """A transactional batch failed: retry what may succeed, otherwise the transaction can
        only abort (or, fenced, the producer is finished)."""
        if exc.retriable:
            if not isinstance(exc, errors.RequestTimeoutError | errors.DeliveryTimeoutError):
                self._drop_connection(invalidate=True)  # (a statement the server cancelled leaves it usable)
            # A batch sent with EndTxn is retried past the delivery timeout: its first attempt may
            # have committed the transaction, so only its answer can say whether it did (failing it
            # would have the application abort a transaction that may be committed).
            in_time = now - batch.created <= self._delivery_timeout or batch.ends_txn
            if in_time and not self._txn_aborting:
                self._schedule_retry(batch, now, exc)
                return
            # Unknown outcome: the abort that must follow also bumps the epoch.
            self._txn_needs_bump = True
            if not isinstance(exc, errors.DeliveryTimeoutError):
                exc = errors.DeliveryTimeoutError(f"not acknowledged within delivery_timeout_ms: {exc}")
            if self._txn is not None and not self._txn_aborting:
                self._txn.transition_to_abortable_error(exc)
            self._finish_failed(batch, exc)
            return
        self._record_txn_error(exc)
        self._finish_failed(batch, exc)

    def _schedule_retry(self, batch: ProducerBatch, now: float, exc: BaseException) -> None:
        # By tries, not sends: a re-initialisation that keeps failing backs off like a send.
        delay = min(self._backoff * 2 ** max(batch.tries - 1, 0), self._backoff_max)
        batch.next_attempt_at = now + delay
        self._bump_metric("record_retry_total", len(batch.records))
        logger.debug("retrying batch %s of %s in %.3fs after %r", batch.id, batch.tp, delay, exc)

    def _finish_failed(self, batch: ProducerBatch, exc: BaseException) -> None:
        self._bump_metric("record_error_total", len(batch.records))
        with self._cond:
            self._acc.complete(batch)
            self._cond.notify_all()
        _fail(batch, exc)

    # --- metrics ----------------------------------------------------------------------------

    def _bump_metric(self, name: str, by: float = 1) -> None:
        with self._metrics_lock:
            self._metrics[name] += by

    def _record_latency(self, started: float, batch: ProducerBatch) -> None:
        ms = (time.monotonic() - started) * 1000
        with self._metrics_lock:
            m = self._metrics
            m["record_send_total"] += len(batch.records)
            m["batch_send_total"] += 1
            m["batch_size_total"] += batch.size
            m["batch_size_max"] = max(m["batch_size_max"], batch.size)
            m["request_latency_total_ms"] += ms
            m["request_latency_max_ms"] = max(m["request_latency_max_ms"], ms)
        self._record_rate.record(len(batch.records))
        self._request_rate.record()


def _attempt_timeout(delivery_timeout_ms: float) -> float:
    """Seconds one send of a batch may take: a quarter of delivery_timeout_ms, at most Kafka's
    request.timeout.ms. One sender sends every partition's batches in turn on one connection, so
    a batch waiting for a partition's lock must give the batches behind it a turn well before their
    deadlines; it is retried (a lock timeout appends nothing) until its own deadline."""
    return max(min(_REQUEST_TIMEOUT_MS, delivery_timeout_ms / 4), 1) / 1000


def _discard(conn: sa.Connection, *, invalidate: bool = True) -> None:
    """Close a connection that may be broken (invalidated: it never returns to the pool)."""
    try:
        if invalidate:
            conn.invalidate()
        conn.close()
    except Exception:  # a broken connection may fail to close; it is discarded anyway
        logger.debug("closing a broken connection failed", exc_info=True)


def _fail(batch: ProducerBatch, exc: BaseException) -> None:
    for rec in batch.records:
        if not rec.future.done():
            rec.future.set_exception(exc)


def _attach(future: Future[RecordMetadata], callback: Callback) -> None:
    def done(f: Future[RecordMetadata]) -> None:
        exc = f.exception()
        try:
            callback(None if exc else f.result(), exc)
        except Exception:  # a user callback must not kill the sender thread
            logger.exception("producer callback raised")

    future.add_done_callback(done)


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
