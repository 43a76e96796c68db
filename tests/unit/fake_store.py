"""A fake :class:`oncelog.producer_store.ProducerStore` for the producer's unit tests.

It plays the store's answers as the migrations write them, in memory: InitProducerId with the
KIP-360 bump (init_producer_id_v1, init_transactional_producer_id_v1), produce_v2's epoch and
sequence rules with duplicate detection, produce_batches_v1's request of many batches each
answered on its own, EndTxn and the commit that carries the queued batches and the consumer
offsets (produce_end_txn_v3), all or nothing, with their answers to a retry, and the partitions
on which a reader waits (``waiting``), whose wake tokens the answers carry (``wake_readers``).
What the database itself decides (locks, visibility, expiry) is proven by the database tests;
here only the client's reactions are.

Faults are scripted per operation: ``fail("produce", exc)`` raises ``exc`` instead of the next
produce request (nothing applied); ``fail("produce", exc, after=True)`` applies it and then
raises: a lost reply. ``refuse(batch)`` answers one batch of a request: a refusal (an OL error)
is that batch's answer, any other error fails the whole request, as in the store.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from oncelog import errors
from oncelog.store.records import (
    CommitResult,
    ProduceBatch,
    ProduceResult,
    ProducerIdAndEpoch,
    RecordColumns,
    TxnOffsets,
)
from oncelog.store.txn import TransactionalIdentity


def _token(topic: str, partition: int, waiting: set[tuple[str, int]]) -> str | None:
    """The fake's wake token of a partition a reader waits on (the store's is topic_id:partition)."""
    return f"{topic}:{partition}" if (topic, partition) in waiting else None


@dataclass
class _Appended:
    """One batch in a partition's log: what a duplicate is answered with."""

    producer_id: int
    epoch: int
    base_sequence: int
    base_offset: int
    count: int


@dataclass
class _TxnId:
    producer_id: int
    txn_number: int = 0
    open: int | None = None  # the open transaction's number
    #: The partitions the open transaction wrote to.
    partitions: set[tuple[str, int]] = field(default_factory=set)
    #: Outcome of every ended transaction, by number.
    ended: dict[int, str] = field(default_factory=dict)


