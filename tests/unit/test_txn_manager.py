"""The TransactionManager against a fake store (in the spirit of Kafka's TransactionManagerTest).

Identity, sequences, KIP-360 recovery and the transactional calls, without a database; the
transition table itself is tested exhaustively by test_txn_state.py.
"""

from __future__ import annotations

import threading

import pytest

from oncelog import errors
from oncelog.accumulator import ProducerBatch
from oncelog.store.records import ProducerIdAndEpoch
from oncelog.txn_manager import SEQUENCE_MODULUS, TransactionManager
from oncelog.txn_state import TxnState
from oncelog.types import ConsumerGroupMetadata, TopicPartition
from tests.unit.fake_store import FakeStore

TID = "txn-app"
TP = TopicPartition("t", 0)


def manager(
    store: FakeStore,
    transactional_id: str | None = TID,
    *,
    idempotent: bool = True,
    counts: dict[str, float] | None = None,
) -> TransactionManager:
    """A manager over ``store`` that counts its metrics into ``counts``."""
    seen = counts if counts is not None else {}
    return TransactionManager(
        store,
        transactional_id=transactional_id,
        idempotent=idempotent,
        backoff=0.001,
        backoff_max=0.002,
        max_block=1.0,
        request_timeout=1.0,
        metric=lambda name, by: seen.__setitem__(name, seen.get(name, 0) + by),
    )


def batch(records: int = 1, tp: TopicPartition = TP, *, attempts: int = 0) -> ProducerBatch:
    b = ProducerBatch.open(tp, 0.0)
    b.attempts = attempts
    for _ in range(records):
        b.add(None, b"v", None, None, 1)
    return b


# --- the idempotent producer's identity and sequences ---------------------------------------


def test_sequences_advance_per_partition_and_a_batch_keeps_its_own() -> None:
    m = manager(FakeStore(), transactional_id=None)
    assert m.needs_identity
    with pytest.raises(errors.IllegalStateError):
        m.assign_sequence(batch())  # no id yet: refused, not asserted
    m.set_identity(ProducerIdAndEpoch(7, 0))
    assert not m.needs_identity
    a, b, other = batch(3), batch(2), batch(1, TopicPartition("t", 1))
    for x in (a, b, other):
        m.assign_sequence(x)
    m.assign_sequence(a)  # a retry keeps the sequence it had
    assert (a.base_sequence, b.base_sequence, other.base_sequence) == (0, 3, 0)
    assert (a.producer_id, a.epoch) == (7, 0)
    assert m.next_sequence(TP) == 5


def test_sequences_wrap_at_31_bits() -> None:
    m = manager(FakeStore(), transactional_id=None)
    m.set_identity(ProducerIdAndEpoch(7, 0))
    m._next_sequence[TP] = SEQUENCE_MODULUS - 1
    b = batch(2)
    m.assign_sequence(b)
    assert b.base_sequence == SEQUENCE_MODULUS - 1
    assert m.next_sequence(TP) == 1


def test_a_released_sequence_is_reused_only_under_the_same_epoch() -> None:
    counts: dict[str, float] = {}
    m = manager(FakeStore(), transactional_id=None, counts=counts)
    m.set_identity(ProducerIdAndEpoch(7, 0))
    refused = batch(2)
    m.assign_sequence(refused)
    m.release_sequence(refused)
    assert m.next_sequence(TP) == 0
    old = batch(2)
    m.assign_sequence(old)
    m.request_bump()
    assert m.needs_identity
    m.set_identity(ProducerIdAndEpoch(7, 1), bumped=True)
    m.release_sequence(old)  # taken under epoch 0: the new epoch's sequences are not touched
    assert m.next_sequence(TP) == 0 and not m.needs_identity
    assert counts == {"epoch_bump_total": 1}


def test_without_idempotence_nothing_is_sequenced() -> None:
    m = manager(FakeStore(), transactional_id=None, idempotent=False)
    assert not m.needs_identity
    b = batch()
    m.assign_sequence(b)
    m.request_bump()
    assert b.base_sequence is None and not m.needs_identity


# --- init_transactions ----------------------------------------------------------------------


def test_init_transactions_takes_the_identity_and_cannot_be_repeated() -> None:
    store = FakeStore()
    m = manager(store)
    assert m.state is TxnState.UNINITIALIZED
    m.init_transactions(None)
    assert m.state is TxnState.READY and m.identity == ProducerIdAndEpoch(1001, 0)
    with pytest.raises(errors.IllegalStateError):
        m.init_transactions(None)
    with pytest.raises(errors.IllegalStateError):
        m.set_identity(ProducerIdAndEpoch(1, 1))  # a transactional identity comes from init only


