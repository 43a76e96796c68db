"""One transaction's appends share its transactions row (migration 0039): appends to different
partitions run side by side, while a commit, an abort and an epoch bump still wait for every
append in flight and no append lands after them. Tried as a login role holding only the client
role, ACLs on, with appends held open in their database transactions and with racing threads."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import pytest
import sqlalchemy as sa

from oncelog import errors
from oncelog.store import log, txn
from oncelog.store.records import ProduceBatch, ProduceResult, RecordIn
from tests.support.roles import Principal, enforce_acls

TOPIC = "shared"
PARTITIONS = 4
TID = "tx-shared"
#: How long each append of the stream test holds its database transaction open, in seconds.
HOLD_S = 0.2


@pytest.fixture
def acls_on(engine: sa.Engine) -> None:
    enforce_acls(engine, {TOPIC: PARTITIONS})


def _records(tag: str, n: int = 2) -> list[RecordIn]:
    return [RecordIn(value=f"{tag}-{i}".encode()) for i in range(n)]


def _committed(engine: sa.Engine) -> dict[int, list[bytes]]:
    """Every partition's records as a read_committed reader sees them."""
    with engine.connect() as conn:
        fetched = log.fetch_many(conn, {(TOPIC, p): 0 for p in range(PARTITIONS)}, max_records=100_000)
    return {p: [bytes(r.value or b"") for r in fetched[(TOPIC, p)].records] for p in range(PARTITIONS)}


class _Txn:
    """The transactional id's identity and its transaction numbers."""

    def __init__(self, who: Principal) -> None:
        ident = who.call(txn.init_producer_id, transactional_id=TID, transaction_timeout_ms=60_000)
        self.who = who
        self.producer_id, self.epoch, self.number = ident.producer_id, ident.epoch, ident.txn_number
        self.sequences = dict.fromkeys(range(PARTITIONS), 0)

    def open(self) -> None:
        """Open the next transaction with every partition, as AddPartitionsToTxn does."""
        self.number += 1
        self.who.call(
            txn.add_partitions_to_txn,
            transactional_id=TID,
            producer_id=self.producer_id,
            epoch=self.epoch,
            txn_number=self.number,
            partitions=[(TOPIC, p) for p in range(PARTITIONS)],
        )

    def append(self, conn: sa.Connection, partition: int, tag: str) -> ProduceResult | errors.OncelogError:
        (answer,) = log.produce_batches(
            conn,
            batches=[ProduceBatch(TOPIC, partition, self.sequences[partition], _records(tag))],
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            transactional_id=TID,
            txn_number=self.number,
        )
        if isinstance(answer, ProduceResult):
            self.sequences[partition] += 2
        return answer

    def end(self, conn: sa.Connection, *, commit: bool) -> str:
        return txn.end_txn(
            conn,
            transactional_id=TID,
            producer_id=self.producer_id,
            epoch=self.epoch,
            txn_number=self.number,
            commit=commit,
        )


@contextmanager
def _held(who: Principal) -> Iterator[sa.Connection]:
    """A connection whose database transaction stays open until the block ends (then commits)."""
    with who.engine.connect().execution_options(isolation_level="READ COMMITTED") as conn:
        conn.begin()
        yield conn
        conn.commit()


def _waits_on_a_lock(engine: sa.Engine, user: str) -> bool:
    """Whether a backend of ``user`` is waiting for a lock (polled, 20 s at most)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            waiting = conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %(u)s AND wait_event_type = 'Lock'",
                {"u": user},
            ).scalar_one()
        if waiting:
            return True
        time.sleep(0.02)
    return False


def _at_once(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Each call's result (or exception), the calls started together on threads of their own."""
    start = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = calls[i]()
        except BaseException as exc:  # handed to the test
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return out


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # handed to the test
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_appends_of_one_transaction_to_other_partitions_do_not_wait_for_each_other(
    client: Principal, engine: sa.Engine
) -> None:
    t = _Txn(client)
    t.open()
    with _held(client) as first:
        assert isinstance(t.append(first, 0, "first"), ProduceResult)
        # The first append has not committed: the second, to another partition, must not wait
        # for it (it waited on the transactions row before 0039: the lock timeout fails the test).
        with client.engine.connect() as second:
            second.exec_driver_sql("SET lock_timeout = '5s'")
            assert isinstance(t.append(second, 1, "second"), ProduceResult)
    with client.engine.connect() as conn:
        assert t.end(conn, commit=True) == "committed"
    committed = _committed(engine)
    assert committed[0] == [b"first-0", b"first-1"] and committed[1] == [b"second-0", b"second-1"]


