"""A connection lost at every step of a transaction's commit: readers see all of it or none of it.

Scenarios 9 and 10/11 (docs/concepts.md). A transactional Producer writes to 3 partitions
THROUGH the fault-injecting proxy (tests/support/proxy.py); every check is made on a direct
connection. The proxy's one-shot faults fire on the first traffic after arming from any
connection, so a fault is armed from inside the store call it is aimed at: the store seam
(``oncelog.store.log.produce`` / ``oncelog.store.txn.end_txn``, looked up by the producer at call
time) is wrapped, and the wrapper arms the fault right before the real call sends its request on a
connection that is already checked out and idle (and keeps psycopg from slipping an automatic
statement preparation, a round trip of its own, in front of that request). The wrapper also
records what each call returned (so a retried EndTxn's ``already_committed`` is observed, not
inferred).

Steps: a produce call ahead of the commit (the batches flushed before it), the commit (every
queued batch and EndTxn in one call, ``produce_offsets_end_txn``), and EndTxn alone (the batches
flushed before the commit). Faults: the request
never reaches the server (``cut_before_next_request``); the server commits it and the reply is lost
(``cut_after_next_reply(precise=True)``). Recoveries: the producer's own retries get through
(``retry``), or new connections are refused until the producer gives up (``give_up``: the
delivery timeout fails the batch, the transaction can only abort; or commit_transaction's timeout
passes, and the application calls commit_transaction again). Also: the EndTxn retried only after
the transaction timed out; the server writing the markers when the connection dies (the backend
terminated, or the client cut while the backend still waits for a partition lock); a lost abort
reply; a lost InitProducerId reply.

Always: the producer either reports the commit succeeded or raises an error after which the
transaction is aborted; a background checker reading all 3 partitions in ONE snapshot
(store.log.fetch_many) and through the committed_records view never sees part of a transaction;
exactly one CompleteCommit (or one CompleteAbort) is journalled for the transaction; no record is
in the log twice; and the next transaction of the same producer commits.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

import oncelog
import oncelog.store.log
import oncelog.store.txn
from oncelog import errors
from oncelog.store import create_engine, log, txn
from oncelog.store.records import CommitResult
from oncelog.txn_state import TxnState
from tests.support.logcheck import sslmode_disable, wait_until
from tests.support.proxy import FaultProxy

TOPIC = "t"
PARTITIONS = 3
PER_PARTITION = 4
TID = "commit-faults"
#: Bound on waiting for anything; never an assertion on speed.
WAIT = 60.0

CUT_BEFORE = "cut_before_next_request"
CUT_AFTER = "cut_after_next_reply"


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def direct(db_url: str) -> Iterator[sa.Engine]:
    engine = create_engine(db_url, poolclass=sa.NullPool)
    yield engine
    engine.dispose()


@contextlib.contextmanager
def open_producer(url: str, **config: Any) -> Iterator[oncelog.Producer]:
    config.setdefault("linger_ms", 60_000)  # nothing leaves before the commit's flush
    producer = oncelog.Producer(url, transactional_id=TID, **config)
    try:
        yield producer
    finally:
        producer.close(timeout=15)


def psycopg_url(db_url: str) -> str:
    return sslmode_disable(db_url).replace("+psycopg", "")


# --- the store seam, wrapped ------------------------------------------------------------------


class Seam:
    """Wraps store.log.produce and store.txn.end_txn / init_producer_id: records every call's
    outcome and arms a proxy fault right before the n-th call of a kind."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.lock = threading.Lock()
        self.calls: dict[str, list[tuple[dict[str, Any], Any]]] = {
            "produce": [],
            "produce_offsets_end_txn": [],
            "end_txn": [],
            "init": [],
        }
        self._armed: tuple[str, int, str, bool] | None = None
        self._counts: Counter[str] = Counter()
        self.fired = False
        self.fired_call: dict[str, Any] = {}
        for kind, module, name in (
            ("produce", oncelog.store.log, "produce_batches"),
            ("produce_offsets_end_txn", oncelog.store.log, "produce_offsets_end_txn"),
            ("end_txn", oncelog.store.txn, "end_txn_waking"),
            ("init", oncelog.store.txn, "init_producer_id"),
        ):
            monkeypatch.setattr(module, name, self._wrap(kind, getattr(module, name)))

    def arm(self, kind: str, nth: int, fault: str, *, block: bool = False) -> None:
        """Fire ``fault`` (and refuse new connections, if ``block``) right before the ``nth``
        (0-based) call of ``kind`` from now on."""
        with self.lock:
            self._counts[kind] = 0
            self._armed = (kind, nth, fault, block)
            self.fired = False

    def _wrap(self, kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(conn: sa.Connection, **kwargs: Any) -> Any:
            dbapi: Any = None
            saved_threshold: int | None = None
            with self.lock:
                armed = self._armed
                if armed is not None and armed[0] == kind and self._counts[kind] == armed[1]:
                    self._armed = None
                    self.fired = True
                    self.fired_call = kwargs
                    if kind == "produce":  # a request of many batches: the partitions it carried
                        self.fired_call = {**kwargs, "partitions": {b.partition for b in kwargs["batches"]}}
                    # psycopg prepares a statement on its 6th execution on a connection, with a
                    # round trip of its own (Parse/Sync) BEFORE the execution: that round trip
                    # would claim the fault instead of the request aimed at. Not for this call.
                    dbapi = conn.connection.dbapi_connection
                    saved_threshold = dbapi.prepare_threshold
                    dbapi.prepare_threshold = None
                    if armed[3]:
                        self.proxy.block_new_connections(True)
                    if armed[2] == CUT_BEFORE:
                        self.proxy.cut_before_next_request()
                    else:
                        self.proxy.cut_after_next_reply(precise=True)
                self._counts[kind] += 1
            try:
                result = real(conn, **kwargs)
            except BaseException as exc:
                self._record(kind, kwargs, exc)
                raise
            finally:
                if dbapi is not None:
                    dbapi.prepare_threshold = saved_threshold
            self._record(kind, kwargs, result)
            return result

        return wrapper

    def _record(self, kind: str, kwargs: dict[str, Any], result: Any) -> None:
        """One entry per batch for a produce request (its answer, or the request's error), the
        outcome for EndTxn, (results, outcome) for a commit."""
        with self.lock:
            if kind == "produce":
                answers = result if isinstance(result, list) else [result] * len(kwargs["batches"])
                for b, answer in zip(kwargs["batches"], answers, strict=True):
                    one = {k: v for k, v in kwargs.items() if k != "batches"}
                    self.calls[kind].append(({**one, "partition": b.partition}, answer))
            elif kind == "end_txn" and isinstance(result, tuple):
                self.calls[kind].append((kwargs, result[0]))
            elif kind == "produce_offsets_end_txn" and isinstance(result, CommitResult):
                self.calls[kind].append((kwargs, (result.results, result.outcome)))
            else:
                self.calls[kind].append((kwargs, result))

    def outcomes(self, kind: str, **match: Any) -> list[Any]:
        """What the calls of ``kind`` whose arguments include ``match`` returned or raised
        (exceptions as their class name)."""
        with self.lock:
            calls = list(self.calls[kind])
        return [
            type(out).__name__ if isinstance(out, BaseException) else out
            for kwargs, out in calls
            if all(kwargs.get(k) == v for k, v in match.items())
        ]


@pytest.fixture
def seam(monkeypatch: pytest.MonkeyPatch, proxy: FaultProxy) -> Seam:
    return Seam(monkeypatch, proxy)


# --- readers ---------------------------------------------------------------------------------


def tag(value: bytes) -> str:
    return value.decode().split("-")[0]


def txn_values(name: str) -> list[tuple[int, bytes]]:
    """The records of one test transaction: ``<name>-<partition>-<i>``, PER_PARTITION per partition."""
    return [(p, f"{name}-{p}-{i}".encode()) for p in range(PARTITIONS) for i in range(PER_PARTITION)]


def read_committed_snapshot(engine: sa.Engine) -> list[bytes]:
    """All 3 partitions, read_committed, in ONE snapshot (store.log.fetch_many)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        fetched = log.fetch_many(conn, {(TOPIC, p): 0 for p in range(PARTITIONS)}, max_records=10_000)
    return [r.value for part in fetched.values() for r in part.records if r.value is not None]


def committed_view(engine: sa.Engine) -> list[bytes]:
    """The committed_records view, one SQL statement."""
    with engine.connect() as conn:
        return [
            bytes(v)
            for v in conn.execute(
                sa.text("SELECT value FROM committed_records WHERE topic = :t"), {"t": TOPIC}
            ).scalars()
        ]


def uncommitted_values(engine: sa.Engine) -> list[bytes]:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        fetched = log.fetch_many(
            conn, {(TOPIC, p): 0 for p in range(PARTITIONS)}, max_records=10_000, read_committed=False
        )
    return [r.value for part in fetched.values() for r in part.records if r.value is not None]


class AtomicityChecker(threading.Thread):
    """Reads all partitions over and over, each time in one snapshot (fetch_many) and through
    the committed_records view, and records any snapshot that holds part of a transaction, or a
    transaction that disappears after it was seen whole."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(daemon=True)
        self.engine = engine
        self.stop = threading.Event()
        self.snapshots = 0
        self.violations: list[str] = []
        self.complete: set[str] = set()
        self.error: BaseException | None = None

    def check(self, how: str, values: list[bytes]) -> None:
        counts = Counter(tag(v) for v in values)
        for name, n in counts.items():
            if n != PARTITIONS * PER_PARTITION:
                self.violations.append(f"{how}: {n} of {PARTITIONS * PER_PARTITION} records of {name}")
        for name in self.complete - set(counts):
            self.violations.append(f"{how}: {name} was visible, then not")
        self.complete |= set(counts)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.check("fetch_many", read_committed_snapshot(self.engine))
                self.check("committed_records", committed_view(self.engine))
                self.snapshots += 1
        except BaseException as exc:  # reported by the test
            self.error = exc

    def wait_for_snapshots(self, n: int = 2) -> None:
        """Wait until ``n`` more snapshots were taken (so the current state was checked)."""
        start = self.snapshots
        wait_until(lambda: self.snapshots >= start + n or self.error is not None, WAIT, "the checker to read")

    def finish(self) -> None:
        self.wait_for_snapshots()
        self.stop.set()
        self.join(WAIT)
        assert self.error is None, repr(self.error)
        assert self.violations == [], self.violations[:10]


@pytest.fixture
def checker(direct: sa.Engine) -> Iterator[AtomicityChecker]:
    c = AtomicityChecker(direct)
    c.start()
    yield c
    c.stop.set()
    c.join(WAIT)


# --- helpers ---------------------------------------------------------------------------------


def state_of(producer: oncelog.Producer) -> TxnState | None:
    """The client transaction state (a call, so that type checkers do not narrow it)."""
    return producer.transaction_state


def create_topic(url: str) -> None:
    with oncelog.Admin(url) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS)


