"""Apply a revision's frozen SQL: the text it installs, kept beside it and never edited.

Every revision under ``versions/`` applies ``versions/sql/<revision>.up.sql`` (and, going back,
``.down.sql``): the exact statements it sends, frozen when it was written. A revision imports no
other revision and changes no other revision's text; the current definition of every SQL object
lives in ``store/sql`` (``tests/migration/test_sql_tree.py`` proves head equals it).

The files name the installation's schema as ``@schema@`` where it appears (role names such as
``@schema@_client``, ``GRANT ... IN SCHEMA``); everything else is resolved through the
``search_path`` the migration environment sets.
"""

from __future__ import annotations

from importlib import resources

from alembic import op

from oncelog.store.engine import validate_schema

PLACEHOLDER = "@schema@"


def sql(revision: str, direction: str, schema: str) -> str:
    """The frozen SQL of ``revision`` (its module name, e.g. ``0003_transactions``), ``up`` or
    ``down``, for ``schema``."""
    if direction not in ("up", "down"):
        raise ValueError(f"direction is up or down, not {direction!r}")
    text = resources.files("oncelog.migrations.versions").joinpath("sql", f"{revision}.{direction}.sql")
    return text.read_text(encoding="utf-8").replace(PLACEHOLDER, validate_schema(schema))


def apply(revision: str, direction: str, schema: str) -> None:
    """Run the frozen SQL on the migration's connection, inside its transaction. The text goes to
    the driver as it is (one simple-protocol request, no parameters), as psql would send it:
    nothing parses it for bind parameters or ``%`` placeholders."""
    driver = op.get_bind().connection.driver_connection
    if driver is None:
        raise RuntimeError("the migration connection has no driver connection")
    driver.execute(sql(revision, direction, schema))
