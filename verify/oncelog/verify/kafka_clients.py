"""The workloads of ``oncelog verify --via broker``: the same four roles, written with Kafka's own
client (confluent-kafka, that is librdkafka) against ``oncelog broker``.

Each role records exactly what its counterpart in :mod:`oncelog.verify.workloads` records, so the
same checker judges both. What differs is only who makes the promise: here librdkafka's
idempotent and transactional producers, its read_committed consumer and its consumer group,
speaking the Kafka protocol to the broker, which answers from the store through the fault proxy.
The outcome rules follow librdkafka's error model (``KafkaError.retriable``,
``txn_requires_abort``, ``fatal``):

* an idempotent ``send`` is ``ok`` when every record was delivered, else ``info``: librdkafka does
  not say whether a failed record's batch reached the broker, so no failure is ever definite;
* a ``txn`` or ``copy`` is ``fail`` when it was aborted (by the client, or after an abortable
  error), or when it failed before its commit was asked for and its producer was dropped (the
  next producer of the transactional id aborts it when it initialises); ``info`` when a commit
  failed fatally or stayed unanswered after retries;
* a fatal error drops the producer: a new one, a new process name (one producer instance per
  process name), and the transactional id fences the old one;
* a transactional call that outlives its own timeout by far is abandoned with its producer (see
  :func:`_within`): librdkafka 2.16's ``send_offsets_to_transaction`` can wait for ever when the
  broker dies during the call (librdkafka issues #5456 and #5511), and a client stuck there would
  stop the run's copiers for good. The next producer of the transactional id fences it.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

import confluent_kafka as ck

from oncelog.verify.history import OpType, Read, Write, tp_key
from oncelog.verify.workloads import (
    _API_TIMEOUT_MS,
    _COMMIT_ATTEMPTS,
    _DELIVERY_TIMEOUT_MS,
    _MAX_BLOCK_MS,
    _SESSION_TIMEOUT_MS,
    _STOP,
    ClientSpec,
    Role,
    _acknowledged,
    _Backoff,
    _random_writes,
    _Recorder,
    _think,
    _transaction_failed,
    run_transactions,
    transaction_name,
)

__all__ = ["ROLES"]

_LOG = logging.getLogger(__name__)

#: How long a call that waits for the broker may block, in seconds (init, commit, abort, flush).
_CALL_TIMEOUT_S = _MAX_BLOCK_MS / 1000 + 6
#: What a delivery callback leaves per record: its offset, or the error it failed with.
_Delivery = int | ck.KafkaError | None


def _settings(spec: ClientSpec, **values: Any) -> dict[str, Any]:
    """librdkafka's settings for this client: the broker, a client id that names the process, and
    the workloads' timeouts (see :mod:`oncelog.verify.workloads`)."""
    return {
        "bootstrap.servers": spec.bootstrap,
        "client.id": spec.name,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 500,
        **values,
    }


def _producer_settings(spec: ClientSpec, **values: Any) -> dict[str, Any]:
    return _settings(
        spec,
        **{
            "linger.ms": 2,
            "message.timeout.ms": _DELIVERY_TIMEOUT_MS,
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 500,
            **values,
        },
    )


def _into(results: list[_Delivery], index: int) -> Callable[[ck.KafkaError | None, ck.Message], None]:
    """A delivery callback that stores record ``index``'s outcome."""

    def delivered(error: ck.KafkaError | None, message: ck.Message) -> None:
        offset = message.offset()
        results[index] = error if error is not None else (offset if offset is not None and offset >= 0 else None)

    return delivered


def _error(exc: BaseException) -> ck.KafkaError | None:
    """The KafkaError an exception of confluent-kafka carries, if any."""
    if isinstance(exc, ck.KafkaException) and exc.args and isinstance(exc.args[0], ck.KafkaError):
        return exc.args[0]
    return None