def send_all(producer: oncelog.Producer, name: str) -> list[Future[Any]]:
    return [producer.send(TOPIC, v, partition=p) for p, v in txn_values(name)]


def commit_one(producer: oncelog.Producer, name: str) -> None:
    producer.begin_transaction()
    futures = send_all(producer, name)
    producer.commit_transaction()
    assert all(f.result(WAIT).offset >= 0 for f in futures)


def journal(engine: sa.Engine, txn_number: int) -> list[str]:
    """The completed states journalled for transaction ``txn_number`` of TID."""
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT to_state FROM txn_history WHERE transactional_id = :t AND txn_number = :n "
                    "AND to_state IN ('CompleteCommit', 'CompleteAbort') ORDER BY id"
                ),
                {"t": TID, "n": txn_number},
            ).scalars()
        )


def status(engine: sa.Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT * FROM transaction_status WHERE transactional_id = :t"), {"t": TID}).one()
        return dict(row._mapping)


def expect_visible(engine: sa.Engine, names: list[str]) -> None:
    """read_committed (one snapshot, and the view) holds exactly these transactions, whole."""
    expected = sorted(v for name in names for _, v in txn_values(name))
    assert sorted(read_committed_snapshot(engine)) == expected
    assert sorted(committed_view(engine)) == expected


def check_log(engine: sa.Engine) -> None:
    """No record is in the log twice (a retried batch was never appended again)."""
    dupes = [v for v, n in Counter(uncommitted_values(engine)).items() if n > 1]
    assert dupes == [], dupes


def finish(
    producer: oncelog.Producer, engine: sa.Engine, checker: AtomicityChecker, visible: list[str], txn_number: int
) -> None:
    """The later transaction commits; everything is whole; the log has no duplicates."""
    commit_one(producer, "T3")
    assert state_of(producer) is TxnState.READY
    expect_visible(engine, [*visible, "T3"])
    checker.finish()
    check_log(engine)
    assert journal(engine, txn_number + 1) == ["CompleteCommit"]


# --- a fault at each step, and each recovery --------------------------------------------------

# The queued batches go with EndTxn in one call (produce_offsets_end_txn); a batch flushed ahead of
# the commit goes alone (produce), and EndTxn goes alone when nothing is left at the commit.
STEPS = {"produce_early": ("produce", 0), "commit": ("produce_offsets_end_txn", 0), "end_txn": ("end_txn", 0)}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("recovery", ["retry", "give_up"])
@pytest.mark.parametrize("fault", [CUT_BEFORE, CUT_AFTER], ids=["request_lost", "reply_lost"])
@pytest.mark.parametrize("step", list(STEPS))
def test_fault_at_each_commit_step_is_all_or_nothing(
    db_url: str,
    proxy: FaultProxy,
    proxied_url: str,
    direct: sa.Engine,
    seam: Seam,
    checker: AtomicityChecker,
    step: str,
    fault: str,
    recovery: str,
) -> None:
    create_topic(db_url)
    give_up_produce = recovery == "give_up" and step == "produce_early"
    config: dict[str, Any] = {"delivery_timeout_ms": 1500} if give_up_produce else {}
    if recovery == "give_up" and step == "commit":
        # Shorter than commit_transaction's timeout below: the batches carrying EndTxn must still
        # be retried after their delivery timeout (the first attempt may have committed).
        config = {"delivery_timeout_ms": 500}
    with open_producer(proxied_url, **config) as producer:
        producer.init_transactions()
        commit_one(producer, "T1")  # warm: connections open, metadata cached
        txn_number = 2
        producer.begin_transaction()
        futures = send_all(producer, "T2")
        kind, nth = STEPS[step]
        seam.arm(kind, nth, fault, block=recovery == "give_up")

        if step == "end_txn":
            producer.flush(WAIT)  # the batches are out before the fault: only EndTxn meets it
        elif step == "produce_early":
            producer.flush(WAIT)  # the batches go ahead of the commit, the first meets the fault
        if recovery == "retry":
            producer.commit_transaction()
            # T1's records and marker come first in every partition.
            first = PER_PARTITION + 1
            assert [f.result(WAIT).offset for f in futures] == [
                first + i for _ in range(PARTITIONS) for i in range(PER_PARTITION)
            ]
            outcome = "committed"
        elif give_up_produce:
            # The batch's outcome stays unknown past delivery_timeout_ms: the transaction cannot
            # commit, the application aborts.
            with pytest.raises(errors.OncelogError) as failed:
                producer.commit_transaction()
            assert failed.value.abortable and not failed.value.fatal, repr(failed.value)
            assert state_of(producer) is TxnState.ABORTABLE_ERROR
            assert proxy.stats.connections_refused >= 1
            checker.wait_for_snapshots()
            expect_visible(direct, ["T1"])
            proxy.block_new_connections(False)
            producer.abort_transaction()
            assert state_of(producer) is TxnState.READY
            # The batch that met the fault failed (earlier batches were acknowledged: their
            # futures keep their offsets, as in Kafka, though the transaction aborted).
            faulted = seam.fired_call["partitions"]
            assert all(
                isinstance(f.exception(WAIT), errors.OncelogError)
                for (p, _), f in zip(txn_values("T2"), futures, strict=True)
                if p in faulted
            )
            outcome = "aborted"
        else:
            # EndTxn, alone or with the last batch: commit_transaction's own timeout passes while
            # new connections are refused. The outcome decides the transaction's, so it is not
            # given up: the producer stays committing and the application calls commit again.
            with pytest.raises((errors.DatabaseUnavailableError, errors.DeliveryTimeoutError)) as failed:
                producer.commit_transaction(timeout=1.5)
            assert failed.value.retriable
            assert state_of(producer) is TxnState.COMMITTING_TRANSACTION
            assert proxy.stats.connections_refused >= 1
            # Meanwhile readers see the whole transaction (reply lost: it committed) or none of it.
            checker.wait_for_snapshots()
            expect_visible(direct, ["T1", "T2"] if fault == CUT_AFTER else ["T1"])
            proxy.block_new_connections(False)
            producer.commit_transaction()  # the application retries the commit
            outcome = "committed"

        assert seam.fired
        assert proxy.stats.faults_fired.get(fault) == 1, proxy.stats
        expect_visible(direct, ["T1", "T2"] if outcome == "committed" else ["T1"])
        assert journal(direct, txn_number) == ["CompleteCommit" if outcome == "committed" else "CompleteAbort"]

        end_txns = seam.outcomes("end_txn", txn_number=txn_number)
        # What each commit call answered (EndTxn's outcome, or the error it raised).
        commits = seam.outcomes("produce_offsets_end_txn", txn_number=txn_number)
        combined = [o if isinstance(o, str) else o[1] for o in commits]
        if step in ("end_txn", "commit"):
            calls = end_txns if step == "end_txn" else combined
            assert (combined if step == "end_txn" else end_txns) == []
            retried = "already_committed" if fault == CUT_AFTER else "committed"
            assert calls[0] == "DatabaseUnavailableError" and calls[-1] == retried, calls
            assert set(calls[1:-1]) <= {"DatabaseUnavailableError"}, calls
        if step == "commit":
            # Every batch went in the commit; the retry after a lost reply is answered with the
            # batches' offsets, as duplicates.
            assert seam.outcomes("produce", txn_number=txn_number) == []
            results = commits[-1][0]
            assert len(results) == PARTITIONS
            assert all(r.duplicate is (fault == CUT_AFTER) for r in results), results
        elif step == "end_txn":
            if fault == CUT_AFTER and recovery == "retry":
                # Scenario 9: the commit is done; a retry is answered without a second effect and
                # an abort of it is refused.
                with direct.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    pid, epoch = producer.producer_id, producer.producer_epoch
                    assert pid is not None and epoch is not None
                    again = txn.end_txn(
                        conn, transactional_id=TID, producer_id=pid, epoch=epoch, txn_number=2, commit=True
                    )
                    assert again == "already_committed"
                    with pytest.raises(errors.InvalidTxnStateError):
                        txn.end_txn(
                            conn, transactional_id=TID, producer_id=pid, epoch=epoch, txn_number=2, commit=False
                        )
                assert journal(direct, txn_number) == ["CompleteCommit"]
        elif outcome == "committed":
            # The batches went ahead, the faulted one retried; EndTxn then went alone.
            assert (end_txns, combined) == (["committed"], []), (end_txns, combined)
            faulted = min(seam.fired_call["partitions"])
            produced = seam.outcomes("produce", partition=faulted, txn_number=txn_number)[-2:]
            assert produced[0] == "DatabaseUnavailableError", produced
            # The retry after a lost reply is recognised as a duplicate (same offsets).
            assert produced[1].duplicate is (fault == CUT_AFTER), produced
        else:
            assert (end_txns, combined) == (["aborted"], []), (end_txns, combined)

        finish(producer, direct, checker, ["T1", "T2"] if outcome == "committed" else ["T1"], txn_number)


# --- the commit retried after the transaction timed out ---------------------------------------


def timeout_passed(engine: sa.Engine, txn_number: int, timeout_ms: int) -> bool:
    """Whether the database clock is past transaction ``txn_number``'s start plus its timeout."""
    with engine.connect() as conn:
        return bool(
            conn.execute(
                sa.text(
                    "SELECT min(at) + make_interval(secs => :ms / 1000.0) < clock_timestamp() FROM txn_history "
                    "WHERE transactional_id = :t AND txn_number = :n AND to_state = 'Ongoing'"
                ),
                {"t": TID, "n": txn_number, "ms": timeout_ms},
            ).scalar_one()
        )


@pytest.mark.timeout(90)
@pytest.mark.parametrize("fault", [CUT_BEFORE, CUT_AFTER], ids=["request_lost", "reply_lost"])
def test_commit_retried_after_the_transaction_timeout(
    db_url: str,
    proxy: FaultProxy,
    proxied_url: str,
    direct: sa.Engine,
    seam: Seam,
    checker: AtomicityChecker,
    fault: str,
) -> None:
    """The EndTxn is lost (or its reply is) and the retry only gets through after the transaction
    timeout: a commit that had landed stays committed (already_committed); one that had not is
    refused with TransactionTimeoutError, the application aborts, and nothing is ever visible."""
    timeout_ms = 2000
    create_topic(db_url)
    with open_producer(proxied_url, transaction_timeout_ms=timeout_ms) as producer, ThreadPoolExecutor(1) as pool:
        producer.init_transactions()
        commit_one(producer, "T1")
        producer.begin_transaction()
        send_all(producer, "T2")
        producer.flush(WAIT)
        seam.arm("end_txn", 0, fault, block=True)
        committing = pool.submit(producer.commit_transaction)
        wait_until(lambda: proxy.stats.connections_refused >= 1, WAIT, "the commit to retry")
        wait_until(lambda: timeout_passed(direct, 2, timeout_ms), WAIT, "the transaction timeout to pass")
        checker.wait_for_snapshots()
        expect_visible(direct, ["T1", "T2"] if fault == CUT_AFTER else ["T1"])
        proxy.block_new_connections(False)
        if fault == CUT_AFTER:
            committing.result(WAIT)
            assert seam.outcomes("end_txn", txn_number=2)[-1] == "already_committed"
            visible = ["T1", "T2"]
            assert journal(direct, 2) == ["CompleteCommit"]
        else:
            with pytest.raises(errors.TransactionTimeoutError) as failed:
                committing.result(WAIT)
            assert failed.value.abortable
            assert state_of(producer) is TxnState.ABORTABLE_ERROR
            epoch = producer.producer_epoch
            producer.abort_transaction()
            # The store aborted it when the late commit came; the abort is answered as done, and
            # the producer goes on under the epoch the timeout fenced it with (KIP-360).
            assert seam.outcomes("end_txn", txn_number=2)[-2:] == [
                "TransactionTimeoutError",
                "already_aborted_timed_out",
            ]
            assert producer.producer_epoch == (epoch or 0) + 1
            visible = ["T1"]
            assert journal(direct, 2) == ["CompleteAbort"]
        expect_visible(direct, visible)
        finish(producer, direct, checker, visible, 2)


# --- the connection dies while the server writes the markers ----------------------------------


def end_txn_backends(watcher: psycopg.Connection[tuple[Any, ...]], *, waiting: bool) -> list[int]:
    rows = watcher.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%%end_txn_v2%%' "
        "AND pid <> pg_backend_pid() AND state = 'active'" + (" AND wait_event_type = 'Lock'" if waiting else "")
    ).fetchall()
    return [int(r[0]) for r in rows]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["backend_terminated", "client_cut"])
