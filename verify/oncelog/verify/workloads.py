"""The client processes of ``oncelog verify``: four workloads, each recording a history.

Every client is a real OS process, so that the nemesis can SIGKILL and SIGSTOP it::

    python -m oncelog.verify.workloads NAME < '<ClientSpec as JSON>'

The spec arrives on stdin, not on the command line: it holds the database URL, whose password
any local user could read from a command line (``ps``, ``/proc/<pid>/cmdline``). NAME is the
process name of the spec, there only so ``ps`` shows which client a process is.

It talks to PostgreSQL through the fault proxy, appends its operations to a history file of its
own (JSON lines, :class:`oncelog.verify.history.History`), and stops cleanly on SIGTERM once its
current operation has completed (or when its parent is gone). The roles:

``idempotent``
    An idempotent producer (retries on, no transactions). Each ``send`` operation queues one to
    four records over random partitions and waits for them: ``ok`` with the acknowledged offsets,
    ``fail`` when nothing can have landed (the store refused every record queued, the rest was
    never queued), ``info`` when any outcome is unknown (a delivery timeout after retries).
``transactional``
    A transactional producer writing one to six records over several partitions per ``txn``
    operation, and aborting some of them on purpose (after flushing, so aborted records are in
    the log): ``ok`` when the commit was acknowledged, ``fail`` when the transaction was aborted,
    ``info`` when the outcome is unknown.
``copier``
    Consume-transform-produce in a consumer group (KIP-447): a read_committed consumer subscribed
    to the input topic, a transactional producer that writes ``"copy:" + payload`` to the same
    partition of the output topic and commits the group's offsets in the same transaction. One
    ``copy`` operation per transaction. After an abort it rewinds to the group's committed offsets.
``consumer``
    A consumer with a fixed assignment of every partition of the run's topics, from offset 0, at
    the isolation level of its spec; one ``poll`` operation per poll, with the records read and
    each partition's position before and after.

Payloads are ``"<process>:<counter>"``, unique in a run. A client whose operation ended ``info``
goes on under a new process name (``<name>.i<k>``), as Jepsen retires such a process: its earlier
operation may still take effect, so the two must not look sequential. A client whose producer or
consumer became unusable (fenced, an unknown commit outcome, an abort that failed) makes new ones
and carries on, under a new process name as well: one producer instance per process name.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import math
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn, Protocol, TextIO

from oncelog import errors
from oncelog.consumer import Consumer
from oncelog.errors import OncelogError
from oncelog.producer import Producer
from oncelog.txn_state import TxnState
from oncelog.types import OffsetAndMetadata, RecordMetadata, TopicPartition
from oncelog.verify.history import History, OpType, Read, Write, tp_key

__all__ = ["ClientPool", "ClientSpec", "Crash", "Role", "Workload", "main", "running_clients"]

_LOG = logging.getLogger(__name__)

#: Client settings: short enough that every operation ends within seconds of a fault healing
#: (the runner waits for them when it stops the clients), and that the longest server restarts of
#: the nemesis outlast a delivery: those writes end with an unknown outcome, which the producer
#: must survive (KIP-360) and the checker must judge.
_DELIVERY_TIMEOUT_MS = 3_000
_MAX_BLOCK_MS = 4_000
_API_TIMEOUT_MS = 10_000
_SESSION_TIMEOUT_MS = 10_000
#: How many times a commit whose outcome stayed unknown (connection lost on every retry) is
#: resumed before the operation is recorded as unknown.
_COMMIT_ATTEMPTS = 3
#: How long a client told to stop may take to complete its operation before it exits anyway
#: (below the runner's own limit, after which it SIGKILLs).
_STOP_GRACE_S = 25.0
#: A transaction number is made unique across the incarnations of one transactional id.
_TXN_NUMBERS_PER_INCARNATION = 1_000_000


class Workload(StrEnum):
    """The workloads ``oncelog verify --workload`` selects."""

    IDEMPOTENT = "idempotent"
    TRANSACTIONAL = "transactional"
    COPIER = "copier"
    CONSUMERS = "consumers"


class Role(StrEnum):
    """What one client process does (a workload is made of one or more roles)."""

    IDEMPOTENT = "idempotent"
    TRANSACTIONAL = "transactional"
    COPIER = "copier"
    CONSUMER = "consumer"


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """Everything one client process needs; passed to it as JSON on its stdin."""

    role: Role
    name: str
    """The process name of this incarnation (``txn1``, then ``txn1.r2`` after a restart)."""
    identity: str
    """Stable across incarnations: the transactional id, the group instance id."""
    incarnation: int
    url: str = field(repr=False)  # it may hold a password
    """The database URL the client uses (through the proxy)."""
    schema: str
    history: str
    """The file this incarnation appends its history to."""
    seed: int
    partitions: int
    write_topic: str | None = None
    read_topics: tuple[str, ...] = ()
    group: str | None = None
    isolation: str = "read_committed"
    txn_timeout_ms: int = 6000
    abort_ratio: float = 0.2
    think_s: float = 0.005
    """The longest pause between two operations (drawn uniformly), to leave the CPU to others."""
    max_poll_records: int = 50
    bootstrap: str | None = None
    """``oncelog broker``'s address when the client speaks Kafka to it (``--via broker``,
    :mod:`oncelog.verify.kafka_clients`); None: oncelog's own client API on ``url``."""

    def to_json(self) -> str:
        """The spec as one JSON text."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ClientSpec:
        """The inverse of :meth:`to_json`."""
        data = json.loads(text)
        data["role"] = Role(data["role"])
        data["read_topics"] = tuple(data.get("read_topics", ()))
        return cls(**data)

    def incarnate(self, name: str, incarnation: int, history: Path) -> ClientSpec:
        """The spec of another process of this client: a new name, number and history file."""
        data = asdict(self) | {"name": name, "incarnation": incarnation, "history": str(history)}
        data["role"] = self.role
        data["read_topics"] = self.read_topics
        return ClientSpec(**data)


# ------------------------------------------------------------------------------------------------
# Inside a client process
# ------------------------------------------------------------------------------------------------

#: Set by SIGTERM (or when the parent is gone): finish the current operation, then stop.
_STOP = threading.Event()


class _Recorder:
    """One client's history: unique payloads, and the invoke/complete pairs of its operations."""

    def __init__(self, spec: ClientSpec, sink: TextIO) -> None:
        self._history = History(sink=sink)
        self._base = spec.name
        self.process = spec.name
        self._retired = 0
        self._counter = 0

    def payload(self) -> str:
        """A payload no other write of the run has."""
        self._counter += 1
        return f"{self.process}:{self._counter}"

    def record(self, type_: OpType, f: str, **values: Any) -> None:
        """Append one entry for the current process name."""
        self._history.append(self.process, type_, f, **values)

    def retire(self) -> None:
        """Go on under a new process name: the last operation's outcome is unknown."""
        self._retired += 1
        self.process = f"{self._base}.i{self._retired}"


