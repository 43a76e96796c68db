"""The Sender against a fake store, step by step (in the spirit of Kafka's SenderTest).

No thread and no database: each test appends batches to an accumulator, drives the sender with
``run_once()`` under a fake clock, and reads what the fake store (tests/unit/fake_store.py) saw.
What the database decides (duplicate detection, locks, commit visibility) is proven by the
database tests (test_producer_faults.py, test_txn_commit_faults.py, ...).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import pytest

from oncelog import errors
from oncelog import sender as sender_module
from oncelog.accumulator import ProducerBatch, RecordAccumulator
from oncelog.sender import LANE_MIN_BYTES, MAX_RESEQUENCE_TRIES, Sender, SenderMetrics
from oncelog.txn_manager import TransactionManager
from oncelog.txn_state import TxnState
from oncelog.types import ConsumerGroupMetadata, RecordMetadata, TopicPartition
from tests.unit.fake_store import FakeStore

TID = "txn-app"


class CountingMetrics(SenderMetrics):
    def __init__(self) -> None:
        self.counts: dict[str, float] = {}

    def bump(self, name: str, by: float = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + by

    def sent(self, batch: ProducerBatch, latency_ms: float) -> None:
        self.bump("batch_send_total")


class Harness:
    """A sender, its manager and accumulator over a fake store, under a clock the test moves."""

    def __init__(
        self,
        store: FakeStore | None = None,
        *,
        transactional_id: str | None = None,
        delivery_timeout: float = 10.0,
        backoff: float = 0.1,
        lanes: int = 1,
    ) -> None:
        self.now = 1000.0
        self.store = store or FakeStore()
        self.metrics = CountingMetrics()
        #: The wake tokens handed over, one list per wake-up.
        self.wakes: list[list[str]] = []
        self.manager = TransactionManager(
            self.store,
            transactional_id=transactional_id,
            backoff=0.001,
            backoff_max=0.002,
            max_block=1.0,
            request_timeout=1.0,
            metric=self.metrics.bump,
            wake=self.wakes.append,
        )
        self.acc = RecordAccumulator(batch_size=1 << 20, max_batch_records=1000)
        self.cond = threading.Condition()
        self.backoff = backoff
        self.sender = Sender(
            self.store,
            self.manager,
            self.acc,
            self.cond,
            linger=0.0,
            delivery_timeout=delivery_timeout,
            attempt_timeout=delivery_timeout / 4,
            backoff=backoff,
            backoff_max=backoff * 8,
            metrics=self.metrics,
            wake=self.wakes.append,
            clock=lambda: self.now,
            lanes=lanes,
        )
        if transactional_id is not None:
            self.manager.init_transactions(None)
            self.manager.begin_transaction()

    def send(self, value: bytes, partition: int = 0) -> Future[RecordMetadata]:
        """Append one record as a batch of its own (the previous one of the partition is closed)."""
        tp = TopicPartition("t", partition)
        number = self.manager.txn_number if self.manager.transactional else None
        with self.cond:
            for b in self.acc.batches():
                b.full = True
            _, future = self.acc.append(tp, None, value, None, None, size=len(value), now=self.now, txn_number=number)
        return future

    def step(self, seconds: float = 0.0) -> int:
        """Move the clock, then send what is ready."""
        self.now += seconds
        return self.sender.run_once()

    def run_until_done(self, futures: Sequence[Future[RecordMetadata]], *, step: float = 1.0, limit: int = 100) -> int:
        """Step until every future completed; return the number of steps."""
        for n in range(limit):
            if all(f.done() for f in futures):
                return n
            self.step(step if n else 0.0)
        raise AssertionError("the sender never completed the batches")

    def produced(self, operation: str = "produce") -> list[tuple[int, int, int]]:
        """(producer id, epoch, base sequence) of every batch sent, in order."""
        return [
            (args["producer_id"], args["producer_epoch"], b.base_sequence)
            for op, args in self.store.calls
            if op == operation
            for b in args["batches"]
        ]


# --- retries keep the batch's identity -------------------------------------------------------


def test_a_retriable_error_retries_the_batch_with_the_same_sequence() -> None:
    h = Harness()
    h.store.fail("produce", errors.DatabaseUnavailableError("connection lost"))
    first = h.send(b"a")
    assert h.step() == 1
    assert not first.done()
    assert h.step() == 0, "the retry waits for its backoff"
    assert h.step(h.backoff) == 1
    assert first.result(0).offset == 0
    second = h.send(b"b")
    h.run_until_done([second])
    pid = h.manager.identity.producer_id if h.manager.identity else None
    assert h.produced() == [(pid, 0, 0), (pid, 0, 0), (pid, 0, 1)]
    assert h.store.released == [True], "a lost connection is invalidated, not reused"
    assert h.metrics.counts["record_retry_total"] == 1


def test_a_lost_reply_is_answered_as_a_duplicate_on_retry() -> None:
    h = Harness()
    h.store.fail("produce", errors.DatabaseUnavailableError("reply lost"), after=True)
    first = h.send(b"a")
    h.run_until_done([first])
    second = h.send(b"b")
    h.run_until_done([second])
    assert (first.result(0).offset, second.result(0).offset) == (0, 1)
    assert h.store.log[("t", 0)] == [b"a", b"b"], "the retry did not append a second copy"
    assert h.metrics.counts.get("epoch_bump_total", 0) == 0


def test_a_lock_timeout_retries_without_dropping_the_connection() -> None:
    """A statement the server cancelled (RequestTimeoutError) was rolled back: same connection."""
    h = Harness()
    h.store.fail("produce", errors.RequestTimeoutError("lock timeout"))
    future = h.send(b"a")
    h.run_until_done([future])
    assert future.result(0).offset == 0
    assert h.store.released == []


# --- KIP-360: the store's sequence state differs from ours ------------------------------------


def test_out_of_order_sequence_bumps_the_epoch_and_resends_the_batch_at_sequence_zero() -> None:
    h = Harness()
    h.run_until_done([h.send(b"a"), h.send(b"b", partition=1)])
    ident = h.manager.identity
    assert ident is not None
    h.store.forget_sequences(ident.producer_id)  # the store expired our partition state
    late = h.send(b"c")
    h.run_until_done([late])
    assert late.result(0).offset == 1
    pid = ident.producer_id
    assert h.produced()[-2:] == [(pid, 0, 1), (pid, 1, 0)]
    assert h.store.init_calls == [(None, None), (pid, 0)]
    assert h.manager.identity == type(ident)(pid, 1)
    # Every partition restarted at 0 under the new epoch, not only the one refused.
    assert h.manager.next_sequence(TopicPartition("t", 0)) == 1
    assert h.manager.next_sequence(TopicPartition("t", 1)) == 0
    assert h.metrics.counts["epoch_bump_total"] == 1


def test_unknown_producer_id_falls_back_to_a_fresh_producer_id() -> None:
    h = Harness()
    h.run_until_done([h.send(b"a")])
    ident = h.manager.identity
    assert ident is not None
    del h.store.producers[ident.producer_id]  # the store forgot us entirely
    future = h.send(b"b")
    h.run_until_done([future])
    assert future.result(0).offset == 1
    fresh = h.manager.identity
    assert fresh is not None and fresh.producer_id != ident.producer_id and fresh.epoch == 0
    assert h.store.init_calls == [(None, None), (ident.producer_id, 0), (None, None)]
    assert h.metrics.counts["producer_id_reset_total"] == 1


def test_resequencing_is_bounded_by_tries() -> None:
    h = Harness()
    h.store.fail("produce", errors.OutOfOrderSequenceError("always"), times=100)
    future = h.send(b"a")
    h.run_until_done([future], step=h.backoff * 8)
    with pytest.raises(errors.OutOfOrderSequenceError):
        future.result(0)
    assert h.store.count("produce") == MAX_RESEQUENCE_TRIES


def test_resequencing_is_bounded_by_the_delivery_timeout() -> None:
    h = Harness(delivery_timeout=1.0)
    h.store.fail("produce", errors.OutOfOrderSequenceError("always"), times=100)
    future = h.send(b"a")
    h.run_until_done([future], step=0.6)
    with pytest.raises(errors.DeliveryTimeoutError):
        future.result(0)
    # Sent at 0 s and at 0.6 s (each after a bump); at 1.2 s the batch is out of time.
    assert h.store.count("produce") == 2
    assert len(h.store.init_calls) == 2


def test_a_definite_rejection_frees_the_sequence_for_the_next_batch() -> None:
    h = Harness()
    h.store.fail("produce", errors.RecordTooLargeError("too large"))
    refused = h.send(b"a")
    h.step()
    with pytest.raises(errors.RecordTooLargeError):
        refused.result(0)
    ok = h.send(b"b")
    h.run_until_done([ok])
    pid = h.manager.identity.producer_id if h.manager.identity else None
    assert h.produced() == [(pid, 0, 0), (pid, 0, 0)]


# --- delivery timeout -----------------------------------------------------------------------


def test_a_batch_past_its_delivery_deadline_fails_while_others_proceed() -> None:
    h = Harness(delivery_timeout=2.0)
    h.store.refuse = lambda batch: (
        errors.DatabaseUnavailableError("partition 0 unreachable") if (batch["partition"] == 0) else None
    )
    stuck = h.send(b"a", partition=0)
    others = [h.send(b"b", partition=1)]
    # Sent together first, both fail; from then on each goes in a request of its own, and the
    # partition that fails holds the other up no more.
    h.run_until_done(others, step=0.1)
    assert others[0].result(0).offset == 0 and not stuck.done()
    others.append(h.send(b"c", partition=1))
    h.run_until_done([stuck, *others], step=0.5)
    with pytest.raises(errors.DeliveryTimeoutError):
        stuck.result(0)
    assert others[1].result(0).offset == 1
    # Its outcome was unknown: the next batch starts a new epoch, at sequence 0 (KIP-360), at
    # once (not after the store refused it as out of order).
    assert h.manager.needs_identity
    h.store.refuse = None
    sent = len(h.produced())
    after = h.send(b"d", partition=0)
    h.run_until_done([after])
    pid = h.manager.identity.producer_id if h.manager.identity else None
    assert h.produced()[sent:] == [(pid, 1, 0)]


def test_a_batch_refused_by_lock_timeouts_until_its_deadline_fails_without_a_bump() -> None:
    h = Harness(delivery_timeout=2.0)
    h.store.refuse = lambda batch: errors.RequestTimeoutError("lock timeout")
    stuck = h.send(b"a")
    h.run_until_done([stuck], step=0.5)
    with pytest.raises(errors.DeliveryTimeoutError):
        stuck.result(0)
    h.store.refuse = None
    after = h.send(b"b")
    h.run_until_done([after])
    pid = h.manager.identity.producer_id if h.manager.identity else None
    assert h.produced()[-1] == (pid, 0, 0), "nothing landed: same epoch, the sequence reused"


def test_a_batch_never_sent_expires_at_its_deadline() -> None:
    h = Harness(delivery_timeout=2.0)
    future = h.send(b"a")
    h.now += 3
    assert h.step() == 0
    with pytest.raises(errors.DeliveryTimeoutError):
        future.result(0)
    assert h.store.calls == []


# --- transactions -------------------------------------------------------------------------------


def test_fencing_fails_every_pending_batch_and_makes_the_manager_fatal() -> None:
    h = Harness(transactional_id=TID)
    batches = [h.send(b"a", partition=0), h.send(b"b", partition=1)]
    FakeStore.init_transactional_id(  # a new instance of the same transactional id
        h.store, object(), transactional_id=TID, transaction_timeout_ms=60_000, producer_id=None, epoch=None
    )
    h.step()
    for f in batches:
        with pytest.raises(errors.ProducerFencedError):
            f.result(0)
    assert h.manager.state is TxnState.FATAL_ERROR
    assert h.store.count("produce") == 1, "nothing more is sent once fenced"
    with pytest.raises(errors.ProducerFencedError):
        h.manager.begin_commit()


def test_the_queued_batches_of_every_partition_carry_the_commit() -> None:
    h = Harness(transactional_id=TID)
    futures = [h.send(b"a", partition=0), h.send(b"b", partition=1), h.send(b"c", partition=2)]
    h.manager.begin_commit()
    h.run_until_done(futures)
    assert h.store.count("produce") == 0 and h.store.count("produce_offsets_end_txn") == 1
    (call,) = h.store.arguments("produce_offsets_end_txn")
    assert [(b.topic, b.partition, b.base_sequence) for b in call["batches"]] == [("t", 0, 0), ("t", 1, 0), ("t", 2, 0)]
    h.manager.finish_commit(None)
    assert h.store.count("end_txn") == 0, "EndTxn went with the batches"
    assert h.store.committed(TID, h.manager.txn_number)
    assert [f.result(0).partition for f in futures] == [0, 1, 2]
    assert h.manager.state is TxnState.READY


def test_a_partitions_batches_go_in_order_in_the_commit() -> None:
    h = Harness(transactional_id=TID)
    futures = [h.send(str(i).encode(), partition=0) for i in range(5)]  # five batches of one
    h.manager.begin_commit()
    h.run_until_done(futures)
    (call,) = h.store.arguments("produce_offsets_end_txn")
    assert [(b.base_sequence, len(b.records)) for b in call["batches"]] == [(i, 1) for i in range(5)]
    assert [f.result(0).offset for f in futures] == [0, 1, 2, 3, 4]
    assert h.store.log[("t", 0)] == [b"0", b"1", b"2", b"3", b"4"]


def test_the_commit_is_retried_past_the_delivery_deadline_after_a_lost_reply() -> None:
    h = Harness(transactional_id=TID, delivery_timeout=2.0)
    h.store.fail("produce_offsets_end_txn", errors.DatabaseUnavailableError("reply lost"), after=True, times=4)
    futures = [h.send(b"a"), h.send(b"b", partition=1)]
    h.manager.begin_commit()
    h.run_until_done(futures, step=1.0)
    assert [f.result(0).offset for f in futures] == [0, 0]
    # Failed at 0, 1, 2 and 3 s, answered at 4 s: retried past the 2 s delivery timeout, the
    # same batches with the same sequences each time, and answered as a retry in the end.
    assert h.store.count("produce_offsets_end_txn") == 5
    assert h.store.log == {("t", 0): [b"a"], ("t", 1): [b"b"]}
    h.manager.finish_commit(None)
    assert h.store.count("end_txn") == 0
    assert h.manager.state is TxnState.READY


def test_a_refused_commit_lands_nothing_and_the_transaction_can_only_abort() -> None:
    h = Harness(transactional_id=TID)
    h.store.refuse = lambda batch: errors.RecordTooLargeError("too large") if batch["partition"] == 1 else None
    futures = [h.send(b"a", partition=0), h.send(b"b", partition=1)]
    h.manager.begin_commit()
    h.run_until_done(futures)
    for f in futures:
        with pytest.raises(errors.RecordTooLargeError):
            f.result(0)
    assert h.store.log == {}, "all or nothing"
    with pytest.raises(errors.TransactionAbortableError, match="RecordTooLargeError"):
        h.manager.finish_commit(None)
    assert h.manager.state is TxnState.ABORTABLE_ERROR


def test_the_held_offsets_go_with_the_commit_and_a_group_refusal_is_abortable() -> None:
    h = Harness(transactional_id=TID)
    group = ConsumerGroupMetadata("g", 3, "m1", None)
    h.manager.txn_offset_commit({("in", 0): (5, "")}, group, None)
    h.manager.txn_offset_commit({("in", 1): (7, "x"), ("in", 0): (6, "")}, group, None)
    assert h.store.count("txn_offset_commit") == 0, "held for the commit"
    future = h.send(b"a")
    h.manager.begin_commit()
    h.run_until_done([future])
    (offsets,) = h.store.offsets_committed
    assert dict(offsets.offsets) == {("in", 0): (6, ""), ("in", 1): (7, "x")}
    h.manager.finish_commit(None)

    h.manager.begin_transaction()
    h.manager.txn_offset_commit({("in", 0): (8, "")}, group, None)
    h.store.fail("produce_offsets_end_txn", errors.IllegalGenerationError("rebalanced"))
    future = h.send(b"b")
    h.manager.begin_commit()
    h.run_until_done([future])
    with pytest.raises(errors.TransactionAbortableError) as info:
        future.result(0)
    assert isinstance(info.value.__cause__, errors.IllegalGenerationError)
    with pytest.raises(errors.TransactionAbortableError):
        h.manager.finish_commit(None)
    assert h.manager.state is TxnState.ABORTABLE_ERROR


def test_a_transactional_batch_out_of_time_makes_the_transaction_abortable_and_the_abort_bumps() -> None:
    h = Harness(transactional_id=TID, delivery_timeout=2.0)
    h.store.fail("produce", errors.DatabaseUnavailableError("lost"), times=100)
    future = h.send(b"a")
    h.run_until_done([future], step=1.0)
    with pytest.raises(errors.DeliveryTimeoutError):
        future.result(0)
    assert h.manager.state is TxnState.ABORTABLE_ERROR
    epoch = h.manager.identity.epoch if h.manager.identity else None
    h.manager.begin_abort()
    h.manager.finish_abort(None)
    assert h.manager.state is TxnState.READY
    assert h.manager.identity is not None and h.manager.identity.epoch == (epoch or 0) + 1


# --- one request for many partitions --------------------------------------------------------


def test_the_ready_batches_of_every_partition_go_in_one_request() -> None:
    h = Harness()
    futures = [h.send(b"v%d" % p, partition=p) for p in range(4)]
    assert h.step() == 4
    assert h.store.count("produce") == 1
    (request,) = h.store.arguments("produce")
    assert sorted(b.partition for b in request["batches"]) == [0, 1, 2, 3]
    assert [f.result(0).offset for f in futures] == [0, 0, 0, 0]


def test_a_partitions_next_batch_waits_for_the_request_carrying_its_first() -> None:
    # One batch per partition and request: a partition's batches stay in order.
    h = Harness()
    first, second = h.send(b"a"), h.send(b"b")
    h.run_until_done([first, second])
    assert [len(args["batches"]) for args in h.store.arguments("produce")] == [1, 1]
    assert (first.result(0).offset, second.result(0).offset) == (0, 1)


def test_a_refused_batch_fails_alone_and_frees_its_sequence() -> None:
    h = Harness()
    h.store.refuse = lambda batch: errors.RecordTooLargeError("too large") if batch["partition"] == 1 else None
    futures = [h.send(b"v", partition=p) for p in range(3)]
    h.step()
    with pytest.raises(errors.RecordTooLargeError):
        futures[1].result(0)
    assert [futures[p].result(0).offset for p in (0, 2)] == [0, 0]
    h.store.refuse = None
    after = h.send(b"w", partition=1)
    h.run_until_done([after])
    assert h.produced()[-1][2] == 0, "nothing of the refused batch landed: its sequence is reused"


def test_a_batch_refused_as_out_of_order_in_a_request_bumps_the_epoch_and_lands() -> None:
    h = Harness()
    warm = [h.send(b"w", partition=p) for p in range(2)]
    h.run_until_done(warm)
    pid = h.manager.identity.producer_id if h.manager.identity else 0
    h.store.forget_sequences(pid)  # expiry: partition state gone, the next batches are out of order
    futures = [h.send(b"v", partition=p) for p in range(2)]
    h.run_until_done(futures)
    assert [f.result(0).offset for f in futures] == [1, 1]
    assert h.manager.identity is not None and h.manager.identity.epoch == 1


def test_a_lost_reply_to_a_request_of_many_is_answered_as_duplicates() -> None:
    h = Harness()
    h.store.fail("produce", errors.DatabaseUnavailableError("reply lost"), after=True)
    futures = [h.send(b"v%d" % p, partition=p) for p in range(3)]
    h.run_until_done(futures)
    assert [f.result(0).offset for f in futures] == [0, 0, 0]
    assert h.store.log == {("t", p): [b"v%d" % p] for p in range(3)}, "each appended once"
    # After the failure each batch went alone (a failing partition must not hold up the others).
    assert [len(args["batches"]) for args in h.store.arguments("produce")] == [3, 1, 1, 1]


# --- lanes: requests side by side, each on its own connection ---------------------------------


class _Conn:
    """A fake connection with a name, so a test can tell which lane carried a request."""

    def __init__(self, n: int) -> None:
        self.n = n


@pytest.fixture
def any_round_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lanes for rounds of any size (these tests' records are a few bytes)."""
    monkeypatch.setattr(sender_module, "LANE_MIN_BYTES", 1)


