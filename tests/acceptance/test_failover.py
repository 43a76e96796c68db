"""Clients through a real failover (issue #20): ``oncelog dev-cluster``'s three nodes under
pg_auto_failover, the primary killed with SIGKILL (keeper and server at once, as a power cut)
while clients write and read through the cluster's multi-host URL.

What must hold: every write the store acknowledged is on the new primary (synchronous
replication, ``ANY 1``), exactly once (the idempotent producer's retries of writes whose outcome
the crash hid are deduplicated); a transactional copier that retries by Kafka's rules copies
every record exactly once; a consumer carries on from its position.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bench import replication as replication_bench
from bench.report import REPLICATION_TITLES
from oncelog import Admin, Consumer, Producer, TopicPartition, errors
from oncelog.cli import cli
from oncelog.dev_cluster import NODES, DevCluster
from oncelog.record_future import RecordFuture
from oncelog.store import create_engine, migrate
from oncelog.txn_state import TxnState
from oncelog.verify.faults import Fault
from oncelog.verify.runner import RunConfig, verify

#: Bounds every wait here; never an assertion on speed.
WAIT = 180.0


@pytest.fixture(scope="module")
def dev_cluster() -> Iterator[DevCluster]:
    """A dev cluster of this module's own, migrated (not under pytest's tmp folder: under root
    that folder is closed to the postgres user)."""
    cluster = DevCluster(Path(tempfile.mkdtemp(prefix="oncelog-cluster-")))
    try:
        engine = create_engine(cluster.start())
        try:
            migrate.upgrade(engine)
        finally:
            engine.dispose()
        yield cluster
    finally:
        cluster.destroy()


def read_all(url: str, topic: str, partitions: int) -> list[bytes]:
    """Every committed value of ``topic``, read from the start by a read_committed consumer."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    values: list[bytes] = []
    with Consumer(url, isolation_level="read_committed") as consumer:
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + WAIT
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "the topic was not read to its end"
            values += [r.value for r in consumer.poll(0.5) if r.value is not None]
    return values


#: Seconds for which the primary stops sending WAL before it dies: the standbys fall behind.
LAG = 1.0


def write_through_a_failover(
    cluster: DevCluster, topic: str
) -> tuple[list[bytes], list[BaseException], Counter[bytes]]:
    """An idempotent producer writes on while the primary stops replicating for LAG seconds and
    dies, and a standby is promoted. Returns the values acknowledged, the errors of the others,
    and how often each value is in the topic afterwards."""
    url = cluster.url()
    with Admin(url) as admin:
        admin.create_topic(topic, partitions=4)
    futures: list[tuple[bytes, RecordFuture]] = []
    crashed = threading.Event()
    with Producer(url, linger_ms=2) as producer:
        sent = 0

        def acknowledged() -> int:
            return sum(1 for _, f in futures if f.done() and f.exception() is None)

        def send_some(n: int) -> None:
            nonlocal sent
            for _ in range(n):
                value = b"%07d" % sent
                futures.append((value, producer.send(topic, value, key=value)))
                sent += 1
                time.sleep(0.0005)

        while acknowledged() < 300:
            send_some(50)

        def crash() -> None:
            cluster.fail_over(WAIT, lag=LAG)
            crashed.set()

        killer = threading.Thread(target=crash)
        killer.start()
        # Writes go on through the crash and the promotion: the producer retries them.
        while not crashed.is_set():
            send_some(20)
        killer.join(WAIT)
        before = acknowledged()
        send_some(300)
        producer.flush(WAIT)
        assert acknowledged() > before  # writing resumed on the new primary
    acked = [v for v, f in futures if f.exception() is None]
    failed = [e for _, f in futures if (e := f.exception()) is not None]
    return acked, failed, Counter(read_all(url, topic, 4))


def test_every_acknowledged_write_survives_the_primarys_crash_exactly_once(dev_cluster: DevCluster) -> None:
    acked, failed, counts = write_through_a_failover(dev_cluster, "acked")
    assert failed == [], failed[:5]
    assert sorted(counts) == sorted(acked)  # nothing acknowledged was lost
    assert [v for v, n in counts.items() if n > 1] == []  # and nothing was written twice
    dev_cluster.start()  # the old primary rejoins as a standby
    assert dev_cluster.status().healthy


def test_the_control_asynchronous_replication_loses_acknowledged_writes(dev_cluster: DevCluster) -> None:
    """The same run with asynchronous replication: the commits of the lag are acknowledged and
    the standbys never get them, so the check above must find them missing (it can fail)."""
    try:
        dev_cluster.set_synchronous(False)
        acked, _failed, counts = write_through_a_failover(dev_cluster, "acked-async")
    finally:
        dev_cluster.start()
        dev_cluster.set_synchronous(True)
    lost = [v for v in acked if v not in counts]
    assert lost, "asynchronous replication lost nothing acknowledged: the failover check proves nothing"
    assert [v for v, n in counts.items() if n > 1] == []  # lost, but never duplicated


