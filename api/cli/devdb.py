"""``oncelog dev-db``: the embedded PostgreSQL cluster."""

from __future__ import annotations

import click

from oncelog.cli.context import CliContext


@click.group("dev-db")
def dev_db() -> None:
    """Start, stop and locate the embedded PostgreSQL cluster."""


@dev_db.command()
@click.pass_obj
def start(obj: CliContext) -> None:
    """Start the embedded cluster (initialising it the first time); print its URL."""
    click.echo(obj.embedded.start())


@dev_db.command()
@click.option("--immediate", is_flag=True, help="Crash-stop (no checkpoint) instead of a fast shutdown.")
@click.pass_obj
def stop(obj: CliContext, immediate: bool) -> None:
    """Stop the embedded cluster."""
    stopped = obj.embedded.stop("immediate" if immediate else "fast")
    click.echo("stopped" if stopped else "not running")


@dev_db.command()
@click.pass_obj
def url(obj: CliContext) -> None:
    """Print the embedded cluster's URL (starting it if needed)."""
    click.echo(obj.embedded.start())


@dev_db.command()
@click.pass_obj
def status(obj: CliContext) -> None:
    """Say whether the embedded cluster runs, where its data lives and its URL; exit 3 if stopped."""
    st = obj.embedded.status()
    click.echo(f"data directory: {st.data_dir}")
    click.echo(f"initialized:    {'yes' if st.initialized else 'no'}")
    click.echo(f"running:        {'yes' if st.running else 'no'}")
    if st.url:
        click.echo(f"url:            {st.url}")
    if not st.running:
        raise click.exceptions.Exit(3)