@pytest.mark.parametrize("ending", ["commit", "abort", "bump"])
def test_what_ends_a_transaction_waits_for_its_appends_in_flight(
    client: Principal, engine: sa.Engine, ending: str
) -> None:
    """A commit, an abort and an epoch bump take the transactions row FOR UPDATE: each waits for
    an append that holds it shared, then ends the transaction with that append in it."""
    t = _Txn(client)
    t.open()

    def end() -> Any:
        if ending == "bump":
            return client.call(txn.init_producer_id, transactional_id=TID, transaction_timeout_ms=60_000)
        with client.engine.connect() as conn:
            return t.end(conn, commit=ending == "commit")

    with _held(client) as held:
        assert isinstance(t.append(held, 2, "in-flight"), ProduceResult)
        thread, out = _in_thread(end)
        assert _waits_on_a_lock(engine, client.name), out
    thread.join(30)
    assert not thread.is_alive() and not isinstance(out[0], BaseException), out
    assert _committed(engine)[2] == ([b"in-flight-0", b"in-flight-1"] if ending == "commit" else [])
    with engine.connect() as conn:
        state = conn.exec_driver_sql(
            "SELECT state FROM transactions WHERE transactional_id = %(t)s", {"t": TID}
        ).scalar_one()
    assert state == {"commit": "CompleteCommit", "abort": "CompleteAbort", "bump": "Empty"}[ending]


def _race(t: _Txn, connections: list[sa.Connection], tag: str, delay: float) -> dict[int, Any]:
    """Each partition's append (on its own connection) and, ``delay`` seconds after they start,
    the commit (on the last connection), all at once: partition -> its answer, -1 -> the commit's."""
    start = threading.Barrier(PARTITIONS + 1)
    answers: dict[int, Any] = {}

    def appender(p: int) -> None:
        start.wait()
        try:
            answers[p] = t.append(connections[p], p, f"{tag}p{p}")
        except BaseException as exc:  # handed to the test
            answers[p] = exc

    def committer() -> None:
        start.wait()
        time.sleep(delay)
        try:
            answers[-1] = t.end(connections[PARTITIONS], commit=True)
        except BaseException as exc:  # handed to the test
            answers[-1] = exc

    threads = [threading.Thread(target=appender, args=(p,)) for p in range(PARTITIONS)]
    threads.append(threading.Thread(target=committer))
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return answers


def test_appends_racing_their_commit_are_in_it_or_refused_and_never_deadlock(
    client: Principal, engine: sa.Engine
) -> None:
    """200 transactions: four threads append to their own partitions while a fifth commits at a
    random moment. Every acknowledged append is committed, every refused one (the transaction no
    longer open, or completing) left nothing, and no call met a deadlock or any other error."""
    t = _Txn(client)
    rounds = 200
    expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    unexpected: list[BaseException] = []
    refused = 0
    rng = random.Random(39)
    with engine.connect() as conn:
        deadlocks_before = conn.exec_driver_sql(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).scalar_one()
    connections = [client.engine.connect() for _ in range(PARTITIONS + 1)]
    try:
        for round_ in range(rounds):
            t.open()
            answers = _race(t, connections, f"r{round_}", rng.uniform(0, 0.004))
            if answers.get(-1) != "committed":
                unexpected.append(RuntimeError(f"round {round_}: the commit answered {answers.get(-1)!r}"))
            for p in range(PARTITIONS):
                answer = answers[p]
                if isinstance(answer, ProduceResult):
                    expected[p] += [f"r{round_}p{p}-0".encode(), f"r{round_}p{p}-1".encode()]
                elif isinstance(answer, errors.InvalidTxnStateError | errors.ConcurrentTransactionsError):
                    refused += 1
                else:
                    unexpected.append(answer)
    finally:
        for conn in connections:
            conn.close()
    assert unexpected == []
    assert _committed(engine) == expected
    assert 0 < refused < rounds * PARTITIONS  # both outcomes were met
    with engine.connect() as conn:
        deadlocks = conn.exec_driver_sql(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).scalar_one()
    assert deadlocks == deadlocks_before