def test_init_transactions_that_ran_out_of_time_may_be_called_again() -> None:
    store = FakeStore()
    m = manager(store)
    store.fail("init_transactional_id", errors.DatabaseUnavailableError("down"), times=1000)
    with pytest.raises(errors.DatabaseUnavailableError):
        m.init_transactions(0.02)
    assert m.state is TxnState.INITIALIZING
    store.faults.clear()
    m.init_transactions(None)
    assert m.state is TxnState.READY


def test_init_transactions_refused_is_fatal() -> None:
    store = FakeStore()
    m = manager(store)
    store.fail("init_transactional_id", errors.TransactionalIdAuthorizationError("no"))
    with pytest.raises(errors.TransactionalIdAuthorizationError):
        m.init_transactions(None)
    assert m.state is TxnState.FATAL_ERROR


# --- transactions ------------------------------------------------------------------------------


def ready(store: FakeStore | None = None) -> TransactionManager:
    m = manager(store or FakeStore())
    m.init_transactions(None)
    return m


def test_begin_and_commit_without_batches_send_end_txn() -> None:
    store = FakeStore()
    m = ready(store)
    with pytest.raises(errors.IllegalStateError):
        m.begin_commit()  # READY: nothing to commit
    m.begin_transaction()
    with pytest.raises(errors.IllegalStateError):
        m.begin_transaction()
    assert m.txn_number == 1
    m.begin_commit()
    assert m.commits_with(1) and not m.commits_with(2)
    m.finish_commit(None)
    assert store.committed(TID, 1) and m.state is TxnState.READY


def test_a_commit_whose_reply_was_lost_is_answered_on_retry() -> None:
    store = FakeStore()
    m = ready(store)
    m.begin_transaction()
    store.fail("end_txn", errors.DatabaseUnavailableError("reply lost"), after=True)
    m.begin_commit()
    m.finish_commit(None)
    assert store.count("end_txn") == 2 and store.committed(TID, 1)
    assert m.state is TxnState.READY


def test_a_commit_carried_by_the_last_batch_sends_no_end_txn() -> None:
    store = FakeStore()
    m = ready(store)
    m.begin_transaction()
    m.begin_commit()
    m.committed_with_batch(1)
    m.finish_commit(None)
    assert store.count("end_txn") == 0 and m.state is TxnState.READY


def test_an_abortable_error_is_aborted_with_an_epoch_bump() -> None:
    store, counts = FakeStore(), dict[str, float]()
    m = manager(store, counts=counts)
    m.init_transactions(None)
    m.begin_transaction()
    m.record_error(errors.InvalidRecordError("bad record"))
    assert m.state is TxnState.ABORTABLE_ERROR and not m.can_send()
    with pytest.raises(errors.TransactionAbortableError):
        m.begin_commit()  # the application must abort
    m.begin_abort()
    assert m.aborting
    m.finish_abort(None)
    assert m.state is TxnState.READY and m.identity == ProducerIdAndEpoch(1001, 1)
    assert store.init_calls == [(None, None), (1001, 0)]
    assert counts == {"epoch_bump_total": 1}


def test_a_clean_abort_does_not_bump() -> None:
    store = FakeStore()
    m = ready(store)
    m.begin_transaction()
    m.begin_abort()
    m.dropped_unsent(batch())  # never sent: nothing can land later
    m.finish_abort(None)
    assert m.identity == ProducerIdAndEpoch(1001, 0) and len(store.init_calls) == 1


def test_an_abort_dropping_a_batch_sent_once_bumps() -> None:
    store = FakeStore()
    m = ready(store)
    m.begin_transaction()
    m.begin_abort()
    m.dropped_unsent(batch(attempts=1))  # its outcome is unknown
    m.finish_abort(None)
    assert m.identity == ProducerIdAndEpoch(1001, 1)


def test_an_unknown_outcome_makes_the_transaction_abortable_and_the_abort_bumps() -> None:
    m = ready()
    m.begin_transaction()
    m.unknown_outcome(errors.DeliveryTimeoutError("unknown"))
    assert m.state is TxnState.ABORTABLE_ERROR
    m.begin_abort()
    m.finish_abort(None)
    assert m.identity == ProducerIdAndEpoch(1001, 1) and m.state is TxnState.READY


def test_an_abort_the_store_already_made_at_the_timeout_bumps_to_the_current_epoch() -> None:
    store = FakeStore()
    m = ready(store)
    m.begin_transaction()
    store.fail("end_txn", errors.InvalidProducerEpochError("aborted at its timeout"))
    m.begin_abort()
    m.finish_abort(None)
    assert m.state is TxnState.READY and m.identity == ProducerIdAndEpoch(1001, 1)