def _describe(exc: BaseException) -> str:
    error = _error(exc)
    return f"KafkaError {error.name()}: {error.str()}" if error is not None else f"{type(exc).__name__}: {exc}"


class _Wedged(Exception):
    """A librdkafka call that did not return long after its own timeout."""


#: How much longer than its own timeout a call may take before it is abandoned.
_WEDGED_AFTER_S = _CALL_TIMEOUT_S + 10


def _within(what: str, call: Callable[..., object], *args: object) -> None:
    """``call(*args)`` (a transactional API call given ``_CALL_TIMEOUT_S``), raising :class:`_Wedged`
    if it has not returned ``_WEDGED_AFTER_S`` later. It runs on a thread of its own (librdkafka
    releases the GIL while it waits), which is left behind, with its producer, when wedged."""
    done = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            call(*args)
        except BaseException as exc:  # handed to the caller below
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=what, daemon=True).start()
    if not done.wait(_WEDGED_AFTER_S):
        raise _Wedged(f"{what} did not return {_WEDGED_AFTER_S:.0f} s after it was called")
    if failure:
        raise failure[0]


def _drop(producer: ck.Producer | None) -> None:
    """Let a producer go: what it still holds is purged (its outcome is recorded as unknown)."""
    if producer is None:
        return
    try:
        producer.purge()
        producer.flush(0)
    except (ck.KafkaException, RuntimeError):  # a producer in a fatal state may refuse even that
        _LOG.debug("purging a dropped producer failed", exc_info=True)


def _run_idempotent(spec: ClientSpec, rec: _Recorder, rng: random.Random) -> None:
    fatal: list[ck.KafkaError] = []

    def on_error(error: ck.KafkaError) -> None:
        if error.fatal():
            fatal.append(error)

    def new() -> ck.Producer:
        return ck.Producer(_producer_settings(spec, **{"enable.idempotence": True, "error_cb": on_error}))

    producer = new()
    backoff = _Backoff()
    try:
        while not _STOP.is_set():
            writes = _random_writes(spec, rec, rng, 4)
            rec.record(OpType.INVOKE, "send", writes=writes)
            results: list[_Delivery] = [None] * len(writes)
            refused: BaseException | None = None
            try:
                for i, w in enumerate(writes):
                    producer.produce(w.topic, w.payload.encode(), partition=w.partition, on_delivery=_into(results, i))
            except (ck.KafkaException, BufferError) as exc:
                refused = exc  # the rest was never queued
            producer.flush(_DELIVERY_TIMEOUT_MS / 1000 + 30)
            done = _acknowledged(writes, results)
            if refused is None and all(isinstance(r, int) for r in results):
                rec.record(OpType.OK, "send", writes=done)
                backoff.succeeded()
                _think(spec, rng)
                continue
            first = next((r for r in results if isinstance(r, ck.KafkaError)), None)
            why = _describe(refused) if refused is not None else (first.str() if first else "not delivered in time")
            rec.record(OpType.INFO, "send", writes=done, error=why)
            rec.retire()
            if fatal or any(isinstance(r, ck.KafkaError) and r.fatal() for r in results):
                _LOG.warning("the idempotent producer failed fatally (%s); a new one", fatal[:1] or first)
                _drop(producer)
                producer, fatal[:] = new(), []
            backoff.failed()
    finally:
        _drop(producer)


