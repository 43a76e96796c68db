"""The log's protocol operations: one typed function per Kafka request, each calling its SQL function.

Every function takes a connection and leaves the transaction to the caller, so an application can
write its own rows and oncelog records atomically; with an autocommit connection each call is one
round trip and one transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa

from oncelog.errors import (
    CorruptRecordError,
    IllegalStateError,
    InvalidRecordError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    OncelogError,
    UnknownTopicOrPartitionError,
)
from oncelog.store import runtime, schema
from oncelog.store.errors import mapped_errors, refusal
from oncelog.store.records import (
    MAX_BATCHES_PER_REQUEST,
    CommitResult,
    FetchedRecord,
    FetchResult,
    PartitionFetch,
    PartitionOffsets,
    ProduceBatch,
    ProduceResult,
    ProducerIdAndEpoch,
    R,
    RecordColumns,
    RecordIn,
    TxnOffsets,
    WaitRegistration,
    WireRecord,
    decode_headers,
)
from oncelog.store.txn import end_txn_outcome

# Arrays go in binary (%b): bytea in text format would be hex, twice the bytes to send and parse.
_PRODUCE_ARGS = (
    "%(topic)s, %(partition)s, %(producer_id)s, %(epoch)s::smallint, %(sequence)s, "
    "%(keys)b::bytea[], %(values)b::bytea[], %(headers)s::jsonb[], %(timestamps)b::timestamptz[], "
    "%(transactional_id)s, %(txn_number)s)"
)
_PRODUCE = "SELECT base_offset, last_offset, log_append_time, duplicate FROM produce_v2(" + _PRODUCE_ARGS
#: The same batch with EndTxn (commit) in one database transaction (migration 0013).
_PRODUCE_END_TXN = (
    "SELECT base_offset, last_offset, log_append_time, duplicate, outcome FROM produce_end_txn_v1(" + _PRODUCE_ARGS
)
#: Every queued batch of a transaction, its consumer offsets and EndTxn in one database transaction
#: (migration 0019), and the partitions of the commit a reader waits on (0020).
_PRODUCE_OFFSETS_END_TXN = (
    "SELECT base_offsets, last_offsets, log_append_times, duplicates, outcome, wake FROM produce_end_txn_v3("
    "%(transactional_id)s, %(producer_id)s, %(epoch)s::smallint, %(txn_number)s, "
    "%(topics)s::text[], %(partitions)s::integer[], %(sequences)s::integer[], %(counts)s::integer[], "
    "%(keys)b::bytea[], %(values)b::bytea[], %(headers)s::jsonb[], %(timestamps)b::timestamptz[], "
    "%(group_id)s, %(member_id)s, %(instance_id)s, %(generation)s, "
    "%(offset_topics)s::text[], %(offset_partitions)s::integer[], %(offsets)s::bigint[], %(metadata)s::text[])"
)
#: Batches for any partitions in one database transaction, each answered on its own (migration 0020).
_PRODUCE_BATCHES = (
    "SELECT base_offset, last_offset, log_append_time, duplicate, error_code, error_message, wake "
    "FROM produce_batches_v1(%(producer_id)s, %(epoch)s::smallint, %(transactional_id)s, %(txn_number)s, "
    "%(topics)s::text[], %(partitions)s::integer[], %(sequences)s::integer[], %(counts)s::integer[], "
    "%(keys)b::bytea[], %(values)b::bytea[], %(headers)s::jsonb[], %(timestamps)b::timestamptz[])"
)
# Columns by position (see fetch_v3): idx, offset, key, value, headers, timestamp, producer_id,
# producer_epoch, sequence, bounds, error. A row with offset NULL carries the partition's bounds.
_FETCH = (
    "SELECT * FROM fetch_v3(%(topics)s::text[], %(partitions)s::integer[], %(offsets)s::bigint[], "
    "%(max_records)s::integer, %(read_committed)s::boolean)"
)


_INT32 = 2**31 - 1
_MAX_EPOCH = 32767


def _check_range(name: str, value: int | None, high: int, error: type[OncelogError] = InvalidRecordError) -> None:
    """Refuse a number the database column cannot hold, with a typed error, before sending it."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high):
        raise error(f"{name} must be an integer from 0 to {high}, not {value!r}")


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
    _check_range("producer_id", producer_id, 2**63 - 1, InvalidRequestError)
    _check_range("epoch", epoch, _MAX_EPOCH, InvalidRequestError)
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
    records: Sequence[RecordIn] | RecordColumns,
    producer_id: int | None = None,
    producer_epoch: int | None = None,
    base_sequence: int | None = None,
    transactional_id: str | None = None,
    txn_number: int | None = None,
) -> ProduceResult:
    """Produce one batch to one partition.

    Idempotent when a producer id is given; part of transaction ``txn_number`` of
    ``transactional_id`` when those are given (the store opens the transaction and adds the
    partition to it as needed). ``records``: RecordIn values, or the batch's columns.
    """
    params = _produce_params(
        topic=topic,
        partition=partition,
        records=records,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional_id=transactional_id,
        txn_number=txn_number,
    )
    return _produce_result(_driver(conn, _PRODUCE, params).one())


