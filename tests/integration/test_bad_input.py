"""Bad values raise typed errors at the call that received them, and nothing is lost.

First each input of issue 14's finding 10, one by one, on a real server; then a property test
that feeds generated junk (wrong types, bool for int, huge and negative ints, NaN and the
infinities, lone surrogates, NUL, None, nested containers) to every public entry point of
Producer, Consumer and Admin, and accepts only success or an :class:`oncelog.errors.OncelogError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog import Admin, Consumer, Producer, TopicPartition, errors, validate
from oncelog.client import Client
from oncelog.types import AclBinding, AclBindingFilter, ConsumerGroupMetadata, OffsetAndMetadata

TP = TopicPartition("t", 0)


@pytest.fixture
def admin(db_url: str) -> Iterator[Admin]:
    with Admin(db_url) as admin:
        admin.create_topic("t", partitions=2)
        yield admin


@pytest.fixture
def producer(db_url: str, admin: Admin) -> Iterator[Producer]:
    with Producer(db_url, linger_ms=0) as producer:
        yield producer


def offsets(admin: Admin) -> list[int]:
    """The high watermark of each partition of topic t."""
    return [p.high_watermark for p in admin.list_offsets("t")]


def assert_flags(exc: errors.OncelogError) -> None:
    """A caller's mistake: not worth retrying, nothing to abort, the client still usable."""
    assert (exc.retriable, exc.abortable, exc.fatal) == (False, False, False)


# --- finding 10, input by input -------------------------------------------------------------------


@pytest.mark.parametrize(
    "timestamp",
    [
        1e20,
        math.inf,
        -math.inf,
        math.nan,
        2**70,
        -1,
        validate.MAX_TIMESTAMP_MS + 1,
        True,
        "2024-01-01",
        datetime(2024, 1, 1),  # naive
        datetime(1969, 12, 31, 23, 59, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-23))),  # year 10000 in UTC
    ],
    ids=repr,
)
def test_a_bad_timestamp_is_an_invalid_record(producer: Producer, admin: Admin, timestamp: object) -> None:
    with pytest.raises(errors.InvalidRecordError, match="timestamp") as caught:
        producer.send("t", b"v", partition=0, timestamp=timestamp)  # type: ignore[arg-type]
    assert_flags(caught.value)
    producer.flush(10)
    assert offsets(admin) == [0, 0]  # nothing queued


def test_the_timestamp_range_ends_are_stored(producer: Producer, admin: Admin) -> None:
    # The store bounds timestamps to an hour ahead by default (migration 0017): lift the bound.
    admin.alter_topic_config("t", {"message_timestamp_after_max_ms": 2**63 - 1})
    first = producer.send("t", b"a", partition=0, timestamp=0).result(10)
    last = producer.send("t", b"b", partition=0, timestamp=validate.MAX_TIMESTAMP_MS).result(10)
    assert first.timestamp == validate.MIN_TIMESTAMP
    assert last.timestamp == validate.MAX_TIMESTAMP


@pytest.mark.parametrize("key", ["\ud800", "a\udfffb", "a\x00b", 7, None, b"k"], ids=repr)
def test_a_bad_header_key_is_an_invalid_record(producer: Producer, admin: Admin, key: object) -> None:
    with pytest.raises(errors.InvalidRecordError, match="header") as caught:
        producer.send("t", b"v", headers=[(key, b"x")])  # type: ignore[list-item]
    assert_flags(caught.value)
    with pytest.raises(errors.InvalidRecordError):
        producer.send("t", b"v", headers=5)  # type: ignore[arg-type]
    producer.send("t", b"v", partition=1, headers={"ok": b"x"}).result(10)
    assert offsets(admin) == [0, 1]  # only the good record


@pytest.mark.parametrize("cls", [Admin, Producer, Consumer])
@pytest.mark.parametrize(
    "url", [None, 123, b"postgresql://h/db", "postgresql://[::1/db", "postgresql://h:x/db"], ids=repr
)
def test_a_bad_url_is_a_configuration_error(cls: type[Client], url: object) -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        cls(url)  # type: ignore[arg-type]
    assert_flags(caught.value)


