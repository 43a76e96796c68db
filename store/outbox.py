"""Records in the caller's own database transaction (the transactional outbox): ``send_v1``; and
table capture, which turns a table's row changes into such records (``capture_table_v1``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
import sqlalchemy as sa

from oncelog.store import runtime
from oncelog.store.engine import validate_schema
from oncelog.store.errors import mapped_errors


def send(
    conn: sa.Connection | psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
    *,
    schema: str,
    topic: str,
    value: bytes | None,
    key: bytes | None = None,
    headers: str | None = None,
    partition: int | None = None,
) -> int:
    """Stage a record in ``conn``'s current transaction (``send_v1``), appended to the log when it
    commits and never if it rolls back; returns the partition. ``headers`` is their JSON (see
    :func:`oncelog.store.records.encode_headers`). The function is named with its schema, since
    the caller's connection need not have oncelog's schema on its search_path."""
    sql = f"SELECT {validate_schema(schema)}.send_v1(%(t)s, %(v)s, %(k)s, %(h)s::jsonb, %(p)s)"
    params = {"t": topic, "v": value, "k": key, "h": headers, "p": partition}
    with mapped_errors():
        if isinstance(conn, sa.Connection):
            return int(conn.exec_driver_sql(sql, params).scalar_one())
        # (An async connection: the call runs on its event loop, oncelog.aio.send.)
        with runtime.cursor(conn) as cur:
            cur.execute(sql, params)
            row = cur.fetchone()
    if row is None:  # a SELECT of one function call answers one row
        raise RuntimeError("send_v1 answered no row")
    return int(row[0])


@dataclass(frozen=True, slots=True)
class Capture:
    """A captured table and the topic its row changes go to."""

    table: str
    topic: str


def capture_table(conn: sa.Connection, *, table: str, topic: str) -> None:
    """Capture ``table`` (a name, schema-qualified or on the search path) to ``topic``
    (``capture_table_v1``): its row changes become records in the same transaction."""
    with mapped_errors():
        conn.exec_driver_sql("SELECT capture_table_v1(%(t)s::regclass, %(topic)s)", {"t": table, "topic": topic})


def remove_capture(conn: sa.Connection, *, table: str) -> bool:
    """Stop capturing ``table``; False if it was not captured."""
    with mapped_errors():
        return bool(conn.exec_driver_sql("SELECT uncapture_table_v1(%(t)s::regclass)", {"t": table}).scalar_one())


def list_captures(conn: sa.Connection) -> list[Capture]:
    """The captured tables and their topics."""
    with mapped_errors():
        rows = conn.exec_driver_sql("SELECT table_name, topic FROM capture_list_v1()").all()
    return [Capture(r.table_name, r.topic) for r in rows]