def test_a_transactional_copier_copies_exactly_once_through_a_failover(dev_cluster: DevCluster) -> None:
    """consume-transform-produce with offsets in the transaction (KIP-447), by Kafka's rules: an
    abortable or retriable error aborts and starts again from the group's committed offsets."""
    url = dev_cluster.url()
    total = 3000
    with Admin(url) as admin:
        admin.create_topic("source", partitions=2)
        admin.create_topic("copy", partitions=2)
    with Producer(url) as feeder:
        for i in range(total):
            feeder.send("source", b"%06d" % i, partition=i % 2)
        feeder.flush(WAIT)
    commits = 0
    killed: str | None = None
    with (
        Consumer(url, group_id="copier", isolation_level="read_committed", max_poll_records=100) as consumer,
        Producer(url, transactional_id="copier-1") as producer,
    ):
        consumer.subscribe(["source"])
        producer.init_transactions()
        copied = 0
        deadline = time.monotonic() + 2 * WAIT
        while copied < total:
            assert time.monotonic() < deadline, f"copied {copied} of {total}"
            try:
                records = consumer.poll(0.5)
                if not records:
                    continue
                producer.begin_transaction()
                for record in records:
                    producer.send("copy", b"copy:" + (record.value or b""), partition=record.partition)
                offsets = {}
                for record in records:
                    offsets[TopicPartition(record.topic, record.partition)] = record.offset + 1
                producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                producer.commit_transaction()
            except errors.OncelogError as exc:
                if exc.fatal or producer.transaction_state is TxnState.FATAL_ERROR:
                    raise
                if producer.transaction_state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
                    producer.abort_transaction()
                _rewind(consumer)
                continue
            copied += len(records)
            commits += 1
            if commits == 5:
                # Killed at once, between two transactions: the copier meets the crash in its
                # next poll or transaction, and goes on through the promotion.
                killed = dev_cluster.status().primary
                assert killed is not None
                dev_cluster.kill(killed)
    assert killed is not None
    # The copier carried on past the crash (on the new primary: the killed node is still down).
    # Whether it met errors or the producer's own retries absorbed the promotion is timing.
    assert commits > 5
    dev_cluster.wait_until(lambda status: status.primary not in (None, killed), "the new primary", WAIT)
    values = Counter(read_all(url, "copy", 2))
    assert sorted(values) == [b"copy:%06d" % i for i in range(total)]
    assert max(values.values()) == 1
    dev_cluster.start()
    assert dev_cluster.status().healthy


def _rewind(consumer: Consumer) -> None:
    """Back to the group's committed offsets: what the aborted transaction copied is copied again.
    committed() itself waits through the promotion (up to default_api_timeout_ms), as Kafka's
    consumer retries a retriable error."""
    assigned = list(consumer.assignment())
    committed = consumer.committed(assigned) if assigned else {}
    for tp in assigned:
        offset = committed.get(tp)
        consumer.seek(tp, offset.offset if offset is not None else 0)


def _pause_after_writing(marker: str) -> Callable[[int, int], None]:
    """A task hook: the task's rows are sent in its open transaction; it says so (a file) and
    waits a few seconds, in which the test kills the primary."""

    def hook(task: int, attempt: int) -> None:
        Path(marker).touch()
        time.sleep(3)

    return hook


def test_a_spark_pipeline_through_a_failover_fails_cleanly_and_its_rerun_writes_each_record_once(
    dev_cluster: DevCluster, spark: Any, tmp_path: Path
) -> None:
    """The primary dies while the pipeline's tasks hold their transactions open: the run fails with
    a typed error or succeeds, never half; run again after the promotion, the output holds every
    committed input record exactly once."""
    from oncelog.spark import run_pipeline  # noqa: PLC0415 - the optional spark extra

    dev_cluster.start()
    url = dev_cluster.url()
    total = 2000
    with Admin(url) as admin:
        admin.create_topic("spark-in", partitions=2)
        admin.create_topic("spark-out", partitions=2)
    with Producer(url) as feeder:
        for i in range(total):
            feeder.send("spark-in", b"%06d" % i, partition=i % 2)
        feeder.flush(WAIT)
    marker = tmp_path / "written"
    killed: list[str] = []

    def kill_when_written() -> None:
        deadline = time.monotonic() + WAIT
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        primary = dev_cluster.status().primary
        if primary is not None:
            killed.append(primary)
            dev_cluster.kill(primary)

    killer = threading.Thread(target=kill_when_written)
    killer.start()
    outcome: str
    try:
        result = run_pipeline(
            spark,
            url,
            input_topics=["spark-in"],
            output_topic="spark-out",
            group="spark-copier",
            transform=lambda df: df.select("key", "value"),
            task_hook=_pause_after_writing(str(marker)),
        )
        outcome = f"committed {result.output_records}"
    except errors.OncelogError as exc:
        outcome = type(exc).__name__
    finally:
        killer.join(WAIT)
    assert killed, "the primary was not killed during the run"
    dev_cluster.wait_until(lambda status: status.primary not in (None, killed[0]), "the new primary", WAIT)
    # Again until the group has nothing left to read: each run either commits or fails whole.
    deadline = time.monotonic() + WAIT
    while True:
        assert time.monotonic() < deadline, f"the reruns did not finish (first run: {outcome})"
        try:
            again = run_pipeline(
                spark,
                url,
                input_topics=["spark-in"],
                output_topic="spark-out",
                group="spark-copier",
                transform=lambda df: df.select("key", "value"),
            )
        except errors.OncelogError as exc:
            assert exc.retriable, exc
            time.sleep(1)
            continue
        if again.input_offsets == 0:
            break
    values = Counter(read_all(url, "spark-out", 2))
    assert sorted(values) == [b"%06d" % i for i in range(total)], outcome
    assert max(values.values()) == 1, outcome
    dev_cluster.start()


