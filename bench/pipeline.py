"""Consume-transform-produce: end-to-end throughput and latency, the consumer's wake-up latency, and the
cost of LISTEN/NOTIFY that the Consumer's polling avoids.

    .venv/bin/python -m bench.pipeline [--quick] [--json PATH] [--repeat N]

The server is ``ONCELOG_DATABASE_URL`` when set (it needs CREATEDB), else the embedded default cluster,
started the way the CLI starts it (durable settings). The run works in a database of its own, created and
migrated to head first and dropped at the end (see ``bench/produce.py``, whose setup this reuses). Every
pipeline, latency and wake-up measurement starts from an empty log (earlier records truncated).

1. Throughput: 1 and 4 member processes, each running ``examples/consume_transform_produce.run`` (a
   read_committed group member and a transactional producer: poll, send the transformed records, send
   the offsets to the transaction, commit) between two 4-partition topics. Once every member has joined
   (and the last generation has reached them), the input is written in 200-record transactions behind
   a "gate": an open transaction holding a record in every input partition, which holds the last stable
   offsets back. Aborting the gate makes the whole input visible at once; records/s = input records /
   (time from that abort until the group's committed offsets pass the last input record of every
   partition). The output is then checked: exactly the input's count of committed records.
2. Latency: a producer (idempotent, linger_ms=0) writes records carrying their send time at a steady
   rate to the input of 1 or 4 members; a read_committed Consumer on the output (default backoff)
   measures receive time - send time.
3. Wake-up: waiting read_committed consumers (separate processes: the defaults, which LISTEN for the
   producers' wake-ups and poll with a backoff of 5..200 ms; and, for comparison, polling only, with
   fetch_max_backoff_ms 200 and 5) on a topic where a transactional producer (defaults) commits one
   record at a time, at random intervals: visible to the consumer - commit_transaction returned.
   Beside it the same measure for raw LISTEN/NOTIFY (a psycopg listener woken by a NOTIFY committed
   with an INSERT), and the CPU an idle consumer costs (its process and, for a local server, its
   backend). The wake-ups' cost to producers: 4 transactional producers (processes) commit one-record
   transactions to a 4-partition topic, each to its own partition, while a read_committed consumer
   process waits on all four; commits/s with the mechanism on (producers wake readers, the consumer
   listens) against off (neither; the consumer polls), paired and repeated.
   NOTIFY's cost: commits/s of single-row INSERTs (raw psycopg, autocommit, 1 and 8 threads) without
   and with a NOTIFY in the same transaction (``pg_notify`` in the INSERT's statement, so the round
   trips are the same), with and without a listening session.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import psycopg

from bench.produce import (
    Bench,
    bench_parser,
    code_info,
    emit,
    fmt_settings,
    log,
    machine_info,
    repeat_count,
    run_threads,
    scratch_database,
    summarize,
)
from bench.transactions import fmt_pressure, pressure
from oncelog import Consumer, Producer, TopicPartition
from oncelog.store.engine import database_url

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4
MEMBER_COUNTS = (1, 4)
VALUE_PAD = 100  # value bytes: the send time in ns, '-', padding

FULL_PIPELINE_RECORDS = 20_000
#: Records per input transaction (round-robin over the partitions).
INPUT_TXN_RECORDS = 200
QUICK_PIPELINE_RECORDS = 400
#: After the last member joined: heartbeats (500 ms in the example) bring the last generation to all.
SETTLE_SECONDS = 1.5
PIPELINE_TIMEOUT = 60.0

LATENCY_DRAIN_SECONDS = 20.0  # after the last send, the wait for the last records to come out
FULL_LATENCY = (200, 8.0)  # records/s, seconds
QUICK_LATENCY = (50, 1.0)

#: The waiting consumers: name -> (fetch_max_backoff_ms, listen_for_writes); fetch_min_backoff_ms stays 5.
#: "200" is the Consumer's defaults.
WAKE_WAITERS = {"200": (200, True), "200-polling": (200, False), "5-polling": (5, False)}
WAKE_DEFAULT = "200"
#: The wake-ups' cost to producers: committing threads, seconds per run.
WAKE_COST_PRODUCERS = 4
#: Seconds the committing processes get to start and initialise before they start together.
COMMITTER_START_S = 3.0
FULL_WAKE_COST_SECONDS = 4.0
QUICK_WAKE_COST_SECONDS = 0.5
FULL_WAKE = (150, 0.4)  # commits, largest random gap between them (s)
QUICK_WAKE = (6, 0.05)
FULL_NOTIFY_WAKE = 200
QUICK_NOTIFY_WAKE = 10

NOTIFY_THREADS = (1, 8)
FULL_NOTIFY_SECONDS = 2.0
QUICK_NOTIFY_SECONDS = 0.3
NOTIFY_CHANNEL = "bench_notify"
NOTIFY_DDL = "CREATE TABLE bench_raw.notify_test (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v bytea)"
INSERT_PLAIN = "INSERT INTO bench_raw.notify_test (v) VALUES (%b)"
INSERT_NOTIFY = (
    "WITH i AS (INSERT INTO bench_raw.notify_test (v) VALUES (%b) RETURNING id) "
    f"SELECT i.id, pg_notify('{NOTIFY_CHANNEL}', i.id::text) FROM i"
)
NOTIFY_MODES = {
    "plain": "INSERT",
    "notify": "INSERT + NOTIFY, no listener",
    "notify_listened": "INSERT + NOTIFY, 1 listening session",
}


class Stalled(RuntimeError):
    """The pipeline did not get through its input in time (reported in the table, not fatal)."""


# --- child processes ----------------------------------------------------------------------------


def member_main(url: str, input_topic: str, output_topic: str, group: str, transactional_id: str) -> int:
    """A pipeline member: the example's loop until SIGTERM; prints what it copied and its CPU time."""
    from examples.consume_transform_produce import run as copy_loop  # noqa: PLC0415 (child process only)

    copied = copy_loop(
        url,
        input_topic=input_topic,
        output_topic=output_topic,
        group=group,
        transactional_id=transactional_id,
        idle_exit=0,
    )
    times = os.times()
    print(json.dumps({"copied": copied, "cpu_s": round(times.user + times.system, 3)}), flush=True)
    return 0


