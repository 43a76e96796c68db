"""Typed values that cross the store seam: records in, records out, offsets."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, NamedTuple, TypeVar

from oncelog.errors import InvalidRecordError

#: Headers as Kafka has them: ordered (key, value) pairs, keys may repeat, values may be None.
Headers = Sequence[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class RecordIn:
    """One record to append."""

    value: bytes | None
    key: bytes | None = None
    headers: Headers | None = None
    timestamp: datetime | None = None


@dataclass(slots=True)
class RecordColumns:
    """A batch's records as the produce functions take them: one list per column, so a client
    that builds a batch record by record (the producer's accumulator) hands it over without a
    RecordIn per record or a copy.

    ``headers`` holds each record's headers as :func:`encode_headers` wrote them (None: no
    headers), or is None when no record has any; ``timestamps`` likewise (None: the append time).
    """

    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[str | None] | None = None
    timestamps: list[datetime | None] | None = None

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def of(cls, records: Sequence[RecordIn] | RecordColumns) -> RecordColumns:
        """``records`` as columns (columns are returned as they are)."""
        if isinstance(records, RecordColumns):
            return records
        if isinstance(records, RecordIn):
            raise InvalidRecordError("records must be a sequence of RecordIn, not one RecordIn")
        headers = [encode_headers(r.headers) for r in records]
        timestamps = [r.timestamp for r in records]
        return cls(
            keys=[None if r.key is None else bytes(r.key) for r in records],
            values=[None if r.value is None else bytes(r.value) for r in records],
            headers=headers if any(h is not None for h in headers) else None,
            timestamps=timestamps if any(t is not None for t in timestamps) else None,
        )


#: produce_batches_v1's bound on the batches of one request.
MAX_BATCHES_PER_REQUEST = 64


@dataclass(frozen=True, slots=True)
class ProduceBatch:
    """One batch of a request that carries many (:func:`oncelog.store.log.produce_batches`, and a
    transaction's commit, :func:`oncelog.store.log.produce_offsets_end_txn`): ``records`` for
    ``topic``/``partition`` from sequence ``base_sequence`` on (None: a producer without
    idempotence)."""

    topic: str
    partition: int
    base_sequence: int | None
    records: Sequence[RecordIn] | RecordColumns


@dataclass(frozen=True, slots=True)
class TxnOffsets:
    """A consumer group's offsets committed with a transaction (KIP-447's TxnOffsetCommit):
    ``offsets`` maps (topic, partition) to (next offset to read, metadata), checked against the
    member and generation given."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    generation: int
    offsets: Mapping[tuple[str, int], tuple[int, str]]


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """Where a batch landed; ``duplicate`` when it was a retry of a batch already in the log;
    ``wake``, when a reader waits on its partition, the token that wakes it
    (:func:`oncelog.store.log.wake_readers`)."""

    base_offset: int
    last_offset: int
    log_append_time: datetime
    duplicate: bool
    wake: str | None = None


@dataclass(frozen=True, slots=True)
class CommitResult:
    """A transaction's commit with its last batches: each batch's result, in order, EndTxn's
    outcome, and the wake tokens of the commit's partitions on which a reader waits."""

    results: list[ProduceResult]
    outcome: str
    wake: list[str]


@dataclass(frozen=True, slots=True)
class WaitRegistration:
    """A reader's registered wait (:func:`oncelog.store.log.fetch_wait`): the channel it LISTENs
    on and the wake tokens (``topic_id:partition``) that concern it."""

    channel: str
    tokens: frozenset[str]


class FetchedRecord(NamedTuple):
    """One data record read from a partition (a named tuple: reads build many of them)."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: datetime
    producer_id: int | None
    producer_epoch: int | None = None
    sequence: int | None = None


class WireRecord(NamedTuple):
    """One data record as a wire protocol sends it (``oncelog broker``, :func:`oncelog.store.log.
    fetch_many_wire`): its timestamp in milliseconds since the Unix epoch, as Kafka's records
    carry it, read from the server's binary value without building a datetime."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int
    producer_id: int | None
    producer_epoch: int | None = None
    sequence: int | None = None


#: The record type a fetch builds: FetchedRecord, or a caller's tagged record (``fetch_many_tagged``).
R = TypeVar("R")


@dataclass(slots=True)
class PartitionFetch(Generic[R]):
    """What one fetch saw of one partition: records, the offsets bounding them, or an error.

    ``expired_transaction``: an open transaction past its timeout holds the last stable offset
    back; the reader should have it aborted (``expire_transactions``) and fetch again.
    """

    records: list[R]
    log_start_offset: int | None
    high_watermark: int | None
    last_stable_offset: int | None
    #: The offset below which this read looked: the last stable offset (read_committed) or high
    #: watermark, pulled back so that no committed transaction is returned only in part. Records
    #: past the record cap are left below it for the next read: a reader that got records goes on
    #: after the last one; only a reader that got none may move up to read_limit (what lies
    #: between is nothing it may see).
    read_limit: int | None
    expired_transaction: bool
    error: str | None


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Records of one partition from an offset, with the high watermark seen by that read."""

    records: list[FetchedRecord]
    high_watermark: int


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """The offsets that bound one partition's log."""

    partition: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    """A producer identity issued by InitProducerId."""

    producer_id: int
    epoch: int


def encode_headers(headers: Headers | None) -> str | None:
    """Headers as the JSON text the log stores: ``[{"key": ..., "value": base64 or null}]``."""
    if not headers:
        return None
    for k, _ in headers:
        if "\x00" in k:
            # jsonb (and so the log) cannot hold U+0000.
            raise InvalidRecordError(f"header key {k!r} contains a NUL character")
    return json.dumps(
        [{"key": k, "value": None if v is None else base64.b64encode(bytes(v)).decode("ascii")} for k, v in headers],
        # jsonb's own text form (", " and ": ", UTF-8 unescaped), so the size a client computes
        # with record_size() is the size produce_v2 checks against max_message_bytes.
        ensure_ascii=False,
    )


def record_size(key: bytes | None, value: bytes | None, headers_json: str | None) -> int:
    """A record's size as produce_v2 counts it against the topic's max_message_bytes."""
    return len(key or b"") + len(value or b"") + len(headers_json.encode() if headers_json else b"")


def decode_headers(stored: list[dict[str, str | None]] | None) -> tuple[tuple[str, bytes | None], ...]:
    """The inverse of :func:`encode_headers` (psycopg hands jsonb over already parsed)."""
    if not stored:
        return ()
    try:
        return tuple(
            (_text(h["key"]), None if h["value"] is None else base64.b64decode(_text(h["value"]), validate=True))
            for h in stored
        )
    except (TypeError, KeyError, ValueError) as exc:  # binascii.Error is a ValueError
        # Revision 0017 refuses such headers on the write path; older rows may still hold them.
        raise InvalidRecordError(f"headers are not [{{key, value}}] with base64 values: {exc!r}") from exc


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a JSON string, got {type(value).__name__}")
    return value
