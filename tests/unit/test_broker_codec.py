"""The broker's record-batch codec against an independent one (kafka-python's pure-Python
``kafka.record``): what a Kafka client's batches say reaches the store's columns unchanged, what
the broker sends back decodes to the stored records, and every record set a hostile client can
send is refused with Kafka's error code, never with a crash that would close the connection and
lose the request's other partitions."""

from __future__ import annotations

import gzip
import json
import struct
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from oncelog.broker.codec import BadBatch, commit_marker, fetched_batches, parse_produced
from oncelog.store.records import WireRecord, decode_headers

CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, INVALID_RECORD = 2, 10, 32, 87
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
NOW_MS = 1_764_300_000_000

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def _batch(
    records: list[Record],
    *,
    codec: int = 0,
    producer: tuple[int, int, int] = (7, 3, 40),
    transactional: bool = False,
) -> bytes:
    """``records`` (key, value, headers, timestamp ms) as one v2 batch, by kafka-python's builder."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=2**31 - 1,
    )
    for delta, (key, value, headers, ms) in enumerate(records):
        builder.append(delta, ms, key, value, headers)
    return bytes(builder.build())


def _resigned(buffer: bytearray) -> bytes:
    """``buffer`` with its CRC computed again: a hostile client signs what it sends."""
    struct.pack_into(">I", buffer, 17, calc_crc32c(bytes(buffer[21:])))
    return bytes(buffer)


def _refusal(data: bytes) -> int:
    with pytest.raises(BadBatch) as refused:
        parse_produced(data)
    return refused.value.code


RECORDS: list[Record] = [
    (b"k0", b"v0", [], NOW_MS),
    (None, b"no key", [("h", b"x"), ("empty", b""), ("none", None)], NOW_MS),
    (b"tombstone", None, [], NOW_MS + 5),
    (b"", b"", [("\u00e9t\u00e9", b"\x00\xff")], NOW_MS - 10),
]


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_clients_batch_reaches_the_store_columns_unchanged(codec: str) -> None:
    batch = parse_produced(_batch(RECORDS, codec=CODECS[codec]))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.transactional) == (7, 3, 40, False)
    assert parse_produced(_batch(RECORDS[:1], codec=CODECS[codec], transactional=True)).transactional
    columns = batch.records
    assert columns.keys == [r[0] for r in RECORDS]
    assert columns.values == [r[1] for r in RECORDS]
    assert columns.timestamps == [datetime.fromtimestamp(r[3] / 1000, UTC) for r in RECORDS]
    assert columns.headers is not None
    stored = [None if h is None else json.loads(h) for h in columns.headers]
    assert [list(decode_headers(h)) for h in stored] == [r[2] for r in RECORDS]


def test_a_batch_without_a_producer_id_goes_in_as_not_idempotent() -> None:
    batch = parse_produced(_batch(RECORDS[:1], producer=(-1, -1, -1)))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (None, None, None)
    assert batch.records.headers is None


def test_fetched_records_decode_as_kafka_writes_them() -> None:
    at = NOW_MS
    fetched = [
        WireRecord(10, b"a", b"1", (), at, 7, 3, 40),
        WireRecord(11, None, b"2", (("h", b"x"), ("n", None)), at + 3, 7, 3, 41),
        # an offset gap (a marker or an aborted record left out) starts a new batch
        WireRecord(13, b"c", None, (), at, 7, 3, 42),
        # another producer starts a new batch; a record without a sequence gets none
        WireRecord(14, b"d", b"4", (), at, None),
    ]
    records = MemoryRecords(fetched_batches(fetched))
    seen: list[tuple[int, int, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = []
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc()
        assert not batch.is_transactional and not batch.is_control_batch
        seen += [
            (
                r.offset,
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                r.key,
                r.value,
                r.headers,
                r.timestamp,
            )
            for r in batch
        ]
    assert seen == [
        (10, 7, 3, 40, b"a", b"1", [], NOW_MS),
        (11, 7, 3, 40, None, b"2", [("h", b"x"), ("n", None)], NOW_MS + 3),
        (13, 7, 3, 42, b"c", None, [], NOW_MS),
        (14, -1, -1, -1, b"d", b"4", [], NOW_MS),
    ]


def test_a_commit_marker_is_a_signed_control_batch_at_its_offset() -> None:
    records = MemoryRecords(commit_marker(99, NOW_MS))
    batch = records.next_batch()
    assert not records.has_next()
    assert isinstance(batch, DefaultRecordBatch)
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
    assert batch.base_offset == 99 and batch.next_offset == 100


# --- what a hostile client can send ----------------------------------------------------------------


def test_a_record_set_is_one_whole_batch() -> None:
    # Kafka's ProduceRequest.validateRecords (Produce v3 and later): exactly one batch, INVALID_RECORD
    # otherwise; a batch cut short is CORRUPT_MESSAGE here (Kafka's readers would drop it unseen).
    whole = _batch(RECORDS)
    assert _refusal(b"") == INVALID_RECORD
    for cut in range(1, len(whole)):
        assert _refusal(whole[:cut]) == CORRUPT_MESSAGE, f"cut at {cut}"
    assert _refusal(whole + _batch(RECORDS[:1], producer=(7, 3, 44))) == INVALID_RECORD
    assert _refusal(whole + b"\x00") == INVALID_RECORD


def test_a_batch_length_that_does_not_fit_is_corrupt() -> None:
    for length in (-1, -(2**31), 0, 48, 2**31 - 1):
        buffer = bytearray(_batch(RECORDS))
        struct.pack_into(">i", buffer, 8, length)
        assert _refusal(bytes(buffer)) == CORRUPT_MESSAGE, length


@pytest.mark.parametrize("magic", [0, 1, 3, 255])
def test_other_message_formats_are_refused(magic: int) -> None:
    buffer = bytearray(_batch(RECORDS))
    buffer[16] = magic
    assert _refusal(bytes(buffer)) == INVALID_RECORD  # as Kafka answers them in Produce v3 and later
    assert _refusal(bytes(buffer[:17])) == INVALID_RECORD


def test_every_flipped_byte_fails_the_crc() -> None:
    data = _batch(RECORDS)
    for i in range(17, len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x40
        assert _refusal(bytes(flipped)) == CORRUPT_MESSAGE, f"byte {i}"


def test_control_batches_and_batches_without_records_are_invalid() -> None:
    control = bytearray(_batch(RECORDS))
    struct.pack_into(">h", control, 21, struct.unpack_from(">h", control, 21)[0] | 0x20)
    assert _refusal(_resigned(control)) == INVALID_RECORD
    empty = bytearray(_batch(RECORDS[:1]))
    del empty[61:]
    struct.pack_into(">i", empty, 8, 61 - 12)
    struct.pack_into(">i", empty, 57, 0)
    assert _refusal(_resigned(empty)) == INVALID_RECORD


@pytest.mark.parametrize("delta", [-1, 0, 2, 4, 2**31 - 1])
def test_a_last_offset_delta_that_does_not_match_the_count_is_invalid(delta: int) -> None:
    """Kafka's LogValidator.validateBatch: the offsets the header spans hold its count of records
    (4 here, so a delta of 3); any other delta is INVALID_RECORD, whatever the records decode to."""
    data = bytearray(_batch(RECORDS))
    assert struct.unpack_from(">i", data, 23)[0] == 3
    struct.pack_into(">i", data, 23, delta)
    assert _refusal(_resigned(data)) == INVALID_RECORD


def test_an_idempotent_batch_without_a_sequence_is_invalid() -> None:
    assert _refusal(_batch(RECORDS, producer=(7, 3, -1))) == INVALID_RECORD
    plain = parse_produced(_batch(RECORDS, producer=(-1, -1, -1)))  # no producer id: no sequence needed
    assert (plain.producer_id, plain.base_sequence) == (None, None)


def test_a_header_key_the_log_cannot_hold_is_invalid() -> None:
    assert _refusal(_batch([(b"k", b"v", [("a\x00b", b"x")], NOW_MS)])) == INVALID_RECORD


def test_a_header_key_not_utf8_is_corrupt() -> None:
    data = bytearray(_batch([(b"k", b"v", [("\u00e9", b"x")], NOW_MS)]))
    at = data.index("\u00e9".encode())
    data[at : at + 2] = b"\xff\xfe"
    assert _refusal(_resigned(data)) == CORRUPT_MESSAGE


@pytest.mark.parametrize("ms", [2**62, -(2**62), 253_402_300_800_000])
def test_a_timestamp_beyond_the_log_is_invalid(ms: int) -> None:
    assert _refusal(_batch([(b"k", b"v", [], ms)])) == INVALID_TIMESTAMP


@settings(database=None, max_examples=1500, deadline=None)
@given(
    codec=st.sampled_from(sorted(CODECS.values())),
    changes=st.lists(st.tuples(st.integers(min_value=21), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_signed_garbage_in_a_batch_is_refused_with_a_code_never_a_crash(
    codec: int, changes: list[tuple[int, int]]
) -> None:
    # The CRC is no defence against a client that computes it: whatever the bytes after it say
    # (varints, lengths, a codec's stream), the answer is a batch or a Kafka error code.
    data = bytearray(_batch(RECORDS, codec=codec))
    for at, value in changes:
        data[21 + (at - 21) % (len(data) - 21)] = value
    try:
        batch = parse_produced(_resigned(data))
    except BadBatch as refused:
        assert refused.code in (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, INVALID_RECORD)
    else:
        assert len(batch.records.values) == len(batch.records.keys) == len(batch.records.timestamps or ())


# --- what compressed records inflate to -----------------------------------------------------------
#: Compressors of the records section, as a hostile client may use them (raw snappy, without the
#: xerial framing kafka-python's builder writes).
COMPRESS: dict[int, Callable[[bytes], bytes]] = {
    1: lambda b: gzip.compress(b, compresslevel=1),
    2: lambda b: bytes(cramjam.snappy.compress_raw(b)),
    3: lambda b: bytes(cramjam.lz4.compress(b)),
    4: lambda b: bytes(cramjam.zstd.compress(b)),
}


def _with_records(batch: bytes, payload: bytes, codec: int) -> bytes:
    """``batch``'s header (its producer, its record count) around ``payload`` as its records
    section, compressed with ``codec``, and signed."""
    header = bytearray(batch[:61])
    header[22] = (header[22] & ~0x07) | codec
    struct.pack_into(">i", header, 8, 61 - 12 + len(payload))
    return _resigned(header + payload)


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_records_are_refused_past_the_limit_and_taken_up_to_it(codec: str) -> None:
    """MESSAGE_TOO_LARGE one byte past what the records take decompressed; taken at exactly that."""
    data = _batch([(None, b"a" * 10_000, [], NOW_MS)] * 50, codec=CODECS[codec])
    size = parse_produced(data).size
    assert size > 500_000
    assert parse_produced(data, size).records.values == [b"a" * 10_000] * 50
    with pytest.raises(BadBatch) as refused:
        parse_produced(data, size - 1)
    assert refused.value.code == MESSAGE_TOO_LARGE


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_every_codec_a_client_may_use_is_read(codec: int) -> None:
    plain = _batch(RECORDS)
    batch = parse_produced(_with_records(plain, COMPRESS[codec](plain[61:]), codec))
    assert batch.records.values == [r[1] for r in RECORDS]
    assert batch.size == len(plain) - 61


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_a_compression_bomb_is_refused_before_it_is_in_memory(codec: int) -> None:
    """A hostile client signs 64 MiB of zeros compressed to a few kilobytes: refused as
    MESSAGE_TOO_LARGE at the limit, having allocated about the limit, not the 64 MiB (the
    decompression used to be whole, and unbounded)."""
    bomb = _with_records(_batch(RECORDS[:1]), COMPRESS[codec](bytes(64 << 20)), codec)
    assert len(bomb) < 4 << 20
    tracemalloc.start()
    try:
        with pytest.raises(BadBatch) as refused:
            parse_produced(bomb, 1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused.value.code == MESSAGE_TOO_LARGE
    assert peak < len(bomb) + (8 << 20), peak


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_a_stream_cut_short_or_with_trailing_bytes_is_corrupt(codec: int) -> None:
    plain = _batch(RECORDS)
    packed = COMPRESS[codec](plain[61:])
    for payload in (packed[: len(packed) // 2], packed + b"\x00" * 9):
        assert _refusal(_with_records(plain, payload, codec)) == CORRUPT_MESSAGE


@settings(database=None, max_examples=600, deadline=None)
@given(codec=st.sampled_from(sorted(COMPRESS)), payload=st.binary(max_size=300), compressed=st.booleans())
def test_any_signed_records_section_is_read_or_refused_with_a_code(
    codec: int, payload: bytes, compressed: bool
) -> None:
    # Bytes of the client's choosing as the compressed stream, or a stream of them compressed:
    # every decompressor's error, whatever its type, is a Kafka code.
    data = _with_records(_batch(RECORDS[:1]), COMPRESS[codec](payload) if compressed else payload, codec)
    try:
        parse_produced(data, 1 << 16)
    except BadBatch as refused:
        assert refused.code in (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_RECORD)
