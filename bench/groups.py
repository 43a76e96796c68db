"""Consumer groups through a rebalance: how long a joining member waits for the group to be stable
again, how many records/s the group consumes meanwhile against before, and how long nothing at all
is consumed (the stop-the-world gap).

    .venv/bin/python -m bench.groups [--quick] [--json PATH] [--repeat N]

The server is ``ONCELOG_DATABASE_URL`` when set (it needs CREATEDB), else the embedded default cluster
(see ``bench/produce.py``, whose setup this reuses), in a database of its own.

For 1, 4 and 8 members (processes, ``Consumer`` with its defaults: range assignor, auto-commit,
LISTEN on), on a 16-partition topic that a producer process writes at a steady rate (100-byte
values, spread over the partitions): once the members have consumed steadily for a while, one
more member joins. Every member logs each poll that returned records (when, which partition, how
many) and its rebalance callbacks; the parent samples the group's state. Measured, per run:

* **join to stable**: from the joiner's ``subscribe()`` call until the group's state is Stable
  again (every partition owned by its target member: the old owners have let go of what moves);
* **records/s through the rebalance**: records consumed from the join until stable, per second,
  against the same members' rate in the seconds before the join (the baseline, same run);
* **stop-the-world gap**: the longest time in which no member consumed anything, from the join
  until a second after stable, against the longest such time in the steady seconds before (the
  baseline: the members' normal gap between polls). A protocol that stops every member for a
  rebalance shows it here; an incremental one does not;
* **handover**: for each partition that changed owner, the time from its old owner's last poll
  with records to its new owner's first; the median and the largest.

Each case runs ``--repeat`` times (default 2; 1 with --quick); the report gives the median run.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import psycopg

from bench.pipeline import CHILD_URL_ENV, finish, spawn
from bench.produce import (
    Bench,
    bench_parser,
    code_info,
    emit,
    log,
    machine_info,
    repeat_count,
    scratch_database,
)
from bench.report import groups_section
from oncelog import Consumer, Producer

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 16
MEMBER_COUNTS = (1, 4, 8)
QUICK_MEMBER_COUNTS = (1, 2)
VALUE = b"v" * 100
#: rate: records/s written; warmup_s: from starting the producer until the steady window (its
#: process starting); steady_s: from starting it until the new member is started.
FULL = {"rate": 4000, "warmup_s": 1.5, "steady_s": 5.0, "after_s": 1.0}
QUICK = {"rate": 400, "warmup_s": 1.5, "steady_s": 2.5, "after_s": 0.3}
#: How long the group may take to be stable again before the run is reported as stalled.
STABLE_TIMEOUT_S = 60.0


# --- child processes ----------------------------------------------------------------------------


def member_main(url: str, topic: str, group: str, log_path: str) -> int:
    """A group member with the Consumer's defaults: polls until SIGTERM, logging (as JSON lines)
    ``{"t", "p", "n"}`` per partition of each poll with records, ``{"e": "assign"|"revoke", "t",
    "p": [...]}`` per callback, and ``{"e": "subscribe", "t"}`` before it subscribes."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(log_path, "a", encoding="utf-8") as out, Consumer(url, group_id=group, client_id="bench") as consumer:

        def write(**fields: Any) -> None:
            out.write(json.dumps(fields) + "\n")
            out.flush()

        def callback(event: str) -> Any:
            return lambda parts: write(e=event, t=time.time(), p=sorted(tp.partition for tp in parts))

        write(e="subscribe", t=time.time())
        consumer.subscribe([topic], on_assign=callback("assign"), on_revoke=callback("revoke"))
        while not stop.is_set():
            records = consumer.poll(0.2)
            now = time.time()
            counts: dict[int, int] = {}
            for r in records:
                counts[r.partition] = counts.get(r.partition, 0) + 1
            for p, n in sorted(counts.items()):
                write(t=now, p=p, n=n)
    return 0


def producer_main(url: str, topic: str, rate: float) -> int:
    """Write ``rate`` records/s over the topic's partitions (round robin) until SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Producer(url, linger_ms=5) as producer:
        start, sent = time.monotonic(), 0
        while not stop.is_set():
            due = int((time.monotonic() - start) * rate)
            for i in range(sent, due):
                producer.send(topic, VALUE, partition=i % PARTITIONS)
            sent = max(sent, due)
            time.sleep(0.005)
        producer.flush()
    return 0


# --- one run ------------------------------------------------------------------------------------


@dataclass
class Run:
    """A group of ``members`` member processes on a fresh topic, the producer, and their logs."""

    bench: Bench
    members: int
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="oncelog-bench-groups-")))
    procs: list[tuple[subprocess.Popen[str], IO[str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.bench.reset()
        self.topic, _ = self.bench.new_topic(PARTITIONS)
        self.group = f"bench-groups-{uuid.uuid4().hex[:8]}"

    def spawn(self, args: list[str]) -> None:
        self.procs.append(spawn(args, url=self.bench.sa_url, module="bench.groups"))

    def member(self, index: int) -> Path:
        path = self.tmp / f"member-{index}.log"
        self.spawn(["_member", self.topic, self.group, str(path)])
        return path

    def close(self) -> None:
        first: BaseException | None = None
        for proc, err in self.procs:
            try:
                finish(proc, err)
            except RuntimeError as exc:
                first = first or exc
        if first is not None:
            raise first


def group_state(conn: psycopg.Connection[Any], group: str) -> tuple[str, int] | None:
    row = conn.execute("SELECT state, generation FROM oncelog.groups WHERE group_id = %s", (group,)).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def wait_stable(conn: psycopg.Connection[Any], group: str, members: int, *, after_generation: int = -1) -> float:
    """Until the group has ``members`` members and is Stable past ``after_generation``; returns
    when (time.time()), sampled every 5 ms."""
    deadline = time.monotonic() + STABLE_TIMEOUT_S
    while True:
        state = group_state(conn, group)
        count = conn.execute("SELECT count(*) FROM oncelog.group_members WHERE group_id = %s", (group,)).fetchone()
        settled = state is not None and state[0] == "Stable" and state[1] > after_generation
        if settled and count is not None and count[0] == members:
            return time.time()
        if time.monotonic() > deadline:
            raise RuntimeError(f"group {group} not stable after {STABLE_TIMEOUT_S} s: {state}, {count} members")
        time.sleep(0.005)


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest interval within [start, end] containing none of ``times``."""
    inside = sorted(t for t in times if start <= t <= end)
    edges = [start, *inside, end]
    return max(b - a for a, b in itertools.pairwise(edges))


