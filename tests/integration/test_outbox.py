"""Records in the application's own transaction (migration 0022): ``oncelog.send`` and SQL's
``send``/``send_v1``. They join the log at the caller's commit, in the order sent, and never
after a rollback; the partitions' locks are taken at the commit, not at send."""

from __future__ import annotations

import base64
import json
import random
import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import orm

import oncelog
from oncelog import Admin, Consumer, Producer, TopicPartition, errors
from oncelog.partitioner import partition_for_key
from oncelog.store import log as store_log
from oncelog.store.errors import mapped_errors
from tests.support.docs import as_program, python_example
from tests.support.roles import client_principal

TOPIC = "events"
PARTITIONS = 3
#: How long a test waits for a wake-up it expects (a bound on a hang, not a measurement).
WAIT = 30.0


@pytest.fixture
def app(db_url: str, engine: sa.Engine) -> sa.Engine:
    """The application's own table, beside oncelog in the same database."""
    with Admin(db_url) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE public.orders (id integer PRIMARY KEY, total numeric)")
    return engine


def log(engine: sa.Engine, partition: int | None = None) -> list[tuple[int, int, bytes | None, bytes]]:
    """(partition, offset, key, value) of every record of the topic, in order."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT r.partition, r.offset, r.key, r.value "
            "FROM oncelog.records r JOIN oncelog.topics t USING (topic_id) "
            "WHERE t.name = %(t)s AND (%(p)s::integer IS NULL OR r.partition = %(p)s) ORDER BY 1, 2",
            {"t": TOPIC, "p": partition},
        ).all()
    return [(r.partition, r.offset, None if r.key is None else bytes(r.key), bytes(r.value)) for r in rows]


def test_records_join_the_log_at_commit_in_order(app: sa.Engine, db_url: str) -> None:
    with app.connect() as conn:
        conn.exec_driver_sql("INSERT INTO public.orders VALUES (1, 12.5)")
        for i in range(3):
            assert oncelog.send(conn, TOPIC, f"v{i}".encode(), partition=1) == 1
        # Staged, not in the log: no reader sees them, not even read_uncommitted.
        assert log(app) == []
        with Consumer(db_url, isolation_level="read_uncommitted") as reader:
            reader.assign([TopicPartition(TOPIC, 1)])
            reader.seek_to_beginning()
            assert reader.poll(0.2) == []
        conn.commit()
    assert log(app) == [(1, i, None, f"v{i}".encode()) for i in range(3)]
    with app.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM oncelog.outbox_records").scalar_one() == 0


def test_a_rollback_leaves_nothing_not_even_an_offset(app: sa.Engine) -> None:
    with app.connect() as conn:
        conn.exec_driver_sql("INSERT INTO public.orders VALUES (1, 1)")
        oncelog.send(conn, TOPIC, b"gone", partition=0)
        conn.rollback()
        # A savepoint rolled back takes its records with it; the rest commits.
        with conn.begin_nested():
            oncelog.send(conn, TOPIC, b"kept-1", partition=0)
        nested = conn.begin_nested()
        oncelog.send(conn, TOPIC, b"dropped", partition=0)
        nested.rollback()
        oncelog.send(conn, TOPIC, b"kept-2", partition=0)
        conn.commit()
    assert log(app) == [(0, 0, None, b"kept-1"), (0, 1, None, b"kept-2")]


def test_bad_input_is_typed_and_leaves_the_transaction_usable_after_a_savepoint(app: sa.Engine) -> None:
    with app.connect() as conn:
        conn.exec_driver_sql("INSERT INTO public.orders VALUES (2, 2)")
        calls: list[tuple[Callable[[], object], type[errors.OncelogError]]] = [
            (lambda: oncelog.send(conn, "no-such-topic", b"v"), errors.UnknownTopicOrPartitionError),
            (lambda: oncelog.send(conn, TOPIC, b"v", partition=PARTITIONS), errors.UnknownTopicOrPartitionError),
            (lambda: oncelog.send(conn, TOPIC, b"x" * 2_000_000), errors.RecordTooLargeError),
            (lambda: oncelog.send(conn, TOPIC, "not bytes"), errors.InvalidRecordError),
            (lambda: oncelog.send(conn, TOPIC, b"v", headers=[("k", 5)]), errors.InvalidRecordError),
            (lambda: oncelog.send(object(), TOPIC, b"v"), errors.InvalidRequestError),  # type: ignore[arg-type]
        ]
        for call, error in calls:
            savepoint = conn.begin_nested()
            with pytest.raises(error):
                call()
            savepoint.rollback()
        oncelog.send(conn, TOPIC, b"fine", key=b"k", headers=[("h", b"1")])
        conn.commit()
        assert conn.exec_driver_sql("SELECT count(*) FROM public.orders").scalar_one() == 1
    assert [value for _, _, _, value in log(app)] == [b"fine"]


def test_a_session_or_psycopg_connection_and_serializers(app: sa.Engine, db_url: str) -> None:
    with orm.Session(app) as session, session.begin():
        session.execute(sa.text("INSERT INTO public.orders VALUES (3, 3)"))
        oncelog.send(session, TOPIC, {"id": 3}, key="3", value_serializer="json", key_serializer="str")
    libpq = db_url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(libpq) as pg:  # not in autocommit: the send waits for the commit
        oncelog.send(pg, TOPIC, b"from psycopg", key=b"3")
        assert len(log(app)) == 1
        pg.commit()
    found = log(app)
    assert [(k, v) for _, _, k, v in found] == [(b"3", b'{"id":3}'), (b"3", b"from psycopg")]
    assert {p for p, _, _, _ in found} == {partition_for_key(b"3", PARTITIONS)}


def test_keyless_records_of_a_transaction_share_a_partition(app: sa.Engine) -> None:
    with app.connect() as conn:
        chosen = {oncelog.send(conn, TOPIC, f"v{i}".encode()) for i in range(20)}
        conn.commit()
    assert len(chosen) == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.binary(max_size=40), partitions=st.integers(1, 1000))
def test_keys_partition_as_the_producer_does(app: sa.Engine, key: bytes, partitions: int) -> None:
    with app.connect() as conn:
        found = conn.exec_driver_sql("SELECT oncelog.murmur2_v1(%(k)s) %% %(n)s", {"k": key, "n": partitions})
        assert found.scalar_one() == partition_for_key(key, partitions)


def test_a_send_holds_no_partition_lock_until_the_commit(app: sa.Engine, db_url: str) -> None:
    """An application transaction that sent a record and stays open does not hold the partition:
    a producer writes there meanwhile, and the staged record lands after it, at the commit."""
    with app.connect() as conn, Producer(db_url, linger_ms=0) as producer:
        oncelog.send(conn, TOPIC, b"outbox", partition=2)
        assert producer.send(TOPIC, b"producer", partition=2).get(timeout=30).offset == 0
        conn.commit()
    assert log(app, 2) == [(2, 0, None, b"producer"), (2, 1, None, b"outbox")]


def test_concurrent_application_transactions_append_without_gaps(app: sa.Engine) -> None:
    """8 threads, each 30 transactions of a business row and 1 to 3 records on one partition, a
    fifth of them rolled back: exactly the committed records, dense offsets, each thread's in its
    order."""
    failures: list[BaseException] = []
    committed: dict[int, list[bytes]] = {}

    def worker(thread: int) -> None:
        rng = random.Random(thread)
        mine: list[bytes] = []
        try:
            with app.connect() as conn:
                for n in range(30):
                    conn.exec_driver_sql("INSERT INTO public.orders VALUES (%(id)s, 1)", {"id": thread * 1000 + n})
                    values = [f"{thread}-{n}-{i}".encode() for i in range(rng.randint(1, 3))]
                    for v in values:
                        oncelog.send(conn, TOPIC, v, partition=0)
                    if rng.random() < 0.2:
                        conn.rollback()
                    else:
                        conn.commit()
                        mine += values
        except BaseException as exc:  # reported below
            failures.append(exc)
        committed[thread] = mine

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert failures == []
    found = log(app, 0)
    assert [offset for _, offset, _, _ in found] == list(range(len(found)))
    values = [v for _, _, _, v in found]
    assert sorted(values) == sorted(v for vs in committed.values() for v in vs)
    for thread, mine in committed.items():
        assert [v for v in values if v.startswith(f"{thread}-".encode())] == mine
    with app.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM oncelog.outbox_records").scalar_one() == 0


def test_a_commit_wakes_the_readers_waiting_on_its_partitions(app: sa.Engine) -> None:
    """A reader waiting on partition 1 is woken when a transaction that sent there commits (the
    NOTIFY goes with the commit), not before, and not by a rollback."""
    with app.connect() as conn:
        if int(conn.exec_driver_sql("SHOW max_prepared_transactions").scalar_one()) > 0:
            pytest.skip("this server allows PREPARE TRANSACTION: the commit does not NOTIFY there (see design.md)")
    with app.connect() as listening, app.connect() as conn:
        registration = store_log.fetch_wait(listening, [(TOPIC, 1)], read_committed=True, wait_ms=60_000)
        listening.commit()
        oncelog.send(conn, TOPIC, b"rolled back", partition=1)
        conn.rollback()
        oncelog.send(conn, TOPIC, b"elsewhere", partition=2)
        conn.commit()
        assert not store_log.await_wakeup(listening, registration, 0.2), "nothing reached partition 1"
        oncelog.send(conn, TOPIC, b"one", partition=1)
        oncelog.send(conn, TOPIC, b"two", partition=2)
        assert not store_log.await_wakeup(listening, registration, 0.2), "not before the commit"
        conn.commit()
        assert store_log.await_wakeup(listening, registration, WAIT)
    assert log(app, 1) == [(1, 0, None, b"one")]


def test_a_transaction_larger_than_a_batch_appends_batch_by_batch(app: sa.Engine) -> None:
    """More records for a partition than max_batch_records: each batch of them in order, dense
    offsets, beside another partition's records of the same transaction."""
    with app.begin() as conn:
        conn.exec_driver_sql("UPDATE oncelog.settings SET max_batch_records = 5")
    with app.connect() as conn:
        for i in range(12):
            oncelog.send(conn, TOPIC, f"a{i}".encode(), partition=0)
        for i in range(3):
            oncelog.send(conn, TOPIC, f"b{i}".encode(), partition=1)
        conn.commit()
        for i in range(5):  # exactly one batch: appended whole
            oncelog.send(conn, TOPIC, f"c{i}".encode(), partition=0)
        conn.commit()
    assert log(app, 0) == [
        (0, i, None, v.encode()) for i, v in enumerate([f"a{i}" for i in range(12)] + [f"c{i}" for i in range(5)])
    ]
    assert log(app, 1) == [(1, i, None, f"b{i}".encode()) for i in range(3)]