def produce_end_txn(
    conn: sa.Connection,
    *,
    topic: str,
    partition: int,
    records: Sequence[RecordIn] | RecordColumns,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional_id: str,
    txn_number: int,
) -> tuple[ProduceResult, str]:
    """A transaction's last batch and its commit (Produce, then EndTxn) in ONE database
    transaction: both or neither, one round trip. Safe to retry after a lost reply, like each of
    the two: a retry of a call that committed gets the batch's first offsets back with
    ``duplicate`` set and the outcome ``already_committed``.

    Returns the batch's result and EndTxn's outcome, ``committed`` or ``already_committed``. As
    :func:`oncelog.store.txn.end_txn`, TransactionTimeoutError when the transaction had passed its
    timeout (the store aborted it, the batch included, and bumped the epoch).
    """
    params = _produce_params(
        topic=topic,
        partition=partition,
        records=records,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional_id=transactional_id,
        txn_number=txn_number,
    )
    row = _driver(conn, _PRODUCE_END_TXN, params).one()
    outcome = end_txn_outcome(str(row.outcome), transactional_id=transactional_id, txn_number=txn_number)
    return _produce_result(row), outcome


def produce_offsets_end_txn(
    conn: sa.Connection,
    *,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    txn_number: int,
    batches: Sequence[ProduceBatch],
    offsets: TxnOffsets | None = None,
) -> CommitResult:
    """A transaction's commit in ONE database transaction and one round trip: ``batches`` (any
    number of partitions; a partition's batches in sequence order), the consumer ``offsets``
    (TxnOffsetCommit, KIP-447) and EndTxn, all or nothing, in the documented lock order.

    Safe to retry after a lost reply with the same arguments: a retry of a call that committed
    gets every batch's original offsets back with ``duplicate`` set and the outcome
    ``already_committed``. Returns each batch's result, in order, EndTxn's outcome (``committed``
    or ``already_committed``) and the partitions of the commit a reader waits on (wake them with
    :func:`wake_readers`, outside this transaction); TransactionTimeoutError when the transaction
    had passed its timeout (the store aborted it, these batches included, and bumped the epoch).
    """
    _check_range("producer_id", producer_id, 2**63 - 1)
    _check_range("producer_epoch", producer_epoch, _MAX_EPOCH)
    _check_range("txn_number", txn_number, 2**63 - 1)
    group = offsets.offsets if offsets is not None else {}
    params = {
        "transactional_id": transactional_id,
        "producer_id": producer_id,
        "epoch": producer_epoch,
        "txn_number": txn_number,
        **_batch_params(batches),
        "group_id": offsets.group_id if offsets is not None else None,
        "member_id": offsets.member_id if offsets is not None else None,
        "instance_id": offsets.group_instance_id if offsets is not None else None,
        "generation": offsets.generation if offsets is not None else None,
        "offset_topics": [t for t, _ in group],
        "offset_partitions": [p for _, p in group],
        "offsets": [o for o, _ in group.values()],
        "metadata": [m for _, m in group.values()],
    }
    row = _driver(conn, _PRODUCE_OFFSETS_END_TXN, params).one()
    outcome = end_txn_outcome(str(row.outcome), transactional_id=transactional_id, txn_number=txn_number)
    columns = (row.base_offsets or [], row.last_offsets or [], row.log_append_times or [], row.duplicates or [])
    results = [ProduceResult(int(b), int(last), ts, bool(dup)) for b, last, ts, dup in zip(*columns, strict=True)]
    return CommitResult(results, outcome, list(row.wake or []))


