"""Zombie fencing and transaction timeouts with real processes (scenarios 6 and 13, rules 12, 16, 20).

Two processes (tests/support/txn_child.py) share one transactional id. Process A initialises,
begins a transaction, writes and flushes records (they are in the log, held behind the last stable
offset), and is frozen with SIGSTOP while idle between calls (the parent knows it is idle because
every command is answered before the child reads the next one; it knows it is frozen from
/proc/<pid>/stat). Then:

* fencing: process B initialises the same transactional id, which must abort A's open transaction
  at once (B's epoch is higher), and commits its own records. A is resumed (SIGCONT): whatever it
  tries next fails with ProducerFencedError, which is fatal, and every later call fails the same
  way (FATAL_ERROR is terminal). No read_committed reader ever sees A's records, neither right after
  B's initialisation nor at the end; read_uncommitted readers see the ones A flushed, flagged
  aborted in the log; what A tried after it was fenced never reached the log at all.

* timeout: nobody else initialises, A's short transaction_timeout_ms passes while it is frozen,
  and its open transaction holds the last stable offset back (plain records written after it are
  invisible to read_committed). Either a read_committed Consumer meets the expired transaction and
  aborts it (its poll then moves past it), or nobody reads and A itself finds out. A, resumed, gets
  an abortable error (InvalidProducerEpochError after the reader fenced it, TransactionTimeoutError
  when it finds the expired transaction first), aborts, and carries on under the same producer id
  (KIP-360): its next transaction commits and becomes visible; the timed-out one never does.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import oncelog
from oncelog import Consumer, TopicPartition
from oncelog.store import create_engine, log
from oncelog.store.records import PartitionFetch
from tests.support import REPO, child_env
from tests.support.logcheck import wait_until

TID = "zombie-tid"
TOPIC = "t"
PARTITIONS = 2
#: Bound on one command's reply; never an assertion on speed.
REPLY_TIMEOUT = 60.0


# --- the child process -----------------------------------------------------------------------


class TxnChild:
    """A transactional producer in its own process (tests/support/txn_child.py)."""

    def __init__(self, url: str, transactional_id: str, timeout_ms: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.txn_child", transactional_id, str(timeout_ms)],
            cwd=REPO,
            env=child_env(url),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        self._threads = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Send one command and wait for its one reply."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        try:
            line = self._lines.get(timeout=REPLY_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"no reply to {op!r} within {REPLY_TIMEOUT}s") from None
        if line is None:
            self.proc.wait(10)
            raise AssertionError(f"child exited ({self.proc.returncode}) on {op!r}: {''.join(self._stderr)}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ok(self, op: str, **args: Any) -> dict[str, Any]:
        reply = self.call(op, **args)
        assert reply["ok"], f"{op}: {reply}"
        return reply

    def send(self, values: list[tuple[int, str]], *, flush: bool = True) -> dict[str, Any]:
        return self.call("send", topic=TOPIC, records=[[p, v] for p, v in values], flush=flush)

    def stop(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        wait_until(lambda: proc_state(self.pid) == "T", 30, f"process {self.pid} to stop")

    def cont(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        wait_until(lambda: proc_state(self.pid) != "T", 30, f"process {self.pid} to continue")

    def close(self) -> None:
        """Ask the child to close its producer and exit; kill it if it does not."""
        try:
            if self.proc.poll() is None:
                with_continue = proc_state(self.pid) == "T"
                if with_continue:
                    os.kill(self.pid, signal.SIGCONT)
                try:
                    self.call("close")
                    self.proc.wait(30)
                except (AssertionError, OSError, subprocess.TimeoutExpired):
                    pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            for t in self._threads:
                t.join(10)
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()


def proc_state(pid: int) -> str:
    """The one-letter state of a process from /proc (T = stopped), or '?' once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return stat[stat.rindex(")") + 2]


@pytest.fixture
def children() -> Iterator[list[TxnChild]]:
    """Children started by a test; all closed (continued first if frozen) at the end."""
    started: list[TxnChild] = []
    yield started
    for child in started:
        child.close()


# --- direct reads (no producer involved) ------------------------------------------------------


@pytest.fixture
def direct(db_url: str) -> Iterator[sa.Engine]:
    engine = create_engine(db_url, poolclass=sa.NullPool)
    yield engine
    engine.dispose()


