"""``oncelog dev-cluster``: three PostgreSQL nodes with synchronous replication and automatic
failover on the loopback (:mod:`oncelog.dev_cluster`)."""

from __future__ import annotations

import click

from oncelog.cli.render import json_option, print_json, print_stopped
from oncelog.dev_cluster import NODES, DevCluster, default_cluster_dir

_WHERE = (
    "The cluster's folder is --dir (oncelog dev-cluster --dir DIR ...) or ONCELOG_DEV_CLUSTER_DIR; by default "
    "/var/lib/oncelog/dev-cluster under root, else ~/.local/share/oncelog/dev-cluster."
)


@click.group(
    "dev-cluster",
    help="Three PostgreSQL nodes on the loopback: a primary, two synchronous standbys (ANY 1) and automatic "
    f"failover by pg_auto_failover. Point clients at `oncelog dev-cluster url`. {_WHERE}",
)
@click.option(
    "--dir",
    "cluster_dir",
    envvar="ONCELOG_DEV_CLUSTER_DIR",
    default=None,
    type=click.Path(file_okay=False),
    help="The cluster's folder [env ONCELOG_DEV_CLUSTER_DIR].",
)
@click.pass_context
def dev_cluster(ctx: click.Context, cluster_dir: str | None) -> None:
    """Start, stop and locate the development cluster."""
    folder = cluster_dir or default_cluster_dir(ctx.obj.xdg_data_home)
    ctx.meta[_KEY] = DevCluster(folder, bin_dir=ctx.obj.pg_bin_dir)


_KEY = "oncelog.dev_cluster"


def _cluster(ctx: click.Context) -> DevCluster:
    cluster: DevCluster = ctx.meta[_KEY]
    return cluster


@dev_cluster.command(help=f"Create the cluster (the first time) and start it; print its URL. {_WHERE}")
@json_option
@click.pass_context
def start(ctx: click.Context, as_json: bool) -> None:
    """Create the cluster (the first time) and start it; print its URL."""
    _print_url(_cluster(ctx).start(), as_json)


@dev_cluster.command(help=f"Stop every node and the monitor. {_WHERE}")
@click.option("--immediate", is_flag=True, help="Crash-stop the servers (no checkpoint) instead of a fast shutdown.")
@json_option
@click.pass_context
def stop(ctx: click.Context, immediate: bool, as_json: bool) -> None:
    """Stop every node and the monitor."""
    print_stopped(_cluster(ctx).stop("immediate" if immediate else "fast"), as_json=as_json)


@dev_cluster.command(help=f"Print the URL that follows the primary (the cluster must have been started once). {_WHERE}")
@json_option
@click.pass_context
def url(ctx: click.Context, as_json: bool) -> None:
    """Print the URL that follows the primary."""
    _print_url(_cluster(ctx).url(), as_json)


@dev_cluster.command(
    help=f"Show each node's role and state; exit 3 unless a primary and two standbys are in sync. {_WHERE}"
)
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show each node's role and state."""
    st = _cluster(ctx).status()
    if as_json:
        print_json({
            "data_directory": str(st.data_dir),
            "initialized": st.initialized,
            "healthy": st.healthy,
            "primary": st.primary,
            "running": list(st.running),
            "nodes": [
                {"name": n.name, "port": n.port, "reported": n.reported, "assigned": n.assigned, "healthy": n.healthy}
                for n in st.nodes
            ],
            "url": st.url,
        })  # fmt: skip
    else:
        click.echo(f"data directory: {st.data_dir}")
        click.echo(f"initialized:    {'yes' if st.initialized else 'no'}")
        for name in NODES:
            node = next((n for n in st.nodes if n.name == name), None)
            running = "running" if name in st.running else "stopped"
            if node is None:
                click.echo(f"{name}:          {running}")
            else:
                state = node.reported if node.settled else f"{node.reported} -> {node.assigned}"
                health = "" if node.healthy else ", unreachable"
                click.echo(f"{name}:          {running}, port {node.port}, {state}{health}")
        if st.url:
            click.echo(f"url:            {st.url}")
    if not st.healthy:
        raise click.exceptions.Exit(3)


@dev_cluster.command(
    help="Crash one node as a power cut would (its keeper and server, frozen then killed); `start` brings it back. "
    + _WHERE
)
@click.argument("node", type=click.Choice(NODES))
@click.pass_context
def kill(ctx: click.Context, node: str) -> None:
    """Crash one node; ``start`` brings it back."""
    _cluster(ctx).kill(node)
    click.echo(f"killed {node}")


@dev_cluster.command(help=f"Stop the cluster and delete its folder. {_WHERE}")
@click.pass_context
def destroy(ctx: click.Context) -> None:
    """Stop the cluster and delete its folder."""
    cluster = _cluster(ctx)
    cluster.destroy()
    click.echo(f"deleted {cluster.data_dir}")


def _print_url(value: str, as_json: bool) -> None:
    if as_json:
        print_json({"url": value})
    else:
        click.echo(value)
