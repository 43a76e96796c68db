"""``oncelog.aio.send``: a record in the application's own transaction, on an async connection
(the transactional outbox of :func:`oncelog.send`, for asyncio code).

    async with AsyncSession(engine) as session, session.begin():
        session.add(Order(id=7, total=12.5))
        await oncelog.aio.send(session, "orders", {"id": 7}, key="7", value_serializer="json", key_serializer="str")
"""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from oncelog import errors
from oncelog.aio._loop import call
from oncelog.outbox import send as sync_send
from oncelog.serde import Serializer
from oncelog.store.engine import DEFAULT_SCHEMA

__all__ = ["send"]


async def send(
    conn: AsyncConnection | AsyncSession | psycopg.AsyncConnection[Any],
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
    """Send a record in ``conn``'s current transaction (a SQLAlchemy ``AsyncConnection`` or
    ``AsyncSession`` on psycopg, or a psycopg ``AsyncConnection``), as :func:`oncelog.send`:
    appended when that transaction commits, never if it rolls back; returns its partition."""
    target: Any
    if isinstance(conn, AsyncSession):
        target = conn.sync_session
    elif isinstance(conn, AsyncConnection):
        target = conn.sync_connection
        if target is None:
            raise errors.InvalidRequestError("send() needs a started AsyncConnection (async with engine.connect())")
    elif isinstance(conn, psycopg.AsyncConnection):
        target = conn
    else:
        raise errors.InvalidRequestError(
            "oncelog.aio.send() needs a SQLAlchemy AsyncConnection or AsyncSession, or a psycopg "
            f"AsyncConnection, not {type(conn).__name__}"
        )
    return await call(
        sync_send,
        target,
        topic,
        value,
        key,
        headers=headers,
        partition=partition,
        schema=schema,
        key_serializer=key_serializer,
        value_serializer=value_serializer,
    )