@pytest.fixture
def limited(app: sa.Engine, db_url: str) -> Iterator[str]:
    """A client principal that may read the topic but not write it (ACLs on)."""
    with app.begin() as conn:
        conn.exec_driver_sql("SELECT oncelog.set_acl_enforcement_v1(true)")
    for principal in client_principal(app, db_url, acls=[("topic", TOPIC, "read")]):
        yield principal.url


def test_sending_needs_the_write_acl(app: sa.Engine, limited: str) -> None:
    engine = sa.create_engine(limited)
    try:
        with engine.connect() as conn, pytest.raises(errors.TopicAuthorizationError):
            oncelog.send(conn, TOPIC, b"v", partition=0)
    finally:
        engine.dispose()
    assert log(app) == []


def test_an_acl_revoked_before_the_commit_refuses_it_without_locking_the_partition(app: sa.Engine, db_url: str) -> None:
    """The write ACL is checked at send and again at the commit; a caller whose ACL went in between
    is refused (TopicAuthorizationError) and never waits for, or locks, the partition: here another
    session holds it, and the commit is refused, not left waiting on the lock."""
    with app.begin() as conn:
        conn.exec_driver_sql("SELECT oncelog.set_acl_enforcement_v1(true)")
    for principal in client_principal(app, db_url, acls=[("topic", TOPIC, "write")]):
        engine = sa.create_engine(principal.url)  # transactions of its own (the principal's engine autocommits)
        with engine.connect() as sender, app.connect() as holder:
            sender.exec_driver_sql("SET lock_timeout = '2s'")  # a wait for the lock would end in a timeout
            oncelog.send(sender, TOPIC, b"v", partition=0)
            with app.begin() as admin:
                admin.exec_driver_sql("SELECT oncelog.delete_acls_v1(%(p)s)", {"p": principal.name})
            holder.exec_driver_sql(
                "SELECT 1 FROM oncelog.partitions p JOIN oncelog.topics t USING (topic_id) "
                "WHERE t.name = %(t)s AND p.partition = 0 FOR NO KEY UPDATE",  # an append's lock
                {"t": TOPIC},
            )
            with pytest.raises(errors.TopicAuthorizationError), mapped_errors():
                sender.commit()
            holder.rollback()
        engine.dispose()
    assert log(app) == []


