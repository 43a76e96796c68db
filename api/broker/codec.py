"""The Kafka wire format: messages through kafka-python's codec, record batches through aiokafka's.

kafka-python >= 3 generates its message classes from Kafka's own JSON schemas (every version,
flexible versions with tagged fields): requests decode and responses encode with the library's
code. Record batches (magic 2, every compression codec) parse and build with aiokafka's compiled
codec, about ten times as fast as kafka-python's pure-Python one on the broker's hot path. What is
here is only the framing a server needs around those: the request header's version follows the
body's (flexible or not), an over-new ApiVersions gets error 35 in a v0 body, a produced record set
is checked to be one whole batch, and a fetched record run becomes a batch at its own
base offset, or a commit marker that moves a reader past a gap.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# Record batches with aiokafka's compiled codec: it decodes and builds them about ten times as
# fast as kafka-python's pure-Python one (bench/broker.py), and that is the broker's main cost.
from aiokafka.record.default_records import DefaultRecordBatch as RecordBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as RecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from oncelog.broker.inflate import Corrupt, TooLarge, inflate
from oncelog.errors import InvalidRecordError
from oncelog.store.records import RecordColumns, WireRecord, encode_headers

__all__ = [
    "REQUEST_CLASSES",
    "BadBatch",
    "ProducedBatch",
    "api_versions_refusal",
    "commit_marker",
    "decode_request",
    "encode_response",
    "fetched_batches",
    "parse_produced",
    "peek",
]

#: The request and response classes by API key, for the APIs the broker serves.
REQUEST_CLASSES: dict[int, tuple[Any, Any]] = {
    cls.API_KEY: (cls, resp)
    for cls, resp in (
        (ProduceRequest, ProduceResponse),
        (FetchRequest, FetchResponse),
        (ListOffsetsRequest, ListOffsetsResponse),
        (MetadataRequest, MetadataResponse),
        (ApiVersionsRequest, ApiVersionsResponse),
        (InitProducerIdRequest, InitProducerIdResponse),
        (FindCoordinatorRequest, FindCoordinatorResponse),
        (JoinGroupRequest, JoinGroupResponse),
        (SyncGroupRequest, SyncGroupResponse),
        (HeartbeatRequest, HeartbeatResponse),
        (LeaveGroupRequest, LeaveGroupResponse),
        (OffsetCommitRequest, OffsetCommitResponse),
        (OffsetFetchRequest, OffsetFetchResponse),
        (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
        (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
        (EndTxnRequest, EndTxnResponse),
        (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
        (CreateTopicsRequest, CreateTopicsResponse),
        (DeleteTopicsRequest, DeleteTopicsResponse),
        (DescribeConfigsRequest, DescribeConfigsResponse),
        (DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse),
        (DescribeAclsRequest, DescribeAclsResponse),
        (CreateAclsRequest, CreateAclsResponse),
        (DeleteAclsRequest, DeleteAclsResponse),
        (DeleteRecordsRequest, DeleteRecordsResponse),
        (DeleteGroupsRequest, DeleteGroupsResponse),
        (OffsetDeleteRequest, OffsetDeleteResponse),
        (ElectLeadersRequest, ElectLeadersResponse),
        (DescribeLogDirsRequest, DescribeLogDirsResponse),
        (AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse),
        (AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse),
        (ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse),
        (AlterConfigsRequest, AlterConfigsResponse),
        (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
        (CreatePartitionsRequest, CreatePartitionsResponse),
        (DescribeGroupsRequest, DescribeGroupsResponse),
        (ListGroupsRequest, ListGroupsResponse),
        (DescribeProducersRequest, DescribeProducersResponse),
        (DescribeTransactionsRequest, DescribeTransactionsResponse),
        (ListTransactionsRequest, ListTransactionsResponse),
        (SaslHandshakeRequest, SaslHandshakeResponse),
        (SaslAuthenticateRequest, SaslAuthenticateResponse),
    )
}

#: Kafka's UNSUPPORTED_VERSION.
UNSUPPORTED_VERSION = 35
_HEADER = struct.Struct(">hhi")


def peek(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame: the same bytes in every
    request header version."""
    api_key, version, correlation_id = _HEADER.unpack_from(frame, 0)
    return int(api_key), int(version), int(correlation_id)


