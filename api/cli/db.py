"""``oncelog db``: schema migrations."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from oncelog.cli.context import CliContext
from oncelog.cli.render import json_option, print_json
from oncelog.store import migrate, redact
from oncelog.store.catalog import table_status


@click.group()
def db() -> None:
    """Migrate the oncelog schema (alembic)."""


def _revision(obj: CliContext, at: str | None) -> dict[str, str | None]:
    """The --json answer of a command that names the schema's revision (None: not installed)."""
    return {"schema": obj.schema, "revision": at, "head": migrate.head()}


@db.command()
@click.argument("revision", default="head")
@json_option
@click.pass_obj
def upgrade(obj: CliContext, revision: str, as_json: bool) -> None:
    """Upgrade the schema to REVISION (default: head)."""
    engine = obj.engine(migrated=False)
    migrate.upgrade(engine, schema=obj.schema, revision=revision)
    at = migrate.current(engine, schema=obj.schema)
    if as_json:
        print_json(_revision(obj, at))
    else:
        click.echo(f"schema {obj.schema} at {at}")


@db.command()
@click.argument("revision", default="-1")
@json_option
@click.pass_obj
def downgrade(obj: CliContext, revision: str, as_json: bool) -> None:
    """Downgrade the schema to REVISION (default: one step; 'base' removes everything)."""
    engine = obj.engine(migrated=False)
    migrate.downgrade(engine, schema=obj.schema, revision=revision)
    at = migrate.current(engine, schema=obj.schema)
    if as_json:
        print_json(_revision(obj, at))
    else:
        click.echo(f"schema {obj.schema} at {at or 'base'}")


@db.command()
@json_option
@click.pass_obj
def current(obj: CliContext, as_json: bool) -> None:
    """Print the revision the schema is at ('none' if oncelog is not installed; null with --json)."""
    engine = obj.engine(migrated=False)
    at = migrate.current(engine, schema=obj.schema)
    if as_json:
        print_json(_revision(obj, at))
        return
    head = migrate.head()
    suffix = " (head)" if at == head else f" (head is {head})"
    click.echo(f"{at or 'none'}{suffix}")


@db.command()
@json_option
@click.pass_obj
def check(obj: CliContext, as_json: bool) -> None:
    """Exit non-zero unless the schema is at head and matches the models (no drift)."""
    migrate.check(obj.engine(migrated=False), schema=obj.schema)
    if as_json:
        print_json({**_revision(obj, migrate.head()), "drift": False})
    else:
        click.echo(f"schema {obj.schema} is at head {migrate.head()} with no drift")


@db.command()
@json_option
@click.pass_obj
def status(obj: CliContext, as_json: bool) -> None:
    """Show the database, the revision and every oncelog table with its row count."""
    engine = obj.engine(migrated=False)
    if as_json:
        with engine.connect() as conn:
            tables = [{"table": r.name, "rows": r.rows, "comment": r.comment} for r in table_status(conn)]
        at = migrate.current(engine, schema=obj.schema)
        print_json({"database": redact(engine.url), **_revision(obj, at), "tables": tables})
        return
    console = Console()
    console.print(f"[bold]database[/]  {redact(engine.url)}")
    console.print(f"[bold]schema[/]    {obj.schema} at revision {migrate.current(engine, schema=obj.schema)}")
    table = Table(title=f"oncelog tables in schema {obj.schema}")
    table.add_column("table", style="cyan", no_wrap=True)
    table.add_column("rows", justify="right")
    table.add_column("what it holds")
    with engine.connect() as conn:
        for row in table_status(conn):
            table.add_row(row.name, str(row.rows), row.comment)
    console.print(table)
