"""``oncelog broker``: Kafka's own clients against the store, end to end.

The clients are the real ones from PyPI: kafka-python (pure Python) and confluent-kafka
(librdkafka). What they write is read back through oncelog's own API, and what oncelog writes
(transactions committed and aborted) is read by them; the store's rules answer both. The broker
runs in this process on a thread of its own; the CLI test runs it as a user does.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import confluent_kafka as ck
import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse
from kafka.record import MemoryRecordsBuilder

import oncelog
from oncelog.broker import API_RANGES, Broker, Listener
from oncelog.store import create_engine
from tests.support.broker import broker_command
from tests.support.logcheck import read_partition

TOPIC = "orders"
PARTITIONS = 3


@pytest.fixture
def broker(db_url: str) -> Iterator[str]:
    """A broker on a free port over this test's database; its bootstrap address."""
    with oncelog.Admin(db_url) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS)
    engine = create_engine(db_url, pool_size=8)
    loop = asyncio.new_event_loop()
    server = Broker(engine, Listener("127.0.0.1", 0))
    loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.address.port}"
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        engine.dispose()


def consume_all(db_url: str, topic: str = TOPIC, partitions: int = PARTITIONS) -> dict[int, list[Any]]:
    """Every committed record of ``topic`` through oncelog's own reader, per partition."""
    return {p: read_partition(db_url, topic, p) for p in range(partitions)}


# --- Kafka's producers write, oncelog reads ---------------------------------------------------------


@pytest.mark.timeout(120)
def test_kafka_python_idempotent_producer_writes_what_oncelog_reads(db_url: str, broker: str) -> None:
    producer = KafkaProducer(bootstrap_servers=broker, enable_idempotence=True, linger_ms=5)
    try:
        sent = []
        for i in range(300):
            key, value = f"k{i % 17}".encode(), f"v{i}".encode()
            future = producer.send(TOPIC, value=value, key=key, headers=[("n", str(i).encode()), ("empty", b"")])
            sent.append((key, value, future))
        producer.flush(30)
        where = [(f.get(10).partition, f.get(10).offset) for _, _, f in sent]
    finally:
        producer.close(10)
    log = consume_all(db_url)
    for (key, value, _), (partition, offset) in zip(sent, where, strict=True):
        record = log[partition][offset]
        assert (record.key, record.value) == (key, value)
        assert record.headers == (("n", value[1:]), ("empty", b""))
    assert sum(len(records) for records in log.values()) == 300, "each record once"
    for records in log.values():
        # One idempotent producer: its store-issued id, sequences from 0 without a gap.
        assert len({r.producer_id for r in records}) == 1 and records[0].producer_id is not None
        assert [r.sequence for r in records] == list(range(len(records)))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_producer_writes_every_codec(db_url: str, broker: str, codec: str) -> None:
    delivered: list[tuple[int, int]] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset()))

    producer = ck.Producer(
        {"bootstrap.servers": broker, "enable.idempotence": True, "compression.type": codec, "linger.ms": 5}
    )
    values = [f"{codec}-{i}-".encode() * 20 for i in range(200)]
    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value, key=str(i).encode(), on_delivery=report)
    assert producer.flush(30) == 0
    assert not errors, errors
    log = consume_all(db_url)
    assert sorted(r.value for records in log.values() for r in records) == sorted(values)
    assert sorted(delivered) == sorted((p, r.offset) for p, records in log.items() for r in records)


# --- oncelog writes transactions, Kafka's consumers read ------------------------------------------


def _write_transactions(db_url: str) -> list[bytes]:
    """Committed, aborted, committed, then an aborted one last: the values a read_committed
    reader must see, in partition 0's order."""
    with oncelog.Producer(db_url, transactional_id="writer") as producer:
        producer.init_transactions()
        for tag, commit in (("a", True), ("b", False), ("c", True), ("d", False)):
            producer.begin_transaction()
            for i in range(5):
                producer.send(TOPIC, f"{tag}{i}".encode(), partition=0)
            if commit:
                producer.commit_transaction()
            else:
                producer.flush()
                producer.abort_transaction()
    return [f"{tag}{i}".encode() for tag in "ac" for i in range(5)]


