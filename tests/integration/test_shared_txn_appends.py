"""One transaction's appends share its transactions row (migration 0039): appends to different
partitions run side by side, while a commit, an abort and an epoch bump still wait for every
append in flight and no append lands after them. Tried as a login role holding only the client
role, ACLs on, with appends held open in their database transactions and with racing threads."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
