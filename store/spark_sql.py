"""The SQL that Spark's JDBC source sends: the committed-records subquery, range predicates, and
the exported-snapshot statements (kept here, with the rest of oncelog's SQL)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import sqlalchemy as sa

from oncelog.errors import ConfigurationError
from oncelog.store.engine import validate_schema

_COLUMNS = 'topic, partition, "offset", key, value, headers::text AS headers, "timestamp", producer_id'
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SNAPSHOT_RE = re.compile(r"^[0-9A-F]+-[0-9A-F]+-[0-9]+$")


def committed_records_table(schema: str) -> str:
    """The JDBC ``dbtable``: the read-committed view, headers as JSON text (Spark has no jsonb)."""
    return f"(SELECT {_COLUMNS} FROM {validate_schema(schema)}.committed_records) AS committed"


def range_predicate(topic: str, partition: int, start: int, end: int) -> str:
    """A JDBC predicate selecting offsets [start, end) of one partition."""
    if not _TOPIC_RE.match(topic):  # the store refuses other names, so this never quotes anything
        raise ConfigurationError(f"invalid topic name {topic!r}")
    return (
        f'topic = \'{topic}\' AND partition = {int(partition)} AND "offset" >= {int(start)} AND "offset" < {int(end)}'
    )


def snapshot_init_statement(snapshot_id: str) -> str:
    """A JDBC ``sessionInitStatement`` putting a task's transaction into an exported snapshot."""
    if not _SNAPSHOT_RE.match(snapshot_id):
        raise ConfigurationError(f"not an exported snapshot id: {snapshot_id!r}")
    return f"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '{snapshot_id}'"


@contextlib.contextmanager
def exported_snapshot(engine: sa.Engine) -> Iterator[str]:
    """Hold a REPEATABLE READ transaction open and yield its exported snapshot id; tasks that set
    it see exactly the same data, whatever commits meanwhile."""
    with engine.connect() as conn:
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        snapshot = str(conn.exec_driver_sql("SELECT pg_export_snapshot()").scalar_one())
        try:
            yield snapshot
        finally:
            conn.rollback()