def _think(spec: ClientSpec, rng: random.Random) -> None:
    _STOP.wait(rng.uniform(0, spec.think_s))


class _Backoff:
    """Waits longer after each failed operation in a row (the server may be down for seconds:
    no point filling the history with failures), and not at all after a success."""

    def __init__(self, first: float = 0.05, most: float = 0.5) -> None:
        self._first = first
        self._most = most
        self._next = first

    def failed(self) -> None:
        """An operation failed: wait before the next one."""
        _STOP.wait(self._next)
        self._next = min(self._next * 2, self._most)

    def succeeded(self) -> None:
        """An operation succeeded: the next failure waits the shortest time again."""
        self._next = self._first


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _definite(exc: BaseException) -> bool:
    """Whether a failed write certainly did not reach the log: a typed refusal by the store, not
    a lost connection, a timeout or a closed producer (whose outcome is unknown)."""
    return (
        isinstance(exc, OncelogError)
        and not exc.retriable
        and not isinstance(exc, errors.ProducerClosedError | errors.FatalError)
    )


def _producer(spec: ClientSpec, transactional_id: str | None = None, **overrides: Any) -> Producer:
    settings: dict[str, Any] = {
        "linger_ms": 2,
        "delivery_timeout_ms": _DELIVERY_TIMEOUT_MS,
        "max_block_ms": _MAX_BLOCK_MS,
        "retry_backoff_ms": 20,
        "retry_backoff_max_ms": 500,
    }
    if transactional_id is not None:
        settings |= {"transactional_id": transactional_id, "transaction_timeout_ms": spec.txn_timeout_ms}
    return Producer(spec.url, schema=spec.schema, **(settings | overrides))


def _close(client: Producer | Consumer | None) -> None:
    """Close a client that may be broken (its errors are of no interest any more)."""
    if client is None:
        return
    try:
        if isinstance(client, Producer):
            client.close(timeout=2)
        else:
            client.close()
    except Exception:  # a broken client may fail to close; it is dropped anyway
        _LOG.debug("closing %r failed", client, exc_info=True)