def test_the_guide_example_runs(db_url: str, engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/guide-producer.md's outbox example, as written."""
    code = python_example("docs/guide-producer.md", "## In your own transaction")
    monkeypatch.setenv("ONCELOG_DATABASE_URL", db_url)
    exec(as_program(code, "guide-producer.md (outbox)"), {"__name__": "guide_outbox_example"})
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT r.key, r.value FROM oncelog.records r JOIN oncelog.topics t USING (topic_id) "
            "WHERE t.name = 'order-events'"
        ).all()
        assert conn.exec_driver_sql("SELECT total FROM public.shop_orders WHERE id = 7").scalar_one() == 12.5
    assert [(bytes(k), bytes(v)) for k, v in rows] == [(b"7", b'{"order":7,"total":12.5}')]


# --- table capture ------------------------------------------------------------------------------


def captured(engine: sa.Engine) -> list[tuple[dict[str, object], dict[str, object] | None, str]]:
    """(key, value, op header) of every record of the topic, in offset order per partition."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT r.key, r.value, r.headers FROM oncelog.records r JOIN oncelog.topics t USING (topic_id) "
            "WHERE t.name = %(t)s ORDER BY r.partition, r.offset",
            {"t": TOPIC},
        ).all()
    out = []
    for r in rows:
        headers = {h["key"]: base64.b64decode(h["value"]).decode() for h in r.headers}
        assert headers["table"] == "public.items"
        value = None if r.value is None else json.loads(bytes(r.value))
        out.append((json.loads(bytes(r.key)), value, headers["op"]))
    return out


@pytest.fixture
def items(app: sa.Engine, db_url: str) -> sa.Engine:
    with app.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE public.items (id integer PRIMARY KEY, name text)")
    with Admin(db_url) as admin:
        admin.capture_table("public.items", TOPIC)
        assert [(c.table, c.topic) for c in admin.list_captures()] == [("public.items", TOPIC)]
    return app


def test_captured_changes_become_records_in_the_same_transaction(items: sa.Engine, db_url: str) -> None:
    with items.connect() as conn:
        conn.exec_driver_sql("INSERT INTO public.items VALUES (1, 'one'), (2, 'two')")
        conn.exec_driver_sql("UPDATE public.items SET name = 'uno' WHERE id = 1")
        conn.exec_driver_sql("DELETE FROM public.items WHERE id = 2")
        conn.exec_driver_sql("UPDATE public.items SET id = 3 WHERE id = 1")  # a new key
        assert captured(items) == []  # nothing before the commit
        conn.commit()
        conn.exec_driver_sql("INSERT INTO public.items VALUES (9, 'rolled back')")
        conn.rollback()
    found = captured(items)
    by_key: dict[int, list[tuple[object, str]]] = {}
    for key, value, op in found:
        by_key.setdefault(int(key["id"]), []).append((value, op))  # type: ignore[call-overload]
    assert by_key == {
        1: [({"id": 1, "name": "one"}, "insert"), ({"id": 1, "name": "uno"}, "update"), (None, "delete")],
        2: [({"id": 2, "name": "two"}, "insert"), (None, "delete")],
        3: [({"id": 3, "name": "uno"}, "insert")],
    }
    # A column added later is in the next records; TRUNCATE is refused while captured.
    with items.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE public.items ADD COLUMN price numeric")
        conn.exec_driver_sql("INSERT INTO public.items VALUES (4, 'four', 1.5)")
    assert ({"id": 4}, {"id": 4, "name": "four", "price": 1.5}, "insert") in captured(items)
    with pytest.raises(sa.exc.DBAPIError, match="captured to topic"), items.begin() as conn:
        conn.exec_driver_sql("TRUNCATE public.items")
    with Admin(db_url) as admin:
        assert admin.remove_capture("public.items") is True
        assert admin.remove_capture("public.items") is False
        assert admin.list_captures() == []
    with items.begin() as conn:
        conn.exec_driver_sql("INSERT INTO public.items VALUES (5, 'not captured')")
        conn.exec_driver_sql("TRUNCATE public.items")
    assert not any(key == {"id": 5} for key, _, _ in captured(items))


def test_capture_refuses_what_it_cannot_key(app: sa.Engine, db_url: str) -> None:
    with app.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE public.loose (v text)")
        conn.exec_driver_sql("CREATE TABLE public.keyed (id integer PRIMARY KEY)")
    with Admin(db_url) as admin:
        with pytest.raises(errors.InvalidRequestError, match="no primary key"):
            admin.capture_table("public.loose", TOPIC)
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            admin.capture_table("public.keyed", "no-such-topic")
        admin.capture_table("public.keyed", TOPIC)
        with pytest.raises(errors.InvalidRequestError, match="already"):
            admin.capture_table("public.keyed", TOPIC)
    with app.begin() as conn:  # the key goes away: the next change is refused, clearly
        conn.exec_driver_sql("ALTER TABLE public.keyed DROP CONSTRAINT keyed_pkey")
    with (
        pytest.raises(errors.InvalidRequestError, match="no primary key any more"),
        app.begin() as conn,
        mapped_errors(),
    ):
        conn.exec_driver_sql("INSERT INTO public.keyed VALUES (1)")