def test_verify_finds_no_anomaly_through_a_failover(dev_cluster: DevCluster) -> None:
    """``oncelog verify --dev-cluster --fault failover``, short: every workload while the primary
    is killed and a standby promoted; the checker proves each acknowledged write survived once."""
    output = Path(tempfile.mkdtemp(prefix="oncelog-verify-failover-")) / "run"
    config = RunConfig(
        database_url=dev_cluster.url(),
        output=output,
        faults=[Fault.FAILOVER],
        duration=1.0,  # one failover window (the run lasts until it has played)
        seed=20261127,
        clients=1,
        cluster=dev_cluster,
    )
    report = verify(config)
    anomalies = [f"{a.kind}: {a.message}" for a in report.verdict.anomalies[:20]]
    assert report.verdict.ok, anomalies
    assert report.summary["clients"]["crashes"] == [], report.summary["clients"]["crashes"]
    assert report.summary["caught_up"]
    assert report.summary["faults"]["failover"]["fired"] == 1, report.summary["fault_events"]
    summary = report.verdict.summary
    assert summary["ops.send.ok"] > 0 and summary["ops.txn.ok"] > 0 and summary["copies.committed"] > 0, summary
    assert dev_cluster.status().healthy  # the old primary is back as a standby


def test_the_replication_benchmark_runs_and_reports_both_modes(dev_cluster: DevCluster) -> None:
    """bench/replication.py, --quick, on this module's cluster: a smoke test of its shape (every
    figure there and positive), never of speed."""
    dev_cluster.start()
    result = replication_bench.run(quick=True, repeat=1, cluster=dev_cluster)
    assert result["healthy_after"]
    assert result["server"]["settings"]["synchronous_standby_names"].startswith("ANY 1 ")
    assert result["throughput"]["quorum_per_s"] > 0 and result["throughput"]["alone_per_s"] > 0
    assert sorted(result["latency"]) == sorted(REPLICATION_TITLES)
    for case in result["latency"].values():
        assert case["quorum"]["samples"] == case["alone"]["samples"] > 0
        assert case["quorum"]["p50_ms"] > 0 and case["alone"]["p50_ms"] > 0
    assert "| case | quorum p50 ms |" in replication_bench.render(result)


def test_the_cli_shows_locates_stops_and_starts_the_cluster(dev_cluster: DevCluster) -> None:
    runner = CliRunner()
    base = ["dev-cluster", "--dir", str(dev_cluster.data_dir)]
    shown = runner.invoke(cli, [*base, "status", "--json"])
    assert shown.exit_code == 0, shown.output
    status = json.loads(shown.output)
    assert status["healthy"] and status["primary"] in NODES
    assert sorted(n["reported"] for n in status["nodes"]) == ["primary", "secondary", "secondary"]
    url = runner.invoke(cli, [*base, "url"]).output.strip()
    assert url == dev_cluster.url()
    made = runner.invoke(cli, ["--database-url", url, "topics", "create", "made-by-cli", "--partitions", "2"])
    assert made.exit_code == 0, made.output
    stopped = runner.invoke(cli, [*base, "stop"])
    assert (stopped.exit_code, stopped.output.strip()) == (0, "stopped")
    down = runner.invoke(cli, [*base, "status"])
    assert down.exit_code == 3 and "node1:          stopped" in down.output
    started = runner.invoke(cli, [*base, "start"])
    assert (started.exit_code, started.output.strip()) == (0, url), repr(started.exception)
    with Admin(url) as admin:
        assert admin.list_topics()["made-by-cli"] == 2  # the data outlived the stop
