"""read_committed across partitions: one snapshot sees a transaction on all of its partitions or none.

A writer thread runs transactions that each write one record to each of four partitions (the value
names the transaction index and the partition), aborting some. Readers run meanwhile:

* ``store.log.fetch_many`` over the four partitions (one statement, one snapshot), with a large and a
  small per-partition ``max_records``;
* the Consumer API (``oncelog.Consumer``, whose poll reads all assigned partitions in one snapshot),
  with a large and a small ``max_poll_records``;
* the ``committed_records`` view, read in one SQL statement.

:class:`PollChecker` checks every poll exactly:

1. nothing from an aborted transaction, nothing twice, per partition in transaction order, each record
   at the offset the writer got for it;
2. no skipping: for every transaction returned so far and every partition, its record there has been
   returned, or the reader's position on that partition has not yet passed its offset (so it will
   come) -- a poll never returns transaction k on one partition while another partition's position
   has moved beyond k's record there without returning it;
3. closure (readers that start all partitions at the same transaction boundary and read without a
   cap that could cut a poll short): the set of transactions returned by one poll is the same on all
   four partitions.

A contrast test reads partitions in separate statements around a commit and shows the checker does
report the partial transaction that such a reader sees; another feeds it a skip.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa

from oncelog import Consumer, TopicPartition
from oncelog.store import log, topics, txn
from oncelog.store.records import RecordIn

T = "rc"
PARTITIONS = 4
TXNS = 240
ABORT_EVERY = 5  # transactions k with k % ABORT_EVERY == 3 are aborted
BIG = 100_000


def aborted(k: int) -> bool:
    return k % ABORT_EVERY == 3


def value(k: int, p: int) -> bytes:
    return f"{k}:{p}".encode()


def parse(v: bytes) -> tuple[int, int]:
    k, p = v.decode().split(":")
    return int(k), int(p)


@pytest.fixture
def conn(conn: sa.Connection) -> sa.Connection:
    """The autocommit connection of conftest, with the topic created."""
    topics.create_topic(conn, name=T, partitions=PARTITIONS)
    return conn


# --- the checker -----------------------------------------------------------------------------


@dataclass
class PollChecker:
    """Checks a reader's polls against the offsets the writer got (``offsets[k][p]``)."""

    offsets: dict[int, dict[int, int]]
    closure: bool
    returned: dict[int, set[int]] = field(default_factory=lambda: {p: set() for p in range(PARTITIONS)})
    last: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(PARTITIONS), -1))
    violations: list[str] = field(default_factory=list)
    polls: int = 0
    nonempty_polls: int = 0

    def poll(self, got: dict[int, list[tuple[int, int]]], positions: dict[int, int]) -> None:
        """``got``: per partition the (offset, transaction) pairs one poll returned, in order;
        ``positions``: the reader's position on every partition after it."""
        self.polls += 1
        now: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
        for p, recs in got.items():
            for offset, k in recs:
                if aborted(k):
                    self.violations.append(f"poll {self.polls}: aborted transaction {k} returned on {p}")
                if k in self.returned[p]:
                    self.violations.append(f"poll {self.polls}: transaction {k} returned twice on {p}")
                if k <= self.last[p]:
                    self.violations.append(f"poll {self.polls}: transaction {k} after {self.last[p]} on {p}")
                if self.offsets.get(k, {}).get(p) != offset:
                    self.violations.append(f"poll {self.polls}: transaction {k} on {p} at {offset}, written elsewhere")
                self.returned[p].add(k)
                self.last[p] = max(self.last[p], k)
                now[p].add(k)
        if any(now.values()):
            self.nonempty_polls += 1
        # No skipping: every transaction returned anywhere is returned, or still ahead, on every
        # partition it wrote to.
        for k in set().union(*self.returned.values()):
            for q, offset in self.offsets[k].items():
                if k not in self.returned[q] and positions[q] > offset:
                    self.violations.append(
                        f"poll {self.polls}: transaction {k} was returned on "
                        f"{sorted(p for p in range(PARTITIONS) if k in self.returned[p])} but partition {q}'s "
                        f"position {positions[q]} passed its record at {offset}"
                    )
        if self.closure:
            for k in sorted(set().union(*now.values())):
                missing = sorted(q for q in self.offsets[k] if k not in now[q])
                if missing:
                    self.violations.append(f"poll {self.polls}: transaction {k} returned without partitions {missing}")

    def complete(self, committed: set[int]) -> None:
        for p in range(PARTITIONS):
            assert self.returned[p] == committed, f"partition {p}: missing {sorted(committed - self.returned[p])}"


