"""Transactional copiers killed and fenced at random points copy a topic exactly once.

Modelled on Kafka's transactions system test (tests/kafkatest/tests/core/transactions_test.py):
an input topic is written non-transactionally first (unique values); copier processes
(tests/support/copier_child.py), each owning a fixed subset of the input partitions and a
transactional id derived from them, copy it in transactions to an output topic, keeping the input
partition, and write their progress (the next input offset of each partition) to a ``progress``
topic IN THE SAME TRANSACTION. A restarted copier initialises its transactional id (aborting what
its predecessor left open), reads its last committed progress record read_committed, and resumes.

The parent disrupts the copiers many times, as planned per copier by a seeded random generator
(so the plan does not depend on timing: for an external disruption the copier holds when its
committed progress reaches a planned fraction, after its own planned crash or stall, and the
parent releases it and strikes a random delay later, mid-stream). Every planned disruption
happens, however fast or slow the machine:

* planned crashes: an incarnation SIGKILLs itself in its k-th transaction with half of the copies
  flushed (transaction open, records in the log), with everything flushed but EndTxn not sent, or
  right after the commit returned;
* a planned stall: an incarnation stops with half of its copies flushed until its transaction has
  passed its timeout and the tailing read_committed consumer (meeting it) has aborted it; resumed,
  the copier gets an abortable error, aborts (KIP-360: same producer id, next epoch) and copies the
  same records again from its committed progress;
* SIGKILL from outside at a random moment of its stream;
* a zombie bounce at a random moment: the copier is frozen (SIGSTOP), a replacement starts and
  initialises the same transactional id, then the frozen one is resumed: it must find itself
  fenced (exit 17) and never commit again.

Meanwhile a read_committed consumer tails the output AND the progress topic (each poll is one
snapshot of all of them). At the end:

* the output equals the input exactly: per partition the same values in the same order, no loss,
  no duplicate;
* the tailing consumer saw exactly that sequence, never an aborted record, and at every poll the
  output it had seen matched the progress it had seen (copies and progress commit together);
* the last progress of each copier is its target, and each committed transaction wrote exactly one
  progress record (one CompleteCommit per progress record in txn_history);
* the planned crashes left aborted copies in the log (read_uncommitted), which nobody saw.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import oncelog
from oncelog import Consumer, TopicPartition
from oncelog.store import create_engine, log
from oncelog.store.records import FetchedRecord
from tests.support import REPO, child_env
from tests.support.copier_child import EXIT_FENCED, IN, OUT, PROGRESS, transactional_id
from tests.support.logcheck import wait_until

IN_PARTITIONS = 4
PER_PARTITION = 1500
TOTAL = IN_PARTITIONS * PER_PARTITION
#: Copier g owns these input partitions and writes its progress to progress partition g.
GROUPS: list[list[int]] = [[0, 1], [2], [3]]
PLANNED_CRASHES_PER_GROUP = 2
EXTERNAL_DISRUPTIONS_PER_GROUP = 2
PHASES = ["mid_send", "before_commit", "after_commit"]
#: Short, so that a stalled copier's transaction expires soon (a busy copier's never does).
TXN_TIMEOUT_MS = 3000
#: Bounds on waiting; never assertions on speed.
WAIT = 60.0


def in_value(p: int, i: int) -> bytes:
    return f"in-{p}-{i:05d}".encode()


def proc_state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return stat[stat.rindex(")") + 2]


@dataclass
class Incarnation:
    """One copier process."""

    group: int
    number: int
    crash: str
    events_path: Path
    proc: subprocess.Popen[bytes]
    stderr_path: Path
    released: bool = False
    unstalled: bool = False

    def release(self) -> None:
        """Let a copier that holds (or stalls) carry on."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died meanwhile (a planned crash cannot happen while it holds, but be safe)

    def events(self) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        text = self.events_path.read_text(encoding="utf-8")
        return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]

    def count(self, name: str) -> int:
        return sum(e["event"] == name for e in self.events())

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace") if self.stderr_path.exists() else ""


