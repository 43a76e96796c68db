"""Consumer offsets inside transactions (KIP-447; rules 22-24, scenarios 18 and 19).

* send_offsets_to_transaction: the offsets are pending (pending_group_offsets) until the
  transaction ends; a commit makes them the group's committed offsets, an abort drops them.
* Rule 23: at the transaction's commit, pending offsets replace the committed ones only if they
  were written later; an offset committed (plainly, or by another transaction) after them wins.
* Rule 24 / scenario 18, a partition handed over mid-transaction (KIP-447's motivating case): P2's
  transaction holds offset 10 for in-1 over the committed 5. P2 crashes (SIGKILL of its process);
  the group moves in-1 to C1, whose position for it waits (OffsetFetch answers
  UNSTABLE_OFFSET_COMMIT) until the transaction is aborted by its timeout (C1 itself, as a reader,
  aborts the expired transaction), then starts from 5. When P2's transaction commits instead (from
  another thread while C1 waits), C1 starts from 10.
* Scenario 19, the zombie member: offsets sent with group metadata from before a rebalance (old
  generation, removed member, replaced static instance, a partition moved away) are refused; the
  producer gets TransactionAbortableError, can only abort, and then carries on.

Every wait is for an event (a callback, a row, an OffsetFetch answer), with a bound.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from oncelog import Admin, Consumer, ConsumerRecord, OffsetAndMetadata, Producer, TopicPartition, errors
from oncelog.store import groups
from oncelog.txn_state import TxnState
from tests.support import REPO, child_env

IN, OUT = "in", "out"
TP0, TP1 = TopicPartition(IN, 0), TopicPartition(IN, 1)
PER_PARTITION = 20
WAIT = 30.0
#: The real OffsetFetch, for the test's own checks (FetchWatch replaces the module attribute the
#: Consumer calls, so only the consumers' answers are recorded).
offset_fetch = groups.offset_fetch


# --- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture
def url(db_url: str) -> str:
    with Admin(db_url) as admin:
        admin.create_topic(IN, partitions=2)
        admin.create_topic(OUT, partitions=2)
    with Producer(db_url, linger_ms=1) as producer:
        for p in (0, 1):
            for i in range(PER_PARTITION):
                producer.send(IN, f"v-{p}-{i:03d}".encode(), key=f"k{i}".encode(), partition=p)
        producer.flush()
    return db_url


@pytest.fixture
def conn(engine: sa.Engine, url: str) -> Iterator[sa.Connection]:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        yield c


def member(url: str, client: str, **kwargs: Any) -> Consumer:
    settings: dict[str, Any] = {
        "group_id": "g",
        "client_id": client,
        "session_timeout_ms": 3000,
        "heartbeat_interval_ms": 100,
        "enable_auto_commit": False,
        "default_api_timeout_ms": 60_000,
    }
    return Consumer(url, **{**settings, **kwargs})


def wait_for(
    predicate: Callable[[], bool], what: str, *, poll: tuple[Consumer, ...] | list[Consumer] = (), timeout: float = WAIT
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        for c in poll:
            c.poll(0.02)
        if not poll:
            time.sleep(0.01)


def take_over(consumer: Consumer, wanted: set[TopicPartition], *, poll: list[Consumer]) -> None:
    """Poll ``consumer`` and the members in ``poll`` (which let go of partitions in their polls)
    until ``consumer`` owns ``wanted``. Those polls may have returned records, dropped here: rewind
    ``wanted`` to the group's committed offsets, where a new owner starts."""
    wait_for(lambda: consumer.assignment() == wanted, f"{sorted(wanted)} to be handed over", poll=[*poll, consumer])
    for tp, done in consumer.committed(wanted).items():
        consumer.seek(tp, done.offset if done is not None else 0)


def pending(conn: sa.Connection) -> list[tuple[str, int, int, str, str]]:
    return [
        (r.topic, r.partition, r.committed_offset, r.transactional_id, r.transaction_state)
        for r in conn.exec_driver_sql(
            "SELECT topic, partition, committed_offset, transactional_id, transaction_state "
            "FROM pending_group_offsets WHERE group_id = 'g' ORDER BY topic, partition"
        )
    ]