def _until_ready(what: Callable[[], Any], label: str) -> bool:
    """Call ``what`` until it succeeds (faults may be in effect) or the client is told to stop."""
    delay = 0.05
    while not _STOP.is_set():
        try:
            what()
        except OncelogError as exc:
            _LOG.info("%s failed, retrying: %s", label, _describe(exc))
            _STOP.wait(delay)
            delay = min(delay * 2, 1.0)
            continue
        return True
    return False


def _wait_all(futures: Sequence[Future[RecordMetadata]]) -> list[int | BaseException]:
    """Each future's offset, or the error it failed with."""
    out: list[int | BaseException] = []
    for future in futures:
        try:
            out.append(future.result(timeout=_DELIVERY_TIMEOUT_MS / 1000 + 30).offset)
        except (OncelogError, TimeoutError) as exc:
            out.append(exc)
    return out


def _acknowledged(writes: Sequence[Write], results: Sequence[object]) -> list[Write]:
    """``writes`` with the offset of each whose result is one (an int); the others, and those
    past the results, as they were."""
    return [
        Write(w.topic, w.partition, w.payload, r) if isinstance(r, int) else w
        for w, r in zip(writes, results, strict=False)
    ] + list(writes[len(results) :])


def transaction_name(spec: ClientSpec, count: int) -> str:
    """The name of transaction ``count`` of this incarnation: ``<transactional id>#<n>``, unique
    across incarnations of the transactional id."""
    return f"{spec.identity}#{spec.incarnation * _TXN_NUMBERS_PER_INCARNATION + count}"


def _transaction_failed(rec: _Recorder, f: str, *, definite: bool, dropped: bool, **values: Any) -> None:
    """Record a ``txn`` or ``copy`` that failed: ``fail`` when it certainly did not commit (it was
    aborted, or no commit was ever asked for), else ``info``; after an unknown outcome, or when
    its producer was dropped (a new instance from now on), go on under a new process name."""
    rec.record(OpType.FAIL if definite else OpType.INFO, f, **values)
    if not definite or dropped:
        rec.retire()


def _random_writes(spec: ClientSpec, rec: _Recorder, rng: random.Random, most: int) -> list[Write]:
    assert spec.write_topic is not None  # every writing role has one
    return [Write(spec.write_topic, rng.randrange(spec.partitions), rec.payload()) for _ in range(rng.randint(1, most))]


def _run_idempotent(spec: ClientSpec, rec: _Recorder, rng: random.Random) -> None:
    producer = _producer(spec)
    backoff = _Backoff()
    try:
        while not _STOP.is_set():
            writes = _random_writes(spec, rec, rng, 4)
            rec.record(OpType.INVOKE, "send", writes=writes)
            futures: list[Future[RecordMetadata]] = []
            refused: BaseException | None = None
            try:
                for w in writes:
                    futures.append(producer.send(w.topic, w.payload.encode(), partition=w.partition))
            except OncelogError as exc:  # the rest was never queued, so never written
                refused = exc
            results = _wait_all(futures)
            done = _acknowledged(writes, results)
            failures = [r for r in results if not isinstance(r, int)]
            first = failures[0] if failures else refused
            if first is None:
                rec.record(OpType.OK, "send", writes=done)
                backoff.succeeded()
                _think(spec, rng)
                continue
            if len(failures) == len(results) and all(_definite(e) for e in failures):
                # Nothing landed: every queued record was refused, and what send() refused to
                # queue never left this process.
                rec.record(OpType.FAIL, "send", writes=done, error=_describe(first))
            else:
                rec.record(OpType.INFO, "send", writes=done, error=_describe(first))
                rec.retire()
            backoff.failed()
    finally:
        _close(producer)


