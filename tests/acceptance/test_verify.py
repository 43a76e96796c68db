"""``oncelog verify``: short seeded runs of every workload under every fault kind, the command end
to end, and broken environments that the verdict must catch.

Every run asserts that its verdict is valid AND that each chosen fault really took effect (the
runner's summary counts what fired; the history holds one ``nemesis`` op per window). Server
restarts run on a private embedded server of the test's own, never on the session's shared one.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from oncelog.embedded import EmbeddedPostgres, find_server_binaries
from oncelog.errors import ConfigurationError, ServerBinariesNotFoundError
from oncelog.store import create_engine, migrate
from oncelog.verify.checker import check
from oncelog.verify.cli import resolve_faults
from oncelog.verify.faults import (
    BROKER_FAULTS,
    CLUSTER_FAULTS,
    SERVER_FAULTS,
    Fault,
    FaultWindow,
    Nemesis,
    plan_faults,
)
from oncelog.verify.history import History, OpType
from oncelog.verify.proxy import FaultProxy
from oncelog.verify.runner import RunConfig, RunInfo, RunReport, Via, verify
from oncelog.verify.workloads import ClientSpec, Role, Workload, kill_with_stacks

#: Seconds of faults per run; a run lasts until each chosen fault has had a window, then stops.
SHORT = 3.0
SEED = 20240607


def config(url: str, output: Path, **values: Any) -> RunConfig:
    """A short run with one client per role."""
    defaults: dict[str, Any] = {"duration": SHORT, "seed": SEED, "clients": 1}
    return RunConfig(database_url=url, output=output, **(defaults | values))


def explain(report: RunReport) -> str:
    """The anomalies and crashes, for an assertion message."""
    lines = [f"{a.kind}: {a.message}" for a in report.verdict.anomalies[:20]]
    lines += [f"crash {c['name']} ({c['returncode']}):\n{c['log_tail']}" for c in report.summary["clients"]["crashes"]]
    return "\n".join(lines)


def assert_valid(report: RunReport, faults: list[Fault]) -> None:
    """A valid verdict, no client crashed, the reader caught up, and every fault fired."""
    assert report.verdict.ok, explain(report)
    assert report.summary["clients"]["crashes"] == [], explain(report)
    assert report.summary["caught_up"]
    for fault in faults:
        counts = report.summary["faults"][str(fault)]
        assert counts["fired"] >= 1, (fault, report.summary["fault_events"])
        assert report.verdict.summary[f"ops.{fault}.info"] >= 1, fault
    out = report.info.output
    assert {p.name for p in out.iterdir()} >= {"history.jsonl", "verdict.json", "summary.json", "processes", "logs"}
    assert json.loads((out / "verdict.json").read_text())["valid"] is True


def assert_every_workload_ran(report: RunReport) -> None:
    s = report.verdict.summary
    assert s["ops.send.ok"] > 0 and s["ops.txn.ok"] > 0 and s["ops.txn.fail"] > 0, s
    assert s["ops.copy.ok"] > 0 and s["copies.committed"] > 0, s
    assert s["reads.read_committed"] > 0 and s["reads.read_uncommitted"] > 0, s
    assert s["log.aborted"] > 0 and s["log.control"] > 0, s


# --- the plan and the specs, without a database ---------------------------------------------------


def test_the_plan_is_seeded_and_has_every_fault() -> None:
    faults = list(Fault)
    plan = plan_faults(faults, duration=2.0, seed=7)
    assert plan == plan_faults(reversed(faults), duration=2.0, seed=7)
    assert plan != plan_faults(faults, duration=2.0, seed=8)
    # A duration shorter than one round still plays every fault once; a long one plays rounds.
    assert sorted(w.fault for w in plan) == sorted(faults)
    longer = plan_faults(faults, duration=120.0, seed=7)
    assert len(longer) > 2 * len(faults) and {w.fault for w in longer} == set(faults)
    for earlier, later in itertools.pairwise(longer):
        assert earlier.at + earlier.duration < later.at  # one window at a time
    assert plan_faults([], duration=60.0, seed=7) == []


def test_the_faults_follow_what_the_deployment_allows() -> None:
    """Server restarts on the embedded server, the failover on the dev cluster; by default, every
    fault the deployment allows; asked for where they cannot run, a usage error."""
    every = set(Fault) - BROKER_FAULTS
    chosen, skipped = resolve_faults([], managed=True)
    assert set(chosen) == every - CLUSTER_FAULTS and set(skipped) == CLUSTER_FAULTS | BROKER_FAULTS
    chosen, skipped = resolve_faults([], managed=False)
    assert set(chosen) == every - CLUSTER_FAULTS - SERVER_FAULTS
    chosen, skipped = resolve_faults([], managed=True, cluster=True)
    assert set(chosen) == every - SERVER_FAULTS and set(skipped) == SERVER_FAULTS | BROKER_FAULTS
    # Killing the broker only where the clients speak Kafka to one.
    chosen, skipped = resolve_faults([], managed=False, broker=True)
    assert set(chosen) == every - CLUSTER_FAULTS - SERVER_FAULTS | BROKER_FAULTS
    assert resolve_faults(["broker-kill"], managed=False, broker=True) == ([Fault.BROKER_KILL], [])
    with pytest.raises(click.UsageError, match="--via broker"):
        resolve_faults(["broker-kill", "kill"], managed=True)
    assert resolve_faults(["failover", "kill"], managed=True, cluster=True) == ([Fault.FAILOVER, Fault.KILL], [])
    with pytest.raises(click.UsageError, match="--dev-cluster"):
        resolve_faults(["failover"], managed=True)
    with pytest.raises(click.UsageError, match="crashes its primary instead"):
        resolve_faults(["restart-crash"], managed=True, cluster=True)
    with pytest.raises(click.UsageError, match="ONCELOG_DATABASE_URL"):
        resolve_faults(["restart-fast"], managed=False)


def test_a_client_spec_round_trips_as_json() -> None:
    """The runner hands it to the client process on stdin (tests/acceptance/test_secrets.py checks the spawn)."""
    spec = ClientSpec(
        role=Role.COPIER,
        name="copy1",
        identity="verify-x-copy1",
        incarnation=1,
        url="postgresql://u@127.0.0.1:1/db",
        schema="oncelog",
        history="/tmp/copy1.jsonl",
        seed=3,
        partitions=2,
        read_topics=("a", "b"),
        group="g",
    )
    assert ClientSpec.from_json(spec.to_json()) == spec
    again = spec.incarnate("copy1.r2", 2, Path("/tmp/copy1.r2.jsonl"))
    assert (again.name, again.incarnation, again.identity, again.role) == ("copy1.r2", 2, spec.identity, Role.COPIER)


def test_the_proxy_follows_a_server_that_moved(server_url: str) -> None:
    """A restarted server may come back on another port: new connections follow it."""
    url = make_url(server_url)
    assert url.host is not None and url.port is not None
    with FaultProxy(url.host, _free_port(), allow_remote=True) as proxy:
        # psycopg takes a libpq URL: no SQLAlchemy driver suffix (ONCELOG_DATABASE_URL's has one).
        through = proxy.url_for(url.set(drivername="postgresql").render_as_string(hide_password=False))
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(through, connect_timeout=10).close()
        proxy.set_upstream(url.host, url.port)
        assert proxy.upstream == (url.host, url.port)
        with psycopg.connect(through, connect_timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy("127.0.0.1", 1).set_upstream("db.example.com", 5432)
    FaultProxy("db.example.com", 5432, allow_remote=True).close()  # a user's remote server: allowed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_BLOCKED_CLIENT = """