def decode_request(frame: bytes, request_class: Any, version: int) -> tuple[str | None, Any]:
    """The client id and the request of ``frame`` (its bytes after the size prefix), a
    ``request_class`` at ``version``. Its header is v2 (tagged fields) exactly when that version
    is flexible."""
    stream = io.BytesIO(frame)
    header = RequestHeader.decode(stream, flexible=request_class.flexible_version_q(version))
    return header.client_id, request_class.decode(memoryview(frame)[stream.tell() :], version=version)


def encode_response(response: Any, correlation_id: int) -> bytes:
    """``response`` framed: size, header (v1 for a flexible version; ApiVersions always v0, which
    the library knows) and body."""
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def api_versions_refusal(correlation_id: int, ranges: Iterable[tuple[int, int, int]]) -> bytes:
    """The answer to an ApiVersions request newer than we serve: error 35 in a v0 body, with our
    ranges, so the client asks again at a version we have (as Kafka's brokers answer)."""
    api_version = ApiVersionsResponse.ApiVersion
    response = ApiVersionsResponse(
        version=0,
        error_code=UNSUPPORTED_VERSION,
        api_keys=[api_version(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in ranges],
    )
    return encode_response(response, correlation_id)


# --- produced batches -----------------------------------------------------------------------------


class BadBatch(Exception):
    """A produced record set the store cannot take: ``code`` is the Kafka error it answers."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


#: Kafka's CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP and INVALID_RECORD.
CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, INVALID_RECORD = 2, 10, 32, 87

#: The largest request accepted (Kafka's socket.request.max.bytes default), and the most that the
#: records of one Produce request may take once decompressed: a client gets no more memory from
#: the broker by compressing than it could by sending the same records plain.
MAX_REQUEST_BYTES = 100 * 1024 * 1024

# RecordBatch v2's header, as Kafka's DefaultRecordBatch lays it out: base offset (int64), batch
# length (int32, the bytes after it), partition leader epoch (int32), magic (int8), CRC (uint32,
# over the attributes onwards), attributes (int16), ... 61 bytes in all.
_OFFSET, _LENGTH, _ATTRIBUTES, _CRC = struct.Struct(">q"), struct.Struct(">i"), struct.Struct(">h"), struct.Struct(">I")
_LOG_OVERHEAD, _MAGIC_OFFSET, _CRC_OFFSET, _ATTRIBUTES_OFFSET, _BATCH_HEADER_SIZE = 12, 16, 17, 21, 61
_CONTROL, _CODEC = 0x20, 0x07
#: The header's record count (int32) comes last, at byte 57.
_COUNT_OFFSET = 57


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    """One record batch of a Produce request, as the store takes it."""

    producer_id: int | None
    producer_epoch: int | None
    base_sequence: int | None
    transactional: bool
    records: RecordColumns
    size: int
    """The bytes of its records, decompressed: what it takes of its request's ``limit``."""


def parse_produced(data: bytes | None, limit: int = MAX_REQUEST_BYTES) -> ProducedBatch:
    """One partition's record set, which must be exactly one RecordBatch v2 (any codec), as
    Kafka's ProduceRequest.validateRecords requires from Produce v3 on: no batch, more than one or
    another magic is INVALID_RECORD. So is a control batch, one without records, one whose last
    offset delta does not match its count of records, or an idempotent one without a base
    sequence (LogValidator.validateBatch). A batch whose
    length field does not fit the record set, a bad CRC or a record that does not decode is
    CORRUPT_MESSAGE (Kafka's readers drop a batch cut short; a producer never sends one, and
    dropping it here would acknowledge records that were not appended). Records that take more
    than ``limit`` bytes decompressed are MESSAGE_TOO_LARGE, found before they are all in memory
    (:mod:`oncelog.broker.inflate`)."""
    data = bytes(data or b"")
    if len(data) <= _MAGIC_OFFSET:
        raise BadBatch(INVALID_RECORD if not data else CORRUPT_MESSAGE, "a record set without a whole batch")
    if data[_MAGIC_OFFSET] != 2:
        raise BadBatch(INVALID_RECORD, f"message format v{data[_MAGIC_OFFSET]}: Produce v3 and later take v2 only")
    # A batch's frame: base offset (8), length of the rest (4), ..., magic at byte 16.
    end = _LOG_OVERHEAD + _LENGTH.unpack_from(data, 8)[0]
    if not _BATCH_HEADER_SIZE <= end <= len(data):
        raise BadBatch(CORRUPT_MESSAGE, "a record batch whose length does not fit the record set")
    if end < len(data):
        raise BadBatch(INVALID_RECORD, "bytes after the record batch: Produce v3 and later take exactly one batch")
    batch = RecordBatch(data)
    if not batch.validate_crc():
        raise BadBatch(CORRUPT_MESSAGE, "a record batch failed its CRC check")
    if batch.is_control_batch:
        raise BadBatch(INVALID_RECORD, "a client may not write control batches")
    # Kafka's LogValidator.validateBatch for a client's batch: the offset range the header
    # declares holds exactly its count of records, and an idempotent batch has a sequence.
    count = _LENGTH.unpack_from(data, _COUNT_OFFSET)[0]
    if count <= 0 or batch.last_offset_delta + 1 != count:
        raise BadBatch(
            INVALID_RECORD, f"a batch of {count} records whose last offset delta is {batch.last_offset_delta}"
        )
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise BadBatch(INVALID_RECORD, f"base sequence {batch.base_sequence} in producer {batch.producer_id}'s batch")
    codec = data[_ATTRIBUTES_OFFSET + 1] & _CODEC
    if codec:
        data = _inflated(data, codec, limit)
        batch = RecordBatch(data)
    elif len(data) - _BATCH_HEADER_SIZE > limit:
        raise BadBatch(MESSAGE_TOO_LARGE, f"records of more than {limit} bytes in one request")
    rows = _columns(batch)
    if not rows.values:
        raise BadBatch(INVALID_RECORD, "a record batch without records")
    idempotent = batch.producer_id >= 0
    return ProducedBatch(
        producer_id=batch.producer_id if idempotent else None,
        producer_epoch=batch.producer_epoch if idempotent else None,
        base_sequence=batch.base_sequence if idempotent else None,
        transactional=batch.is_transactional,
        records=rows,
        size=len(data) - _BATCH_HEADER_SIZE,
    )


def _inflated(data: bytes, codec: int, limit: int) -> bytes:
    """The batch ``data`` (CRC checked) with its records decompressed and its codec bits cleared,
    so aiokafka's reader never decompresses a stream itself, without a bound."""
    try:
        records = inflate(codec, memoryview(data)[_BATCH_HEADER_SIZE:], limit)
    except TooLarge as exc:
        raise BadBatch(MESSAGE_TOO_LARGE, f"records of more than {limit} bytes in one request ({exc})") from None
    except (Corrupt, ValueError) as exc:
        raise BadBatch(CORRUPT_MESSAGE, f"a record batch that does not decompress ({exc})") from None
    header = bytearray(data[:_BATCH_HEADER_SIZE])
    header[_ATTRIBUTES_OFFSET + 1] &= ~_CODEC & 0xFF
    _LENGTH.pack_into(header, 8, _BATCH_HEADER_SIZE - _LOG_OVERHEAD + len(records))
    return bytes(header) + records


def _columns(batch: RecordBatch) -> RecordColumns:
    """A batch's records as the store's columns, built straight from the decoded records: no
    object per record, and one datetime per distinct timestamp (a producer stamps a batch's
    records alike, mostly), which halves the broker's per-record cost."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[str | None] = []
    timestamps: list[datetime | None] = []
    last_ms: int | None = None
    last_at: datetime | None = None
    any_headers = False
    try:
        for r in batch:
            keys.append(r.key)
            values.append(r.value)
            if r.headers:
                headers.append(encode_headers(r.headers))
                any_headers = True
            else:
                headers.append(None)
            ms = r.timestamp
            if ms != last_ms:
                last_ms, last_at = ms, _timestamp(ms)
            timestamps.append(last_at)
    except BadBatch:
        raise
    except InvalidRecordError as exc:
        raise BadBatch(INVALID_RECORD, exc.message) from None
    except Exception as exc:
        # Bytes that do not decode: a bad varint or length, a header key not UTF-8, or a codec's
        # own error (zlib.error, EOFError, gzip's, cramjam's): Kafka's broker answers them all
        # CORRUPT_MESSAGE, and so the whole request is not lost to one client's bad batch.
        raise BadBatch(CORRUPT_MESSAGE, f"a record batch that does not decode ({type(exc).__name__}: {exc})") from None
    return RecordColumns(keys=keys, values=values, headers=headers if any_headers else None, timestamps=timestamps)


def _timestamp(ms: int | None) -> datetime | None:
    """A record's CreateTime as the log stores it; INVALID_TIMESTAMP outside what a timestamptz
    and Python's datetime hold (years 1 to 9999)."""
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, ValueError, OSError):
        raise BadBatch(INVALID_TIMESTAMP, f"a record timestamp out of range: {ms} ms") from None


