"""Waking waiting readers (migration 0020): a reader registers its wait and LISTENs
(fetch_wait_v1); a write to a waited-on partition answers with the partition's wake token, and the
writer wakes the reader with a NOTIFY of it, outside the write's transaction. Tried as separate login roles
with ACLs on, with real concurrent sessions."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from oncelog import Consumer, Producer, TopicPartition, errors
from oncelog.store import log, txn
from oncelog.store.errors import mapped_errors
from oncelog.store.records import ProduceBatch, ProduceResult, RecordIn, WaitRegistration
from tests.support.clock import server_time
from tests.support.roles import Principal, client_principal

TOPIC = "t"
#: Bounds every wait of these tests; never an assertion on speed.
WAIT = 30.0


@pytest.fixture
def acls_on(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"SELECT create_topic_v1('{TOPIC}', 4)")
        conn.exec_driver_sql("SELECT set_acl_enforcement_v1(true)")


@pytest.fixture
def writer(client: Principal) -> Principal:
    return client


@pytest.fixture
def reader(other: Principal) -> Principal:
    return other


@pytest.fixture
def outsider(acls_on: None, engine: sa.Engine, db_url: str) -> Iterator[Principal]:
    """A client role no ACL allows anything."""
    yield from client_principal(engine, db_url, acls=())


def _one(p: int, tag: str) -> list[ProduceBatch]:
    return [ProduceBatch(TOPIC, p, None, [RecordIn(tag.encode())])]


def _write(who: Principal, p: int, tag: str = "v") -> ProduceResult:
    (answer,) = who.call(log.produce_batches, batches=_one(p, tag))
    assert isinstance(answer, ProduceResult), answer
    return answer


def _woken(conn: sa.Connection, registration: WaitRegistration, seconds: float) -> bool:
    return log.await_wakeup(conn, registration, seconds)


def _wake(who: Principal, tokens: list[str]) -> int:
    def send(conn: sa.Connection) -> int:
        return log.wake_readers(conn, tokens)

    sent: int = who.call(send)
    return sent


def _token_of(engine: sa.Engine, partition: int) -> str:
    with engine.connect() as conn:
        topic_id = conn.exec_driver_sql(f"SELECT topic_id FROM topics WHERE name = '{TOPIC}'").scalar_one()
    return f"{topic_id}:{partition}"


def test_a_write_to_a_waited_on_partition_wakes_the_reader(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    with reader.engine.connect() as listening:
        registration = log.fetch_wait(listening, [(TOPIC, 1)], read_committed=True, wait_ms=60_000)
        assert registration.tokens == {_token_of(engine, 1)}
        assert _write(writer, 0).wake is None, "nobody waits on partition 0"
        answer = _write(writer, 1)
        assert answer.wake == _token_of(engine, 1)
        assert not _woken(listening, registration, 0.05), "no NOTIFY yet: the writer sends it"
        assert _wake(writer, [answer.wake]) == 1
        assert _woken(listening, registration, WAIT)


def test_a_wake_up_leaves_the_sessions_durability_and_a_callers_transactions_alone(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    # The wake-up's own transaction commits without waiting for the WAL flush (a lost wake-up
    # costs a reader one look); nothing else may: not the session after it, nor the transaction
    # of a caller who sends it inside one of its own.
    token = _token_of(engine, 1)
    with reader.engine.connect() as listening:
        registration = log.fetch_wait(listening, [(TOPIC, 1)], read_committed=True, wait_ms=60_000)
        with writer.engine.connect() as conn:
            conn.exec_driver_sql("SET synchronous_commit = on")
            assert log.wake_readers(conn, [token]) == 1
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar_one() == "on"
        assert _woken(listening, registration, WAIT)
        registration = log.fetch_wait(listening, [(TOPIC, 1)], read_committed=True, wait_ms=60_000)
        with writer.engine.connect().execution_options(isolation_level="READ COMMITTED") as conn, conn.begin():
            conn.exec_driver_sql("SET LOCAL synchronous_commit = on")
            assert log.wake_readers(conn, [token]) == 1
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar_one() == "on"
        assert _woken(listening, registration, WAIT)


def test_a_wake_up_for_another_partition_is_passed_over(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    with reader.engine.connect() as listening:
        registration = log.fetch_wait(listening, [(TOPIC, 1)], read_committed=False, wait_ms=60_000)
        _wake(writer, [_token_of(engine, 2)])
        assert not _woken(listening, registration, 0.3)
        _wake(writer, [_token_of(engine, 2), _token_of(engine, 1)])  # one NOTIFY, both tokens
        assert _woken(listening, registration, WAIT)


def test_transactions_wake_read_uncommitted_on_append_and_read_committed_on_commit(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    with reader.engine.connect() as c1, reader.engine.connect() as c2:
        log.fetch_wait(c1, [(TOPIC, 0)], read_committed=True, wait_ms=60_000)
        ident = writer.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)
        n = ident.txn_number + 1
        (appended,) = writer.call(
            log.produce_batches, batches=[ProduceBatch(TOPIC, 0, 0, [RecordIn(b"a")])],
            producer_id=ident.producer_id, producer_epoch=ident.epoch, transactional_id="tx", txn_number=n,
        )  # fmt: skip
        assert isinstance(appended, ProduceResult) and appended.wake is None, "read_committed waits for the commit"
        log.fetch_wait(c2, [(TOPIC, 0)], read_committed=False, wait_ms=60_000)
        (again,) = writer.call(
            log.produce_batches, batches=[ProduceBatch(TOPIC, 0, 1, [RecordIn(b"b")])],
            producer_id=ident.producer_id, producer_epoch=ident.epoch, transactional_id="tx", txn_number=n,
        )  # fmt: skip
        assert isinstance(again, ProduceResult) and again.wake == _token_of(engine, 0), "read_uncommitted reads it"
        outcome, wake = writer.call(
            txn.end_txn_waking, transactional_id="tx", producer_id=ident.producer_id, epoch=ident.epoch,
            txn_number=n, commit=True,
        )  # fmt: skip
        assert (outcome, wake) == ("committed", [_token_of(engine, 0)])
        # A retry of the commit wakes nobody again.
        assert writer.call(
            txn.end_txn_waking, transactional_id="tx", producer_id=ident.producer_id, epoch=ident.epoch,
            txn_number=n, commit=True,
        ) == ("already_committed", [])  # fmt: skip


def _open_txn(writer: Principal, tid: str, partitions: list[int], *, timeout_ms: int = 60_000) -> tuple[int, int, int]:
    """A transaction of ``tid`` left open with a record in each of ``partitions``: its (producer
    id, epoch, number)."""
    ident = writer.call(txn.init_producer_id, transactional_id=tid, transaction_timeout_ms=timeout_ms)
    n = ident.txn_number + 1
    answers = writer.call(
        log.produce_batches, batches=[ProduceBatch(TOPIC, p, 0, [RecordIn(b"open")]) for p in partitions],
        producer_id=ident.producer_id, producer_epoch=ident.epoch, transactional_id=tid, txn_number=n,
    )  # fmt: skip
    assert all(isinstance(a, ProduceResult) for a in answers), answers
    return ident.producer_id, ident.epoch, n


def test_an_abort_wakes_the_read_committed_readers_of_the_partitions_it_held_back(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    # The open transaction holds partitions 0, 1 and 3 back; an idempotent record committed
    # behind it on partition 0 becomes readable with the abort (revision 0041).
    pid, epoch, n = _open_txn(writer, "tx", [0, 1, 3])
    _write(writer, 0, "behind")
    with reader.engine.connect() as c1, reader.engine.connect() as c2:
        log.fetch_wait(c1, [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)], read_committed=True, wait_ms=60_000)
        log.fetch_wait(c2, [(TOPIC, 3)], read_committed=False, wait_ms=60_000)  # woken at each append
        outcome, wake = writer.call(
            txn.end_txn_waking, transactional_id="tx", producer_id=pid, epoch=epoch, txn_number=n, commit=False
        )
        # Not partition 2 (the transaction never wrote there), nor 3 (no read_committed reader).
        assert (outcome, wake) == ("aborted", [_token_of(engine, 0), _token_of(engine, 1)])
        assert writer.call(
            txn.end_txn_waking, transactional_id="tx", producer_id=pid, epoch=epoch, txn_number=n, commit=False
        ) == ("already_aborted", []), "a retry of the abort wakes nobody again"


def test_an_abort_past_the_timeout_fences_and_wakes_the_readers_itself(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    pid, epoch, n = _open_txn(writer, "tx", [2], timeout_ms=1)
    with reader.engine.connect() as listening:
        registration = log.fetch_wait(listening, [(TOPIC, 2)], read_committed=True, wait_ms=60_000)
        time.sleep(0.01)  # past the 1 ms timeout: the abort fences as it aborts
        outcome, wake = writer.call(
            txn.end_txn_waking, transactional_id="tx", producer_id=pid, epoch=epoch, txn_number=n, commit=False
        )
        # A fence notifies from inside its own transaction (txn_fence_abort_v1): no token to send.
        assert (outcome, wake) == ("aborted_timed_out", [])
        assert _woken(listening, registration, WAIT)


def test_a_new_instance_fencing_the_old_ones_transaction_wakes_the_readers(
    writer: Principal, reader: Principal
) -> None:
    _open_txn(writer, "tx", [0])
    with reader.engine.connect() as listening:
        registration = log.fetch_wait(listening, [(TOPIC, 0)], read_committed=True, wait_ms=60_000)
        writer.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)  # the new instance
        assert _woken(listening, registration, WAIT)


def test_expiry_of_a_transaction_past_its_timeout_wakes_the_readers(writer: Principal, reader: Principal) -> None:
    _open_txn(writer, "tx", [3], timeout_ms=1)
    with reader.engine.connect() as listening:
        registration = log.fetch_wait(listening, [(TOPIC, 3)], read_committed=True, wait_ms=60_000)
        time.sleep(0.01)  # past the 1 ms timeout
        assert reader.call(txn.expire_transactions) == 1, "a reader that meets it aborts it"
        assert _woken(listening, registration, WAIT)
        assert not _woken(listening, registration, 0.2), "once"


def test_an_abort_that_wrote_nothing_here_wakes_nobody(writer: Principal, reader: Principal) -> None:
    ident = writer.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)
    _write(writer, 0)  # another producer's record last in the partition
    with reader.engine.connect() as listening:
        log.fetch_wait(listening, [(TOPIC, 0)], read_committed=True, wait_ms=60_000)
        assert writer.call(
            txn.end_txn_waking, transactional_id="tx", producer_id=ident.producer_id, epoch=ident.epoch,
            txn_number=ident.txn_number + 1, commit=False,
        ) == ("aborted", [])  # fmt: skip


def _waited_on(engine: sa.Engine, partition: int) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.exec_driver_sql(
                "SELECT greatest(committed_until, committed_once_until) > now() "
                "FROM fetch_waiters w JOIN topics t USING (topic_id) "
                f"WHERE t.name = '{TOPIC}' AND w.partition = {partition}"
            ).scalar()
        )


def test_a_consumer_waiting_behind_an_open_transaction_is_woken_by_its_abort(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    # End to end: the consumer waits with a 60 s backoff, so within its poll only a wake-up
    # brings it the record committed behind the transaction. Without one the poll returns empty.
    with Producer(writer.url, transactional_id="gate") as gate:
        with Producer(writer.url) as behind:
            gate.init_transactions()
            gate.begin_transaction()
            gate.send(TOPIC, b"gate", partition=1)
            gate.flush()
            behind.send(TOPIC, b"behind", partition=1).result(WAIT)
        with Consumer(reader.url, fetch_max_backoff_ms=60_000, fetch_min_backoff_ms=60_000) as consumer:
            consumer.assign([TopicPartition(TOPIC, 1)])
            consumer.seek(TopicPartition(TOPIC, 1), 0)
            got: list[Any] = []
            polling = threading.Thread(target=lambda: got.extend(consumer.poll(WAIT)))
            polling.start()
            # Abort once the poll waits: it fetched, registered its wait, and fetched once more.
            # Aborting earlier would let that fetch find the record, with no wake-up needed.
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline and not (
                consumer.metrics()["fetch_total"] >= 2 and _waited_on(engine, 1)
            ):
                time.sleep(0.01)
            gate.abort_transaction()
            polling.join(WAIT + 5)
            assert [r.value for r in got] == [b"behind"]
    # The gate's waker sent the wake-up (close() waited for its thread).
    assert gate.metrics()["reader_wakeup_total"] == 1


def test_the_one_round_trip_commit_names_its_waited_on_partitions(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    with reader.engine.connect() as listening:
        log.fetch_wait(listening, [(TOPIC, 2), (TOPIC, 3)], read_committed=True, wait_ms=60_000)
        ident = writer.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)
        done = writer.call(
            log.produce_offsets_end_txn, transactional_id="tx", producer_id=ident.producer_id,
            producer_epoch=ident.epoch, txn_number=ident.txn_number + 1,
            batches=[ProduceBatch(TOPIC, p, 0, [RecordIn(b"x")]) for p in (3, 1)],
        )  # fmt: skip
        assert (done.outcome, done.wake) == ("committed", [_token_of(engine, 3)])


def test_a_registration_lasts_as_long_as_its_wait(writer: Principal, reader: Principal, engine: sa.Engine) -> None:
    start = datetime.now(UTC)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as owner:
        with server_time(owner, start), reader.engine.connect() as listening:
            log.fetch_wait(listening, [(TOPIC, 0)], read_committed=True, wait_ms=1000)
        with server_time(owner, start + timedelta(milliseconds=900)):
            assert _write(writer, 0).wake is not None
        with server_time(owner, start + timedelta(milliseconds=1100)):
            assert _write(writer, 0).wake is None, "the reader stopped waiting"


def test_a_reader_without_read_access_cannot_wait(outsider: Principal) -> None:
    with pytest.raises(errors.TopicAuthorizationError):
        outsider.call(log.fetch_wait, partitions=[(TOPIC, 0)], read_committed=True, wait_ms=1000)


def test_a_flood_of_wake_ups_costs_a_waiting_consumer_one_fetch_per_5_ms_at_most(
    outsider: Principal, engine: sa.Engine, db_url: str
) -> None:
    # Any role may NOTIFY (PostgreSQL checks nothing): a stranger floods the channel with the
    # token of the partition a consumer waits on. Counted, not timed: over the poll, the consumer
    # fetches at most once per 5 ms it spent (plus the fetches of registering).
    token = _token_of(engine, 0)
    stop = threading.Event()

    def flood() -> None:
        def send(conn: sa.Connection) -> None:
            while not stop.is_set():
                log.wake_readers(conn, [token])

        outsider.call(send)

    with Consumer(db_url, fetch_max_backoff_ms=60_000, fetch_min_backoff_ms=60_000) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek(TopicPartition(TOPIC, 0), 0)
        t = threading.Thread(target=flood)
        t.start()
        try:
            started = time.monotonic()
            assert consumer.poll(1.0) == []
            spent = time.monotonic() - started
        finally:
            stop.set()
            t.join(WAIT)
        fetches = consumer.metrics()["fetch_total"]
    assert fetches <= 2 + spent / 0.005 + 1, (fetches, spent)


@pytest.mark.parametrize("wait_ms", [-1, 300_001])
def test_a_wait_outside_its_bounds_is_refused(reader: Principal, wait_ms: int) -> None:
    with pytest.raises(errors.InvalidRequestError):
        reader.call(log.fetch_wait, partitions=[(TOPIC, 0)], read_committed=True, wait_ms=wait_ms)


def _locks_waited_on(engine: sa.Engine, pid: int) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.exec_driver_sql(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %(pid)s", {"pid": pid}
            ).scalar()
        )


def test_registering_waits_out_the_append_in_flight_so_the_next_fetch_sees_it(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    # The race the registration closes: an append that checked for waiters before the reader
    # registered, and commits after the reader's fetch. Held here in an open transaction.
    libpq = writer.url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(libpq, options="-c search_path=oncelog") as appender:
        row = appender.execute(
            "SELECT wake FROM produce_batches_v1(NULL, NULL, NULL, NULL, '{t}', '{0}', NULL, '{1}', "
            "'{NULL}'::bytea[], '{late}'::bytea[], NULL, NULL)"
        ).fetchone()
        assert row is not None and row[0] is None, "nobody waited yet"
        registered = threading.Event()
        failures: list[BaseException] = []
        with reader.engine.connect() as listening:
            pid = int(listening.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())

            def register() -> None:
                try:
                    log.fetch_wait(listening, [(TOPIC, 0)], read_committed=True, wait_ms=60_000)
                    registered.set()
                except BaseException as exc:
                    failures.append(exc)

            t = threading.Thread(target=register)
            t.start()
            deadline = time.monotonic() + WAIT
            while not _locks_waited_on(engine, pid):
                assert time.monotonic() < deadline and t.is_alive(), f"the registration did not wait: {failures}"
                time.sleep(0.01)
            assert not registered.is_set()
            appender.commit()
            t.join(WAIT)
            assert registered.is_set() and failures == []
            got = log.fetch_many(listening, {(TOPIC, 0): 0})[(TOPIC, 0)].records
            assert [r.value for r in got] == [b"late"]


def test_a_reader_keeping_its_registration_open_holds_no_writer_up(writer: Principal, reader: Principal) -> None:
    # A hostile reader calls fetch_wait_v1 in a transaction it keeps open: the row locks it took
    # to wait out appends in flight are gone (rolled back with their subtransaction).
    libpq = reader.url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(libpq, options="-c search_path=oncelog") as hostile:
        hostile.execute("SELECT * FROM fetch_wait_v1('{t,t,t,t}', '{0,1,2,3}', true, 60000)").fetchall()
        with writer.engine.connect() as conn:
            conn.exec_driver_sql("SET lock_timeout = '2s'")
            (answer,) = log.produce_batches(conn, batches=_one(0, "x"))
        assert isinstance(answer, ProduceResult)
        hostile.rollback()


def test_a_notify_is_queued_while_the_reader_runs_other_statements(writer: Principal, reader: Principal) -> None:
    with reader.engine.connect() as listening:
        registration = log.fetch_wait(listening, [(TOPIC, 0)], read_committed=True, wait_ms=60_000)
        _wake(writer, list(registration.tokens))
        log.fetch_many(listening, {(TOPIC, 0): 0})  # the notification arrives meanwhile
        assert _woken(listening, registration, WAIT)
        log.drain_wakeups(listening)
        assert not _woken(listening, registration, 0.05), "drained"
        log.stop_waiting(listening)
        _wake(writer, list(registration.tokens))
        assert not _woken(listening, registration, 0.3), "no longer listening"


# --- the clients: a waiting Consumer woken by a Producer ---------------------------------------


def _poll_in_thread(consumer: Consumer, timeout: float) -> tuple[threading.Thread, list[Any]]:
    got: list[Any] = []

    def run() -> None:
        try:
            got.extend(consumer.poll(timeout))
        except BaseException as exc:
            got.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t, got


def _waiting(engine: sa.Engine) -> bool:
    with engine.connect() as conn:
        return bool(conn.exec_driver_sql("SELECT count(*) FROM fetch_waiters").scalar_one())


@pytest.mark.parametrize("transactional", [False, True])
def test_a_waiting_consumer_is_woken_by_the_write_not_by_its_own_polling(
    engine: sa.Engine, db_url: str, transactional: bool
) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"SELECT create_topic_v1('{TOPIC}', 4)")
    # Backoffs of a minute: within this poll the consumer looks again by itself only after a
    # minute, so a record that arrives in its third fetch can only have been announced.
    with Consumer(db_url, fetch_min_backoff_ms=60_000, fetch_max_backoff_ms=60_000) as consumer:
        consumer.assign([TopicPartition(TOPIC, 2)])
        consumer.seek(TopicPartition(TOPIC, 2), 0)
        t, got = _poll_in_thread(consumer, 120)
        deadline = time.monotonic() + WAIT
        while not _waiting(engine):
            assert time.monotonic() < deadline, "the consumer never registered its wait"
            time.sleep(0.01)
        if transactional:
            with Producer(db_url, transactional_id="w") as producer:
                producer.init_transactions()
                with producer.transaction():
                    producer.send(TOPIC, b"hello", partition=2)
        else:
            with Producer(db_url) as producer:
                producer.send(TOPIC, b"hello", partition=2).result(WAIT)
        t.join(WAIT * 4)
        assert [r.value for r in got] == [b"hello"]
        metrics = consumer.metrics()
    assert metrics["fetch_total"] == 4, "fetch, fetch a quiet spacing later, fetch after registering, fetch when woken"


def test_a_consumer_told_not_to_listen_never_registers(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"SELECT create_topic_v1('{TOPIC}', 1)")
    with Consumer(db_url, listen_for_writes=False, fetch_min_backoff_ms=5, fetch_max_backoff_ms=20) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek(TopicPartition(TOPIC, 0), 0)
        assert consumer.poll(0.2) == []
    assert not _waiting(engine)


def test_a_producer_told_not_to_wake_readers_sends_no_wake_up(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"SELECT create_topic_v1('{TOPIC}', 1)")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as listening:
        log.fetch_wait(listening, [(TOPIC, 0)], read_committed=True, wait_ms=60_000)
        with Producer(db_url, wake_readers=False) as quiet:
            quiet.send(TOPIC, b"a", partition=0).result(WAIT)
            quiet.flush()
            assert quiet.metrics()["reader_wakeup_total"] == 0
        with Producer(db_url) as waking:
            waking.send(TOPIC, b"b", partition=0).result(WAIT)
        # The waker sends from its own thread; close() waited for it.
        assert waking.metrics()["reader_wakeup_total"] == 1


def test_a_consumer_that_keeps_polling_registers_once_per_validity_and_again_for_new_partitions(
    engine: sa.Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"SELECT create_topic_v1('{TOPIC}', 2)")
    registered: list[list[tuple[str, int]]] = []
    real = log.fetch_wait

    def counting(conn: sa.Connection, partitions: Any, **kwargs: Any) -> WaitRegistration:
        registered.append(list(partitions))
        return real(conn, partitions, **kwargs)

    monkeypatch.setattr(log, "fetch_wait", counting)
    with Consumer(db_url) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek(TopicPartition(TOPIC, 0), 0)
        for _ in range(3):
            assert consumer.poll(0.05) == []
        assert registered == [[(TOPIC, 0)]], "one registration for three polls"
        consumer.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
        for tp in consumer.assignment():
            consumer.seek(tp, 0)
        assert consumer.poll(0.05) == []
        assert registered[-1] == [(TOPIC, 0), (TOPIC, 1)] and len(registered) == 2


def test_a_wake_up_behind_another_in_the_same_packet_is_seen(engine: sa.Engine) -> None:
    """Several NOTIFYs reach a listener in one read (one statement sends them): the one a reader
    waits for may come second, behind another partition's, and must not be dropped with the
    rest of the batch (a waiting reader would sleep out its backoff instead)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as listener:
        listener.exec_driver_sql("LISTEN packet_test")
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as other:
            other.exec_driver_sql("SELECT pg_notify('packet_test', 'other'), pg_notify('packet_test', 'mine')")
        assert log.await_notification(listener, "packet_test", lambda payload: payload == "mine", WAIT)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as other:
            other.exec_driver_sql("SELECT pg_notify('packet_test', 'a'), pg_notify('packet_test', 'b')")
        time.sleep(0.2)
        log.drain_wakeups(listener)  # every queued one, not the first of the batch only
        assert not log.await_notification(listener, "packet_test", lambda payload: True, 0.2)