def test_connection_lost_while_the_markers_are_written(
    db_url: str,
    proxy: FaultProxy,
    proxied_url: str,
    direct: sa.Engine,
    seam: Seam,
    checker: AtomicityChecker,
    how: str,
) -> None:
    """The EndTxn runs on the server and has written the marker of partition 0 when it blocks on
    partition 1's row lock (held by a test connection). Then its backend is terminated (the store
    'crashes' mid-commit: the commit rolls back, the retry commits) or the client's connection is
    cut (the server finishes the commit; the retry, which waited for the transactions row, finds
    it done). Readers see none of the transaction until it is whole."""
    create_topic(db_url)
    with (
        psycopg.connect(psycopg_url(db_url), autocommit=True) as watcher,
        psycopg.connect(psycopg_url(db_url)) as locker,
        open_producer(proxied_url) as producer,
        ThreadPoolExecutor(1) as pool,
    ):
        producer.init_transactions()
        commit_one(producer, "T1")
        producer.begin_transaction()
        send_all(producer, "T2")
        producer.flush(WAIT)
        # T1's records and commit marker, then T2's records, in every partition.
        hw_before = {p: 2 * PER_PARTITION + 1 for p in range(PARTITIONS)}
        locker.execute(
            "SELECT 1 FROM oncelog.partitions pt JOIN oncelog.topics t USING (topic_id) "
            "WHERE t.name = %s AND pt.partition = 1 FOR NO KEY UPDATE OF pt",
            (TOPIC,),
        )
        committing = pool.submit(producer.commit_transaction)
        wait_until(lambda: len(end_txn_backends(watcher, waiting=True)) == 1, WAIT, "the EndTxn to block")
        (first,) = end_txn_backends(watcher, waiting=True)
        checker.wait_for_snapshots()
        expect_visible(direct, ["T1"])  # partition 0's marker is written, but not committed

        if how == "backend_terminated":
            assert watcher.execute("SELECT pg_terminate_backend(%s)", (first,)).fetchone() == (True,)
            # The retry comes on a new connection and blocks at the same place.
            wait_until(
                lambda: [p for p in end_txn_backends(watcher, waiting=True) if p != first] != [],
                WAIT,
                "the retried EndTxn to block",
            )
            # Nothing of the terminated attempt survived: not even partition 0's marker.
            with direct.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                ends = {o.partition: o.high_watermark for o in log.list_offsets(conn, topic=TOPIC)}
            assert ends == hw_before, ends
            retried = "committed"
        else:
            assert proxy.cut_all() >= 1
            # The retry reaches the server and waits for the transactions row the original holds.
            wait_until(lambda: len(end_txn_backends(watcher, waiting=True)) == 2, WAIT, "the retry to wait beside it")
            retried = "already_committed"
        checker.wait_for_snapshots()
        expect_visible(direct, ["T1"])
        assert not committing.done()
        locker.rollback()  # release partition 1
        committing.result(WAIT)

        outcomes = seam.outcomes("end_txn", txn_number=2)
        assert outcomes[0] == "DatabaseUnavailableError" and outcomes[-1] == retried, outcomes
        assert journal(direct, 2) == ["CompleteCommit"]
        with direct.connect() as conn:
            prepares = conn.execute(
                sa.text(
                    "SELECT count(*) FROM txn_history WHERE transactional_id = :t AND txn_number = 2 "
                    "AND to_state = 'PrepareCommit'"
                ),
                {"t": TID},
            ).scalar_one()
            markers = conn.execute(
                sa.text(
                    "SELECT partition, count(*) FROM records r JOIN topics t USING (topic_id) "
                    "WHERE t.name = :t AND r.control_type = 'commit' GROUP BY partition ORDER BY partition"
                ),
                {"t": TOPIC},
            ).all()
        assert prepares == 1
        assert [tuple(m) for m in markers] == [(p, 2) for p in range(PARTITIONS)]  # T1's and T2's, once each
        expect_visible(direct, ["T1", "T2"])
        finish(producer, direct, checker, ["T1", "T2"], 2)