class _Transactions:
    """A transactional producer for one transactional id, made again whenever it becomes unusable."""

    failures: tuple[type[BaseException], ...] = (OncelogError,)

    def __init__(self, spec: ClientSpec) -> None:
        self._spec = spec
        self._count = 0
        self._futures: list[Future[RecordMetadata]] = []
        self.producer: Producer | None = None

    def ready(self) -> Producer | None:
        """The producer, initialised (fencing older instances of this transactional id); None
        when told to stop first."""
        delay = 0.05
        while self.producer is None and not _STOP.is_set():
            producer = _producer(self._spec, self._spec.identity)
            try:
                producer.init_transactions()
            except OncelogError as exc:
                # A failed InitProducerId leaves the producer unusable (as in Kafka): a new one.
                _LOG.info("init_transactions failed, retrying: %s", _describe(exc))
                _close(producer)
                _STOP.wait(delay)
                delay = min(delay * 2, 1.0)
                continue
            self.producer = producer
        return self.producer

    def next_name(self) -> str:
        """``<transactional id>#<n>``, unique across incarnations."""
        self._count += 1
        return transaction_name(self._spec, self._count)

    def commit(self) -> None:
        """Commit, resuming a commit whose outcome stayed unknown a few times."""
        assert self.producer is not None
        for attempt in range(_COMMIT_ATTEMPTS):
            try:
                self.producer.commit_transaction()
                return
            except OncelogError as exc:
                if not exc.retriable or attempt == _COMMIT_ATTEMPTS - 1:
                    raise

    def end_after(self, exc: BaseException) -> bool:
        """After ``exc`` failed the transaction: abort it if possible. True when the abort was
        acknowledged; otherwise the producer is discarded (its successor's initialisation aborts
        the transaction unless a commit already landed)."""
        producer = self.producer
        assert producer is not None
        state = producer.transaction_state
        fatal = not isinstance(exc, OncelogError) or exc.fatal
        if state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR) and not fatal:
            try:
                producer.abort_transaction()
                return True
            except OncelogError as abort_exc:
                _LOG.info("abort after %s failed: %s", _describe(exc), _describe(abort_exc))
        self.discard()
        return False

    def begin(self, writes: Sequence[Write]) -> None:
        """Begin a transaction and send ``writes`` in it."""
        assert self.producer is not None
        self.producer.begin_transaction()
        self._futures = [self.producer.send(w.topic, w.payload.encode(), partition=w.partition) for w in writes]

    def abort_on_purpose(self) -> None:
        """Flush, then abort."""
        assert self.producer is not None
        self.producer.flush()
        self.producer.abort_transaction()

    def acknowledged(self, writes: Sequence[Write]) -> list[Write]:
        """``writes`` with the offsets their sends were acknowledged at."""
        return _acknowledged(writes, _wait_all(self._futures))

    def discard(self) -> None:
        """Drop the producer; the next :meth:`ready` makes a new one, whose initialisation aborts
        whatever transaction this one left open."""
        _close(self.producer)
        self.producer = None


class TransactionalClient(Protocol):
    """A transactional producer as the ``transactional`` role drives it: oncelog's
    (:class:`_Transactions`) or librdkafka's (:mod:`oncelog.verify.kafka_clients`). The role's
    rules, and so what it records, are written once (:func:`run_transactions`) for both."""

    failures: tuple[type[BaseException], ...]
    """What a failed call raises."""

    @property
    def producer(self) -> object | None:
        """The producer of now; None once dropped."""
        ...

    def ready(self) -> object | None:
        """The producer, initialised; None when told to stop first."""
        ...

    def next_name(self) -> str:
        """The next transaction's name."""
        ...

    def begin(self, writes: Sequence[Write]) -> None:
        """Begin a transaction and queue ``writes`` in it."""
        ...

    def abort_on_purpose(self) -> None:
        """Flush (the records reach the log) and abort."""
        ...

    def commit(self) -> None:
        """Commit (resumed a few times while the outcome is unknown)."""
        ...

    def end_after(self, exc: BaseException) -> bool:
        """Abort after ``exc`` if possible (True), else drop the producer."""
        ...

    def acknowledged(self, writes: Sequence[Write]) -> list[Write]:
        """``writes`` with the offsets the committed transaction's records landed at."""
        ...

    def discard(self) -> None:
        """Drop the producer."""
        ...


def run_transactions(spec: ClientSpec, rec: _Recorder, rng: random.Random, txns: TransactionalClient) -> None:
    """The ``transactional`` role: one ``txn`` op per transaction, some aborted on purpose."""
    backoff = _Backoff()
    try:
        while txns.ready() is not None and not _STOP.is_set():
            name = txns.next_name()
            writes = _random_writes(spec, rec, rng, 6)
            abort = rng.random() < spec.abort_ratio
            rec.record(OpType.INVOKE, "txn", txn=name, writes=writes)
            committing = False
            try:
                txns.begin(writes)
                if abort:
                    txns.abort_on_purpose()  # after a flush: readers have aborted records to skip
                    rec.record(OpType.FAIL, "txn", txn=name, writes=writes, error="aborted by the client")
                    _think(spec, rng)
                    continue
                committing = True
                txns.commit()
            except txns.failures as exc:
                # Certainly not committed when it was aborted, or when no commit was ever asked for.
                definite = txns.end_after(exc) or not committing
                _transaction_failed(
                    rec, "txn", definite=definite, dropped=txns.producer is None, txn=name, writes=writes,
                    error=_describe(exc),
                )  # fmt: skip
                backoff.failed()
                continue
            rec.record(OpType.OK, "txn", txn=name, writes=txns.acknowledged(writes))
            backoff.succeeded()
            _think(spec, rng)
    finally:
        txns.discard()