# --- one-shot registrations (migration 0042) ---------------------------------------------------


def _register_once(listening: sa.Connection, partition: int, *, read_committed: bool = True) -> WaitRegistration:
    return log.fetch_wait(listening, [(TOPIC, partition)], read_committed=read_committed, wait_ms=60_000, one_shot=True)


def test_a_one_shot_registration_ends_with_the_wake_up_sent_for_it(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    token = _token_of(engine, 1)
    with reader.engine.connect() as listening:
        registration = _register_once(listening, 1)
        answer = _write(writer, 1)
        assert answer.wake == token
        assert _write(writer, 1).wake == token, "a write alone does not end it: only its wake-up does"
        assert _wake(writer, [token]) == 1
        assert _woken(listening, registration, WAIT)
        assert _write(writer, 1).wake is None, "ended by the wake-up: the reader reads now"
        registration = _register_once(listening, 1)
        assert _write(writer, 1).wake == token, "registered again for its next wait"


def test_a_lasting_registration_outlives_its_wake_ups(writer: Principal, reader: Principal, engine: sa.Engine) -> None:
    token = _token_of(engine, 1)
    with reader.engine.connect() as listening:
        registration = log.fetch_wait(listening, [(TOPIC, 1)], read_committed=True, wait_ms=60_000)
        for _ in range(3):
            assert _write(writer, 1).wake == token
            assert _wake(writer, [token]) == 1
            assert _woken(listening, registration, WAIT)


def test_every_reader_registered_on_a_partition_hears_the_wake_up_that_ends_the_registration(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    # One row per partition holds every reader's registration: the wake-up that ends it must
    # reach all of them, read_committed and read_uncommitted alike.
    token = _token_of(engine, 2)
    with reader.engine.connect() as first, reader.engine.connect() as second:
        registrations = [(first, _register_once(first, 2)), (second, _register_once(second, 2, read_committed=False))]
        assert _write(writer, 2).wake == token
        assert _wake(writer, [token]) == 1
        for listening, registration in registrations:
            assert _woken(listening, registration, WAIT)
        assert _write(writer, 2).wake is None


def test_a_strangers_wake_up_ends_a_registration_only_by_waking_its_reader(
    outsider: Principal, writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    # Any client may call wake_readers_v1 (as any role may NOTIFY): a registration it ends is
    # one whose reader hears it, never one silently dropped.
    token = _token_of(engine, 0)
    with reader.engine.connect() as listening:
        registration = _register_once(listening, 0)
        assert _wake(outsider, [token]) == 1
        assert _woken(listening, registration, WAIT)
        assert _write(writer, 0).wake is None


@pytest.mark.parametrize(
    "tokens",
    [
        ["x"],
        [None],
        ["1:"],
        [":1"],
        ["1:2:3"],
        ["-1:0"],
        ["1:0 "],
        ["2147483648:0"],
        ["1:2147483648"],
        ["99999999999:0"],
        ["01:0"],
        ["1:00"],
        ["1:0", "bad"],
        [f"1:{p}" for p in range(10_001)],
    ],
    ids=lambda t: repr(t)[:24],
)
def test_malformed_wake_tokens_are_refused_and_end_nothing(
    tokens: list[str | None], writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    token = _token_of(engine, 0)
    with reader.engine.connect() as listening:
        registration = _register_once(listening, 0)
        with pytest.raises(errors.InvalidRequestError):
            writer.call(_wake_raw, tokens=[token, *tokens])
        assert not _woken(listening, registration, 0.05), "nothing was sent"
        assert _write(writer, 0).wake == token, "the registration still holds"


def _wake_raw(conn: sa.Connection, *, tokens: list[str | None]) -> None:
    """wake_readers_v1 with exactly these tokens (the client sends each once)."""
    with mapped_errors():
        conn.exec_driver_sql("SELECT wake_readers_v1(%(tokens)s::text[])", {"tokens": tokens})


def test_an_empty_wake_up_sends_nothing(writer: Principal) -> None:
    assert _wake(writer, []) == 0


def test_many_tokens_go_in_payloads_of_350(writer: Principal, reader: Principal, engine: sa.Engine) -> None:
    token = _token_of(engine, 3)
    others = [f"{900_000 + i}:0" for i in range(1_200)]
    with reader.engine.connect() as listening:
        registration = _register_once(listening, 3)
        assert _wake(writer, [*others, token, token]) == 4, "1201 distinct tokens: 4 payloads"
        assert _woken(listening, registration, WAIT)


def test_a_wake_up_passes_over_a_registration_being_made_instead_of_waiting_for_it(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    # A reader registering holds its fetch_waiters row while it waits out the appends in flight.
    # A wake-up then skips that row (it never waits on a reader): the registration holds when it
    # is done, for the next write. Had the wake-up waited, it would have ended the registration.
    token = _token_of(engine, 0)
    libpq = writer.url.replace("postgresql+psycopg", "postgresql")
    for _attempt in range(5):
        with psycopg.connect(libpq, options="-c search_path=oncelog") as appender:
            appender.execute(
                "SELECT wake FROM produce_batches_v1(NULL, NULL, NULL, NULL, '{t}', '{0}', NULL, '{1}', "
                "'{NULL}'::bytea[], '{held}'::bytea[], NULL, NULL)"
            ).fetchone()
            registered = threading.Event()
            with reader.engine.connect() as listening:
                pid = int(listening.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())

                def register(conn: sa.Connection = listening, done: threading.Event = registered) -> None:
                    _register_once(conn, 0)
                    done.set()

                t = threading.Thread(target=register)
                t.start()
                deadline = time.monotonic() + WAIT
                while not _locks_waited_on(engine, pid) and not registered.is_set():
                    assert time.monotonic() < deadline, "the registration never waited"
                    time.sleep(0.005)
                assert _wake(writer, [token]) == 1
                in_flight = not registered.is_set()
                appender.commit()
                t.join(WAIT)
                assert registered.is_set()
                if in_flight:
                    assert _write(writer, 0).wake == token, "the wake-up ended a registration it should pass over"
                    return
                log.drain_wakeups(listening)
        with engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM fetch_waiters")
    pytest.fail("never woke while a registration was being made (its wait lasts 250 ms at most)")


def test_racing_registrations_and_writes_lose_no_wake_up(writer: Principal, reader: Principal) -> None:
    # The promise of a registration: a write racing it either lands before the reader's fetch
    # that follows the registration, or answers with the token that wakes the reader. Raced
    # 200 times with real threads and sessions; a lost wake-up fails the await.
    start = threading.Barrier(2)
    with reader.engine.connect() as listening:
        seen = 0
        for i in range(200):
            answers: list[ProduceResult] = []

            def write(tag: str = f"r{i}", out: list[ProduceResult] = answers) -> None:
                start.wait(WAIT)
                answer = _write(writer, 1, tag)
                out.append(answer)
                if answer.wake is not None:
                    _wake(writer, [answer.wake])

            t = threading.Thread(target=write)
            t.start()
            start.wait(WAIT)
            registration = _register_once(listening, 1)
            fetched = log.fetch_many(listening, {(TOPIC, 1): seen})[(TOPIC, 1)].records
            t.join(WAIT)
            assert len(answers) == 1
            if [r.value for r in fetched] != [f"r{i}".encode()]:
                assert answers[0].wake is not None, f"round {i}: the write neither showed nor woke"
                assert _woken(listening, registration, WAIT), f"round {i}: no wake-up came"
            seen = answers[0].base_offset + 1


def test_a_wake_up_in_an_array_with_other_bounds_still_names_its_partition(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    token = _token_of(engine, 2)
    with reader.engine.connect() as listening:
        registration = _register_once(listening, 2)
        assert writer.sql("SELECT wake_readers_v1(%s::text[])", (f"[5:5]={{{token}}}",)) == [(1,)]
        assert _woken(listening, registration, WAIT)


def test_a_wake_up_kept_open_in_a_transaction_holds_no_registration_up(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    # Any client may call wake_readers_v1 and keep its transaction open, holding the rows it
    # ended a registration on. A reader registering on them waits 250 ms at most, then goes on
    # without a registration, and is told so (its statement_timeout, 10 s here, would fail it
    # otherwise). Once the rows are free it registers again.
    token = _token_of(engine, 1)
    libpq = writer.url.replace("postgresql+psycopg", "postgresql")
    with reader.engine.connect() as listening:
        _register_once(listening, 1)
        with psycopg.connect(libpq, options="-c search_path=oncelog") as hostile:
            assert hostile.execute("SELECT wake_readers_v1(%s::text[])", ([token],)).fetchone() == (1,)
            listening.exec_driver_sql("SET statement_timeout = '10s'")
            assert _register_once(listening, 1).tokens == frozenset(), "told it is not registered"
            hostile.rollback()
        assert _register_once(listening, 1).tokens == {token}


def test_a_read_committed_consumer_is_woken_by_a_commit_after_a_read_uncommitted_reader_was_woken(
    writer: Principal, reader: Principal, engine: sa.Engine
) -> None:
    # Both kinds of reader share the partition's registration row, and the wake-up for a
    # transaction's append (meant for the read_uncommitted one) ends it: the read_committed
    # consumer, woken for nothing it can read, must register again, or the commit would wake
    # nobody. Backoffs of a minute: within the poll only a wake-up brings the record.
    with Consumer(reader.url, fetch_min_backoff_ms=60_000, fetch_max_backoff_ms=60_000) as consumer:
        consumer.assign([TopicPartition(TOPIC, 3)])
        consumer.seek(TopicPartition(TOPIC, 3), 0)
        t, got = _poll_in_thread(consumer, WAIT)
        deadline = time.monotonic() + WAIT
        while not _waited_on(engine, 3):
            assert time.monotonic() < deadline, "the consumer never registered its wait"
            time.sleep(0.01)
        with Producer(writer.url, transactional_id="mixed") as producer, reader.engine.connect() as uncommitted:
            producer.init_transactions()
            producer.begin_transaction()
            _register_once(uncommitted, 3, read_committed=False)
            producer.send(TOPIC, b"mixed", partition=3).result(WAIT)  # its wake-up ends both
            while _waiting_uncommitted(engine, 3):
                assert time.monotonic() < deadline, "the append's wake-up never came"
                time.sleep(0.01)
            while not _waited_on(engine, 3):  # the consumer, woken for nothing, registered again
                assert time.monotonic() < deadline and t.is_alive(), "the consumer did not register again"
                time.sleep(0.01)
            producer.commit_transaction()
        t.join(WAIT + 5)
        assert [r.value for r in got] == [b"mixed"], got


def _waiting_uncommitted(engine: sa.Engine, partition: int) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.exec_driver_sql(
                "SELECT uncommitted_once_until > now() FROM fetch_waiters w JOIN topics t USING (topic_id) "
                f"WHERE t.name = '{TOPIC}' AND w.partition = {partition}"
            ).scalar()
        )