# --- a lost abort reply, a lost InitProducerId reply ------------------------------------------


@pytest.mark.timeout(90)
def test_lost_abort_reply_is_answered_already_aborted(
    db_url: str, proxy: FaultProxy, proxied_url: str, direct: sa.Engine, seam: Seam, checker: AtomicityChecker
) -> None:
    create_topic(db_url)
    with open_producer(proxied_url) as producer:
        producer.init_transactions()
        commit_one(producer, "T1")
        producer.begin_transaction()
        send_all(producer, "T2")
        producer.flush(WAIT)
        seam.arm("end_txn", 0, CUT_AFTER)
        producer.abort_transaction()
        assert seam.outcomes("end_txn", txn_number=2) == ["DatabaseUnavailableError", "already_aborted"]
        assert journal(direct, 2) == ["CompleteAbort"]
        expect_visible(direct, ["T1"])
        finish(producer, direct, checker, ["T1"], 2)


@pytest.mark.timeout(90)
def test_lost_init_reply_is_retried_and_the_producer_works(
    db_url: str, proxy: FaultProxy, proxied_url: str, direct: sa.Engine, seam: Seam, checker: AtomicityChecker
) -> None:
    create_topic(db_url)
    with open_producer(proxied_url) as warm:  # the connection pool is warm before the fault
        warm.partitions_for(TOPIC)
        seam.arm("init", 0, CUT_AFTER)
        warm.init_transactions()
        outcomes = seam.outcomes("init")
        assert outcomes[0] == "DatabaseUnavailableError" and len(outcomes) == 2, outcomes
        # The lost call took effect too (the retry bumped again): a gap in the epochs, harmless.
        assert (warm.producer_id, warm.producer_epoch) == (outcomes[1].producer_id, 1)
        commit_one(warm, "T1")
        expect_visible(direct, ["T1"])
        assert status(direct)["producer_epoch"] == 1
        finish(warm, direct, checker, ["T1"], 1)