def produce_batches(
    conn: sa.Connection,
    *,
    batches: Sequence[ProduceBatch],
    producer_id: int | None = None,
    producer_epoch: int | None = None,
    transactional_id: str | None = None,
    txn_number: int | None = None,
) -> list[ProduceResult | OncelogError]:
    """Produce: up to :data:`MAX_BATCHES_PER_REQUEST` batches, to any partitions, in ONE database
    transaction and round trip (Kafka's ProduceRequest). Each batch is answered on its own, in
    order: its ProduceResult (``wake`` when a reader waits on its partition), or the error the
    store refused it with (nothing of it was appended; the other batches were). The identity and
    transaction are :func:`produce`'s, shared by every batch. An error that is not a refusal (a
    timeout, a lost connection, a malformed request) is raised: then no batch's outcome is known.
    """
    if not 1 <= len(batches) <= MAX_BATCHES_PER_REQUEST:
        raise InvalidRequestError(
            f"a produce request carries 1 to {MAX_BATCHES_PER_REQUEST} batches, not {len(batches)}"
        )
    _check_range("producer_id", producer_id, 2**63 - 1)
    _check_range("producer_epoch", producer_epoch, _MAX_EPOCH)
    _check_range("txn_number", txn_number, 2**63 - 1)
    params = {
        "producer_id": producer_id,
        "epoch": producer_epoch,
        "transactional_id": transactional_id,
        "txn_number": txn_number,
        **_batch_params(batches),
    }
    try:
        rows = _driver(conn, _PRODUCE_BATCHES, params).all()
    except OncelogError as exc:
        if len(batches) == 1 and (exc.sqlstate or "").startswith("OL"):
            # The store raises the refusal of a one-batch request (its fast path): that batch's answer.
            return [exc]
        raise
    answers: list[ProduceResult | OncelogError] = []
    for row in rows:
        if row.error_code is not None:
            answers.append(refusal(str(row.error_code), str(row.error_message)))
        else:
            answers.append(
                ProduceResult(
                    int(row.base_offset), int(row.last_offset), row.log_append_time, bool(row.duplicate), row.wake
                )
            )
    return answers