def committed(conn: sa.Connection, *tps: TopicPartition) -> dict[TopicPartition, int | None]:
    answers = offset_fetch(
        conn, group_id="g", partitions=[(tp.topic, tp.partition) for tp in tps], require_stable=False
    )
    return {TopicPartition(*k): v.offset for k, v in answers.items()}


def stable_answer(conn: sa.Connection, tp: TopicPartition) -> groups.CommittedOffset:
    key = (tp.topic, tp.partition)
    return offset_fetch(conn, group_id="g", partitions=[key], require_stable=True)[key]


def output(url: str, partition: int, isolation: str = "read_committed") -> list[bytes]:
    tp = TopicPartition(OUT, partition)
    with Consumer(url, isolation_level=isolation) as reader:
        reader.assign([tp])
        reader.seek(tp, 0)
        out: list[bytes] = []
        while batch := reader.poll(0.2):
            out.extend(r.value for r in batch)
        return out


def read_n(consumer: Consumer, n: int) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + WAIT
    while len(got) < n:
        assert time.monotonic() < deadline, f"timed out waiting for {n} records; got {len(got)}"
        got.extend(consumer.poll(0.05))
    return got


def read_to_end(consumer: Consumer, tp: TopicPartition) -> list[int]:
    """Offsets of ``tp``'s records the consumer polls until its position reaches the end of ``tp``."""
    got: list[int] = []

    def done() -> bool:
        got.extend(r.offset for r in consumer.poll(0.05) if r.topic_partition == tp)
        return consumer.position(tp) >= PER_PARTITION

    wait_for(done, f"the rest of {tp}")
    return got


def state_of(producer: Producer) -> TxnState | None:
    return producer.transaction_state