@dataclass(frozen=True)
class Disruption:
    """An external disruption: once the copier has copied ``fraction`` of its input (it holds
    there), release it, wait ``delay`` seconds (a random point in its stream), then SIGKILL it or
    bounce it (zombie)."""

    fraction: float
    delay: float
    kind: str


@dataclass
class Plan:
    """What happens to one copier, drawn up front from a seeded generator of its own."""

    crashes: list[str]
    disruptions: list[Disruption]
    max_polls: list[int]

    @classmethod
    def draw(cls, seed: int, group: int) -> Plan:
        rng = random.Random(f"{seed}-{group}")
        crashes = [f"{rng.choice(PHASES)}:{rng.randint(1, 4)}" for _ in range(PLANNED_CRASHES_PER_GROUP)]
        crashes.insert(rng.randint(0, len(crashes)), f"stall:{rng.randint(1, 4)}")
        fractions = sorted(rng.uniform(0.05, 0.8) for _ in range(EXTERNAL_DISRUPTIONS_PER_GROUP))
        disruptions = [
            Disruption(f, rng.uniform(0, 0.05), "bounce" if rng.random() < 0.4 else "kill") for f in fractions
        ]
        return cls(crashes, disruptions, [rng.randint(3, 30) for _ in range(50)])


@dataclass
class Supervisor:
    url: str
    tmp: Path
    plans: dict[int, Plan]
    engine: sa.Engine
    current: dict[int, Incarnation] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    history: list[Incarnation] = field(default_factory=list)
    kills: Counter[str] = field(default_factory=Counter)

    def start(self, group: int) -> Incarnation:
        number = sum(i.group == group for i in self.history)
        plan = self.plans[group]
        crash = plan.crashes.pop(0) if plan.crashes else "none"
        events_path = self.tmp / f"copier{group}-{number}.events"
        stderr_path = self.tmp / f"copier{group}-{number}.stderr"
        parts = GROUPS[group]
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.support.copier_child",
                    str(group),
                    ",".join(map(str, parts)),
                    ",".join(str(PER_PARTITION) for _ in parts),
                    str(plan.max_polls[number % len(plan.max_polls)]),
                    str(TXN_TIMEOUT_MS),
                    crash,
                    str(plan.disruptions[0].fraction) if plan.disruptions else "none",
                    str(events_path),
                ],
                cwd=REPO,
                env=child_env(self.url),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        inc = Incarnation(group, number, crash, events_path, proc, stderr_path)
        self.current[group] = inc
        self.history.append(inc)
        return inc

    def reap(self) -> None:
        """Restart copiers that crashed as planned; note the ones that finished; fail on errors."""
        for group, inc in list(self.current.items()):
            code = inc.proc.poll()
            if code is None or group in self.done:
                continue
            if code == 0:
                assert inc.count("done") == 1, inc.events()
                self.done.add(group)
            elif code == -signal.SIGKILL and inc.count("crash") == 1:
                self.kills["planned:" + inc.crash.split(":")[0]] += 1
                self.start(group)
            else:
                raise AssertionError(f"copier {group}#{inc.number} exited {code}: {inc.stderr()}")

    def kill(self, group: int) -> None:
        inc = self.current[group]
        os.kill(inc.proc.pid, signal.SIGKILL)
        inc.proc.wait(WAIT)
        if inc.count("done"):
            # It finished just before the signal: not a disruption, and nothing to restart.
            self.done.add(group)
            self.kills["finished first"] += 1
            return
        self.kills["external"] += 1
        self.start(group)

    def bounce(self, group: int) -> None:
        """Freeze the copier, start a replacement that fences it, resume the zombie."""
        old = self.current[group]
        os.kill(old.proc.pid, signal.SIGSTOP)
        wait_until(lambda: proc_state(old.proc.pid) in ("T", "Z", "?"), WAIT, "the copier to stop")
        new = self.start(group)
        # The replacement has initialised (fenced the zombie) once it logs 'start'.
        wait_until(
            lambda: new.count("start") == 1 or new.proc.poll() is not None, WAIT, "the replacement to initialise"
        )
        os.kill(old.proc.pid, signal.SIGCONT)
        code = old.proc.wait(WAIT)
        if code == 0 and old.count("done") == 1:
            # It had committed its last transaction before it was frozen: nothing was left to
            # fence (as kill() allows for a copier that finished just before the signal). Then
            # the replacement starts exactly where it ended: a commit of the zombie's after the
            # fencing would show as a replacement starting behind it.
            start = next(e for e in new.events() if e["event"] == "start")
            assert start["positions"] == old.events()[-1]["positions"], (start, old.events()[-3:])
            self.kills["finished first"] += 1
            return
        assert code == EXIT_FENCED, f"zombie exited {code}: {old.stderr()}"
        assert old.events()[-1]["event"] == "fenced", old.events()[-3:]
        self.kills["zombie"] += 1

    def txn_state(self, group: int) -> tuple[str, int]:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.text("SELECT state, producer_epoch FROM transaction_status WHERE transactional_id = :t"),
                {"t": transactional_id(GROUPS[group])},
            ).one()
        return str(row.state), int(row.producer_epoch)

    def unstall(self, group: int, inc: Incarnation) -> None:
        """A copier stalled mid-transaction: wait until its transaction timed out and a reader (the
        tail) aborted it, fencing its epoch; then let it carry on."""
        (stalled,) = [e for e in inc.events() if e["event"] == "stalled"]
        wait_until(
            lambda: self.txn_state(group) == ("CompleteAbort", stalled["epoch"] + 1),
            WAIT,
            f"the stalled transaction of copier {group} to be aborted by the reader",
        )
        inc.unstalled = True
        inc.release()
        self.kills["stall"] += 1

    def disrupt(self) -> None:
        """Carry out the planned disruption of every copier that holds at its planned point."""
        for group in self.running():
            plan, inc = self.plans[group], self.current[group]
            if not inc.unstalled and inc.count("stalled") == 1:
                self.unstall(group, inc)
            if plan.disruptions and not inc.released and inc.count("hold") == 1:
                d = plan.disruptions.pop(0)
                inc.released = True
                inc.release()
                time.sleep(d.delay)  # a random point in the stream; not a coordination
                if inc.proc.poll() is not None:
                    raise AssertionError(f"copier {group}#{inc.number} exited during a disruption: {inc.stderr()}")
                if d.kind == "bounce":
                    self.bounce(group)
                else:
                    self.kill(group)

    def running(self) -> list[int]:
        return [g for g, inc in self.current.items() if g not in self.done and inc.proc.poll() is None]

    def close(self) -> None:
        for inc in self.history:
            if inc.proc.poll() is None:
                if proc_state(inc.proc.pid) == "T":
                    os.kill(inc.proc.pid, signal.SIGCONT)
                inc.proc.kill()
                inc.proc.wait(10)
            if inc.proc.stdin is not None:
                with contextlib.suppress(OSError):  # the child is gone: its end of the pipe is closed
                    inc.proc.stdin.close()