@pytest.mark.timeout(120)  # a retry until max_block_ms (10 minutes here) would hang the test
@pytest.mark.parametrize(
    ("part", "error"),
    [("database", errors.ConfigurationError), ("username", errors.AuthorizationError)],
)
def test_a_connection_refused_for_good_is_not_retried(
    db_url: str, admin: Admin, part: str, error: type[errors.OncelogError]
) -> None:
    """A database or role that does not exist is a typed, non-retriable error at once, not a
    DatabaseUnavailableError that every client would retry until its time runs out."""
    ours = sa.make_url(db_url)  # the admin fixture made topic t there
    wrong = ours.set(database="no_such_thing") if part == "database" else ours.set(username="no_such_thing")
    url = wrong.render_as_string(hide_password=False)
    with Producer(url, max_block_ms=600_000, linger_ms=0) as producer, pytest.raises(error) as caught:
        producer.send("t", b"never")
    assert not caught.value.retriable and "retrying will not help" in str(caught.value)
    with Admin(url) as other, pytest.raises(error):
        other.list_topics()


def test_topic_partitions_and_timeouts_are_invalid_arguments_not_a_schema_problem(
    db_url: str, admin: Admin, producer: Producer
) -> None:
    for name in (123, None, "a\x00b", "\ud800"):
        with pytest.raises(errors.InvalidTopicError):
            admin.create_topic(name)  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidTopicError):
            producer.send(name, b"v")  # type: ignore[arg-type]
    for partitions in (2**31, True, 1.5, "2", 0, -1):
        with pytest.raises(errors.InvalidPartitionsError):
            admin.create_topic("u", partitions=partitions)  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidPartitionsError):
            admin.create_partitions("t", partitions)  # type: ignore[arg-type]
    for timeout_ms in (2**31, True, 1.5, 0, math.nan):
        with pytest.raises(errors.ConfigurationError, match="transaction_timeout_ms"):
            Producer(db_url, transactional_id="x", transaction_timeout_ms=timeout_ms)  # type: ignore[arg-type]
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        producer.send("t", b"v", partition=True)
    assert admin.list_topics() == {"t": 2}


@pytest.mark.parametrize("name", ["linger_ms", "delivery_timeout_ms", "max_block_ms", "retry_backoff_ms", "batch_size"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 2**31, True, "5", None], ids=repr)
def test_a_producer_setting_that_is_not_a_finite_number_is_refused(db_url: str, name: str, value: Any) -> None:
    with pytest.raises(errors.ConfigurationError, match=name):
        Producer(db_url, **{name: value})


def test_a_seek_past_bigint_is_refused_and_polls_go_on(db_url: str, admin: Admin, producer: Producer) -> None:
    producer.send("t", b"v", partition=0).result(10)
    with Consumer(db_url) as consumer:
        consumer.assign([TP])
        for offset in (2**63, 2**64, -1):
            with pytest.raises(errors.OffsetOutOfRangeError):
                consumer.seek(TP, offset)
        wrong: tuple[Any, ...] = (True, 1.0, "0", None)
        for offset in wrong:
            with pytest.raises(errors.InvalidRequestError):
                consumer.seek(TP, offset)
        assert [r.value for r in consumer.poll(timeout=5)] == [b"v"]  # the position never changed
        consumer.seek(TP, 2**63 - 1)  # the largest offset is a position (past the end: reset)
        assert consumer.poll(timeout=0) == []
        for timeout in (math.nan, math.inf, "1", None):
            with pytest.raises(errors.InvalidRequestError, match="timeout"):
                consumer.poll(timeout=timeout)  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidRequestError):
            consumer.assign([TopicPartition("t", True)])
        assert consumer.assignment() == {TP}


# --- every entry point, generated junk ---------------------------------------------------------------

#: Values no entry point should choke on: each is either accepted or refused with a typed error.
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.5, 1e20, -0.0]),
    st.text(max_size=4),
    st.sampled_from(["\ud800", "a\udfffb", "a\x00b", "", "t", "x" * 300, "read_committed"]),
    st.binary(max_size=4),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=2)), max_size=2),
    st.dictionaries(st.text(max_size=2), st.one_of(st.none(), st.integers(), st.floats()), max_size=2),
    st.tuples(st.text(max_size=2), st.integers(min_value=-(2**65), max_value=2**65)),
    st.builds(object),
    st.just(TopicPartition("t", 2**40)),
    st.just(TopicPartition("\ud800", 0)),
    st.just([TopicPartition("t", True)]),
    st.just({TopicPartition("t", 0): 2**64}),
    st.just({TopicPartition("t", 0): OffsetAndMetadata(1, "\x00")}),
    st.just(datetime(2024, 1, 1)),
    st.just(datetime(1, 1, 1, tzinfo=UTC)),
    st.just(timedelta(days=-1)),
    st.just([AclBinding("r\x00", "topic", "t", "read")]),
    st.just(AclBindingFilter(principal=cast(str, 5))),
)


