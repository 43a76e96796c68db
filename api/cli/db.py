"""``oncelog db``: schema migrations."""

from __future__ import annotations

import click

from oncelog.cli.context import CliContext
from oncelog.store import migrate


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