class FetchWatch:
    """Records every OffsetFetch answer the consumers of this process get, per partition."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.answers: list[tuple[TopicPartition, str | None, int | None, bool]] = []
        self.armed = threading.Event()
        self.unstable_while_armed = threading.Event()
        real = offset_fetch

        def watched(conn: sa.Connection, **kwargs: Any) -> dict[tuple[str, int], groups.CommittedOffset]:
            result = real(conn, **kwargs)
            for k, a in result.items():
                self.answers.append((TopicPartition(*k), a.error, a.offset, a.expired_transaction))
                if a.error == "unstable_offset_commit" and self.armed.is_set():
                    self.unstable_while_armed.set()
            return result

        monkeypatch.setattr(groups, "offset_fetch", watched)

    def for_partition(self, tp: TopicPartition) -> list[tuple[str | None, int | None, bool]]:
        return [(e, o, x) for t, e, o, x in self.answers if t == tp]

    def since(self, mark: int, tp: TopicPartition) -> list[tuple[str | None, int | None, bool]]:
        return [(e, o, x) for t, e, o, x in self.answers[mark:] if t == tp]


# --- offsets in committed and aborted transactions -------------------------------------------


@pytest.mark.parametrize("with_commit", [False, True], ids=["immediate", "with_commit"])
def test_offsets_sent_in_a_transaction_apply_on_commit_and_vanish_on_abort(
    url: str, conn: sa.Connection, with_commit: bool
) -> None:
    """Kafka's TxnOffsetCommit (``send_offsets_with_commit=False``) leaves the offsets pending in
    the store until the transaction ends; by default they wait in the producer and go with the
    commit, so no reader ever waits for them."""
    with (
        member(url, "c1") as c,
        Producer(url, transactional_id="t1", linger_ms=1, send_offsets_with_commit=with_commit) as p,
    ):
        c.subscribe([IN])
        p.init_transactions()
        records = read_n(c, 2 * PER_PARTITION)
        assert len(records) == 2 * PER_PARTITION

        # Abort: nothing of it remains.
        p.begin_transaction()
        p.send(OUT, b"dropped", partition=0)
        p.send_offsets_to_transaction({TP0: 7, TP1: OffsetAndMetadata(8, "m8")}, c.group_metadata())
        if with_commit:
            assert pending(conn) == []
            assert stable_answer(conn, TP0).error is None
        else:
            assert pending(conn) == [(IN, 0, 7, "t1", "Ongoing"), (IN, 1, 8, "t1", "Ongoing")]
            assert stable_answer(conn, TP0).error == "unstable_offset_commit"
        assert committed(conn, TP0, TP1) == {TP0: None, TP1: None}  # require_stable=False: the old answer
        p.abort_transaction()
        assert pending(conn) == []
        assert committed(conn, TP0, TP1) == {TP0: None, TP1: None}
        assert stable_answer(conn, TP0).error is None

        # Commit: the offsets are the group's, written by this producer.
        p.begin_transaction()
        p.send(OUT, b"kept", partition=0)
        p.send_offsets_to_transaction({TP0: 3, TP1: OffsetAndMetadata(4, "m4")}, c.group_metadata())
        p.commit_transaction()
        assert pending(conn) == []
        assert c.committed([TP0, TP1]) == {TP0: OffsetAndMetadata(3, ""), TP1: OffsetAndMetadata(4, "m4")}
        by = {
            r.partition: r.committed_by_producer_id
            for r in conn.exec_driver_sql("SELECT partition, committed_by_producer_id FROM group_offsets")
        }
        assert by == {0: p.producer_id, 1: p.producer_id}
        # Offsets only (no records) in a transaction commit too.
        p.begin_transaction()
        p.send_offsets_to_transaction({TP0: 5}, c.group_metadata())
        p.commit_transaction()
        assert committed(conn, TP0) == {TP0: 5}
    assert output(url, 0) == [b"kept"]


@pytest.mark.parametrize("with_commit", [False, True], ids=["immediate", "with_commit"])
def test_offset_metadata_too_large_in_a_transaction(url: str, conn: sa.Connection, with_commit: bool) -> None:
    with (
        member(url, "c1") as c,
        Producer(url, transactional_id="t1", linger_ms=1, send_offsets_with_commit=with_commit) as p,
    ):
        c.subscribe([IN])
        p.init_transactions()
        p.begin_transaction()
        with pytest.raises(errors.OffsetMetadataTooLargeError):
            p.send_offsets_to_transaction({TP0: OffsetAndMetadata(1, "x" * 4097)}, c.group_metadata())
        assert pending(conn) == []
        p.abort_transaction()


def test_rule_23_pending_offsets_do_not_overwrite_a_later_commit(url: str, conn: sa.Connection) -> None:
    with (
        member(url, "c1") as c,
        Producer(url, transactional_id="t1", linger_ms=1, send_offsets_with_commit=False) as p1,
        Producer(url, transactional_id="t2", linger_ms=1, send_offsets_with_commit=False) as p2,
    ):
        c.subscribe([IN])
        p1.init_transactions()
        p2.init_transactions()

        # Pending 10, then a plain commit of 20: the transaction's commit leaves 20.
        p1.begin_transaction()
        p1.send_offsets_to_transaction({TP0: 10}, c.group_metadata())
        c.commit({TP0: 20})
        assert committed(conn, TP0) == {TP0: 20}
        p1.commit_transaction()
        assert committed(conn, TP0) == {TP0: 20}, "older pending offsets overwrote a later commit"

        # A plain commit of 5, then pending 10: the commit applies 10 (it is later).
        c.commit({TP1: 5})
        p1.begin_transaction()
        p1.send_offsets_to_transaction({TP1: 10}, c.group_metadata())
        p1.commit_transaction()
        assert committed(conn, TP1) == {TP1: 10}

        # Two transactions: t1 writes 12 first, t2 writes 15 later; t2 commits first, then t1.
        p1.begin_transaction()
        p1.send_offsets_to_transaction({TP1: 12}, c.group_metadata())
        p2.begin_transaction()
        p2.send_offsets_to_transaction({TP1: 15}, c.group_metadata())
        assert [row[3] for row in pending(conn)] == ["t1", "t2"]
        p2.commit_transaction()
        assert committed(conn, TP1) == {TP1: 15}
        # t1's offsets are still pending: a stable fetch still waits for t1.
        assert stable_answer(conn, TP1).error == "unstable_offset_commit"
        p1.commit_transaction()
        assert committed(conn, TP1) == {TP1: 15}, "t1's earlier offsets overwrote t2's later ones"

        # The same transaction writing again moves its offsets later: it then wins.
        p1.begin_transaction()
        p1.send_offsets_to_transaction({TP0: 30}, c.group_metadata())
        c.commit({TP0: 40})
        p1.send_offsets_to_transaction({TP0: 35}, c.group_metadata())
        p1.commit_transaction()
        assert committed(conn, TP0) == {TP0: 35}

        # An abort never touches the committed offset, whatever the order.
        p2.begin_transaction()
        p2.send_offsets_to_transaction({TP0: 99}, c.group_metadata())
        p2.abort_transaction()
        assert committed(conn, TP0) == {TP0: 35}


def test_committed_waits_for_a_pending_transaction_read_uncommitted_does_not(url: str, conn: sa.Connection) -> None:
    with (
        member(url, "c1") as c,
        Consumer(url, group_id="g", isolation_level="read_uncommitted") as dirty,
        Producer(url, transactional_id="t1", linger_ms=1, send_offsets_with_commit=False) as p,
    ):
        c.subscribe([IN])
        c.commit({TP0: 2})
        p.init_transactions()
        p.begin_transaction()
        p.send_offsets_to_transaction({TP0: 6}, c.group_metadata())
        # read_uncommitted asks without require_stable: the committed offset, at once.
        assert dirty.committed([TP0]) == {TP0: OffsetAndMetadata(2, "")}
        # read_committed waits; the commit from another thread releases it with the new offset.
        result: dict[str, Any] = {}

        def ask() -> None:
            try:
                result["value"] = c.committed([TP0])
            except BaseException as exc:  # pragma: no cover - reported below
                result["error"] = exc

        asker = threading.Thread(target=ask)
        asker.start()
        wait_for(lambda: stable_answer(conn, TP0).error == "unstable_offset_commit", "the pending offsets")
        asker.join(0.3)
        assert asker.is_alive(), f"committed() returned while the transaction was open: {result}"
        p.commit_transaction()
        asker.join(WAIT)
        assert not asker.is_alive()
        assert result == {"value": {TP0: OffsetAndMetadata(6, "")}}


# --- scenario 18: a partition handed over mid-transaction ------------------------------------


class Child:
    """tests/support/kip447_member_child.py: C2 and P2 in a process of their own."""

    def __init__(self, url: str, tmp: Path, transactional_id: str, timeout_ms: int) -> None:
        self.events_path = tmp / "c2.events"
        self.stderr_path = tmp / "c2.stderr"
        self._stderr = open(self.stderr_path, "w", encoding="utf-8")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.kip447_member_child",
                "g",
                transactional_id,
                str(timeout_ms),
                str(self.events_path),
            ],
            cwd=REPO,
            env=child_env(url),
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )

    def events(self) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        text = self.events_path.read_text(encoding="utf-8")
        return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]

    def event(self, name: str) -> dict[str, Any] | None:
        return next((e for e in self.events() if e["event"] == name), None)

    def wait_event(self, name: str, poll: list[Consumer]) -> dict[str, Any]:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the child exited {self.proc.returncode}: {self.stderr_path.read_text()}")
            return self.event(name) is not None

        wait_for(seen, f"the child's {name!r}", poll=poll)
        found = self.event(name)
        assert found is not None
        return found

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(WAIT)
        assert self.proc.returncode == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(WAIT)
        self._stderr.close()


def test_new_owner_waits_for_the_crashed_transaction_to_time_out_then_starts_from_5(
    url: str, conn: sa.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = FetchWatch(monkeypatch)
    assigned: list[set[TopicPartition]] = []
    # C1 and C2 (in the child) both join; C1 ("c1" sorts first) gets in-0, C2 gets in-1.
    with member(url, "c1") as c1:
        c1.subscribe([IN], on_assign=lambda parts: assigned.append(set(parts)))
        child = Child(url, tmp_path, "T2", timeout_ms=3000)
        try:
            joined = child.wait_event("joined", poll=[c1])
            child.wait_event("committed", poll=[c1])
            held = child.wait_event("pending", poll=[c1])
            wait_for(lambda: c1.assignment() == {TP0}, "C1 to hand in-1 over", poll=[c1])
            assert committed(conn, TP1) == {TP1: 5}
            assert pending(conn) == [(IN, 1, 10, "T2", "Ongoing")]
            gen = c1.group_metadata().generation_id
            assert gen == joined["generation"]

            mark = len(watch.answers)
            child.kill()  # P2 crashes with its transaction (and offset 10) open
            # C2 misses its heartbeats; C1's heartbeat removes it and C1 gets in-1 at its poll.
            wait_for(lambda: TP1 in c1.assignment(), "the rebalance giving in-1 to C1", poll=[c1])
            assert assigned[-1] == {TP1}
            assert c1.group_metadata().generation_id > gen
            position = c1.position(TP1)
        finally:
            child.stop()
        answers = watch.since(mark, TP1)
        # C1's first OffsetFetch for in-1 found the pending offset: it did not start from a stale
        # one. It waited, then (the transaction being past its timeout) had it aborted.
        assert answers[0][0] == "unstable_offset_commit", answers
        assert any(expired for _, _, expired in answers), "nobody saw the transaction expire"
        assert answers[-1] == (None, 5, False), answers
        assert position == 5
        status = conn.exec_driver_sql(
            "SELECT state, producer_epoch FROM transaction_status WHERE transactional_id = 'T2'"
        ).one()
        assert status.state == "CompleteAbort"
        assert status.producer_epoch == held["epoch"] + 1  # fenced by the timeout abort
        assert pending(conn) == []
        assert committed(conn, TP1) == {TP1: 5}
        # C1 reads in-1 on from 5; P2's aborted copies never reach read_committed readers.
        assert read_to_end(c1, TP1) == list(range(5, PER_PARTITION))
    assert output(url, 1) == [f"V-1-{i:03d}".encode() for i in range(5)]
    assert len(output(url, 1, "read_uncommitted")) == 10


def test_new_owner_waits_for_the_old_transaction_to_commit_then_starts_from_10(
    url: str, conn: sa.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = FetchWatch(monkeypatch)
    assigned: list[set[TopicPartition]] = []
    with (
        member(url, "c1") as c1,
        member(url, "c2", max_poll_records=5) as c2,
        Producer(url, transactional_id="T2", linger_ms=1, send_offsets_with_commit=False) as p2,
    ):
        c1.subscribe([IN], on_assign=lambda parts: assigned.append(set(parts)))
        c2.subscribe([IN])
        take_over(c2, {TP1}, poll=[c1])
        assert c1.assignment() == {TP0}
        p2.init_transactions()
        for target in (5, 10):
            records = read_n(c2, 5)
            assert [r.offset for r in records] == list(range(target - 5, target))
            p2.begin_transaction()
            for r in records:
                p2.send(OUT, r.value.upper(), partition=r.partition)
            p2.send_offsets_to_transaction({TP1: c2.position(TP1)}, c2.group_metadata())
            if target == 5:
                p2.commit_transaction()
        p2.flush()
        assert pending(conn) == [(IN, 1, 10, "T2", "Ongoing")]
        # C2 goes away (P2, stalled, still holds its transaction); in-1 moves to C1.
        mark = len(watch.answers)
        c2.close()
        wait_for(lambda: TP1 in c1.assignment(), "the rebalance giving in-1 to C1", poll=[c1])
        assert assigned[-1] == {TP1}

        # P2 commits from another thread, once C1 is seen waiting inside position().
        outcome: dict[str, Any] = {}

        def commit_when_c1_waits() -> None:
            if not watch.unstable_while_armed.wait(WAIT):
                outcome["error"] = "C1 never asked for in-1's offset"
                return
            try:
                p2.commit_transaction()
                outcome["committed"] = True
            except BaseException as exc:  # pragma: no cover - reported below
                outcome["error"] = exc

        committer = threading.Thread(target=commit_when_c1_waits)
        watch.armed.set()
        committer.start()
        position = c1.position(TP1)
        committer.join(WAIT)
        assert outcome.get("committed") is True, outcome
        assert position == 10
        answers = watch.since(mark, TP1)
        assert answers[0][0] == "unstable_offset_commit"
        assert answers[-1] == (None, 10, False)
        assert all(e == "unstable_offset_commit" for e, _, _ in answers[:-1])
        assert committed(conn, TP1) == {TP1: 10}
        assert read_to_end(c1, TP1) == list(range(10, PER_PARTITION))
    assert output(url, 1) == [f"V-1-{i:03d}".encode() for i in range(10)]


def test_with_the_offsets_in_the_commit_the_new_owner_never_waits_and_the_old_commit_is_refused(
    url: str, conn: sa.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scenario 18 with the default producer: the offsets travel with the commit, so the store
    checks the member and its partitions in the same database transaction that would apply
    them. The new owner of in-1 finds no pending offset (it never waits) and starts from the last
    committed one; the old owner's commit, after the hand-over, is refused whole."""
    watch = FetchWatch(monkeypatch)
    with (
        member(url, "c1") as c1,
        member(url, "c2", max_poll_records=5) as c2,
        Producer(url, transactional_id="T2", linger_ms=1) as p2,
    ):
        c1.subscribe([IN])
        c2.subscribe([IN])
        take_over(c2, {TP1}, poll=[c1])
        assert c1.assignment() == {TP0}
        p2.init_transactions()
        for target in (5, 10):
            records = read_n(c2, 5)
            assert [r.offset for r in records] == list(range(target - 5, target))
            p2.begin_transaction()
            for r in records:
                p2.send(OUT, r.value.upper(), partition=r.partition)
            p2.send_offsets_to_transaction({TP1: c2.position(TP1)}, c2.group_metadata())
            if target == 5:
                p2.commit_transaction()
        p2.flush()  # the second transaction's records are in the log, its offsets in P2
        assert pending(conn) == []
        mark = len(watch.answers)
        c2.close()
        wait_for(lambda: TP1 in c1.assignment(), "the rebalance giving in-1 to C1", poll=[c1])
        # C1's one OffsetFetch for in-1: the last committed offset at once, nothing pending.
        assert watch.since(mark, TP1) == [(None, 5, False)]
        # The old owner's commit comes after the hand-over: refused, nothing of it lands.
        with pytest.raises(errors.TransactionAbortableError) as caught:
            p2.commit_transaction()
        assert isinstance(caught.value.__cause__, errors.UnknownMemberIdError), repr(caught.value.__cause__)
        p2.abort_transaction()
        assert committed(conn, TP1) == {TP1: 5}
    assert output(url, 1) == [f"V-1-{i:03d}".encode() for i in range(5)]
    assert len(output(url, 1, "read_uncommitted")) == 10