def one_run(bench: Bench, members: int, settings: dict[str, float]) -> dict[str, Any]:
    run = Run(bench, members)
    try:
        logs = [run.member(i) for i in range(members)]
        with psycopg.connect(bench.conninfo, autocommit=True) as conn:
            wait_stable(conn, run.group, members)
            run.spawn(["_producer", run.topic, str(settings["rate"])])
            steady_start = time.time() + settings["warmup_s"]
            time.sleep(settings["steady_s"])
            before = group_state(conn, run.group)
            assert before is not None
            logs.append(run.member(members))
            stable_at = wait_stable(conn, run.group, members + 1, after_generation=before[1])
            time.sleep(settings["after_s"] + 0.5)
    finally:
        run.close()
    events = [(i, e) for i, path in enumerate(logs) for e in read_log(path)]
    joined_at = next(e["t"] for i, e in events if i == members and e.get("e") == "subscribe")
    polls = [(i, e) for i, e in events if "n" in e]
    steady = [e for _, e in polls if steady_start <= e["t"] < joined_at]
    through = [e for _, e in polls if joined_at <= e["t"] <= stable_at]
    steady_rate = sum(e["n"] for e in steady) / (joined_at - steady_start)
    through_s = max(stable_at - joined_at, 1e-3)
    through_rate = sum(e["n"] for e in through) / through_s
    handovers: list[float] = []
    for p in range(PARTITIONS):
        seen = sorted((e["t"], i) for i, e in polls if e["p"] == p)
        for (t1, m1), (t2, m2) in itertools.pairwise(seen):
            if m1 != m2 and t1 < stable_at + settings["after_s"] and t2 > joined_at:
                handovers.append(t2 - t1)
    times = [e["t"] for _, e in polls]
    return {
        "members": members,
        "join_to_stable_ms": round((stable_at - joined_at) * 1000, 1),
        "steady_records_per_s": round(steady_rate, 1),
        "through_records_per_s": round(through_rate, 1),
        "through_ratio": round(through_rate / steady_rate, 3) if steady_rate else None,
        "stop_the_world_ms": round(longest_gap(times, joined_at, stable_at + settings["after_s"]) * 1000, 1),
        "steady_gap_ms": round(longest_gap(times, steady_start, joined_at) * 1000, 1),
        "handovers": len(handovers),
        "handover_p50_ms": round(statistics.median(handovers) * 1000, 1) if handovers else None,
        "handover_max_ms": round(max(handovers) * 1000, 1) if handovers else None,
    }


def run(quick: bool, repeat: int) -> dict[str, Any]:
    started = time.perf_counter()
    settings = QUICK if quick else FULL
    machine = machine_info()
    with scratch_database() as (bench, server):
        cases = []
        for members in QUICK_MEMBER_COUNTS if quick else MEMBER_COUNTS:
            runs = []
            for k in range(repeat):
                log(f"groups: {members} member(s) + 1 joining, run {k + 1}/{repeat}")
                runs.append(one_run(bench, members, settings))
            runs.sort(key=lambda r: r["join_to_stable_ms"])
            cases.append({"members": members, "runs": runs, "median": runs[len(runs) // 2]})
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return {
        "benchmark": "groups",
        "quick": quick,
        "repeat": repeat,
        "database": bench.name,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "oncelog": code_info(),
        "server": server,
        "settings": {"partitions": PARTITIONS, "repeat": repeat, **settings},
        "cases": cases,
        "seconds": round(time.perf_counter() - started, 1),
    }


def render(result: dict[str, Any]) -> str:
    title = "# oncelog consumer-group benchmark"
    if result["quick"]:
        title += " (--quick: tiny counts, numbers not meaningful)"
    return "\n".join([title, "", *groups_section(result)])


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["_member"]:
        return member_main(os.environ[CHILD_URL_ENV], *args_in[1:4])
    if args_in[:1] == ["_producer"]:
        return producer_main(os.environ[CHILD_URL_ENV], args_in[1], float(args_in[2]))
    parser = bench_parser("bench.groups", __doc__, "runs per case (default 2; 1 with --quick)")
    args = parser.parse_args(args_in)
    result = run(args.quick, repeat_count(parser, args, 2))
    emit(result, render(result), args.json)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