# --- the writer ------------------------------------------------------------------------------


class Writer(threading.Thread):
    """Runs TXNS transactions, each one record per partition (in a random partition order)."""

    def __init__(self, engine: sa.Engine, tid: str = "writer") -> None:
        super().__init__(daemon=True)
        self.engine = engine
        self.tid = tid
        self.offsets: dict[int, dict[int, int]] = {}
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.committed: set[int] = set()

    def run(self) -> None:
        try:
            rng = random.Random(7)
            with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                ident = txn.init_producer_id(c, transactional_id=self.tid, transaction_timeout_ms=600_000)
                seq = [0] * PARTITIONS
                for k in range(TXNS):
                    n = ident.txn_number + 1 + k
                    order = list(range(PARTITIONS))
                    rng.shuffle(order)
                    mine: dict[int, int] = {}
                    for p in order:
                        r = log.produce(
                            c,
                            topic=T,
                            partition=p,
                            records=[RecordIn(value=value(k, p))],
                            producer_id=ident.producer_id,
                            producer_epoch=ident.epoch,
                            base_sequence=seq[p],
                            transactional_id=self.tid,
                            txn_number=n,
                        )
                        seq[p] += 1
                        mine[p] = r.base_offset
                    # Published before the commit: a reader that sees k committed finds its offsets.
                    self.offsets[k] = mine
                    out = txn.end_txn(
                        c,
                        transactional_id=self.tid,
                        producer_id=ident.producer_id,
                        epoch=ident.epoch,
                        txn_number=n,
                        commit=not aborted(k),
                    )
                    assert out == ("aborted" if aborted(k) else "committed"), out
                    if not aborted(k):
                        self.committed.add(k)
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.done.set()


# --- readers -----------------------------------------------------------------------------------


def read_with_fetch_many(engine: sa.Engine, writer: Writer, max_records: int, checker: PollChecker) -> int:
    """Polls with fetch_many until the writer is done and everything is read; returns how many polls
    saw an open transaction that had written to some of the partitions but not all."""
    positions = dict.fromkeys(range(PARTITIONS), 0)
    in_flight = 0
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        while True:
            finished = writer.done.is_set()
            res = log.fetch_many(c, {(T, p): positions[p] for p in range(PARTITIONS)}, max_records=max_records)
            got: dict[int, list[tuple[int, int]]] = {}
            held = 0
            for p in range(PARTITIONS):
                part = res[(T, p)]
                assert part.error is None and part.last_stable_offset is not None
                got[p] = []
                for r in part.records:
                    assert r.value is not None
                    k, vp = parse(r.value)
                    assert vp == p
                    got[p].append((r.offset, k))
                if part.records:
                    positions[p] = part.records[-1].offset + 1
                else:
                    positions[p] = max(positions[p], part.last_stable_offset)
                held += part.last_stable_offset < (part.high_watermark or 0)
            in_flight += 0 < held < PARTITIONS
            checker.poll(got, positions)
            if (
                finished
                and not any(got.values())
                and all(positions[p] >= (res[(T, p)].high_watermark or 0) for p in range(PARTITIONS))
            ):
                return in_flight