def _lane_harness(lanes: int, **kwargs: Any) -> tuple[Harness, list[tuple[int, str, list[int]]]]:
    """A harness whose store hands out numbered connections and records, for every produce
    request, (connection, thread name, partitions)."""
    h = Harness(lanes=lanes, **kwargs)
    opened = itertools.count()
    seen: list[tuple[int, str, list[int]]] = []
    real = h.store.produce_batches

    def connect() -> object:
        return _Conn(next(opened))

    def produce_batches(conn: object, **request: Any) -> list[Any]:
        assert isinstance(conn, _Conn)
        seen.append((conn.n, threading.current_thread().name, [b.partition for b in request["batches"]]))
        return real(conn, **request)

    h.store.connect = connect  # type: ignore[method-assign]
    h.store.produce_batches = produce_batches  # type: ignore[method-assign]
    return h, seen


def test_a_round_goes_as_one_request_per_lane_each_on_its_own_connection(any_round_splits: None) -> None:
    h, seen = _lane_harness(3)
    futures = [h.send(b"v%d" % p, partition=p) for p in range(6)]
    assert h.step() == 6
    assert [f.result(0).offset for f in futures] == [0] * 6
    assert len(seen) == 3
    assert sorted(p for _, _, parts in seen for p in parts) == list(range(6)), "each partition in one request"
    assert len({conn for conn, _, _ in seen}) == 3, "each request on a connection of its own"
    assert sum(1 for _, thread, _ in seen if thread.startswith("oncelog-producer-lane")) == 2
    h.sender.release()
    assert h.store.released == [False, False, False]


