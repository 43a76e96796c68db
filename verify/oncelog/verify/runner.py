"""The runner of ``oncelog verify``: workloads under a nemesis, then the final log, then the checker.

One run, in order:

1. create the run's topics (names unique to the run) directly on the server;
2. start a :class:`~oncelog.verify.proxy.FaultProxy` in front of the server and the client
   processes of the chosen workloads (:mod:`oncelog.verify.workloads`), all connecting through it;
   with ``via`` broker, an ``oncelog broker`` connects through it instead
   (:mod:`oncelog.verify.broker`), and the clients speak Kafka to the broker with Kafka's own
   client (:mod:`oncelog.verify.kafka_clients`);
3. play the nemesis's seeded plan (:mod:`oncelog.verify.faults`) for the configured duration
   (longer if that is what it takes for every chosen fault to fire once), then heal everything;
4. stop the clients (each completes its operation), and let a read_committed consumer of the
   runner read every topic from the start until every transaction is decided and it has reached
   the end (its polls are in the history too);
5. read every partition of every topic of the run directly, data and control records with their
   transactional and aborted flags, and the copier group's committed offsets: the ``final`` op;
6. merge the history files (one per process), run the checker, and write ``history.jsonl``,
   ``verdict.json`` and ``summary.json`` into the output directory.

The runner records its own operations too: the nemesis's windows (process ``nemesis``, one op per
window named after the fault: ``invoke`` when it starts, then ``info`` if it fired, ``fail`` if it
found nothing to hit, with what it did in ``error``), the hanging transactions of the
``hanging-txn`` fault (processes ``hang<n>``), the catch-up reader and the final op.
"""

from __future__ import annotations

import contextlib
import importlib.util
import ipaddress
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from oncelog import errors
from oncelog.admin import Admin
from oncelog.consumer import Consumer
from oncelog.errors import ConfigurationError, OncelogError
from oncelog.producer import Producer
from oncelog.store import create_engine, groups, log
from oncelog.store.engine import DEFAULT_SCHEMA, url_hosts
from oncelog.store.engine import database_url as parse_database_url
from oncelog.types import TopicPartition
from oncelog.verify.broker import BrokerProcess, running_broker
from oncelog.verify.checker import Verdict, check, verdict_to_json
from oncelog.verify.faults import (
    BROKER_FAULTS,
    CLUSTER_FAULTS,
    SERVER_FAULTS,
    FailoverCluster,
    Fault,
    FaultEvent,
    FaultWindow,
    ManagedServer,
    Nemesis,
    plan_faults,
)
from oncelog.verify.history import History, LogEntry, OpType, Read, Write, load_history, tp_key
from oncelog.verify.proxy import FaultProxy
from oncelog.verify.workloads import ClientSpec, Role, Workload, running_clients

__all__ = ["RunConfig", "RunInfo", "RunReport", "Via", "run", "verify"]

_LOG = logging.getLogger(__name__)

#: The transaction timeout of the hanging-txn fault's producer: short, so the fault is quick.
HANG_TIMEOUT_MS = 1000
#: How long the clients get to start (imports, first connection) before the nemesis begins.
_START_TIMEOUT_S = 60.0
#: How long the clients get to complete their operation once told to stop (then SIGKILL).
_STOP_TIMEOUT_S = 30.0


class Via(StrEnum):
    """What the workloads' clients speak (``oncelog verify --via``)."""

    API = "api"
    """oncelog's own client API, to PostgreSQL through the proxy."""
    BROKER = "broker"
    """Kafka's protocol, with Kafka's own client (confluent-kafka), to an ``oncelog broker`` that
    reaches PostgreSQL through the proxy."""


@dataclass(frozen=True)
class RunConfig:
    """What one run does. ``database_url`` is the server as the runner reaches it directly; the
    clients reach it through the proxy. Server faults need ``server``: the runner must manage it."""

    database_url: str = field(repr=False)  # it may hold a password
    output: Path
    workloads: Sequence[Workload] = tuple(Workload)
    faults: Sequence[Fault] = ()
    duration: float = 30.0
    seed: int = 0
    clients: int = 2
    """Processes per role: idempotent and transactional producers, copiers (at least 2, so the
    group has members to move partitions between), and consumers of each isolation level."""
    partitions: int = 3
    schema: str = DEFAULT_SCHEMA
    server: ManagedServer | None = None
    cluster: FailoverCluster | None = None
    """A cluster with failover the runner manages (the failover fault): ``database_url`` is then
    its multi-host URL, and the proxy stands before whichever node is primary."""
    via: Via = Via.API
    """What the clients speak: oncelog's API, or Kafka to an ``oncelog broker`` of the run."""
    txn_timeout_ms: int = 6000
    """The workloads' transaction timeout: above the nemesis's pauses and stalls, so that only a
    genuinely abandoned transaction (a killed client's, the hanging-txn fault's) times out."""
    catch_up_timeout: float = 60.0
    before_final: Callable[[RunInfo], None] | None = None
    """Called after the clients stopped and the reader caught up, right before the final read. A
    test hook: a test may damage the log here to prove the checker notices."""
    progress: Callable[[str], None] | None = None
    """Called with a line of text at each step (the CLI shows it)."""