# --- fetched records ------------------------------------------------------------------------------


def _at(buffer: bytearray, base_offset: int) -> bytearray:
    # The base offset sits outside the CRC (which covers the attributes onwards): no new CRC.
    _OFFSET.pack_into(buffer, 0, base_offset)
    return buffer


def fetched_batches(records: Sequence[WireRecord]) -> bytes:
    """``records`` (ascending offsets) as v2 batches: one per run of consecutive offsets written
    by one producer id and epoch, carrying that producer's state as Kafka's log does. The batches
    are not marked transactional: the store returns only what the reader may see. One pass: a
    record that does not continue the run closes its batch and starts the next."""
    out = bytearray()
    builder: Any = None
    base = following = 0
    producer: tuple[int | None, int | None] = (None, None)
    for r in records:
        if builder is None or r.offset != following or (r.producer_id, r.producer_epoch) != producer:
            if builder is not None:
                out += _at(builder.build(), base)
            builder, base, producer = _builder(r), r.offset, (r.producer_id, r.producer_epoch)
        builder.append(r.offset - base, r.timestamp_ms, r.key, r.value, list(r.headers))
        following = r.offset + 1
    if builder is not None:
        out += _at(builder.build(), base)
    return bytes(out)


def _builder(first: WireRecord) -> Any:
    """A batch builder carrying the state of ``first``'s producer (its sequence, if it has one)."""
    sequenced = first.producer_id is not None and first.sequence is not None
    return RecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=first.producer_id if sequenced else -1,
        producer_epoch=first.producer_epoch if sequenced else -1,
        base_sequence=first.sequence if sequenced else -1,
        batch_size=2**31 - 1,
    )


def commit_marker(offset: int, timestamp_ms: int) -> bytes:
    """A commit marker batch at ``offset``: every client skips it and reads on from the next
    offset, which is how a reader is moved past offsets it must not see (markers, aborted records)
    when a fetch returned nothing after them."""
    builder = RecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**31 - 1,
    )
    # A control record: key (version 0, type 1 = commit), value (version 0, coordinator epoch 0).
    builder.append(0, timestamp_ms, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), [])
    buffer = builder.build()
    # No builder writes control batches (only Kafka's coordinator does): set the flag and re-sign.
    attributes = _ATTRIBUTES.unpack_from(buffer, _ATTRIBUTES_OFFSET)[0] | _CONTROL
    _ATTRIBUTES.pack_into(buffer, _ATTRIBUTES_OFFSET, attributes)
    _CRC.pack_into(buffer, _CRC_OFFSET, calc_crc32c(bytes(buffer[_ATTRIBUTES_OFFSET:])))
    return bytes(_at(buffer, offset))
