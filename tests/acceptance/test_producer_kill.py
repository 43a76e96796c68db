"""Producer processes writing the same partitions, one of them killed with SIGKILL mid-stream.

Each child (tests/support/producer_child.py) sends ``<name>-<n>`` for n = 0, 1, 2, ... keyed over
the partitions, and appends a line to its own file for every acknowledged record, flushed at once.
The parent SIGKILLs one child once it has acknowledged some records (so it dies with records in
flight: queued, being sent, or committed without the acknowledgement written), lets the others
finish, and checks the whole log:

* offsets are dense in every partition (no gaps) and no value appears twice (no duplicates);
* every acknowledged record is at its acknowledged partition and offset;
* within a partition, each producer's records appear in its send order;
* the survivors' records are all there, exactly once;
* the killed producer's records in each partition are a prefix of what it sent there: its
  in-flight, unacknowledged records are present once or absent, never twice and never with an
  earlier one missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import oncelog
from oncelog.partitioner import partition_for_key
from oncelog.store.records import FetchedRecord
from tests.support import REPO, child_env
from tests.support.logcheck import read_partition, wait_until
from tests.support.producer_child import key_for

PARTITIONS = 3
SURVIVOR_COUNT = 1500
#: The victim never gets to the end of this: it is killed long before.
VICTIM_COUNT = 1_000_000


def start_child(db_url: str, name: str, count: int, ack_file: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.producer_child", "t", name, str(count), str(ack_file)],
        cwd=REPO,
        env=child_env(db_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_acks(path: Path) -> list[dict[str, object]]:
    """The complete lines of an ack file (a process killed mid-write may leave a partial last one)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    complete = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines()]


def parse(value: bytes) -> tuple[str, int]:
    name, _, n = value.decode().rpartition("-")
    return name, int(n)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kill_after", [1, 200])
def test_sigkill_one_of_many_producers_leaves_a_clean_log(db_url: str, tmp_path: Path, kill_after: int) -> None:
    with oncelog.Admin(db_url) as admin:
        admin.create_topic("t", partitions=PARTITIONS)
    survivors = ["s0", "s1", "s2"]
    ack_files = {name: tmp_path / f"{name}.acks" for name in ["victim", *survivors]}
    procs = {"victim": start_child(db_url, "victim", VICTIM_COUNT, ack_files["victim"])}
    procs |= {name: start_child(db_url, name, SURVIVOR_COUNT, ack_files[name]) for name in survivors}
    try:
        wait_until(
            lambda: len(read_acks(ack_files["victim"])) >= kill_after or procs["victim"].poll() is not None,
            120,
            f"the victim to acknowledge {kill_after} records",
        )
        assert procs["victim"].poll() is None, procs["victim"].communicate()
        others_running = sum(procs[name].poll() is None for name in survivors)
        os.kill(procs["victim"].pid, signal.SIGKILL)
        procs["victim"].wait(30)
        assert procs["victim"].returncode == -signal.SIGKILL
        for name in survivors:
            _out, err = procs[name].communicate(timeout=180)
            assert procs[name].returncode == 0, f"{name}: {err}"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    # The kill really happened among live writers.
    assert others_running >= 1

    logs: dict[int, list[FetchedRecord]] = {p: read_partition(db_url, "t", p) for p in range(PARTITIONS)}  # dense
    everything = [r for p in range(PARTITIONS) for r in logs[p]]

    # No duplicates anywhere.
    counts = Counter(r.value for r in everything)
    assert [v for v, c in counts.items() if c > 1] == []

    # Every acknowledged record is where its acknowledgement says.
    acks = {name: read_acks(path) for name, path in ack_files.items()}
    for name, lines in acks.items():
        assert all("error" not in line for line in lines), f"{name} had failed records"
        for line in lines:
            part, offset = int(line["partition"]), int(line["offset"])  # type: ignore[call-overload]
            assert line["topic"] == "t"
            assert offset < len(logs[part]), f"{name}: acknowledged {line} beyond the log end"
            assert logs[part][offset].value == str(line["value"]).encode(), f"{name}: ack {line} does not match the log"
    acked_victim = {int(line["n"]) for line in acks["victim"]}  # type: ignore[call-overload]
    assert len(acked_victim) >= kill_after
    assert len(acked_victim) < VICTIM_COUNT

    # Per producer and partition: its records in send order, and what it sent there, in order.
    sent_to: dict[int, dict[str, list[int]]] = {p: defaultdict(list) for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        for r in logs[p]:
            assert r.value is not None
            name, n = parse(r.value)
            sent_to[p][name].append(n)
            assert partition_for_key(key_for(n), PARTITIONS) == p, f"{r.value!r} in the wrong partition"
    highest_victim = max([n for p in range(PARTITIONS) for n in sent_to[p]["victim"]], default=-1)
    in_flight_present = 0
    for p in range(PARTITIONS):
        for name, ns in sent_to[p].items():
            assert ns == sorted(ns), f"{name} out of order in partition {p}"
        for name in survivors:
            expected = [n for n in range(SURVIVOR_COUNT) if partition_for_key(key_for(n), PARTITIONS) == p]
            assert sent_to[p][name] == expected, f"{name}: records lost or misplaced in partition {p}"
        # The victim's records here are a prefix of what it sent here (nothing after a hole).
        victim_ns = sent_to[p]["victim"]
        sent_here = [n for n in range(highest_victim + 1) if partition_for_key(key_for(n), PARTITIONS) == p]
        assert victim_ns == sent_here[: len(victim_ns)], f"victim: a hole before an appended record in {p}"
        acked_here = sorted(n for n in acked_victim if partition_for_key(key_for(n), PARTITIONS) == p)
        assert set(acked_here) <= set(victim_ns), f"victim: acknowledged record missing in partition {p}"
        in_flight_present += len(victim_ns) - len(acked_here)

    # One producer id per process, distinct between processes; no epoch bumps were needed.
    pids: dict[str, set[int | None]] = defaultdict(set)
    for r in everything:
        assert r.value is not None
        pids[parse(r.value)[0]].add(r.producer_id)
        assert r.producer_epoch == 0
    assert all(len(ids) == 1 and None not in ids for ids in pids.values()), pids
    assert len({next(iter(ids)) for ids in pids.values()}) == len(pids)
    print(
        f"kill_after={kill_after}: victim acked {len(acked_victim)}, "
        f"{in_flight_present} unacknowledged victim records present, log sizes "
        f"{[len(logs[p]) for p in range(PARTITIONS)]}"
    )