def read_with_consumer(db_url: str, writer: Writer, max_poll_records: int, checker: PollChecker) -> None:
    tps = [TopicPartition(T, p) for p in range(PARTITIONS)]
    with Consumer(db_url, isolation_level="read_committed", max_poll_records=max_poll_records) as consumer:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        idle_after_done = 0
        while idle_after_done < 3:
            finished = writer.done.is_set()
            records = consumer.poll(timeout=0)
            got: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
            for r in records:
                k, vp = parse(r.value)
                assert vp == r.partition
                got[r.partition].append((r.offset, k))
            checker.poll(got, {tp.partition: consumer.position(tp) for tp in tps})
            idle_after_done = idle_after_done + 1 if finished and not records else 0


def read_committed_records_view(engine: sa.Engine, writer: Writer, violations: list[str]) -> int:
    """Reads the committed_records view in one statement, repeatedly; returns the number of reads."""
    reads = 0
    previous: set[int] = set()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        while True:
            finished = writer.done.is_set()
            rows = c.exec_driver_sql(
                "SELECT partition, value FROM committed_records WHERE topic = %(t)s", {"t": T}
            ).all()
            reads += 1
            per: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
            for p, v in rows:
                k, vp = parse(v)
                assert vp == p
                per[p].add(k)
            union = set().union(*per.values())
            for p in range(PARTITIONS):
                if per[p] != union:
                    violations.append(f"committed_records read {reads}: {sorted(union - per[p])} missing on {p}")
            if any(aborted(k) for k in union):
                violations.append(
                    f"committed_records read {reads}: aborted transactions {sorted(filter(aborted, union))}"
                )
            if not previous <= union:
                violations.append(f"committed_records read {reads}: {sorted(previous - union)} disappeared")
            previous = union
            if finished:
                return reads


# --- the tests ---------------------------------------------------------------------------------


def _run(engine: sa.Engine, readers: list[Callable[[Writer], object]]) -> tuple[Writer, list[object]]:
    """Starts the writer and the readers together; returns the writer and each reader's result."""
    writer = Writer(engine)
    results: list[object] = [None] * len(readers)
    failures: list[BaseException] = []

    def run(i: int, reader: Callable[[Writer], object]) -> None:
        try:
            results[i] = reader(writer)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i, r), daemon=True) for i, r in enumerate(readers)]
    for th in threads:
        th.start()
    writer.start()
    writer.join(300)
    for th in threads:
        th.join(300)
    assert writer.done.is_set() and writer.error is None, writer.error
    assert not any(th.is_alive() for th in threads), "a reader did not finish"
    if failures:
        raise failures[0]
    return writer, results


def test_fetch_many_sees_each_transaction_on_all_partitions_or_none(engine: sa.Engine, conn: sa.Connection) -> None:
    checkers: dict[int, PollChecker] = {}

    def reader(max_records: int) -> Callable[[Writer], object]:
        def go(w: Writer) -> int:
            checkers[max_records] = PollChecker(w.offsets, closure=max_records == BIG)
            return read_with_fetch_many(engine, w, max_records, checkers[max_records])

        return go

    writer, results = _run(engine, [reader(BIG), reader(3)])
    for max_records, checker in checkers.items():
        assert checker.violations == [], (max_records, checker.violations[:10])
        checker.complete(writer.committed)
    # The readers did poll while transactions were half written (else the test proves nothing).
    in_flight = [r for r in results if isinstance(r, int)]
    assert len(in_flight) == 2 and min(in_flight) > 0, results
    assert checkers[BIG].nonempty_polls > 1


def test_consumer_polls_see_each_transaction_on_all_partitions_or_none(
    engine: sa.Engine, conn: sa.Connection, db_url: str
) -> None:
    checkers: dict[int, PollChecker] = {}

    def reader(max_poll_records: int) -> Callable[[Writer], object]:
        def go(w: Writer) -> None:
            checkers[max_poll_records] = PollChecker(w.offsets, closure=max_poll_records == BIG)
            read_with_consumer(db_url, w, max_poll_records, checkers[max_poll_records])

        return go

    writer, _ = _run(engine, [reader(BIG), reader(5)])
    for max_poll_records, checker in checkers.items():
        assert checker.violations == [], (max_poll_records, checker.violations[:10])
        checker.complete(writer.committed)
        assert checker.nonempty_polls > 1