def test_lanes_split_a_round_by_bytes(any_round_splits: None) -> None:
    h, seen = _lane_harness(2)
    tp = TopicPartition("t", 0)
    with h.cond:
        for _ in range(5):  # partition 0: 5 bytes; partitions 1 to 3: 2 bytes each
            h.acc.append(tp, None, b"v", None, None, size=1, now=h.now)
        for p in (1, 2, 3):
            h.acc.append(TopicPartition("t", p), None, b"vv", None, None, size=2, now=h.now)
    h.step()
    assert sorted(sorted(parts) for _, _, parts in seen) == [[0], [1, 2, 3]]


def test_a_failed_lane_drops_only_its_own_connection_and_nothing_lands_twice(any_round_splits: None) -> None:
    h, seen = _lane_harness(2)
    h.store.fail("produce", errors.DatabaseUnavailableError("reply lost"), after=True)
    futures = [h.send(b"v%d" % p, partition=p) for p in range(4)]
    h.run_until_done(futures)
    assert [f.result(0).offset for f in futures] == [0] * 4
    assert h.store.log == {("t", p): [b"v%d" % p] for p in range(4)}, "each appended once"
    assert h.store.released == [True], "only the failed lane's connection was dropped"
    # The failed request's two batches were then retried alone, each answered as a duplicate.
    assert [len(parts) for _, _, parts in seen] == [2, 2, 1, 1]