def _batch_params(batches: Sequence[ProduceBatch]) -> dict[str, Any]:
    """Many batches as the produce functions take them: their names, sequences and counts, and
    their records' columns end to end."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[str | None] = []
    timestamps: list[datetime | None] = []
    batch_columns = [RecordColumns.of(batch.records) for batch in batches]
    for batch, cols in zip(batches, batch_columns, strict=True):
        _check_range("partition", batch.partition, _INT32, UnknownTopicOrPartitionError)
        _check_range("base_sequence", batch.base_sequence, _INT32)
        _check_columns(cols)
        keys += cols.keys
        values += cols.values
        headers += cols.headers if cols.headers is not None else [None] * len(cols)
        timestamps += cols.timestamps if cols.timestamps is not None else [None] * len(cols)
    return {
        "topics": [b.topic for b in batches],
        "partitions": [b.partition for b in batches],
        "sequences": [b.base_sequence for b in batches],
        "counts": [len(c) for c in batch_columns],
        "keys": keys,
        "values": values,
        "headers": headers if any(h is not None for h in headers) else None,
        "timestamps": timestamps if any(t is not None for t in timestamps) else None,
    }


def _produce_result(row: Any) -> ProduceResult:
    """A produce row (base_offset, last_offset, log_append_time, duplicate) as a ProduceResult."""
    return ProduceResult(int(row.base_offset), int(row.last_offset), row.log_append_time, bool(row.duplicate))


def _produce_params(
    *,
    topic: str,
    partition: int,
    records: Sequence[RecordIn] | RecordColumns,
    producer_id: int | None,
    producer_epoch: int | None,
    base_sequence: int | None,
    transactional_id: str | None,
    txn_number: int | None,
) -> dict[str, Any]:
    """A batch as the produce functions take it, checked for what the columns can hold."""
    _check_range("partition", partition, _INT32, UnknownTopicOrPartitionError)
    _check_range("producer_id", producer_id, 2**63 - 1)
    _check_range("producer_epoch", producer_epoch, _MAX_EPOCH)
    _check_range("base_sequence", base_sequence, _INT32)
    _check_range("txn_number", txn_number, 2**63 - 1)
    cols = RecordColumns.of(records)
    _check_columns(cols)
    return {
        "topic": topic,
        "partition": partition,
        "producer_id": producer_id,
        "epoch": producer_epoch,
        "sequence": base_sequence,
        "keys": cols.keys,
        "values": cols.values,
        "headers": cols.headers,
        "timestamps": cols.timestamps,
        "transactional_id": transactional_id,
        "txn_number": txn_number,
    }


def _check_columns(cols: RecordColumns) -> None:
    """Columns of one length (the store refuses others too, with a less precise message)."""
    n = len(cols.values)
    if (
        len(cols.keys) != n
        or (cols.headers is not None and len(cols.headers) != n)
        or (cols.timestamps is not None and len(cols.timestamps) != n)
    ):
        raise InvalidRecordError("a batch's keys, values, headers and timestamps differ in length")


def fetch_many(
    conn: sa.Connection,
    positions: Mapping[tuple[str, int], int],
    *,
    max_records: int = 500,
    read_committed: bool = True,
) -> dict[tuple[str, int], PartitionFetch[FetchedRecord]]:
    """Fetch many partitions from their positions in ONE snapshot.

    A transaction spanning these partitions is seen on all of them or on none. read_committed
    stops at each partition's last stable offset and skips aborted records; read_uncommitted
    stops at the high watermark. Per partition, at most ``max_records`` records.
    """
    return _fetch_many(conn, positions, max_records, read_committed, FetchedRecord, tagged=False)


def fetch_many_tagged(
    conn: sa.Connection,
    positions: Mapping[tuple[str, int], int],
    record_type: type[R],
    *,
    max_records: int = 500,
    read_committed: bool = True,
) -> dict[tuple[str, int], PartitionFetch[R]]:
    """:func:`fetch_many`, building each record as ``record_type``: a named tuple whose fields
    start (topic, partition, offset, key, value, headers, timestamp, producer_id), like Kafka's
    ConsumerRecord. A consumer then builds each record once instead of twice, a large part of its
    per-record cost (Consumer.poll against store.log.fetch_many: docs/bench/report.md, "Read rates")."""
    return _fetch_many(conn, positions, max_records, read_committed, record_type, tagged=True)


def fetch_many_wire(
    conn: sa.Connection,
    positions: Mapping[tuple[str, int], int],
    *,
    max_records: int = 500,
    read_committed: bool = True,
) -> dict[tuple[str, int], PartitionFetch[WireRecord]]:
    """:func:`fetch_many` for a wire protocol (``oncelog broker``): each record's timestamp in
    milliseconds since the Unix epoch (:class:`WireRecord`). The driver reads it as the integer
    it is on the wire (microseconds since 2000), not as a datetime, which cost a third of the
    broker's reading of a record. A timestamp no datetime can hold (infinite, stored before
    revision 0017 refused it) is sent as the number it is instead of failing the fetch."""
    return _fetch_many(conn, positions, max_records, read_committed, WireRecord, tagged=False, wire=True)


#: PostgreSQL's epoch (2000-01-01) in milliseconds since the Unix epoch.
_PG_EPOCH_MS = 946_684_800_000
#: The driver's binary loader of bigint: a binary timestamptz is a bigint of microseconds since 2000.
_INT8_BINARY = psycopg.adapters.get_loader(psycopg.adapters.types["int8"].oid, psycopg.pq.Format.BINARY)


def _fetch_many(
    conn: sa.Connection,
    positions: Mapping[tuple[str, int], int],
    max_records: int,
    read_committed: bool,
    record_type: type[Any],
    *,
    tagged: bool,
    wire: bool = False,
) -> dict[tuple[str, int], PartitionFetch[Any]]:
    keys = list(positions)
    params = {
        "topics": [t for t, _ in keys],
        "partitions": [p for _, p in keys],
        "offsets": [positions[k] for k in keys],
        "max_records": max_records,
        "read_committed": read_committed,
    }
    # The hot read path talks to psycopg directly: a binary, prepared statement and plain tuples
    # cost far less than SQLAlchemy rows in text format (bench/transactions.py's read cases;
    # docs/bench/report.md, "Read rates", has the binary and text-format baselines).
    # The statement runs inside whatever transaction ``conn`` is in, like every store call.
    with mapped_errors(), runtime.driver_cursor(conn, binary=True) as cur:
        if wire:
            cur.adapters.register_loader("timestamptz", _INT8_BINARY)
        cur.execute(_FETCH, params, prepare=True)
        try:
            rows = cur.fetchall()
        except psycopg.DataError as exc:
            # A value the driver cannot represent: a timestamp past year 9999 or infinite, stored
            # before revision 0017 refused them (or by the schema owner). Find the record.
            raise _corrupt_record(cur, keys, params) from exc
    out: dict[tuple[str, int], PartitionFetch[Any]] = {}
    append = None
    prefix: tuple[Any, ...] = ()
    # tuple.__new__ straight into the named tuple: far cheaper than calling its class, and
    # this loop runs once per record read.
    new = tuple.__new__
    for idx, offset, key, value, headers, timestamp, producer_id, epoch, sequence, bounds, error in rows:
        if offset is None:  # the partition's row comes first, then its records in offset order
            log_start, high, stable, limit, expired = bounds if bounds is not None else (None,) * 5
            fetch: PartitionFetch[Any] = PartitionFetch(
                records=[],
                log_start_offset=log_start,
                high_watermark=high,
                last_stable_offset=stable,
                read_limit=limit,
                expired_transaction=bool(expired),
                error=error,
            )
            out[keys[idx - 1]] = fetch
            append = fetch.records.append
            prefix = keys[idx - 1] if tagged else ()
            continue
        if append is None:  # fetch_v3 orders each partition's row before its records
            raise IllegalStateError("fetch_v3 answered a record before its partition's row")
        try:
            hdrs = decode_headers(headers) if headers else ()
        except InvalidRecordError as exc:
            topic, partition = keys[idx - 1]
            raise CorruptRecordError(
                f"{topic}-{partition} offset {offset}: {exc.message}", topic=topic, partition=partition, offset=offset
            ) from exc
        if tagged:
            append(new(record_type, (*prefix, offset, key, value, hdrs, timestamp, producer_id)))
        elif wire:
            ms = timestamp // 1000 + _PG_EPOCH_MS
            append(new(record_type, (offset, key, value, hdrs, ms, producer_id, epoch, sequence)))
        else:
            append(new(record_type, (offset, key, value, hdrs, timestamp, producer_id, epoch, sequence)))
    return out


def _corrupt_record(
    cur: psycopg.Cursor[Any], keys: list[tuple[str, int]], params: dict[str, Any]
) -> CorruptRecordError:
    """The error naming the first record of a fetch whose timestamp the driver could not decode.

    The same fetch runs again, and the server picks the record out of its rows: the reader needs
    no right beyond the fetch's own."""
    found = cur.execute(_FIRST_UNREADABLE, params).fetchone()
    if found is None:  # gone meanwhile (retention): nothing to name, the next fetch reads on
        return CorruptRecordError("a record of this fetch could not be decoded; fetch again")
    topic, partition = keys[found[0] - 1]
    offset = int(found[1])
    return CorruptRecordError(
        f"{topic}-{partition} offset {offset}: its timestamp cannot be represented; seek past it to read on",
        topic=topic,
        partition=partition,
        offset=offset,
    )