def test_fencing_is_fatal_and_keeps_the_error() -> None:
    store = FakeStore()
    m = ready(store)
    m.begin_transaction()
    fenced = errors.ProducerFencedError("fenced")
    m.record_error(errors.DatabaseUnavailableError("retriable: ignored"))
    assert m.state is TxnState.IN_TRANSACTION
    m.record_error(fenced)
    assert m.is_fatal and m.last_error is fenced and not m.can_send()
    for call in (m.begin_commit, m.begin_abort, m.begin_transaction):
        with pytest.raises(errors.ProducerFencedError):
            call()


def test_a_commit_by_a_fenced_instance_is_fatal() -> None:
    store = FakeStore()
    m = ready(store)
    m.begin_transaction()
    FakeStore.init_transactional_id(
        store, object(), transactional_id=TID, transaction_timeout_ms=1, producer_id=None, epoch=None
    )
    m.begin_commit()
    with pytest.raises(errors.ProducerFencedError):
        m.finish_commit(None)
    assert m.state is TxnState.FATAL_ERROR


def test_offsets_are_held_for_the_commit_and_a_refusal_there_is_abortable() -> None:
    store = FakeStore()
    m = ready(store)
    group = ConsumerGroupMetadata("g", 3, "member-1", None)
    with pytest.raises(errors.IllegalStateError):
        m.txn_offset_commit({("t", 0): (5, "")}, group, None)  # not in a transaction
    m.begin_transaction()
    m.txn_offset_commit({("t", 0): (5, "")}, group, None)
    assert store.count("txn_offset_commit") == 0
    # Nothing was left to send with the commit: the offsets and EndTxn go in one call.
    store.fail("produce_offsets_end_txn", errors.IllegalGenerationError("rebalanced"))
    m.begin_commit()
    with pytest.raises(errors.TransactionAbortableError) as info:
        m.finish_commit(None)
    assert isinstance(info.value.__cause__, errors.IllegalGenerationError)
    assert m.state is TxnState.ABORTABLE_ERROR
    m.begin_abort()
    m.finish_abort(None)
    assert m.commit_offsets() is None, "an abort drops the held offsets"


def test_offsets_of_a_second_group_send_the_first_groups_at_once() -> None:
    store = FakeStore()
    m = ready(store)
    m.begin_transaction()
    first, second = ConsumerGroupMetadata("g1", 3, "m1", None), ConsumerGroupMetadata("g2", 1, "m2", None)
    m.txn_offset_commit({("t", 0): (5, "")}, first, None)
    m.txn_offset_commit({("u", 0): (9, "")}, second, None)
    (sent,) = store.arguments("txn_offset_commit")
    assert (sent["group_id"], dict(sent["offsets"])) == ("g1", {("t", 0): (5, "")})
    m.begin_commit()
    m.finish_commit(None)
    (carried,) = store.offsets_committed
    assert carried.group_id == "g2" and m.state is TxnState.READY
    # A refusal of the offsets sent at once is the application's to see at that call.
    m.begin_transaction()
    m.txn_offset_commit({("t", 0): (6, "")}, first, None)
    store.fail("txn_offset_commit", errors.IllegalGenerationError("rebalanced"))
    with pytest.raises(errors.TransactionAbortableError):
        m.txn_offset_commit({("u", 0): (10, "")}, second, None)
    assert m.state is TxnState.ABORTABLE_ERROR


def test_a_producer_without_transactional_id_refuses_transactional_calls() -> None:
    m = manager(FakeStore(), transactional_id=None)
    for call in (m.begin_transaction, m.begin_commit, m.begin_abort, m.prepared):
        with pytest.raises(errors.IllegalStateError):
            call()
    m.require_in_transaction()  # sending needs no transaction


def test_prepared_needs_an_identity() -> None:
    m = manager(FakeStore())
    with pytest.raises(errors.IllegalStateError):
        m.prepared()
    m.init_transactions(None)
    m.begin_transaction()
    assert m.prepared().txn_number == 1


def test_one_lock_guards_the_state_machine_too() -> None:
    """A thread holding the manager's lock holds the state: no transition can slip in between
    a check and what depends on it (the commit handshake reads aborting and the state together)."""
    m = ready()
    m.begin_transaction()
    moved = threading.Event()

    def fail() -> None:  # straight to the state machine, past the manager's methods
        m.require_transactional().transition_to_abortable_error(errors.TransactionAbortableError("late"))
        moved.set()

    with m._lock:
        t = threading.Thread(target=fail)
        t.start()
        assert not moved.wait(0.1)
        assert m.state is TxnState.IN_TRANSACTION
    t.join(5)
    assert moved.is_set() and m.state is TxnState.ABORTABLE_ERROR