@pytest.mark.timeout(90)
def test_lost_reply_of_the_epoch_bump_after_an_abort(
    db_url: str, proxy: FaultProxy, proxied_url: str, direct: sa.Engine, seam: Seam, checker: AtomicityChecker
) -> None:
    """A batch's outcome stays unknown (new connections refused past delivery_timeout_ms), so the
    abort that follows also bumps the epoch (KIP-360); that bump's reply is lost. The retried
    bump names the old epoch, which the store recognises as a retry: the same new epoch, not a
    second bump, and not fenced."""
    create_topic(db_url)
    with open_producer(proxied_url, delivery_timeout_ms=1500) as producer:
        producer.init_transactions()
        commit_one(producer, "T1")
        producer.begin_transaction()
        send_all(producer, "T2")
        seam.arm("produce", 0, CUT_BEFORE, block=True)
        producer.flush(WAIT)  # ahead of the commit: the first batch's outcome stays unknown
        with pytest.raises(errors.OncelogError) as failed:
            producer.commit_transaction()
        assert failed.value.abortable, repr(failed.value)
        proxy.block_new_connections(False)
        seam.arm("init", 0, CUT_AFTER)
        producer.abort_transaction()
        bumps = seam.outcomes("init")[-2:]
        assert bumps[0] == "DatabaseUnavailableError", bumps
        assert (bumps[1].producer_id, bumps[1].epoch) == (producer.producer_id, 1), bumps
        assert producer.producer_epoch == 1 and state_of(producer) is TxnState.READY
        assert status(direct)["producer_epoch"] == 1
        assert journal(direct, 2) == ["CompleteAbort"]
        expect_visible(direct, ["T1"])
        finish(producer, direct, checker, ["T1"], 2)
