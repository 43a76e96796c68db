"""``oncelog db``: schema migrations."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from oncelog.cli.context import CliContext
from oncelog.store import migrate, redact
from oncelog.store.catalog import table_status


@click.group()
def db() -> None:
    """Migrate the oncelog schema (alembic)."""


@db.command()
@click.argument("revision", default="head")
@click.pass_obj
def upgrade(obj: CliContext, revision: str) -> None:
    """Upgrade the schema to REVISION (default: head)."""
    engine = obj.engine(migrated=False)
    migrate.upgrade(engine, schema=obj.schema, revision=revision)
    click.echo(f"schema {obj.schema} at {migrate.current(engine, schema=obj.schema)}")


@db.command()
@click.argument("revision", default="-1")
@click.pass_obj
def downgrade(obj: CliContext, revision: str) -> None:
    """Downgrade the schema to REVISION (default: one step; 'base' removes everything)."""
    engine = obj.engine(migrated=False)
    migrate.downgrade(engine, schema=obj.schema, revision=revision)
    click.echo(f"schema {obj.schema} at {migrate.current(engine, schema=obj.schema) or 'base'}")


@db.command()
@click.pass_obj
def current(obj: CliContext) -> None:
    """Print the revision the schema is at ('none' if oncelog is not installed)."""
    engine = obj.engine(migrated=False)
    at = migrate.current(engine, schema=obj.schema)
    head = migrate.head()
    suffix = " (head)" if at == head else f" (head is {head})"
    click.echo(f"{at or 'none'}{suffix}")


@db.command()
@click.pass_obj
def check(obj: CliContext) -> None:
    """Exit non-zero unless the schema is at head and matches the models (no drift)."""
    migrate.check(obj.engine(migrated=False), schema=obj.schema)
    click.echo(f"schema {obj.schema} is at head {migrate.head()} with no drift")


@db.command()
@click.pass_obj
def status(obj: CliContext) -> None:
    """Show the database, the revision and every oncelog table with its row count."""
    engine = obj.engine(migrated=False)
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
