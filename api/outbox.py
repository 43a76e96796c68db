"""``oncelog.send``: a record in the application's own database transaction (the transactional
outbox). It joins the log when that transaction commits, and never if it rolls back.

    with Session(engine) as session, session.begin():
        session.add(Order(id=7, total=12.5))
        oncelog.send(session, "orders", {"id": 7}, key="7", value_serializer="json", key_serializer="str")

The record is checked at once (unknown topic or partition, too large, bad headers, ACLs: a typed
error, inside the caller's transaction) and appended at the commit, in the order sent (see
docs/guide-producer.md, "In your own transaction").
"""

from __future__ import annotations

from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy import orm

from oncelog import errors, validate
from oncelog.serde import Serializer, resolve_serializer
from oncelog.store import outbox, runtime
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.store.records import encode_headers

__all__ = ["send"]


def send(
    conn: sa.Connection | orm.Session | psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
    topic: str,
    value: Any,
    key: Any = None,
    *,
    headers: Any = None,
    partition: int | None = None,
    schema: str = DEFAULT_SCHEMA,
    key_serializer: str | Serializer | None = "bytes",
    value_serializer: str | Serializer | None = "bytes",
) -> int:
    """Send a record in ``conn``'s current transaction (a SQLAlchemy ``Connection`` or ``Session``,
    or a psycopg connection); returns its partition. Keys and values go through the serializers
    as the Producer's do; the partition is ``partition``, else the key's (murmur2, as Kafka's
    client), else one per topic and transaction. In autocommit, the record is its own
    transaction."""
    validate.text("topic", topic, error=errors.InvalidTopicError)
    if partition is not None:
        validate.integer("partition", partition, low=0, error=errors.InvalidRequestError)
    key_bytes = None if key is None else validate.serialized("key", resolve_serializer(key_serializer), key)
    value_bytes = validate.serialized("value", resolve_serializer(value_serializer), value)
    header_json = encode_headers(validate.headers(headers))
    if isinstance(conn, orm.Session):
        conn = conn.connection()
    if not isinstance(conn, sa.Connection | psycopg.Connection) and not (
        isinstance(conn, psycopg.AsyncConnection) and runtime.on_event_loop()  # from oncelog.aio.send
    ):
        raise errors.InvalidRequestError(
            f"send() needs a SQLAlchemy Connection or Session, or a psycopg connection, not {type(conn).__name__}"
            + (" (for an async one: await oncelog.aio.send(...))" if isinstance(conn, psycopg.AsyncConnection) else "")
        )
    return outbox.send(
        conn,
        schema=schema,
        topic=topic,
        value=value_bytes,
        key=key_bytes,
        headers=header_json,
        partition=partition,
    )