class Tail(threading.Thread):
    """A read_committed Consumer tailing the output and the progress topic, one snapshot per poll
    (max_poll_records is large enough that a poll returns everything its snapshot holds)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.out: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        self.progress: dict[int, dict[int, int]] = {g: {p: 0 for p in parts} for g, parts in enumerate(GROUPS)}
        self.progress_records: Counter[int] = Counter()
        self.polls = 0
        self.violations: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        tps = [TopicPartition(OUT, p) for p in range(IN_PARTITIONS)]
        tps += [TopicPartition(PROGRESS, g) for g in range(len(GROUPS))]
        try:
            with Consumer(self.url, max_poll_records=1_000_000) as consumer:
                consumer.assign(tps)
                for tp in tps:
                    consumer.seek(tp, 0)
                while not self.stop.is_set():
                    records = consumer.poll(0.05)
                    self.polls += 1
                    for r in records:
                        if r.topic == OUT:
                            self.out[r.partition].append((r.offset, r.value))
                        else:
                            self.progress[r.partition] = {int(p): o for p, o in json.loads(r.value).items()}
                            self.progress_records[r.partition] += 1
                    self.check_atomic()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def check_atomic(self) -> None:
        """At a snapshot boundary, the copies seen equal the progress seen, for every partition."""
        for g, positions in self.progress.items():
            for p, next_offset in positions.items():
                if len(self.out[p]) != next_offset:
                    self.violations.append(
                        f"poll {self.polls}: out-{p} has {len(self.out[p])} records, progress of copier {g} "
                        f"says {next_offset}"
                    )

    def seen(self) -> int:
        return sum(len(v) for v in self.out.values())


def committed_log(engine: sa.Engine, topic: str, partitions: int) -> dict[int, list[FetchedRecord]]:
    """Every committed record of ``topic`` (one snapshot per page, from offset 0)."""
    out: dict[int, list[FetchedRecord]] = {p: [] for p in range(partitions)}
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        positions = {(topic, p): 0 for p in range(partitions)}
        while positions:
            fetched = log.fetch_many(conn, positions, max_records=5000, read_committed=True)
            for (t, p), part in fetched.items():
                assert part.error is None, part
                out[p] += part.records
                if part.records:
                    positions[(t, p)] = part.records[-1].offset + 1
                else:
                    assert part.last_stable_offset == part.high_watermark, f"{t}-{p} still has an open transaction"
                    del positions[(t, p)]
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", [20261121])
def test_copiers_killed_and_fenced_copy_exactly_once(db_url: str, tmp_path: Path, seed: int) -> None:
    with oncelog.Admin(db_url) as admin:
        admin.create_topic(IN, partitions=IN_PARTITIONS)
        admin.create_topic(OUT, partitions=IN_PARTITIONS)
        admin.create_topic(PROGRESS, partitions=len(GROUPS))
    with oncelog.Producer(db_url, linger_ms=5, max_batch_records=500) as writer:
        futures = [
            (p, i, writer.send(IN, in_value(p, i), key=f"k{i}".encode(), partition=p))
            for i in range(PER_PARTITION)
            for p in range(IN_PARTITIONS)
        ]
        writer.flush(WAIT)
        assert all(f.result(WAIT).offset == i for _, i, f in futures)

    direct = create_engine(db_url, poolclass=sa.NullPool)
    sup = Supervisor(db_url, tmp_path, {g: Plan.draw(seed, g) for g in range(len(GROUPS))}, direct)
    tail = Tail(db_url)
    tail.start()
    try:
        for g in range(len(GROUPS)):
            sup.start(g)
        deadline = time.monotonic() + 150
        while len(sup.done) < len(GROUPS):
            assert time.monotonic() < deadline, f"copiers did not finish: {sup.current}"
            sup.reap()
            sup.disrupt()
            time.sleep(0.005)
        wait_until(lambda: tail.seen() >= TOTAL or tail.error is not None, WAIT, "the tail to see every copy")
        # More polls after the last copy, so a duplicate behind it would show too.
        polls = tail.polls
        wait_until(lambda: tail.polls >= polls + 2 or tail.error is not None, WAIT, "the tail to poll again")
    finally:
        tail.stop.set()
        tail.join(WAIT)
        sup.close()
        direct.dispose()

    assert tail.error is None, repr(tail.error)
    print(f"disruptions: {dict(sup.kills)}; incarnations: {len(sup.history)}; tail polls: {tail.polls}")
    # Every planned disruption happened (the plan is per copier, so this does not depend on speed).
    assert all(not plan.crashes and not plan.disruptions for plan in sup.plans.values()), (sup.kills, sup.plans)
    # Each planned disruption hit a running copier, or found it had just finished (a late
    # incarnation may have little left); most must have hit, or the run proved little.
    hit = sup.kills["external"] + sup.kills["zombie"]
    assert hit + sup.kills["finished first"] == len(GROUPS) * EXTERNAL_DISRUPTIONS_PER_GROUP, sup.kills
    assert sup.kills["finished first"] <= len(GROUPS), sup.kills
    planned = sum(v for k, v in sup.kills.items() if k.startswith("planned"))
    assert planned == len(GROUPS) * PLANNED_CRASHES_PER_GROUP, sup.kills
    # Every stalled copier recovered by itself: abortable error, abort, next epoch (KIP-360).
    stalled = [inc for inc in sup.history if inc.count("stalled")]
    assert len(stalled) == sup.kills["stall"] == len(GROUPS), sup.kills
    for inc in stalled:
        events = inc.events()
        at = next(i for i, e in enumerate(events) if e["event"] == "stalled")
        after = [e for e in events[at + 1 :] if e["event"] in ("abort", "commit", "fenced")]
        assert after and after[0]["event"] == "abort", events[at:]
        assert after[0]["error"] == "InvalidProducerEpochError", after[0]
        assert after[0]["epoch"] == events[at]["epoch"] + 1, (events[at], after[0])

    engine = create_engine(db_url, poolclass=sa.NullPool)
    try:
        # The output equals the input, per partition, in order.
        out = committed_log(engine, OUT, IN_PARTITIONS)
        for p in range(IN_PARTITIONS):
            values = [r.value for r in out[p]]
            expected = [b"copy:" + in_value(p, i) for i in range(PER_PARTITION)]
            dupes = [v for v, c in Counter(values).items() if c > 1]
            assert dupes == [], f"out-{p}: {len(dupes)} duplicates, e.g. {dupes[:3]}"
            missing = set(expected) - set(values)
            assert not missing, f"out-{p}: {len(missing)} lost, e.g. {sorted(missing)[:3]}"
            assert values == expected, f"out-{p}: order differs"
            assert [r.key for r in out[p]] == [f"k{i}".encode() for i in range(PER_PARTITION)]

        # The tail saw the same sequence at the same offsets, and nothing else.
        assert tail.violations == [], tail.violations[:5]
        for p in range(IN_PARTITIONS):
            assert tail.out[p] == [(r.offset, r.value) for r in out[p]], f"tail differs on out-{p}"
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    'SELECT r.partition, r."offset", r.aborted FROM records r JOIN topics t USING (topic_id) '
                    "WHERE t.name = :t AND r.control_type IS NULL"
                ),
                {"t": OUT},
            ).all()
            aborted = {(p, o) for p, o, a in rows if a}
            seen = {(p, o) for p in range(IN_PARTITIONS) for o, _ in tail.out[p]}
            assert not (seen & aborted), "the tail saw aborted records"
            # The crashes really left aborted copies in the log (read_uncommitted sees them).
            assert len(rows) == TOTAL + len(aborted)
            if any(k in sup.kills for k in ("planned:mid_send", "planned:before_commit")):
                assert aborted, "planned mid-transaction crashes left no aborted copies"

            # Progress: the last committed record of each copier is its target, and there is one
            # progress record per committed transaction of its transactional id.
            progress = committed_log(engine, PROGRESS, len(GROUPS))
            for g, parts in enumerate(GROUPS):
                assert json.loads(progress[g][-1].value or b"") == {str(p): PER_PARTITION for p in parts}
                assert tail.progress[g] == {p: PER_PARTITION for p in parts}
                assert tail.progress_records[g] == len(progress[g])
                commits = conn.execute(
                    sa.text(
                        "SELECT count(*) FROM txn_history WHERE transactional_id = :t AND to_state = 'CompleteCommit'"
                    ),
                    {"t": transactional_id(parts)},
                ).scalar_one()
                assert commits == len(progress[g]), (g, commits, len(progress[g]))
                # Nothing is left open.
                state = conn.execute(
                    sa.text("SELECT state FROM transaction_status WHERE transactional_id = :t"),
                    {"t": transactional_id(parts)},
                ).scalar_one()
                assert state in ("CompleteCommit", "CompleteAbort", "Empty"), state
    finally:
        engine.dispose()