def snapshot(engine: sa.Engine, *, read_committed: bool) -> dict[int, PartitionFetch[Any]]:
    """Every partition of the topic from offset 0, in ONE snapshot (store.log.fetch_many)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        return {
            tp[1]: part
            for tp, part in log.fetch_many(
                conn, {(TOPIC, p): 0 for p in range(PARTITIONS)}, max_records=10_000, read_committed=read_committed
            ).items()
        }


def snapshot_values(engine: sa.Engine, *, read_committed: bool) -> list[str]:
    snap = snapshot(engine, read_committed=read_committed)
    return sorted(r.value.decode() for part in snap.values() for r in part.records if r.value is not None)


def committed_view(engine: sa.Engine) -> list[str]:
    """What the committed_records view shows (read_committed through SQL)."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text('SELECT value FROM committed_records WHERE topic = :t ORDER BY partition, "offset"'),
            {"t": TOPIC},
        ).scalars()
        return sorted(bytes(v).decode() for v in rows)


def aborted_flags(engine: sa.Engine) -> dict[str, bool]:
    """value -> the log's aborted flag, for every data record of the topic."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT r.value, r.aborted FROM records r JOIN topics t USING (topic_id) "
                "WHERE t.name = :t AND r.control_type IS NULL"
            ),
            {"t": TOPIC},
        ).all()
        return {bytes(v).decode(): bool(a) for v, a in rows}


def txn_row(engine: sa.Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT * FROM transaction_status WHERE transactional_id = :t"), {"t": TID}).one()
        return dict(row._mapping)


def consume_all(url: str, *, isolation_level: str) -> tuple[list[str], dict[int, int]]:
    """A fresh Consumer reads every partition from 0 until its positions reach the end it reports
    (the last stable offset for read_committed). Returns the values read and the positions."""
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    out: list[str] = []
    with Consumer(url, isolation_level=isolation_level) as consumer:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + 30
        while True:
            out += [r.value.decode() for r in consumer.poll(0.05)]
            ends = consumer.end_offsets(tps)
            if all(consumer.position(tp) >= ends[tp] for tp in tps):
                return sorted(out), {tp.partition: consumer.position(tp) for tp in tps}
            assert time.monotonic() < deadline, "the consumer did not reach the end"


def create_topic(url: str) -> None:
    with oncelog.Admin(url) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS)


def spread(prefix: str, n: int) -> list[tuple[int, str]]:
    """``n`` records over the partitions, values ``<prefix>-<i>``."""
    return [(i % PARTITIONS, f"{prefix}-{i}") for i in range(n)]


def assert_fenced(reply: dict[str, Any], what: str) -> None:
    assert not reply["ok"], f"{what} succeeded on a fenced producer: {reply}"
    assert reply["error"] == "ProducerFencedError", f"{what}: {reply}"
    assert reply["fatal"] and not reply["abortable"] and not reply["retriable"], reply
    assert reply["state"] == "FATAL_ERROR", reply


# --- scenario 6: a second instance fences the first --------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("first_call", ["send_then_commit", "commit", "abort"])
def test_new_instance_fences_a_frozen_zombie(
    db_url: str, direct: sa.Engine, children: list[TxnChild], first_call: str
) -> None:
    create_topic(db_url)
    a = TxnChild(db_url, TID, 60_000)
    children.append(a)
    a.ok("init")
    a.ok("begin")
    sent = a.send(spread("A1", 6))
    assert sent["ok"] and all("offset" in r for r in sent["results"]), sent
    assert sent["state"] == "IN_TRANSACTION"
    a_epoch, a_pid = sent["epoch"], sent["producer_id"]

    # A's records are in the log, held behind the last stable offset.
    assert snapshot_values(direct, read_committed=False) == sorted(v for _, v in spread("A1", 6))
    held = snapshot(direct, read_committed=True)
    assert all(part.records == [] and part.last_stable_offset == 0 for part in held.values()), held
    assert txn_row(direct)["state"] == "Ongoing"

    a.stop()  # idle between calls: it answered, and waits for the next command

    b = TxnChild(db_url, TID, 60_000)
    children.append(b)
    b_init = b.ok("init")
    assert b_init["producer_id"] == a_pid and b_init["epoch"] > a_epoch, (b_init, a_epoch)

    # Right after B's initialisation: A's transaction is aborted (B cannot wait for a frozen process).
    row = txn_row(direct)
    assert row["state"] == "Empty" and row["producer_epoch"] == b_init["epoch"], row
    flags = aborted_flags(direct)
    assert {v: flags[v] for _, v in spread("A1", 6)} == {v: True for _, v in spread("A1", 6)}
    assert snapshot_values(direct, read_committed=True) == []
    assert committed_view(direct) == []
    committed, positions = consume_all(db_url, isolation_level="read_committed")
    assert committed == []
    assert positions == {0: 4, 1: 4}, positions  # past A's records and the abort markers
    uncommitted, _ = consume_all(db_url, isolation_level="read_uncommitted")
    assert uncommitted == sorted(v for _, v in spread("A1", 6))

    b.ok("begin")
    b_sent = b.send(spread("B1", 4))
    assert all("offset" in r for r in b_sent["results"]), b_sent
    b.ok("commit")
    assert consume_all(db_url, isolation_level="read_committed")[0] == sorted(v for _, v in spread("B1", 4))

    a.cont()
    if first_call == "send_then_commit":
        late = a.send(spread("A2", 4))
        # send() itself was accepted (A still believed it was in its transaction); the store
        # refused the batches, and the fencing error failed every future.
        assert late["ok"] and late["sent"] == 4, late
        assert {r.get("error") for r in late["results"]} == {"ProducerFencedError"}, late
        assert late["state"] == "FATAL_ERROR", late
        assert_fenced(a.call("commit"), "commit after the fenced send")
    else:
        assert_fenced(a.call(first_call), first_call)

    # FATAL_ERROR is terminal: every later call fails with the same fatal error.
    assert_fenced(a.send(spread("A3", 2), flush=False), "send")
    assert_fenced(a.call("commit"), "commit")
    assert_fenced(a.call("abort"), "abort")
    assert_fenced(a.call("begin"), "begin")
    assert_fenced(a.call("commit"), "commit again")
    assert a.call("state")["state"] == "FATAL_ERROR"

    # B is not disturbed by the zombie: another transaction commits.
    b.ok("begin")
    b.send(spread("B2", 4))
    b.ok("commit")

    expected_committed = sorted(v for _, v in spread("B1", 4) + spread("B2", 4))
    assert consume_all(db_url, isolation_level="read_committed")[0] == expected_committed
    assert snapshot_values(direct, read_committed=True) == expected_committed
    assert committed_view(direct) == expected_committed
    # read_uncommitted: A's flushed records are there (flagged aborted); what A tried after it
    # was fenced never reached the log.
    everything = sorted(v for _, v in spread("A1", 6)) + expected_committed
    assert consume_all(db_url, isolation_level="read_uncommitted")[0] == sorted(everything)
    flags = aborted_flags(direct)
    assert sorted(flags) == sorted(everything)
    assert {v for v, aborted in flags.items() if aborted} == {v for _, v in spread("A1", 6)}

    with direct.connect() as conn:
        history = conn.execute(
            sa.text(
                "SELECT txn_number, to_state, producer_epoch FROM txn_history WHERE transactional_id = :t "
                "AND to_state IN ('CompleteCommit', 'CompleteAbort') ORDER BY id"
            ),
            {"t": TID},
        ).all()
    # A's transaction 1 aborted once (by B's fence, at B's epoch), B's two committed once each.
    assert [(n, s) for n, s, _ in history] == [(1, "CompleteAbort"), (2, "CompleteCommit"), (3, "CompleteCommit")]
    assert {e for _, _, e in history} == {b_init["epoch"]}


# --- scenario 13: a transaction times out while its producer is frozen -----------------------


TIMEOUT_MS = 3000


@pytest.mark.timeout(120)
@pytest.mark.parametrize("first_call", ["send", "commit", "abort"])
@pytest.mark.parametrize("who_finds_out", ["reader_aborts", "producer_finds_out"])
def test_frozen_transaction_times_out_and_the_producer_recovers(
    db_url: str, direct: sa.Engine, children: list[TxnChild], who_finds_out: str, first_call: str
) -> None:
    """``first_call``: what A does first once resumed. ``send``: more records (the store refuses
    them, abortable), then commit (refused again). ``commit``: commit at once (abortable error).
    ``abort``: abort at once, which must simply succeed (the transaction is aborted already, or
    now). Either way A then aborts if it has to and carries on: its next transaction commits."""
    create_topic(db_url)
    a = TxnChild(db_url, TID, TIMEOUT_MS)
    children.append(a)
    a.ok("init")
    a.ok("begin")
    sent = a.send(spread("A1", 4))
    assert all("offset" in r for r in sent["results"]), sent
    a_pid, a_epoch = sent["producer_id"], sent["epoch"]
    a.stop()

    # Plain records written after A's open transaction: read_committed readers cannot see them
    # until A's transaction is decided.
    with oncelog.Producer(db_url, linger_ms=0) as plain:
        futures = [plain.send(TOPIC, f"P-{i}".encode(), partition=i % PARTITIONS) for i in range(6)]
        plain.flush(30)
        assert [f.result(30).offset for f in futures] == [2, 2, 3, 3, 4, 4]
    plain_values = sorted(f"P-{i}" for i in range(6))

    # The transaction expires while A is frozen. A fetch alone decides nothing: the last stable
    # offset stays at A's first offset, and the fetch reports the expired transaction.
    wait_until(lambda: txn_row(direct)["expired"], 60, "A's transaction to pass its timeout")
    held = snapshot(direct, read_committed=True)
    for part in held.values():
        assert part.records == [] and part.last_stable_offset == 0 and part.high_watermark == 5, part
        assert part.expired_transaction, part
    assert txn_row(direct)["state"] == "Ongoing"

    if who_finds_out == "reader_aborts":
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        seen: list[str] = []
        with Consumer(db_url) as reader:
            reader.assign(tps)
            for tp in tps:
                reader.seek(tp, 0)
            deadline = time.monotonic() + 30
            # Poll until the reader has moved past the aborted transaction and its abort markers:
            # its position reaches the log end (offset 6) with exactly the plain records read.
            while sorted(seen) != plain_values or any(reader.position(tp) < 6 for tp in tps):
                seen += [r.value.decode() for r in reader.poll(0.1)]
                assert time.monotonic() < deadline, f"the reader is stuck behind A's transaction: {seen}"
            assert {tp.partition: reader.position(tp) for tp in tps} == {0: 6, 1: 6}
            assert sorted(seen) == plain_values
        row = txn_row(direct)
        assert row["state"] == "CompleteAbort" and row["producer_epoch"] == a_epoch + 1, row
        assert {v: aborted_flags(direct)[v] for _, v in spread("A1", 4)} == {v: True for _, v in spread("A1", 4)}
        after = snapshot(direct, read_committed=True)
        assert all(p.last_stable_offset == p.high_watermark == 6 for p in after.values()), after
        assert snapshot_values(direct, read_committed=True) == plain_values
    else:
        assert txn_row(direct)["state"] == "Ongoing"  # nobody decided it yet

    a.cont()
    # The first batch (or EndTxn) meets the store's verdict, abortable either way: after the
    # reader fenced the epoch (recoverably) the old epoch is refused; while the transaction is
    # still open past its timeout, the store refuses it as timed out.
    cause = "InvalidProducerEpochError" if who_finds_out == "reader_aborts" else "TransactionTimeoutError"
    if first_call == "send":
        late = a.send(spread("A2", 2))
        assert late["ok"], late
        errors_seen = {r.get("error") for r in late["results"]}
        # Batches behind the first are not sent into a transaction that can only abort.
        assert cause in errors_seen and errors_seen <= {cause, "TransactionAbortedError"}, late
        assert late["state"] == "ABORTABLE_ERROR", late
        assert all(r["abortable"] and not r["fatal"] for r in late["results"]), late
    if first_call in ("send", "commit"):
        commit = a.call("commit")
        assert not commit["ok"] and commit["abortable"] and not commit["fatal"], commit
        assert commit["error"] == cause, commit
        assert commit["state"] == "ABORTABLE_ERROR"

    aborted = a.ok("abort")
    assert aborted["state"] == "READY" and aborted["producer_id"] == a_pid, aborted
    row = txn_row(direct)
    assert row["state"] == "CompleteAbort" and row["producer_epoch"] == a_epoch + 1, row

    a.ok("begin")
    recovered = a.send(spread("A3", 4))
    if not all("offset" in r for r in recovered["results"]):
        # Show what the application is left with: can it even abort and try again?
        retry = [a.call("commit"), a.call("abort"), a.call("abort"), a.call("begin")]
        raise AssertionError(
            f"the transaction after the recovery failed: {[r.get('error') for r in recovered['results']]}; "
            f"commit/abort/abort/begin then gave {[(r['ok'], r.get('error'), r['state']) for r in retry]}; "
            f"the producer holds epoch {aborted['epoch']}, the store {row['producer_epoch']}"
        )
    a.ok("commit")
    # KIP-360: the same producer id, at the epoch the timeout fenced it with (no second bump).
    assert a.call("state")["epoch"] == a_epoch + 1

    expected = sorted(plain_values + [v for _, v in spread("A3", 4)])
    assert consume_all(db_url, isolation_level="read_committed")[0] == expected
    assert snapshot_values(direct, read_committed=True) == expected
    assert committed_view(direct) == expected
    flags = aborted_flags(direct)
    # The timed-out transaction's records stay in the log, aborted; the refused writes never landed.
    assert sorted(flags) == sorted(expected + [v for _, v in spread("A1", 4)])
    assert {v for v, aborted_flag in flags.items() if aborted_flag} == {v for _, v in spread("A1", 4)}
    row = txn_row(direct)
    assert row["state"] == "CompleteCommit" and row["producer_id"] == a_pid, row