def test_committed_records_view_never_shows_a_partial_transaction(engine: sa.Engine, conn: sa.Connection) -> None:
    violations: list[str] = []
    writer, results = _run(engine, [lambda w: read_committed_records_view(engine, w, violations)])
    assert violations == [], violations[:10]
    assert isinstance(results[0], int) and results[0] > 1
    with engine.connect() as c:
        rows = c.exec_driver_sql("SELECT value FROM committed_records WHERE topic = %(t)s", {"t": T}).scalars().all()
    assert {parse(v)[0] for v in rows} == writer.committed
    assert len(rows) == PARTITIONS * len(writer.committed)


# --- the checker can fail ----------------------------------------------------------------------


def _open_transaction_on_partitions_0_and_1(conn: sa.Connection) -> tuple[txn.TransactionalIdentity, dict[int, int]]:
    ident = txn.init_producer_id(conn, transactional_id="w", transaction_timeout_ms=600_000)
    offs = {}
    for p in (0, 1):
        offs[p] = log.produce(
            conn,
            topic=T,
            partition=p,
            records=[RecordIn(value=value(0, p))],
            producer_id=ident.producer_id,
            producer_epoch=ident.epoch,
            base_sequence=0,
            transactional_id="w",
            txn_number=1,
        ).base_offset
    return ident, offs


def _commit(conn: sa.Connection, ident: txn.TransactionalIdentity) -> None:
    assert (
        txn.end_txn(
            conn, transactional_id="w", producer_id=ident.producer_id, epoch=ident.epoch, txn_number=1, commit=True
        )
        == "committed"
    )


def test_reading_partitions_in_separate_snapshots_can_see_a_partial_transaction(conn: sa.Connection) -> None:
    """The contrast: partition 0 read, then the commit, then partition 1 read in a new statement. The
    combined result holds transaction 0 on partition 1 only, and the checker says so."""
    ident, offs = _open_transaction_on_partitions_0_and_1(conn)
    first = log.fetch_many(conn, {(T, 0): 0})[(T, 0)]
    _commit(conn, ident)
    second = log.fetch_many(conn, {(T, 1): 0})[(T, 1)]
    assert first.records == [] and [r.value for r in second.records] == [value(0, 1)]
    checker = PollChecker({0: offs}, closure=True)
    got: dict[int, list[tuple[int, int]]] = {0: [], 1: [(offs[1], 0)], 2: [], 3: []}
    checker.poll(got, {0: first.last_stable_offset or 0, 1: offs[1] + 1, 2: 0, 3: 0})
    assert checker.violations == ["poll 1: transaction 0 returned without partitions [0]"]
    # The same through the committed_records view, one statement per partition.
    ident2 = txn.init_producer_id(conn, transactional_id="w2", transaction_timeout_ms=600_000)
    for p in (2, 3):
        log.produce(
            conn,
            topic=T,
            partition=p,
            records=[RecordIn(value=value(1, p))],
            producer_id=ident2.producer_id,
            producer_epoch=ident2.epoch,
            base_sequence=0,
            transactional_id="w2",
            txn_number=1,
        )
    q = "SELECT value FROM committed_records WHERE topic = %(t)s AND partition = %(p)s"
    on2 = conn.exec_driver_sql(q, {"t": T, "p": 2}).scalars().all()
    txn.end_txn(
        conn, transactional_id="w2", producer_id=ident2.producer_id, epoch=ident2.epoch, txn_number=1, commit=True
    )
    on3 = conn.exec_driver_sql(q, {"t": T, "p": 3}).scalars().all()
    assert (on2, on3) == ([], [value(1, 3)])  # partial: seen on 3, not on 2
    # In ONE statement, it is all or nothing.
    both = conn.exec_driver_sql(
        "SELECT partition, value FROM committed_records WHERE topic = %(t)s AND partition IN (2, 3) ORDER BY partition",
        {"t": T},
    ).all()
    assert [tuple(r) for r in both] == [(2, value(1, 2)), (3, value(1, 3))]