class _Transactions:
    """librdkafka's transactional producer for one transactional id, made again whenever it
    becomes unusable (as :class:`oncelog.verify.workloads._Transactions` does for oncelog's)."""

    failures: tuple[type[BaseException], ...] = (ck.KafkaException, BufferError, _Wedged)

    def __init__(self, spec: ClientSpec) -> None:
        self._spec = spec
        self._count = 0
        self._results: list[_Delivery] = []
        self.producer: ck.Producer | None = None

    def ready(self) -> ck.Producer | None:
        """The producer, initialised (fencing older instances of this transactional id); None when
        told to stop first."""
        backoff = _Backoff()
        while self.producer is None and not _STOP.is_set():
            producer = ck.Producer(
                _producer_settings(
                    self._spec,
                    **{"transactional.id": self._spec.identity, "transaction.timeout.ms": self._spec.txn_timeout_ms},
                )
            )
            try:
                _within("init_transactions", producer.init_transactions, _CALL_TIMEOUT_S)
            except (ck.KafkaException, _Wedged) as exc:
                _LOG.warning("init_transactions failed, a new producer: %s", _describe(exc))
                if not isinstance(exc, _Wedged):
                    _drop(producer)
                backoff.failed()
                continue
            self.producer = producer
        return self.producer

    def next_name(self) -> str:
        """``<transactional id>#<n>``, unique across incarnations."""
        self._count += 1
        return transaction_name(self._spec, self._count)

    def commit(self) -> None:
        """Commit, calling again after a retriable error (librdkafka resumes the same commit),
        unless told to stop: three timed-out attempts would outlast the stop's grace, and the
        commit's outcome is then recorded as unknown."""
        producer = self.producer
        assert producer is not None
        for attempt in range(_COMMIT_ATTEMPTS):
            try:
                _within("commit_transaction", producer.commit_transaction, _CALL_TIMEOUT_S)
                return
            except ck.KafkaException as exc:
                error = _error(exc)
                if error is None or not error.retriable() or attempt == _COMMIT_ATTEMPTS - 1 or _STOP.is_set():
                    raise

    def end_after(self, exc: BaseException) -> bool:
        """After ``exc`` failed the transaction: abort it when librdkafka allows. True when the
        abort was acknowledged; otherwise the producer is dropped (its successor's initialisation
        aborts the transaction unless a commit already landed)."""
        producer = self.producer
        assert producer is not None
        if isinstance(exc, _Wedged):
            self.producer = None  # a call of it still runs: left behind, never purged under it
            return False
        error = _error(exc)
        if error is not None and not error.fatal() and (error.txn_requires_abort() or not error.retriable()):
            try:
                _within("abort_transaction", producer.abort_transaction, _CALL_TIMEOUT_S)
                return True
            except _Wedged:
                self.producer = None
                return False
            except ck.KafkaException as abort_exc:
                _LOG.info("abort after %s failed: %s", _describe(exc), _describe(abort_exc))
        self.discard()
        return False

    def begin(self, writes: Sequence[Write]) -> None:
        """Begin a transaction and produce ``writes`` in it."""
        producer = self.producer
        assert producer is not None
        producer.begin_transaction()
        self._results = [None] * len(writes)
        for i, w in enumerate(writes):
            producer.produce(w.topic, w.payload.encode(), partition=w.partition, on_delivery=_into(self._results, i))

    def abort_on_purpose(self) -> None:
        """Flush, then abort (raises like the call, or :class:`_Wedged`)."""
        producer = self.producer
        assert producer is not None
        producer.flush(_CALL_TIMEOUT_S)
        _within("abort_transaction", producer.abort_transaction, _CALL_TIMEOUT_S)

    def acknowledged(self, writes: Sequence[Write]) -> list[Write]:
        """``writes`` with the offsets their delivery reports gave."""
        return _acknowledged(writes, self._results)

    def discard(self) -> None:
        """Drop the producer; the next :meth:`ready` makes a new one."""
        _drop(self.producer)
        self.producer = None


_FAILURES = _Transactions.failures


def _run_transactional(spec: ClientSpec, rec: _Recorder, rng: random.Random) -> None:
    run_transactions(spec, rec, rng, _Transactions(spec))


