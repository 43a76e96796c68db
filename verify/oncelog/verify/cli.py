"""``oncelog verify``: check the exactly-once promise on this deployment, Jepsen style.

Runs the chosen workloads as client processes talking to the server through a fault-injecting
proxy while a seeded nemesis injects faults, then checks the recorded history against the final
log (:mod:`oncelog.verify`). Prints the verdict, a summary and the anomalies; exits 1 on any
anomaly. Server restarts need a server oncelog manages: the embedded default.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from oncelog.cli.context import CliContext
from oncelog.dev_cluster import DevCluster, default_cluster_dir
from oncelog.errors import SchemaNotReadyError
from oncelog.store import migrate
from oncelog.verify import runner
from oncelog.verify.checker import render_verdict, verdict_to_json
from oncelog.verify.faults import BROKER_FAULTS, CLUSTER_FAULTS, SERVER_FAULTS, Fault
from oncelog.verify.runner import Via
from oncelog.verify.workloads import Workload

_NONE = "none"


def resolve_faults(
    names: Sequence[str], *, managed: bool, cluster: bool = False, broker: bool = False
) -> tuple[list[Fault], list[Fault]]:
    """The faults to inject and the ones skipped, from the ``--fault`` values (none: every fault
    the deployment allows). Server restarts need the embedded server (``managed``), a failover
    the dev cluster (``cluster``), killing the broker a run through one (``broker``); asked for
    explicitly elsewhere, they are a usage error."""
    if _NONE in names:
        if len(set(names)) > 1:
            raise click.UsageError("--fault none cannot be combined with other faults")
        return [], []

    def allowed(fault: Fault) -> bool:
        if fault in SERVER_FAULTS:
            return managed and not cluster
        if fault in BROKER_FAULTS:
            return broker
        return cluster or fault not in CLUSTER_FAULTS

    if not names:
        chosen = [f for f in Fault if allowed(f)]
        return chosen, [f for f in Fault if f not in chosen]
    chosen = [Fault(n) for n in dict.fromkeys(names)]
    if any(f in BROKER_FAULTS for f in chosen if not allowed(f)):
        raise click.UsageError("--fault broker-kill kills the broker the clients speak Kafka to: run with --via broker")
    refused = [str(f) for f in chosen if not allowed(f)]
    if refused and cluster:
        raise click.UsageError(
            f"--fault {', '.join(refused)} restarts one server; "
            "on the dev cluster, --fault failover crashes its primary instead"
        )
    if any(f in CLUSTER_FAULTS for f in chosen if not allowed(f)):
        raise click.UsageError("--fault failover crashes the primary of the dev cluster: run with --dev-cluster")
    if refused:
        raise click.UsageError(
            f"--fault {', '.join(refused)} restarts the PostgreSQL server, which oncelog can only do for the "
            "embedded server it manages; this run uses the server of ONCELOG_DATABASE_URL (--database-url). "
            "Choose other faults, or run without a database URL."
        )
    return chosen, []


@click.command()
@click.option(
    "--workload",
    "workloads",
    multiple=True,
    type=click.Choice([str(w) for w in Workload]),
    help="A workload to run (repeatable; default: all).",
)
@click.option(
    "--fault",
    "faults",
    multiple=True,
    type=click.Choice([str(f) for f in Fault] + [_NONE]),
    help="A fault to inject (repeatable; default: every fault the deployment allows; 'none' for none).",
)
@click.option(
    "--duration",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds the workloads run under faults (longer if needed for every chosen fault to fire once).",
)
@click.option("--seed", default=None, type=int, help="Seed of the fault plan and the workloads (default: random).")
@click.option("--clients", default=2, show_default=True, type=click.IntRange(min=1), help="Client processes per role.")
@click.option(
    "--output",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="A new directory for the history, the verdict and the client logs (default: ./oncelog-verify/<time>-<seed>).",
)
@click.option(
    "--dev-cluster",
    "dev_cluster",
    is_flag=True,
    help="Run on `oncelog dev-cluster` (started and migrated if needed; its folder from ONCELOG_DEV_CLUSTER_DIR), "
    "with the failover fault: crash the primary, follow the promotion.",
)
@click.option(
    "--via",
    type=click.Choice([str(v) for v in Via]),
    default=str(Via.API),
    show_default=True,
    help="What the clients speak: oncelog's API, or Kafka's protocol with Kafka's own client (confluent-kafka) "
    "to an `oncelog broker` the run starts (adds the broker-kill fault).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict and the run summary as JSON.")
@click.pass_context
def verify(
    ctx: click.Context,
    *,
    workloads: tuple[str, ...],
    faults: tuple[str, ...],
    duration: float,
    seed: int | None,
    clients: int,
    output: Path | None,
    dev_cluster: bool,
    via: str,
    as_json: bool,
) -> None:
    """Check exactly-once semantics on this deployment under faults (exit status 1 on any anomaly)."""
    obj: CliContext = ctx.obj
    if dev_cluster and obj.database_url is not None:
        raise click.UsageError("--dev-cluster runs on the dev cluster: give no database URL with it")
    managed = obj.database_url is None
    through_broker = Via(via) is Via.BROKER
    chosen, skipped = resolve_faults(faults, managed=managed, cluster=dev_cluster, broker=through_broker)
    # With --json, stdout holds the JSON only; progress goes to stderr.
    console = Console(stderr=as_json)
    for group, why in (
        (
            [f for f in skipped if f not in BROKER_FAULTS],
            "the dev cluster fails over instead of restarting one server"
            if dev_cluster
            else "they need the dev cluster (--dev-cluster) or the embedded server, which oncelog manages",
        ),
        ([f for f in skipped if f in BROKER_FAULTS], "the clients speak Kafka to a broker only with --via broker"),
    ):
        if group:
            console.print(f"skipping {', '.join(str(f) for f in group)}: {why}", soft_wrap=True)
    seed = secrets.randbelow(2**31) if seed is None else seed
    output = output or Path("oncelog-verify") / f"{time.strftime('%Y%m%d-%H%M%S')}-{seed}"
    output.mkdir(parents=True, exist_ok=True)
    cluster = None
    if dev_cluster:
        folder = os.environ.get("ONCELOG_DEV_CLUSTER_DIR") or default_cluster_dir(obj.xdg_data_home)
        cluster = DevCluster(folder, bin_dir=obj.pg_bin_dir)
        with console.status("starting the dev cluster..."):
            obj.database_url = cluster.start()
            migrate.upgrade(obj.engine(migrated=False), schema=obj.schema)
    with console.status("starting the database..."):
        at, want = migrate.current(obj.engine(), schema=obj.schema), migrate.head()
        url = obj.url()
    if at != want:
        raise SchemaNotReadyError(
            f"schema {obj.schema!r} is at revision {at or 'none'}, oncelog needs {want}: run `oncelog db upgrade`"
        )
    config = runner.RunConfig(
        database_url=url,
        output=output,
        workloads=[Workload(w) for w in dict.fromkeys(workloads)] or list(Workload),
        faults=chosen,
        duration=duration,
        seed=seed,
        clients=clients,
        schema=obj.schema,
        server=obj.embedded if managed and cluster is None else None,
        cluster=cluster,
        via=Via(via),
        progress=lambda line: console.print(f"[dim]{escape(line)}[/]", soft_wrap=True),
    )
    console.print(
        f"[bold]oncelog verify[/]: workloads {', '.join(str(w) for w in config.workloads)} via {via}; "
        f"faults {', '.join(str(f) for f in chosen) or 'none'}; seed {seed}; output {output}",
        soft_wrap=True,
    )
    with _duration_bar(console, duration, shown=console.is_terminal and not as_json):
        report = runner.verify(config)
    if as_json:
        click.echo(json.dumps({"verdict": verdict_to_json(report.verdict), "run": report.summary}, indent=2))
    else:
        _render_run(report.summary, console)
        render_verdict(report.verdict, console)
        console.print(f"history, verdict and client logs: {output}")
    if not report.verdict.ok:
        ctx.exit(1)


@contextmanager
def _duration_bar(console: Console, duration: float, *, shown: bool) -> Iterator[None]:
    """A bar of the run's planned duration, on a terminal only (never with --json): the faults and
    workloads run for ``duration`` seconds, then the history is checked (the bar then stays full)."""
    if not shown:
        yield
        return
    bar = Progress(TextColumn("[bold]verifying"), BarColumn(), TimeElapsedColumn(), console=console, transient=True)
    stop = threading.Event()
    with bar:
        task = bar.add_task("verifying", total=duration)
        started = time.monotonic()

        def tick() -> None:
            while not stop.wait(0.5):
                bar.update(task, completed=min(time.monotonic() - started, duration))

        ticker = threading.Thread(target=tick, name="oncelog-verify-bar", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()


def _render_run(summary: dict[str, object], console: Console) -> None:
    faults = summary.get("faults")
    if isinstance(faults, dict) and faults:
        table = Table(title="Faults injected")
        table.add_column("fault")
        table.add_column("windows", justify="right")
        table.add_column("fired", justify="right")
        for name, counts in sorted(faults.items()):
            table.add_row(escape(str(name)), str(counts.get("windows", 0)), str(counts.get("fired", 0)))
        console.print(table)
    clients = summary.get("clients")
    crashes = clients.get("crashes") if isinstance(clients, dict) else None
    if crashes:
        console.print(f"[yellow]{len(crashes)} client process(es) exited on their own and were restarted[/]")
        for crash in crashes:
            console.print(f"  {escape(str(crash.get('name')))}: exit {crash.get('returncode')}")
    broker = summary.get("broker")
    if isinstance(broker, dict) and broker.get("crashes"):
        console.print(f"[yellow]oncelog broker exited on its own {len(broker['crashes'])} time(s) and was restarted[/]")
    if summary.get("caught_up") is False:
        console.print("[yellow]the final read_committed consumer did not reach the end of every topic in time[/]")
