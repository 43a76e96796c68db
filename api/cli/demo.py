"""``oncelog demo``: the main job on the embedded default.

For now it starts the private server, migrates it and shows the schema's status; later issues
turn it into the end-to-end exactly-once pipeline.
"""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from oncelog.cli.context import CliContext
from oncelog.store import migrate, redact
from oncelog.store.catalog import table_status


@click.command()
@click.pass_obj
def demo(obj: CliContext) -> None:
    """Start (or reuse) the server, migrate it to head and show the schema's status."""
    console = Console()
    with console.status("starting the database and migrating..."):
        engine = obj.engine()
        migrate.upgrade(engine, schema=obj.schema)
        migrate.check(engine, schema=obj.schema)
    console.print(f"[bold]database[/]  {redact(engine.url)}")
    console.print(
        f"[bold]schema[/]    {obj.schema} at revision {migrate.current(engine, schema=obj.schema)} (head, no drift)"
    )
    table = Table(title=f"oncelog tables in schema {obj.schema}")
    table.add_column("table", style="cyan", no_wrap=True)
    table.add_column("rows", justify="right")
    table.add_column("what it holds")
    with engine.connect() as conn:
        for row in table_status(conn):
            table.add_row(row.name, str(row.rows), row.comment)
    console.print(table)
    console.print('psql: [green]psql "$(oncelog dev-db url)"[/]  then  [green]\\dt+ ' + obj.schema + ".*[/]")
