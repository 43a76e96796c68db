"""What the operator's commands share: one way to print (a rich table, or JSON with ``--json``)
and one way to fail (a one-line error on stderr, exit status 1).

Rich decides about colour itself: styles are emitted only on a terminal (and never with
``NO_COLOR``), so piped output is plain text. With ``--json`` a command prints exactly one JSON
document on stdout and nothing else (``consume`` prints one JSON object per record).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

import click
import psycopg
import sqlalchemy as sa
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from oncelog.admin import Admin
from oncelog.cli.context import CliContext
from oncelog.errors import OncelogError
from oncelog.store.errors import translate

F = TypeVar("F", bound=Callable[..., Any])


# --- failing -----------------------------------------------------------------------------------


class CliError(click.ClickException):
    """An oncelog error reported to the operator: one red line on stderr, exit status 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        """Print ``error: <message>`` (as :func:`oncelog.cli.main` does for other commands)."""
        click.secho(f"error: {self.format_message()}", fg="red", err=True)


def fail(exc: OncelogError) -> NoReturn:
    """Report ``exc`` as the command's failure."""
    raise CliError(str(exc)) from exc


class OpsCommand(click.Command):
    """A command whose oncelog errors become :class:`CliError`, however it was invoked
    (the ``oncelog`` entry point, or click's own runner in tests)."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, mapping oncelog and database errors to a one-line failure."""
        try:
            return super().invoke(ctx)
        except OncelogError as exc:
            fail(exc)
        except (sa.exc.DBAPIError, psycopg.Error) as exc:
            mapped = translate(exc)
            if mapped is None:
                raise
            fail(mapped)


class OpsGroup(click.Group):
    """A command group whose commands are :class:`OpsCommand`."""

    command_class = OpsCommand


def admin_for(obj: CliContext) -> Admin:
    """An Admin on the command's database (the embedded cluster is started and migrated first)."""
    obj.engine()
    return Admin(obj.url(), schema=obj.schema)


# --- printing ----------------------------------------------------------------------------------


def json_option(fn: F) -> F:
    """The ``--json`` flag, the same on every command."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout, and nothing else."
    )(fn)


def console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr), made at call time so it writes where the command's streams are.

    Off a terminal (a pipe, a file) there is no width to fit: tables get room for their content
    instead of rich's default of 80 columns, which would fold every cell."""
    out = Console(stderr=stderr, highlight=False)
    if not out.is_terminal:
        out.width = 250
    return out


def bytes_to_json(data: bytes | None) -> str | dict[str, str] | None:
    """Bytes as JSON: text when they are UTF-8, else ``{"base64": ...}`` (lossless either way)."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: dataclasses and named tuples become objects, datetimes ISO 8601
    text, durations seconds, bytes text or base64 (see :func:`bytes_to_json`)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes_to_json(bytes(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):  # a NamedTuple such as TopicPartition
        return {k: jsonable(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    raise TypeError(f"cannot render {type(value).__name__} as JSON")


def print_json(value: Any, *, compact: bool = False) -> None:
    """Print ``value`` as one JSON document on stdout."""
    text = json.dumps(
        jsonable(value), ensure_ascii=False, separators=(",", ":") if compact else None, indent=None if compact else 2
    )
    click.echo(text)


def print_stopped(stopped: bool, *, as_json: bool) -> None:
    """What a ``stop`` command says: whether it stopped something (``dev-db``, ``dev-cluster``)."""
    if as_json:
        print_json({"stopped": stopped})
    else:
        click.echo("stopped" if stopped else "not running")


def cell(value: Any) -> str:
    """A value as table text: '-' for None, datetimes to the second, durations as h/m/s."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    if isinstance(value, timedelta):
        return _duration(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    if isinstance(value, tuple) and hasattr(value, "_asdict") and len(value) == 2:  # TopicPartition
        return f"{value[0]}-{value[1]}"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(cell(v) for v in value) or "-"
    return str(value)


def _duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{value.total_seconds():.1f}s"


#: Colours of states (transactions and groups), so an operator's eye finds the odd one.
STATE_STYLES = {
    "Ongoing": "yellow",
    "PrepareCommit": "yellow",
    "PrepareAbort": "yellow",
    "CompleteCommit": "green",
    "CompleteAbort": "red",
    "Dead": "dim",
    "Empty": "cyan",
    "Stable": "green",
}


def state(name: str) -> Text:
    """A state name, coloured by :data:`STATE_STYLES`."""
    return Text(name, style=STATE_STYLES.get(name, ""))


def table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    numeric: Iterable[str] = (),
) -> Table:
    """A rich table; ``numeric`` names the right-aligned columns. Cells go through :func:`cell`
    unless they are already rich renderables (styled text)."""
    right = set(numeric)
    out = Table(title=title, title_justify="left", header_style="bold")
    for name in columns:
        numbers = name in right
        out.add_column(name, justify="right" if numbers else "left", overflow="fold", no_wrap=numbers)
    for row in rows:
        out.add_row(*(v if isinstance(v, Text | Table) else cell(v) for v in row))
    return out


def fields(title: str | None, pairs: Iterable[tuple[str, Any]]) -> Table:
    """A two-column table of ``name: value`` pairs (for describing one object)."""
    out = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 2, 0, 0))
    out.add_column(style="bold", no_wrap=True)
    out.add_column(overflow="fold")
    for name, value in pairs:
        out.add_row(name, value if isinstance(value, Text) else cell(value))
    return out


def emit(as_json: bool, payload: Any, *renderables: RenderableType) -> None:
    """The one exit of every command's answer: ``payload`` as JSON, or the renderables on stdout."""
    if as_json:
        print_json(payload)
    else:
        out = console()
        for item in renderables:
            # Plain strings are printed as text, never parsed as rich markup: they carry user names.
            out.print(Text(item) if isinstance(item, str) else item)