def waiter_main(
    url: str, topic: str, *, min_backoff_ms: int, max_backoff_ms: int, listen: bool, partitions: int
) -> int:
    """A consumer waiting at the end of partitions 0..``partitions``-1: prints ``<offset> <time_ns>``
    as records become visible, until SIGTERM; then ``cpu <seconds> <wall seconds>``."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(
        url, fetch_min_backoff_ms=min_backoff_ms, fetch_max_backoff_ms=max_backoff_ms, listen_for_writes=listen
    ) as consumer:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        consumer.poll(0)
        print("ready", flush=True)
        started, cpu0 = time.monotonic(), sum(os.times()[:2])
        while not stop.is_set():
            records = consumer.poll(0.5)
            now = time.time_ns()
            if records:
                print("\n".join(f"{r.offset} {now}" for r in records), flush=True)
        print(f"cpu {sum(os.times()[:2]) - cpu0:.4f} {time.monotonic() - started:.4f}", flush=True)
    return 0


#: How a child process gets its database URL: in its environment, never on its command line
#: (readable by every local user, and shown in the error of a failed child).
CHILD_URL_ENV = "ONCELOG_DATABASE_URL"


def spawn(args: list[str], *, url: str, module: str = "bench.pipeline") -> tuple[subprocess.Popen[str], IO[str]]:
    """Start ``python -m <module> <args>`` with ``url`` in its environment; stderr goes to a
    temporary file (read on failure)."""
    err = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by finish())
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        env={**os.environ, CHILD_URL_ENV: url},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )
    return proc, err


def finish(proc: subprocess.Popen[str], err: IO[str], *, timeout: float = 20.0) -> str:
    """SIGTERM the child, wait for it, return its stdout (raising with its stderr if it failed)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    err.seek(0)
    errors = err.read()
    err.close()
    if proc.returncode != 0:
        raise RuntimeError(f"child {proc.args!r} exited with {proc.returncode}:\n{errors[-3000:]}")
    return out


def with_app_name(url: str, name: str) -> str:
    return database_url(url).update_query_dict({"application_name": name}).render_as_string(hide_password=False)


# --- 1. throughput ------------------------------------------------------------------------------


class Pipeline:
    """Two 4-partition topics and ``members`` member processes in one group."""

    def __init__(self, bench: Bench, members: int) -> None:
        bench.reset()  # an empty log (earlier measurements' records would slow every reader) and a CHECKPOINT
        self.bench = bench
        self.members = members
        self.input, _ = bench.new_topic(PARTITIONS)
        self.output, _ = bench.new_topic(PARTITIONS)
        self.group = f"bench-pipe-{uuid.uuid4().hex[:8]}"
        self.procs: list[tuple[subprocess.Popen[str], IO[str]]] = []

    def __enter__(self) -> Pipeline:
        try:
            self._start()
        except BaseException:
            for proc, err in self.procs:
                proc.kill()
                proc.communicate()
                err.close()
            raise
        return self

    def _start(self) -> None:
        for k in range(self.members):
            self.procs.append(
                spawn(["_member", self.input, self.output, self.group, f"{self.group}-m{k}"], url=self.bench.sa_url)
            )
        deadline = time.monotonic() + 60
        with psycopg.connect(self.bench.conninfo, autocommit=True) as conn:
            while True:
                joined = conn.execute(
                    "SELECT count(*) FROM oncelog.group_members WHERE group_id = %s", (self.group,)
                ).fetchone()
                if joined is not None and joined[0] >= self.members:
                    break
                for proc, err in self.procs:
                    if proc.poll() is not None:
                        finish(proc, err)  # raises with its stderr
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.group}: only {joined} of {self.members} members joined in 60 s")
                time.sleep(0.05)
        time.sleep(SETTLE_SECONDS)

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.results = [json.loads(finish(proc, err).strip().splitlines()[-1]) for proc, err in self.procs]
            return
        # Failing already: stop the members without hiding the first error behind theirs.
        for proc, err in self.procs:
            with contextlib.suppress(RuntimeError):
                finish(proc, err, timeout=5)