def test_a_stream_of_appends_cannot_hold_a_commit_off(client: Principal, engine: sa.Engine) -> None:
    """Appends that overlap without a gap must not keep a commit waiting. Four threads each hold
    an append's database transaction open for HOLD_S, one after another, started apart, so that
    some append holds the row FOR SHARE nearly all the time (as a client that sends BEGIN and
    waits can). PostgreSQL grants a row's FOR SHARE at once while only share locks are held, even
    after a FOR UPDATE began to wait: without txn_gate_v1 (migration 0040) appends asked for after
    the commit began to wait went ahead of it (the commit took 2.6 s here, and a luckier stream
    holds it off longer). With the gate they queue behind it: every append asked for once the
    commit waits is refused, what came before it is committed, and the commit comes through while
    the appenders still go."""
    t = _Txn(client)
    t.open()
    stop = threading.Event()
    flowing = threading.Barrier(PARTITIONS + 1)
    acknowledged: dict[int, list[tuple[float, bytes]]] = {p: [] for p in range(PARTITIONS)}
    unexpected: list[BaseException] = []

    def appender(p: int) -> None:
        n = 0
        time.sleep(HOLD_S / PARTITIONS * p)  # staggered: the four holds overlap
        with client.engine.connect().execution_options(isolation_level="READ COMMITTED") as conn:
            while not stop.is_set():
                asked = time.monotonic()
                try:
                    with conn.begin():
                        answer = t.append(conn, p, f"s{p}-{n}")
                        time.sleep(HOLD_S)
                except BaseException as exc:  # handed to the test
                    unexpected.append(exc)
                    return
                if isinstance(answer, ProduceResult):
                    acknowledged[p] += [(asked, f"s{p}-{n}-{i}".encode()) for i in range(2)]
                elif not isinstance(answer, errors.InvalidTxnStateError):
                    unexpected.append(answer)
                    return
                n += 1
                if n == 3:
                    flowing.wait(30)

    threads = [threading.Thread(target=appender, args=(p,)) for p in range(PARTITIONS)]
    for th in threads:
        th.start()
    try:
        flowing.wait(30)  # every appender is appending
        with client.engine.connect() as conn:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            committer, out = _in_thread(lambda: t.end(conn, commit=True))
            waiting_since = _lock_wait_seen(engine, pid)
            committer.join(60)
        assert not committer.is_alive(), "the commit was held off by the appends"
        assert out == ["committed"]
        assert all(th.is_alive() for th in threads), unexpected  # still appending, refused now
    finally:
        stop.set()
        for th in threads:
            th.join(30)
    assert unexpected == []
    jumped = [v for p in range(PARTITIONS) for asked, v in acknowledged[p] if asked > waiting_since]
    assert jumped == [], "appends asked for after the commit began to wait went ahead of it"
    assert _committed(engine) == {p: [v for _, v in acknowledged[p]] for p in range(PARTITIONS)}


def _lock_wait_seen(engine: sa.Engine, pid: int) -> float:
    """The monotonic time at which backend ``pid`` was first seen waiting for a lock (20 s at most)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            event = conn.exec_driver_sql(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %(pid)s", {"pid": pid}
            ).scalar()
        if event == "Lock":
            return time.monotonic()
        time.sleep(0.005)
    raise AssertionError(f"backend {pid} never waited for a lock")


def test_appends_joining_a_partition_to_their_transaction_never_deadlock(client: Principal, engine: sa.Engine) -> None:
    """Appends of one transaction to partitions it has not added yet (no AddPartitionsToTxn for
    them), one a request of two batches (produce_batches_v1: its partitions locked first), the
    others of one batch each (produce_v2), racing 150 times. Sharing the transactions row, they
    used to take a partition's lock and its txn_partitions row in opposite orders (a deadlock);
    now each joins the partition under its lock. One of the appends to a partition lands in each
    round (the others are out of sequence); no call meets any other error."""
    t = _Txn(client)
    with engine.connect() as conn:
        deadlocks_before = conn.exec_driver_sql(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).scalar_one()
    identity = {"producer_id": t.producer_id, "producer_epoch": t.epoch, "transactional_id": TID}
    expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    unexpected: list[Any] = []
    connections = [client.engine.connect() for _ in range(3)]
    try:
        for round_ in range(150):
            t.number += 1
            client.call(
                txn.add_partitions_to_txn,
                transactional_id=TID,
                producer_id=t.producer_id,
                epoch=t.epoch,
                txn_number=t.number,
                partitions=[(TOPIC, 0)],
            )
            # Different record counts: a loser is out of sequence, never taken for a retry.
            requests = [[(1, 2), (2, 2)], [(2, 3)], [(1, 4)]]  # (partition, records) per batch
            calls = [
                partial(
                    log.produce_batches,
                    connections[i],
                    batches=[
                        ProduceBatch(TOPIC, p, t.sequences[p], _records(f"j{round_}r{i}p{p}", n)) for p, n in request
                    ],
                    **identity,
                    txn_number=t.number,
                )
                for i, request in enumerate(requests)
            ]
            answers = _at_once(calls)
            for i, request in enumerate(requests):
                results = answers[i] if isinstance(answers[i], list) else [answers[i]] * len(request)
                for (p, n), result in zip(request, results, strict=True):
                    if isinstance(result, ProduceResult) and not result.duplicate:
                        expected[p] += [f"j{round_}r{i}p{p}-{k}".encode() for k in range(n)]
                        t.sequences[p] += n
                    elif not isinstance(result, errors.OutOfOrderSequenceError):
                        unexpected.append((round_, i, result))
            with client.engine.connect() as conn:
                assert t.end(conn, commit=True) == "committed"
    finally:
        for conn in connections:
            conn.close()
    assert unexpected == []
    assert _committed(engine) == expected
    with engine.connect() as conn:
        deadlocks = conn.exec_driver_sql(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).scalar_one()
    assert deadlocks == deadlocks_before
