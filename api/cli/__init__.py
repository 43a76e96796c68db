"""The ``oncelog`` command line: the entry point, and the only place that reads the environment.

``ONCELOG_DATABASE_URL`` names the server; without it, commands run on the embedded cluster
(started on demand and migrated). ``ONCELOG_SCHEMA`` and ``ONCELOG_DEV_DB_DIR`` are read here too.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click
import psycopg
import sqlalchemy as sa

from oncelog.cli.acls import acls
from oncelog.cli.capture import capture
from oncelog.cli.clients import consume, produce
from oncelog.cli.context import CliContext
from oncelog.cli.coordinator import coordinator
from oncelog.cli.db import db
from oncelog.cli.demo import demo
from oncelog.cli.devdb import dev_db
from oncelog.cli.groups import groups
from oncelog.cli.spark import spark
from oncelog.cli.topics import producers, topics
from oncelog.cli.txns import txns
from oncelog.errors import ConfigurationError, OncelogError
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.store.errors import translate


class _Commands(click.Group):
    """oncelog's commands, with ``verify`` looked up only when asked for: it comes from the
    optional oncelog-verify distribution, which itself builds on this package's CLI."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), "verify"])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name == "verify":
            return _verify_command()
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--database-url",
    envvar="ONCELOG_DATABASE_URL",
    default=None,
    metavar="URL",
    help="PostgreSQL server to use [env ONCELOG_DATABASE_URL]; default: the embedded cluster.",
)
@click.option(
    "--schema",
    envvar="ONCELOG_SCHEMA",
    default=DEFAULT_SCHEMA,
    show_default=True,
    help="Schema holding oncelog's objects [env ONCELOG_SCHEMA].",
)
@click.option(
    "--dev-db-dir",
    envvar="ONCELOG_DEV_DB_DIR",
    default=None,
    type=click.Path(file_okay=False),
    help="Data directory of the embedded cluster [env ONCELOG_DEV_DB_DIR].",
)
@click.option(
    "--pg-bin-dir",
    envvar="ONCELOG_PG_BIN_DIR",
    default=None,
    type=click.Path(file_okay=False),
    help="Folder with initdb/pg_ctl/postgres for the embedded cluster [env ONCELOG_PG_BIN_DIR]; "
    "default: found on the machine.",
)
@click.version_option(package_name="oncelog")
@click.pass_context
def cli(
    ctx: click.Context, database_url: str | None, schema: str, dev_db_dir: str | None, pg_bin_dir: str | None
) -> None:
    """oncelog: Kafka's exactly-once semantics on PostgreSQL."""
    ctx.obj = CliContext(database_url=database_url or None, schema=schema, dev_db_dir=dev_db_dir, pg_bin_dir=pg_bin_dir)
    ctx.call_on_close(ctx.obj.close)


cli.add_command(db)
cli.add_command(dev_db)
cli.add_command(demo)
cli.add_command(coordinator)
cli.add_command(spark)
cli.add_command(topics)
cli.add_command(producers)
cli.add_command(produce)
cli.add_command(consume)
cli.add_command(txns)
cli.add_command(groups)
cli.add_command(acls)
cli.add_command(capture)


def _verify_command() -> click.Command:
    """``oncelog verify`` from the oncelog-verify distribution, or, when that optional part is
    not installed, a command of the same name that says how to install it."""
    try:
        from oncelog.verify.cli import verify  # noqa: PLC0415 (an optional part: imported only if present)
    except ModuleNotFoundError as exc:
        if exc.name not in ("oncelog.verify", "oncelog.verify.cli"):
            raise
    else:
        return verify

    @click.command(
        name="verify",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
        add_help_option=False,
    )
    def missing() -> None:
        """Check the exactly-once promise under faults (needs the verify extra: pip install 'oncelog[verify]')."""
        raise ConfigurationError(
            "oncelog verify is an optional part that is not installed: pip install 'oncelog[verify]' "
            "(from a checkout: pip install ./verify)"
        )

    return missing


def main() -> None:
    """Run the CLI; oncelog errors become one line on stderr and exit status 1."""
    try:
        rv = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except OncelogError as exc:
        _fail(exc)
    except (sa.exc.DBAPIError, psycopg.Error) as exc:
        mapped = translate(exc)
        if mapped is None:
            raise
        _fail(mapped)
    # With standalone_mode off, click returns the code of an Exit raised by a command.
    sys.exit(rv if isinstance(rv, int) else 0)


def _fail(exc: OncelogError) -> NoReturn:
    click.secho(f"error: {exc}", fg="red", err=True)
    sys.exit(1)
