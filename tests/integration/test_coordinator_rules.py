"""The transaction coordinator's rules, one test per rule or scenario, at the store seam.

Rules 11-21 and 25-28 and scenarios 6, 8, 9, 13, 16, 17, 21, 22 and 25 (as numbered in docs/concepts.md), through
``oncelog.store.txn`` / ``oncelog.store.log`` on an autocommit connection (each call is one database
transaction, as a client request would be). Where a test needs a state that cannot be reached
through the public functions in a test's time, it sets it with SQL and says so:

* an epoch near 32767: ``UPDATE producers SET epoch = ...``;
* a transaction open past its timeout: ``txn_started_at`` moved back (no sleeping);
* a transactional id idle for days: ``expire_transactions`` with the server's clock moved on
  (tests.support.clock).

No test asserts on wall-clock time.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from oncelog import errors
from oncelog.store import log, topics, txn
from oncelog.store.records import ProduceResult, RecordIn
from oncelog.store.txn import TransactionalIdentity
from tests.support.clock import server_time

T = "orders"
PARTITIONS = 4
TIMEOUT_MS = 60_000
TOP_EPOCH = 32767  # Short.MaxValue: reserved for fencing (rule 13)
EXHAUSTED = 32766


@pytest.fixture
def conn(conn: sa.Connection) -> sa.Connection:
    """The autocommit connection of conftest, with the topic created."""
    topics.create_topic(conn, name=T, partitions=PARTITIONS)
    return conn


# --- helpers ---------------------------------------------------------------------------------


def init(
    conn: sa.Connection,
    tid: str = "app",
    *,
    timeout_ms: int = TIMEOUT_MS,
    pid: int | None = None,
    epoch: int | None = None,
) -> TransactionalIdentity:
    return txn.init_producer_id(
        conn, transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=pid, epoch=epoch
    )


class Instance:
    """One producer instance of a transactional id, as a client library would drive the store: the
    identity from its last InitProducerId, the number of its current transaction, its sequences."""

    def __init__(self, conn: sa.Connection, tid: str, ident: TransactionalIdentity) -> None:
        self.conn = conn
        self.tid = tid
        self.adopt(ident)

    @classmethod
    def start(cls, conn: sa.Connection, tid: str = "app", **kw: Any) -> Instance:
        return cls(conn, tid, init(conn, tid, **kw))

    def adopt(self, ident: TransactionalIdentity) -> None:
        self.ident = ident
        self.n = ident.txn_number + 1
        self.seq: dict[int, int] = defaultdict(int)

    def reinit(self, **kw: Any) -> TransactionalIdentity:
        """KIP-360: InitProducerId naming the identity this instance holds."""
        ident = init(self.conn, self.tid, pid=self.ident.producer_id, epoch=self.ident.epoch, **kw)
        self.adopt(ident)
        return ident

    @property
    def pid(self) -> int:
        return self.ident.producer_id

    @property
    def epoch(self) -> int:
        return self.ident.epoch

    def send(self, partition: int, *values: bytes, n: int | None = None, topic: str = T) -> ProduceResult:
        res: ProduceResult = log.produce(self.conn, **self._batch(partition, values, n, topic))
        self.seq[partition] += len(values or (b"v",))
        return res

    def send_and_commit(self, partition: int, *values: bytes, seq: int | None = None) -> tuple[ProduceResult, str]:
        """The transactional producer's commit path: its last batch with EndTxn (commit), one call.
        With ``seq``, a resend of an earlier batch (this instance's sequences stay as they are)."""
        batch = self._batch(partition, values, None, T)
        if seq is not None:
            batch["base_sequence"] = seq
        res, outcome = log.produce_end_txn(self.conn, **batch)
        if seq is None:
            self.seq[partition] += len(batch["records"])
        return res, outcome

    def _batch(self, partition: int, values: tuple[bytes, ...], n: int | None, topic: str) -> dict[str, Any]:
        """A transactional batch of this instance, at its next sequence, in transaction ``n`` (default: current)."""
        return {
            "topic": topic,
            "partition": partition,
            "records": [RecordIn(value=v) for v in values or (b"v",)],
            "producer_id": self.pid,
            "producer_epoch": self.epoch,
            "base_sequence": self.seq[partition],
            "transactional_id": self.tid,
            "txn_number": self.n if n is None else n,
        }

    def send_plain(self, partition: int, *values: bytes) -> ProduceResult:
        """An idempotent, non-transactional write with this instance's producer id (rule 6)."""
        vals = values or (b"plain",)
        res = log.produce(
            self.conn,
            topic=T,
            partition=partition,
            records=[RecordIn(value=v) for v in vals],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq[partition],
        )
        self.seq[partition] += len(vals)
        return res

    def add(self, *partitions: int, n: int | None = None, topic: str = T) -> None:
        txn.add_partitions_to_txn(
            self.conn,
            transactional_id=self.tid,
            producer_id=self.pid,
            epoch=self.epoch,
            txn_number=self.n if n is None else n,
            partitions=[(topic, p) for p in partitions],
        )

    def end(self, commit: bool, *, n: int | None = None) -> str:
        number = self.n if n is None else n
        out = txn.end_txn(
            self.conn,
            transactional_id=self.tid,
            producer_id=self.pid,
            epoch=self.epoch,
            txn_number=number,
            commit=commit,
        )
        if out in ("committed", "aborted", "aborted_timed_out") and number == self.n:
            self.n += 1
        return out

    def commit(self, **kw: Any) -> str:
        return self.end(True, **kw)

    def abort(self, **kw: Any) -> str:
        return self.end(False, **kw)


def plain(conn: sa.Connection, partition: int, *values: bytes) -> ProduceResult:
    """A write without a producer id."""
    return log.produce(conn, topic=T, partition=partition, records=[RecordIn(value=v) for v in values])


def status(conn: sa.Connection, tid: str = "app") -> txn.TransactionStatus:
    return txn.describe_transaction(conn, transactional_id=tid)


def history(conn: sa.Connection, tid: str = "app") -> list[tuple[str | None, str, int, int, int]]:
    rows = conn.exec_driver_sql(
        "SELECT from_state, to_state, producer_id, producer_epoch, txn_number FROM txn_history "
        "WHERE transactional_id = %(t)s ORDER BY id",
        {"t": tid},
    ).all()
    return [tuple(r) for r in rows]


def markers(conn: sa.Connection) -> list[tuple[int, int, str, int, int]]:
    """Every control record of the topic: (partition, offset, type, producer id, epoch)."""
    rows = conn.exec_driver_sql(
        'SELECT r.partition, r."offset", r.control_type, r.producer_id, r.producer_epoch '
        "FROM records r JOIN topics t USING (topic_id) WHERE t.name = %(t)s AND r.control_type IS NOT NULL "
        'ORDER BY r.partition, r."offset"',
        {"t": T},
    ).all()
    return [tuple(r) for r in rows]


def read(conn: sa.Connection, *, committed: bool = True, parts: range = range(PARTITIONS)) -> dict[int, list[bytes]]:
    """Values of each partition from offset 0, in one snapshot."""
    got = log.fetch_many(conn, {(T, p): 0 for p in parts}, max_records=10_000, read_committed=committed)
    return {p: [r.value for r in got[(T, p)].records if r.value is not None] for p in parts}


def offsets(conn: sa.Connection) -> dict[int, tuple[int, int]]:
    """(high watermark, last stable offset) of each partition, from the partition_offsets view."""
    rows = conn.exec_driver_sql(
        "SELECT partition, high_watermark, last_stable_offset FROM partition_offsets WHERE topic = %(t)s",
        {"t": T},
    ).all()
    return {int(r[0]): (int(r[1]), int(r[2])) for r in rows}


def lso(conn: sa.Connection, partition: int) -> int:
    """The last stable offset of one partition, checked to agree in all three places that report it."""
    view = offsets(conn)[partition][1]
    fetched = log.fetch_many(conn, {(T, partition): 0}, read_committed=True)[(T, partition)].last_stable_offset
    listed = next(p.last_stable_offset for p in log.list_offsets(conn, topic=T) if p.partition == partition)
    assert view == fetched == listed, (view, fetched, listed)
    return view


def hw(conn: sa.Connection, partition: int) -> int:
    return offsets(conn)[partition][0]


def db_now(conn: sa.Connection) -> datetime:
    return conn.exec_driver_sql("SELECT clock_timestamp()").scalar_one()  # type: ignore[no-any-return]


def age_open_transaction(conn: sa.Connection, tid: str = "app", by: timedelta = timedelta(hours=2)) -> None:
    """Test setup standing in for time passing: the open transaction started ``by`` earlier."""
    n = conn.exec_driver_sql(
        "UPDATE transactions SET txn_started_at = txn_started_at - %(by)s "
        "WHERE transactional_id = %(t)s AND state = 'Ongoing'",
        {"by": by, "t": tid},
    ).rowcount
    assert n == 1, "no open transaction to age"


def set_epoch(conn: sa.Connection, inst: Instance, epoch: int) -> None:
    """Test setup standing in for ~32k epoch bumps: the producer id's epoch is set directly, and the
    instance takes it as if InitProducerId had returned it."""
    conn.exec_driver_sql(
        "UPDATE producers SET epoch = %(e)s, last_epoch = NULL WHERE producer_id = %(p)s",
        {"e": epoch, "p": inst.pid},
    )
    n = inst.n
    inst.adopt(replace(inst.ident, epoch=epoch))
    inst.n = n


# --- rule 11: InitProducerId validation ------------------------------------------------------


@pytest.mark.parametrize("tid", ["", "x" * 256])
def test_init_with_an_empty_or_overlong_transactional_id_is_an_invalid_request(conn: sa.Connection, tid: str) -> None:
    with pytest.raises(errors.InvalidRequestError):
        init(conn, tid)
    assert conn.exec_driver_sql("SELECT count(*) FROM transactions").scalar_one() == 0


def test_init_timeout_must_be_within_the_configured_maximum(conn: sa.Connection) -> None:
    maximum = conn.exec_driver_sql("SELECT transaction_max_timeout_ms FROM settings").scalar_one()
    assert maximum == 900_000
    for bad in (0, -1, maximum + 1):
        with pytest.raises(errors.InvalidTransactionTimeoutError):
            init(conn, "app", timeout_ms=bad)
    assert conn.exec_driver_sql("SELECT count(*) FROM transactions").scalar_one() == 0
    assert init(conn, "app", timeout_ms=maximum).epoch == 0
    # The limit is the setting's, not a constant.
    conn.exec_driver_sql("UPDATE settings SET transaction_max_timeout_ms = 1000")
    with pytest.raises(errors.InvalidTransactionTimeoutError):
        init(conn, "other", timeout_ms=1001)
    # ...also on a bump of an existing id, which then changes nothing.
    with pytest.raises(errors.InvalidTransactionTimeoutError):
        init(conn, "app", timeout_ms=1001)
    assert status(conn).producer_epoch == 0
    assert status(conn).timeout_ms == maximum
    ident = init(conn, "app", timeout_ms=1000)
    assert ident.epoch == 1
    assert status(conn).timeout_ms == 1000


def test_first_init_is_epoch_0_in_state_empty(conn: sa.Connection) -> None:
    ident = init(conn)
    assert (ident.epoch, ident.txn_number) == (0, 0)
    st = status(conn)
    assert (st.state, st.producer_id, st.producer_epoch, st.txn_number) == ("Empty", ident.producer_id, 0, 0)
    other = init(conn, "other")
    assert other.producer_id != ident.producer_id  # one producer id per transactional id


def test_each_init_bumps_the_epoch_and_fences_the_previous_instance(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0)
    a.commit()
    b = Instance.start(conn)
    c = Instance.start(conn)
    assert [x.epoch for x in (a, b, c)] == [0, 1, 2]
    assert {x.pid for x in (a, b, c)} == {a.pid}
    assert c.ident.txn_number == 1  # the transaction number survives the bump
    for zombie in (a, b):
        with pytest.raises(errors.ProducerFencedError):
            zombie.send(0)
        with pytest.raises(errors.ProducerFencedError):
            zombie.commit()
    c.send(0, b"c")
    assert c.commit() == "committed"
    assert read(conn)[0] == [b"v", b"c"]


# --- rule 12: KIP-360 ------------------------------------------------------------------------


def test_kip360_bump_retry_and_stale_epochs(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    pid = a.pid
    assert init(conn, pid=pid, epoch=0) == TransactionalIdentity(pid, 1, 0)
    # The reply was lost; the same request again gets the same answer and bumps nothing.
    assert init(conn, pid=pid, epoch=0) == TransactionalIdentity(pid, 1, 0)
    assert status(conn).producer_epoch == 1
    assert init(conn, pid=pid, epoch=1) == TransactionalIdentity(pid, 2, 0)
    for stale in (0, 7):  # two bumps old, and never issued
        with pytest.raises(errors.ProducerFencedError):
            init(conn, pid=pid, epoch=stale)
    with pytest.raises(errors.ProducerFencedError):  # not this id's producer id
        init(conn, pid=pid + 1000, epoch=2)
    assert status(conn).producer_epoch == 2  # refusals burn no epoch (KAFKA-9666)
    # A plain InitProducerId (a new instance) forgets the retry window: the epoch before it is fenced.
    assert init(conn).epoch == 3
    with pytest.raises(errors.ProducerFencedError):
        init(conn, pid=pid, epoch=2)


def test_kip360_retry_after_the_new_epoch_started_a_transaction_is_fenced(conn: sa.Connection) -> None:
    """oncelog's documented rule: a retried bump returns the current identity unless a transaction was
    opened with it meanwhile (Kafka would abort that transaction); it is refused and the transaction lives."""
    a = Instance.start(conn)
    old = a.ident
    a.reinit()
    a.send(0, b"x")
    with pytest.raises(errors.ProducerFencedError):
        init(conn, pid=old.producer_id, epoch=old.epoch)
    st = status(conn)
    assert (st.state, st.producer_epoch) == ("Ongoing", 1)
    assert a.commit() == "committed"
    assert read(conn)[0] == [b"x"]


def test_kip360_bump_with_an_open_transaction_aborts_it(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"lost")
    old = a.ident
    assert a.reinit() == TransactionalIdentity(old.producer_id, 1, 1)
    assert status(conn).state == "Empty"
    assert read(conn)[0] == []
    assert markers(conn) == [(0, 1, "abort", old.producer_id, 1)]
    # a retry of that bump gets the same answer
    assert init(conn, pid=old.producer_id, epoch=old.epoch) == a.ident
    a.send(0, b"kept")
    a.commit()
    assert read(conn)[0] == [b"kept"]


# --- rule 13 / scenario 8: epoch exhaustion -----------------------------------------------------


@pytest.mark.parametrize("kip360", [False, True])
def test_epoch_exhaustion_gives_a_new_producer_id_at_epoch_0(conn: sa.Connection, kip360: bool) -> None:
    a = Instance.start(conn)
    a.send(0, b"one")
    a.commit()
    set_epoch(conn, a, EXHAUSTED)  # setup: 32766 bumps
    a.send(0, b"two")  # the exhausted epoch itself is usable
    a.commit()
    old = a.ident
    ident = a.reinit() if kip360 else init(conn)
    assert ident.producer_id != old.producer_id
    assert (ident.epoch, ident.txn_number) == (0, 2)
    st = status(conn)
    assert (st.producer_id, st.producer_epoch, st.state) == (ident.producer_id, 0, "Empty")
    # The old producer id no longer serves the transactional id.
    zombie = Instance(conn, "app", old)
    zombie.n = 3
    with pytest.raises(errors.InvalidProducerIdMappingError):
        zombie.send(0)
    fresh = Instance(conn, "app", ident)
    fresh.send(0, b"three")
    fresh.commit()
    assert read(conn)[0] == [b"one", b"two", b"three"]


def test_kip360_retry_of_an_exhausted_epoch_bump_gets_the_same_answer(conn: sa.Connection) -> None:
    """Rule 12: the previous producer id with an exhausted epoch is a valid KIP-360 caller (a retry
    of the bump that rotated the producer id); it gets the current identity, not PRODUCER_FENCED."""
    a = Instance.start(conn)
    set_epoch(conn, a, EXHAUSTED)  # setup
    old = a.ident
    first = init(conn, pid=old.producer_id, epoch=old.epoch)
    assert first.producer_id != old.producer_id and first.epoch == 0
    # The reply was lost: the same request again.
    again = init(conn, pid=old.producer_id, epoch=old.epoch)
    assert again == first


def test_init_never_hands_out_the_reserved_epoch(conn: sa.Connection) -> None:
    """Rule 13: 32767 is reserved for fencing. A new instance taking over an open transaction at epoch
    32766 fences it with 32767; the epoch it is given must then be a new producer id's (Kafka: the
    client retries after CONCURRENT_TRANSACTIONS and finds the epoch exhausted)."""
    a = Instance.start(conn)
    set_epoch(conn, a, EXHAUSTED)  # setup
    a.send(0, b"open")
    b = init(conn)
    assert b.epoch < EXHAUSTED or b.producer_id != a.pid, b
    assert b.epoch != TOP_EPOCH, b


@pytest.mark.parametrize("fence", ["init", "operator_abort", "timeout"])
def test_a_fence_at_the_top_of_the_epoch_range_still_fences(conn: sa.Connection, fence: str) -> None:
    """Scenarios 6, 13, 25 near the epoch limit. Instance B takes over from A, whose transaction at
    epoch 32766 was open (the only set-up by SQL is A's epoch). B opens a transaction; then B is
    fenced (a new instance, an operator's abort, or its timeout). B must not be able to write again
    with the identity it holds."""
    a = Instance.start(conn)
    set_epoch(conn, a, EXHAUSTED)  # setup
    a.send(0, b"a")
    b = Instance.start(conn)
    b.send(0, b"b")
    if fence == "init":
        Instance.start(conn)
    elif fence == "operator_abort":
        txn.abort_transaction(conn, transactional_id="app")
    else:
        age_open_transaction(conn)  # setup: B's transaction is past its timeout
        assert txn.expire_transactions(conn) == 1
    assert status(conn).state in ("Empty", "CompleteAbort")
    b.n += 1  # B goes on with its next transaction, as a zombie would
    with pytest.raises(
        (errors.ProducerFencedError, errors.InvalidProducerEpochError, errors.InvalidProducerIdMappingError)
    ):
        b.send(1, b"zombie")
    assert read(conn, committed=False)[1] == []


# --- scenario 6: zombie fencing ------------------------------------------------------------


def test_init_while_a_transaction_is_ongoing_aborts_it_and_fences_the_old_epoch(conn: sa.Connection) -> None:
    plain(conn, 0, b"before")
    a = Instance.start(conn)
    a.send(0, b"a0", b"a0'")
    a.send(1, b"a1")
    assert lso(conn, 0) == 1
    b = Instance.start(conn)
    assert (b.pid, b.epoch, b.ident.txn_number) == (a.pid, 1, 1)
    st = status(conn)
    assert (st.state, st.producer_epoch, st.partitions) == ("Empty", 1, [])
    # The aborted records stay in the log, flagged; one abort marker per partition, at the new epoch.
    assert markers(conn) == [(0, 3, "abort", a.pid, 1), (1, 1, "abort", a.pid, 1)]
    assert read(conn, committed=False) == {0: [b"before", b"a0", b"a0'"], 1: [b"a1"], 2: [], 3: []}
    assert read(conn) == {0: [b"before"], 1: [], 2: [], 3: []}
    assert (lso(conn, 0), lso(conn, 1)) == (hw(conn, 0), hw(conn, 1))
    assert history(conn)[-3:] == [
        ("Ongoing", "PrepareAbort", a.pid, 1, 1),
        ("PrepareAbort", "CompleteAbort", a.pid, 1, 1),
        ("CompleteAbort", "Empty", a.pid, 1, 1),
    ]
    # The zombie can neither write, add, commit nor abort, in that transaction or a later one.
    for n in (1, 2):
        with pytest.raises(errors.ProducerFencedError):
            a.send(2, n=n)
        with pytest.raises(errors.ProducerFencedError):
            a.add(2, n=n)
        with pytest.raises(errors.ProducerFencedError):
            a.commit(n=n)
        with pytest.raises(errors.ProducerFencedError):
            a.abort(n=n)
    b.send(0, b"b0")
    b.send(2, b"b2")
    assert b.commit() == "committed"
    assert read(conn) == {0: [b"before", b"b0"], 1: [], 2: [b"b2"], 3: []}


# --- rule 14: AddPartitionsToTxn -------------------------------------------------------------


def test_add_partitions_refuses_unknown_ids_and_wrong_producer_ids(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    other = Instance.start(conn, "other")
    stranger = Instance(conn, "nobody", a.ident)  # a transactional id never initialised
    with pytest.raises(errors.InvalidProducerIdMappingError):
        stranger.add(0)
    with pytest.raises(errors.InvalidProducerIdMappingError):
        stranger.send(0)
    wrong = Instance(conn, "app", other.ident)  # another id's producer id
    with pytest.raises(errors.InvalidProducerIdMappingError):
        wrong.add(0)
    with pytest.raises(errors.InvalidProducerIdMappingError):
        wrong.commit()
    assert status(conn).state == "Empty"


def test_add_partitions_with_a_stale_epoch_is_fenced(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    Instance.start(conn)
    with pytest.raises(errors.ProducerFencedError):
        a.add(0)
    assert (status(conn).state, status(conn).partitions) == ("Empty", [])


def test_add_partitions_opens_the_transaction_and_is_idempotent(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.add(0, 1)
    a.add(1, 0)  # already present: fine
    a.add(1)
    st = status(conn)
    assert (st.state, st.txn_number) == ("Ongoing", 1)
    assert st.partitions == [f"{T}-0@-", f"{T}-1@-"]
    assert history(conn) == [(None, "Empty", a.pid, 0, 0), ("Empty", "Ongoing", a.pid, 0, 1)]
    # An added partition that was never written holds no last stable offset back and gets no marker.
    plain(conn, 1, b"p")
    assert read(conn)[1] == [b"p"]
    a.send(0, b"x")
    assert a.commit() == "committed"
    assert markers(conn) == [(0, 1, "commit", a.pid, 0)]


def test_add_partitions_with_an_unknown_partition_changes_nothing(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        a.add(0, PARTITIONS)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        a.add(0, topic="no-such-topic")
    st = status(conn)
    assert (st.state, st.txn_number, st.partitions) == ("Empty", 0, [])  # not even opened
    a.add(0)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        a.add(1, PARTITIONS + 3)
    assert status(conn).partitions == [f"{T}-0@-"]
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        a.send(PARTITIONS)
    assert status(conn).partitions == [f"{T}-0@-"]


# --- transaction numbers: a delayed call of transaction N cannot touch N+1 ---------------------


def _n_committed_and_n_plus_1_open(conn: sa.Connection) -> Instance:
    a = Instance.start(conn)
    a.send(0, b"n1")
    assert a.commit() == "committed"
    a.send(1, b"n2")
    assert (status(conn).state, status(conn).txn_number) == ("Ongoing", 2)
    return a


def test_a_delayed_produce_of_a_completed_transaction_cannot_join_the_next(conn: sa.Connection) -> None:
    a = _n_committed_and_n_plus_1_open(conn)
    before = (offsets(conn), status(conn).partitions)
    with pytest.raises(errors.InvalidTxnStateError):
        a.send(2, b"late-n1", n=1)
    with pytest.raises(errors.InvalidTxnStateError):
        a.send(1, b"late-n1", n=1)
    assert (offsets(conn), status(conn).partitions) == before  # nothing written, nothing added
    assert a.commit() == "committed"
    assert read(conn) == {0: [b"n1"], 1: [b"n2"], 2: [], 3: []}


def test_a_delayed_add_of_a_completed_transaction_cannot_join_the_next(conn: sa.Connection) -> None:
    a = _n_committed_and_n_plus_1_open(conn)
    with pytest.raises(errors.InvalidTxnStateError):
        a.add(3, n=1)
    assert status(conn).partitions == [f"{T}-1@0"]


@pytest.mark.parametrize("commit", [True, False])
def test_a_delayed_end_of_a_completed_transaction_cannot_end_the_next(conn: sa.Connection, commit: bool) -> None:
    a = _n_committed_and_n_plus_1_open(conn)
    with pytest.raises(errors.InvalidTxnStateError):
        a.end(commit, n=1)
    st = status(conn)
    assert (st.state, st.txn_number) == ("Ongoing", 2)
    assert markers(conn) == [(0, 1, "commit", a.pid, 0)]
    assert a.abort() == "aborted"
    assert read(conn) == {0: [b"n1"], 1: [], 2: [], 3: []}


def test_a_delayed_produce_cannot_reopen_a_completed_transaction(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"n1")
    a.commit()
    hw_before = hw(conn, 0)
    with pytest.raises(errors.InvalidTxnStateError):
        a.send(0, b"late", n=1)
    with pytest.raises(errors.InvalidTxnStateError):  # nor skip a number
        a.send(0, b"early", n=3)
    st = status(conn)
    assert (st.state, st.txn_number, hw(conn, 0)) == ("CompleteCommit", 1, hw_before)


def test_ending_a_transaction_that_never_reached_the_store_uses_up_its_number(conn: sa.Connection) -> None:
    """Documented: EndTxn of N after N-1 completed opens and completes N empty (no markers), so a
    write of N arriving after it cannot open N."""
    a = Instance.start(conn)
    assert a.commit() == "committed"
    st = status(conn)
    assert (st.state, st.txn_number) == ("CompleteCommit", 1)
    assert markers(conn) == []
    with pytest.raises(errors.InvalidTxnStateError):
        a.send(0, b"late", n=1)
    assert hw(conn, 0) == 0
    assert a.commit(n=1) == "already_committed"


# --- rule 16 / scenario 9: EndTxn ------------------------------------------------------------


def test_commit_writes_one_marker_per_written_partition_in_one_database_transaction(conn: sa.Connection) -> None:
    plain(conn, 2, b"p")
    a = Instance.start(conn)
    a.send(0, b"x0", b"y0")
    a.send(2, b"x2")
    a.send(0, b"z0")
    a.add(1)  # added, never written: no marker
    ends = {p: hw(conn, p) for p in range(PARTITIONS)}
    assert a.commit() == "committed"
    assert markers(conn) == [(0, ends[0], "commit", a.pid, 0), (2, ends[2], "commit", a.pid, 0)]
    # Markers, the final state and the journal rows were all written by one database transaction.
    xids = conn.exec_driver_sql(
        "SELECT DISTINCT xmin::text FROM records WHERE control_type IS NOT NULL "
        "UNION SELECT xmin::text FROM transactions WHERE transactional_id = 'app' "
        "UNION SELECT xmin::text FROM txn_history WHERE to_state IN ('PrepareCommit', 'CompleteCommit')"
    ).all()
    assert len(xids) == 1, xids
    assert read(conn) == {0: [b"x0", b"y0", b"z0"], 1: [], 2: [b"p", b"x2"], 3: []}
    assert all(lso(conn, p) == hw(conn, p) for p in range(PARTITIONS))


def test_a_reader_never_sees_a_commit_half_done(engine: sa.Engine, conn: sa.Connection) -> None:
    """While a commit has written its first markers but waits for the lock of the last partition, a
    reader sees none of the transaction; once it finishes, all of it."""
    a = Instance.start(conn)
    for p in range(PARTITIONS):
        a.send(p, f"x{p}".encode())
    with engine.connect() as blocker, engine.connect() as committer_conn:
        committer_conn.execution_options(isolation_level="AUTOCOMMIT")
        committer_pid = committer_conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        # Hold the last partition's row lock, so the commit stops before its last marker.
        blocker.exec_driver_sql(
            "SELECT 1 FROM partitions pt JOIN topics t USING (topic_id) "
            "WHERE t.name = %(t)s AND pt.partition = %(p)s FOR UPDATE",
            {"t": T, "p": PARTITIONS - 1},
        )
        outcome: list[object] = []

        def commit() -> None:
            try:
                outcome.append(
                    txn.end_txn(
                        committer_conn,
                        transactional_id="app",
                        producer_id=a.pid,
                        epoch=a.epoch,
                        txn_number=a.n,
                        commit=True,
                    )
                )
            except Exception as exc:  # reported below
                outcome.append(exc)

        th = threading.Thread(target=commit)
        th.start()
        try:
            for _ in range(3000):  # wait (bounded) until the commit is blocked on the lock
                waiting = conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_locks WHERE pid = %(p)s AND NOT granted", {"p": committer_pid}
                ).scalar_one()
                if waiting:
                    break
                threading.Event().wait(0.01)
            else:
                pytest.fail("the commit never waited for the partition lock")
            assert read(conn) == {p: [] for p in range(PARTITIONS)}
            assert markers(conn) == []
            assert status(conn).state == "Ongoing"
            assert all(lso(conn, p) == 0 for p in range(PARTITIONS))
            assert conn.exec_driver_sql("SELECT count(*) FROM committed_records").scalar_one() == 0
        finally:
            blocker.rollback()
            th.join(60)
    assert outcome == ["committed"]
    assert read(conn) == {p: [f"x{p}".encode()] for p in range(PARTITIONS)}


def test_a_retried_commit_has_no_second_effect_and_an_abort_after_it_is_refused(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"x")
    a.send(1, b"y")
    n = a.n
    assert a.commit() == "committed"
    before = (markers(conn), offsets(conn), history(conn))
    assert a.commit(n=n) == "already_committed"
    assert a.commit(n=n) == "already_committed"
    with pytest.raises(errors.InvalidTxnStateError):
        a.abort(n=n)
    assert (markers(conn), offsets(conn), history(conn)) == before
    assert read(conn)[0] == [b"x"]


def test_a_retried_abort_has_no_second_effect_and_a_commit_after_it_is_refused(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"x")
    n = a.n
    assert a.abort() == "aborted"
    before = (markers(conn), offsets(conn), history(conn))
    assert a.abort(n=n) == "already_aborted"
    with pytest.raises(errors.InvalidTxnStateError):
        a.commit(n=n)
    assert (markers(conn), offsets(conn), history(conn)) == before
    assert read(conn)[0] == []


def test_commit_of_the_wrong_transaction_number_is_refused(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"x")  # transaction 1 is open
    for wrong in (0, 2, 5):
        with pytest.raises(errors.InvalidTxnStateError):
            a.commit(n=wrong)
        with pytest.raises(errors.InvalidTxnStateError):
            a.abort(n=wrong)
    st = status(conn)
    assert (st.state, st.txn_number) == ("Ongoing", 1)
    assert markers(conn) == []
    assert a.commit() == "committed"


def test_empty_state_cannot_be_committed_again(conn: sa.Connection) -> None:
    """Rule 16: EndTxn in Empty (naming the last transaction number) -> INVALID_TXN_STATE."""
    a = Instance.start(conn)
    a.send(0)
    a.commit()
    a.reinit()  # Empty, transaction number 1
    with pytest.raises(errors.InvalidTxnStateError):
        a.commit(n=1)
    assert status(conn).state == "Empty"


# --- rule 20 / scenario 13: the transaction timeout ------------------------------------------


def test_commit_after_the_timeout_aborts_and_the_holder_recovers_with_kip360(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"late")
    a.send(1, b"late")
    age_open_transaction(conn)  # setup: the transaction has been open for two hours
    assert status(conn).expired
    # A write is refused, and writes nothing.
    with pytest.raises(errors.TransactionTimeoutError):
        a.send(2, b"later")
    assert hw(conn, 2) == 0
    n, old = a.n, a.ident
    with pytest.raises(errors.TransactionTimeoutError):
        a.commit()
    st = status(conn)
    assert (st.state, st.producer_epoch, st.txn_number) == ("CompleteAbort", old.epoch + 1, n)
    assert markers(conn) == [(0, 1, "abort", a.pid, 1), (1, 1, "abort", a.pid, 1)]
    assert read(conn) == {p: [] for p in range(PARTITIONS)}
    # The holder of the fenced epoch: abortable errors, its abort is satisfied.
    a.n = n + 1
    with pytest.raises(errors.InvalidProducerEpochError):
        a.send(0, b"x")
    assert a.abort(n=n) == "already_aborted_timed_out"  # the epoch was bumped: re-initialise
    with pytest.raises(errors.InvalidProducerEpochError):
        a.commit(n=n)
    # KIP-360 with the identity it holds: the current identity; it carries on.
    assert a.reinit() == TransactionalIdentity(old.producer_id, old.epoch + 1, n)
    a.send(0, b"ok")
    assert a.commit() == "committed"
    assert read(conn)[0] == [b"ok"]


def test_abort_after_the_timeout_aborts_and_fences_recoverably(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"late")
    age_open_transaction(conn)  # setup
    old = a.ident
    assert a.abort() == "aborted_timed_out"  # the epoch was bumped: re-initialise
    assert status(conn).producer_epoch == old.epoch + 1
    with pytest.raises(errors.InvalidProducerEpochError):
        a.send(0)
    assert a.reinit().epoch == old.epoch + 1


def test_expiry_aborts_only_transactions_past_their_timeout(conn: sa.Connection) -> None:
    a = Instance.start(conn, "a", timeout_ms=60_000)
    b = Instance.start(conn, "b", timeout_ms=600_000)
    a.send(0, b"a")
    b.send(1, b"b")
    now = db_now(conn)
    with server_time(conn, now):
        assert txn.expire_transactions(conn) == 0
    with server_time(conn, now + timedelta(minutes=2)):
        assert txn.expire_transactions(conn) == 1
    assert (status(conn, "a").state, status(conn, "b").state) == ("CompleteAbort", "Ongoing")
    assert status(conn, "a").producer_epoch == 1
    with pytest.raises(errors.InvalidProducerEpochError):
        a.send(0, b"a2")
    b.commit()
    assert read(conn) == {0: [], 1: [b"b"], 2: [], 3: []}


def test_a_reader_sees_an_expired_transaction_holding_the_lso_and_can_expire_it(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"stuck")
    plain(conn, 0, b"after")
    got = log.fetch_many(conn, {(T, 0): 0})[(T, 0)]
    assert (got.last_stable_offset, got.expired_transaction, got.records) == (0, False, [])
    age_open_transaction(conn)  # setup
    got = log.fetch_many(conn, {(T, 0): 0})[(T, 0)]
    assert (got.last_stable_offset, got.expired_transaction) == (0, True)
    assert txn.expire_transactions(conn) == 1
    assert read(conn)[0] == [b"after"]


def _wait_until_blocked(conn: sa.Connection, backend_pid: int) -> None:
    for _ in range(3000):  # bounded wait (not an assertion on time)
        if conn.exec_driver_sql(
            "SELECT count(*) FROM pg_locks WHERE pid = %(p)s AND NOT granted", {"p": backend_pid}
        ).scalar_one():
            return
        threading.Event().wait(0.01)
    pytest.fail(f"backend {backend_pid} never waited for a lock")


def test_expiring_several_transactions_keeps_the_lock_order(engine: sa.Engine, conn: sa.Connection) -> None:
    """The documented lock order (a transaction's row, then partition rows in order) must hold when one
    expire_transactions call aborts several transactions: it must not hold partition rows of the
    first while it locks those of the next. Here: X (partitions 1, 2) and Z (partition 0) are past
    their timeout; W (partitions 0, 1) commits meanwhile. Expiry takes partition 1 for X; W takes
    partition 0 and waits for 1; expiry then wants partition 0 for Z: a deadlock, and one of the two
    calls fails. Both must succeed."""
    ids = {t: Instance.start(conn, t) for t in ("x", "z", "w")}
    for t, parts in (("x", (1, 2)), ("z", (0,)), ("w", (0, 1))):
        for p in parts:
            ids[t].send(p, t.encode())
    age_open_transaction(conn, "x")  # setup: X and Z are past their timeout
    age_open_transaction(conn, "z")
    w = ids["w"]
    outcome: dict[str, object] = {}
    with engine.connect() as blocker, engine.connect() as c_exp, engine.connect() as c_commit:
        c_exp.execution_options(isolation_level="AUTOCOMMIT")
        c_commit.execution_options(isolation_level="AUTOCOMMIT")
        pids = {
            name: c.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            for name, c in (("e", c_exp), ("c", c_commit))
        }
        # Setup: partition 2 is held, so the expiry stops inside X's abort, holding partition 1.
        blocker.exec_driver_sql(
            "SELECT 1 FROM partitions pt JOIN topics t USING (topic_id) "
            "WHERE t.name = %(t)s AND pt.partition = 2 FOR UPDATE",
            {"t": T},
        )

        def run(name: str, call: Any) -> None:
            try:
                outcome[name] = call()
            except Exception as exc:  # reported below
                outcome[name] = exc

        expiry = threading.Thread(target=run, args=("expire", lambda: txn.expire_transactions(c_exp)))
        commit = threading.Thread(
            target=run,
            args=(
                "commit",
                lambda: txn.end_txn(
                    c_commit, transactional_id="w", producer_id=w.pid, epoch=w.epoch, txn_number=w.n, commit=True
                ),
            ),
        )
        expiry.start()
        _wait_until_blocked(conn, pids["e"])
        commit.start()
        _wait_until_blocked(conn, pids["c"])
        blocker.rollback()
        expiry.join(60)
        commit.join(60)
    assert outcome == {"expire": 2, "commit": "committed"}, outcome
    assert read(conn) == {0: [b"w"], 1: [b"w"], 2: [], 3: []}


# --- rule 6 / scenario 17: no plain write beside the producer's own open transaction ------------


def test_a_transactional_producer_id_never_writes_outside_its_transactions(conn: sa.Connection) -> None:
    """Kafka refuses a plain write beside the producer's open transaction on that partition
    (INVALID_TXN_STATE). Since revision 0017 a transactional id's producer id is refused on the
    plain path altogether (deviation 38), so no timing can land a plain batch inside its
    transaction: before the transaction, beside it on any partition, and after it."""
    a = Instance.start(conn)
    with pytest.raises(errors.InvalidProducerIdMappingError):
        a.send_plain(0, b"p0")
    a.send(0, b"t0")
    before = (hw(conn, 0), hw(conn, 1))
    for partition in (0, 1):
        with pytest.raises(errors.InvalidProducerIdMappingError):
            a.send_plain(partition, b"p")
    assert (hw(conn, 0), hw(conn, 1)) == before
    a.commit()
    with pytest.raises(errors.InvalidProducerIdMappingError):
        a.send_plain(0, b"p0")
    assert read(conn)[0] == [b"t0"]


# --- scenario 16: a partition written but never added ------------------------------------------


def test_produce_to_a_partition_never_added_adds_it_implicitly(conn: sa.Connection) -> None:
    """Documented rule (as Kafka's transaction version 2): the first transactional write to a
    partition adds it; it then holds the LSO back and gets a marker like an added partition."""
    plain(conn, 3, b"p")
    a = Instance.start(conn)
    a.add(0)
    a.send(3, b"x")  # never added
    st = status(conn)
    assert st.partitions == [f"{T}-0@-", f"{T}-3@1"]
    assert lso(conn, 3) == 1
    assert a.commit() == "committed"
    assert markers(conn) == [(3, 2, "commit", a.pid, 0)]
    assert read(conn)[3] == [b"p", b"x"]


# --- rule 21 / scenario 22: transactional id expiry ---------------------------------------------


def test_an_idle_transactional_id_expires_and_its_producer_id_is_refused(conn: sa.Connection) -> None:
    idle_ms = conn.exec_driver_sql("SELECT transactional_id_expiration_ms FROM settings").scalar_one()
    assert idle_ms == 7 * 24 * 3600 * 1000
    a = Instance.start(conn, "a")
    a.send(0, b"a")
    a.commit()
    b = Instance.start(conn, "b")  # Empty
    c = Instance.start(conn, "c")
    c.send(1, b"c")
    c.abort()
    now = db_now(conn)
    # Setup by `now`: six days on, nothing has expired.
    with server_time(conn, now + timedelta(days=6)):
        assert txn.expire_transactions(conn) == 0
    assert {status(conn, t).state for t in "abc"} == {"CompleteCommit", "Empty", "CompleteAbort"}
    # Eight days on: all three are Dead.
    with server_time(conn, now + timedelta(days=8)):
        assert txn.expire_transactions(conn) == 0
    assert {status(conn, t).state for t in "abc"} == {"Dead"}
    assert history(conn, "a")[-1] == ("CompleteCommit", "Dead", a.pid, 0, 1)
    for inst in (a, b, c):
        with pytest.raises(errors.InvalidProducerIdMappingError):
            inst.send(2)
        with pytest.raises(errors.InvalidProducerIdMappingError):
            inst.add(2)
        with pytest.raises(errors.InvalidProducerIdMappingError):
            inst.commit()
        with pytest.raises(errors.InvalidProducerIdMappingError):
            inst.commit(n=inst.n - 1)
    # KIP-360 with the expired identity, or a plain init: a new producer id at epoch 0.
    old = {a.pid, b.pid, c.pid}
    na = a.reinit()
    nb = init(conn, "b")
    assert na.producer_id not in old and na.epoch == 0
    assert nb.producer_id not in old | {na.producer_id} and nb.epoch == 0
    assert status(conn, "a").state == "Empty"
    assert history(conn, "a")[-1] == ("Dead", "Empty", na.producer_id, 0, 1)
    a.send(0, b"again")
    assert a.commit() == "committed"
    assert read(conn)[0] == [b"a", b"again"]


# --- scenario 25: an operator's abort --------------------------------------------------------


def test_operator_abort_of_a_hanging_transaction_updates_the_coordinator(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"hang")
    a.send(1, b"hang")
    plain(conn, 0, b"behind")
    assert lso(conn, 0) == 0
    txn.abort_transaction(conn, transactional_id="app")
    st = status(conn)
    assert (st.state, st.producer_epoch, st.partitions) == ("CompleteAbort", 1, [])
    assert history(conn)[-3:] == [
        ("Empty", "Ongoing", a.pid, 0, 1),
        ("Ongoing", "PrepareAbort", a.pid, 1, 1),
        ("PrepareAbort", "CompleteAbort", a.pid, 1, 1),
    ]
    assert markers(conn) == [(0, 2, "abort", a.pid, 1), (1, 1, "abort", a.pid, 1)]
    assert read(conn) == {0: [b"behind"], 1: [], 2: [], 3: []}
    assert lso(conn, 0) == hw(conn, 0)
    # The producer is fenced (not recoverable: the operator took its transaction away).
    with pytest.raises(errors.ProducerFencedError):
        a.send(0, b"more")
    with pytest.raises(errors.ProducerFencedError):
        a.commit()
    with pytest.raises(errors.ProducerFencedError):
        a.abort()
    with pytest.raises(errors.ProducerFencedError):
        a.reinit()
    # Nothing to abort now, or at all.
    with pytest.raises(errors.InvalidTxnStateError):
        txn.abort_transaction(conn, transactional_id="app")
    with pytest.raises(errors.TransactionalIdNotFoundError):
        txn.abort_transaction(conn, transactional_id="nobody")
    b = Instance.start(conn)
    assert (b.pid, b.epoch) == (a.pid, 2)


# --- txn_history ---------------------------------------------------------------------------------


def test_txn_history_records_every_transition_in_order(conn: sa.Connection) -> None:
    a = Instance.start(conn)  # 1
    p = a.pid
    a.send(0)  # 1 open
    a.commit()
    a.add(1)  # 2 open
    a.abort()
    a.reinit()  # KIP-360 bump to epoch 1
    a.send(0)  # 3 open
    b = Instance.start(conn)  # fences 3: abort with epoch 2, then Empty
    assert b.commit() == "committed"  # 4: empty transaction
    with server_time(conn, db_now(conn) + timedelta(days=8)):  # setup: 8 days idle
        txn.expire_transactions(conn)
    c = Instance.start(conn)
    assert history(conn) == [
        (None, "Empty", p, 0, 0),
        ("Empty", "Ongoing", p, 0, 1),
        ("Ongoing", "PrepareCommit", p, 0, 1),
        ("PrepareCommit", "CompleteCommit", p, 0, 1),
        ("CompleteCommit", "Ongoing", p, 0, 2),
        ("Ongoing", "PrepareAbort", p, 0, 2),
        ("PrepareAbort", "CompleteAbort", p, 0, 2),
        ("CompleteAbort", "Empty", p, 1, 2),
        ("Empty", "Ongoing", p, 1, 3),
        ("Ongoing", "PrepareAbort", p, 2, 3),
        ("PrepareAbort", "CompleteAbort", p, 2, 3),
        ("CompleteAbort", "Empty", p, 2, 3),
        ("Empty", "Ongoing", p, 2, 4),
        ("Ongoing", "PrepareCommit", p, 2, 4),
        ("PrepareCommit", "CompleteCommit", p, 2, 4),
        ("CompleteCommit", "Dead", p, 2, 4),
        ("Dead", "Empty", c.pid, 0, 4),
    ]
    assert c.pid != p
    # Failed calls leave no trace.
    n = len(history(conn))
    with pytest.raises(errors.InvalidProducerIdMappingError):
        a.send(0)
    with pytest.raises(errors.InvalidTxnStateError):
        c.commit(n=9)
    assert len(history(conn)) == n


# --- rules 25-28: the last stable offset and read_committed ------------------------------------


def test_lso_is_the_first_offset_of_the_oldest_open_transaction(conn: sa.Connection) -> None:
    plain(conn, 0, b"p0", b"p1")  # offsets 0, 1
    a = Instance.start(conn, "a")
    b = Instance.start(conn, "b")
    assert lso(conn, 0) == 2
    a.send(0, b"a")  # 2
    plain(conn, 0, b"p3")  # 3
    b.send(0, b"b")  # 4
    b.send(1, b"b1")  # partition 1 offset 0
    plain(conn, 0, b"p5")  # 5
    assert (hw(conn, 0), lso(conn, 0), lso(conn, 1)) == (6, 2, 0)
    assert offsets(conn)[2] == (0, 0)
    got = log.fetch_many(conn, {(T, 0): 0, (T, 1): 0}, read_committed=True)
    assert [r.value for r in got[(T, 0)].records] == [b"p0", b"p1"]  # stops at the LSO
    assert got[(T, 1)].records == []
    unc = log.fetch_many(conn, {(T, 0): 0}, read_committed=False)[(T, 0)]
    assert unc.last_stable_offset == 2 and unc.high_watermark == 6
    assert [r.value for r in unc.records] == [b"p0", b"p1", b"a", b"p3", b"b", b"p5"]
    # end offsets for read_committed are the LSO (rule 26)
    assert [x.last_stable_offset for x in log.list_offsets(conn, topic=T)] == [2, 0, 0, 0]
    assert a.commit() == "committed"  # marker at 6
    assert (lso(conn, 0), lso(conn, 1)) == (4, 0)
    assert read(conn)[0] == [b"p0", b"p1", b"a", b"p3"]
    assert b.abort() == "aborted"  # markers at 7 and 1
    assert (lso(conn, 0), lso(conn, 1)) == (8, 2) == (hw(conn, 0), hw(conn, 1))
    assert read(conn)[0] == [b"p0", b"p1", b"a", b"p3", b"p5"]
    assert conn.exec_driver_sql(
        "SELECT open_transactions FROM partition_offsets WHERE topic = %(t)s ORDER BY partition", {"t": T}
    ).scalars().all() == [0, 0, 0, 0]


def test_mixed_log_read_committed_and_read_uncommitted(conn: sa.Connection) -> None:
    """Scenario 21: aborted transaction A, committed transaction B, plain writes, on two partitions."""
    a = Instance.start(conn, "a")
    b = Instance.start(conn, "b")
    plain(conn, 0, b"plain1")
    a.send(0, b"A1")
    b.send(0, b"B1")
    plain(conn, 0, b"plain2")
    a.send(1, b"A2")
    b.send(1, b"B2")
    b.send(0, b"B3")
    plain(conn, 1, b"plain3")
    assert b.commit() == "committed"
    plain(conn, 0, b"plain4")
    # A is open: read_committed stops at A's first offset on each partition.
    assert read(conn) == {0: [b"plain1"], 1: [], 2: [], 3: []}
    assert (lso(conn, 0), lso(conn, 1)) == (1, 0)
    assert conn.exec_driver_sql("SELECT count(*) FROM committed_records").scalar_one() == 1
    assert a.abort() == "aborted"
    expected = {0: [b"plain1", b"B1", b"plain2", b"B3", b"plain4"], 1: [b"B2", b"plain3"], 2: [], 3: []}
    assert read(conn) == expected
    view = conn.exec_driver_sql('SELECT partition, value FROM committed_records ORDER BY partition, "offset"').all()
    assert [(p, v) for p, v in view] == [(p, v) for p in expected for v in expected[p]]
    # read_uncommitted: everything but the markers, in offset order.
    assert read(conn, committed=False) == {
        0: [b"plain1", b"A1", b"B1", b"plain2", b"B3", b"plain4"],
        1: [b"A2", b"B2", b"plain3"],
        2: [],
        3: [],
    }
    # Control records are never returned: the offsets read skip exactly the markers.
    all_offsets = {
        p: [r.offset for r in log.fetch(conn, topic=T, partition=p, offset=0, max_records=100).records] for p in (0, 1)
    }
    marker_offsets = {p: [m[1] for m in markers(conn) if m[0] == p] for p in (0, 1)}
    for p in (0, 1):
        assert sorted(all_offsets[p] + marker_offsets[p]) == list(range(hw(conn, p)))
        assert not set(all_offsets[p]) & set(marker_offsets[p])
    # Reading from any position gives the tail of the same sequence.
    got = log.fetch_many(conn, {(T, 0): 3}, read_committed=True)[(T, 0)]
    assert [r.value for r in got.records] == [b"plain2", b"B3", b"plain4"]


# --- produce_end_txn: the last batch and EndTxn in one database transaction (migration 0013) --


def test_the_last_batch_and_the_commit_land_together_and_a_retry_has_no_second_effect(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(1, b"first")
    res, outcome = a.send_and_commit(0, b"last1", b"last2")
    assert outcome == "committed" and not res.duplicate
    assert (res.base_offset, res.last_offset) == (0, 1)
    st = status(conn)
    assert (st.state, st.txn_number) == ("CompleteCommit", a.n)
    assert read(conn) == {0: [b"last1", b"last2"], 1: [b"first"], 2: [], 3: []}
    assert [m[:3] for m in markers(conn)] == [(0, 2, "commit"), (1, 1, "commit")]
    before = (markers(conn), offsets(conn), history(conn))
    # The reply was lost: the same call again is answered from the store, nothing is written.
    again, outcome = a.send_and_commit(0, b"last1", b"last2", seq=0)
    assert outcome == "already_committed" and again.duplicate
    assert (again.base_offset, again.last_offset, again.log_append_time) == (0, 1, res.log_append_time)
    assert (markers(conn), offsets(conn), history(conn)) == before
    # A batch that was never part of it cannot claim the committed transaction.
    with pytest.raises(errors.InvalidTxnStateError):
        a.send_and_commit(0, b"other", seq=2)
    with pytest.raises(errors.InvalidTxnStateError):
        a.send_and_commit(2, b"other", seq=0)
    assert (markers(conn), offsets(conn), history(conn)) == before
    # The producer carries on with its next transaction.
    a.n += 1
    res, outcome = a.send_and_commit(0, b"next")
    assert (outcome, res.base_offset) == ("committed", 3)
    assert read(conn)[0] == [b"last1", b"last2", b"next"]


def test_when_the_batch_is_refused_the_transaction_is_not_committed(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"kept")
    before = (markers(conn), offsets(conn), history(conn))
    with pytest.raises(errors.OutOfOrderSequenceError):
        a.send_and_commit(0, b"gap", seq=5)  # a sequence gap: the batch is refused ...
    st = status(conn)
    assert (st.state, st.txn_number) == ("Ongoing", a.n)  # ... and EndTxn never ran
    assert (markers(conn), offsets(conn), history(conn)) == before
    assert a.commit() == "committed"
    assert read(conn)[0] == [b"kept"]


def test_a_fenced_instance_can_neither_append_nor_commit_in_one_call(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"zombie")
    b = Instance.start(conn)  # fences A and aborts its transaction
    before = (markers(conn), offsets(conn), history(conn))
    with pytest.raises(errors.ProducerFencedError):
        a.send_and_commit(1, b"late")
    assert (markers(conn), offsets(conn), history(conn)) == before
    _, outcome = b.send_and_commit(1, b"alive")
    assert outcome == "committed"
    assert read(conn) == {0: [], 1: [b"alive"], 2: [], 3: []}
    # A retry from the zombie of B's committed transaction number is still fenced.
    a.n = b.n
    with pytest.raises(errors.ProducerFencedError):
        a.send_and_commit(1, b"alive", seq=0)


def test_the_combined_call_past_the_timeout_commits_nothing(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"late")
    age_open_transaction(conn)  # setup: the transaction has been open for two hours
    with pytest.raises(errors.TransactionTimeoutError):
        a.send_and_commit(1, b"later")
    assert hw(conn, 1) == 0
    assert read(conn) == {p: [] for p in range(PARTITIONS)}


# --- txn_spans: where a committed transaction lies in each partition (migration 0014) -------


def spans(conn: sa.Connection) -> dict[tuple[int, int, int], tuple[int, int]]:
    """The topic's spans: (producer id, transaction number, partition) -> (first, last offset)."""
    rows = conn.exec_driver_sql(
        "SELECT s.producer_id, s.txn_number, s.partition, s.first_offset, s.last_offset "
        "FROM txn_spans s JOIN topics t USING (topic_id) WHERE t.name = %(t)s",
        {"t": T},
    ).all()
    return {(r[0], r[1], r[2]): (r[3], r[4]) for r in rows}


def test_a_commit_records_its_span_in_each_partition_it_wrote_to(conn: sa.Connection) -> None:
    a = Instance.start(conn, "a")
    b = Instance.start(conn, "b")
    a.send(0, b"a1", b"a2")  # 0-1
    b.send(0, b"b1")  # 2
    plain(conn, 0, b"p")  # 3
    a.send(0, b"a3")  # 4
    b.send(1, b"b2")  # partition 1: 0
    a.add(2)  # added, never written: no marker, no span
    a_txn = a.n
    assert a.commit() == "committed"  # marker at 5
    assert spans(conn) == {(a.pid, a_txn, 0): (0, 4)}
    assert b.abort() == "aborted"  # an aborted transaction has no span
    assert spans(conn) == {(a.pid, a_txn, 0): (0, 4)}
    # The last batch carrying EndTxn (produce_end_txn_v1) records it too.
    a.send(1, b"a4")  # partition 1: 2 (after b2 and B's abort marker)
    res, outcome = a.send_and_commit(1, b"a5", b"a6")
    assert outcome == "committed" and (res.base_offset, res.last_offset) == (3, 4)
    assert spans(conn)[(a.pid, a_txn + 1, 1)] == (2, 4)
    assert len(spans(conn)) == 2


def test_a_span_is_found_when_the_producers_sequence_state_expired(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    a.send(0, b"a1")  # 0
    a.send(0, b"a2", b"a3")  # 1-2
    plain(conn, 0, b"p1", b"p2")  # 3-4
    # The producer's sequence state idles out while its transaction is open (the maintenance
    # call with a clock days ahead), so EndTxn finds the last record in the log instead.
    with server_time(conn, db_now(conn) + timedelta(days=30)):
        assert log.expire_producers(conn) >= 1
    n = a.n
    assert a.commit() == "committed"
    assert spans(conn) == {(a.pid, n, 0): (0, 2)}
    assert read(conn)[0] == [b"a1", b"a2", b"a3", b"p1", b"p2"]


def test_retention_drops_the_spans_below_the_log_start(conn: sa.Connection) -> None:
    a = Instance.start(conn)
    for value in (b"t1", b"t2", b"t3"):
        a.send(0, value)
        a.send(1, value)
        assert a.commit() == "committed"
    assert len(spans(conn)) == 6
    topics.alter_topic_config(conn, name=T, config={"retention_ms": 60_000})
    plain(conn, 1, b"young")  # partition 1 keeps its records from here on
    conn.exec_driver_sql(
        "UPDATE records SET \"timestamp\" = now() - interval '1 day' "  # setup: the old records aged a day
        "WHERE value IS DISTINCT FROM 'young'::bytea AND topic_id = (SELECT topic_id FROM topics WHERE name = %(t)s)",
        {"t": T},
    )
    while log.enforce_retention(conn) > 0:
        pass
    # Partition 0 lost everything, partition 1 everything before "young": no span survives
    # there, since each ended below the new log start.
    assert spans(conn) == {}
    assert [(x.log_start_offset, x.high_watermark) for x in log.list_offsets(conn, topic=T)][:2] == [(6, 6), (6, 7)]
    got = log.fetch_many(conn, {(T, 1): 6}, read_committed=True)[(T, 1)]
    assert [r.value for r in got.records] == [b"young"]