def test_a_refusal_in_one_lane_fails_that_batch_only(any_round_splits: None) -> None:
    h, _ = _lane_harness(2)
    h.store.refuse = lambda batch: errors.RecordTooLargeError("too large") if batch["partition"] == 3 else None
    futures = [h.send(b"v", partition=p) for p in range(4)]
    h.step()
    with pytest.raises(errors.RecordTooLargeError):
        futures[3].result(0)
    assert [futures[p].result(0).offset for p in range(3)] == [0, 0, 0]
    assert h.store.released == [], "a refusal leaves the connection sound"


def test_a_round_of_less_than_a_lanes_worth_of_bytes_goes_in_one_request() -> None:
    # Each request is its own commit: small rounds are cheaper in one.
    h, seen = _lane_harness(4)
    half = b"x" * (LANE_MIN_BYTES // 2)
    futures = [h.send(half, partition=p) for p in range(3)]  # 1.5 lanes' worth: one lane
    h.step()
    assert all(f.done() for f in futures)
    assert len(seen) == 1 and sorted(seen[0][2]) == [0, 1, 2]
    futures = [h.send(half, partition=p) for p in range(8)]  # 4 lanes' worth
    h.step()
    assert all(f.done() for f in futures)
    assert sorted(len(parts) for _, _, parts in seen[1:]) == [2, 2, 2, 2]


def test_a_transactional_producer_sends_a_round_in_one_request_whatever_its_lanes(any_round_splits: None) -> None:
    # Its appends queue on the transactions row: lanes would only wait on each other.
    h, seen = _lane_harness(4, transactional_id=TID)
    futures = [h.send(b"v", partition=p) for p in range(4)]
    h.step()
    assert all(f.done() for f in futures)
    assert len(seen) == 1 and sorted(seen[0][2]) == [0, 1, 2, 3]


def test_a_request_is_bounded_by_the_shortest_remaining_delivery_time() -> None:
    h = Harness(delivery_timeout=10.0)
    bounds: list[float] = []
    real = h.store.request

    def request(conn: object, seconds: float) -> object:
        bounds.append(seconds)
        return real(conn, seconds)

    h.store.request = request  # type: ignore[method-assign,assignment]
    old = h.send(b"old", partition=0)
    h.now += 9.5
    new = h.send(b"new", partition=1)
    h.run_until_done([old, new])
    assert bounds[-1] == pytest.approx(0.5)


# --- waking readers ---------------------------------------------------------------------------


def test_writes_to_partitions_a_reader_waits_on_are_handed_to_be_woken() -> None:
    h = Harness()
    h.store.waiting = {("t", 1), ("t", 3)}
    futures = [h.send(b"v", partition=p) for p in range(4)]
    h.run_until_done(futures)
    assert h.wakes == [["t:1", "t:3"]]


def test_a_duplicate_answer_wakes_nobody() -> None:
    h = Harness()
    h.store.fail("produce", errors.DatabaseUnavailableError("reply lost"), after=True)
    future = h.send(b"v")
    h.store.waiting = {("t", 0)}
    h.run_until_done([future])
    assert h.wakes == [], "the first attempt appended it (before anyone waited); the retry is a duplicate"


def test_a_commit_hands_its_waited_on_partitions_to_be_woken() -> None:
    h = Harness(transactional_id=TID)
    h.store.waiting = {("t", 1)}
    futures = [h.send(b"a", partition=0), h.send(b"b", partition=1)]
    h.manager.begin_commit()
    h.run_until_done(futures)
    h.manager.finish_commit(None)
    assert h.wakes == [["t:1"]]


def test_an_end_txn_commit_hands_its_waited_on_partitions_to_be_woken() -> None:
    h = Harness(transactional_id=TID)
    h.store.waiting = {("t", 0)}
    future = h.send(b"a")
    h.run_until_done([future])  # sent before the commit: EndTxn alone commits it
    h.wakes.clear()  # (the fake wakes any waiting partition on the append, as for read_uncommitted)
    h.manager.begin_commit()
    h.manager.finish_commit(None)
    assert h.store.count("end_txn") == 1
    assert h.wakes == [["t:0"]]


# --- the accumulator drains every partition -------------------------------------------------


def test_one_ready_batch_takes_every_partitions_head_along() -> None:
    acc = RecordAccumulator(batch_size=1 << 20, max_batch_records=2)
    full, partial = TopicPartition("t", 0), TopicPartition("t", 1)
    acc.append(partial, None, b"x", None, None, size=1, now=0.0)
    assert acc.ready(0.0, linger=5.0, flush=False) == [], "nothing is ready: nothing goes"
    for _ in range(2):
        acc.append(full, None, b"x", None, None, size=1, now=0.0)
    assert sorted(b.tp.partition for b in acc.ready(0.0, linger=5.0, flush=False)) == [0, 1]


def test_a_batch_waiting_out_its_backoff_stays_behind() -> None:
    acc = RecordAccumulator(batch_size=1 << 20, max_batch_records=1)
    ready, backing_off = TopicPartition("t", 0), TopicPartition("t", 1)
    acc.append(ready, None, b"x", None, None, size=1, now=0.0)
    batch, _ = acc.append(backing_off, None, b"x", None, None, size=1, now=0.0)
    batch.attempts, batch.next_attempt_at = 1, 10.0
    assert [b.tp for b in acc.ready(1.0, linger=5.0, flush=False)] == [ready]
    assert len(acc.ready(10.0, linger=5.0, flush=False)) == 2