#: The first record of a fetch whose timestamp a client cannot represent (Python's datetime spans
#: years 1 to 9999; 'infinity' is none). Revision 0017 refuses such timestamps on the write path.
_FIRST_UNREADABLE = (
    'SELECT idx, "offset" FROM fetch_v3(%(topics)s::text[], %(partitions)s::integer[], %(offsets)s::bigint[], '
    "%(max_records)s::integer, %(read_committed)s::boolean) "
    'WHERE "offset" IS NOT NULL AND NOT (isfinite("timestamp") AND "timestamp" >= \'0001-01-01 00:00:00+00\' '
    'AND "timestamp" < \'10000-01-01 00:00:00+00\') ORDER BY idx, "offset" LIMIT 1'
)


def fetch(
    conn: sa.Connection,
    *,
    topic: str,
    partition: int,
    offset: int,
    max_records: int = 500,
    read_committed: bool = False,
) -> FetchResult:
    """Fetch one partition from ``offset`` (read_uncommitted unless asked).

    UnknownTopicOrPartitionError or OffsetOutOfRangeError when the partition or offset is not there.
    """
    part = fetch_many(conn, {(topic, partition): offset}, max_records=max_records, read_committed=read_committed)[
        (topic, partition)
    ]
    if part.error == "unknown_topic_or_partition":
        raise UnknownTopicOrPartitionError(f"unknown partition {partition} of topic {topic!r}")
    if part.error == "offset_out_of_range":
        raise OffsetOutOfRangeError(
            f"offset {offset} is outside {topic}-{partition}: the log holds "
            f"[{part.log_start_offset}, {part.high_watermark})"
        )
    if part.high_watermark is None:  # set on every row without an error
        raise IllegalStateError(f"fetch_v3 answered no high watermark for {topic}-{partition}")
    return FetchResult(part.records, part.high_watermark)