@dataclass
class FakeStore:
    """Producers with their epoch and the epoch before the last bump; partitions as offset counters."""

    producers: dict[int, tuple[int, int | None]] = field(default_factory=dict)
    next_id: int = 1000
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Per (producer id, topic, partition): the batches appended, last one last.
    batches: dict[tuple[int, str, int], list[_Appended]] = field(default_factory=dict)
    #: The values appended per partition, in offset order (what a reader would see).
    log: dict[tuple[str, int], list[bytes | None]] = field(default_factory=dict)
    txn_ids: dict[str, _TxnId] = field(default_factory=dict)
    #: Every call: (operation, keyword arguments).
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    init_calls: list[tuple[int | None, int | None]] = field(default_factory=list)
    produce_calls: int = 0
    #: Called at the start of every produce (a test's adversary), under the store's lock.
    before_produce: Callable[[FakeStore], None] | None = None
    #: Called with every produce's arguments before anything is applied: an error it returns is
    #: raised (a partition whose lock is held elsewhere, a partition out of reach).
    refuse: Callable[[Mapping[str, Any]], errors.OncelogError | None] | None = None
    #: Raised by every init_producer_id call while set (an unreachable store).
    init_error: errors.OncelogError | None = None
    faults: dict[str, deque[tuple[errors.OncelogError, bool]]] = field(default_factory=dict)
    released: list[bool] = field(default_factory=list)
    #: The consumer offsets every commit carried, in order.
    offsets_committed: list[TxnOffsets] = field(default_factory=list)
    #: Partitions on which a reader waits: writes to them are answered with a wake-up to send.
    waiting: set[tuple[str, int]] = field(default_factory=set)
    #: The tokens of every wake_readers call, in order.
    woken: list[list[str]] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)

    # --- test controls ---------------------------------------------------------------------------

    def fail(self, operation: str, exc: errors.OncelogError, *, after: bool = False, times: int = 1) -> None:
        """Fail the next ``times`` calls of ``operation``; ``after``: apply the call first (a lost reply)."""
        with self.lock:
            self.faults.setdefault(operation, deque()).extend([(exc, after)] * times)

    def bump_behind_its_back(self, producer_id: int, times: int = 1) -> None:
        """What an operator's bump (or a restore) does: the epoch moves without the producer."""
        with self.lock:
            for _ in range(times):
                current, _ = self.producers[producer_id]
                self.producers[producer_id] = (current + 1, current)

    def forget_sequences(self, producer_id: int) -> None:
        """What expiry does to an idle producer's partition state: the next batch is out of order."""
        with self.lock:
            for key in [k for k in self.batches if k[0] == producer_id]:
                del self.batches[key]

    def count(self, operation: str) -> int:
        """How many calls of ``operation`` were made."""
        return sum(1 for op, _ in self.calls if op == operation)

    def arguments(self, operation: str) -> list[dict[str, Any]]:
        """The arguments of every call of ``operation``, in order."""
        return [args for op, args in self.calls if op == operation]

    # --- connections -----------------------------------------------------------------------------

    def connect(self) -> object:
        return object()

    def release(self, conn: object, *, invalidate: bool) -> None:
        self.released.append(invalidate)

    @contextlib.contextmanager
    def request(self, conn: object, seconds: float) -> Iterator[None]:
        yield

    # --- the operations --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _call(self, operation: str, args: dict[str, Any]) -> Iterator[None]:
        """Record the call and play its scripted fault, before or after the body."""
        with self.lock:
            self.calls.append((operation, args))
            queue = self.faults.get(operation)
            fault = queue.popleft() if queue else None
            if fault is not None and not fault[1]:
                raise fault[0]
            yield
            if fault is not None:
                raise fault[0]

    def init_producer_id(
        self, conn: object, *, producer_id: int | None = None, epoch: int | None = None
    ) -> ProducerIdAndEpoch:
        with self._call("init_producer_id", {"producer_id": producer_id, "epoch": epoch}):
            self.init_calls.append((producer_id, epoch))
            if self.init_error is not None:
                raise self.init_error
            return self._init(producer_id, epoch)

    def _init(self, producer_id: int | None, epoch: int | None) -> ProducerIdAndEpoch:
        if producer_id is not None and producer_id in self.producers:
            current, last = self.producers[producer_id]
            if epoch == current:
                self.producers[producer_id] = (current + 1, current)
                return ProducerIdAndEpoch(producer_id, current + 1)
            if epoch == last:
                return ProducerIdAndEpoch(producer_id, current)  # a retried bump
            raise errors.InvalidProducerEpochError(f"producer id {producer_id} is at epoch {current}")
        if producer_id is not None:
            raise errors.InvalidProducerIdMappingError(f"unknown producer id {producer_id}")
        self.next_id += 1
        self.producers[self.next_id] = (0, None)
        return ProducerIdAndEpoch(self.next_id, 0)

    def produce_batches(
        self,
        conn: object,
        *,
        batches: Sequence[ProduceBatch],
        producer_id: int | None,
        producer_epoch: int | None,
        transactional_id: str | None,
        txn_number: int | None,
    ) -> list[ProduceResult | errors.OncelogError]:
        common = {
            "producer_id": producer_id, "producer_epoch": producer_epoch,
            "transactional_id": transactional_id, "txn_number": txn_number,
        }  # fmt: skip
        with self._call("produce", {"batches": list(batches), **common}):
            saved = copy.deepcopy((self.offsets, self.batches, self.log, self.txn_ids))
            answers: list[ProduceResult | errors.OncelogError] = []
            try:  # one database transaction: a failure that is not a refusal undoes every batch
                for b in batches:
                    one = {"topic": b.topic, "partition": b.partition, "records": b.records}
                    try:
                        answers.append(self._append({**one, "base_sequence": b.base_sequence, **common}))
                    except errors.OncelogError as exc:
                        if not (exc.sqlstate or "").startswith("OL"):
                            raise
                        answers.append(exc)  # refused: this batch only
            except errors.OncelogError:
                self.offsets, self.batches, self.log, self.txn_ids = saved
                raise
            return answers

    def _append(self, batch: Mapping[str, Any]) -> ProduceResult:
        self.produce_calls += 1
        if self.before_produce is not None:
            self.before_produce(self)
        refused = self.refuse(batch) if self.refuse is not None else None
        if refused is not None:
            raise refused
        topic, partition = batch["topic"], batch["partition"]
        records = RecordColumns.of(batch["records"])
        pid, epoch, seq = batch["producer_id"], batch["producer_epoch"], batch["base_sequence"]
        tid = batch.get("transactional_id")
        now = datetime.now(UTC)
        if pid is not None:
            if pid not in self.producers:
                raise errors.UnknownProducerIdError()
            current = self.producers[pid][0]
            if epoch != current:
                if tid is not None and epoch < current:
                    raise errors.ProducerFencedError(f"producer {pid} epoch {epoch} was fenced by epoch {current}")
                raise errors.InvalidProducerEpochError(f"producer {pid} is at epoch {current}, not {epoch}")
            appended = self.batches.setdefault((pid, topic, partition), [])
            for old in appended:
                if (old.epoch, old.base_sequence) == (epoch, seq):  # a retry of an appended batch
                    return ProduceResult(old.base_offset, old.base_offset + old.count - 1, now, True)
            last = appended[-1] if appended else None
            expected = 0 if last is None or last.epoch != epoch else last.base_sequence + last.count
            if seq != expected:
                raise errors.OutOfOrderSequenceError(f"expected sequence {expected}, got {seq}")
        if tid is not None:
            txn = self.txn_ids[tid]
            if batch["txn_number"] in txn.ended:
                raise errors.InvalidTxnStateError(f"transaction {batch['txn_number']} has ended")
            txn.open = batch["txn_number"]
            txn.partitions.add((topic, partition))
        base = self.offsets.get((topic, partition), 0)
        self.offsets[(topic, partition)] = base + len(records)
        self.log.setdefault((topic, partition), []).extend(records.values)
        if pid is not None:
            self.batches[(pid, topic, partition)].append(_Appended(pid, epoch, seq, base, len(records)))
        # A transaction's records wake read_uncommitted readers only; its commit wakes the others
        # (which the fake does not tell apart: a waiting partition is woken by either).
        return ProduceResult(base, base + len(records) - 1, now, False, _token(topic, partition, self.waiting))

    def produce_offsets_end_txn(
        self,
        conn: object,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        txn_number: int,
        batches: Sequence[ProduceBatch],
        offsets: TxnOffsets | None,
    ) -> CommitResult:
        args = {
            "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
            "txn_number": txn_number, "batches": list(batches), "offsets": offsets,
        }  # fmt: skip
        with self._call("produce_offsets_end_txn", args):
            txn = self.txn_ids[transactional_id]
            common = {
                "producer_id": producer_id, "producer_epoch": producer_epoch,
                "transactional_id": transactional_id, "txn_number": txn_number,
            }  # fmt: skip
            each = [
                {"topic": b.topic, "partition": b.partition, "records": b.records, "base_sequence": b.base_sequence}
                | common
                for b in batches
            ]
            if txn.ended.get(txn_number) == "committed":
                # Answered from the batches in the log: migration 0019's retry after a lost reply.
                return CommitResult([self._append(b) for b in each], "already_committed", [])
            saved = copy.deepcopy((self.offsets, self.batches, self.log, self.txn_ids))
            try:  # all or nothing, as one database transaction
                results = [self._append(b) for b in each]
                if offsets is not None:
                    self.offsets_committed.append(offsets)
                outcome = self._end(transactional_id, txn_number, commit=True)
                return CommitResult(results, outcome, self._woken_by(transactional_id, outcome))
            except errors.OncelogError:
                self.offsets, self.batches, self.log, self.txn_ids = saved
                if offsets is not None and self.offsets_committed and self.offsets_committed[-1] is offsets:
                    self.offsets_committed.pop()
                raise

    def init_transactional_id(
        self,
        conn: object,
        *,
        transactional_id: str,
        transaction_timeout_ms: int,
        producer_id: int | None,
        epoch: int | None,
    ) -> TransactionalIdentity:
        args = {"transactional_id": transactional_id, "producer_id": producer_id, "epoch": epoch}
        with self._call("init_transactional_id", args):
            self.init_calls.append((producer_id, epoch))
            txn = self.txn_ids.get(transactional_id)
            if txn is None:
                ident = self._init(None, None)
                self.txn_ids[transactional_id] = _TxnId(ident.producer_id)
                return TransactionalIdentity(ident.producer_id, ident.epoch, 0)
            if producer_id is None:  # a new instance: fence the old one, abort its transaction
                current, _ = self.producers[txn.producer_id]
                self.producers[txn.producer_id] = (current + 1, current)
                if txn.open is not None:
                    txn.ended[txn.open], txn.open = "aborted", None
                return TransactionalIdentity(txn.producer_id, current + 1, txn.txn_number)
            ident = self._init(producer_id, epoch)
            return TransactionalIdentity(ident.producer_id, ident.epoch, txn.txn_number)

    def end_txn(
        self, conn: object, *, transactional_id: str, producer_id: int, epoch: int, txn_number: int, commit: bool
    ) -> tuple[str, list[str]]:
        args = {"transactional_id": transactional_id, "txn_number": txn_number, "commit": commit}
        with self._call("end_txn", args):
            current, _ = self.producers[producer_id]
            if epoch != current:
                raise errors.ProducerFencedError(f"producer {producer_id} epoch {epoch} was fenced")
            outcome = self._end(transactional_id, txn_number, commit=commit)
            return outcome, self._woken_by(transactional_id, outcome)

    def _woken_by(self, tid: str, outcome: str) -> list[str]:
        """The wake tokens of the waiting partitions a commit wrote to (none for anything but a
        commit); the transaction's partitions are forgotten once it ended."""
        txn = self.txn_ids[tid]
        wake = [f"{t}:{p}" for t, p in sorted(txn.partitions & self.waiting)] if outcome == "committed" else []
        if txn.open is None:
            txn.partitions = set()
        return wake

    def _end(self, tid: str, number: int, *, commit: bool) -> str:
        txn = self.txn_ids[tid]
        outcome = "committed" if commit else "aborted"
        if number in txn.ended:
            if txn.ended[number] != outcome:
                raise errors.InvalidTxnStateError(f"transaction {number} was {txn.ended[number]}")
            return "already_" + outcome
        txn.ended[number] = outcome
        txn.txn_number = max(txn.txn_number, number)
        if txn.open == number:
            txn.open = None
        return outcome

    def txn_offset_commit(self, conn: object, **args: Any) -> None:
        with self._call("txn_offset_commit", args):
            pass

    def wake_readers(self, conn: object, tokens: Sequence[str]) -> int:
        with self._call("wake_readers", {"tokens": list(tokens)}):
            self.woken.append(list(tokens))
            return 1

    def committed(self, tid: str, number: int) -> bool:
        """Whether transaction ``number`` of ``tid`` committed."""
        return self.txn_ids[tid].ended.get(number) == "committed"
