"""Records in the caller's own database transaction (the transactional outbox): ``send_v1``."""

from __future__ import annotations

from typing import Any

import psycopg
import sqlalchemy as sa

from oncelog.store.engine import validate_schema
from oncelog.store.errors import mapped_errors


def send(
    conn: sa.Connection | psycopg.Connection[Any],
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
        with conn.cursor() as cur:
            cur.execute(sql, params)
            row = cur.fetchone()
    assert row is not None  # a SELECT of one function call answers one row
    return int(row[0])
