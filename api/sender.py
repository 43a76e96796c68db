"""The producer's Sender: the I/O thread that sends the accumulator's batches to the store.

One thread sends over autocommit connections. Each request carries ready batches of many
partitions, at most one per partition so each partition's batches stay in order
(``produce_batches``: one round trip, one database transaction, each batch answered on its own,
as Kafka's ProduceRequest to a broker). A producer outside transactions sends a round's batches
as up to ``lanes`` requests at once when it is large (LANE_MIN_BYTES per lane), each on a
connection of its own and each with other partitions (Kafka's several requests in flight):
idempotent appends to different partitions share no lock the store holds exclusively, so they
run side by side in the database. Once the
application commits a transaction, everything still queued goes in ONE call with the consumer
offsets and EndTxn (``produce_offsets_end_txn``). Where the store says a reader waits on a
written partition, the sender hands its wake token to ``wake`` (the producer's
:class:`~oncelog.waker.ReaderWaker`), which wakes it outside the write's transaction. What a
batch's failure means (retry it with the same sequence, bump the epoch and resend it, fail it) is
decided here from the error's flags; the identity and sequences themselves belong to the
:class:`~oncelog.txn_manager.TransactionManager`, and the store is the injected
:class:`~oncelog.producer_store.ProducerStore` (a fake one in unit tests).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from oncelog import errors
from oncelog.accumulator import ProducerBatch, RecordAccumulator
from oncelog.producer_store import ProducerStore
from oncelog.store.records import MAX_BATCHES_PER_REQUEST, ProduceBatch, ProduceResult
from oncelog.txn_manager import TransactionManager

__all__ = ["LANE_MIN_BYTES", "MAX_RESEQUENCE_TRIES", "Sender", "fail_batch"]

logger = logging.getLogger(__name__)

#: Errors meaning the store's sequence state for us is not what we think: restart under a new epoch.
_RESEQUENCE = (errors.OutOfOrderSequenceError, errors.UnknownProducerIdError, errors.InvalidProducerEpochError)
#: How many times one batch may be taken up and re-sequenced under a new identity before it fails
#: (each round is a bump or a fresh id and a send; more rounds mean the identity is being taken
#: away as fast as we get one).
MAX_RESEQUENCE_TRIES = 6
#: The record bytes each lane of a round must carry for the round to be split across lanes. Each
#: request is its own database commit: on small rounds the extra commits cost more than the
#: backends running side by side gain (measured in bench/produce.py on 8 partitions: rounds of
#: 80 KB to 800 KB went 0.7x to 0.4x slower split over 5 lanes; rounds of 8 MB went 1.5x faster).
LANE_MIN_BYTES = 1 << 20


class SenderMetrics:
    """The counters the sender feeds (the producer's ``metrics()`` reads them)."""

    def bump(self, name: str, by: float = 1) -> None:
        """Add ``by`` to the counter ``name``."""

    def sent(self, batch: ProducerBatch, latency_ms: float) -> None:
        """``batch`` was acknowledged after a request of ``latency_ms``."""


class Sender:
    """Sends the batches of ``acc`` as they become ready; ``cond`` guards ``acc`` and the fields
    below, shared with the producer's application threads.

    ``flushing`` (a count) and ``closing`` are set by the producer; ``in_flight`` and the ids in
    ``sending`` are the batches this sender holds. ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        store: ProducerStore,
        manager: TransactionManager,
        acc: RecordAccumulator,
        cond: threading.Condition,
        *,
        linger: float,
        delivery_timeout: float,
        attempt_timeout: float,
        backoff: float,
        backoff_max: float,
        metrics: SenderMetrics | None = None,
        wake: Callable[[list[str]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        lanes: int = 1,
    ) -> None:
        self._store = store
        self._manager = manager
        self._acc = acc
        self._cond = cond
        self._linger = linger
        self._delivery_timeout = delivery_timeout
        self._attempt_timeout = attempt_timeout
        self._backoff = backoff
        self._backoff_max = backoff_max
        self._metrics = metrics or SenderMetrics()
        self._wake = wake or (lambda partitions: None)
        self._clock = clock
        self.flushing = 0
        self.closing = False
        self.in_flight = 0
        self.sending: set[int] = set()
        # Lane k's connection; lane 0 is the sender's own, the others serve the requests sent side
        # by side (_send_lanes). Only the sender thread opens or drops them, except that a lane's
        # thread opens its own connection while the sender thread waits for it.
        self._lanes = max(1, lanes)
        self._conns: list[Any] = [None] * self._lanes
        self._lane = 0  # whose connection _connection() means: the lane being sent or answered
        self._pool: ThreadPoolExecutor | None = None

    # --- the loop -------------------------------------------------------------------------------

    def run(self) -> None:
        """The sender thread: send ready batches until closing with nothing left."""
        try:
            while True:
                with self._cond:
                    batches = self._wait_for_ready()
                if batches is None:
                    return
                self.send_claimed(batches)
        except BaseException as exc:  # never leave futures hanging if the sender dies
            logger.exception("oncelog producer sender failed")
            with self._cond:
                self.fail_queued(errors.ProducerClosedError(f"the sender thread failed: {exc!r}"))
            raise
        finally:
            self.release()

    def release(self) -> None:
        """Release the sender's connections and lane threads (when it stops)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        for lane in range(self._lanes):
            self._lane = lane
            self._drop_connection(invalidate=False)
        self._lane = 0

    def run_once(self) -> int:
        """Send the batches that are ready now, without waiting; return how many (Kafka's
        ``Sender.runOnce``, for tests that drive the sender step by step)."""
        with self._cond:
            batches, _ = self.claim_ready()
        if not batches:
            return 0
        self.send_claimed(batches)
        return len(batches)

    def claim_ready(self) -> tuple[list[ProducerBatch] | None, float | None]:
        """Under the lock, without waiting: the batches to send now, claimed for
        :meth:`send_claimed`, or none yet and the time (``clock()``) to look again (None: when
        notified), or ``(None, None)`` when closing with nothing left. The sender of
        :mod:`oncelog.aio` waits on the event loop between calls."""
        now = self._clock()
        self._expire_unsent(now)
        ready = self._acc.ready(now, self._linger, self.flushing > 0 or self.closing)
        if ready:
            self._claim(ready)
            return ready, None
        if self.closing and not len(self._acc):
            return None, None
        wake = self._acc.next_wakeup(now, self._linger)
        return [], None if wake is None else now + wake

    def _claim(self, batches: list[ProducerBatch]) -> None:
        for b in batches:
            b.full = True  # closed: nothing more is appended to a batch being sent
        self.in_flight = len(batches)
        self.sending = {b.id for b in batches}

    def fail_queued(self, exc: BaseException) -> None:
        """Under the lock: fail every queued batch (the sender stopped; nothing will send them)."""
        for batch in list(self._acc.batches()):
            fail_batch(batch, exc)
        self._cond.notify_all()

    def send_claimed(self, batches: list[ProducerBatch]) -> None:
        """Send batches claimed by :meth:`claim_ready` (without the lock)."""
        remaining = list(batches)
        while remaining:
            group = self._commit_group()
            if group is not None:
                # The application is committing: what is left goes with EndTxn, in one call.
                self._send_commit(group)
                break
            request, remaining = remaining[:MAX_BATCHES_PER_REQUEST], remaining[MAX_BATCHES_PER_REQUEST:]
            if len(request) == 1 or self._alone(request):
                for b in request:
                    self._send_batch(b)
            else:
                self._send_requests(request)
            with self._cond:
                self.sending.difference_update(b.id for b in request)
        with self._cond:
            self.in_flight = 0
            self.sending.clear()
            self._cond.notify_all()

    def _alone(self, batches: list[ProducerBatch]) -> bool:
        """Whether these batches go one per request: a KIP-360 bump is due (which settles each
        batch of unknown outcome under its old epoch first, see _ensure_identity), or one of them
        failed in a request of many before."""
        manager = self._manager
        bump_due = manager.needs_identity and manager.identity is not None
        return bump_due or any(b.solo for b in batches)

    def _commit_group(self) -> list[ProducerBatch] | None:
        """Every queued batch, when they all belong to the transaction being committed: they are
        sent together with the offsets and EndTxn. None otherwise (no commit under way, or
        batches of a transaction before it still queued)."""
        if not self._manager.transactional:
            return None
        with self._cond:
            queued = list(self._acc.batches())
            if not queued or not all(self._manager.commits_with(b.txn_number) for b in queued):
                return None
            for b in queued:
                b.full = True
                b.ends_txn = True  # every retry carries EndTxn again (answered as a retry once committed)
            self.in_flight = len(queued)
            self.sending = {b.id for b in queued}
            return queued

    def _wait_for_ready(self) -> list[ProducerBatch] | None:
        """Under the lock: the batches to send next (claimed), or None when closing with nothing left."""
        while True:
            batches, at = self.claim_ready()
            if batches is None or batches:
                return batches
            self._cond.wait(None if at is None else max(at - self._clock(), 0.0))

    def _expire_unsent(self, now: float) -> None:
        """Batches never sent that waited past delivery_timeout fail (no unknown outcome, no bump)."""
        for batch in list(self._acc.batches()):
            if not batch.sent_once and now - batch.created > self._delivery_timeout:
                try:
                    self._acc.complete(batch)
                except RuntimeError:
                    continue  # not a head batch: it expires when it becomes one
                fail_batch(batch, errors.DeliveryTimeoutError("not sent within delivery_timeout_ms"))
                self._cond.notify_all()

    # --- the connection -------------------------------------------------------------------------

    def _connection(self, lane: int | None = None) -> Any:
        """The connection of ``lane`` (by default the lane being sent or answered), opened as needed."""
        k = self._lane if lane is None else lane
        if self._conns[k] is None:
            self._conns[k] = self._store.connect()
        return self._conns[k]

    def _drop_connection(self, *, invalidate: bool) -> None:
        conn, self._conns[self._lane] = self._conns[self._lane], None
        if conn is not None:
            self._store.release(conn, invalidate=invalidate)

    def _remaining(self, batch: ProducerBatch, now: float) -> float | None:
        """Seconds left before ``batch``'s delivery deadline; None for a batch sent with EndTxn,
        which has none (its first attempt may have committed: only its answer can tell)."""
        return None if batch.ends_txn else batch.created + self._delivery_timeout - now

    @contextlib.contextmanager
    def _bounded_request(self, conn: Any, *batches: ProducerBatch) -> Iterator[None]:
        """One request for ``batches``, bounded by their shortest remaining delivery time and the
        attempt timeout (a quarter of the delivery timeout: a partition whose lock another session
        holds must not hold the other partitions' batches, sent on this one connection, past
        their deadlines)."""
        now = self._clock()
        bound = self._attempt_timeout
        for batch in batches:
            remaining = self._remaining(batch, now)
            if remaining is not None:
                bound = min(bound, remaining)
        with self._store.request(conn, bound):
            yield

    # --- one batch ------------------------------------------------------------------------------

    def _admit(self, batch: ProducerBatch, now: float) -> bool:
        """Whether ``batch`` may be sent now; if not, it has been failed (its transaction is
        aborting) or expired (past its delivery deadline)."""
        manager = self._manager
        if not manager.can_send():
            # The transaction cannot commit any more: do not send into it.
            cause = manager.last_error
            aborted = errors.TransactionAbortedError("the transaction is aborting")
            self._finish_failed(batch, cause if manager.is_fatal and cause else aborted)
            return False
        remaining = self._remaining(batch, now)
        if remaining is not None and remaining <= 0:
            # Every path of a batch ends at its deadline: a retry (or a wait for the producer's
            # identity) due after it is not made.
            expired = errors.DeliveryTimeoutError("not acknowledged within delivery_timeout_ms")
            if manager.transactional:
                self._on_txn_error(batch, expired, now)  # retriable, out of time: abortable
            else:
                self._expire(batch, expired)
            return False
        return True

    def _send_batch(self, batch: ProducerBatch) -> None:
        started = self._clock()
        manager = self._manager
        if not self._admit(batch, started):
            return
        batch.tries += 1
        sent = False  # whether this attempt's request may have reached the store
        try:
            if not self._ensure_identity(batch):
                batch.next_attempt_at = self._clock() + self._backoff
                return
            manager.assign_sequence(batch)
            batch.attempts += 1
            conn = self._connection()
            sent = True
            result = self._produce(conn, batch)
        except errors.OncelogError as exc:
            self._on_error(batch, exc, started, sent=sent)
            return
        self._acknowledged([batch], [result], started)

    def _send_requests(self, batches: list[ProducerBatch]) -> None:
        """Send ``batches`` (at most one per partition): in one request, or, for a producer
        outside transactions with lanes to spare and at least LANE_MIN_BYTES of records per lane,
        split by bytes into up to ``lanes`` requests sent side by side. The identity and
        sequences are settled here first, on the sender thread, and every answer is handled here
        afterwards, request by request: the lanes' threads only carry the requests."""
        started = self._clock()
        live = self._prepare(batches, started)
        if not live:
            return
        lanes = min(self._lanes, len(live), sum(b.size for b in live) // LANE_MIN_BYTES)
        if lanes <= 1 or self._manager.transactional:
            # A transactional append holds its transactions row FOR UPDATE: lanes would queue on it.
            self._answer(live, self._carry(0, live), started)
            return
        groups = _split(live, lanes)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._lanes - 1, thread_name_prefix="oncelog-producer-lane")
        pending: list[Future[_Outcome]] = [self._pool.submit(self._carry, k, g) for k, g in enumerate(groups) if k]
        outcomes = [self._carry(0, groups[0]), *(f.result() for f in pending)]
        for k, (group, outcome) in enumerate(zip(groups, outcomes, strict=True)):
            self._lane = k  # a failure drops this lane's connection, not another's
            try:
                self._answer(group, outcome, started)
            finally:
                self._lane = 0

    def _prepare(self, batches: list[ProducerBatch], started: float) -> list[ProducerBatch]:
        """The batches of ``batches`` that go now, each with its identity and sequence (empty when
        none can: failed, expired, or waiting for the producer's identity)."""
        manager = self._manager
        live = [b for b in batches if self._admit(b, started)]
        if not live:
            return []
        for b in live:
            b.tries += 1
        try:
            # No bump is due here (_alone): at most the first identity is still to be had.
            if not self._ensure_identity(live[0]):
                for b in live:
                    b.next_attempt_at = self._clock() + self._backoff
                return []
            for b in live:
                manager.assign_sequence(b)
                b.attempts += 1
            first = live[0]
            if any((b.producer_id, b.epoch, b.txn_number) != (first.producer_id, first.epoch, first.txn_number)
                   for b in live):  # fmt: skip
                raise errors.IllegalStateError("the batches of one request share the producer's identity")
        except errors.OncelogError as exc:
            if exc.retriable:
                for b in live:
                    b.solo = True  # as for a failed request (_answer)
            for b in live:
                self._on_error(b, exc, started, sent=False)
            return []
        return live

    def _carry(self, lane: int, batches: list[ProducerBatch]) -> _Outcome:
        """Send one request of prepared ``batches`` on ``lane``'s connection; touches no state of
        the sender but that connection (lanes other than 0 run this on a thread of their own)."""
        sent = False
        try:
            conn = self._connection(lane)
            sent = True
            first = batches[0]
            with self._bounded_request(conn, *batches):
                answers = self._store.produce_batches(
                    conn,
                    batches=[ProduceBatch(b.tp.topic, b.tp.partition, b.base_sequence, b.columns) for b in batches],
                    producer_id=first.producer_id,
                    producer_epoch=first.epoch,
                    transactional_id=self._manager.transactional_id,
                    txn_number=first.txn_number,
                )
        except errors.OncelogError as exc:
            return _Outcome(error=exc, sent=sent)
        return _Outcome(answers=answers)

    def _answer(self, live: list[ProducerBatch], outcome: _Outcome, started: float) -> None:
        """Handle the answer to one request of ``live``: each batch's result or refusal, or the
        whole request's failure (every batch's)."""
        exc = outcome.error
        if exc is not None:
            if exc.retriable:
                # Each goes alone until answered: if one partition is what fails (its lock held
                # elsewhere), it must not hold the others' batches up again.
                for b in live:
                    b.solo = True
            for b in live:
                self._on_error(b, exc, started, sent=outcome.sent)
            return
        done: list[ProducerBatch] = []
        results: list[ProduceResult] = []
        for b, answer in zip(live, outcome.answers, strict=True):
            if isinstance(answer, errors.OncelogError):
                self._on_refusal(b, answer, started)
            else:
                done.append(b)
                results.append(answer)
        self._acknowledged(done, results, started)

    def _acknowledged(self, batches: list[ProducerBatch], results: list[ProduceResult], started: float) -> None:
        """Complete acknowledged batches, and have the readers waiting on their partitions woken."""
        latency_ms = (self._clock() - started) * 1000
        with self._cond:
            for b in batches:
                self._metrics.sent(b, latency_ms)
                self._acc.complete(b)
            self._cond.notify_all()
        for b, result in zip(batches, results, strict=True):
            _acknowledge(b, result)
        wake = [result.wake for result in results if result.wake]
        if wake:
            self._wake(wake)

    def _produce(self, conn: Any, batch: ProducerBatch) -> ProduceResult:
        with self._bounded_request(conn, batch):
            (answer,) = self._store.produce_batches(
                conn,
                batches=[ProduceBatch(batch.tp.topic, batch.tp.partition, batch.base_sequence, batch.columns)],
                producer_id=batch.producer_id,
                producer_epoch=batch.epoch,
                transactional_id=self._manager.transactional_id,
                txn_number=batch.txn_number,
            )
        if isinstance(answer, errors.OncelogError):
            raise answer  # refused: nothing of the batch was appended
        return answer

    # --- the commit: every queued batch, the offsets and EndTxn in one call ---------------------

    def _send_commit(self, group: list[ProducerBatch]) -> None:
        """Send ``group`` (the committing transaction's queued batches, a partition's in order)
        with the held consumer offsets and EndTxn: one round trip, one database transaction, all
        or nothing. A lost reply is retried with the same batches and sequences, with no
        deadline: the first attempt may have committed, and only an answer can tell (a retry of
        a call that committed is answered as one, migration 0019)."""
        started = self._clock()
        manager = self._manager
        if not manager.can_send():
            cause = manager.last_error
            aborted = errors.TransactionAbortedError("the transaction is aborting")
            for b in group:
                self._finish_failed(b, cause if manager.is_fatal and cause else aborted)
            return
        for b in group:
            b.tries += 1
        try:
            for b in group:
                manager.assign_sequence(b)
                b.attempts += 1
            first = group[0]
            tid, pid, epoch, number = manager.transactional_id, first.producer_id, first.epoch, first.txn_number
            if tid is None or pid is None or epoch is None or number is None:
                raise errors.IllegalStateError("a commit needs its transaction and the producer's identity")
            batches = [ProduceBatch(b.tp.topic, b.tp.partition, b.base_sequence or 0, b.columns) for b in group]
            conn = self._connection()
            with self._store.request(conn, self._attempt_timeout):
                commit = self._store.produce_offsets_end_txn(  # committed (or already)
                    conn,
                    transactional_id=tid,
                    producer_id=pid,
                    producer_epoch=epoch,
                    txn_number=number,
                    batches=batches,
                    offsets=manager.commit_offsets(),
                )
        except errors.OncelogError as exc:
            self._on_commit_error(group, exc)
            return
        latency_ms = (self._clock() - started) * 1000
        with self._cond:
            manager.committed_with_batch(number)  # before flush() sees the batches complete
            for b in group:
                self._metrics.sent(b, latency_ms)
                self._acc.complete(b)
            self._cond.notify_all()
        for b, result in zip(group, commit.results, strict=True):
            _acknowledge(b, result)
        if commit.wake:
            self._wake(commit.wake)

    def _on_commit_error(self, group: list[ProducerBatch], exc: errors.OncelogError) -> None:
        """The commit call failed. Retriable: send the same group again (together: one backoff
        for all). Otherwise nothing of it landed: the transaction can only abort (or, fenced,
        the producer is finished)."""
        now = self._clock()
        if exc.retriable and not self._manager.aborting:
            if not isinstance(exc, errors.RequestTimeoutError):
                self._drop_connection(invalidate=True)  # (a statement the server cancelled leaves it usable)
            for b in group:
                self._schedule_retry(b, now, exc)
            due = max(b.next_attempt_at for b in group)
            for b in group:
                b.next_attempt_at = due
            return
        if exc.retriable:  # an abort began meanwhile: the outcome stays unknown, the abort bumps
            unknown = errors.DeliveryTimeoutError(f"the commit's outcome is unknown: {exc}")
            self._manager.unknown_outcome(unknown)
            failed: BaseException = unknown
        else:
            failed = self._manager.commit_refused(exc)
        for b in group:
            self._finish_failed(b, failed)

    def _ensure_identity(self, batch: ProducerBatch) -> bool:
        """Get a producer id, or bump the epoch (KIP-360), before sequencing anything. Returns
        False when ``batch`` must wait: a bump is due but other batches still have an unknown
        outcome, and those are settled under the old epoch first (re-sequencing one of them under
        the new epoch could append it twice; Kafka likewise bumps only with nothing in flight)."""
        manager = self._manager
        if not manager.needs_identity:
            return True
        old = manager.identity
        if old is not None:
            if batch.unknown_outcome and batch.base_sequence is not None:
                return True  # settle this one first, under its old epoch and sequence
            with self._cond:
                unsettled = any(b.unknown_outcome for b in self._acc.batches() if b is not batch)
            if unsettled:
                return False
        conn = self._connection()
        if old is None:
            with self._bounded_request(conn, batch):
                manager.set_identity(self._store.init_producer_id(conn))
        else:
            try:
                with self._bounded_request(conn, batch):
                    ident = self._store.init_producer_id(conn, producer_id=old.producer_id, epoch=old.epoch)
                manager.set_identity(ident, bumped=True)
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
                    manager.set_identity(self._store.init_producer_id(conn), reset=True)
            logger.info("producer bumped to %s; sequences restart at 0", manager.identity)
        with self._cond:
            for b in self._acc.batches():
                b.base_sequence = b.epoch = b.producer_id = None
        return True

    # --- failures -------------------------------------------------------------------------------

    def _on_error(self, batch: ProducerBatch, exc: errors.OncelogError, started: float, *, sent: bool = True) -> None:
        """A batch's attempt failed; ``sent``: its request may have reached the store (False for a
        failure before it: connecting, or re-initialising the producer id)."""
        now = self._clock()
        manager = self._manager
        if manager.transactional:
            self._on_txn_error(batch, exc, now)
            return
        if exc.retriable:
            # Unknown outcome (connection lost, server restarting) or a transient conflict:
            # resend the same batch with the same sequence until the delivery timeout. A statement
            # the server cancelled at its timeout (RequestTimeoutError: a partition lock held by
            # someone else) was rolled back: its connection is fine, and it appended nothing.
            if not isinstance(exc, errors.RequestTimeoutError):
                self._drop_connection(invalidate=True)
                batch.unknown_outcome |= manager.idempotent and sent
            if now - batch.created <= self._delivery_timeout:
                self._schedule_retry(batch, now, exc)
                return
            self._expire(batch, errors.DeliveryTimeoutError(f"not acknowledged within delivery_timeout_ms: {exc}"))
            return
        in_time = now - batch.created <= self._delivery_timeout
        if manager.idempotent and isinstance(exc, _RESEQUENCE) and in_time and batch.tries < MAX_RESEQUENCE_TRIES:
            # The store rejected the batch (nothing was appended) because its sequence state for
            # us differs from ours (expired, or an epoch mismatch): new epoch, same batch.
            # (Had an earlier attempt landed, this retry would have been answered as a duplicate.)
            batch.unknown_outcome = False
            manager.request_bump()
            self._schedule_retry(batch, now, exc)
            return
        # A definite rejection: nothing was appended, so the sequence this batch took is free
        # again for the next batch of the partition.
        manager.release_sequence(batch)
        self._finish_failed(batch, exc)

    def _on_refusal(self, batch: ProducerBatch, exc: errors.OncelogError, started: float) -> None:
        """The store refused ``batch`` in a request of many: nothing of it was appended (its
        subtransaction rolled back), and the request's connection is sound."""
        if exc.retriable and not self._manager.aborting:
            now = self._clock()
            if now - batch.created <= self._delivery_timeout:
                self._schedule_retry(batch, now, exc)
                return
        # As any failure that left the batch out of the log: _on_error decides (re-sequence,
        # fail, or for a retriable one out of time, expire).
        self._on_error(batch, exc, started, sent=False)

    def _expire(self, batch: ProducerBatch, exc: errors.DeliveryTimeoutError) -> None:
        """Fail an idempotent batch at its delivery deadline."""
        if batch.unknown_outcome:
            # An attempt may have landed: neither reusing nor skipping its sequence is safe, so
            # the next batch starts a new epoch (KIP-360).
            self._manager.request_bump()
        else:
            # Every attempt was refused or never reached the store (a lock timeout rolls back):
            # its sequence is free again for the partition's next batch.
            self._manager.release_sequence(batch)
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
            if in_time and not self._manager.aborting:
                self._schedule_retry(batch, now, exc)
                return
            # Unknown outcome: the abort that must follow also bumps the epoch.
            if not isinstance(exc, errors.DeliveryTimeoutError):
                exc = errors.DeliveryTimeoutError(f"not acknowledged within delivery_timeout_ms: {exc}")
            self._manager.unknown_outcome(exc)
            self._finish_failed(batch, exc)
            return
        self._manager.record_error(exc)
        self._finish_failed(batch, exc)

    def _schedule_retry(self, batch: ProducerBatch, now: float, exc: BaseException) -> None:
        # By tries, not sends: a re-initialisation that keeps failing backs off like a send.
        delay = min(self._backoff * 2 ** max(batch.tries - 1, 0), self._backoff_max)
        batch.next_attempt_at = now + delay
        self._metrics.bump("record_retry_total", batch.count)
        logger.debug("retrying batch %s of %s in %.3fs after %r", batch.id, batch.tp, delay, exc)

    def _finish_failed(self, batch: ProducerBatch, exc: BaseException) -> None:
        self._metrics.bump("record_error_total", batch.count)
        with self._cond:
            self._acc.complete(batch)
            self._cond.notify_all()
        fail_batch(batch, exc)


@dataclass
class _Outcome:
    """What one request came back with: every batch's answer, or the error that failed it whole
    (``sent``: the request may have reached the store)."""

    answers: Sequence[ProduceResult | errors.OncelogError] = ()
    error: errors.OncelogError | None = None
    sent: bool = False


def _split(batches: list[ProducerBatch], lanes: int) -> list[list[ProducerBatch]]:
    """``batches`` in at most ``lanes`` groups of about equal bytes (largest first, each to the
    group with fewest so far); every group holds at least one batch."""
    groups: list[list[ProducerBatch]] = [[] for _ in range(min(lanes, len(batches)))]
    loads = [0] * len(groups)
    for b in sorted(batches, key=lambda b: -b.size):
        k = loads.index(min(loads))
        groups[k].append(b)
        loads[k] += b.size
    return groups


def _acknowledge(batch: ProducerBatch, result: ProduceResult) -> None:
    """Complete every record of an acknowledged batch with where it landed."""
    batch.result.succeed(result.base_offset, result.log_append_time)


def fail_batch(batch: ProducerBatch, exc: BaseException) -> None:
    """Fail every record of ``batch`` (a batch completes once: a later call changes nothing)."""
    batch.result.fail(exc)