def _run_transactional(spec: ClientSpec, rec: _Recorder, rng: random.Random) -> None:
    run_transactions(spec, rec, rng, _Transactions(spec))


def _run_copier(spec: ClientSpec, rec: _Recorder, rng: random.Random) -> None:
    assert spec.write_topic is not None and spec.group is not None and spec.read_topics
    source, sink = spec.read_topics[0], spec.write_topic
    txns = _Transactions(spec)
    consumer: Consumer | None = None
    backoff = _Backoff()

    def new_consumer() -> Consumer | None:
        member = Consumer(
            spec.url,
            schema=spec.schema,
            group_id=spec.group,
            group_instance_id=spec.identity,  # a restarted copier takes its place at once
            client_id=rec.process,
            isolation_level="read_committed",
            enable_auto_commit=False,
            max_poll_records=spec.max_poll_records,
            session_timeout_ms=_SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=500,
            default_api_timeout_ms=_API_TIMEOUT_MS,
        )
        if _until_ready(lambda: member.subscribe([source]), "subscribe"):
            return member
        _close(member)
        return None

    def rewind(member: Consumer) -> None:
        """Back to the group's committed offsets: the aborted copies must be made again."""
        assigned = member.assignment()
        committed = member.committed(assigned)
        starts = member.beginning_offsets([tp for tp, c in committed.items() if c is None])
        for tp, c in committed.items():
            member.seek(tp, starts[tp] if c is None else c.offset)

    try:
        while (producer := txns.ready()) is not None and not _STOP.is_set():
            if consumer is None and (consumer := new_consumer()) is None:
                break
            try:
                records = consumer.poll(0.3)
            except OncelogError as exc:
                _LOG.info("poll failed: %s", _describe(exc))
                if exc.fatal:  # fenced as a group member: start again as a new one
                    _close(consumer)
                    consumer = None
                backoff.failed()
                continue
            if not records:
                continue
            reads = [Read(r.topic, r.partition, r.offset, bytes(r.value).decode()) for r in records]
            writes = [Write(sink, r.partition, "copy:" + r.payload) for r in reads]
            offsets: dict[str, int] = {}
            for r in reads:
                offsets[tp_key(r.topic, r.partition)] = max(offsets.get(tp_key(r.topic, r.partition), 0), r.offset + 1)
            name = txns.next_name()
            rec.record(OpType.INVOKE, "copy", txn=name, reads=reads, writes=writes, offsets=offsets)
            futures: list[Future[RecordMetadata]] = []
            committing = False
            try:
                producer.begin_transaction()
                for record, w in zip(records, writes, strict=True):
                    futures.append(producer.send(w.topic, w.payload.encode(), key=record.key, partition=w.partition))
                positions = {
                    TopicPartition(r.topic, r.partition): OffsetAndMetadata(offsets[tp_key(r.topic, r.partition)])
                    for r in reads
                }
                producer.send_offsets_to_transaction(positions, consumer.group_metadata())
                committing = True
                txns.commit()
            except OncelogError as exc:
                aborted = txns.end_after(exc)
                _transaction_failed(
                    rec, "copy", definite=aborted or not committing, dropped=txns.producer is None, txn=name,
                    reads=reads, writes=writes, offsets=offsets, error=_describe(exc),
                )  # fmt: skip
                try:
                    if not aborted:
                        raise exc
                    rewind(consumer)
                except OncelogError:
                    # A new member starts from the group's committed offsets.
                    _close(consumer)
                    consumer = None
                backoff.failed()
                continue
            done = _acknowledged(writes, _wait_all(futures))
            rec.record(OpType.OK, "copy", txn=name, reads=reads, writes=done, offsets=offsets)
            backoff.succeeded()
            _think(spec, rng)
    finally:
        _close(consumer)
        _close(txns.producer)


