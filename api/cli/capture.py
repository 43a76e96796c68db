"""``oncelog capture add|list|remove``: a table's row changes as records (table capture)."""

from __future__ import annotations

import click

from oncelog.cli.context import CliContext
from oncelog.cli.render import OpsGroup, admin_for, emit, json_option, table


@click.group(cls=OpsGroup)
def capture() -> None:
    """Capture tables: each row change becomes a record, in the same transaction."""


@capture.command()
@click.argument("table_name", metavar="TABLE")
@click.option("--topic", required=True, help="The topic the row changes go to.")
@json_option
@click.pass_obj
def add(obj: CliContext, table_name: str, topic: str, as_json: bool) -> None:
    """Capture TABLE (schema.name): every INSERT, UPDATE and DELETE becomes a record of TOPIC,
    keyed by the primary key, in the same transaction. TRUNCATE is then refused."""
    with admin_for(obj) as admin:
        admin.capture_table(table_name, topic)
    emit(as_json, {"table": table_name, "topic": topic}, f"capturing {table_name} to topic {topic}")


@capture.command(name="list")
@json_option
@click.pass_obj
def list_(obj: CliContext, as_json: bool) -> None:
    """List the captured tables and their topics."""
    with admin_for(obj) as admin:
        found = admin.list_captures()
    emit(as_json, found, table(None, ["table", "topic"], [(c.table, c.topic) for c in found]))


@capture.command()
@click.argument("table_name", metavar="TABLE")
@json_option
@click.pass_obj
def remove(obj: CliContext, table_name: str, as_json: bool) -> None:
    """Stop capturing TABLE."""
    with admin_for(obj) as admin:
        removed = admin.remove_capture(table_name)
    emit(
        as_json,
        {"table": table_name, "removed": removed},
        f"{'stopped capturing' if removed else 'was not capturing'} {table_name}",
    )