import signal, threading
from oncelog.verify import workloads
workloads.stop_when_told(grace=0.5)
# SIGTERM now reaches the watcher thread only, as when the kernel picks a thread other than the
# main one; the main thread waits where no Python-level handler can run.
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
print("ready", flush=True)
threading.Event().wait()
"""


def test_a_client_whose_main_thread_is_blocked_still_stops_at_its_grace() -> None:
    """SIGTERM starts a client's grace at once, even when the main thread cannot run the signal's
    Python handler (it waits on a lock or inside librdkafka while another thread takes the
    signal): the client ends with status 3 after its grace, before the runner's SIGKILL."""
    with subprocess.Popen([sys.executable, "-c", _BLOCKED_CLIENT], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            proc.terminate()
            assert proc.wait(timeout=20) == 3
        finally:
            proc.kill()


_GIL_HOLDING_CLIENT = """
import ctypes, signal, time
from oncelog.verify import workloads
workloads.stop_when_told(grace=0.5)
print("ready", flush=True)
workloads._STOP.wait()
while signal.getitimer(signal.ITIMER_REAL)[0] == 0:  # until the watcher took the stop
    time.sleep(0.01)
# From here no Python thread runs again, as in the interpreter's exit (which stops daemon threads
# for good) or a C call made with the interpreter lock held: ctypes.PyDLL keeps it through sleep.
ctypes.PyDLL(None).sleep(600)
"""


def test_a_stopped_client_the_interpreter_cannot_end_is_ended_by_the_kernel() -> None:
    """A client told to stop whose interpreter then runs no thread again (its exit stops daemon
    threads for good; here its main thread holds the interpreter lock inside a C call) still ends
    soon after its grace, by SIGALRM, before the runner's SIGKILL: the watcher cannot end it.
    Its threads' stacks are in its log first."""
    with subprocess.Popen(
        [sys.executable, "-c", _GIL_HOLDING_CLIENT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            proc.terminate()
            assert proc.wait(timeout=20) == -signal.SIGALRM
            assert proc.stderr is not None and "in <module>" in proc.stderr.read(), "no stacks before the end"
        finally:
            proc.kill()


_HANGING_AT_EXIT = """
import logging, threading
from oncelog.verify import workloads
class Handle:
    def __del__(self) -> None:  # as rd_kafka_destroy that never returns, at the interpreter's exit
        threading.Event().wait()
handle = Handle()
logging.getLogger("client").warning("written before the end")
workloads.end_process(0)
"""


def test_a_client_ends_without_destroying_what_it_still_holds() -> None:
    """A client process ends with its status once its work is written, without the interpreter's
    exit, which would destroy what it still holds (a librdkafka handle whose destroy can wait for
    good) after its stop's watcher can no longer run. What it logged is written first."""
    with subprocess.Popen([sys.executable, "-c", _HANGING_AT_EXIT], stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.wait(timeout=20) == 0
            assert proc.stderr is not None and "written before the end" in proc.stderr.read()
        finally:
            proc.kill()


def test_a_client_killed_at_stop_leaves_its_threads_stacks_in_its_log() -> None:
    """A client that overran its stop is asked for its threads' stacks (SIGUSR1, written from C
    even while a thread holds the interpreter lock) before the runner's SIGKILL: the log says
    where it was stuck. Here its grace is far away and its main thread waits for good."""
    script = _BLOCKED_CLIENT.replace("grace=0.5", "grace=600")
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
            kill_with_stacks(proc)
            assert proc.returncode == -signal.SIGKILL
            assert proc.stderr is not None
            stacks = proc.stderr.read().decode()
            assert "most recent call first" in stacks and "in wait" in stacks, stacks
        finally:
            proc.kill()


class _NoClients:
    """The nemesis's view of the client processes, for a plan that touches none."""

    def running(self) -> list[str]:
        return []

    def kill(self, name: str) -> bool:
        raise AssertionError(f"the plan kills no client ({name})")

    def pause(self, name: str) -> bool:
        raise AssertionError(f"the plan pauses no client ({name})")

    def heal(self) -> list[str]:
        return []


@pytest.mark.parametrize("fault", [Fault.CUT_BEFORE, Fault.CUT_AFTER])
def test_a_cut_window_stays_open_until_its_first_cut(server_url: str, fault: Fault) -> None:
    """A cut window whose clients send nothing while it is planned (they are reconnecting to a
    broker that was just killed) waits for the first query to cut, instead of ending with nothing
    fired: every window must test what it names."""
    url = make_url(server_url)
    assert url.host is not None and url.port is not None
    with FaultProxy(url.host, url.port, allow_remote=True) as proxy:
        through = proxy.url_for(url.set(drivername="postgresql").render_as_string(hide_password=False))
        conn = psycopg.connect(through, connect_timeout=10, autocommit=True)
        window = FaultWindow(fault, at=0.0, duration=0.2, pick=0)
        nemesis = Nemesis([window], proxy=proxy, clients=_NoClients())
        events = []
        runner = threading.Thread(target=lambda: events.extend(nemesis.run(threading.Event())))
        runner.start()
        runner.join(1.0)  # five times the window's planned length, and not one query yet
        assert runner.is_alive(), events
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        runner.join(15)
        assert not runner.is_alive()
        conn.close()
    assert [(e.fault, e.fired) for e in events] == [(fault, 1)], events


# --- runs -------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_network_faults_on_every_workload(db_url: str, tmp_path: Path) -> None:
    """Requests cut before the server sees them, replies cut after it committed, and stalls, on
    idempotent and transactional producers, copiers and both kinds of consumers."""
    faults = [Fault.CUT_BEFORE, Fault.CUT_AFTER, Fault.STALL]
    report = verify(config(db_url, tmp_path / "run", faults=faults))
    assert_valid(report, faults)
    assert_every_workload_ran(report)
    cut = report.summary["faults"]
    assert cut["cut-before"]["fired"] + cut["cut-after"]["fired"] >= 2


@pytest.mark.timeout(300)
def test_killed_and_paused_clients_and_a_hanging_transaction(db_url: str, tmp_path: Path) -> None:
    """SIGKILL (a new incarnation takes over), SIGSTOP/SIGCONT, and a transaction left open past
    its timeout that readers must abort to move on."""
    faults = [Fault.KILL, Fault.PAUSE, Fault.HANGING_TXN]
    report = verify(config(db_url, tmp_path / "run", faults=faults, duration=6.0))
    assert_valid(report, faults)
    assert_every_workload_ran(report)
    processes = report.summary["clients"]["processes"]
    assert any(".r2" in name for name in processes), processes  # the killed one came back renamed
    hung = [op for op in report.history if op.process.startswith("hang") and op.f == "txn"]
    assert [op.type for op in hung][:2] == [OpType.INVOKE, OpType.FAIL], hung


@pytest.fixture
def private_server() -> Iterator[EmbeddedPostgres]:
    """A durable embedded server of this test's own, which the nemesis may crash and restart
    (fsync on: an immediate shutdown must not lose an acknowledged commit)."""
    # Not under pytest's tmp folder: under root that folder is closed to the postgres user.
    server = EmbeddedPostgres(tempfile.mkdtemp(prefix="oncelog-verify-"), durable=True)
    try:
        url = server.start()
    except ServerBinariesNotFoundError as exc:
        pytest.skip(str(exc))
    engine = create_engine(url)
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    yield server
    server.destroy()
    shutil.rmtree(server.data_dir, ignore_errors=True)


@pytest.mark.timeout(300)
def test_server_crash_and_fast_restarts(private_server: EmbeddedPostgres, tmp_path: Path) -> None:
    """The server stopped with an immediate shutdown (crash recovery at start) and with a fast
    shutdown, under every workload."""
    faults = [Fault.RESTART_CRASH, Fault.RESTART_FAST]
    report = verify(config(private_server.url(), tmp_path / "run", faults=faults, server=private_server))
    assert_valid(report, faults)
    assert_every_workload_ran(report)
    assert private_server.status().running


@pytest.mark.timeout(300)
def test_consumers_alone_bring_transactional_writers(db_url: str, tmp_path: Path) -> None:
    report = verify(config(db_url, tmp_path / "run", workloads=[Workload.CONSUMERS], faults=[Fault.STALL]))
    assert_valid(report, [Fault.STALL])
    assert set(report.info.topics) == {"transactional"}
    s = report.verdict.summary
    assert s["ops.txn.ok"] > 0 and s["reads.read_committed"] > 0 and s["reads.read_uncommitted"] > 0, s


def test_bad_configurations_are_refused(db_url: str, tmp_path: Path) -> None:
    # Server restarts need a server the runner manages.
    with pytest.raises(ConfigurationError, match="restart"):
        verify(config(db_url, tmp_path / "run", faults=[Fault.RESTART_CRASH]))
    # Killing the broker where the clients speak to none.
    with pytest.raises(ConfigurationError, match="--via broker"):
        verify(config(db_url, tmp_path / "run", faults=[Fault.BROKER_KILL]))
    # The history files of two runs must never mix.
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "history.jsonl").write_text("")
    with pytest.raises(ConfigurationError, match="not empty"):
        verify(config(db_url, tmp_path / "used"))


@pytest.mark.timeout(300)
def test_kafka_clients_through_the_broker(db_url: str, tmp_path: Path) -> None:
    """--via broker: librdkafka's idempotent and transactional producers, copiers in a consumer
    group and read_committed/read_uncommitted consumers speak Kafka to an `oncelog broker` that
    reaches PostgreSQL through the fault proxy; clients are killed, replies cut after the commit,
    and the broker itself killed and started again. The same checker must find nothing, and must
    find what is taken out of the same history afterwards."""
    faults = [Fault.KILL, Fault.CUT_AFTER, Fault.BROKER_KILL]
    report = verify(config(db_url, tmp_path / "run", faults=faults, duration=6.0, via=Via.BROKER))
    assert_valid(report, faults)
    assert_every_workload_ran(report)
    assert report.summary["via"] == "broker"
    assert report.summary["broker"]["starts"] >= 2 and report.summary["broker"]["crashes"] == []
    # Each client completed its operation and stopped when told to (3: it overran its grace).
    exits = report.summary["clients"]["exit_at_stop"]
    assert set(exits.values()) == {0}, _logs_of(tmp_path / "run" / "logs", [n for n, s in exits.items() if s != 0])
    # The clients were librdkafka's: its log lines (the broker's restarts make it log) name them.
    logs = tmp_path / "run" / "logs"
    assert "#producer-" in (logs / "idem1.log").read_text(errors="replace")
    assert "#consumer-" in (logs / "rc1.log").read_text(errors="replace")

    # The history holds what the Kafka clients were told, precisely enough to judge: an
    # acknowledged record taken out of the final log is lost, a record taken out of what a
    # read_committed consumer was returned is a gap.
    ops = list(report.history)
    final = next(op for op in ops if op.f == "final")
    acked = {
        (w.topic, w.partition, w.offset) for op in ops if op.f == "send" and op.type is OpType.OK for w in op.writes
    }
    gone = next(e for e in final.log if (e.topic, e.partition, e.offset) in acked)
    without = dataclasses.replace(final, log=tuple(e for e in final.log if e is not gone))
    assert "lost_write" in check(History(without if op is final else op for op in ops)).by_kind()
    poll = next(op for op in ops if op.process.startswith("rc") and op.type is OpType.OK and len(op.reads) >= 2)
    skipped = dataclasses.replace(poll, reads=poll.reads[1:])
    assert "offset_gap" in check(History(skipped if op is poll else op for op in ops)).by_kind()


# --- a broken environment ------------------------------------------------------------------------


def delete_one_record(url: str, topic: str) -> tuple[int, int] | None:
    """As the table owner, delete the first data record of ``topic``: the kind of damage the
    checker exists to catch. Returns its (partition, offset), None if there was none yet."""
    engine = create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.begin() as conn:
            row = conn.execute(
                sa.text(
                    'DELETE FROM records WHERE (topic_id, partition, "offset") = ('
                    ' SELECT r.topic_id, r.partition, r."offset" FROM records r JOIN topics t USING (topic_id)'
                    ' WHERE t.name = :topic AND r.control_type IS NULL ORDER BY r."offset", r.partition LIMIT 1)'
                    ' RETURNING partition, "offset"'
                ),
                {"topic": topic},
            ).one_or_none()
    finally:
        engine.dispose()
    return None if row is None else (int(row[0]), int(row[1]))


@pytest.mark.timeout(300)
def test_a_deleted_record_makes_the_verdict_invalid(db_url: str, tmp_path: Path) -> None:
    deleted: list[tuple[int, int] | None] = []

    def damage(info: RunInfo) -> None:
        deleted.append(delete_one_record(info.database_url, info.topics["idempotent"]))

    report = verify(
        config(
            db_url,
            tmp_path / "run",
            workloads=[Workload.IDEMPOTENT, Workload.CONSUMERS],
            duration=1.0,
            before_final=damage,
        )
    )
    assert deleted and deleted[0] is not None
    assert not report.verdict.ok
    assert "lost_write" in report.verdict.by_kind(), report.verdict.by_kind()
    assert json.loads((tmp_path / "run" / "verdict.json").read_text())["valid"] is False


# --- the command ---------------------------------------------------------------------------------


def oncelog(*args: str, url: str | None = None, dev_db_dir: str | None = None) -> subprocess.Popen[str]:
    """``oncelog verify ARGS`` as a user runs it, on the server of ``url`` or the embedded default."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCELOG_")}
    if url is not None:
        env["ONCELOG_DATABASE_URL"] = url
    if dev_db_dir is not None:
        env["ONCELOG_DEV_DB_DIR"] = dev_db_dir
    return subprocess.Popen(
        [sys.executable, "-m", "oncelog", "verify", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.timeout(300)
def test_the_command_end_to_end(db_url: str, tmp_path: Path) -> None:
    """Every workload and every fault the deployment allows (a database URL: no restarts), JSON out."""
    proc = oncelog("--duration", "2", "--clients", "1", "--seed", "5", "--output", str(tmp_path), "--json", url=db_url)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["verdict"]["valid"] is True, result["verdict"]["anomalies"][:5]
    assert "skipping restart-crash, restart-fast" in " ".join(err.split())
    allowed = {str(f) for f in Fault if f not in SERVER_FAULTS | CLUSTER_FAULTS | BROKER_FAULTS}
    assert set(result["run"]["faults_selected"]) == allowed
    assert {f for f, counts in result["run"]["faults"].items() if counts["fired"] >= 1} == allowed
    assert set(result["run"]["workloads"]) == {str(w) for w in Workload}
    assert (tmp_path / "history.jsonl").stat().st_size > 0
    assert json.loads((tmp_path / "summary.json").read_text())["run_id"] == result["run"]["run_id"]


@pytest.mark.timeout(300)
def test_the_command_through_the_broker(db_url: str, tmp_path: Path) -> None:
    """--via broker from the command line; killing the broker without it is a usage error."""
    refused = oncelog("--fault", "broker-kill", "--duration", "1", "--output", str(tmp_path / "no"), url=db_url)
    _, err = refused.communicate(timeout=60)
    assert refused.returncode == 2 and "--via broker" in err, err
    proc = oncelog(
        "--via", "broker", "--workload", "idempotent", "--workload", "consumers", "--fault", "broker-kill",
        "--duration", "2", "--clients", "1", "--output", str(tmp_path / "run"), "--json", url=db_url,
    )  # fmt: skip
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["verdict"]["valid"] is True, result["verdict"]["anomalies"][:5]
    assert result["run"]["via"] == "broker"
    assert result["run"]["faults"]["broker-kill"]["fired"] >= 1
    assert result["verdict"]["summary"]["ops.send.ok"] > 0


@pytest.mark.timeout(300)
def test_the_command_restarts_the_embedded_default(tmp_path: Path) -> None:
    """Without a database URL the command runs on the embedded cluster it manages, so it may
    crash and restart it."""
    try:
        find_server_binaries()
    except ServerBinariesNotFoundError as exc:
        pytest.skip(str(exc))
    dev_db_dir = tempfile.mkdtemp(prefix="oncelog-verify-dev-")
    try:
        proc = oncelog(
            "--workload", "transactional", "--fault", "restart-crash", "--duration", "1", "--clients", "1",
            "--output", str(tmp_path), "--json", dev_db_dir=dev_db_dir,
        )  # fmt: skip
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        result = json.loads(out)
        assert result["verdict"]["valid"] is True, result["verdict"]["anomalies"][:5]
        assert result["run"]["faults"]["restart-crash"]["fired"] >= 1
        assert EmbeddedPostgres(dev_db_dir).status().running
    finally:
        EmbeddedPostgres(dev_db_dir).destroy()
        shutil.rmtree(dev_db_dir, ignore_errors=True)


def test_the_command_refuses_restarts_on_a_server_it_does_not_manage(tmp_path: Path) -> None:
    proc = oncelog("--fault", "restart-crash", "--output", str(tmp_path), url="postgresql://u@127.0.0.1:1/db")
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "restart-crash restarts the PostgreSQL server" in " ".join(err.split())


@pytest.mark.timeout(300)
def test_the_command_fails_when_the_log_is_tampered_with(db_url: str, tmp_path: Path) -> None:
    """Someone deletes a committed record behind the clients' back: exit status 1, invalid verdict."""
    proc = oncelog(
        "--workload", "idempotent", "--workload", "consumers", "--fault", "none", "--duration", "3",
        "--clients", "1", "--output", str(tmp_path), "--json", url=db_url,
    )  # fmt: skip
    deleted: list[tuple[int, int]] = []
    engine = create_engine(db_url, poolclass=sa.NullPool)

    def tamper() -> None:
        # Once the run's topic holds a few records, delete the first one.
        while proc.poll() is None and not deleted:
            with engine.connect() as conn:
                topic = conn.execute(
                    sa.text(
                        "SELECT t.name FROM topics t JOIN partition_offsets o ON o.topic = t.name "
                        "WHERE t.name LIKE 'verify-%-idempotent' GROUP BY t.name HAVING sum(o.high_watermark) > 20"
                    )
                ).scalar_one_or_none()
            if topic is not None and (where := delete_one_record(db_url, topic)) is not None:
                deleted.append(where)
            threading.Event().wait(0.1)

    thread = threading.Thread(target=tamper, daemon=True)
    thread.start()
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        thread.join(30)
        engine.dispose()
    assert deleted, err
    assert proc.returncode == 1, err
    verdict = json.loads(out)["verdict"]
    assert verdict["valid"] is False
    assert "lost_write" in verdict["counts"], verdict["counts"]


def _logs_of(logs: Path, names: list[str], chars: int = 4000) -> str:
    """The end of each named client's log (where a client killed at stop wrote its threads' stacks)."""
    return "\n".join(
        f"--- {name}.log ---\n{(logs / f'{name}.log').read_text(errors='replace')[-chars:]}" for name in names
    )