def pipeline_throughput(bench: Bench, members: int, records: int) -> dict[str, Any]:
    value = b"v" * VALUE_PAD
    with Pipeline(bench, members) as pipe, psycopg.connect(bench.conninfo, autocommit=True) as watch:
        with (
            Producer(bench.sa_url, transactional_id=f"{pipe.group}-gate", linger_ms=0) as gate,
            Producer(
                bench.sa_url,
                transactional_id=f"{pipe.group}-input",
                linger_ms=10_000,
                batch_size=1 << 30,
                max_batch_records=1000,
            ) as producer,
        ):
            # The gate: an open transaction with a record in every input partition holds their last
            # stable offsets back, so the input committed behind it stays invisible until it ends.
            gate.init_transactions()
            gate.begin_transaction()
            for p in range(PARTITIONS):
                gate.send(pipe.input, b"gate", partition=p)
            gate.flush()
            producer.init_transactions()
            for start in range(0, records, INPUT_TXN_RECORDS):
                producer.begin_transaction()
                for i in range(start, min(start + INPUT_TXN_RECORDS, records)):
                    producer.send(pipe.input, value, key=b"key-%08d" % i, partition=i % PARTITIONS)
                producer.commit_transaction()
            gate.abort_transaction()  # the whole input becomes visible here (the gate's records never do)
            started = time.perf_counter()
        # Done when the group's committed positions pass the last input record of every partition.
        target_row = watch.execute(
            'SELECT coalesce(sum(last + 1), 0) FROM (SELECT max(r."offset") AS last FROM oncelog.records r '
            "JOIN oncelog.topics t USING (topic_id) WHERE t.name = %s AND r.control_type IS NULL AND NOT r.aborted "
            "GROUP BY r.partition) x",
            (pipe.input,),
        ).fetchone()
        target = int(target_row[0]) if target_row else 0
        deadline = started + PIPELINE_TIMEOUT
        done = 0
        while done < target:
            row = watch.execute(
                "SELECT coalesce(sum(committed_offset), 0) FROM oncelog.committed_offsets WHERE group_id = %s",
                (pipe.group,),
            ).fetchone()
            done = int(row[0]) if row else 0
            if time.perf_counter() > deadline:
                raise Stalled(
                    f"{members} member(s): committed positions reached {done:,} of {target:,} offsets in "
                    f"{PIPELINE_TIMEOUT:.0f} s"
                )
            if done < target:
                time.sleep(0.005)
        seconds = time.perf_counter() - started
        output = watch.execute(
            "SELECT count(*) FROM oncelog.committed_records WHERE topic = %s", (pipe.output,)
        ).fetchone()
        txns = watch.execute(
            "SELECT to_state, count(*) FROM oncelog.txn_history WHERE transactional_id LIKE %s "
            "AND to_state IN ('CompleteCommit', 'CompleteAbort') GROUP BY to_state",
            (f"{pipe.group}-m%",),
        ).fetchall()
    if output is None or output[0] != records:
        raise RuntimeError(f"{pipe.group}: the output holds {output} committed records, not {records}")
    by_state: dict[str, int] = {str(state): int(n) for state, n in txns}
    commits = int(by_state.get("CompleteCommit", 0))
    return {
        "members": members,
        "records": records,
        "seconds": round(seconds, 4),
        "records_per_s": round(records / seconds, 1),
        "transactions": commits,
        "aborted_transactions": int(by_state.get("CompleteAbort", 0)),
        "records_per_txn": round(records / commits, 1) if commits else None,
        "copied_per_member": [r["copied"] for r in pipe.results],
        "member_cpu_s": [r["cpu_s"] for r in pipe.results],
    }