def _close(consumer: ck.Consumer | None) -> None:
    """Close ``consumer`` (leave its group), unless the client was told to stop: then it is left
    open, and the process's end (``os._exit``) drops it. librdkafka's close has no timeout: it
    waits to leave the group through a coordinator that may be gone (a broker killed by the run),
    and confluent-kafka keeps the interpreter lock meanwhile, so no thread of the process runs,
    the stop's watcher included (seen in CI: a close on a thread of its own, the main thread
    stuck starting that thread). Its members are static (``group.instance.id``) or assign their
    partitions themselves: the group loses nothing by the missing leave."""
    if consumer is None or _STOP.is_set():
        return
    try:
        consumer.close()
    except (ck.KafkaException, RuntimeError):  # a broken consumer may fail to close; it is dropped anyway
        _LOG.debug("closing a consumer failed", exc_info=True)


def _consumer_settings(spec: ClientSpec, group: str, **values: Any) -> dict[str, Any]:
    return _settings(
        spec,
        **{
            "group.id": group,
            "isolation.level": spec.isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": _SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 500,
            **values,
        },
    )


def _messages(consumer: ck.Consumer, most: int, timeout: float) -> list[ck.Message]:
    """Up to ``most`` records; error events (a lost connection, librdkafka retries) are logged."""
    out = []
    for message in consumer.consume(most, timeout=timeout):
        error = message.error()
        if error is None:
            out.append(message)
        elif error.fatal():
            # librdkafka reports a consumer's fatal error (a fenced static member) as an event,
            # not a raise: without this the client would poll a dead consumer for the rest of the run.
            raise ck.KafkaException(error)
        else:
            _LOG.info("consumer event: %s", error.str())
    return out


def _read(message: ck.Message) -> Read:
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if topic is None or partition is None or offset is None:
        raise RuntimeError("librdkafka returned a record without its topic, partition or offset")
    return Read(topic, partition, offset, (message.value() or b"").decode())


def _run_copier(spec: ClientSpec, rec: _Recorder, rng: random.Random) -> None:
    assert spec.write_topic is not None and spec.group is not None and spec.read_topics
    source, sink = spec.read_topics[0], spec.write_topic
    txns = _Transactions(spec)
    consumer: ck.Consumer | None = None
    backoff = _Backoff()

    def new_consumer() -> ck.Consumer:
        # A static member, as the API's copier: a restarted copier takes its place at once.
        member = ck.Consumer(
            _consumer_settings(spec, spec.group or "", **{"group.instance.id": spec.identity})
            | {"client.id": rec.process}
        )
        member.subscribe([source])
        return member

    def rewind(member: ck.Consumer) -> None:
        """Back to the group's committed offsets: the aborted copies must be made again."""
        assigned = member.assignment()
        if not assigned:
            return
        committed = member.committed(assigned, timeout=_API_TIMEOUT_MS / 1000)
        failed = next((tp.error for tp in committed if tp.error is not None), None)
        if failed is not None:
            # Not "no offset yet" (which is the beginning): a new member starts from the group's offsets.
            raise ck.KafkaException(failed)
        for tp in committed:
            member.seek(ck.TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else ck.OFFSET_BEGINNING))

    try:
        while (producer := txns.ready()) is not None and not _STOP.is_set():
            if consumer is None:
                consumer = new_consumer()
            try:
                messages = _messages(consumer, spec.max_poll_records, 0.3)
            except ck.KafkaException as exc:
                _LOG.warning("poll failed: %s", _describe(exc))
                error = _error(exc)
                if error is None or error.fatal():  # fenced as a group member: start again as a new one
                    _close(consumer)
                    consumer = None
                backoff.failed()
                continue
            if not messages:
                continue
            reads = [_read(m) for m in messages]
            writes = [Write(sink, r.partition, "copy:" + r.payload) for r in reads]
            following: dict[tuple[str, int], int] = {}
            for r in reads:
                following[(r.topic, r.partition)] = max(following.get((r.topic, r.partition), 0), r.offset + 1)
            offsets = {tp_key(*tp): o for tp, o in following.items()}
            name = txns.next_name()
            rec.record(OpType.INVOKE, "copy", txn=name, reads=reads, writes=writes, offsets=offsets)
            results: list[_Delivery] = [None] * len(writes)
            committing = False
            try:
                producer.begin_transaction()
                for i, (message, w) in enumerate(zip(messages, writes, strict=True)):
                    producer.produce(
                        w.topic,
                        w.payload.encode(),
                        key=message.key(),
                        partition=w.partition,
                        on_delivery=_into(results, i),
                    )
                positions = [ck.TopicPartition(t, p, o) for (t, p), o in following.items()]
                _within(
                    "send_offsets_to_transaction",
                    producer.send_offsets_to_transaction,
                    positions,
                    consumer.consumer_group_metadata(),
                    _CALL_TIMEOUT_S,
                )
                committing = True
                txns.commit()
            except _FAILURES as exc:
                aborted = txns.end_after(exc)
                _transaction_failed(
                    rec, "copy", definite=aborted or not committing, dropped=txns.producer is None, txn=name,
                    reads=reads, writes=writes, offsets=offsets, error=_describe(exc),
                )  # fmt: skip
                try:
                    if not aborted:
                        raise exc
                    rewind(consumer)
                except _FAILURES:
                    # A new member starts from the group's committed offsets.
                    _close(consumer)
                    consumer = None
                backoff.failed()
                continue
            rec.record(OpType.OK, "copy", txn=name, reads=reads, writes=_acknowledged(writes, results), offsets=offsets)
            backoff.succeeded()
            _think(spec, rng)
    finally:
        _close(consumer)
        _drop(txns.producer)


