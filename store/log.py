"""The log's protocol operations: one typed function per Kafka request, each calling its SQL function.

Every function takes a connection and leaves the transaction to the caller, so an application can
write its own rows and oncelog records atomically; with an autocommit connection each call is one
round trip and one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from oncelog.errors import InvalidRecordError
from oncelog.store.errors import mapped_errors
from oncelog.store.records import (
    FetchedRecord,
    FetchResult,
    PartitionOffsets,
    ProduceResult,
    ProducerIdAndEpoch,
    RecordIn,
    decode_headers,
    encode_headers,
)

# Arrays go in binary (%b): bytea in text format would be hex, twice the bytes to send and parse.
_PRODUCE = (
    "SELECT base_offset, last_offset, log_append_time, duplicate FROM produce_v1("
    "%(topic)s, %(partition)s, %(producer_id)s, %(epoch)s::smallint, %(sequence)s, "
    "%(keys)b::bytea[], %(values)b::bytea[], %(headers)s::jsonb[], %(timestamps)b::timestamptz[])"
)
_FETCH = (
    'SELECT "offset", key, value, headers, "timestamp", producer_id, producer_epoch, sequence, high_watermark '
    "FROM fetch_v1(%(topic)s, %(partition)s, %(offset)s, %(max_records)s)"
)


def _driver(conn: sa.Connection, sql: str, params: dict[str, Any]) -> sa.CursorResult[Any]:
    with mapped_errors():
        return conn.exec_driver_sql(sql, params)


def init_producer_id(
    conn: sa.Connection, *, producer_id: int | None = None, epoch: int | None = None
) -> ProducerIdAndEpoch:
    """InitProducerId without a transactional id.

    With no arguments, a new producer id at epoch 0. With the producer's current id and epoch
    (KIP-360), the next epoch of that id: a retried bump gets the same answer, an exhausted epoch
    or an expired id a new producer id.
    """
    row = _driver(
        conn,
        "SELECT producer_id, producer_epoch FROM init_producer_id_v1(%(pid)s, %(epoch)s::smallint)",
        {"pid": producer_id, "epoch": epoch},
    ).one()
    return ProducerIdAndEpoch(int(row.producer_id), int(row.producer_epoch))


def produce(
    conn: sa.Connection,
    *,
    topic: str,
    partition: int,
    records: Sequence[RecordIn],
    producer_id: int | None = None,
    producer_epoch: int | None = None,
    base_sequence: int | None = None,
) -> ProduceResult:
    """Produce one batch to one partition (idempotent when a producer id is given)."""
    if isinstance(records, RecordIn):
        raise InvalidRecordError("records must be a sequence of RecordIn, not one RecordIn")
    headers = [encode_headers(r.headers) for r in records]
    timestamps: list[datetime | None] = [r.timestamp for r in records]
    row = _driver(
        conn,
        _PRODUCE,
        {
            "topic": topic,
            "partition": partition,
            "producer_id": producer_id,
            "epoch": producer_epoch,
            "sequence": base_sequence,
            "keys": [None if r.key is None else bytes(r.key) for r in records],
            "values": [None if r.value is None else bytes(r.value) for r in records],
            "headers": headers if any(h is not None for h in headers) else None,
            "timestamps": timestamps if any(t is not None for t in timestamps) else None,
        },
    ).one()
    return ProduceResult(int(row.base_offset), int(row.last_offset), row.log_append_time, bool(row.duplicate))


def fetch(conn: sa.Connection, *, topic: str, partition: int, offset: int, max_records: int = 500) -> FetchResult:
    """Fetch (read_uncommitted): data records from ``offset`` below the high watermark."""
    rows = _driver(
        conn, _FETCH, {"topic": topic, "partition": partition, "offset": offset, "max_records": max_records}
    ).all()
    if not rows:
        # An empty answer still needs the high watermark: ask for the partition's offsets.
        hw = next(p.high_watermark for p in list_offsets(conn, topic=topic) if p.partition == partition)
        return FetchResult([], hw)
    return FetchResult(
        [
            FetchedRecord(
                offset=int(r.offset),
                key=r.key,
                value=r.value,
                headers=decode_headers(r.headers),
                timestamp=r.timestamp,
                producer_id=r.producer_id,
                producer_epoch=r.producer_epoch,
                sequence=r.sequence,
            )
            for r in rows
        ],
        int(rows[0].high_watermark),
    )


def list_offsets(conn: sa.Connection, *, topic: str) -> list[PartitionOffsets]:
    """ListOffsets: log start offset and high watermark of every partition of ``topic``."""
    rows = _driver(
        conn,
        "SELECT partition, log_start_offset, high_watermark FROM list_offsets_v1(%(topic)s)",
        {"topic": topic},
    ).all()
    return [PartitionOffsets(int(r.partition), int(r.log_start_offset), int(r.high_watermark)) for r in rows]


def expire_producers(conn: sa.Connection, *, now: datetime | None = None) -> int:
    """Maintenance: drop producer state idle past the expiration; returns the state rows removed."""
    return int(_driver(conn, "SELECT expire_producers_v1(coalesce(%(now)s, now()))", {"now": now}).scalar_one())


def enforce_retention(conn: sa.Connection, *, batch: int = 10_000, now: datetime | None = None) -> int:
    """Maintenance: one bounded retention pass; returns records deleted (repeat until 0)."""
    return int(
        _driver(
            conn, "SELECT enforce_retention_v1(%(batch)s, coalesce(%(now)s, now()))", {"batch": batch, "now": now}
        ).scalar_one()
    )