def copy_once(consumer: Consumer, producer: Producer) -> int:
    """One iteration of the consume-transform-produce loop of examples/consume_transform_produce.py."""
    records = consumer.poll(0.2)
    if not records:
        return 0
    producer.begin_transaction()
    try:
        for r in records:
            producer.send(OUT, r.value.upper(), key=r.key, partition=r.partition)
        producer.send_offsets_to_transaction(
            {tp: consumer.position(tp) for tp in consumer.assignment()}, consumer.group_metadata()
        )
        producer.commit_transaction()
    except errors.OncelogError as exc:
        if exc.fatal:
            raise
        producer.abort_transaction()
        for tp, done in consumer.committed(consumer.assignment()).items():
            if done is not None:
                consumer.seek(tp, done.offset)
            else:
                consumer.seek_to_beginning([tp])
        return 0
    return len(records)


def wait_heartbeat(conn: sa.Connection, consumer: Consumer) -> None:
    """Until ``consumer``'s heartbeat thread has beaten once more (so it saw the current generation)."""
    member_id = consumer.group_metadata().member_id
    now = conn.exec_driver_sql("SELECT clock_timestamp()").scalar_one()
    wait_for(
        lambda: (
            conn.exec_driver_sql(
                "SELECT last_heartbeat_at FROM group_members WHERE member_id = %(m)s", {"m": member_id}
            ).scalar_one()
            > now
        ),
        "a heartbeat",
    )


