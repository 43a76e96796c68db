"""No partition is owned by two live members at once (KIP-848's rule; docs/design.md, "Consumer
groups and KIP-447"): members in processes of their own join, leave, crash, stall (SIGSTOP) and
restart as static members, under schedules hypothesis chooses, while each logs every fetch and
rebalance callback (tests/support/group_member_child.py). From the logs:

* every fetch of a partition falls inside an assignment of it to that member;
* for each partition, the ownership periods of different members never overlap. A period runs
  from ``on_assign`` to the end of the member's last fetch of it; when the member lost the
  partition (its session ran out while it stalled), to the start of that last fetch, which the
  consumer only returns when the fetch ran within its session (before anybody else could own
  the partition);
* once the schedule is over, the group converges: every partition is fetched again.

The suite runs 3 schedules (about 30 rebalances); for a soak, set ONCELOG_OWNERSHIP_EXAMPLES (each
schedule takes 5 to 15 s): ``ONCELOG_OWNERSHIP_EXAMPLES=40 pytest tests/acceptance/test_group_ownership.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog import Admin, Producer
from tests.support import REPO, child_env

TOPIC = "owned"
PARTITIONS = 6
WAIT = 60.0


@pytest.fixture
def url(db_url: str) -> str:
    with Admin(db_url) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS)
    with Producer(db_url, linger_ms=5) as producer:
        for p in range(PARTITIONS):
            for _ in range(3000):
                producer.send(TOPIC, b"x" * 20, partition=p)
        producer.flush()
    return db_url


@dataclass
class Member:
    """A member process and its log."""

    proc: subprocess.Popen[bytes]
    log: Path
    instance: str | None
    stderr: IO[str] | None = None
    stopped: bool = False

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class Group:
    url: str
    tmp: Path
    name: str
    assignor: str
    members: list[Member] = field(default_factory=list)
    statics: int = 0

    def start(self, instance: str | None = None) -> Member:
        index = len(self.members)
        log = self.tmp / f"member-{index}.log"
        stderr = open(self.tmp / f"member-{index}.stderr", "w", encoding="utf-8")  # noqa: SIM115 - closed in stop_all
        argv = [sys.executable, "-m", "tests.support.group_member_child", self.name, TOPIC, self.assignor]
        proc = subprocess.Popen(
            [*argv, instance or "-", str(log)],
            cwd=REPO,
            env=child_env(self.url),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        member = Member(proc, log, instance, stderr)
        self.members.append(member)
        return member

    def live(self) -> list[Member]:
        return [m for m in self.members if m.alive]

    def stop_all(self) -> None:
        for m in self.members:
            if m.alive:
                if m.stopped:
                    os.kill(m.proc.pid, signal.SIGCONT)
                m.proc.kill()
                m.proc.wait(WAIT)
            if m.stderr is not None:
                m.stderr.close()

    def errors(self) -> str:
        """The members' stderr, for a failure's message."""
        return "\n".join(
            f"member {i}: {(self.tmp / f'member-{i}.stderr').read_text(encoding='utf-8')[-2000:]}"
            for i in range(len(self.members))
        )


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def member_periods(index: int, events: list[dict[str, Any]]) -> list[tuple[int, float, float, int]]:
    """One member's ownership periods, as (partition, start, end, member index); fails on a fetch
    of a partition the member was not assigned."""
    out: list[tuple[int, float, float, int]] = []
    open_: dict[int, dict[str, float]] = {}

    def close(p: int, lost: bool) -> None:
        period = open_.pop(p)
        if "t0" in period:
            out.append((p, period["start"], period["t0"] if lost else period["t1"], index))

    for event in events:
        if event["e"] == "fetch":
            p = event["p"]
            assert p in open_, f"member {index} fetched partition {p} without owning it: {event}"
            open_[p].update(t0=event["t0"], t1=event["t1"])
        elif event["e"] == "assign":
            for p in event["p"]:
                assert p not in open_, f"member {index} was assigned partition {p} twice"
                open_[p] = {"start": event["t"]}
        else:
            for p in event["p"]:
                close(p, event["e"] == "lost")
    for p in list(open_):
        close(p, False)  # still assigned when it was killed or the test ended
    return out


def check_no_overlap(group: Group) -> int:
    """Fails if two members' periods of a partition overlap; returns the number of periods."""
    spans = [span for index, m in enumerate(group.members) for span in member_periods(index, read_log(m.log))]
    for p, s1, e1, m1 in spans:
        for q, s2, _e2, m2 in spans:
            if p == q and m1 != m2 and s1 <= s2:
                assert e1 < s2, (
                    f"partition {p}: member {m1} owned it until {e1:.3f} and member {m2} from {s2:.3f} "
                    f"({(e1 - s2) * 1000:.0f} ms of double ownership)"
                )
    return len(spans)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.booleans()),
        st.tuples(st.just("stop"), st.integers(0, 9)),
        st.tuples(st.just("kill"), st.integers(0, 9)),
        st.tuples(st.just("pause"), st.integers(0, 9), st.sampled_from([0.4, 2.5])),
        st.tuples(st.just("restart"), st.integers(0, 9)),
    ),
    min_size=4,
    max_size=9,
)


