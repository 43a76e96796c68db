"""``oncelog dev-db``: the embedded PostgreSQL cluster."""

from __future__ import annotations

import click

from oncelog.cli.context import CliContext
from oncelog.cli.render import json_option, print_json, print_stopped

#: Where the cluster lives, as every command's help says.
_WHERE = (
    "The data directory is --dev-db-dir (before the command: oncelog --dev-db-dir DIR dev-db ...) or "
    "ONCELOG_DEV_DB_DIR; by default /var/lib/oncelog/dev-db under root, else ~/.local/share/oncelog/dev-db."
)


@click.group("dev-db", help=f"Start, stop and locate the embedded PostgreSQL cluster. {_WHERE}")
def dev_db() -> None:
    """Start, stop and locate the embedded PostgreSQL cluster."""


@dev_db.command(help=f"Start the embedded cluster (initialising it the first time); print its URL. {_WHERE}")
@json_option
@click.pass_obj
def start(obj: CliContext, as_json: bool) -> None:
    """Start the embedded cluster (initialising it the first time); print its URL."""
    _url(obj.embedded.start(), as_json)


@dev_db.command(help=f"Stop the embedded cluster. {_WHERE}")
@click.option("--immediate", is_flag=True, help="Crash-stop (no checkpoint) instead of a fast shutdown.")
@json_option
@click.pass_obj
def stop(obj: CliContext, immediate: bool, as_json: bool) -> None:
    """Stop the embedded cluster."""
    print_stopped(obj.embedded.stop("immediate" if immediate else "fast"), as_json=as_json)


@dev_db.command(help=f"Print the embedded cluster's URL (starting it if needed). {_WHERE}")
@json_option
@click.pass_obj
def url(obj: CliContext, as_json: bool) -> None:
    """Print the embedded cluster's URL (starting it if needed)."""
    _url(obj.embedded.start(), as_json)


@dev_db.command(
    help=f"Say whether the embedded cluster runs, where its data lives and its URL; exit 3 if stopped. {_WHERE}"
)
@json_option
@click.pass_obj
def status(obj: CliContext, as_json: bool) -> None:
    """Say whether the embedded cluster runs, where its data lives and its URL; exit 3 if stopped."""
    st = obj.embedded.status()
    if as_json:
        print_json({"data_directory": str(st.data_dir), "initialized": st.initialized, "running": st.running,
                    "url": st.url or None})  # fmt: skip
    else:
        click.echo(f"data directory: {st.data_dir}")
        click.echo(f"initialized:    {'yes' if st.initialized else 'no'}")
        click.echo(f"running:        {'yes' if st.running else 'no'}")
        if st.url:
            click.echo(f"url:            {st.url}")
    if not st.running:
        raise click.exceptions.Exit(3)


def _url(url: str, as_json: bool) -> None:
    if as_json:
        print_json({"url": url})
    else:
        click.echo(url)
