"""Records sent in the application's own transaction (``oncelog.send``, migrations 0022 and 0023)
through a crash of the server, and through two-phase commit (PREPARE TRANSACTION, then COMMIT
PREPARED or ROLLBACK PREPARED), on a durable cluster of the test's own that allows prepared
transactions."""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

import oncelog
from oncelog import Admin, Consumer, TopicPartition, errors
from oncelog.embedded import EmbeddedPostgres
from oncelog.store import create_engine, migrate
from oncelog.store import log as store_log
from oncelog.store.records import RecordIn

TOPIC = "orders"
PARTITIONS = 3
#: A bound on waits that should end at once (a hang guard, not a measurement).
WAIT = 60.0


@pytest.fixture
def server() -> Iterator[EmbeddedPostgres]:
    """A durable cluster (fsync on) that allows prepared transactions, migrated to head."""
    path = tempfile.mkdtemp(prefix="oncelog-outbox-")
    srv = EmbeddedPostgres(path, durable=True, max_prepared_transactions=8)
    url = srv.start()
    eng = create_engine(url)
    migrate.upgrade(eng)
    with eng.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE public.orders (id integer PRIMARY KEY)")
    eng.dispose()
    with Admin(url) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS)
    yield srv
    srv.destroy()
    shutil.rmtree(path, ignore_errors=True)


def _read_all(url: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every committed record, read_committed, in order."""
    out: list[tuple[int, int, bytes]] = []
    with Consumer(url, isolation_level="read_committed") as consumer:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        while batch := consumer.poll(timeout=0.5):
            out.extend((r.partition, r.offset, bytes(r.value or b"")) for r in batch)
    return sorted(out)


def test_a_crash_keeps_every_application_transaction_whole(server: EmbeddedPostgres) -> None:
    """Four application threads commit orders, each with 1 to 3 records on any partitions, while
    the server is killed (immediate stop: no shutdown checkpoint) and started again. Afterwards an
    order is in its table if and only if all of its records are in the log, once each; every
    commit that returned is there; offsets are dense; nothing is left staged."""
    url = server.url()
    records_of: dict[int, int] = {}  # order id -> records it sent, set before its commit
    committed: set[int] = set()
    failures: list[BaseException] = []
    stop = threading.Event()
    lock = threading.Lock()

    def connect() -> psycopg.Connection[tuple[object, ...]]:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                return psycopg.connect(url, connect_timeout=5)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def worker(thread: int) -> None:
        rng = random.Random(thread)
        order = thread * 1_000_000
        conn = connect()
        try:
            while not stop.is_set():
                order += 1
                n = rng.randint(1, 3)
                with lock:
                    records_of[order] = n
                try:
                    conn.execute("INSERT INTO public.orders VALUES (%s)", (order,))
                    for i in range(n):
                        oncelog.send(conn, TOPIC, f"{order}:{i}".encode(), key=f"k{rng.randint(0, 50)}".encode())
                    conn.commit()
                except (psycopg.OperationalError, errors.DatabaseUnavailableError):
                    conn.close()  # the outcome of this commit is unknown: either way is right
                    conn = connect()
                    continue
                with lock:
                    committed.add(order)
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + WAIT
    while len(committed) < 150 and time.monotonic() < deadline:
        time.sleep(0.01)
    before_crash = len(committed)
    server.stop("immediate")
    assert server.start() == url
    while len(committed) < before_crash + 150 and time.monotonic() < deadline + WAIT:
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join(WAIT)
    assert failures == []
    assert len(committed) >= before_crash + 150, "the application did not carry on after the restart"

    log = _read_all(url)
    with psycopg.connect(url) as conn:
        orders = {int(r[0]) for r in conn.execute("SELECT id FROM public.orders").fetchall()}
        staged = conn.execute("SELECT count(*) FROM oncelog.outbox_records").fetchone()
    assert staged == (0,)
    assert committed <= orders, "a commit that returned is missing after the crash"
    found: dict[int, list[int]] = {}
    for _, _, value in log:
        order_text, index = value.decode().split(":")
        found.setdefault(int(order_text), []).append(int(index))
    assert set(found) == orders, "an order without its records, or records without their order"
    for order_id, indexes in found.items():
        assert sorted(indexes) == list(range(records_of[order_id])), f"order {order_id}: records lost or doubled"
    for p in range(PARTITIONS):
        offsets = [o for part, o, _ in log if part == p]
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not dense"


def test_two_phase_commit_publishes_at_commit_prepared_and_never_after_rollback_prepared(
    server: EmbeddedPostgres,
) -> None:
    """A transaction that sent a record can be prepared even while a reader waits on its partition
    (this server allows PREPARE TRANSACTION, so the commit does not NOTIFY: a prepared transaction
    may not have). Prepared, it holds the partition's append lock and shows nothing; COMMIT
    PREPARED publishes it, ROLLBACK PREPARED leaves nothing, not even an offset. Readers are not
    held up by it meanwhile (fetch_wait_v1 waits out appends in flight for a bounded time only). (A prepared
    transaction blocks every writer of its partitions until it is resolved: docs/guide-producer.md.)"""
    url = server.url()
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as listening:
            store_log.fetch_wait(listening, [(TOPIC, 0)], read_committed=True, wait_ms=60_000)
            # Each on a partition of its own: a prepared transaction holds its partitions' locks,
            # so a second one on partition 0 would wait for the first to be resolved.
            for order, gid, partition in ((1, "order-1", 0), (2, "order-2", 2)):
                with psycopg.connect(url) as app:
                    app.execute("INSERT INTO public.orders VALUES (%s)", (order,))
                    oncelog.send(app, TOPIC, f"order {order}".encode(), partition=partition)
                    app.execute(f"PREPARE TRANSACTION '{gid}'")
            with engine.connect() as producer:
                producer.exec_driver_sql("SET lock_timeout = '300ms'")
                with pytest.raises(errors.RequestTimeoutError):
                    store_log.produce(producer, topic=TOPIC, partition=0, records=[RecordIn(value=b"blocked")])
                assert (
                    store_log.produce(producer, topic=TOPIC, partition=1, records=[RecordIn(value=b"free")]).base_offset
                    == 0
                )
            assert _read_all(url) == [(1, 0, b"free")]
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("COMMIT PREPARED 'order-1'")
                admin.execute("ROLLBACK PREPARED 'order-2'")
    finally:
        engine.dispose()
    assert _read_all(url) == [(0, 0, b"order 1"), (1, 0, b"free")]
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT id FROM public.orders").fetchall() == [(1,)]
        assert conn.execute(
            "SELECT p.next_offset FROM oncelog.partitions p JOIN oncelog.topics t USING (topic_id) "
            "WHERE t.name = %s ORDER BY p.partition",
            (TOPIC,),
        ).fetchall() == [(1,), (1,), (0,)]
        assert conn.execute("SELECT count(*) FROM oncelog.outbox_records").fetchone() == (0,)