def test_a_partition_handed_over_and_back_is_not_copied_twice(url: str, conn: sa.Connection) -> None:
    """C1 copies in-0 and in-1 part of the way. C2 joins; C1 hands in-1 over at its next poll;
    C2 copies the rest of it in a transaction with its offsets, and leaves. C1 then gets in-1
    back: it must resume from C2's committed offset. If it resumed from its own position
    instead, its transaction would copy C2's records a second time: exactly-once broken."""
    with (
        member(url, "c1", max_poll_records=5) as c1,
        member(url, "c2") as c2,
        Producer(url, transactional_id="T1", linger_ms=1) as p1,
        Producer(url, transactional_id="T2", linger_ms=1) as p2,
    ):
        c1.subscribe([IN])
        p1.init_transactions()
        p2.init_transactions()
        wait_for(lambda: copy_once(c1, p1) >= 0 and all(c1.position(tp) >= 5 for tp in (TP0, TP1)), "C1's copies")
        before = committed(conn, TP1)[TP1]
        assert before is not None and before < PER_PARTITION
        # C2 joins, gets in-1 once C1 (copying on) lets go of it, copies the rest of in-1 from
        # C1's last commit, and leaves.
        c2.subscribe([IN])
        assert c2.assignment() == set()
        wait_for(lambda: copy_once(c1, p1) >= 0 and c1.assignment() == {TP0}, "C1 to hand in-1 over")
        before = committed(conn, TP1)[TP1]
        assert before is not None and before < PER_PARTITION
        take_over(c2, {TP1}, poll=[])
        assert c2.position(TP1) == before
        wait_for(lambda: copy_once(c2, p2) >= 0 and c2.position(TP1) == PER_PARTITION, "C2's copies")
        c2.close()
        assert committed(conn, TP1) == {TP1: PER_PARTITION}
        wait_heartbeat(conn, c1)  # C1's heartbeat has seen the latest generation
        # C1 carries on with its loop until everything is committed.
        wait_for(
            lambda: copy_once(c1, p1) >= 0 and committed(conn, TP0, TP1) == {TP0: PER_PARTITION, TP1: PER_PARTITION},
            "C1 to finish",
        )
        for _ in range(3):
            copy_once(c1, p1)
    copies = output(url, 1)
    twice = sorted(v for v in set(copies) if copies.count(v) > 1)
    assert twice == [], f"{len(twice)} records of in-1 copied twice: {twice[:5]}..."
    assert copies == [f"V-1-{i:03d}".encode() for i in range(PER_PARTITION)]
    assert output(url, 0) == [f"V-0-{i:03d}".encode() for i in range(PER_PARTITION)]