def _kafka_python_reads(broker: str, isolation_level: str) -> tuple[list[bytes | None], int, int]:
    """Partition 0 from the start through kafka-python: the values, then its position and end offset."""
    tp = KTopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=broker, isolation_level=isolation_level, enable_auto_commit=False, consumer_timeout_ms=3000
    )
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = [m.value for m in consumer]
        return got, consumer.position(tp), consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


@pytest.mark.timeout(120)
def test_kafka_python_read_committed_sees_only_committed_and_reaches_the_end(db_url: str, broker: str) -> None:
    committed = _write_transactions(db_url)
    got, position, end = _kafka_python_reads(broker, "read_committed")
    assert got == committed
    # Past the aborted transaction and every marker: the reader is not stuck before the end.
    assert position == end == 24  # 4 transactions x (5 records + 1 marker)


@pytest.mark.timeout(120)
def test_kafka_python_read_uncommitted_sees_aborted_records_too(db_url: str, broker: str) -> None:
    _write_transactions(db_url)
    got, position, end = _kafka_python_reads(broker, "read_uncommitted")
    assert got == [f"{tag}{i}".encode() for tag in "abcd" for i in range(5)]
    assert position == end == 24


@pytest.mark.timeout(120)
def test_librdkafka_read_committed_consumer(db_url: str, broker: str) -> None:
    committed = _write_transactions(db_url)
    consumer = ck.Consumer(
        {
            "bootstrap.servers": broker,
            "group.id": "not-used",  # librdkafka wants one; offsets are assigned, never committed
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    got: list[bytes | None] = []
    try:
        consumer.assign([ck.TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < len(committed) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        assert got == committed
        _, high = consumer.get_watermark_offsets(ck.TopicPartition(TOPIC, 0), timeout=10)
        assert high == 24
        # Nothing more shows up: the aborted tail is skipped, not returned, and the reader moves
        # past it (its position reaches the end instead of waiting before the aborted records).
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            assert consumer.poll(0.2) is None
            (position,) = consumer.position([ck.TopicPartition(TOPIC, 0)])
            if position.offset == 24:
                break
        assert position.offset == 24
    finally:
        consumer.close()


@pytest.mark.timeout(120)
def test_kafka_python_list_offsets(db_url: str, broker: str) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    with oncelog.Producer(db_url) as producer:
        for i in range(10):
            producer.send(TOPIC, b"x%d" % i, partition=1)
    tp = KTopicPartition(TOPIC, 1)
    consumer = KafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 10}
        found = consumer.offsets_for_times({tp: int(before.timestamp() * 1000)})
        assert found[tp] is not None and found[tp].offset == 0
        later = consumer.offsets_for_times({tp: int((datetime.now(UTC) + timedelta(hours=1)).timestamp() * 1000)})
        assert later[tp] is None
    finally:
        consumer.close()


# --- the protocol itself, spoken by hand with kafka-python's codec -----------------------------------


class _Wire:
    """One connection that sends requests built with kafka-python's classes and reads the answers."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation = 0

    def call(self, request: Any, response_class: Any) -> Any:
        self.correlation += 1
        request.with_header(correlation_id=self.correlation, client_id="wire")
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        return response_class.decode(self._frame(), version=request.version, header=True)

    def _frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._exactly(4))
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def _batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    builder = MemoryRecordsBuilder(
        magic=2,
        compression_type=0,
        batch_size=1 << 20,
        offset=0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )
    for value in values:
        builder.append(int(time.time() * 1000), None, value, [])
    builder.close()
    return bytes(builder.buffer())


def _produce(wire: _Wire, records: bytes, partition: int = 2) -> Any:
    request = ProduceRequest(
        version=9,
        transactional_id=None,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)],
            )
        ],
    )
    (topic,) = wire.call(request, ProduceResponse).responses
    (answer,) = topic.partition_responses
    return answer


@pytest.mark.timeout(60)
def test_a_resent_batch_is_answered_as_a_duplicate_and_a_gap_is_refused(db_url: str, broker: str) -> None:
    wire = _Wire(broker)
    try:
        ident = wire.call(
            InitProducerIdRequest(version=4, transactional_id=None, transaction_timeout_ms=60_000),
            InitProducerIdResponse,
        )
        assert ident.error_code == 0
        batch = _batch(ident.producer_id, ident.producer_epoch, 0, [b"once-1", b"once-2"])
        first, again = _produce(wire, batch), _produce(wire, batch)  # a retry after a lost answer
        assert (first.error_code, again.error_code) == (0, 0)
        assert first.base_offset == again.base_offset == 0
        gap = _produce(wire, _batch(ident.producer_id, ident.producer_epoch, 7, [b"gap"]))
        assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        stranger = _produce(wire, _batch(ident.producer_id + 1000, 0, 0, [b"who"]))
        assert stranger.error_code == 59  # UNKNOWN_PRODUCER_ID: ids are issued by the store only
    finally:
        wire.close()
    assert [r.value for r in read_partition(db_url, TOPIC, 2)] == [b"once-1", b"once-2"]


@pytest.mark.timeout(60)
def test_api_versions_the_table_and_a_too_new_version(broker: str) -> None:
    wire = _Wire(broker)
    try:
        answer = wire.call(
            ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"), ApiVersionsResponse
        )
        assert answer.error_code == 0
        assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == API_RANGES
        # Newer than we serve: error 35 and our ranges in a v0 body, so the client asks again.
        request = ApiVersionsRequest(version=4, client_software_name="t", client_software_version="1")
        wire.correlation += 1
        request.with_header(correlation_id=wire.correlation, client_id="wire")
        wire.sock.sendall(bytes(request.encode(header=True, framed=True)))
        refused = ApiVersionsResponse.decode(wire._frame(), version=0, header=True)
        assert refused.error_code == 35
        assert {k.api_key for k in refused.api_keys} == set(API_RANGES)
    finally:
        wire.close()


@pytest.mark.timeout(60)
def test_garbage_and_unserved_versions_close_only_their_own_connection(db_url: str, broker: str) -> None:
    host, port = broker.rsplit(":", 1)
    for frame in (b"\x00\x00\x00\x03abc", struct.pack(">ihhi", 8, 1, 13, 7), b"\x7f\xff\xff\xff"):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(frame)
            assert sock.recv(100) == b"", f"the broker closes a connection that sent {frame!r}"
    # The broker serves on.
    producer = ck.Producer({"bootstrap.servers": broker})
    producer.produce(TOPIC, value=b"after", partition=0)
    assert producer.flush(30) == 0
    assert [r.value for r in read_partition(db_url, TOPIC, 0)] == [b"after"]


@pytest.mark.timeout(60)
def test_an_unknown_topic_is_answered_unknown_and_not_created(db_url: str, broker: str) -> None:
    producer = KafkaProducer(bootstrap_servers=broker, max_block_ms=2000)
    try:
        with pytest.raises(Exception, match=r"(?i)timeout|unknown"):
            producer.send("no-such-topic", b"x").get(5)
    finally:
        producer.close(5)
    with oncelog.Admin(db_url) as admin:
        assert "no-such-topic" not in admin.list_topics()


# --- the command ------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_oncelog_broker_command_serves_until_sigterm(db_url: str) -> None:
    with oncelog.Admin(db_url) as admin:
        admin.create_topic(TOPIC, partitions=1)
    with broker_command(db_url) as (proc, address):
        producer = ck.Producer({"bootstrap.servers": address, "enable.idempotence": True})
        producer.produce(TOPIC, value=b"via the command")
        assert producer.flush(30) == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert [r.value for r in read_partition(db_url, TOPIC, 0)] == [b"via the command"]