def _run_consumer(spec: ClientSpec, rec: _Recorder, rng: random.Random) -> None:
    tps = [TopicPartition(t, p) for t in spec.read_topics for p in range(spec.partitions)]
    consumer = Consumer(
        spec.url,
        schema=spec.schema,
        isolation_level=spec.isolation,
        max_poll_records=spec.max_poll_records,
        default_api_timeout_ms=_API_TIMEOUT_MS,
    )

    def start() -> None:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)

    try:
        if not _until_ready(start, "assign"):
            return
        backoff = _Backoff()
        while not _STOP.is_set():
            before = {tp: consumer.position(tp) for tp in tps}  # known after seek: no database call
            rec.record(OpType.INVOKE, "poll", isolation=spec.isolation)
            try:
                records = consumer.poll(0.2)
            except OncelogError as exc:
                # A failed poll moves no position and returns nothing: it had no effect.
                rec.record(OpType.FAIL, "poll", isolation=spec.isolation, error=_describe(exc))
                backoff.failed()
                continue
            backoff.succeeded()
            reads = [Read(r.topic, r.partition, r.offset, bytes(r.value).decode()) for r in records]
            positions = {tp_key(*tp): (before[tp], consumer.position(tp)) for tp in tps}
            rec.record(OpType.OK, "poll", isolation=spec.isolation, reads=reads, positions=positions)
            _think(spec, rng)
    finally:
        _close(consumer)


_ROLES: dict[Role, Callable[[ClientSpec, _Recorder, random.Random], None]] = {
    Role.IDEMPOTENT: _run_idempotent,
    Role.TRANSACTIONAL: _run_transactional,
    Role.COPIER: _run_copier,
    Role.CONSUMER: _run_consumer,
}


def stop_when_told(grace: float) -> None:
    """In a client process's main thread: SIGTERM, or the runner's end, sets ``_STOP`` (complete
    the current operation, then return) and ends the process with status 3 ``grace`` seconds
    later if it is still running, or by SIGALRM (``_ALARM_AFTER_S`` later) if the interpreter
    cannot run the thread that would end it. SIGUSR1 writes every thread's stack to stderr (the
    client's log), from C, even while a thread holds the interpreter lock: the runner sends it
    before it kills a client that did not stop (:func:`kill_with_stacks`)."""
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    signal.signal(signal.SIGTERM, lambda *_: _STOP.set())
    signals, wakeup = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wakeup, warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(os.getppid(), signals, grace), name="watch", daemon=True).start()


#: How long a client that did not stop gets to write its threads' stacks before SIGKILL.
_STACKS_S = 1.0


