"""The transactional producer and read_committed consumer as a user meets them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from oncelog import Admin, Consumer, Producer, TopicPartition, errors
from oncelog.txn_state import TxnState


@pytest.fixture
def admin(db_url: str) -> Iterator[Admin]:
    with Admin(db_url) as a:
        a.create_topic("t", partitions=2)
        yield a


def _values(url: str, isolation: str = "read_committed", topic: str = "t", partitions: int = 2) -> list[bytes]:
    with Consumer(url, isolation_level=isolation) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        out: list[bytes] = []
        while batch := consumer.poll(timeout=0.2):
            out.extend(r.value for r in batch)
        return sorted(out)


def test_commit_abort_and_the_context_manager(db_url: str, admin: Admin) -> None:
    with Producer(db_url, transactional_id="app") as producer:
        producer.init_transactions()
        assert producer.transaction_state is TxnState.READY
        producer.begin_transaction()
        futs = [producer.send("t", f"c{i}".encode(), partition=i % 2) for i in range(6)]
        # Sent (flushed) but not committed: invisible to read_committed, visible to read_uncommitted.
        producer.flush()
        assert _values(db_url) == []
        assert len(_values(db_url, "read_uncommitted")) == 6
        producer.commit_transaction()
        assert all(f.result(timeout=0).offset >= 0 for f in futs)

        producer.begin_transaction()
        producer.send("t", b"a1", partition=0)
        producer.abort_transaction()

        with pytest.raises(RuntimeError), producer.transaction():
            producer.send("t", b"a2", partition=1)
            raise RuntimeError("application failure aborts the transaction")

        with producer.transaction():
            producer.send("t", b"c6", partition=1)
        assert producer.metrics()["txn_commit_total"] == 2
        assert producer.metrics()["txn_abort_total"] == 2
    assert _values(db_url) == [b"c0", b"c1", b"c2", b"c3", b"c4", b"c5", b"c6"]


def test_unsent_records_of_an_aborted_transaction_fail_their_futures(db_url: str, admin: Admin) -> None:
    with Producer(db_url, transactional_id="app", linger_ms=60_000, batch_size=10**9) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        fut = producer.send("t", b"never", partition=0)
        producer.abort_transaction()
        with pytest.raises(errors.TransactionAbortedError):
            fut.result(timeout=10)
        assert errors.TransactionAbortedError.abortable
    assert _values(db_url, "read_uncommitted") == []


def test_a_second_instance_fences_the_first(db_url: str, admin: Admin) -> None:
    first = Producer(db_url, transactional_id="app")
    first.init_transactions()
    first.begin_transaction()
    first.send("t", b"zombie", partition=0).result(timeout=30)
    with Producer(db_url, transactional_id="app") as second:
        second.init_transactions()  # aborts first's open transaction
        with second.transaction():
            second.send("t", b"live", partition=0)
    with pytest.raises(errors.ProducerFencedError):
        first.commit_transaction()
    assert first.transaction_state is TxnState.FATAL_ERROR
    with pytest.raises(errors.OncelogError) as info:
        first.begin_transaction()
    assert info.value.fatal
    first.close()
    assert _values(db_url) == [b"live"]


def test_misuse_is_an_illegal_state(db_url: str, admin: Admin) -> None:
    with Producer(db_url, transactional_id="app") as producer:
        with pytest.raises(errors.IllegalStateError):
            producer.begin_transaction()  # not initialised
        producer.init_transactions()
        with pytest.raises(errors.IllegalStateError):
            producer.init_transactions()
        with pytest.raises(errors.IllegalStateError):
            producer.send("t", b"outside a transaction")
        with pytest.raises(errors.IllegalStateError):
            producer.commit_transaction()
        producer.begin_transaction()
        with pytest.raises(errors.IllegalStateError):
            producer.begin_transaction()
        producer.abort_transaction()
    with Producer(db_url) as plain, pytest.raises(errors.IllegalStateError):
        plain.init_transactions()


@pytest.mark.parametrize(
    "config",
    [
        {"transactional_id": ""},
        {"transactional_id": "x" * 256},
        {"transactional_id": "x", "enable_idempotence": False},
        {"transactional_id": "x", "transaction_timeout_ms": 0},
    ],
)
def test_bad_transactional_config(db_url: str, config: dict[str, object]) -> None:
    with pytest.raises(errors.ConfigurationError):
        Producer(db_url, **config)  # type: ignore[arg-type]


def test_a_timeout_above_the_store_maximum_is_refused(db_url: str, admin: Admin) -> None:
    producer = Producer(db_url, transactional_id="app", transaction_timeout_ms=900_001)
    with producer, pytest.raises(errors.InvalidTransactionTimeoutError):
        producer.init_transactions()
    assert producer.transaction_state is None or producer.transaction_state is TxnState.FATAL_ERROR


def test_an_empty_transaction_uses_up_its_number(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    with Producer(db_url, transactional_id="app") as producer:
        producer.init_transactions()
        with producer.transaction():
            pass
        with producer.transaction():
            producer.send("t", b"x", partition=0)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT txn_number, to_state FROM txn_history "
            "WHERE to_state IN ('CompleteCommit', 'CompleteAbort') ORDER BY id"
        ).all()
    assert [tuple(r) for r in rows] == [(1, "CompleteCommit"), (2, "CompleteCommit")]


def test_timed_out_transaction_recovers_with_kip360(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    """The store aborts a transaction past its timeout; the producer gets an abortable error,
    aborts, bumps its epoch and carries on."""
    with Producer(db_url, transactional_id="app", transaction_timeout_ms=60_000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", b"late", partition=0).result(timeout=30)
        # Make the open transaction older than its timeout (test setup: no waiting).
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE transactions SET txn_started_at = now() - interval '2 minutes'")
        with pytest.raises(errors.TransactionTimeoutError) as info:
            producer.commit_transaction()
        assert info.value.abortable
        assert producer.transaction_state is TxnState.ABORTABLE_ERROR
        epoch = producer.producer_epoch
        producer.abort_transaction()
        assert producer.transaction_state is TxnState.READY
        assert producer.producer_epoch is not None and epoch is not None and producer.producer_epoch > epoch
        with producer.transaction():
            producer.send("t", b"on time", partition=0)
    assert _values(db_url) == [b"on time"]


def test_read_committed_skips_aborted_records_and_markers(db_url: str, admin: Admin) -> None:
    with Producer(db_url, transactional_id="app") as producer, Producer(db_url) as plain:
        producer.init_transactions()
        for i in range(5):
            producer.begin_transaction()
            producer.send("t", f"t{i}".encode(), partition=0)
            producer.flush()  # in the log before the abort, so read_committed must skip it
            if i % 2:
                producer.abort_transaction()
            else:
                producer.commit_transaction()
            plain.send("t", f"p{i}".encode(), partition=0).result(timeout=30)
    with Consumer(db_url) as consumer:
        tp = TopicPartition("t", 0)
        consumer.assign([tp])
        got: list[Any] = []
        while batch := consumer.poll(timeout=0.2):
            got.extend(r.value for r in batch)
        assert got == [b"t0", b"p0", b"p1", b"t2", b"p2", b"p3", b"t4", b"p4"]
        # Positions move past markers and aborted records to the end of the partition.
        assert consumer.position(tp) == consumer.end_offsets([tp])[tp] == 15


def test_read_committed_stops_at_the_last_stable_offset(db_url: str, admin: Admin) -> None:
    tp = TopicPartition("t", 0)
    with Producer(db_url, transactional_id="app") as producer, Producer(db_url) as plain:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", b"open", partition=0).result(timeout=30)
        plain.send("t", b"after", partition=0).result(timeout=30)
        with Consumer(db_url) as committed, Consumer(db_url, isolation_level="read_uncommitted") as dirty:
            for c in (committed, dirty):
                c.assign([tp])
            assert committed.poll(timeout=0.2) == []
            assert committed.end_offsets([tp]) == {tp: 0}  # the LSO
            assert [r.value for r in dirty.poll(timeout=0.2)] == [b"open", b"after"]
            assert dirty.end_offsets([tp]) == {tp: 2}
            producer.commit_transaction()
            assert [r.value for r in committed.poll(timeout=1)] == [b"open", b"after"]


def test_admin_lists_finds_and_aborts_hanging_transactions(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    with Producer(db_url, transactional_id="stuck") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", b"stuck", partition=1).result(timeout=30)
        [status] = admin.list_transactions()
        assert status.transactional_id == "stuck" and status.state == "Ongoing"
        assert status.partitions == ["t-1@0"]
        assert admin.find_hanging_transactions() == []
        assert [s.transactional_id for s in admin.find_hanging_transactions(older_than=timedelta(0))] == ["stuck"]
        admin.abort_transaction("stuck")
        assert admin.describe_transaction("stuck").state == "CompleteAbort"
        with pytest.raises(errors.ProducerFencedError):
            producer.commit_transaction()
    with pytest.raises(errors.InvalidTxnStateError):
        admin.abort_transaction("stuck")
    with pytest.raises(errors.TransactionalIdNotFoundError):
        admin.describe_transaction("nobody")
    assert _values(db_url, "read_uncommitted") == [b"stuck"]
    assert _values(db_url) == []