def test_the_checker_reports_a_skipped_record() -> None:
    """A reader whose position on partition 1 passed transaction 0's record without returning it."""
    checker = PollChecker({0: {p: 10 + p for p in range(PARTITIONS)}}, closure=False)
    checker.poll({0: [(10, 0)], 1: [], 2: [], 3: []}, {0: 11, 1: 12, 2: 0, 3: 0})
    assert checker.violations == [
        "poll 1: transaction 0 was returned on [0] but partition 1's position 12 passed its record at 11"
    ]
    ok = PollChecker({0: {p: 10 + p for p in range(PARTITIONS)}}, closure=False)
    ok.poll({0: [(10, 0)], 1: [], 2: [], 3: []}, {0: 11, 1: 11, 2: 12, 3: 13})
    assert ok.violations == []


# --- a second transactional writer -------------------------------------------------------------


def test_another_open_transaction_does_not_make_a_committed_one_partially_visible(
    conn: sa.Connection, db_url: str
) -> None:
    """fetch_many's and the Consumer's documented promise ("a transaction that spans partitions is
    returned on all of them or on none"), with two transactional producers: A has a transaction open
    on partition 0; B then writes partitions 0 and 1 and commits. Partition 0's last stable offset is
    held at A's first record, so B's record there is not readable yet -- and B's record on partition 1
    must then not be returned either (it is: B is seen on partition 1 only)."""
    a = txn.init_producer_id(conn, transactional_id="A", transaction_timeout_ms=600_000)
    b = txn.init_producer_id(conn, transactional_id="B", transaction_timeout_ms=600_000)

    def send(tid: str, ident: txn.TransactionalIdentity, p: int, k: int) -> None:
        log.produce(
            conn,
            topic=T,
            partition=p,
            records=[RecordIn(value=value(k, p))],
            producer_id=ident.producer_id,
            producer_epoch=ident.epoch,
            base_sequence=0,
            transactional_id=tid,
            txn_number=1,
        )

    send("A", a, 0, 0)  # A open on partition 0 (offset 0)
    send("B", b, 0, 1)  # B: partition 0 offset 1, partition 1 offset 0
    send("B", b, 1, 1)
    assert (
        txn.end_txn(conn, transactional_id="B", producer_id=b.producer_id, epoch=b.epoch, txn_number=1, commit=True)
        == "committed"
    )

    res = log.fetch_many(conn, {(T, 0): 0, (T, 1): 0}, max_records=BIG)
    via_fetch = {p: [parse(r.value)[0] for r in res[(T, p)].records if r.value] for p in (0, 1)}
    with Consumer(db_url, max_poll_records=BIG) as consumer:
        consumer.assign([TopicPartition(T, 0), TopicPartition(T, 1)])
        consumer.seek(TopicPartition(T, 0), 0)
        consumer.seek(TopicPartition(T, 1), 0)
        polled = consumer.poll(timeout=0)
    via_consumer = {p: [parse(r.value)[0] for r in polled if r.partition == p] for p in (0, 1)}
    view = conn.exec_driver_sql(
        "SELECT partition, value FROM committed_records WHERE topic = %(t)s AND partition IN (0, 1)", {"t": T}
    ).all()
    via_view = {p: [parse(v)[0] for q, v in view if q == p] for p in (0, 1)}
    # All or none: B on both partitions, or on neither.
    # The committed_records view cuts each partition at its own last stable offset (documented in
    # docs/design.md); all-or-none across partitions is the fetch's and the Spark reader's job
    # (consistent_limits_v1). So the view shows B on partition 1 only while A holds partition 0.
    assert via_view == {0: [], 1: [1]}
    seen = {"fetch_many": via_fetch, "consumer": via_consumer}
    partial = {name: got for name, got in seen.items() if (1 in got[0]) != (1 in got[1])}
    assert partial == {}, f"transaction B returned on one partition only: {partial}"