def fetch_wait(
    conn: sa.Connection,
    partitions: Sequence[tuple[str, int]],
    *,
    read_committed: bool,
    wait_ms: int,
    one_shot: bool = False,
) -> WaitRegistration:
    """Register a reader's wait for records on ``partitions`` (commits for read_committed,
    appends otherwise) for ``wait_ms`` milliseconds, and LISTEN on ``conn`` for the wake-ups
    (which :func:`await_wakeup` then waits for). Fetch once more before waiting: a write that
    committed before this returned is seen by that fetch, one after it wakes the reader. ``conn``
    must be in autocommit, so the LISTEN takes effect now.

    ``one_shot`` (``fetch_wait_v2``): the registration also ends with the first wake-up sent for
    one of its partitions, which every reader registered there hears; register again before
    waiting again. Otherwise (``fetch_wait_v1``) every write wakes the readers until ``wait_ms``
    is up."""
    function = "fetch_wait_v2" if one_shot else "fetch_wait_v1"
    rows = _driver(
        conn,
        f"SELECT channel, topic, topic_id FROM {function}(%(topics)s::text[], %(partitions)s::integer[], "
        "%(read_committed)s, %(wait_ms)s)",
        {
            "topics": [t for t, _ in partitions],
            "partitions": [p for _, p in partitions],
            "read_committed": read_committed,
            "wait_ms": wait_ms,
        },
    ).all()
    ids = {r.topic: int(r.topic_id) for r in rows}
    channel = str(rows[0].channel) if rows else ""
    return WaitRegistration(channel, frozenset(_token(ids[t], p) for t, p in partitions if t in ids))