# --- scenario 19: the zombie member ----------------------------------------------------------


@pytest.mark.parametrize("with_commit", [False, True], ids=["immediate", "with_commit"])
@pytest.mark.parametrize(
    "zombie",
    ["old_generation", "old_generation_offsets_only", "removed_member", "replaced_static_instance", "moved_partition"],
)
def test_a_zombie_members_offsets_abort_the_transaction_and_the_producer_carries_on(
    url: str, conn: sa.Connection, zombie: str, with_commit: bool
) -> None:
    """Refused at send_offsets_to_transaction (Kafka's way), or by default at the commit that
    carries the offsets: either way nothing of the transaction lands and the producer goes on."""
    offsets_only = zombie.endswith("_offsets_only")  # the offsets are the transaction's first call
    zombie = zombie.removesuffix("_offsets_only")
    expected_cause = {
        "old_generation": errors.IllegalGenerationError,  # older than its ownership of in-1
        "removed_member": errors.UnknownMemberIdError,
        "replaced_static_instance": errors.FencedInstanceIdError,
        "moved_partition": errors.UnassignedPartitionError,
    }[zombie]
    static = "inst-1" if zombie == "replaced_static_instance" else None
    with (
        member(url, "c1", group_instance_id=static) as c1,
        member(url, "c2") as c2,
        member(url, "c1", group_instance_id=static) as c1b,
        Producer(url, transactional_id="t1", linger_ms=1, send_offsets_with_commit=with_commit) as p,
    ):
        c1.subscribe([IN])
        stale = c1.group_metadata()
        offsets: dict[TopicPartition, int] = {TP0: 3}
        if zombie == "old_generation":
            # C1 hands in-1 over (generation N+1) and gets it back when C2 leaves (N+2): its
            # metadata of generation N+1 predates its new ownership of in-1.
            c2.subscribe([IN])
            take_over(c2, {TP1}, poll=[c1])
            stale = c1.group_metadata()
            c2.close()
            wait_for(lambda: c1.assignment() == {TP0, TP1}, "C1 to get in-1 back", poll=[c1])
            offsets = {TP0: 3, TP1: 3}
        elif zombie == "removed_member":
            c2.subscribe([IN])
            conn.exec_driver_sql(
                "UPDATE group_members SET last_heartbeat_at = now() - interval '1 hour' WHERE member_id = %(m)s",
                {"m": stale.member_id},
            )
            groups.heartbeat(conn, group_id="g", member_id=c2.group_metadata().member_id)  # removes C1
        elif zombie == "replaced_static_instance":
            c1b.subscribe([IN])  # the instance restarted elsewhere
        else:
            c2.subscribe([IN])
            wait_for(lambda: c1.assignment() == {TP0}, "C1 to apply the rebalance", poll=[c1])
            stale = c1.group_metadata()  # current generation, but in-1 is C2's now
            offsets = {TP0: 3, TP1: 3}

        p.init_transactions()
        p.begin_transaction()
        if not offsets_only:
            p.send(OUT, b"zombie", partition=0)
            p.flush()  # in the log, so the abort has something to mark
        if with_commit:
            p.send_offsets_to_transaction(offsets, stale)  # held for the commit, which is refused
            with pytest.raises(errors.TransactionAbortableError) as caught:
                p.commit_transaction()
        else:
            with pytest.raises(errors.TransactionAbortableError) as caught:
                p.send_offsets_to_transaction(offsets, stale)
        assert isinstance(caught.value.__cause__, expected_cause), repr(caught.value.__cause__)
        assert p.transaction_state is TxnState.ABORTABLE_ERROR
        assert pending(conn) == []
        # The transaction can only abort.
        with pytest.raises(errors.TransactionAbortableError):
            p.commit_transaction()
        p.abort_transaction()
        assert state_of(p) is TxnState.READY

        # The producer carries on: with a live member's metadata, the next transaction commits.
        live = c1b if zombie == "replaced_static_instance" else c1
        if zombie in ("moved_partition", "removed_member"):
            wait_for(lambda: live.assignment() == {TP0}, "C1 to catch up", poll=[live, c2])
        live.poll(0.05)
        p.begin_transaction()
        p.send(OUT, b"live", partition=0)
        p.send_offsets_to_transaction({TP0: 4}, live.group_metadata())
        p.commit_transaction()
        assert committed(conn, TP0) == {TP0: 4}
    assert output(url, 0) == [b"live"]
    assert (b"zombie" in output(url, 0, "read_uncommitted")) is not offsets_only
