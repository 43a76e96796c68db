"""Synchronous replication: what a quorum of standbys costs writers, against the same server alone.

    .venv/bin/python -m bench.replication [--quick] [--json PATH] [--repeat N]

The run starts a dev cluster of its own (``oncelog dev-cluster``: pg_auto_failover, a primary and
two standbys on this machine, ``synchronous_standby_names = 'ANY 1 (...)'``), migrates it, and
deletes it at the end. Every figure is taken twice, paired, on the same primary:

* **quorum**: the sessions' ``synchronous_commit = on``, the cluster's default: a commit returns
  once one standby has flushed its WAL, so no acknowledged write is lost to a failover;
* **alone**: the sessions' ``synchronous_commit = local``: a commit returns once the primary has
  flushed its WAL, as on a single server (the baseline; the WAL senders still run, which is what
  makes the two comparable on one machine and disk).

Measured, 100-byte values and 12-byte keys on a 4-partition topic:

1. Produce throughput: an idempotent ``Producer`` (``max_batch_records=1000``, ``linger_ms=50``)
   sends the records round-robin to the partitions and flushes; records/s from the first send to
   the end of the flush. The two modes alternate, who goes first alternating too; the ratio is the
   median of the per-pair ratios.
2. Commit latency, sample by sample interleaved between the modes: a raw single-row INSERT in
   autocommit (what replication costs PostgreSQL itself); an acknowledged single-record send
   (``Producer(linger_ms=0)``, ``send().result()``); and ``commit_transaction`` of a 10-record
   transaction on 4 partitions whose records are still lingering (the commit carries them and
   EndTxn). p50 and p99 of each, and quorum over alone.

Loopback replication measures the protocol's extra round trip and the standbys' flushes sharing
this machine's disk and cores; across machines add the network's round trip to every commit.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

from bench.produce import (
    log,
    machine_info,
    result_fields,
    run_main,
    summarize,
    titled,
)
from bench.report import replication_section
from oncelog import Admin, Producer
from oncelog.dev_cluster import DevCluster
from oncelog.store import create_engine, migrate

MODES = ("quorum", "alone")
PARTITIONS = 4
VALUE = b"v" * 100
KEYS = [b"key-%08d" % i for i in range(1024)]
FULL_RECORDS = 40_000
QUICK_RECORDS = 2_000
FULL_SAMPLES = 400
QUICK_SAMPLES = 10
TXN_RECORDS = 10
WARMUP = 10


def mode_url(url: str, mode: str) -> str:
    """``url`` with the sessions' synchronous_commit for ``mode`` (libpq's ``options``)."""
    setting = "on" if mode == "quorum" else "local"
    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}options={quote(f'-c synchronous_commit={setting}')}"


def check_modes(urls: dict[str, str]) -> dict[str, str]:
    """Each mode's URL really sets what it says (a URL option dropped on the way would make the
    two modes the same and the ratio meaningless)."""
    seen = {}
    for mode, url in urls.items():
        with psycopg.connect(url, autocommit=True) as conn:
            seen[mode] = str(conn.execute("SHOW synchronous_commit").fetchone()[0])  # type: ignore[index]
    if seen != {"quorum": "on", "alone": "local"}:
        raise RuntimeError(f"the sessions' synchronous_commit is not what the modes need: {seen}")
    return seen


def replication_info(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        names = conn.execute("SHOW synchronous_standby_names").fetchone()[0]  # type: ignore[index]
        version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        standbys = conn.execute("SELECT application_name, sync_state FROM pg_stat_replication ORDER BY 1").fetchall()
    return {
        "version": version,
        "settings": {"synchronous_standby_names": names},
        "standbys": [{"name": n, "sync_state": s} for n, s in standbys],
    }


def throughput(url: str, topic: str, records: int) -> float:
    """records/s of an idempotent Producer sending ``records`` round-robin, flush included."""
    with Producer(url, max_batch_records=1000, linger_ms=50) as producer:
        producer.send(topic, VALUE, KEYS[0], partition=0).result(60)  # connected, producer id known
        started = time.perf_counter()
        for i in range(records):
            producer.send(topic, VALUE, KEYS[i % len(KEYS)], partition=i % PARTITIONS)
        producer.flush(300)
        return records / (time.perf_counter() - started)


def send_one(producer: Producer, topic: str) -> object:
    """One record, waited for until acknowledged."""
    return producer.send(topic, VALUE, KEYS[0], partition=0).result(60)


@contextmanager
def latency_ops(
    urls: dict[str, str], topic: str, schema_table: str
) -> Iterator[dict[str, dict[str, Callable[[], object]]]]:
    """Per case, per mode: one operation to time (its connections opened and warm)."""
    with ExitStack() as stack:
        ops: dict[str, dict[str, Callable[[], object]]] = {"raw_insert": {}, "send": {}, "txn_commit": {}}
        for mode, url in urls.items():
            conn = stack.enter_context(psycopg.connect(url, autocommit=True))
            ops["raw_insert"][mode] = partial(conn.execute, f"INSERT INTO {schema_table} (v) VALUES (%s)", (VALUE,))
            single = stack.enter_context(Producer(url, linger_ms=0))
            ops["send"][mode] = partial(send_one, single, topic)
            txn = stack.enter_context(Producer(url, transactional_id=f"bench-replication-{mode}", linger_ms=60_000))
            txn.init_transactions()

            def commit(p: Producer = txn) -> float:
                p.begin_transaction()
                for i in range(TXN_RECORDS):
                    p.send(topic, VALUE, KEYS[i], partition=i % PARTITIONS)
                started = time.perf_counter()
                p.commit_transaction()
                return time.perf_counter() - started

            ops["txn_commit"][mode] = commit
        yield ops


def interleaved(ops: dict[str, Callable[[], object]], samples: int) -> dict[str, list[float]]:
    """``samples`` timings per mode, the modes taking turns (who goes first alternating). An
    operation that returns a float timed its own critical part (the commit); else the call is timed."""
    out: dict[str, list[float]] = {mode: [] for mode in ops}
    for i in range(WARMUP + samples):
        order = MODES if i % 2 == 0 else MODES[::-1]
        for mode in order:
            started = time.perf_counter()
            own = ops[mode]()
            took = own if isinstance(own, float) else time.perf_counter() - started
            if i >= WARMUP:
                out[mode].append(took)
    return out


def run(quick: bool, repeat: int, cluster: DevCluster | None = None) -> dict[str, Any]:
    """The benchmark on a dev cluster of its own (deleted at the end), or on ``cluster``, running
    and migrated already (the test suite's smoke run borrows one)."""
    began = time.perf_counter()
    machine = machine_info()
    records = QUICK_RECORDS if quick else FULL_RECORDS
    samples = QUICK_SAMPLES if quick else FULL_SAMPLES
    own = cluster is None
    if cluster is None:
        cluster = DevCluster(Path(tempfile.mkdtemp(prefix="oncelog-bench-cluster-")))
    try:
        started = time.perf_counter()
        if own:
            log("replication: starting a dev cluster (about 15 s)")
            url = cluster.start()
            engine = create_engine(url)
            try:
                migrate.upgrade(engine)
            finally:
                engine.dispose()
        else:
            url = cluster.url()
        cluster_start_s = time.perf_counter() - started
        urls = {mode: mode_url(url, mode) for mode in MODES}
        check_modes(urls)
        server = replication_info(url)
        topic = f"bench-replication-{uuid.uuid4().hex[:8]}"
        with Admin(url) as admin:
            admin.create_topic(topic, partitions=PARTITIONS)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS public.bench_replication_raw (id bigserial PRIMARY KEY, v bytea)")

        runs = []
        for r in range(repeat):
            log(f"replication: throughput, run {r + 1} of {repeat}")
            order = MODES if r % 2 == 0 else MODES[::-1]
            run_ = {mode: throughput(urls[mode], topic, records) for mode in order}
            runs.append(run_)
        log(f"replication: commit latency, {samples} samples per case and mode")
        latency: dict[str, dict[str, Any]] = {}
        with latency_ops(urls, topic, "public.bench_replication_raw") as ops:
            for case, per_mode in ops.items():
                timings = interleaved(per_mode, samples)
                figures = {mode: summarize(timings[mode]) for mode in MODES}
                latency[case] = {
                    **figures,
                    "ratio_p50": round(figures["quorum"]["p50_ms"] / figures["alone"]["p50_ms"], 3),
                    "ratio_p99": round(figures["quorum"]["p99_ms"] / figures["alone"]["p99_ms"], 3),
                }
        healthy = cluster.status().healthy
    finally:
        if own:
            cluster.destroy()
    return {
        **result_fields("replication", quick, repeat, machine, server),
        "settings": {
            "records": records,
            "samples": samples,
            "partitions": PARTITIONS,
            "value_bytes": len(VALUE),
            "txn_records": TXN_RECORDS,
            "repeat": repeat,
        },
        "cluster_start_s": round(cluster_start_s, 1) if own else None,
        "healthy_after": healthy,
        "throughput": {
            "runs": [{mode: round(v, 1) for mode, v in r.items()} for r in runs],
            **{f"{mode}_per_s": round(statistics.median(r[mode] for r in runs), 1) for mode in MODES},
            "ratio": round(statistics.median(r["quorum"] / r["alone"] for r in runs), 3),
        },
        "latency": latency,
        "seconds": round(time.perf_counter() - began, 1),
    }


def render(result: dict[str, Any]) -> str:
    return titled("# oncelog replication benchmark", result["quick"], replication_section(result))


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(
        argv,
        prog="bench.replication",
        doc=__doc__,
        repeat_help="paired throughput runs (default 3; 1 with --quick)",
        default_repeat=3,
        run=run,
        render=render,
    )


if __name__ == "__main__":
    sys.exit(main())
