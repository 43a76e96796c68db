"""The ``oncelog`` command line: the entry point, and the only place that reads the environment.

``ONCELOG_DATABASE_URL`` names the server; without it, commands run on the embedded cluster
(started on demand and migrated). ``ONCELOG_SCHEMA`` and ``ONCELOG_DEV_DB_DIR`` are read here too.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import NoReturn

import click
import psycopg
import sqlalchemy as sa

from oncelog.cli.acls import acls
from oncelog.cli.broker import broker
from oncelog.cli.capture import capture
from oncelog.cli.clients import consume, produce
from oncelog.cli.context import CliContext
from oncelog.cli.coordinator import coordinator
from oncelog.cli.db import db
from oncelog.cli.demo import demo
from oncelog.cli.devcluster import dev_cluster
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
@click.option(
    "--debug",
    is_flag=True,
    envvar="ONCELOG_DEBUG",
    help="On failure, print the whole chain of exceptions with their tracebacks, not just one line.",
)
@click.version_option(package_name="oncelog")
@click.pass_context
def cli(  # noqa: PLR0917 - click passes each option as an argument
    ctx: click.Context,
    database_url: str | None,
    schema: str,
    dev_db_dir: str | None,
    pg_bin_dir: str | None,
    debug: bool,
) -> None:
    """oncelog: Kafka's exactly-once semantics on PostgreSQL."""
    _RUN.debug = debug
    ctx.obj = CliContext(
        database_url=database_url or None,
        schema=schema,
        dev_db_dir=dev_db_dir,
        pg_bin_dir=pg_bin_dir,
        xdg_data_home=os.environ.get("XDG_DATA_HOME"),
    )
    ctx.call_on_close(ctx.obj.close)


class _Run:
    """What main() needs to know of the invocation once click is done with it."""

    debug = False


_RUN = _Run()


cli.add_command(broker)
cli.add_command(db)
cli.add_command(dev_cluster)
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
    """Run the CLI. Any failure is one line on stderr and exit status 1 (``--debug``: the whole
    chain of exceptions with their tracebacks first); an oncelog error is said in its own words,
    anything else with its type."""
    try:
        rv = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        _trace(exc)
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except OncelogError as exc:
        _fail(exc, str(exc))
    except (sa.exc.DBAPIError, psycopg.Error) as exc:
        mapped = translate(exc)
        _fail(exc, str(mapped) if mapped is not None else one_line(exc))
    except Exception as exc:  # the last resort of the entry point: a command's bug, Spark's failure
        _fail(exc, one_line(exc))
    # With standalone_mode off, click returns the code of an Exit raised by a command.
    sys.exit(rv if isinstance(rv, int) else 0)


def one_line(exc: BaseException) -> str:
    """``exc`` said in one line: its type and the first line of its message. A Py4J error (Spark's
    JVM) is said by its Java exception, whose first line names what failed; the Python message
    carries the whole Java stack trace."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _trace(exc: BaseException) -> None:
    if _RUN.debug:
        traceback.print_exception(exc, file=sys.stderr)


def _fail(exc: BaseException, message: str) -> NoReturn:
    _trace(exc)
    hint = "" if _RUN.debug else " (oncelog --debug ... shows the tracebacks)"
    click.secho(f"error: {message}{hint if not isinstance(exc, OncelogError) else ''}", fg="red", err=True)
    sys.exit(1)