def _slow(value: object) -> bool:
    """A valid wait long enough to stall the test (a poll or flush that would really wait)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0.05 < value < 1e7


def _many(value: object) -> bool:
    """A valid partition count large enough to make the test slow."""
    return isinstance(value, int) and 8 < value <= 100_000


EntryPoint = Callable[[Any], object]


def entry_points(
    url: str, admin: Admin, producer: Producer, txn: Producer, consumer: Consumer, member: Consumer
) -> dict[str, EntryPoint]:
    """Every public entry point, as a function of the one value under test."""
    points: dict[str, EntryPoint] = {
        "Admin(url)": Admin,
        "Admin(schema=)": lambda v: Admin(url, schema=v),
        "Producer(url)": Producer,
        "Consumer(url)": Consumer,
        "Producer.send(topic)": lambda v: producer.send(v, b"v"),
        "Producer.send(value)": lambda v: producer.send("t", v),
        "Producer.send(key)": lambda v: producer.send("t", b"v", key=v),
        "Producer.send(partition)": lambda v: producer.send("t", b"v", partition=v),
        "Producer.send(headers)": lambda v: producer.send("t", b"v", headers=v),
        "Producer.send(headers key)": lambda v: producer.send("t", b"v", headers=[(v, b"x")]),
        "Producer.send(headers value)": lambda v: producer.send("t", b"v", headers={"h": v}),
        "Producer.send(timestamp)": lambda v: producer.send("t", b"v", timestamp=v),
        "Producer.send(callback)": lambda v: producer.send("t", b"v", callback=v),
        "Producer.flush(timeout)": producer.flush,
        "Producer.close(timeout)": lambda v: Producer(url).close(v),
        "Producer.prepare_transaction(timeout)": txn.prepare_transaction,
        "Producer.partitions_for": producer.partitions_for,
        "Producer.init_transactions(timeout)": txn.init_transactions,
        "Producer.commit_transaction(timeout)": txn.commit_transaction,
        "Producer.abort_transaction(timeout)": txn.abort_transaction,
        "Producer.send_offsets_to_transaction(offsets)": lambda v: txn.send_offsets_to_transaction(
            v, consumer_group_metadata()
        ),
        "Producer.send_offsets_to_transaction(group)": lambda v: txn.send_offsets_to_transaction({}, v),
        "Consumer.assign": consumer.assign,
        "Consumer.assign([v])": lambda v: consumer.assign([v]),
        "Consumer.assign(topic)": lambda v: consumer.assign([TopicPartition(v, 0)]),
        "Consumer.assign(partition)": lambda v: consumer.assign([TopicPartition("t", v)]),
        "Consumer.seek(offset)": lambda v: consumer.seek(TP, v),
        "Consumer.seek(partition)": lambda v: consumer.seek(v, 0),
        "Consumer.subscribe": member.subscribe,
        "Consumer.subscribe(on_assign)": lambda v: member.subscribe(["t"], on_assign=v),
        "Consumer.poll(timeout)": lambda v: consumer.poll(0 if _slow(v) else v),
        "Consumer.position": consumer.position,
        "Consumer.pause": consumer.pause,
        "Consumer.resume": consumer.resume,
        "Consumer.seek_to_beginning": consumer.seek_to_beginning,
        "Consumer.seek_to_end": consumer.seek_to_end,
        "Consumer.beginning_offsets": consumer.beginning_offsets,
        "Consumer.end_offsets": consumer.end_offsets,
        "Consumer.commit": consumer.commit,
        "Consumer.committed": consumer.committed,
        "Admin.create_topic(name)": admin.create_topic,
        "Admin.create_topic(partitions)": lambda v: admin.create_topic("n", partitions=1 if _many(v) else v),
        "Admin.create_topic(config)": lambda v: admin.create_topic("c", config=v),
        "Admin.create_topic(config value)": lambda v: admin.create_topic("c", config={"retention_ms": v}),
        "Admin.delete_topic": admin.delete_topic,
        "Admin.describe_topic": admin.describe_topic,
        "Admin.create_partitions": lambda v: admin.create_partitions("t", 3 if _many(v) else v),
        "Admin.alter_topic_config": lambda v: admin.alter_topic_config("t", v),
        "Admin.alter_topic_config(value)": lambda v: admin.alter_topic_config("t", {"max_message_bytes": v}),
        "Admin.list_transactions": admin.list_transactions,
        "Admin.describe_transaction": admin.describe_transaction,
        "Admin.find_hanging_transactions": admin.find_hanging_transactions,
        "Admin.abort_transaction": admin.abort_transaction,
        "Admin.expire_txn_history": admin.expire_txn_history,
        "Admin.enforce_retention": admin.enforce_retention,
        "Admin.list_offsets": admin.list_offsets,
        "Admin.offsets_for_times(topic)": lambda v: admin.offsets_for_times(v, datetime.now(UTC)),
        "Admin.offsets_for_times(timestamp)": lambda v: admin.offsets_for_times("t", v),
        "Admin.max_timestamp_offsets(topic)": admin.max_timestamp_offsets,
        "Admin.max_timestamp_offsets(isolation_level)": lambda v: admin.max_timestamp_offsets("t", isolation_level=v),
        "Admin.describe_producers(topic)": admin.describe_producers,
        "Admin.describe_producers(partition)": lambda v: admin.describe_producers("t", v),
        "Admin.describe_group": admin.describe_group,
        "Admin.group_lag": admin.group_lag,
        "Admin.remove_group_members(group)": lambda v: admin.remove_group_members(v, member_ids=["m"]),
        "Admin.remove_group_members(instance_ids)": lambda v: admin.remove_group_members("g", instance_ids=v),
        "Admin.remove_group_members(member_ids)": lambda v: admin.remove_group_members("g", member_ids=v),
        "Admin.delete_group_offsets(group)": lambda v: admin.delete_group_offsets(v, []),
        "Admin.delete_group_offsets(partitions)": lambda v: admin.delete_group_offsets("g", v),
        "Admin.reset_group_offsets(group)": lambda v: admin.reset_group_offsets(v, {}),
        "Admin.reset_group_offsets(offsets)": lambda v: admin.reset_group_offsets("g", v),
        "Admin.reset_group_offsets(dry_run)": lambda v: admin.reset_group_offsets("g", {}, dry_run=v),
        "Admin.create_acls": admin.create_acls,
        "Admin.create_acls(principal)": lambda v: admin.create_acls([AclBinding(v, "topic", "t", "read")]),
        "Admin.delete_acls": admin.delete_acls,
        "Admin.describe_acls": admin.describe_acls,
        "Admin.set_acl_enforcement": lambda v: admin.set_acl_enforcement(v) and admin.set_acl_enforcement(False),
    }
    producer_settings = [
        "transactional_id",
        "transaction_timeout_ms",
        "enable_idempotence",
        "linger_ms",
        "batch_size",
        "max_batch_records",
        "buffer_memory",
        "max_block_ms",
        "max_in_flight",
        "delivery_timeout_ms",
        "retry_backoff_ms",
        "retry_backoff_max_ms",
        "metadata_max_age_ms",
        "key_serializer",
        "value_serializer",
        "partitioner",
    ]
    consumer_settings = [
        "group_id",
        "group_instance_id",
        "client_id",
        "isolation_level",
        "enable_auto_commit",
        "auto_commit_interval_ms",
        "auto_offset_reset",
        "session_timeout_ms",
        "heartbeat_interval_ms",
        "max_poll_interval_ms",
        "max_poll_records",
        "partition_assignment_strategy",
        "default_api_timeout_ms",
        "fetch_min_backoff_ms",
        "fetch_max_backoff_ms",
        "read_ahead",
        "key_deserializer",
        "value_deserializer",
    ]
    for name in producer_settings:
        points[f"Producer({name}=)"] = _constructor(Producer, url, name)
    for name in consumer_settings:
        points[f"Consumer({name}=)"] = _constructor(Consumer, url, name)
    return points


def _constructor(cls: type[Client], url: str, setting: str) -> EntryPoint:
    def make(value: Any) -> object:
        return cls(url, **{setting: value})

    return make


def consumer_group_metadata() -> ConsumerGroupMetadata:
    return ConsumerGroupMetadata("g", 1, "m")


def test_every_entry_point_takes_junk_with_a_typed_error(db_url: str) -> None:
    with (
        Admin(db_url) as admin,
        Producer(db_url, linger_ms=0, delivery_timeout_ms=5000, max_block_ms=2000) as producer,
        Producer(db_url, transactional_id="junk", max_block_ms=2000) as txn,
        Consumer(db_url, default_api_timeout_ms=2000) as consumer,
        Consumer(db_url, group_id="g", default_api_timeout_ms=2000) as member,
    ):
        admin.create_topic("t", partitions=2)
        points = entry_points(db_url, admin, producer, txn, consumer, member)

        # 1500 examples take about 3 s here: most junk is refused before any database call.
        @settings(max_examples=1500, deadline=None, database=None)
        @given(name=st.sampled_from(sorted(points)), value=JUNK)
        def junk_is_refused_or_taken(name: str, value: object) -> None:
            try:
                result = points[name](value)
            except errors.OncelogError:
                return
            if isinstance(result, Client):
                result.close()

        junk_is_refused_or_taken()
