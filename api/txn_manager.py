"""The producer's TransactionManager: its identity, sequences, recovery and transaction state.

Like Kafka's ``TransactionManager``, one object owns what the application threads and the sender
thread both read and write: the producer id and epoch, the next sequence per partition, the
KIP-360 recovery flags (an idempotent producer's pending bump, a transactional producer's bump
after an abort), the transaction number, and the client transaction state machine with its
transition table (:mod:`oncelog.txn_state`). All of it is guarded by ONE re-entrant lock, which
the state machine shares, so a check and the transition that follows it cannot interleave with
another thread's. The lock is never held across I/O: the coordinator calls (InitProducerId,
EndTxn, TxnOffsetCommit) run under a second lock of their own, taken first (order: coordinator
lock, then state lock).

The consumer offsets of ``send_offsets_to_transaction`` are held here until the commit, which
sends them with the transaction's queued batches and EndTxn in one call (``produce_end_txn_v2``,
one database transaction; docs/deviations.md, 42): a group's refusal surfaces at the commit.

A call that does not fit the current state raises :class:`~oncelog.errors.IllegalStateError`;
nothing here asserts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from oncelog import errors
from oncelog.accumulator import ProducerBatch
from oncelog.producer_store import ProducerStore
from oncelog.store import runtime
from oncelog.store.records import ProducerIdAndEpoch, TxnOffsets
from oncelog.txn_state import TransactionStateMachine, TxnState
from oncelog.types import ConsumerGroupMetadata, PreparedTransaction, TopicPartition

__all__ = ["SEQUENCE_MODULUS", "TransactionManager"]

logger = logging.getLogger(__name__)

#: Kafka's sequence space: 31 bits, wrapping to 0.
SEQUENCE_MODULUS = 2**31

_T = TypeVar("_T")

#: Errors from TxnOffsetCommit that blame the consumer, not this producer: as in Kafka, the
#: transaction can only abort, and the producer itself carries on.
_GROUP_REFUSALS = (
    errors.UnknownMemberIdError,
    errors.IllegalGenerationError,
    errors.FencedInstanceIdError,
    errors.UnassignedPartitionError,
    errors.GroupIdNotFoundError,
)


class TransactionManager:
    """Identity, sequences and transaction state of one producer, shared by its threads.

    ``store`` serves the coordinator calls; ``metric(name, by)`` counts epoch bumps and producer
    id resets. ``request_timeout`` bounds one coordinator attempt, ``max_block`` a call without
    a timeout of its own; retries back off from ``backoff`` to ``backoff_max`` seconds.
    ``offsets_with_commit``: consumer offsets wait for the commit and go with it (otherwise each
    send_offsets_to_transaction() is a TxnOffsetCommit call of its own).
    """

    def __init__(
        self,
        store: ProducerStore,
        *,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        idempotent: bool = True,
        request_timeout: float = 30.0,
        max_block: float = 60.0,
        backoff: float = 0.1,
        backoff_max: float = 1.0,
        metric: Callable[[str, float], None] | None = None,
        offsets_with_commit: bool = True,
        wake: Callable[[list[str]], None] | None = None,
    ) -> None:
        if transactional_id is not None and not idempotent:
            raise errors.IllegalStateError("a transactional producer is idempotent")
        self._store = store
        self.transactional_id = transactional_id
        self._txn_timeout_ms = transaction_timeout_ms
        self._idempotent = idempotent
        self._request_timeout = request_timeout
        self._max_block = max_block
        self._backoff = backoff
        self._backoff_max = backoff_max
        self._metric = metric or (lambda name, by: None)
        self._wake = wake or (lambda partitions: None)

        # The one lock of the state below (re-entrant: the state machine takes it too).
        self._lock = threading.RLock()
        self._txn = TransactionStateMachine(transactional_id, lock=self._lock) if transactional_id else None
        self._identity: ProducerIdAndEpoch | None = None
        self._next_sequence: dict[TopicPartition, int] = {}
        # Idempotent producer: the next batch must wait for a new epoch (KIP-360).
        self._need_bump = False
        # Transactional producer: the abort in progress (or the next one) must bump the epoch.
        self._txn_needs_bump = False
        self._txn_number = 0
        self._init_timed_out = False  # init_transactions() ran out of time: it may be called again
        self._aborting = False
        # commit_transaction() names the transaction it commits here; the sender then sends its
        # queued batches together with EndTxn (one database transaction, one round trip) and, once
        # that committed, names it in _committed_with_batch.
        self._commit_number: int | None = None
        self._committed_with_batch: int | None = None
        # send_offsets_to_transaction()'s offsets, sent with the commit (one group at a time: a
        # second group's offsets send the first one's at once, as TxnOffsetCommit).
        self._offsets: TxnOffsets | None = None
        self._offsets_with_commit = offsets_with_commit

        # The coordinator calls' own connection, kept between calls (a pool checkout pings the
        # server first: a second round trip per commit); the lock serialises those calls.
        self._coord_lock = threading.Lock()
        self._coord_conn: Any = None

    # --- what the producer and the sender read -------------------------------------------------

    @property
    def idempotent(self) -> bool:
        """Whether batches carry a producer id, epoch and sequence."""
        return self._idempotent

    @property
    def transactional(self) -> bool:
        """Whether the producer has a transactional id."""
        return self._txn is not None

    @property
    def identity(self) -> ProducerIdAndEpoch | None:
        """The producer id and epoch in use (None before the first one)."""
        with self._lock:
            return self._identity

    @property
    def state(self) -> TxnState | None:
        """The client transaction state (None for a non-transactional producer)."""
        return self._txn.state if self._txn is not None else None

    @property
    def txn_number(self) -> int:
        """The number of the current (or last) transaction."""
        with self._lock:
            return self._txn_number

    @property
    def is_fatal(self) -> bool:
        """Whether the transactional producer is in FATAL_ERROR."""
        return self._txn is not None and self._txn.is_fatal

    @property
    def last_error(self) -> Exception | None:
        """The error that caused the current error state."""
        return self._txn.last_error if self._txn is not None else None

    def can_send(self) -> bool:
        """Whether a transactional batch may still be sent: no error recorded, no abort under way."""
        with self._lock:
            return self._txn is None or not (self._txn.has_error or self._aborting)

    def next_sequence(self, tp: TopicPartition) -> int:
        """The sequence the next new batch of ``tp`` gets."""
        with self._lock:
            return self._next_sequence.get(tp, 0)

    def require_in_transaction(self) -> None:
        """For send(): a transactional producer must be IN_TRANSACTION."""
        if self._txn is not None:
            self._txn.require_in_transaction()

    def require_transactional(self) -> TransactionStateMachine:
        """The state machine; IllegalStateError for a producer without a transactional id."""
        if self._txn is None:
            raise errors.IllegalStateError("this producer has no transactional_id")
        return self._txn

    # --- the idempotent producer's identity (the sender thread) --------------------------------

    @property
    def needs_identity(self) -> bool:
        """Whether the sender must get a producer id, or bump the epoch, before sequencing a batch
        (a transactional producer gets its identity from init_transactions() instead)."""
        with self._lock:
            return self._idempotent and self._txn is None and (self._identity is None or self._need_bump)

    def request_bump(self) -> None:
        """The store's sequence state for us is unknown or differs from ours: the next batch
        starts a new epoch (KIP-360). Nothing to do without idempotence."""
        with self._lock:
            if self._idempotent:
                self._need_bump = True

    def set_identity(self, identity: ProducerIdAndEpoch, *, bumped: bool = False, reset: bool = False) -> None:
        """The sender got a producer id (``bumped``: a new epoch of ours; ``reset``: a fresh id in
        place of one that could not be bumped): every partition's sequence restarts at 0."""
        with self._lock:
            if self._txn is not None:
                raise errors.IllegalStateError("a transactional producer's identity comes from init_transactions()")
            self._identity = identity
            self._need_bump = False
            self._next_sequence.clear()
        if bumped:
            self._metric("epoch_bump_total", 1)
        if reset:
            self._metric("producer_id_reset_total", 1)

    def assign_sequence(self, batch: ProducerBatch) -> None:
        """Give a batch that has none the current identity and the next sequences of its
        partition; a batch keeps them for every retry (what makes a retry a duplicate)."""
        if not self._idempotent:
            return
        with self._lock:
            if batch.base_sequence is not None:
                return
            if self._identity is None:
                raise errors.IllegalStateError("a batch cannot be sequenced before the producer has an id")
            batch.producer_id, batch.epoch = self._identity.producer_id, self._identity.epoch
            batch.base_sequence = self._next_sequence.get(batch.tp, 0)
            self._next_sequence[batch.tp] = (batch.base_sequence + batch.count) % SEQUENCE_MODULUS

    def release_sequence(self, batch: ProducerBatch) -> None:
        """A batch was refused outright (nothing appended): its sequences are free again for the
        partition's next batch, if it took them under the current epoch."""
        with self._lock:
            ident = self._identity
            if self._idempotent and batch.base_sequence is not None and ident and batch.epoch == ident.epoch:
                self._next_sequence[batch.tp] = batch.base_sequence

    # --- the transaction ------------------------------------------------------------------------

    def init_transactions(self, timeout: float | None) -> None:
        """Register the transactional id: fence older instances and take the epoch this one uses."""
        state = self.require_transactional()
        with self._lock:
            retry = state.state is TxnState.INITIALIZING and self._init_timed_out
            if state.state is not TxnState.UNINITIALIZED and not retry:
                raise errors.IllegalStateError(f"init_transactions() was already called (state {state.state.name})")
            if not retry:
                state.transition_to(TxnState.INITIALIZING)
        try:
            self._init_identity(bump=False, timeout=timeout)
        except errors.OncelogError as exc:
            # As in Kafka, a call that ran out of time (the store unreachable, say) may be repeated:
            # a first InitProducerId that did land only bumped an epoch nobody has used yet.
            with self._lock:
                self._init_timed_out = exc.retriable
            raise
        with self._lock:
            self._init_timed_out = False
            state.transition_to(TxnState.READY)

    def begin_transaction(self) -> None:
        """READY -> IN_TRANSACTION, under a new transaction number."""
        state = self.require_transactional()
        with self._lock:
            state.require_can_begin()
            state.transition_to(TxnState.IN_TRANSACTION)
            self._txn_number += 1

    def begin_commit(self) -> None:
        """IN_TRANSACTION -> COMMITTING_TRANSACTION (a retried commit stays there), and name the
        transaction whose queued batches the sender may send with EndTxn."""
        state = self.require_transactional()
        with self._lock:
            if not state.require_can_commit():
                state.transition_to(TxnState.COMMITTING_TRANSACTION)
            self._commit_number = self._txn_number

    def commits_with(self, txn_number: int | None) -> bool:
        """Whether a batch of transaction ``txn_number`` may carry its commit (EndTxn): that
        transaction is committing and not aborting."""
        with self._lock:
            return (
                self._txn is not None
                and txn_number is not None
                and self._commit_number == txn_number
                and not self._aborting
            )

    def committed_with_batch(self, txn_number: int | None) -> None:
        """The sender committed transaction ``txn_number`` together with its last batches (and
        the offsets held for it)."""
        with self._lock:
            self._committed_with_batch = txn_number
            self._offsets = None

    def commit_offsets(self) -> TxnOffsets | None:
        """The consumer offsets the commit sends (None: none were given)."""
        with self._lock:
            return self._offsets

    def commit_refused(self, exc: errors.OncelogError) -> errors.OncelogError:
        """The commit call was refused (nothing of it landed): move to the error state ``exc``
        calls for, and return the error the application gets. A group's refusal of the offsets
        blames the consumer, as TxnOffsetCommit's does: the transaction can only abort."""
        if isinstance(exc, _GROUP_REFUSALS) and self._txn is not None:
            failed = errors.TransactionAbortableError(f"the consumer's offsets were refused: {exc}")
            failed.__cause__ = exc
            self._txn.transition_to_abortable_error(failed)
            return failed
        self.record_error(exc)
        return exc

    def finish_commit(self, timeout: float | None) -> None:
        """After the flush: EndTxn (with the held offsets), unless the queued batches carried it;
        then READY."""
        state = self.require_transactional()
        with self._lock:
            committed = self._committed_with_batch == self._txn_number
            self._committed_with_batch = None
        if state.has_error:
            state.require_can_commit()  # raises the error a send recorded
        if not committed:  # nothing was left to send with EndTxn (but the offsets, if any)
            self._end_txn(commit=True, timeout=timeout)
            with self._lock:
                self._offsets = None
        state.transition_to(TxnState.READY)

    def begin_abort(self) -> None:
        """IN_TRANSACTION or ABORTABLE_ERROR -> ABORTING_TRANSACTION (a retried abort stays
        there); from ABORTABLE_ERROR the abort will bump the epoch (KIP-360)."""
        state = self.require_transactional()
        with self._lock:
            after_error = state.state is TxnState.ABORTABLE_ERROR
            if not state.require_can_abort():
                state.transition_to(TxnState.ABORTING_TRANSACTION)
            self._txn_needs_bump |= after_error
            self._aborting = True
            self._offsets = None  # never sent: nothing to drop in the store

    @property
    def aborting(self) -> bool:
        """Whether an abort is draining the transaction's batches."""
        with self._lock:
            return self._aborting

    def dropped_unsent(self, batch: ProducerBatch) -> None:
        """The abort dropped ``batch``: had it been sent, its outcome is unknown (bump after)."""
        with self._lock:
            self._txn_needs_bump |= batch.sent_once

    def finish_abort(self, timeout: float | None) -> None:
        """After the drain: EndTxn(abort), the KIP-360 bump when one is due, then READY."""
        state = self.require_transactional()
        with self._lock:
            self._aborting = False
        try:
            outcome = self._end_txn(commit=False, timeout=timeout)
        except errors.InvalidProducerEpochError:
            # The store already aborted this transaction at its timeout and bumped the epoch (it
            # says so only as long as it remembers the epoch before the bump): the abort is done,
            # and the KIP-360 bump below takes the producer to the current epoch.
            outcome = "already_aborted_timed_out"
        with self._lock:
            self._txn_needs_bump |= outcome.endswith("timed_out")
            bump = self._txn_needs_bump
            if bump:
                state.transition_to(TxnState.INITIALIZING)
        if bump:
            self._init_identity(bump=True, timeout=timeout)
            with self._lock:
                self._txn_needs_bump = False
        state.transition_to(TxnState.READY)

    def prepared(self) -> PreparedTransaction:
        """The open transaction, for another party to end (prepare_transaction())."""
        with self._lock:
            ident = self._require_identity()
            if self.transactional_id is None:
                raise errors.IllegalStateError("this producer has no transactional_id")
            return PreparedTransaction(self.transactional_id, ident.producer_id, ident.epoch, self._txn_number)

    def txn_offset_commit(
        self,
        offsets: Mapping[tuple[str, int], tuple[int, str]],
        group_metadata: ConsumerGroupMetadata,
        timeout: float | None,
    ) -> None:
        """TxnOffsetCommit in the current transaction (KIP-447): held for the commit, which sends
        them in the same call as the queued batches and EndTxn. Offsets for another group (or
        another generation of the member) than the ones held send those at once first. Without
        ``offsets_with_commit`` they are sent at once (Kafka's way)."""
        state = self.require_transactional()
        state.require_in_transaction()
        given = TxnOffsets(
            group_metadata.group_id,
            group_metadata.member_id,
            group_metadata.group_instance_id,
            group_metadata.generation_id,
            dict(offsets),
        )
        if not self._offsets_with_commit:
            self.send_offsets_now(given, timeout)
            return
        with self._lock:
            held = self._offsets
            if held is not None and _same_member(held, given):
                self._offsets = TxnOffsets(
                    held.group_id, held.member_id, held.group_instance_id, held.generation,
                    {**held.offsets, **given.offsets},
                )  # fmt: skip
                return
            self._offsets = given
        if held is not None:
            self.send_offsets_now(held, timeout)

    def flush_offsets(self, timeout: float | None) -> None:
        """Send the offsets held for the commit now, as TxnOffsetCommit (before the transaction
        is handed to another party to end: prepare_transaction())."""
        with self._lock:
            held, self._offsets = self._offsets, None
        if held is not None:
            self.send_offsets_now(held, timeout)

    def send_offsets_now(self, offsets: TxnOffsets, timeout: float | None) -> None:
        """TxnOffsetCommit of ``offsets`` in the current transaction, in a call of its own."""
        state = self.require_transactional()
        with self._lock:
            ident, number = self._require_identity(), self._txn_number
        tid = self._tid()
        try:
            self._retrying(
                timeout,
                lambda conn: self._store.txn_offset_commit(
                    conn,
                    transactional_id=tid,
                    producer_id=ident.producer_id,
                    epoch=ident.epoch,
                    txn_number=number,
                    group_id=offsets.group_id,
                    member_id=offsets.member_id,
                    group_instance_id=offsets.group_instance_id,
                    generation=offsets.generation,
                    offsets=offsets.offsets,
                ),
            )
        except _GROUP_REFUSALS as exc:
            failed = errors.TransactionAbortableError(f"the consumer's offsets were refused: {exc}")
            state.transition_to_abortable_error(failed)
            raise failed from exc
        except errors.OncelogError as exc:
            self.record_error(exc)
            raise

    # --- errors the sender reports --------------------------------------------------------------

    def record_error(self, exc: errors.OncelogError) -> None:
        """Move the transaction to the error state ``exc`` calls for (nothing if retriable)."""
        if self._txn is None or exc.retriable:
            return
        with self._lock:
            if exc.fatal:
                self._txn.transition_to_fatal_error(exc)
            elif self._txn.state is not TxnState.ABORTING_TRANSACTION:
                self._txn_needs_bump = True
                self._txn.transition_to_abortable_error(exc)

    def unknown_outcome(self, exc: errors.OncelogError) -> None:
        """A transactional batch's outcome stayed unknown: the transaction can only abort, and
        the abort must bump the epoch (the batch may yet be in the log under this one)."""
        if self._txn is None:
            return
        with self._lock:
            self._txn_needs_bump = True
            if not self._aborting:
                self._txn.transition_to_abortable_error(exc)

    # --- internals ------------------------------------------------------------------------------

    def _tid(self) -> str:
        if self.transactional_id is None:
            raise errors.IllegalStateError("this producer has no transactional_id")
        return self.transactional_id

    def _require_identity(self) -> ProducerIdAndEpoch:
        if self._identity is None:
            raise errors.IllegalStateError("the producer has no producer id yet (call init_transactions() first)")
        return self._identity

    def _init_identity(self, *, bump: bool, timeout: float | None) -> None:
        state, tid = self.require_transactional(), self._tid()
        current = self.identity if bump else None
        try:
            ident = self._retrying(
                timeout,
                lambda conn: self._store.init_transactional_id(
                    conn,
                    transactional_id=tid,
                    transaction_timeout_ms=self._txn_timeout_ms,
                    producer_id=current.producer_id if current else None,
                    epoch=current.epoch if current else None,
                ),
            )
        except errors.OncelogError as exc:
            # As in Kafka, a failed InitProducerId (bad timeout, fenced, unknown mapping) leaves
            # nothing to abort: the producer cannot go on. Retriable errors were retried until the
            # timeout; init_transactions() may then be called again (not so the bump).
            if not (exc.retriable and not bump):
                state.transition_to_fatal_error(exc)
            raise
        with self._lock:
            self._identity = ProducerIdAndEpoch(ident.producer_id, ident.epoch)
            self._txn_number = ident.txn_number
            self._next_sequence.clear()
        if bump:
            self._metric("epoch_bump_total", 1)

    def _end_txn(self, *, commit: bool, timeout: float | None) -> str:
        with self._lock:
            ident, number = self._require_identity(), self._txn_number
            offsets = self._offsets if commit else None
        tid = self._tid()

        def end(conn: Any) -> tuple[str, list[str]]:
            if offsets is None:
                return self._store.end_txn(
                    conn, transactional_id=tid, producer_id=ident.producer_id, epoch=ident.epoch,
                    txn_number=number, commit=commit,
                )  # fmt: skip
            # The offsets and EndTxn in one call (no batch was left to carry them).
            done = self._store.produce_offsets_end_txn(
                conn, transactional_id=tid, producer_id=ident.producer_id, producer_epoch=ident.epoch,
                txn_number=number, batches=[], offsets=offsets,
            )  # fmt: skip
            return done.outcome, done.wake

        try:
            outcome, wake = self._retrying(timeout, end)
        except errors.OncelogError as exc:
            if not commit:
                self.record_error(exc)
                raise
            failed = self.commit_refused(exc)
            if failed is exc:
                raise
            raise failed from exc
        if wake:
            self._wake(wake)  # the readers waiting on the committed partitions
        return outcome

    def _retrying(self, timeout: float | None, what: Callable[[Any], _T]) -> _T:
        """Run a coordinator call, retrying retriable failures (a lost reply is safe: every
        coordinator call is idempotent for the same arguments) until ``timeout``/max_block."""
        deadline = time.monotonic() + (self._max_block if timeout is None else timeout)
        delay = self._backoff
        while True:
            try:
                with self._coord_lock:
                    if self._coord_conn is None:
                        self._coord_conn = self._store.connect()
                    try:
                        # Each attempt ends by the caller's deadline: the server cancels it (a lock
                        # held elsewhere), or the client cuts a stalled connection shortly after.
                        bound = max(min(deadline - time.monotonic(), self._request_timeout), 0.001)
                        with self._store.request(self._coord_conn, bound):
                            return what(self._coord_conn)
                    except errors.OncelogError as exc:
                        if exc.retriable:  # the connection may be gone: the next try opens a new one
                            conn, self._coord_conn = self._coord_conn, None
                            self._store.release(conn, invalidate=True)
                        raise
            except errors.OncelogError as exc:
                if not exc.retriable or time.monotonic() + delay > deadline:
                    raise
                runtime.sleep(delay)
                delay = min(delay * 2, self._backoff_max)

    def close(self) -> None:
        """Release the coordinator connection."""
        with self._coord_lock:
            conn, self._coord_conn = self._coord_conn, None
            if conn is not None:
                self._store.release(conn, invalidate=False)


def _same_member(a: TxnOffsets, b: TxnOffsets) -> bool:
    """Whether two sets of offsets come from the same member in the same generation."""
    return (a.group_id, a.member_id, a.group_instance_id, a.generation) == (
        b.group_id, b.member_id, b.group_instance_id, b.generation,
    )  # fmt: skip