def throughput_cases(bench: Bench, quick: bool, repeat: int) -> list[dict[str, Any]]:
    records = QUICK_PIPELINE_RECORDS if quick else FULL_PIPELINE_RECORDS
    out = []
    runs: dict[int, list[dict[str, Any]]] = {m: [] for m in MEMBER_COUNTS}
    stalled: dict[int, str] = {}
    for _ in range(repeat):
        for members in MEMBER_COUNTS:
            if members in stalled:
                continue
            try:
                runs[members].append(pipeline_throughput(bench, members, records))
            except Stalled as exc:
                stalled[members] = str(exc)
    for members, measured in runs.items():
        if members in stalled:
            out.append({"members": members, "records": records, "records_per_s": 0.0, "error": stalled[members]})
            log(f"pipeline, {members} member(s): STALLED: {stalled[members]}")
            continue
        ordered = sorted(measured, key=lambda r: r["records_per_s"])
        case = {**ordered[(len(ordered) - 1) // 2], "runs_records_per_s": [r["records_per_s"] for r in measured]}
        out.append(case)
        log(
            f"pipeline, {members} member(s): {case['records_per_s']:,.0f} records/s "
            f"({case['transactions']} transactions, {case['records_per_txn']} records each)"
        )
    return out


# --- 2. end-to-end latency ----------------------------------------------------------------------


def pipeline_latency(bench: Bench, members: int, rate: int, seconds: float) -> dict[str, Any]:
    n = max(1, int(rate * seconds))
    pad = b"-" + b"x" * VALUE_PAD
    latencies: list[float] = []
    stop = threading.Event()
    errors: list[BaseException] = []
    with Pipeline(bench, members) as pipe:
        consumer = Consumer(bench.sa_url)  # read_committed, default backoff
        tps = [TopicPartition(pipe.output, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)

        def receive() -> None:
            try:
                while not stop.is_set() and len(latencies) < n:
                    records = consumer.poll(0.5)
                    now = time.time_ns()
                    latencies.extend((now - int(r.value.split(b"-", 1)[0])) / 1e9 for r in records)
            except BaseException as exc:
                errors.append(exc)

        receiver = threading.Thread(target=receive, daemon=True)
        receiver.start()
        try:
            with Producer(bench.sa_url, linger_ms=0) as producer:
                producer.partitions_for(pipe.input)
                started = time.perf_counter()
                for i in range(n):
                    delay = started + i / rate - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    producer.send(pipe.input, b"%d" % time.time_ns() + pad, key=b"key-%08d" % i)
                producer.flush()
            deadline = time.monotonic() + LATENCY_DRAIN_SECONDS
            while len(latencies) < n and receiver.is_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            receiver.join(5)
            consumer.close()
    if errors:
        raise errors[0]
    if len(latencies) != n:
        raise Stalled(f"{members} member(s): {len(latencies)} of {n} records reached the output in time")
    return {"members": members, "rate_per_s": rate, **summarize(latencies)}


# --- 3. wake-up latency and NOTIFY --------------------------------------------------------------


class Waiter:
    """A waiting consumer process; a thread collects what it prints."""

    def __init__(self, bench: Bench, topic: str, name: str, partitions: int = 1) -> None:
        max_backoff_ms, listen = WAKE_WAITERS[name]
        self.name = name
        self.app_name = f"bench-waiter-{name}-{uuid.uuid4().hex[:6]}"
        url = with_app_name(bench.sa_url, self.app_name)
        args = ["_waiter", topic, "5", str(max_backoff_ms), "listen" if listen else "poll", str(partitions)]
        self.proc, self.err = spawn(args, url=url)
        self.seen: dict[int, int] = {}
        self.ready = threading.Event()
        self.cpu: tuple[float, float] | None = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if parts == ["ready"]:
                self.ready.set()
            elif parts and parts[0] == "cpu":
                self.cpu = (float(parts[1]), float(parts[2]))
            elif len(parts) == 2:
                self.seen[int(parts[0])] = int(parts[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(5)
        self.err.seek(0)
        errors = self.err.read()
        self.err.close()
        if self.proc.returncode != 0:
            raise RuntimeError(f"waiter {self.name} exited with {self.proc.returncode}:\n{errors[-3000:]}")


def backend_cpu_seconds(conn: psycopg.Connection[Any], app_name: str) -> float | None:
    """CPU seconds used so far by the server processes of ``app_name`` (None unless the server is local)."""
    pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app_name,))]
    if not pids:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def wakeup_latency(bench: Bench, samples: int, max_gap: float) -> dict[str, Any]:
    bench.reset()
    topic, _ = bench.new_topic(1)
    waiters = [Waiter(bench, topic, name) for name in WAKE_WAITERS]
    acks: dict[int, int] = {}
    rng = random.Random(20240611)  # noqa: S311 (reproducible gaps, not cryptography)
    try:
        for w in waiters:
            if not w.ready.wait(60):
                w.stop()
                raise RuntimeError(f"waiter {w.name} did not start")
        with (
            psycopg.connect(bench.conninfo, autocommit=True) as conn,
            Producer(bench.sa_url, transactional_id=f"bench-wake-{uuid.uuid4().hex[:8]}") as producer,
        ):
            producer.init_transactions()
            producer.partitions_for(topic)
            time.sleep(1.0)  # let every waiter back off to its longest wait
            cpu0 = {w.app_name: backend_cpu_seconds(conn, w.app_name) for w in waiters}
            wall0 = time.monotonic()
            value = b"x" * VALUE_PAD
            for _ in range(samples):
                time.sleep(rng.uniform(0, max_gap))
                producer.begin_transaction()
                future = producer.send(topic, value, partition=0)
                producer.commit_transaction()
                acks[future.result(timeout=0).offset] = time.time_ns()
            last = max(acks)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not all(last in w.seen for w in waiters):
                time.sleep(0.01)
            wall = time.monotonic() - wall0
            cpu1 = {w.app_name: backend_cpu_seconds(conn, w.app_name) for w in waiters}
    finally:
        for w in waiters:
            w.stop()
    out: dict[str, Any] = {"samples": samples, "max_gap_s": max_gap, "waiters": {}}
    for w in waiters:
        missing = [o for o in acks if o not in w.seen]
        if missing:
            raise RuntimeError(f"waiter {w.name} never saw offsets {missing[:5]}")
        lat = summarize([(w.seen[o] - t) / 1e9 for o, t in acks.items()])
        lat["min_ms"] = round(min((w.seen[o] - t) / 1e6 for o, t in acks.items()), 4)
        before, after = cpu0.get(w.app_name), cpu1.get(w.app_name)
        out["waiters"][w.name] = {
            **lat,
            "client_cpu_pct": round(100 * w.cpu[0] / w.cpu[1], 2) if w.cpu else None,
            "server_cpu_pct": round(100 * (after - before) / wall, 2)
            if before is not None and after is not None
            else None,
        }
    return out


def wake_cost(bench: Bench, seconds: float, repeat: int) -> dict[str, Any]:
    """Commits/s of WAKE_COST_PRODUCERS transactional producers (one-record transactions, each to
    its own partition) while a read_committed consumer waits on all the partitions: the wake-ups
    on (producers wake readers, the consumer listens) against off, paired, ``repeat`` times."""
    runs: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(repeat):
        for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
            bench.reset()
            topic, _ = bench.new_topic(WAKE_COST_PRODUCERS)
            waiter = Waiter(bench, topic, WAKE_DEFAULT if mode == "on" else "200-polling", WAKE_COST_PRODUCERS)
            try:
                if not waiter.ready.wait(60):
                    raise RuntimeError("the waiting consumer did not start")
                runs[mode].append(_commit_rate(bench, topic, seconds, wake=mode == "on"))
            finally:
                waiter.stop()
    paired = [on / off for on, off in zip(runs["on"], runs["off"], strict=True)]
    return {
        "producers": WAKE_COST_PRODUCERS,
        "seconds": seconds,
        "commits_per_s_on": round(statistics.median(runs["on"]), 1),
        "commits_per_s_off": round(statistics.median(runs["off"]), 1),
        "runs_on": [round(x, 1) for x in runs["on"]],
        "runs_off": [round(x, 1) for x in runs["off"]],
        "ratio": round(statistics.median(paired), 3),
        "target": 0.95,
    }


def _commit_rate(bench: Bench, topic: str, seconds: float, *, wake: bool) -> float:
    """Commits/s of WAKE_COST_PRODUCERS producer processes committing one-record transactions,
    each to its own partition, started together. Processes, as producers run: threads of one
    process would share its GIL, and measure that instead of what waking readers costs."""
    start_at = time.time() + COMMITTER_START_S
    children = [
        spawn(
            ["_committer", topic, str(k), str(seconds), "wake" if wake else "quiet", repr(start_at)], url=bench.sa_url
        )
        for k in range(WAKE_COST_PRODUCERS)
    ]
    counts = []
    for proc, err in children:
        with contextlib.suppress(subprocess.TimeoutExpired):  # finish() then stops it and raises
            proc.wait(COMMITTER_START_S + seconds + 60)  # each ends by itself
        counts.append(int(finish(proc, err).split()[-1]))
    return sum(counts) / seconds


def committer_main(url: str, topic: str, partition: int, *, seconds: float, wake: bool, start_at: float) -> int:
    """A producer process of the wake-ups' cost: from ``start_at`` (time.time()) on, one-record
    transactions to ``partition`` for ``seconds``; prints how many committed."""
    value = b"x" * VALUE_PAD
    with Producer(url, transactional_id=f"bench-cost-{partition}-{uuid.uuid4().hex[:6]}", wake_readers=wake) as p:
        p.init_transactions()
        p.partitions_for(topic)
        time.sleep(max(start_at - time.time(), 0.0))
        deadline = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < deadline:
            p.begin_transaction()
            p.send(topic, value, partition=partition)
            p.commit_transaction()
            n += 1
    print(n, flush=True)
    return 0


def notify_wakeup(bench: Bench, samples: int, max_gap: float) -> dict[str, float]:
    """Raw LISTEN/NOTIFY: a listener woken by an INSERT + NOTIFY committed in autocommit."""
    received: dict[str, int] = {}
    listening = threading.Event()
    with psycopg.connect(bench.conninfo, autocommit=True) as listener:

        def listen() -> None:
            listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
            listening.set()
            for note in listener.notifies(timeout=30, stop_after=samples):
                received[note.payload] = time.time_ns()

        thread = threading.Thread(target=listen, daemon=True)
        thread.start()
        listening.wait(10)
        sent: dict[str, int] = {}
        rng = random.Random(11)  # noqa: S311 (reproducible gaps, not cryptography)
        with psycopg.connect(bench.conninfo, autocommit=True) as writer:
            for _ in range(samples):
                time.sleep(rng.uniform(0, max_gap))
                row = writer.execute(INSERT_NOTIFY, (b"x" * VALUE_PAD,), prepare=True).fetchone()
                assert row is not None
                sent[str(row[0])] = time.time_ns()
        thread.join(30)
    if set(sent) - set(received):
        raise RuntimeError(f"LISTEN/NOTIFY: {len(set(sent) - set(received))} notifications never arrived")
    lat = summarize([(received[k] - t) / 1e9 for k, t in sent.items()])
    lat["min_ms"] = round(min((received[k] - t) / 1e6 for k, t in sent.items()), 4)
    return lat


def notify_throughput(bench: Bench, threads: int, mode: str, seconds: float) -> float:
    """Commits/s of single-row INSERTs from ``threads`` autocommit sessions."""
    sql = INSERT_PLAIN if mode == "plain" else INSERT_NOTIFY
    value = b"x" * VALUE_PAD
    counts = [0] * threads
    stop_listening = threading.Event()
    listener_thread: threading.Thread | None = None
    if mode == "notify_listened":
        ready = threading.Event()

        def listen() -> None:
            with psycopg.connect(bench.conninfo, autocommit=True) as conn:
                conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                ready.set()
                while not stop_listening.is_set():
                    for _ in conn.notifies(timeout=0.2):
                        pass

        listener_thread = threading.Thread(target=listen, daemon=True)
        listener_thread.start()
        ready.wait(10)

    def writer(k: int) -> Callable[[threading.Barrier], None]:
        def run(barrier: threading.Barrier) -> None:
            with psycopg.connect(bench.conninfo, autocommit=True) as conn:
                conn.execute(sql, (value,), prepare=True)
                barrier.wait()
                deadline = time.perf_counter() + seconds
                n = 0
                while time.perf_counter() < deadline:
                    conn.execute(sql, (value,), prepare=True)
                    n += 1
                counts[k] = n

        return run

    try:
        elapsed = run_threads([writer(k) for k in range(threads)])
    finally:
        stop_listening.set()
        if listener_thread is not None:
            listener_thread.join(5)
    return sum(counts) / elapsed


def notify_cases(bench: Bench, quick: bool, repeat: int) -> list[dict[str, Any]]:
    seconds = QUICK_NOTIFY_SECONDS if quick else FULL_NOTIFY_SECONDS
    with psycopg.connect(bench.conninfo, autocommit=True) as conn:
        conn.execute(NOTIFY_DDL)
    out = []
    for threads in NOTIFY_THREADS:
        runs: dict[str, list[float]] = {mode: [] for mode in NOTIFY_MODES}
        for _ in range(repeat):
            for mode in NOTIFY_MODES:
                with psycopg.connect(bench.conninfo, autocommit=True) as conn:
                    conn.execute("TRUNCATE bench_raw.notify_test")
                runs[mode].append(notify_throughput(bench, threads, mode, seconds))
        for mode, measured in runs.items():
            paired = [m / p for m, p in zip(measured, runs["plain"], strict=True)]
            case = {
                "threads": threads,
                "mode": mode,
                "commits_per_s": round(statistics.median(measured), 1),
                "runs_commits_per_s": [round(m, 1) for m in measured],
                "ratio": round(statistics.median(paired), 3),
            }
            out.append(case)
            log(
                f"{threads} thread(s), {NOTIFY_MODES[mode]}: "
                f"{case['commits_per_s']:,.0f} commits/s ({case['ratio']:.2f})"
            )
    return out


# --- the run ------------------------------------------------------------------------------------


def run(quick: bool, repeat: int) -> dict[str, Any]:
    started = time.perf_counter()
    machine = machine_info()
    machine["pressure_start"] = pressure()
    with scratch_database() as (bench, server):
        throughput = throughput_cases(bench, quick, repeat)
        rate, seconds = QUICK_LATENCY if quick else FULL_LATENCY
        latency = []
        for members in MEMBER_COUNTS:
            try:
                latency.append(pipeline_latency(bench, members, rate, seconds))
            except Stalled as exc:
                latency.append({"members": members, "rate_per_s": rate, "error": str(exc)})
                log(f"end-to-end latency, {members} member(s): STALLED: {exc}")
                continue
            log(
                f"end-to-end latency, {members} member(s): p50 {latency[-1]['p50_ms']:.1f} ms, "
                f"p99 {latency[-1]['p99_ms']:.1f} ms"
            )
        notify_tp = notify_cases(bench, quick, repeat)
        samples, max_gap = QUICK_WAKE if quick else FULL_WAKE
        wake = wakeup_latency(bench, samples, max_gap)
        wake["notify"] = notify_wakeup(bench, QUICK_NOTIFY_WAKE if quick else FULL_NOTIFY_WAKE, 0.02)
        for waiter, w in wake["waiters"].items():
            log(f"wake-up, {WAITER_TITLES[waiter]}: p50 {w['p50_ms']:.1f} ms, p99 {w['p99_ms']:.1f} ms")
        cost = wake_cost(bench, QUICK_WAKE_COST_SECONDS if quick else FULL_WAKE_COST_SECONDS, repeat)
        wake["cost"] = cost
        log(
            f"wake-ups' cost: {cost['producers']} producers commit {cost['commits_per_s_on']:,.0f}/s with them, "
            f"{cost['commits_per_s_off']:,.0f}/s without ({cost['ratio']:.2f})"
        )
        log(f"wake-up, LISTEN/NOTIFY: p50 {wake['notify']['p50_ms']:.2f} ms, p99 {wake['notify']['p99_ms']:.2f} ms")
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    machine["pressure_end"] = pressure()
    default = wake["waiters"][WAKE_DEFAULT]
    eight = {c["mode"]: c for c in notify_tp if c["threads"] == max(NOTIFY_THREADS)}
    return {
        "benchmark": "pipeline",
        "quick": quick,
        "repeat": repeat,
        "database": bench.name,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "oncelog": code_info(),
        "server": server,
        "throughput": throughput,
        "latency": latency,
        "wakeup": wake,
        "notify_throughput": notify_tp,
        "headline": {
            "records_per_s_1_member": throughput[0]["records_per_s"],
            "records_per_s_4_members": throughput[-1]["records_per_s"],
            "wakeup_default_p50_ms": default["p50_ms"],
            "wakeup_default_p99_ms": default["p99_ms"],
            "notify_ratio_8_threads": eight["notify"]["ratio"],
            "wakeup_cost_ratio": wake["cost"]["ratio"],
        },
        "seconds": round(time.perf_counter() - started, 1),
    }


def render(result: dict[str, Any]) -> str:
    m, s = result["machine"], result["server"]
    lines = [
        "# oncelog pipeline benchmark" + (" (--quick: tiny counts, numbers not meaningful)" if result["quick"] else ""),
        "",
        f"- machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB RAM, {m['platform']}; "
        f"load average {m['loadavg_start'][0]} at start, {m['loadavg_end'][0]} at end; "
        f"pressure (PSI some avg10) {fmt_pressure(m['pressure_start'])} at start, "
        f"{fmt_pressure(m['pressure_end'])} at end",
        f"- Python {m['python']}, psycopg {m['psycopg']}, SQLAlchemy {m['sqlalchemy']}",
        f"- oncelog: git {result['oncelog']['git'] or 'unknown (not a git checkout)'}, "
        f"migrations at {result['oncelog']['migration_head']}",
        f"- server: {s['target']}",
        f"- PostgreSQL {s['version']}: {fmt_settings(s['settings'])}",
        f"- throughput and NOTIFY rows: the median of {result['repeat']} run(s); every pipeline, latency and "
        "wake-up measurement starts from an empty log (the records of earlier ones truncated) after a CHECKPOINT",
        "",
        "## Consume-transform-produce throughput (examples/consume_transform_produce.run, 4 partitions)",
        "",
        "| members | input records | seconds | records/s | transactions (aborted) | records per transaction "
        "| records copied per member | member CPU s |",
        "|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for c in result["throughput"]:
        if "error" in c:
            lines.append(f"| {c['members']} | {c['records']:,} | - | stalled: {c['error']} | - | - | - | - |")
            continue
        lines.append(
            f"| {c['members']} | {c['records']:,} | {c['seconds']:.2f} | {c['records_per_s']:,.0f} "
            f"| {c['transactions']:,} ({c['aborted_transactions']}) | {c['records_per_txn']} "
            f"| {', '.join(str(x) for x in c['copied_per_member'])} "
            f"| {', '.join(str(x) for x in c['member_cpu_s'])} |"
        )
    lines += [
        "",
        "## End-to-end latency: producer send to read_committed consumer on the output",
        "",
        "| members | rate records/s | samples | p50 ms | p99 ms | max ms | mean ms |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["latency"]:
        if "error" in r:
            lines.append(f"| {r['members']} | {r['rate_per_s']} | - | stalled: {r['error']} | - | - | - |")
            continue
        lines.append(
            f"| {r['members']} | {r['rate_per_s']} | {r['samples']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} "
            f"| {r['max_ms']:.1f} | {r['mean_ms']:.1f} |"
        )
    w = result["wakeup"]
    lines += [
        "",
        f"## Wake-up: one record per transaction, random gaps of 0 to {w['max_gap_s'] * 1000:.0f} ms; "
        "visible to the waiting consumer - commit_transaction returned",
        "",
        "| waiting reader | samples | p50 ms | p99 ms | max ms | min ms | idle CPU: client % | backend % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in w["waiters"].items():
        title = WAITER_TITLES[name]
        client = "n/a" if r["client_cpu_pct"] is None else f"{r['client_cpu_pct']:.1f}"
        backend = "n/a" if r["server_cpu_pct"] is None else f"{r['server_cpu_pct']:.1f}"
        lines.append(
            f"| {title} | {r['samples']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['max_ms']:.2f} "
            f"| {r['min_ms']:.2f} | {client} | {backend} |"
        )
    n = w["notify"]
    lines += [
        f"| raw LISTEN/NOTIFY (INSERT + NOTIFY committed; gaps 0 to 20 ms) | {n['samples']} | {n['p50_ms']:.2f} "
        f"| {n['p99_ms']:.2f} | {n['max_ms']:.2f} | {n['min_ms']:.2f} | - | - |",
        "",
        "(CPU: share of one core over the sampling window, most of it spent waiting.)",
        "",
        *_render_cost(w.get("cost")),
        "## The cost of NOTIFY: single-row INSERT commits/s (raw psycopg, autocommit)",
        "",
        "| threads | statement | commits/s | ratio (to INSERT alone) |",
        "|---:|---|---:|---:|",
    ]
    for c in result["notify_throughput"]:
        lines.append(f"| {c['threads']} | {NOTIFY_MODES[c['mode']]} | {c['commits_per_s']:,.0f} | {c['ratio']:.2f} |")
    h = result["headline"]
    lines += [
        "",
        f"pipeline: {h['records_per_s_1_member']:,.0f} records/s with 1 member, "
        f"{h['records_per_s_4_members']:,.0f} with 4",
        f"wake-up with the default backoff: p50 {h['wakeup_default_p50_ms']:.1f} ms, "
        f"p99 {h['wakeup_default_p99_ms']:.1f} ms; NOTIFY in every commit: {h['notify_ratio_8_threads']:.2f} "
        "of the commit throughput (8 threads)",
        f"(run took {result['seconds']} s)",
    ]
    return "\n".join(lines) + "\n"


#: How the report names each waiting consumer.
WAITER_TITLES = {
    "200": "Consumer, defaults (listens; polls 5..200 ms)",
    "200-polling": "Consumer, polling only, fetch_max_backoff_ms=200",
    "5-polling": "Consumer, polling only, fetch_max_backoff_ms=5",
}


def _render_cost(cost: dict[str, Any] | None) -> list[str]:
    if cost is None:
        return []
    return [
        f"The wake-ups' cost to producers: {cost['producers']} transactional producer processes commit one-record "
        "transactions (each to its own partition) while a read_committed consumer waits on all of them:",
        "",
        "| mechanism | commits/s | ratio (on / off) | target |",
        "|---|---:|---:|---|",
        f"| off (no wake-ups; the consumer polls) | {cost['commits_per_s_off']:,.0f} | | |",
        f"| on (producers wake, the consumer listens) | {cost['commits_per_s_on']:,.0f} | {cost['ratio']:.2f} "
        f"| >= {cost['target']} |",
        "",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["_member"]:
        return member_main(os.environ[CHILD_URL_ENV], *args_in[1:5])
    if args_in[:1] == ["_committer"]:
        topic, partition, seconds, wake, start_at = args_in[1:6]
        return committer_main(
            os.environ[CHILD_URL_ENV],
            topic,
            int(partition),
            seconds=float(seconds),
            wake=wake == "wake",
            start_at=float(start_at),
        )
    if args_in[:1] == ["_waiter"]:
        topic, low, high, listen, partitions = args_in[1:6]
        return waiter_main(
            os.environ[CHILD_URL_ENV],
            topic,
            min_backoff_ms=int(low),
            max_backoff_ms=int(high),
            listen=listen == "listen",
            partitions=int(partitions),
        )
    parser = bench_parser("bench.pipeline", __doc__, "runs per throughput measurement (default 3; 1 with --quick)")
    args = parser.parse_args(args_in)
    result = run(args.quick, repeat_count(parser, args, 3))
    emit(result, render(result), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