@dataclass(frozen=True)
class RunInfo:
    """The names a run uses: its topics (by role: ``idempotent``, ``transactional``,
    ``copy-in``, ``copy-out``), its copier group, and where it writes."""

    run_id: str
    topics: Mapping[str, str]
    group: str | None
    database_url: str = field(repr=False)  # it may hold a password
    schema: str
    partitions: int
    output: Path


@dataclass(frozen=True)
class RunReport:
    """Everything a run produced: the merged history, the checker's verdict, and the runner's
    summary (faults planned and fired, client processes, timings), as written to ``summary.json``."""

    info: RunInfo
    history: History
    verdict: Verdict
    summary: dict[str, Any] = field(default_factory=dict)


def run(config: RunConfig) -> tuple[History, Verdict]:
    """Run the workloads under the nemesis and check the history (see the module docstring)."""
    report = verify(config)
    return report.history, report.verdict


def verify(config: RunConfig) -> RunReport:
    """:func:`run`, returning the runner's summary as well."""
    _validate(config)
    started = time.monotonic()
    say = config.progress or (lambda _line: None)
    run_id = uuid.uuid4().hex[:8]
    prefix = f"verify-{run_id}"
    roles = _topic_roles(config.workloads)
    info = RunInfo(
        run_id=run_id,
        topics={role: f"{prefix}-{role}" for role in roles},
        group=f"{prefix}-copiers" if Workload.COPIER in config.workloads else None,
        database_url=config.database_url,
        schema=config.schema,
        partitions=config.partitions,
        output=config.output,
    )
    histories, logs = config.output / "processes", config.output / "logs"
    for folder in (histories, logs):
        folder.mkdir(parents=True, exist_ok=True)

    say(f"run {run_id}: creating topics {', '.join(info.topics.values())}")
    with Admin(config.database_url, schema=config.schema) as admin:
        for topic in info.topics.values():
            admin.create_topic(topic, partitions=config.partitions)

    engine = create_engine(config.database_url, schema=config.schema, poolclass=sa.NullPool)
    # The proxy forwards to one server: on a cluster, the primary of the moment (the nemesis moves
    # it when it fails over); the runner itself follows the primary through the multi-host URL.
    proxied = config.database_url if config.cluster is None else config.cluster.primary_url()
    summary: dict[str, Any] = {}
    try:
        with (
            _proxy_for(proxied) as proxy,
            open(histories / "runner.jsonl", "a", encoding="utf-8") as sink,
            contextlib.ExitStack() as brokers,
        ):
            runner_history = History(sink=sink)
            client_url = _client_url(proxy, proxied)
            broker: BrokerProcess | None = None
            if config.via is Via.BROKER:
                say("starting oncelog broker for the Kafka clients")
                broker = brokers.enter_context(
                    running_broker(client_url, schema=config.schema, log=logs / "broker.log")
                )
            specs = _client_specs(config, info, client_url, None if broker is None else broker.bootstrap)
            plan = plan_faults(config.faults, duration=config.duration, seed=config.seed)
            on_start, on_end = _nemesis_recorder(runner_history, say)
            with running_clients(specs, histories=histories, logs=logs) as pool:
                nemesis = Nemesis(
                    plan,
                    proxy=proxy,
                    clients=pool,
                    server=config.server,
                    cluster=config.cluster,
                    hang=_Hang(config, info, client_url, histories),
                    broker=broker,
                    on_start=on_start,
                    on_end=on_end,
                )
                say(f"started {len(specs)} client processes: {', '.join(s.name for s in specs)}")
                if not pool.wait_started(_START_TIMEOUT_S):
                    say("some clients have not recorded anything yet; starting the nemesis anyway")
                say(f"nemesis: {len(plan)} fault windows, the run lasts at least {config.duration:g}s")
                faults_started = time.monotonic()
                events = nemesis.run(threading.Event())
                remaining = config.duration - (time.monotonic() - faults_started)
                if remaining > 0:
                    time.sleep(remaining)
                say("stopping the clients")
                forced = pool.stop(_STOP_TIMEOUT_S)
            brokers.close()  # after its clients, which complete their operations through it
            caught_up = _catch_up(config, info, engine, runner_history, say)
            if config.before_final is not None:
                config.before_final(info)
            say("reading the final log")
            _final(engine, info, runner_history)
        say("checking the history")
        history = _merge(histories)
        verdict = check(history)
        summary = {
            "run_id": run_id,
            "seed": config.seed,
            "workloads": [str(w) for w in config.workloads],
            "via": str(config.via),
            "faults_selected": [str(f) for f in config.faults],
            "duration_s": config.duration,
            "elapsed_s": round(time.monotonic() - started, 3),
            "topics": dict(info.topics),
            "group": info.group,
            "faults": nemesis.summary(),
            "fault_events": [_event_json(e) for e in events],
            "clients": {
                "processes": list(pool.incarnations),
                "crashes": [{"name": c.name, "returncode": c.returncode, "log_tail": c.log_tail} for c in pool.crashes],
                "killed_at_stop": forced,
                "exit_at_stop": pool.exit_at_stop,
            },
            "broker": None if broker is None else {"starts": broker.starts, "crashes": broker.crashes},
            "caught_up": caught_up,
            "valid": verdict.ok,
            "output": str(config.output),
        }
        history.dump(config.output / "history.jsonl")
        (config.output / "verdict.json").write_text(json.dumps(verdict_to_json(verdict), indent=2) + "\n")
        (config.output / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    finally:
        engine.dispose()
    return RunReport(info, history, verdict, summary)


# --- setup ----------------------------------------------------------------------------------------


def _validate(config: RunConfig) -> None:
    if not config.workloads:
        raise ConfigurationError("choose at least one workload")
    if config.clients < 1 or config.partitions < 1:
        raise ConfigurationError("clients and partitions must be at least 1")
    if config.duration < 0:
        raise ConfigurationError("the duration must not be negative")
    if config.output.exists() and any(config.output.iterdir()):
        # The history files of two runs must never mix.
        raise ConfigurationError(f"the output directory {config.output} is not empty; choose a new one")
    server_faults = sorted(str(f) for f in set(config.faults) & SERVER_FAULTS)
    if server_faults and config.server is None:
        raise ConfigurationError(
            f"faults {', '.join(server_faults)} restart the PostgreSQL server, which only works on a "
            "server the runner manages (the embedded one)"
        )
    _validate_cluster(config)
    _validate_broker(config)


def _validate_broker(config: RunConfig) -> None:
    if set(config.faults) & BROKER_FAULTS and config.via is not Via.BROKER:
        raise ConfigurationError("the broker-kill fault kills the run's oncelog broker: run with --via broker")
    if config.via is Via.BROKER:
        missing = [m for m in ("confluent_kafka", "kafka") if importlib.util.find_spec(m) is None]
        if missing:
            raise ConfigurationError(
                f"--via broker needs {' and '.join(missing)} (Kafka's client and the broker's codec): "
                "pip install 'oncelog-verify[broker]'"
            )


def _validate_cluster(config: RunConfig) -> None:
    if set(config.faults) & CLUSTER_FAULTS and config.cluster is None:
        raise ConfigurationError(
            "the failover fault crashes the primary of a cluster the runner manages: run with --dev-cluster"
        )


def _topic_roles(workloads: Sequence[Workload]) -> list[str]:
    chosen = set(workloads)
    roles = []
    if Workload.IDEMPOTENT in chosen:
        roles.append("idempotent")
    if Workload.TRANSACTIONAL in chosen or chosen == {Workload.CONSUMERS}:
        # Consumers alone need something to read: the transactional writers come along.
        roles.append("transactional")
    if Workload.COPIER in chosen:
        roles += ["copy-in", "copy-out"]
    return roles


def _client_specs(config: RunConfig, info: RunInfo, url: str, bootstrap: str | None) -> list[ClientSpec]:
    prefix = f"verify-{info.run_id}"
    n = config.clients

    def spec(role: Role, name: str, **values: Any) -> ClientSpec:
        return ClientSpec(
            role=role,
            name=name,
            identity=f"{prefix}-{name}",
            incarnation=1,
            url=url,
            schema=config.schema,
            history="",
            seed=config.seed,
            partitions=config.partitions,
            txn_timeout_ms=config.txn_timeout_ms,
            bootstrap=bootstrap,
            **values,
        )

    topics = info.topics
    specs: list[ClientSpec] = []
    if "idempotent" in topics:
        specs += [spec(Role.IDEMPOTENT, f"idem{i}", write_topic=topics["idempotent"]) for i in range(1, n + 1)]
    if "transactional" in topics:
        specs += [spec(Role.TRANSACTIONAL, f"txn{i}", write_topic=topics["transactional"]) for i in range(1, n + 1)]
    if "copy-in" in topics:
        specs.append(spec(Role.TRANSACTIONAL, "feed1", write_topic=topics["copy-in"]))
        specs += [
            spec(
                Role.COPIER,
                f"copy{i}",
                write_topic=topics["copy-out"],
                read_topics=(topics["copy-in"],),
                group=info.group,
                max_poll_records=20,
            )
            for i in range(1, max(2, n) + 1)
        ]
    if Workload.CONSUMERS in config.workloads:
        everything = tuple(topics.values())
        for i in range(1, n + 1):
            specs.append(spec(Role.CONSUMER, f"rc{i}", read_topics=everything, isolation="read_committed"))
            specs.append(spec(Role.CONSUMER, f"ru{i}", read_topics=everything, isolation="read_uncommitted"))
    return specs


def _proxy_for(database_url: str) -> FaultProxy:
    hosts = url_hosts(parse_database_url(database_url))
    if len(hosts) > 1:
        raise ConfigurationError(
            "oncelog verify stands its fault proxy before one server: give the primary's address alone"
        )
    if not hosts or hosts[0][0].startswith("/"):
        raise ConfigurationError("oncelog verify needs the server's TCP address (host and port) in the database URL")
    host, port = hosts[0]
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return FaultProxy(host, port or 5432, allow_remote=not loopback).start()


def _client_url(proxy: FaultProxy, database_url: str) -> str:
    """The URL the clients use: the proxy's address. Without TLS the proxy sees message
    boundaries and its reply cut is exact, so TLS is turned off on the loopback (never on the way
    to a remote server, where the user's setting stands)."""
    url = proxy.url_for(database_url)
    host = make_url(database_url).host
    if "sslmode=" not in url and host in ("127.0.0.1", "localhost", "::1"):
        url += ("&" if "?" in url else "?") + "sslmode=disable"
    return url


# --- the fault phase ------------------------------------------------------------------------------


def _nemesis_recorder(
    history: History, say: Callable[[str], None]
) -> tuple[Callable[[FaultWindow], None], Callable[[FaultEvent], None]]:
    """Callbacks recording each window as an op of process ``nemesis``: invoke as it starts,
    ``info`` (it fired) or ``fail`` (nothing to hit) as it ends, with what it did in ``error``."""

    def started(window: FaultWindow) -> None:
        history.append("nemesis", OpType.INVOKE, str(window.fault))

    def ended(event: FaultEvent) -> None:
        history.append("nemesis", OpType.INFO if event.fired else OpType.FAIL, str(event.fault), error=event.detail)
        say(f"fault {event.fault}: {event.detail}")

    return started, ended


class _Hang:
    """The hanging-txn fault: a transactional producer with a short timeout writes to a topic of
    the run, flushes, stays silent past its timeout, then tries to commit (which the store must
    refuse) and aborts. Its transactions are ``txn`` ops of processes ``hang<n>``."""

    def __init__(self, config: RunConfig, info: RunInfo, client_url: str, histories: Path) -> None:
        self._config = config
        self._url = client_url
        self._histories = histories
        self._tid = f"verify-{info.run_id}-hang"
        topics = info.topics
        self._topic = topics.get("transactional") or topics.get("copy-in") or next(iter(topics.values()))
        self._count = 0

    def __call__(self, extra: float, stop: threading.Event) -> str | None:
        """One hanging transaction; a description when the store timed it out."""
        self._count += 1
        name = f"hang{self._count}"
        with (
            open(self._histories / f"{name}.jsonl", "a", encoding="utf-8") as sink,
            Producer(
                self._url,
                schema=self._config.schema,
                transactional_id=self._tid,
                transaction_timeout_ms=HANG_TIMEOUT_MS,
                linger_ms=0,
                delivery_timeout_ms=10_000,
                max_block_ms=10_000,
            ) as producer,
        ):
            history = History(sink=sink)
            txn = f"{self._tid}#{self._count}"
            writes = [Write(self._topic, p, f"{name}:{p + 1}") for p in range(self._config.partitions)]
            invoked = False
            try:
                producer.init_transactions()
                producer.begin_transaction()
                history.append(name, OpType.INVOKE, "txn", txn=txn, writes=writes)
                invoked = True
                futures = [producer.send(w.topic, w.payload.encode(), partition=w.partition) for w in writes]
                producer.flush()
                # Silent past the timeout: read_committed readers are held back by it until one of
                # them (or this commit) finds it expired and aborts it.
                stop.wait(HANG_TIMEOUT_MS / 1000 + extra)
                try:
                    producer.commit_transaction()
                except (errors.TransactionTimeoutError, errors.InvalidProducerEpochError) as exc:
                    producer.abort_transaction()
                    history.append(name, OpType.FAIL, "txn", txn=txn, writes=writes, error=f"{type(exc).__name__}")
                    who = "the store at commit" if isinstance(exc, errors.TransactionTimeoutError) else "a reader"
                    return f"{name} left {txn} open past its {HANG_TIMEOUT_MS} ms timeout; aborted by {who}"
                acked = [
                    Write(w.topic, w.partition, w.payload, f.result().offset)
                    for w, f in zip(writes, futures, strict=True)
                ]
                history.append(name, OpType.OK, "txn", txn=txn, writes=acked)
                return None
            except OncelogError as exc:
                if invoked:
                    history.append(name, OpType.INFO, "txn", txn=txn, writes=writes, error=f"{type(exc).__name__}")
                _LOG.warning("the hanging transaction failed: %s", exc)
                return None


# --- after the fault phase ------------------------------------------------------------------------


def _catch_up(
    config: RunConfig, info: RunInfo, engine: sa.Engine, history: History, say: Callable[[str], None]
) -> bool:
    """A read_committed consumer reads every topic from offset 0 until every transaction is
    decided (last stable offset = high watermark) and it has reached the end; its polls are ops of
    process ``catchup``. False when it could not within the timeout (the checker then judges what
    it read; the final log shows the undecided records)."""
    say("a read_committed consumer catches up with every topic")
    tps = [TopicPartition(t, p) for t in info.topics.values() for p in range(config.partitions)]
    deadline = time.monotonic() + config.catch_up_timeout
    with Consumer(
        config.database_url, schema=config.schema, max_poll_records=1000, default_api_timeout_ms=10_000
    ) as consumer:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        while True:
            before = {tp: consumer.position(tp) for tp in tps}
            history.append("catchup", OpType.INVOKE, "poll", isolation="read_committed")
            try:
                records = consumer.poll(0.5)
            except OncelogError as exc:
                history.append("catchup", OpType.FAIL, "poll", isolation="read_committed", error=str(exc))
                idle = False  # a failed poll proves nothing about the end
            else:
                history.append(
                    "catchup",
                    OpType.OK,
                    "poll",
                    isolation="read_committed",
                    reads=[Read(r.topic, r.partition, r.offset, bytes(r.value).decode()) for r in records],
                    positions={tp_key(*tp): (before[tp], consumer.position(tp)) for tp in tps},
                )
                idle = not records
            if idle:
                with engine.connect() as conn:
                    bounds = log.stable_bounds(conn, topics=list(info.topics.values()))
                if all(
                    b.last_stable_offset == b.high_watermark
                    and consumer.position(TopicPartition(str(b.topic), b.partition)) >= b.high_watermark
                    for b in bounds
                ):
                    return True
            if time.monotonic() > deadline:
                say("the consumer did not catch up before the timeout")
                return False


def _final(engine: sa.Engine, info: RunInfo, history: History) -> None:
    """The ``final`` op: every record of every topic of the run, and the group's offsets."""
    with engine.connect() as conn:
        records = log.read_log(conn, topics=list(info.topics.values()))
        offsets: dict[str, int] = {}
        if info.group is not None:
            source = info.topics["copy-in"]
            answers = groups.offset_fetch(
                conn,
                group_id=info.group,
                partitions=[(source, p) for p in range(info.partitions)],
                require_stable=False,
            )
            offsets = {tp_key(*tp): a.offset for tp, a in answers.items() if a.offset is not None}
    entries = [
        LogEntry(
            topic=r.topic,
            partition=r.partition,
            offset=r.offset,
            payload=None if r.control_type is not None or r.value is None else r.value.decode(errors="replace"),
            control=r.control_type,
            transactional=r.is_transactional,
            aborted=r.aborted,
            producer_id=r.producer_id,
        )
        for r in records
    ]
    history.append("final", OpType.OK, "final", log=tuple(entries), offsets=offsets)


def _merge(histories: Path) -> History:
    """Every process's history file, merged in real-time order."""
    lines: list[str] = []
    for path in sorted(histories.glob("*.jsonl")):
        lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    return load_history(lines)


def _event_json(event: FaultEvent) -> dict[str, Any]:
    return {"fault": str(event.fault), "fired": event.fired, "detail": event.detail}
