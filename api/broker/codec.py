"""The Kafka wire format, through kafka-python's codec (``kafka.protocol``, ``kafka.record``).

kafka-python >= 3 generates its message classes from Kafka's own JSON schemas (every version,
flexible versions with tagged fields): requests decode and responses encode with the library's
code, and record batches (magic 2, every compression codec) parse and build with it. What is here
is only the framing a server needs around that: the request header's version follows the body's
(flexible or not), an over-new ApiVersions gets error 35 in a v0 body, and a fetched record run
becomes a batch at its own base offset, or a commit marker that moves a reader past a gap.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

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
from kafka.record import MemoryRecords, MemoryRecordsBuilder
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from oncelog.errors import InvalidRecordError
from oncelog.store.records import FetchedRecord, RecordColumns, encode_headers

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


#: Kafka's CORRUPT_MESSAGE, UNSUPPORTED_FOR_MESSAGE_FORMAT and INVALID_RECORD.
CORRUPT_MESSAGE, UNSUPPORTED_FOR_MESSAGE_FORMAT, INVALID_RECORD = 2, 43, 87


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    """One record batch of a Produce request, as the store takes it."""

    producer_id: int | None
    producer_epoch: int | None
    base_sequence: int | None
    transactional: bool
    records: RecordColumns


def parse_produced(data: bytes | None) -> list[ProducedBatch]:
    """The batches of one partition's record set (RecordBatch v2, any codec). BadBatch for a
    legacy message set (magic 0 or 1), a bad CRC, a control batch or an empty set."""
    if not data:
        raise BadBatch(CORRUPT_MESSAGE, "an empty record set")
    records = MemoryRecords(bytes(data))
    batches: list[ProducedBatch] = []
    while records.has_next():
        batch = records.next_batch()
        if not isinstance(batch, DefaultRecordBatch):
            raise BadBatch(UNSUPPORTED_FOR_MESSAGE_FORMAT, f"message format v{batch.magic}: oncelog takes v2 only")
        if not batch.validate_crc():
            raise BadBatch(CORRUPT_MESSAGE, "a record batch failed its CRC check")
        if batch.is_control_batch:
            raise BadBatch(INVALID_RECORD, "a client may not write control batches")
        rows = _columns(batch)
        if not rows.values:
            raise BadBatch(INVALID_RECORD, "a record batch without records")
        idempotent = batch.producer_id >= 0
        batches.append(
            ProducedBatch(
                producer_id=batch.producer_id if idempotent else None,
                producer_epoch=batch.producer_epoch if idempotent else None,
                base_sequence=batch.base_sequence if idempotent else None,
                transactional=batch.is_transactional,
                records=rows,
            )
        )
    if not batches:
        raise BadBatch(CORRUPT_MESSAGE, "a record set without a whole batch")
    return batches


def _columns(batch: DefaultRecordBatch) -> RecordColumns:
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
    for r in batch:
        keys.append(r.key)
        values.append(r.value)
        if r.headers:
            try:
                headers.append(encode_headers(r.headers))
            except InvalidRecordError as exc:
                raise BadBatch(INVALID_RECORD, exc.message) from None
            any_headers = True
        else:
            headers.append(None)
        ms = r.timestamp
        if ms != last_ms:
            last_ms, last_at = ms, None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)
        timestamps.append(last_at)
    return RecordColumns(keys=keys, values=values, headers=headers if any_headers else None, timestamps=timestamps)


# --- fetched records ------------------------------------------------------------------------------

_CONTROL = DefaultRecordBatch.CONTROL_MASK


def _at(buffer: bytearray, base_offset: int) -> bytes:
    # The base offset sits outside the CRC (which covers the attributes onwards): no new CRC.
    struct.pack_into(">q", buffer, 0, base_offset)
    return bytes(buffer)


def fetched_batches(records: Sequence[FetchedRecord]) -> bytes:
    """``records`` (ascending offsets) as v2 batches: one per run of consecutive offsets written
    by one producer id and epoch, carrying that producer's state as Kafka's log does. The batches
    are not marked transactional: the store returns only what the reader may see."""
    out = bytearray()
    start = 0
    for i in range(1, len(records) + 1):
        if i < len(records):
            prev, rec = records[i - 1], records[i]
            if rec.offset == prev.offset + 1 and (rec.producer_id, rec.producer_epoch) == (
                prev.producer_id,
                prev.producer_epoch,
            ):
                continue
        out += _batch(records[start:i])
        start = i
    return bytes(out)


def _batch(run: Sequence[FetchedRecord]) -> bytes:
    first = run[0]
    sequenced = first.producer_id is not None and first.sequence is not None
    builder = MemoryRecordsBuilder(
        magic=2,
        compression_type=0,
        batch_size=2**31 - 1,
        offset=0,
        producer_id=first.producer_id if sequenced else -1,
        producer_epoch=first.producer_epoch if sequenced else -1,
        base_sequence=first.sequence if sequenced else -1,
    )
    for r in run:
        ts = int(r.timestamp.timestamp() * 1000)
        builder.append(ts, r.key, r.value, list(r.headers))
    builder.close()
    return _at(builder.buffer(), first.offset)


def commit_marker(offset: int, timestamp_ms: int) -> bytes:
    """A commit marker batch at ``offset``: every client skips it and reads on from the next
    offset, which is how a reader is moved past offsets it must not see (markers, aborted records)
    when a fetch returned nothing after them."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**31 - 1,
    )
    builder.append(0, timestamp_ms, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), [])
    buffer = builder.build()
    attributes = struct.unpack_from(">h", buffer, DefaultRecordBatch.ATTRIBUTES_OFFSET)[0] | _CONTROL
    struct.pack_into(">h", buffer, DefaultRecordBatch.ATTRIBUTES_OFFSET, attributes)
    crc = calc_crc32c(memoryview(buffer)[DefaultRecordBatch.ATTRIBUTES_OFFSET :])
    struct.pack_into(">I", buffer, DefaultRecordBatch.CRC_OFFSET, crc)
    return _at(buffer, offset)