def _run_consumer(spec: ClientSpec, rec: _Recorder, rng: random.Random) -> None:
    tps = [(t, p) for t in spec.read_topics for p in range(spec.partitions)]
    # A group id librdkafka insists on; the consumer assigns its partitions and never commits.
    consumer = ck.Consumer(_consumer_settings(spec, f"{spec.identity}-assigned"))
    consumer.assign([ck.TopicPartition(t, p, 0) for t, p in tps])
    # librdkafka knows a position only once it returned a record: until then it is where we assigned.
    positions = dict.fromkeys(tps, 0)
    backoff = _Backoff()
    try:
        while not _STOP.is_set():
            before = dict(positions)
            rec.record(OpType.INVOKE, "poll", isolation=spec.isolation)
            try:
                messages = _messages(consumer, spec.max_poll_records, 0.2)
            except ck.KafkaException as exc:
                # Nothing was returned to the application, so no position moved.
                rec.record(OpType.FAIL, "poll", isolation=spec.isolation, error=_describe(exc))
                backoff.failed()
                continue
            backoff.succeeded()
            reads = [_read(m) for m in messages]
            for r in reads:
                positions[(r.topic, r.partition)] = max(positions[(r.topic, r.partition)], r.offset + 1)
            with contextlib.suppress(ck.KafkaException):  # a local answer; the records above already tell
                for tp in consumer.position([ck.TopicPartition(t, p) for t, p in tps]):
                    # Past the last record returned when librdkafka stepped over markers and aborted records.
                    if tp.offset >= 0:
                        positions[(tp.topic, tp.partition)] = max(positions[(tp.topic, tp.partition)], tp.offset)
            spans = {tp_key(*tp): (before[tp], positions[tp]) for tp in tps}
            rec.record(OpType.OK, "poll", isolation=spec.isolation, reads=reads, positions=spans)
            _think(spec, rng)
    finally:
        _close(consumer)


#: The roles of a client that speaks Kafka to ``oncelog broker``.
ROLES: dict[Role, Callable[[ClientSpec, _Recorder, random.Random], None]] = {
    Role.IDEMPOTENT: _run_idempotent,
    Role.TRANSACTIONAL: _run_transactional,
    Role.COPIER: _run_copier,
    Role.CONSUMER: _run_consumer,
}