def kill_with_stacks(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a client process that overran its stop, after asking it for its threads' stacks
    (SIGUSR1, see :func:`stop_when_told`): its log then says where it was stuck."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGUSR1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(_STACKS_S)
    proc.kill()
    proc.wait()


def _watch(parent: int, signals: int, grace: float) -> None:
    """Set ``_STOP`` on SIGTERM or when the runner is gone (killed itself), then end the process
    ``grace`` seconds later whatever the main thread is doing.

    ``signals`` is the read end of the pipe given to :func:`signal.set_wakeup_fd`: the C-level
    handler writes to it the moment SIGTERM arrives, in whichever thread the kernel chose. The
    Python-level handler runs only in the main thread, when it next executes bytecode; a signal
    delivered to another thread does not wake a main thread that waits on a lock (a copier
    waiting 20 s on a wedged ``send_offsets_to_transaction``) or inside a librdkafka call. The
    grace then began only after that wait, and the runner killed the process before its end."""
    while not _STOP.is_set():
        readable, _, _ = select.select([signals], [], [], 0.5)
        if readable:
            with contextlib.suppress(BlockingIOError):
                if signal.SIGTERM in os.read(signals, 64):
                    _STOP.set()
        if os.getppid() != parent:
            _STOP.set()
    # Told to stop: the current operation gets a bounded time to complete, then the process ends.
    # The kernel's alarm ends it even when this thread never runs again once it has armed it: the
    # interpreter's exit stops daemon threads for good when they next take the interpreter lock,
    # and a C call may keep that lock. SIGALRM keeps its default action (terminate): a Python
    # handler could run only in the main thread.
    signal.alarm(math.ceil(grace + _ALARM_AFTER_S))
    # And, just before the alarm, every thread's stack into the client's log, from faulthandler's
    # own C thread (it needs no interpreter lock): a client the kernel has to end says where it
    # hung. Twice in CI a Kafka client hung so (its interpreter stopped, no stack to read).
    faulthandler.dump_traceback_later(grace + _ALARM_AFTER_S / 2, exit=False)
    time.sleep(grace)
    os._exit(3)


#: How long after its grace a stopped client that the interpreter cannot end is ended by SIGALRM.
_ALARM_AFTER_S = 2.0


def end_process(status: int) -> NoReturn:
    """End a client process with ``status`` once its history is closed, without the interpreter's
    exit: that exit destroys what librdkafka handles are still referenced (a consumer left closing
    on a daemon thread, a producer left with a wedged call), and ``rd_kafka_destroy`` can wait
    without bound (librdkafka #5434); by then the watcher thread that bounds a stop cannot run."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _kafka_roles() -> dict[Role, Callable[[ClientSpec, _Recorder, random.Random], None]]:
    # Here, not at the top: confluent-kafka is needed for --via broker only.
    from oncelog.verify.kafka_clients import ROLES  # noqa: PLC0415

    return ROLES


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None) -> int:
    """Run one client process (``python -m oncelog.verify.workloads NAME``, the spec's JSON on stdin)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m oncelog.verify.workloads NAME < SPEC_JSON", file=sys.stderr)
        return 2
    spec = ClientSpec.from_json((sys.stdin if stdin is None else stdin).read())
    if spec.name != args[0]:
        print(f"the spec on stdin is for {spec.name!r}, not {args[0]!r}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s {spec.name} %(name)s %(levelname)s %(message)s")
    stop_when_told(_STOP_GRACE_S)
    rng = random.Random(f"{spec.seed}-{spec.name}")  # noqa: S311 - reproducible choices, not secrets
    roles = _ROLES if spec.bootstrap is None else _kafka_roles()
    with open(spec.history, "a", encoding="utf-8") as sink:
        roles[spec.role](spec, _Recorder(spec, sink), rng)
    return 0


# ------------------------------------------------------------------------------------------------
# In the runner: the client processes
# ------------------------------------------------------------------------------------------------


@dataclass
class _Client:
    base: str
    spec: ClientSpec
    proc: subprocess.Popen[bytes]
    state: str = "running"  # running | paused | killed | crashed | stopped
    crashes: int = 0
    restart_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Crash:
    """A client process that exited on its own (a bug in a client or in the store's answers)."""

    name: str
    returncode: int
    log_tail: str


class ClientPool:
    """The client processes of a run (the :class:`~oncelog.verify.faults.ClientProcesses` the
    nemesis kills and pauses). A process that exits on its own is recorded as a crash and
    started again; a killed one is started again when healed. Each start is a new incarnation:
    a new process name, its own history file (``<histories>/<name>.jsonl``) and log file."""

    def __init__(self, specs: Sequence[ClientSpec], *, histories: Path, logs: Path) -> None:
        self._specs = list(specs)
        self._histories = histories
        self._logs = logs
        self._lock = threading.RLock()
        self._clients: dict[str, _Client] = {}  # by the first incarnation's name
        self._stopping = False
        self._supervisor: threading.Thread | None = None
        self._wake = threading.Event()
        self.incarnations: list[str] = []
        self.crashes: list[Crash] = []
        self.exit_at_stop: dict[str, int] = {}
        """The exit status of each client :meth:`stop` stopped (running or paused then): 0 once
        its operation completed, 3 when it overran its grace (``_STOP_GRACE_S``), -14 (SIGALRM)
        when it overran it where the interpreter could not end it, -9 when it had to be killed."""

    def start(self) -> None:
        """Start every client, and a thread that restarts the ones that crash."""
        with self._lock:
            for spec in self._specs:
                first = spec.incarnate(spec.name, 1, self._history(spec.name))
                self._clients[spec.name] = _Client(spec.name, first, self._spawn(first))
        self._supervisor = threading.Thread(target=self._supervise, name="verify-clients", daemon=True)
        self._supervisor.start()

    def wait_started(self, timeout: float) -> bool:
        """Wait until every client has recorded its first operation (imports and connections
        done), so the nemesis does not spend its first faults on processes still starting."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                paths = [Path(c.spec.history) for c in self._clients.values()]
            if all(p.exists() and p.stat().st_size > 0 for p in paths):
                return True
            time.sleep(0.1)
        return False

    # --- ClientProcesses -------------------------------------------------------------------

    def running(self) -> list[str]:
        """Names of the incarnations running now."""
        with self._lock:
            return sorted(c.spec.name for c in self._clients.values() if c.state == "running")

    def kill(self, name: str) -> bool:
        """SIGKILL the incarnation ``name``; started again by :meth:`heal`."""
        return self._signal(name, signal.SIGKILL, "killed")

    def pause(self, name: str) -> bool:
        """SIGSTOP the incarnation ``name``; continued by :meth:`heal`."""
        return self._signal(name, signal.SIGSTOP, "paused")

    def heal(self) -> list[str]:
        """SIGCONT the paused, start a new incarnation of the killed."""
        done = []
        with self._lock:
            for client in self._clients.values():
                if client.state == "paused":
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(client.proc.pid, signal.SIGCONT)
                    client.state = "running"
                    done.append(f"continued {client.spec.name}")
                elif client.state == "killed" and not self._stopping:
                    client.proc.wait()
                    old = client.spec.name
                    self._restart(client)
                    done.append(f"restarted {old} as {client.spec.name}")
        return done

    # --- stopping --------------------------------------------------------------------------

    def stop(self, timeout: float) -> list[str]:
        """SIGTERM every client (each completes its operation and exits); SIGKILL those still
        running after ``timeout`` seconds. Returns the names that had to be killed."""
        with self._lock:
            self._stopping = True
            clients = list(self._clients.values())
            # Only these are stopped here: a crashed client's status is its crash's (in crashes).
            told = {client.spec.name for client in clients if client.state in ("running", "paused")}
            for client in clients:
                if client.state == "paused":
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(client.proc.pid, signal.SIGCONT)
                if client.state in ("running", "paused"):
                    with contextlib.suppress(ProcessLookupError):
                        client.proc.terminate()
                client.state = "stopped"
        self._wake.set()
        deadline = time.monotonic() + timeout
        forced = []
        for client in clients:
            try:
                client.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_with_stacks(client.proc)
                forced.append(client.spec.name)
            if client.spec.name in told:
                self.exit_at_stop[client.spec.name] = client.proc.returncode
        if self._supervisor is not None:
            self._supervisor.join(5)
        return forced

    # --- internals -------------------------------------------------------------------------

    def _history(self, name: str) -> Path:
        return self._histories / f"{name}.jsonl"

    def _spawn(self, spec: ClientSpec) -> subprocess.Popen[bytes]:
        self.incarnations.append(spec.name)
        with open(self._logs / f"{spec.name}.log", "ab") as log:
            proc = subprocess.Popen(
                # The spec (with the URL and its password) goes through stdin: a command line is
                # readable by every local user.
                [sys.executable, "-m", "oncelog.verify.workloads", spec.name],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=log,
                # Its own session: a Ctrl-C in the terminal reaches the runner, which stops the
                # clients in order, rather than every client at once.
                start_new_session=True,
            )
        # A spec is far below a pipe's buffer (64 KiB), so this write never waits for the child.
        # A child that died at once (BrokenPipeError) is seen as a crash by the supervisor.
        if proc.stdin is not None:  # always, with stdin=PIPE
            with contextlib.suppress(BrokenPipeError), proc.stdin:
                proc.stdin.write(spec.to_json().encode())
        return proc

    def _restart(self, client: _Client) -> None:
        incarnation = client.spec.incarnation + 1
        name = f"{client.base}.r{incarnation}"
        spec = client.spec.incarnate(name, incarnation, self._history(name))
        client.spec = spec
        client.proc = self._spawn(spec)
        client.state = "running"

    def _signal(self, name: str, signum: int, state: str) -> bool:
        with self._lock:
            for client in self._clients.values():
                if client.spec.name == name and client.state == "running" and client.proc.poll() is None:
                    os.kill(client.proc.pid, signum)
                    client.state = state
                    return True
        return False

    def _supervise(self) -> None:
        while not self._wake.wait(0.2):
            with self._lock:
                if self._stopping:
                    return
                now = time.monotonic()
                for client in self._clients.values():
                    code = client.proc.poll()
                    if client.state == "running" and code is not None:
                        self.crashes.append(Crash(client.spec.name, code, self._log_tail(client.spec.name)))
                        # A client that keeps crashing is started again less and less often.
                        client.crashes += 1
                        client.state = "crashed"
                        client.restart_at = now + min(0.5 * 2 ** (client.crashes - 1), 10.0)
                        _LOG.warning("client %s exited with %s; starting it again", client.spec.name, code)
                    elif client.state == "crashed" and now >= client.restart_at:
                        self._restart(client)

    def _log_tail(self, name: str, lines: int = 20) -> str:
        try:
            text = (self._logs / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def running_clients(specs: Sequence[ClientSpec], *, histories: Path, logs: Path) -> Iterator[ClientPool]:
    """A started :class:`ClientPool`, stopped (SIGKILL at worst) however the block ends."""
    pool = ClientPool(specs, histories=histories, logs=logs)
    try:
        pool.start()
        yield pool
    finally:
        pool.stop(timeout=_STOP_GRACE_S + 5)


if __name__ == "__main__":
    # Run as the imported module, not as __main__: the Kafka clients' module imports this one, and
    # two copies would hold two stop events (SIGTERM would set the one nobody waits on).
    from oncelog.verify import workloads

    workloads.end_process(workloads.main())