def run(group: Group, ops: list[tuple[Any, ...]]) -> None:
    for op in ops:
        live = [m for m in group.live() if not m.stopped]
        if op[0] == "start" or not live:
            if op[0] == "start" and op[1]:
                group.statics += 1
                group.start(f"static-{group.statics}")
            else:
                group.start()
        elif op[0] == "stop":
            victim = live[op[1] % len(live)]
            victim.proc.send_signal(signal.SIGTERM)
            victim.proc.wait(WAIT)
        elif op[0] == "kill":
            victim = live[op[1] % len(live)]
            victim.proc.kill()
            victim.proc.wait(WAIT)
        elif op[0] == "pause":
            victim = live[op[1] % len(live)]
            os.kill(victim.proc.pid, signal.SIGSTOP)
            victim.stopped = True
            time.sleep(op[2])
            os.kill(victim.proc.pid, signal.SIGCONT)
            victim.stopped = False
        elif op[0] == "restart":
            statics = [m for m in live if m.instance is not None]
            if statics:
                old = statics[op[1] % len(statics)]
                old.proc.kill()
                old.proc.wait(WAIT)
                group.start(old.instance)
        time.sleep(0.4)


def converge(group: Group) -> None:
    """Every partition is fetched again by a live member after the schedule."""
    if not group.live():
        group.start()
    since = time.time()
    deadline = time.monotonic() + WAIT
    while True:
        seen = {e["p"] for m in group.live() for e in read_log(m.log) if e["e"] == "fetch" and e["t0"] > since}
        if seen == set(range(PARTITIONS)):
            return
        assert time.monotonic() < deadline, f"only partitions {sorted(seen)} consumed after the schedule"
        time.sleep(0.1)


#: Schedules per run (see the module's docstring).
EXAMPLES = int(os.environ.get("ONCELOG_OWNERSHIP_EXAMPLES", "3"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, assignor=st.sampled_from(["range", "roundrobin", "sticky"]))
def test_no_partition_has_two_live_owners(
    url: str, engine: sa.Engine, tmp_path: Path, ops: list[Any], assignor: str
) -> None:
    name = f"own-{uuid.uuid4().hex[:8]}"
    tmp = tmp_path / name
    tmp.mkdir()
    group = Group(url, tmp, name, assignor)

    def members() -> int:
        with engine.connect() as conn:
            found = conn.exec_driver_sql("SELECT count(*) FROM group_members WHERE group_id = %(g)s", {"g": name})
            return int(found.scalar_one())

    try:
        group.start()
        group.start()
        deadline = time.monotonic() + WAIT
        while members() < 2:  # both have joined: the schedule starts from a split group
            assert time.monotonic() < deadline, f"the first two members never joined: {group.errors()}"
            time.sleep(0.05)
        run(group, ops)
        converge(group)
    finally:
        group.stop_all()
    # Every partition was owned, and read, at least once.
    assert check_no_overlap(group) >= PARTITIONS


def test_the_check_sees_an_overlap(tmp_path: Path) -> None:
    """The overlap check itself, on logs where two members read partition 0 at the same time."""
    group = Group("unused", tmp_path, "g", "range")
    for index, (start, t0, t1) in enumerate([(1.0, 1.1, 1.2), (1.15, 1.3, 1.4)]):
        log = tmp_path / f"m{index}.log"
        log.write_text(
            json.dumps({"e": "assign", "p": [0], "t": start})
            + "\n"
            + json.dumps({"e": "fetch", "p": 0, "t0": t0, "t1": t1})
            + "\n",
            encoding="utf-8",
        )
        proc = subprocess.Popen(["true"])
        proc.wait()
        group.members.append(Member(proc, log, None))
    with pytest.raises(AssertionError, match="double ownership"):
        check_no_overlap(group)
