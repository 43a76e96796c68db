"""Producer, Consumer and Admin as a user meets them: the API shape, bad input, and round trips."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

import oncelog
from oncelog import Admin, Consumer, ConsumerRecord, Producer, TopicPartition, errors
from oncelog.partitioner import partition_for_key
from oncelog.store import create_engine, log
from tests.support.clock import server_time


@pytest.fixture
def admin(db_url: str) -> Iterator[Admin]:
    with Admin(db_url) as a:
        yield a


def _read_all(url: str, topic: str, partitions: int, **kwargs: object) -> list[oncelog.ConsumerRecord]:
    with Consumer(url, **kwargs) as consumer:  # type: ignore[arg-type]
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        out: list[oncelog.ConsumerRecord] = []
        while batch := consumer.poll(timeout=0.2):
            out.extend(batch)
        return out


def test_the_issue_example(db_url: str, admin: Admin) -> None:
    admin.create_topic("orders", partitions=3, config={"max_message_bytes": 1_000_000})
    with Producer(db_url, linger_ms=5) as producer:
        meta = producer.send("orders", b"value", key=b"key").result(timeout=30)
    assert isinstance(meta, oncelog.RecordMetadata)
    assert meta.topic == "orders" and meta.offset == 0
    assert meta.partition == partition_for_key(b"key", 3)
    consumer = Consumer(db_url, isolation_level="read_uncommitted")
    consumer.assign([TopicPartition("orders", meta.partition)])
    consumer.seek(TopicPartition("orders", meta.partition), 0)
    records = consumer.poll(timeout=1.0)
    consumer.close()
    assert [(r.key, r.value, r.offset) for r in records] == [(b"key", b"value", 0)]


def test_keys_land_where_kafka_would_put_them(db_url: str, admin: Admin) -> None:
    admin.create_topic("keyed", partitions=7)
    with Producer(db_url) as producer:
        futures = {k: producer.send("keyed", b"v", key=k.encode()) for k in ("a", "b", "user-42", "xyz", "")}
        for key, fut in futures.items():
            assert fut.result(timeout=30).partition == partition_for_key(key.encode(), 7)


def test_order_headers_timestamps_and_serializers(db_url: str, admin: Admin) -> None:
    admin.create_topic("typed", partitions=2)
    when = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    with Producer(db_url, key_serializer="str", value_serializer="json", linger_ms=20) as producer:
        futs = [
            producer.send(
                "typed",
                {"n": i, "text": "é"},
                key=f"k{i % 3}",
                headers=[("trace", str(i).encode()), ("trace", None), ("ü", b"\x00\xff")],
                timestamp=when + timedelta(seconds=i) if i % 2 else int(when.timestamp() * 1000),
            )
            for i in range(50)
        ]
        producer.flush()
    metas = [f.result(timeout=30) for f in futs]
    records = _read_all(db_url, "typed", 2, key_deserializer="str", value_deserializer="json")
    assert len(records) == 50
    by_offset = {(r.partition, r.offset): r for r in records}
    for i, meta in enumerate(metas):
        rec = by_offset[(meta.partition, meta.offset)]
        assert rec.value == {"n": i, "text": "é"} and rec.key == f"k{i % 3}"
        assert rec.headers == (("trace", str(i).encode()), ("trace", None), ("ü", b"\x00\xff"))
        expected_ts = when + timedelta(seconds=i) if i % 2 else when
        assert rec.timestamp == expected_ts == meta.timestamp
    # Per key (so per partition), the send order is the offset order.
    for key in ("k0", "k1", "k2"):
        sent = [i for i in range(50) if f"k{i % 3}" == key]
        got = [r.value["n"] for r in sorted(records, key=lambda r: r.offset) if r.key == key]
        assert got == sent
    # The default (bytes) deserializers take the store's own records (built in one step, not
    # re-mapped): every field must match the deserializing path's, only key and value stay bytes.
    raw = {(r.partition, r.offset): r for r in _read_all(db_url, "typed", 2)}
    assert raw.keys() == by_offset.keys()
    for where, rec in by_offset.items():
        plain = raw[where]
        assert isinstance(plain, ConsumerRecord) and plain.topic_partition == TopicPartition("typed", where[0])
        assert (plain.key.decode(), json.loads(plain.value)) == (rec.key, rec.value)
        assert plain._replace(key=rec.key, value=rec.value) == rec
        assert plain.producer_id is not None and plain.producer_id == rec.producer_id


def test_bad_input_is_a_typed_error_and_sends_nothing(db_url: str, admin: Admin) -> None:
    admin.create_topic("small", partitions=2, config={"max_message_bytes": 100})
    with Producer(db_url) as producer:
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            producer.send("missing", b"v")
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            producer.send("small", b"v", partition=2)
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            producer.send("small", b"v", partition=-1)
        with pytest.raises(errors.RecordTooLargeError):
            producer.send("small", b"x" * 101)
        with pytest.raises(errors.RecordTooLargeError):  # headers count towards the size
            producer.send("small", b"x" * 60, headers=[("h", b"y" * 40)])
        with pytest.raises(errors.InvalidRecordError):
            producer.send("small", "not bytes")
        with pytest.raises(errors.InvalidRecordError):
            producer.send("small", b"v", headers=[("h", "str")])  # type: ignore[list-item]
        with pytest.raises(errors.InvalidRecordError):
            producer.send("small", b"v", timestamp=datetime(2024, 1, 1))  # naive
        assert producer.send("small", b"x" * 100).result(timeout=30).offset == 0
    assert len(_read_all(db_url, "small", 2)) == 1


@pytest.mark.parametrize(
    "config",
    [
        {"linger_ms": -1},
        {"batch_size": 0},
        {"max_in_flight": 6},
        {"max_in_flight": 0},
        {"delivery_timeout_ms": 0},
        {"retry_backoff_ms": 2000, "retry_backoff_max_ms": 1000},
        {"value_serializer": "yaml"},
    ],
)
def test_bad_producer_config(db_url: str, config: dict[str, object]) -> None:
    with pytest.raises(errors.ConfigurationError):
        Producer(db_url, **config)  # type: ignore[arg-type]


def test_bad_urls_and_schemas() -> None:
    with pytest.raises(errors.ConfigurationError):
        Producer("mysql://u@h/db")
    with pytest.raises(errors.ConfigurationError):
        Admin("postgresql://u@h/db", schema="Bad-Schema")


def test_callbacks_run_with_metadata_or_error(db_url: str, admin: Admin) -> None:
    admin.create_topic("cb", partitions=1)
    seen: list[tuple[int | None, BaseException | None]] = []
    done = threading.Event()

    def callback(meta: oncelog.RecordMetadata | None, exc: BaseException | None) -> None:
        seen.append((meta.offset if meta else None, exc))
        if len(seen) == 3:
            done.set()

    with Producer(db_url) as producer:
        for _ in range(3):
            producer.send("cb", b"v", callback=callback)
        assert done.wait(30)
    assert seen == [(0, None), (1, None), (2, None)]


def test_close_delivers_what_is_queued_and_refuses_more(db_url: str, admin: Admin) -> None:
    admin.create_topic("closing", partitions=1)
    producer = Producer(db_url, linger_ms=60_000, batch_size=10**9)
    futs = [producer.send("closing", str(i).encode()) for i in range(100)]
    assert not any(f.done() for f in futs)  # lingering: nothing sent yet
    producer.close()
    assert [f.result(timeout=0).offset for f in futs] == list(range(100))
    with pytest.raises(errors.ProducerClosedError):
        producer.send("closing", b"late")
    producer.close()  # idempotent


def test_producer_metrics_and_identity(db_url: str, admin: Admin) -> None:
    admin.create_topic("m", partitions=1)
    with Producer(db_url, linger_ms=50) as producer:
        assert producer.producer_id is None
        for _ in range(10):
            producer.send("m", b"0123456789")
        producer.flush()
        m = producer.metrics()
        assert producer.producer_id is not None and producer.producer_epoch == 0
    assert m["record_send_total"] == 10 and m["record_error_total"] == 0
    assert m["batch_send_total"] >= 1 and m["batch_size_max"] >= 10
    assert m["records_per_request_avg"] == 10 / m["batch_send_total"]


def test_the_producer_carries_on_after_its_state_expired(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    """KIP-360: the store forgot the producer's sequences on one partition (idle there past the
    expiration, alive elsewhere); the producer bumps its epoch and restarts at sequence 0."""
    admin.create_topic("expiring", partitions=2)
    with Producer(db_url) as producer:
        producer.send("expiring", b"a", partition=0).result(timeout=30)
        producer.send("expiring", b"b", partition=0).result(timeout=30)
        producer.send("expiring", b"x", partition=1).result(timeout=30)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(
                "UPDATE producer_partition_state SET updated_at = now() - interval '2 days' WHERE partition = 0"
            )
            assert log.expire_producers(conn) == 1
        assert producer.send("expiring", b"c", partition=0).result(timeout=30).offset == 2
        assert producer.producer_epoch == 1
        assert producer.metrics()["epoch_bump_total"] == 1
        assert producer.send("expiring", b"y", partition=1).result(timeout=30).offset == 1
    assert [r.value for r in _read_all(db_url, "expiring", 2)] in (
        [b"a", b"b", b"c", b"x", b"y"],
        [b"x", b"y", b"a", b"b", b"c"],
    )


def test_the_producer_gets_a_new_id_after_its_id_expired(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    """Idle past the expiration everywhere: the store forgets the id; the producer gets a new one."""
    admin.create_topic("gone", partitions=1)
    with Producer(db_url) as producer:
        producer.send("gone", b"a").result(timeout=30)
        old = producer.producer_id
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            with server_time(conn, datetime.now(UTC) + timedelta(days=2)):
                log.expire_producers(conn)
            assert conn.exec_driver_sql("SELECT count(*) FROM producers").scalar_one() == 0
        producer.send("gone", b"b").result(timeout=30)
        assert producer.producer_id != old and producer.producer_epoch == 0
    assert [r.value for r in _read_all(db_url, "gone", 1)] == [b"a", b"b"]


def test_a_rejected_batch_frees_its_sequence(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    """A batch the store rejects (here: the topic's limit lowered after the producer cached it)
    fails alone; the next batch reuses its sequence instead of leaving a gap."""
    admin.create_topic("shrinking", partitions=1, config={"max_message_bytes": 1000})
    with Producer(db_url, linger_ms=0) as producer:
        producer.send("shrinking", b"x" * 500).result(timeout=30)
        admin.alter_topic_config("shrinking", {"max_message_bytes": 100})
        with pytest.raises(errors.RecordTooLargeError):
            producer.send("shrinking", b"x" * 500).result(timeout=30)
        assert producer.send("shrinking", b"ok").result(timeout=30).offset == 1
        assert producer.metrics()["epoch_bump_total"] == 0
    with engine.connect() as conn:
        seqs = conn.exec_driver_sql('SELECT sequence FROM records ORDER BY "offset"').scalars().all()
    assert seqs == [0, 1]


def test_consumer_positions_seek_pause_and_resets(db_url: str, admin: Admin) -> None:
    admin.create_topic("c", partitions=2)
    with Producer(db_url) as producer:
        for i in range(10):
            producer.send("c", str(i).encode(), partition=i % 2)
    tp0, tp1 = TopicPartition("c", 0), TopicPartition("c", 1)
    with Consumer(db_url, max_poll_records=4) as consumer:
        consumer.assign([tp0, tp1])
        assert consumer.position(tp0) == 0
        assert consumer.end_offsets([tp0, tp1]) == {tp0: 5, tp1: 5}
        assert consumer.beginning_offsets([tp0]) == {tp0: 0}
        first = consumer.poll(timeout=1)
        assert len(first) == 4  # max_poll_records, split between the 2 partitions
        consumer.pause([tp1])
        rest = []
        while batch := consumer.poll(timeout=0.2):
            rest.extend(batch)
        assert all(r.partition == 0 for r in rest)
        assert consumer.position(tp0) == 5
        consumer.resume([tp1])
        consumer.seek(tp1, 4)
        assert [r.value for r in consumer.poll(timeout=1)] == [b"9"]
        consumer.seek_to_beginning([tp1])
        assert consumer.position(tp1) == 0
        consumer.seek_to_end()
        assert consumer.poll(timeout=0.1) == []
        with pytest.raises(errors.ConfigurationError):
            consumer.seek(TopicPartition("c", 9), 0)
    with Consumer(db_url, auto_offset_reset="latest") as latest:
        latest.assign([tp0])
        assert latest.position(tp0) == 5
    with Consumer(db_url, auto_offset_reset="none") as none:
        none.assign([tp0])
        with pytest.raises(errors.ConfigurationError):
            none.poll()
    with Consumer(db_url) as consumer, pytest.raises(errors.UnknownTopicOrPartitionError):
        consumer.assign([TopicPartition("c", 2)])


def test_consumer_resets_when_retention_passes_its_position(db_url: str, admin: Admin) -> None:
    admin.create_topic("r", partitions=1)
    with Producer(db_url) as producer:
        for i in range(5):
            producer.send("r", str(i).encode())
    tp = TopicPartition("r", 0)
    with Consumer(db_url) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1)
        admin.alter_topic_config("r", {"retention_bytes": 2})
        assert admin.enforce_retention() == 3
        assert admin.describe_topic("r").partitions[0].log_start_offset == 3
        assert [r.offset for r in consumer.poll(timeout=1)] == [3, 4]


def test_consumer_config_errors(db_url: str) -> None:
    for bad in ({"isolation_level": "dirty"}, {"auto_offset_reset": "middle"}, {"max_poll_records": 0}):
        with pytest.raises(errors.ConfigurationError):
            Consumer(db_url, **bad)


def test_a_topic_without_retention_follows_the_store_wide_default(db_url: str, admin: Admin) -> None:
    """settings.log_retention_ms is the retention of every topic that sets none; -1 and an explicit
    retention are the topic's own."""
    admin.create_topic("follows", partitions=1)
    admin.create_topic("forever", partitions=1, config={"retention_ms": -1})
    admin.create_topic("own", partitions=1, config={"retention_ms": 3_600_000})
    with Producer(db_url, linger_ms=0) as producer:
        for topic in ("follows", "forever", "own"):
            producer.send(topic, b"old").result(30)
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE settings SET log_retention_ms = 1")
        time.sleep(0.05)
        assert admin.enforce_retention() == 1  # only the topic that follows the default
        assert admin.list_offsets("follows")[0].log_start_offset == 1
        assert admin.list_offsets("forever")[0].log_start_offset == 0
        assert admin.list_offsets("own")[0].log_start_offset == 0
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE settings SET log_retention_ms = NULL")  # keep for ever
        assert admin.describe_topic("follows").config["retention_ms"] is None
    finally:
        engine.dispose()


def test_admin_topics(admin: Admin) -> None:
    admin.create_topic("a.b_c-1", partitions=2, config={"retention_ms": 60_000})
    assert admin.list_topics() == {"a.b_c-1": 2}
    admin.create_partitions("a.b_c-1", 4)
    desc = admin.describe_topic("a.b_c-1")
    assert [p.partition for p in desc.partitions] == [0, 1, 2, 3]
    assert desc.config == {
        "max_message_bytes": 1048588,
        "retention_ms": 60_000,
        "retention_bytes": None,
        "message_timestamp_after_max_ms": 3_600_000,
        "cleanup_policy": "delete",
        "min_compaction_lag_ms": 0,
        "max_compaction_lag_ms": None,
        "delete_retention_ms": 86_400_000,
        "min_cleanable_dirty_ratio": 0.5,
    }
    assert desc.defaults == frozenset()
    # Reset: the topic follows the store-wide default (Kafka's 7 days); -1 keeps records for ever.
    admin.alter_topic_config("a.b_c-1", {"retention_ms": None, "max_message_bytes": 10})
    reset = admin.describe_topic("a.b_c-1")
    assert reset.config["retention_ms"] == 604_800_000 and reset.defaults == {"retention_ms"}
    admin.alter_topic_config("a.b_c-1", {"retention_ms": -1, "retention_bytes": -1})
    forever = admin.describe_topic("a.b_c-1")
    assert forever.config["retention_ms"] is None and forever.config["retention_bytes"] is None
    assert forever.defaults == frozenset()
    with pytest.raises(errors.TopicAlreadyExistsError):
        admin.create_topic("a.b_c-1")
    with pytest.raises(errors.InvalidTopicError):
        admin.create_topic("bad/name")
    with pytest.raises(errors.InvalidPartitionsError):
        admin.create_partitions("a.b_c-1", 2)
    with pytest.raises(errors.ConfigurationError):
        admin.create_topic("x", config={"cleanup.policy": "compact"})
    with pytest.raises(errors.ConfigurationError):
        admin.alter_topic_config("a.b_c-1", {"retention_ms": -5})
    admin.delete_topic("a.b_c-1")
    assert admin.list_topics() == {}
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.delete_topic("a.b_c-1")
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.describe_topic("a.b_c-1")


def test_repr_never_shows_the_password(db_url: str) -> None:
    url = db_url.replace("postgres@", "postgres:hunter2@")
    for client in (Admin(url), Consumer(url), Producer(url)):
        assert "hunter2" not in repr(client)
        client.close()


def test_headers_are_stored_readably(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    """psql users read headers as JSON with base64 values."""
    admin.create_topic("h", partitions=1)
    with Producer(db_url) as producer:
        producer.send("h", b"v", headers={"a": b"1", "b": None}).result(timeout=30)
    with engine.connect() as conn:
        stored = conn.exec_driver_sql("SELECT headers::text FROM records").scalar_one()
    assert json.loads(stored) == [{"key": "a", "value": "MQ=="}, {"key": "b", "value": None}]


def test_client_id_names_the_connections(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    """Kafka's client.id on every client: the connections' application_name."""
    admin.create_topic("named", partitions=1)
    names = "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'app-%%'"
    with (
        Producer(db_url, client_id="app-producer") as producer,
        Consumer(db_url, client_id="app-consumer") as consumer,
        Admin(db_url, client_id="app-admin") as named_admin,
    ):
        producer.send("named", b"v").get(timeout=30)
        consumer.assign([TopicPartition("named", 0)])
        consumer.seek_to_beginning()
        assert consumer.poll(timeout=5)
        named_admin.list_topics()
        with engine.connect() as conn:
            seen = {r.application_name for r in conn.exec_driver_sql(names)}
        assert seen >= {"app-producer", "app-consumer", "app-admin"}
        assert producer.client_id == "app-producer"
    with pytest.raises(errors.ConfigurationError):
        Producer(db_url, client_id=5)  # type: ignore[arg-type]


def test_iterating_a_consumer_hands_records_out_one_by_one(db_url: str, admin: Admin) -> None:
    """for record in consumer (kafka-python): positions follow the records handed out, so a
    commit in the loop covers only those, and leaving the loop early leaves the rest to the next
    poll; consumer_timeout_ms ends the iteration."""
    admin.create_topic("iter", partitions=2)
    with Producer(db_url, linger_ms=50) as producer:
        for i in range(10):
            producer.send("iter", f"v{i}".encode(), partition=i % 2)
        producer.flush()
    tps = [TopicPartition("iter", 0), TopicPartition("iter", 1)]
    with Consumer(db_url, group_id="iter-group", enable_auto_commit=False, consumer_timeout_ms=300) as consumer:
        consumer.assign(tps)
        taken = []
        for record in consumer:
            taken.append(record)
            if len(taken) == 3:
                consumer.commit()
                break
        done = {tp: consumer.position(tp) for tp in tps}
        by_partition = {tp: [r.offset for r in taken if r.topic_partition == tp] for tp in tps}
        assert done == {tp: (offsets[-1] + 1 if offsets else 0) for tp, offsets in by_partition.items()}
        assert {tp: o.offset for tp, o in consumer.committed(tps).items() if o} == done
        rest = list(consumer)  # the rest, then it stops after 300 ms with nothing
        assert sorted((r.partition, r.offset) for r in taken + rest) == [(p, o) for p in (0, 1) for o in range(5)]
        assert consumer.position(tps[0]) == consumer.position(tps[1]) == 5
    with pytest.raises(errors.ConfigurationError):
        Consumer(db_url, consumer_timeout_ms=-1)


def test_a_kafka_configuration_builds_working_clients(db_url: str, admin: Admin) -> None:
    """Kafka's dotted names, as a confluent-kafka or Java user writes them: a transactional
    producer and a group consumer that reads only what committed."""
    admin.create_topic("kafka-style", partitions=2)
    producer_config = {"transactional.id": "kafka-style-1", "linger.ms": 1, "acks": "all", "client.id": "svc"}
    with Producer.from_config(db_url, producer_config) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("kafka-style", b"kept", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send("kafka-style", b"dropped", partition=1).get(timeout=30)
        producer.abort_transaction()
    consumer_config = {
        "group.id": "kafka-style-readers",
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "partition.assignment.strategy": "cooperative-sticky",
    }
    with Consumer.from_config(db_url, consumer_config, consumer_timeout_ms=3000) as consumer:
        consumer.subscribe(["kafka-style"])
        assert [r.value for r in consumer] == [b"kept"]


def test_offsets_for_times_as_kafka_answers_them(db_url: str, admin: Admin) -> None:
    """The first record at or after a time, per partition: timestamps out of offset order, an
    aborted transaction and an open one (read_committed skips both, read_uncommitted not),
    milliseconds or datetimes, None past the last record."""
    admin.create_topic("timed", partitions=2)
    tp0, tp1 = TopicPartition("timed", 0), TopicPartition("timed", 1)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    ms = int(base.timestamp() * 1000)
    with Producer(db_url, linger_ms=0) as producer:
        for i, minutes in enumerate((0, 10, 5, 20)):  # offsets 0..3, not in time order
            producer.send("timed", f"r{i}".encode(), partition=0, timestamp=base + timedelta(minutes=minutes))
        producer.flush()
    with Producer(db_url, transactional_id="timed-aborted") as aborted:
        aborted.init_transactions()
        aborted.begin_transaction()
        aborted.send("timed", b"aborted", partition=1, timestamp=base + timedelta(minutes=30)).get(timeout=30)
        aborted.abort_transaction()
    with Producer(db_url, transactional_id="timed-open") as still_open:
        still_open.init_transactions()
        still_open.begin_transaction()
        still_open.send("timed", b"open", partition=1, timestamp=base + timedelta(minutes=40)).get(timeout=30)
        with Consumer(db_url) as committed, Consumer(db_url, isolation_level="read_uncommitted") as uncommitted:
            assert committed.offsets_for_times({tp0: base + timedelta(minutes=6), tp1: base}) == {
                tp0: oncelog.OffsetAndTimestamp(1, base + timedelta(minutes=10)),  # offset 2 (5 min) is earlier
                tp1: None,  # aborted, then open: nothing a read_committed consumer could read
            }
            assert committed.offsets_for_times({tp0: ms + 11 * 60_000}) == {
                tp0: oncelog.OffsetAndTimestamp(3, base + timedelta(minutes=20))
            }
            assert committed.offsets_for_times({tp0: base + timedelta(hours=1)}) == {tp0: None}
            found = uncommitted.offsets_for_times({tp1: base})
            assert found == {tp1: oncelog.OffsetAndTimestamp(0, base + timedelta(minutes=30))}
            with pytest.raises(errors.UnknownTopicOrPartitionError, match="timed-7"):
                committed.offsets_for_times({TopicPartition("timed", 7): base})
            for bad in (None, -1, datetime(2026, 1, 1), "noon"):
                with pytest.raises(errors.InvalidRequestError, match="offsets_for_times"):
                    committed.offsets_for_times({tp0: bad})  # type: ignore[dict-item]
        still_open.abort_transaction()
    assert admin.offsets_for_times("timed", base + timedelta(hours=1)) == {tp0: 4, tp1: 4}


def test_max_timestamp_offsets_as_kafka_answers_them(db_url: str, admin: Admin) -> None:
    """The record with the largest timestamp, per partition (Kafka's OffsetSpec.maxTimestamp()):
    the first of equals; an aborted record counts for read_uncommitted only, an open
    transaction's neither for read_committed; None for an empty partition."""
    admin.create_topic("newest", partitions=3)
    tp0, tp1, tp2 = (TopicPartition("newest", p) for p in range(3))
    base = datetime(2026, 1, 1, tzinfo=UTC)
    with Producer(db_url, linger_ms=0) as producer:
        for i, minutes in enumerate((0, 20, 5, 20, 10)):  # the largest twice: offsets 1 and 3
            producer.send("newest", f"r{i}".encode(), partition=0, timestamp=base + timedelta(minutes=minutes))
        producer.send("newest", b"kept", partition=1, timestamp=base)
        producer.flush()
    with Producer(db_url, transactional_id="newest-aborted") as aborted:
        aborted.init_transactions()
        aborted.begin_transaction()
        aborted.send("newest", b"aborted", partition=1, timestamp=base + timedelta(minutes=30)).get(timeout=30)
        aborted.abort_transaction()
    with Producer(db_url, transactional_id="newest-open") as still_open:
        still_open.init_transactions()
        still_open.begin_transaction()
        still_open.send("newest", b"open", partition=0, timestamp=base + timedelta(minutes=40)).get(timeout=30)
        assert admin.max_timestamp_offsets("newest", isolation_level="read_committed") == {
            tp0: oncelog.OffsetAndTimestamp(1, base + timedelta(minutes=20)),
            tp1: oncelog.OffsetAndTimestamp(0, base),
            tp2: None,
        }
        assert admin.max_timestamp_offsets("newest") == {
            tp0: oncelog.OffsetAndTimestamp(5, base + timedelta(minutes=40)),
            tp1: oncelog.OffsetAndTimestamp(1, base + timedelta(minutes=30)),
            tp2: None,
        }
        still_open.abort_transaction()
    with pytest.raises(errors.InvalidRequestError, match="isolation_level"):
        admin.max_timestamp_offsets("newest", isolation_level="serializable")
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.max_timestamp_offsets("no-such-topic")


def test_asynchronous_commits_complete_in_order_with_their_callbacks(db_url: str, admin: Admin) -> None:
    """commit(asynchronous=True) and commit_async(): a Future at once, the callback with the
    offsets and the outcome, commits applied in the order asked, a failure handed over (not
    raised by a later call), and close() waiting for the ones on their way."""
    admin.create_topic("acommit", partitions=1)
    tp = TopicPartition("acommit", 0)
    with Producer(db_url, linger_ms=0) as producer:
        for i in range(5):
            producer.send("acommit", f"r{i}".encode(), partition=0)
    seen: list[tuple[dict[TopicPartition, oncelog.OffsetAndMetadata], BaseException | None]] = []
    with Consumer(db_url, group_id="acommit-g", enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        assert len(consumer.poll(timeout=10)) == 5
        future = consumer.commit(asynchronous=True, callback=lambda offsets, exc: seen.append((offsets, exc)))
        assert future is not None and future.result(timeout=30) is None
        assert seen == [({tp: oncelog.OffsetAndMetadata(5, "")}, None)]
        for offset in range(1, 4):
            consumer.commit_async({tp: offset})
        bad = consumer.commit_async(
            {TopicPartition("no-such-topic", 0): 1}, callback=lambda offsets, exc: seen.append((offsets, exc))
        )
        assert isinstance(bad.exception(timeout=30), errors.UnknownTopicOrPartitionError)
        assert isinstance(seen[-1][1], errors.UnknownTopicOrPartitionError)
        assert consumer.committed([tp]) == {tp: oncelog.OffsetAndMetadata(3, "")}  # the last one asked
        consumer.commit_async({tp: 4})
        with pytest.raises(errors.InvalidRequestError, match="asynchronous"):
            consumer.commit(asynchronous=1)  # type: ignore[arg-type]
    with Consumer(db_url, group_id="acommit-g", enable_auto_commit=False) as again:
        assert again.committed([tp]) == {tp: oncelog.OffsetAndMetadata(4, "")}  # close() waited for it


def test_an_error_reads_in_a_few_lines(admin: Admin) -> None:
    """A refusal is the oncelog error, caused by psycopg's one exception (the database's message
    and context) with no traceback of its own: not three chained tracebacks (psycopg, SQLAlchemy,
    oncelog)."""
    import traceback  # noqa: PLC0415

    admin.create_topic("twice")
    with pytest.raises(errors.TopicAlreadyExistsError) as info:
        admin.create_topic("twice")
    cause = info.value.__cause__
    assert cause is not None and type(cause).__module__.startswith("psycopg") and cause.__traceback__ is None
    assert "already exists" in str(cause) and "create_topic_v1" in str(cause)  # the database's context
    text = "".join(traceback.format_exception(info.value))
    assert "sqlalchemy" not in text and text.count("Traceback") == 1, text