def await_wakeup(conn: sa.Connection, registration: WaitRegistration, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for a wake-up that concerns ``registration`` (a NOTIFY
    from :func:`wake_readers` naming one of its partitions) on ``conn``, which :func:`fetch_wait`
    registered. Returns whether one came; wake-ups for other partitions are passed over.
    Wake-ups that arrived while ``conn`` ran other statements are queued by the driver and count."""
    if not registration.channel:
        return False
    return await_notification(
        conn, registration.channel, lambda payload: not registration.tokens.isdisjoint(payload.split(",")), timeout
    )


def await_notification(conn: sa.Connection, channel: str, wanted: Callable[[str], bool], timeout: float) -> bool:
    """Wait up to ``timeout`` seconds on ``conn`` (which LISTENs on ``channel``) for a NOTIFY on
    it whose payload is ``wanted``; others are passed over. Notifications that arrived while
    ``conn`` ran other statements are queued by the driver and count."""
    deadline = time.monotonic() + max(timeout, 0.0)
    with mapped_errors():
        while True:
            notes = runtime.notifications(conn, max(deadline - time.monotonic(), 0.0))
            if any(note.channel == channel and wanted(note.payload) for note in notes):
                return True
            if time.monotonic() >= deadline:
                return False


def wakeups(conn: sa.Connection, channel: str, timeout: float) -> set[str]:
    """The wake tokens announced on ``channel`` to ``conn`` (which LISTENs on it, through
    :func:`fetch_wait`): those the driver queued already, else those of the first NOTIFY to arrive
    within ``timeout`` seconds (with any that came in the same read); empty if none came. For a
    session that waits on behalf of many readers and hands each wake-up on (``oncelog broker``)."""
    with mapped_errors():
        notes = runtime.notifications(conn, max(timeout, 0.0))
    return {token for note in notes if note.channel == channel for token in note.payload.split(",") if token}


def drain_wakeups(conn: sa.Connection) -> None:
    """Forget the wake-ups queued on ``conn`` (they are about writes a fetch is about to see)."""
    with mapped_errors():
        while runtime.notifications(conn, 0):
            pass


def stop_waiting(conn: sa.Connection) -> None:
    """Stop listening for wake-ups on ``conn`` (before it goes back to a pool, where wake-ups
    would otherwise pile up in the driver for whoever uses it next)."""
    with mapped_errors():
        conn.exec_driver_sql("UNLISTEN *")


def wake_channel(conn: sa.Connection) -> str:
    """The channel on which this schema's waiting readers listen (it never changes: ask once)."""
    return str(_driver(conn, "SELECT wake_channel_v1()", {}).scalar_one())


def wake_readers(conn: sa.Connection, tokens: Sequence[str]) -> int:
    """Wake the readers waiting on the partitions of ``tokens`` (the ``wake`` a write answered
    with): ``wake_readers_v1`` NOTIFYs this schema's channel with them and ends the one-shot
    registrations they answered, in a transaction of its own, so call it outside the write's
    transaction, after the write committed. Returns the NOTIFYs sent."""
    # A busy producer calls this once per commit that found a reader waiting, so this call's cost
    # is the producers' cost of waking readers: psycopg itself and a prepared statement, as
    # fetches do.
    #
    # A NOTIFY's transaction takes an xid, so its commit flushes the WAL, and PostgreSQL holds
    # its database-wide notification lock until that commit is done: each producer's wake-up
    # waited for an fsync, and the wake-ups of all producers queued behind one another's. In a
    # transaction of its own (autocommit) the NOTIFY therefore commits without waiting for the
    # flush (synchronous_commit off for that transaction only): a crash can lose a wake-up,
    # which nothing needs (the readers look again by themselves), never a record. Inside a
    # caller's transaction the caller's durability is left alone.
    driver = conn.connection.driver_connection
    statement = _WAKE_NOW if driver is not None and driver.autocommit else _WAKE
    distinct = sorted(set(tokens))
    sent = 0
    with mapped_errors(), runtime.driver_cursor(conn) as cur:
        for start in range(0, len(distinct), _MAX_WAKE_TOKENS):
            cur.execute(statement, (distinct[start : start + _MAX_WAKE_TOKENS],), prepare=True)
            row = cur.fetchone()
            sent += int(row[0]) if row is not None else 0
    return sent


_WAKE = "SELECT wake_readers_v1(%s::text[])"
_WAKE_NOW = "SELECT wake_readers_v1(%s::text[]), set_config('synchronous_commit', 'off', true)"
#: The most tokens wake_readers_v1 takes in one call.
_MAX_WAKE_TOKENS = 10_000


def _token(topic_id: int, partition: int) -> str:
    """A partition's wake token, as the store writes it (fetch_waiting_v1, txn_waiters_v1)."""
    return f"{topic_id}:{partition}"


def list_offsets(conn: sa.Connection, *, topic: str) -> list[PartitionOffsets]:
    """ListOffsets: log start offset, high watermark and last stable offset of every partition."""
    rows = _driver(
        conn,
        "SELECT partition, log_start_offset, high_watermark, last_stable_offset FROM partition_offsets "
        "WHERE topic = %(topic)s ORDER BY partition",
        {"topic": topic},
    ).all()
    if not rows:
        # The view hides topics a role may not describe (ACLs): the protocol function says which
        # it is, unknown or not authorized, with the typed error.
        _driver(conn, "SELECT * FROM list_offsets_v1(%(topic)s)", {"topic": topic}).all()
        raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
    return [
        PartitionOffsets(int(r.partition), int(r.log_start_offset), int(r.high_watermark), int(r.last_stable_offset))
        for r in rows
    ]


def list_offsets_max_timestamp(
    conn: sa.Connection, *, partitions: Sequence[tuple[str, int]], read_committed: bool
) -> list[tuple[int, datetime] | None]:
    """ListOffsets for the largest timestamp (Kafka's MAX_TIMESTAMP, -3): for each (topic,
    partition), in order, the offset and timestamp of the data record with the largest timestamp
    (the first of equals) that a reader of the isolation level could read, or None when there is
    none. Reads the whole partition. Needs DESCRIBE on the topics (TopicAuthorizationError);
    UnknownTopicOrPartitionError names an unknown partition."""
    if not partitions:
        return []
    rows = _driver(
        conn,
        'SELECT idx, "offset", "timestamp" FROM list_offsets_max_timestamp_v1('
        "%(topics)s::text[], %(partitions)s::integer[], %(committed)s) ORDER BY idx",
        {"topics": [t for t, _ in partitions], "partitions": [p for _, p in partitions], "committed": read_committed},
    ).all()
    return [None if r.offset is None else (int(r.offset), r.timestamp) for r in rows]


def list_offsets_for_times(
    conn: sa.Connection, *, requests: Sequence[tuple[str, int, datetime]], read_committed: bool
) -> list[tuple[int, datetime] | None]:
    """ListOffsets by timestamp: for each (topic, partition, timestamp), in order, the offset and
    timestamp of the first record at or after that time (read_committed: below the last stable
    offset, not aborted), or None when there is none. Needs DESCRIBE on the topics
    (TopicAuthorizationError); UnknownTopicOrPartitionError names an unknown partition."""
    if not requests:
        return []
    rows = _driver(
        conn,
        'SELECT idx, "offset", "timestamp" FROM list_offsets_for_times_v1('
        "%(topics)s::text[], %(partitions)s::integer[], %(timestamps)s::timestamptz[], %(committed)s) ORDER BY idx",
        {
            "topics": [t for t, _, _ in requests],
            "partitions": [p for _, p, _ in requests],
            "timestamps": [ts for _, _, ts in requests],
            "committed": read_committed,
        },
    ).all()
    return [None if r.offset is None else (int(r.offset), r.timestamp) for r in rows]


def expire_producers(conn: sa.Connection) -> int:
    """Maintenance, at the server's time: drop producer state idle past the expiration; returns the
    state rows removed."""
    return int(_driver(conn, "SELECT expire_producers_v2()", {}).scalar_one())


def enforce_retention(conn: sa.Connection, *, batch: int = 10_000) -> int:
    """Maintenance, at the server's time: one bounded retention pass; returns records deleted
    (repeat until 0)."""
    return int(_driver(conn, "SELECT enforce_retention_v2(%(batch)s)", {"batch": batch}).scalar_one())


def consistent_limits(conn: sa.Connection, ranges: Sequence[tuple[str, int, int, int]]) -> dict[tuple[str, int], int]:
    """For ``(topic, partition, start, limit)`` ranges below their last stable offsets, the limits
    under which every committed transaction is readable on all of these partitions or on none."""
    rows = _driver(
        conn,
        "SELECT topic, partition, read_limit FROM read_limits_v1(%(topics)s::text[], %(parts)s::integer[], "
        "%(starts)s::bigint[], %(limits)s::bigint[])",
        {
            "topics": [r[0] for r in ranges],
            "parts": [r[1] for r in ranges],
            "starts": [r[2] for r in ranges],
            "limits": [r[3] for r in ranges],
        },
    ).all()
    return {(r.topic, int(r.partition)): int(r.read_limit) for r in rows}


def stable_bounds(conn: sa.Connection, *, topics: Sequence[str]) -> list[PartitionOffsets]:
    """Log start, high watermark and last stable offset of every partition of ``topics``, fixed
    in ONE snapshot: below these last stable offsets every record is decided and immutable."""
    rows = _driver(
        conn,
        "SELECT topic, partition, log_start_offset, high_watermark, last_stable_offset FROM partition_offsets "
        "WHERE topic = ANY(%(topics)s::text[]) ORDER BY topic, partition",
        {"topics": list(topics)},
    ).all()
    found = {r.topic for r in rows}
    missing = [t for t in topics if t not in found]
    if missing:
        raise UnknownTopicOrPartitionError(f"unknown topics {missing}")
    return [
        PartitionOffsets(
            int(r.partition), int(r.log_start_offset), int(r.high_watermark), int(r.last_stable_offset), r.topic
        )
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class LoggedRecord:
    """One offset of a partition as the log holds it, data or control record (see :func:`read_log`)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    control_type: str | None
    """``'commit'`` or ``'abort'`` for a transaction marker, None for a data record."""
    is_transactional: bool
    aborted: bool
    producer_id: int | None


def read_log(conn: sa.Connection, *, topics: Sequence[str]) -> list[LoggedRecord]:
    """Every record still in the log of ``topics``, in ONE snapshot, ordered by topic, partition
    and offset: data records with their transactional and aborted flags, and the control records
    (commit and abort markers) that no fetch returns. An auditor's raw view of the log (what
    ``oncelog verify`` compares the clients' histories with); no isolation level applies."""
    query = (
        sa.select(
            schema.topics.c.name,
            schema.records.c.partition,
            schema.records.c.offset,
            schema.records.c.value,
            schema.records.c.control_type,
            schema.records.c.is_transactional,
            schema.records.c.aborted,
            schema.records.c.producer_id,
        )
        .join(schema.topics, schema.topics.c.topic_id == schema.records.c.topic_id)
        .where(schema.topics.c.name.in_(list(topics)))
        .order_by(schema.topics.c.name, schema.records.c.partition, schema.records.c.offset)
    )
    with mapped_errors():
        rows = conn.execute(query).all()
    return [
        LoggedRecord(
            topic=r.name,
            partition=int(r.partition),
            offset=int(r.offset),
            value=None if r.value is None else bytes(r.value),
            control_type=r.control_type,
            is_transactional=bool(r.is_transactional),
            aborted=bool(r.aborted),
            producer_id=None if r.producer_id is None else int(r.producer_id),
        )
        for r in rows
    ]
