"""The idempotent producer's rules and the log's maintenance, at the store seam.

Each test names the rule it checks (docs/concepts.md's numbering: rules 1-10, scenarios 1-5 and 8). Every
call goes through ``oncelog.store.log`` / ``oncelog.store.topics`` on an autocommit connection, so
each call is one transaction, as a client's request would be. Where a state cannot be reached
through the public functions in a test's time (a sequence near 2**31, an epoch near 32767, a
day-old idle producer), the test sets that one column with SQL and says so.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from oncelog import errors
from oncelog.store import log, topics
from oncelog.store.errors import mapped_errors
from oncelog.store.records import (
    FetchedRecord,
    ProduceResult,
    ProducerIdAndEpoch,
    RecordIn,
    encode_headers,
    record_size,
)
from tests.support.clock import server_time

T = "events"
#: What a topic created without compaction settings has (migration 0033: Kafka's defaults).
COMPACTION_DEFAULTS: dict[str, object] = {
    "cleanup_policy": "delete",
    "min_compaction_lag_ms": 0,
    "max_compaction_lag_ms": None,
    "delete_retention_ms": 86_400_000,
    "min_cleanable_dirty_ratio": 0.5,
}
MAX_SEQ = 2147483647
DEFAULT_MAX_MESSAGE_BYTES = 1048588
#: settings.log_retention_ms: the retention of a topic without its own (Kafka's 7 days, revision 0025).
DEFAULT_RETENTION_MS = 604_800_000
DAY = timedelta(days=1)


@pytest.fixture
def conn(conn: sa.Connection) -> sa.Connection:
    """The autocommit connection of conftest, with the topic created."""
    topics.create_topic(conn, name=T, partitions=2)
    return conn


# --- helpers ---------------------------------------------------------------------------------


def recs(*values: bytes) -> list[RecordIn]:
    return [RecordIn(value=v) for v in values]


def batch(tag: str, n: int) -> list[RecordIn]:
    """``n`` records whose values say which batch they came from."""
    return [RecordIn(value=f"{tag}-{i}".encode()) for i in range(n)]


def send(
    conn: sa.Connection,
    pid: int | None,
    epoch: int | None,
    seq: int | None,
    records: Sequence[RecordIn],
    *,
    partition: int = 0,
    topic: str = T,
) -> ProduceResult:
    return log.produce(
        conn,
        topic=topic,
        partition=partition,
        records=records,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def read_all(conn: sa.Connection, partition: int = 0, topic: str = T) -> list[FetchedRecord]:
    """Every record of the partition from its log start."""
    start = next(p.log_start_offset for p in log.list_offsets(conn, topic=topic) if p.partition == partition)
    return log.fetch(conn, topic=topic, partition=partition, offset=start, max_records=100_000).records


def contents(conn: sa.Connection, partition: int = 0, topic: str = T) -> list[tuple[int, bytes | None, Any, Any, Any]]:
    return [(r.offset, r.value, r.producer_id, r.producer_epoch, r.sequence) for r in read_all(conn, partition, topic)]


def offsets(conn: sa.Connection, partition: int = 0, topic: str = T) -> tuple[int, int]:
    p = next(p for p in log.list_offsets(conn, topic=topic) if p.partition == partition)
    return p.log_start_offset, p.high_watermark


def new_producer(conn: sa.Connection) -> int:
    ident = log.init_producer_id(conn)
    assert ident.epoch == 0
    return ident.producer_id


def db_now(conn: sa.Connection) -> datetime:
    """The database's clock (expiry and retention compare against it, not the test machine's)."""
    value = conn.exec_driver_sql("SELECT now()").scalar_one()
    assert isinstance(value, datetime)
    return value


def raw_produce(conn: sa.Connection, sql_args: str, params: dict[str, Any] | None = None) -> None:
    """Call the produce function as another client (psql, JDBC) would, with arguments the wrapper cannot build.

    produce_v2 replaced produce_v1 in migration 0003; the rules tested here are the same in both.
    """
    with mapped_errors():
        conn.exec_driver_sql(f"SELECT * FROM produce_v2({sql_args})", params or {})


def state_rows(conn: sa.Connection, pid: int) -> int:
    return int(
        conn.execute(
            sa.text("SELECT count(*) FROM producer_partition_state WHERE producer_id = :p"), {"p": pid}
        ).scalar_one()
    )


# --- rule 1: the duplicate window (scenario 1) -----------------------------------------------


def test_each_of_the_last_five_batches_is_recognised_as_a_duplicate(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    sizes = [1, 3, 2, 1, 4]
    originals: list[tuple[int, int, list[RecordIn], ProduceResult]] = []
    seq = 0
    for i, n in enumerate(sizes):
        records = batch(f"b{i}", n)
        result = send(conn, pid, 0, seq, records)
        assert not result.duplicate
        assert result.last_offset - result.base_offset == n - 1
        originals.append((seq, n, records, result))
        seq += n
    log_before = contents(conn)
    assert len(log_before) == sum(sizes)

    for first_seq, _n, records, original in originals:
        again = send(conn, pid, 0, first_seq, records)
        assert again.duplicate
        assert (again.base_offset, again.last_offset) == (original.base_offset, original.last_offset)
        assert again.log_append_time == original.log_append_time
    assert contents(conn) == log_before
    assert offsets(conn) == (0, sum(sizes))

    # The window did not move: the next batch follows the last one written.
    nxt = send(conn, pid, 0, seq, batch("next", 2))
    assert not nxt.duplicate
    assert nxt.base_offset == sum(sizes)


def test_a_duplicate_is_detected_even_when_other_records_came_between(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    other = new_producer(conn)
    first = send(conn, pid, 0, 0, batch("mine", 2))
    send(conn, other, 0, 0, batch("theirs", 3))
    send(conn, None, None, None, batch("plain", 1))
    again = send(conn, pid, 0, 0, batch("mine", 2))
    assert again.duplicate
    assert (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset) == (0, 1)
    assert offsets(conn) == (0, 6)


def test_a_retry_older_than_the_window_is_out_of_order_and_appends_nothing(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    for i in range(6):
        send(conn, pid, 0, i, batch(f"b{i}", 1))
    before = contents(conn)
    # Batch 0 has five newer batches: it left the window (scenario 2).
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, 0, batch("b0", 1))
    assert contents(conn) == before
    # Batch 1 is the oldest of the five retained: still a duplicate.
    assert send(conn, pid, 0, 1, batch("b1", 1)).duplicate
    assert contents(conn) == before


def test_a_retry_with_a_different_record_count_is_not_a_duplicate(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 3))
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, 0, batch("a", 2))  # same first sequence, another last sequence
    assert offsets(conn) == (0, 3)


def test_sequences_are_per_partition(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("p0", 3), partition=0)
    # Partition 1 has no state for this producer: it starts at 0, whatever partition 0 is at.
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, 3, batch("p1", 1), partition=1)
    r = send(conn, pid, 0, 0, batch("p0", 3), partition=1)
    assert not r.duplicate  # the same sequences on another partition are another batch
    assert (r.base_offset, r.last_offset) == (0, 2)
    assert [x.sequence for x in read_all(conn, partition=1)] == [0, 1, 2]
    assert send(conn, pid, 0, 3, batch("p0b", 1), partition=0).base_offset == 3


# --- rule 3: sequence order (scenario 3) -----------------------------------------------------


def test_records_carry_consecutive_sequences(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 2))
    send(conn, pid, 0, 2, batch("b", 3))
    assert contents(conn) == [
        (0, b"a-0", pid, 0, 0),
        (1, b"a-1", pid, 0, 1),
        (2, b"b-0", pid, 0, 2),
        (3, b"b-1", pid, 0, 3),
        (4, b"b-2", pid, 0, 4),
    ]


@pytest.mark.parametrize("bad_seq", [4, 6, 100, MAX_SEQ], ids=["gap-1", "gap+1", "gap-big", "max"])
def test_a_gap_in_sequence_is_out_of_order(conn: sa.Connection, bad_seq: int) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 5))  # last sequence 4, next 5
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, bad_seq, batch("x", 1))
    assert offsets(conn) == (0, 5)
    assert send(conn, pid, 0, 5, batch("b", 1)).base_offset == 5


@pytest.mark.parametrize("bad_seq", [0, 1, 2, 3], ids=["older-batch", "first-of-last", "inside-last", "last-of-last"])
def test_a_repeated_sequence_that_is_not_a_retry_is_out_of_order(conn: sa.Connection, bad_seq: int) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 1))  # sequence 0
    send(conn, pid, 0, 1, batch("b", 3))  # sequences 1..3
    # Single-record batches at already-used sequences match no retained (first, last) pair,
    # except sequence 0, which is batch "a" again: that one is a duplicate, not an error.
    if bad_seq == 0:
        assert send(conn, pid, 0, 0, batch("a", 1)).duplicate
    else:
        with pytest.raises(errors.OutOfOrderSequenceError):
            send(conn, pid, 0, bad_seq, batch("x", 1))
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, bad_seq, batch("x", 2))  # overlaps used sequences, matches nothing
    assert offsets(conn) == (0, 4)


def _set_last_sequence(conn: sa.Connection, pid: int, last_seq: int, partition: int = 0) -> None:
    # Fixture by SQL: reaching sequence 2**31 - 1 through produce would take 2**31 records.
    # The state row is put where 2**31 records would have left it: one retained batch ending there.
    updated = conn.execute(
        sa.text(
            "UPDATE producer_partition_state SET first_sequences = ARRAY[:s], last_sequences = ARRAY[:s], "
            "first_offsets = last_offsets[cardinality(last_offsets):], "
            "last_offsets = last_offsets[cardinality(last_offsets):], "
            "timestamps = timestamps[cardinality(timestamps):] "
            "WHERE producer_id = :p AND partition = :part"
        ),
        {"s": last_seq, "p": pid, "part": partition},
    ).rowcount
    assert updated == 1


def test_sequence_wraps_from_max_to_zero(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 1))
    _set_last_sequence(conn, pid, MAX_SEQ)
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, 1, batch("x", 1))  # 1 does not follow 2147483647
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, MAX_SEQ, batch("x", 2))  # a gap of 2**31 - 1 (not a retry: last seqs differ)
    r = send(conn, pid, 0, 0, batch("b", 1))  # 0 follows 2147483647
    assert not r.duplicate
    assert r.base_offset == 1
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, 2, batch("x", 1))
    assert send(conn, pid, 0, 1, batch("c", 1)).base_offset == 2
    assert [x.sequence for x in read_all(conn)] == [0, 0, 1]


def test_a_batch_may_span_the_wrap(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 1))
    _set_last_sequence(conn, pid, MAX_SEQ - 2)
    first = send(conn, pid, 0, MAX_SEQ - 1, batch("w", 3))  # sequences MAX-1, MAX, 0
    assert (first.base_offset, first.last_offset) == (1, 3)
    assert [x.sequence for x in read_all(conn)][1:] == [MAX_SEQ - 1, MAX_SEQ, 0]
    # Its retry is a duplicate (its last sequence is 0), and the next batch starts at 1.
    again = send(conn, pid, 0, MAX_SEQ - 1, batch("w", 3))
    assert again.duplicate
    assert (again.base_offset, again.last_offset) == (1, 3)
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, 0, batch("x", 1))
    assert send(conn, pid, 0, 1, batch("n", 1)).base_offset == 4


# --- rules 2 and 4: epochs (scenario 4) ------------------------------------------------------


def test_a_lower_epoch_is_an_invalid_producer_epoch(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 1))
    assert log.init_producer_id(conn, producer_id=pid, epoch=0).epoch == 1
    before = contents(conn)
    with pytest.raises(errors.InvalidProducerEpochError):
        send(conn, pid, 0, 1, batch("x", 1))  # the next sequence of the old epoch
    with pytest.raises(errors.InvalidProducerEpochError):
        send(conn, pid, 0, 0, batch("a", 1))  # a retry from the old epoch is not a duplicate
    assert contents(conn) == before


def test_an_epoch_never_issued_is_an_invalid_producer_epoch(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    with pytest.raises(errors.InvalidProducerEpochError):
        send(conn, pid, 1, 0, batch("x", 1))
    send(conn, pid, 0, 0, batch("a", 1))
    with pytest.raises(errors.InvalidProducerEpochError):
        send(conn, pid, 5, 0, batch("x", 1))
    assert offsets(conn) == (0, 1)


def test_after_a_bump_the_new_epoch_starts_at_zero_with_a_fresh_window(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 2))
    send(conn, pid, 0, 2, batch("b", 2))
    bumped = log.init_producer_id(conn, producer_id=pid, epoch=0)
    assert (bumped.producer_id, bumped.epoch) == (pid, 1)
    for bad in (7, 4, 2):  # 4 would have followed the old epoch; 2 is an old batch's first sequence
        with pytest.raises(errors.OutOfOrderSequenceError):
            send(conn, pid, 1, bad, batch("x", 2))
    # Same sequences as the old epoch's first batch, but the window was reset: a new batch.
    r = send(conn, pid, 1, 0, batch("a", 2))
    assert not r.duplicate
    assert (r.base_offset, r.last_offset) == (4, 5)
    # The old epoch's second batch (2..3) is not in the new window either.
    r2 = send(conn, pid, 1, 2, batch("b", 2))
    assert not r2.duplicate
    assert r2.base_offset == 6
    assert send(conn, pid, 1, 0, batch("a", 2)).duplicate
    assert [(x.producer_epoch, x.sequence) for x in read_all(conn)] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 0),
        (1, 1),
        (1, 2),
        (1, 3),
    ]


def test_a_bump_applies_to_every_partition(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 1), partition=0)
    send(conn, pid, 0, 0, batch("a", 1), partition=1)
    log.init_producer_id(conn, producer_id=pid, epoch=0)
    for part in (0, 1):
        with pytest.raises(errors.OutOfOrderSequenceError):
            send(conn, pid, 1, 1, batch("x", 1), partition=part)
        assert send(conn, pid, 1, 0, batch("n", 1), partition=part).base_offset == 1


def test_an_unknown_producer_id_is_refused(conn: sa.Connection) -> None:
    with pytest.raises(errors.UnknownProducerIdError):
        send(conn, 10**12, 0, 0, batch("x", 1))
    assert offsets(conn) == (0, 0)


def test_a_known_producer_without_state_on_the_partition_must_start_at_zero(conn: sa.Connection) -> None:
    # Scenario 5: Kafka accepts any sequence here; oncelog keeps state durably and requires 0.
    pid = new_producer(conn)
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, 57, batch("x", 1))
    assert offsets(conn) == (0, 0)
    assert state_rows(conn, pid) == 0
    assert send(conn, pid, 0, 0, batch("a", 1)).base_offset == 0


# --- InitProducerId without a transactional id (rules 11-13, scenario 8) -----------------------


def test_init_producer_id_issues_distinct_ids_at_epoch_zero(conn: sa.Connection) -> None:
    ids = [log.init_producer_id(conn) for _ in range(5)]
    assert all(i.epoch == 0 for i in ids)
    assert len({i.producer_id for i in ids}) == 5


def test_kip360_bump_and_its_retry(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    first = log.init_producer_id(conn, producer_id=pid, epoch=0)
    assert (first.producer_id, first.epoch) == (pid, 1)
    # The reply was lost: the producer asks again with the epoch it held, and gets the same answer.
    assert log.init_producer_id(conn, producer_id=pid, epoch=0) == first
    assert log.init_producer_id(conn, producer_id=pid, epoch=0) == first
    second = log.init_producer_id(conn, producer_id=pid, epoch=1)
    assert (second.producer_id, second.epoch) == (pid, 2)
    # Epoch 0 is now two bumps old: neither current nor the last one.
    with pytest.raises(errors.InvalidProducerEpochError):
        log.init_producer_id(conn, producer_id=pid, epoch=0)
    with pytest.raises(errors.InvalidProducerEpochError):
        log.init_producer_id(conn, producer_id=pid, epoch=9)  # never issued
    # The failures burned no epoch.
    assert log.init_producer_id(conn, producer_id=pid, epoch=2) == ProducerIdAndEpoch(pid, 3)


def test_init_producer_id_needs_both_id_and_epoch_or_neither(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    with pytest.raises(errors.InvalidRequestError):
        log.init_producer_id(conn, producer_id=pid)
    with pytest.raises(errors.InvalidRequestError):
        log.init_producer_id(conn, epoch=0)


def test_init_producer_id_with_an_unknown_id_issues_a_new_one(conn: sa.Connection) -> None:
    known = new_producer(conn)
    fresh = log.init_producer_id(conn, producer_id=10**12, epoch=3)
    assert fresh.epoch == 0
    assert fresh.producer_id not in (known, 10**12)


def _set_epoch(conn: sa.Connection, pid: int, epoch: int) -> None:
    # Fixture by SQL: reaching epoch 32765 through InitProducerId would take 32765 bumps.
    assert (
        conn.execute(sa.text("UPDATE producers SET epoch = :e WHERE producer_id = :p"), {"e": epoch, "p": pid}).rowcount
        == 1
    )


def test_epoch_exhaustion_gives_a_new_producer_id(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    _set_epoch(conn, pid, 32765)
    assert log.init_producer_id(conn, producer_id=pid, epoch=32765) == ProducerIdAndEpoch(pid, 32766)
    send(conn, pid, 32766, 0, batch("last", 1))
    fresh = log.init_producer_id(conn, producer_id=pid, epoch=32766)
    assert fresh.epoch == 0
    assert fresh.producer_id != pid
    # The new id starts like any new producer.
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, fresh.producer_id, 0, 1, batch("x", 1))
    assert send(conn, fresh.producer_id, 0, 0, batch("new", 1)).base_offset == 1
    # The reserved epoch 32767 was never handed out.
    assert conn.execute(sa.text("SELECT max(epoch) FROM producers")).scalar_one() == 32766


@pytest.mark.parametrize(
    ("epoch", "seq", "partition", "expected"),
    [
        (32768, 0, 0, (errors.InvalidRecordError, errors.InvalidProducerEpochError)),
        (0, 2**31, 0, (errors.InvalidRecordError,)),
        (0, 0, 2**31, (errors.UnknownTopicOrPartitionError,)),
    ],
    ids=["epoch-2^15", "sequence-2^31", "partition-2^31"],
)
def test_out_of_range_numbers_in_produce_are_typed_errors(
    conn: sa.Connection, epoch: int, seq: int, partition: int, expected: tuple[type[Exception], ...]
) -> None:
    """Beyond Kafka's int16 epoch / int32 sequence and partition: a typed error, never a raw driver error."""
    pid = new_producer(conn)
    with pytest.raises(expected):
        send(conn, pid, epoch, seq, batch("x", 1), partition=partition)
    _nothing_written(conn)


def test_out_of_range_epoch_in_init_producer_id_is_a_typed_error(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    with pytest.raises((errors.InvalidProducerEpochError, errors.InvalidRequestError)):
        log.init_producer_id(conn, producer_id=pid, epoch=40000)
    assert log.init_producer_id(conn, producer_id=pid, epoch=0) == ProducerIdAndEpoch(pid, 1)


# --- producers without idempotence -----------------------------------------------------------


def test_a_producer_without_idempotence_appends_every_time(conn: sa.Connection) -> None:
    a = send(conn, None, None, None, batch("p", 2))
    b = send(conn, None, None, None, batch("p", 2))  # the same batch again: no dedup without an id
    assert (a.base_offset, a.last_offset, a.duplicate) == (0, 1, False)
    assert (b.base_offset, b.last_offset, b.duplicate) == (2, 3, False)
    assert contents(conn) == [
        (0, b"p-0", None, None, None),
        (1, b"p-1", None, None, None),
        (2, b"p-0", None, None, None),
        (3, b"p-1", None, None, None),
    ]
    assert conn.exec_driver_sql("SELECT count(*) FROM producer_partition_state").scalar_one() == 0


def test_keys_headers_timestamps_and_tombstones_round_trip(conn: sa.Connection) -> None:
    ts = datetime(2021, 2, 3, 4, 5, 6, 789000, tzinfo=UTC)
    sent = [
        RecordIn(value=b"v", key=b"k", headers=[("h", b"1"), ("h", None), ("\u00e9", b"\x00\xff")], timestamp=ts),
        RecordIn(value=None, key=b"k"),  # a tombstone
        RecordIn(value=b"", key=None),
    ]
    result = send(conn, None, None, None, sent)
    got = read_all(conn)
    assert [(r.key, r.value, r.headers) for r in got] == [
        (b"k", b"v", (("h", b"1"), ("h", None), ("\u00e9", b"\x00\xff"))),
        (b"k", None, ()),
        (None, b"", ()),
    ]
    assert got[0].timestamp == ts
    assert got[1].timestamp == got[2].timestamp == result.log_append_time


# --- bad input: a typed error, nothing written -----------------------------------------------


def _nothing_written(conn: sa.Connection) -> None:
    assert offsets(conn, 0) == (0, 0)
    assert offsets(conn, 1) == (0, 0)
    assert conn.exec_driver_sql("SELECT count(*) FROM records").scalar_one() == 0
    assert conn.exec_driver_sql("SELECT count(*) FROM producer_partition_state").scalar_one() == 0


def test_unknown_topic(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        send(conn, pid, 0, 0, batch("x", 1), topic="nope")
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        send(conn, None, None, None, batch("x", 1), topic="nope")
    _nothing_written(conn)


@pytest.mark.parametrize("partition", [2, 3, -1])
def test_unknown_partition(conn: sa.Connection, partition: int) -> None:
    pid = new_producer(conn)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        send(conn, pid, 0, 0, batch("x", 1), partition=partition)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        send(conn, None, None, None, batch("x", 1), partition=partition)
    _nothing_written(conn)


def test_empty_batch(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    with pytest.raises(errors.InvalidRecordError):
        send(conn, pid, 0, 0, [])
    with pytest.raises(errors.InvalidRecordError):
        send(conn, None, None, None, [])
    with pytest.raises(errors.InvalidRecordError):
        raw_produce(conn, "'events', 0, NULL, NULL, NULL, NULL::bytea[], NULL::bytea[]")
    _nothing_written(conn)
    assert send(conn, pid, 0, 0, batch("a", 1)).base_offset == 0  # the sequence was not consumed


def test_a_single_record_instead_of_a_list_is_refused(conn: sa.Connection) -> None:
    with pytest.raises(errors.InvalidRecordError):
        send(conn, None, None, None, RecordIn(value=b"x"))  # type: ignore[arg-type]
    _nothing_written(conn)


@pytest.mark.parametrize(
    "args",
    [
        "ARRAY[NULL, NULL]::bytea[], ARRAY['\\x01']::bytea[]",  # keys longer than values
        "ARRAY[NULL]::bytea[], ARRAY['\\x01', '\\x02']::bytea[]",  # keys shorter than values
        "NULL::bytea[], ARRAY['\\x01']::bytea[]",  # no keys array at all
        "ARRAY[NULL]::bytea[], ARRAY['\\x01']::bytea[], ARRAY['[]', '[]']::jsonb[]",  # headers
        "ARRAY[NULL]::bytea[], ARRAY['\\x01']::bytea[], NULL, ARRAY[now(), now()]",  # timestamps
    ],
    ids=["keys-long", "keys-short", "keys-null", "headers", "timestamps"],
)
def test_mismatched_array_lengths(conn: sa.Connection, args: str) -> None:
    with pytest.raises(errors.InvalidRecordError):
        raw_produce(conn, f"'events', 0, NULL, NULL, NULL, {args}")
    _nothing_written(conn)


def test_negative_sequence_or_epoch(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    with pytest.raises(errors.InvalidRecordError):
        send(conn, pid, 0, -1, batch("x", 1))
    with pytest.raises(errors.InvalidRecordError):
        send(conn, pid, -1, 0, batch("x", 1))
    _nothing_written(conn)


def test_epoch_or_sequence_without_producer_id(conn: sa.Connection) -> None:
    with pytest.raises(errors.InvalidRecordError):
        send(conn, None, 0, None, batch("x", 1))
    with pytest.raises(errors.InvalidRecordError):
        send(conn, None, None, 0, batch("x", 1))
    with pytest.raises(errors.InvalidRecordError):
        send(conn, None, 0, 0, batch("x", 1))
    _nothing_written(conn)


def test_producer_id_without_epoch_or_sequence(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    with pytest.raises(errors.InvalidRecordError):
        send(conn, pid, None, 0, batch("x", 1))
    with pytest.raises(errors.InvalidRecordError):
        send(conn, pid, 0, None, batch("x", 1))
    _nothing_written(conn)


def test_oversize_record_counts_key_value_and_headers(conn: sa.Connection) -> None:
    topics.create_topic(conn, name="small", partitions=1, config={"max_message_bytes": 100})
    pid = new_producer(conn)
    headers = [("trace", b"abc"), ("\u00e9t\u00e9", None)]
    h_size = record_size(None, None, encode_headers(headers))
    assert 0 < h_size < 80

    def at(n: int, *, key: bytes | None = None, with_headers: bool = False) -> RecordIn:
        return RecordIn(value=b"v" * n, key=key, headers=headers if with_headers else None)

    too_big = [
        at(101),
        at(51, key=b"k" * 50),
        at(101 - h_size, with_headers=True),
        at(91 - h_size, key=b"k" * 10, with_headers=True),
    ]
    for record in too_big:
        with pytest.raises(errors.RecordTooLargeError):
            send(conn, pid, 0, 0, [at(1), record], topic="small")  # one bad record fails the batch
    assert offsets(conn, topic="small") == (0, 0)
    assert conn.exec_driver_sql("SELECT count(*) FROM producer_partition_state").scalar_one() == 0

    # Exactly at the limit is accepted, whatever the mix; the limit is per record, not per batch.
    fits = [
        at(100),
        at(50, key=b"k" * 50),
        at(100 - h_size, with_headers=True),
        at(90 - h_size, key=b"k" * 10, with_headers=True),
    ]
    assert all(record_size(r.key, r.value, encode_headers(r.headers)) == 100 for r in fits)
    r = send(conn, pid, 0, 0, fits, topic="small")
    assert (r.base_offset, r.last_offset) == (0, 3)


def test_too_many_records_in_one_batch(conn: sa.Connection) -> None:
    # Fixture by SQL: the store-wide limit (100000 by default) lowered for the test.
    conn.exec_driver_sql("UPDATE settings SET max_batch_records = 3")
    pid = new_producer(conn)
    with pytest.raises(errors.RecordBatchTooLargeError):
        send(conn, pid, 0, 0, batch("x", 4))
    with pytest.raises(errors.RecordBatchTooLargeError):
        send(conn, None, None, None, batch("x", 4))
    _nothing_written(conn)
    assert send(conn, pid, 0, 0, batch("a", 3)).last_offset == 2


@pytest.mark.parametrize("header", ["'{}'", '\'{"key": "a"}\'', "'\"text\"'", "'1'", "'null'"])
def test_headers_must_be_json_arrays(conn: sa.Connection, header: str) -> None:
    with pytest.raises(errors.InvalidRecordError):
        raw_produce(
            conn,
            f"'events', 0, NULL, NULL, NULL, ARRAY[NULL]::bytea[], ARRAY['\\x01']::bytea[], ARRAY[{header}]::jsonb[]",
        )
    _nothing_written(conn)


def test_a_header_key_with_a_nul_character_is_stored_or_refused_with_a_typed_error(conn: sa.Connection) -> None:
    """Kafka header keys are any Java string; jsonb cannot hold U+0000. Either round-trip or InvalidRecordError."""
    headers = [("a\x00b", b"v")]
    try:
        send(conn, None, None, None, [RecordIn(value=b"x", headers=headers)])
    except errors.InvalidRecordError:
        _nothing_written(conn)
    else:
        assert read_all(conn)[0].headers == (("a\x00b", b"v"),)


def test_headers_as_written_by_the_wrapper_are_accepted_from_sql_too(conn: sa.Connection) -> None:
    h = json.dumps([{"key": "a", "value": base64.b64encode(b"z").decode()}])
    raw_produce(
        conn,
        "'events', 0, NULL, NULL, NULL, ARRAY[NULL]::bytea[], ARRAY['\\x01']::bytea[], ARRAY[%(h)s]::jsonb[]",
        {"h": h},
    )
    assert read_all(conn)[0].headers == (("a", b"z"),)


# --- topic administration --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "A.b_c-9", "...", "_", "-", "x" * 249, "0"])
def test_valid_topic_names(engine: sa.Engine, name: str) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        topics.create_topic(c, name=name, partitions=1)
        assert topics.list_topics(c) == {name: 1}


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a b", " a", "a\n", "x" * 250, "t\u00f4pic", "\u65e5\u672c", "a/b", "a:b", "a*"],
    ids=["empty", "dot", "dotdot", "space", "lead-space", "newline", "250", "accent", "cjk", "slash", "colon", "star"],
)
def test_invalid_topic_names(engine: sa.Engine, name: str) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        with pytest.raises(errors.InvalidTopicError):
            topics.create_topic(c, name=name, partitions=1)
        assert topics.list_topics(c) == {}


def test_duplicate_topic(conn: sa.Connection) -> None:
    with pytest.raises(errors.TopicAlreadyExistsError):
        topics.create_topic(conn, name=T, partitions=5)
    assert topics.list_topics(conn) == {T: 2}


@pytest.mark.parametrize("n", [0, -1, 100001])
def test_invalid_partition_counts(conn: sa.Connection, n: int) -> None:
    with pytest.raises(errors.InvalidPartitionsError):
        topics.create_topic(conn, name="other", partitions=n)
    assert "other" not in topics.list_topics(conn)


@pytest.mark.parametrize(
    "config",
    [
        {"retention": 5},
        {"max.message.bytes": 5},
        {"max_message_bytes": 0},
        {"retention_ms": -2},  # -1 is "no limit" (revision 0025); nothing else below 1
        {"retention_bytes": 0},
        {"retention_ms": 1.5},
        {"retention_ms": "1000"},
        {"retention_bytes": True},
        {"max_message_bytes": 2**31},
        {"retention_ms": 2**63},
        {"cleanup_policy": "compact,compact"},
        {"cleanup_policy": ["compact"]},
        {"min_cleanable_dirty_ratio": -0.1},
        {"min_cleanable_dirty_ratio": True},
        {"delete_retention_ms": -1},
    ],
)
def test_invalid_topic_configs(conn: sa.Connection, config: dict[str, Any]) -> None:
    with pytest.raises(errors.ConfigurationError):
        topics.create_topic(conn, name="other", partitions=1, config=config)
    assert "other" not in topics.list_topics(conn)
    with pytest.raises(errors.ConfigurationError):
        topics.alter_topic_config(conn, name=T, config=config)
    assert (
        topics.describe_topic(conn, name=T).config
        == {
            "max_message_bytes": DEFAULT_MAX_MESSAGE_BYTES,
            "retention_ms": DEFAULT_RETENTION_MS,
            "retention_bytes": None,
            "message_timestamp_after_max_ms": 3_600_000,
        }
        | COMPACTION_DEFAULTS
    )


def test_create_partitions_only_grows(conn: sa.Connection) -> None:
    topics.create_partitions(conn, name=T, total=3)
    assert topics.list_topics(conn) == {T: 3}
    for total in (3, 2, 0):
        with pytest.raises(errors.InvalidPartitionsError):
            topics.create_partitions(conn, name=T, total=total)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        topics.create_partitions(conn, name="nope", total=5)
    assert topics.list_topics(conn) == {T: 3}
    pid = new_producer(conn)
    assert send(conn, pid, 0, 0, batch("new", 2), partition=2).last_offset == 1
    assert [p.partition for p in topics.describe_topic(conn, name=T).partitions] == [0, 1, 2]


def test_delete_topic_removes_its_records_and_producer_state(conn: sa.Connection) -> None:
    topics.create_topic(conn, name="keep", partitions=1)
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 3), partition=0)
    send(conn, pid, 0, 0, batch("a", 2), partition=1)
    send(conn, pid, 0, 0, batch("k", 1), topic="keep")
    old_id = topics.describe_topic(conn, name=T).topic_id
    topics.delete_topic(conn, name=T)
    assert topics.list_topics(conn) == {"keep": 1}
    assert conn.execute(sa.text("SELECT count(*) FROM records WHERE topic_id = :t"), {"t": old_id}).scalar_one() == 0
    assert (
        conn.execute(
            sa.text("SELECT count(*) FROM producer_partition_state WHERE topic_id = :t"), {"t": old_id}
        ).scalar_one()
        == 0
    )
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        send(conn, pid, 0, 3, batch("b", 1))
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        log.fetch(conn, topic=T, partition=0, offset=0)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        topics.delete_topic(conn, name=T)
    # The other topic and the producer are untouched.
    assert send(conn, pid, 0, 0, batch("k", 1), topic="keep").duplicate
    # A topic created again under the name is a new log: offsets from 0, sequences from 0.
    topics.create_topic(conn, name=T, partitions=1)
    assert offsets(conn) == (0, 0)
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, 3, batch("b", 1))
    r = send(conn, pid, 0, 0, batch("a", 3))
    assert not r.duplicate
    assert r.base_offset == 0


def test_alter_config_and_reset_with_none(conn: sa.Connection) -> None:
    topics.alter_topic_config(conn, name=T, config={"max_message_bytes": 10, "retention_ms": 5000})
    assert (
        topics.describe_topic(conn, name=T).config
        == {
            "max_message_bytes": 10,
            "retention_ms": 5000,
            "retention_bytes": None,
            "message_timestamp_after_max_ms": 3_600_000,
        }
        | COMPACTION_DEFAULTS
    )
    assert topics.topic_metadata(conn, name=T).max_message_bytes == 10
    with pytest.raises(errors.RecordTooLargeError):
        send(conn, None, None, None, recs(b"x" * 11))
    send(conn, None, None, None, recs(b"x" * 10))
    # Keys absent from the change keep their values.
    topics.alter_topic_config(conn, name=T, config={"retention_bytes": 1 << 40})
    assert (
        topics.describe_topic(conn, name=T).config
        == {
            "max_message_bytes": 10,
            "retention_ms": 5000,
            "retention_bytes": 1 << 40,
            "message_timestamp_after_max_ms": 3_600_000,
        }
        | COMPACTION_DEFAULTS
    )
    # None resets: the default size limit, the store-wide retention (7 days), no size limit.
    topics.alter_topic_config(
        conn, name=T, config={"max_message_bytes": None, "retention_ms": None, "retention_bytes": None}
    )
    reset = topics.describe_topic(conn, name=T)
    assert (
        reset.config
        == {
            "max_message_bytes": DEFAULT_MAX_MESSAGE_BYTES,
            "retention_ms": DEFAULT_RETENTION_MS,
            "retention_bytes": None,
            "message_timestamp_after_max_ms": 3_600_000,
        }
        | COMPACTION_DEFAULTS
    )
    assert reset.defaults == {"retention_ms"}
    send(conn, None, None, None, recs(b"x" * 11))
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        topics.alter_topic_config(conn, name="nope", config={"retention_ms": 1})


def test_create_with_config_and_describe_and_list(conn: sa.Connection) -> None:
    tid = topics.create_topic(conn, name="cfg", partitions=3, config={"retention_bytes": 1000, "retention_ms": None})
    d = topics.describe_topic(conn, name="cfg")
    assert d.topic_id == tid
    assert d.name == "cfg"
    assert (
        d.config
        == {
            "max_message_bytes": DEFAULT_MAX_MESSAGE_BYTES,
            "retention_ms": DEFAULT_RETENTION_MS,
            "retention_bytes": 1000,
            "message_timestamp_after_max_ms": 3_600_000,
        }
        | COMPACTION_DEFAULTS
    )
    assert [(p.partition, p.log_start_offset, p.high_watermark) for p in d.partitions] == [
        (0, 0, 0),
        (1, 0, 0),
        (2, 0, 0),
    ]
    send(conn, None, None, None, batch("x", 4), topic="cfg", partition=1)
    d = topics.describe_topic(conn, name="cfg")
    assert [(p.partition, p.log_start_offset, p.high_watermark) for p in d.partitions] == [
        (0, 0, 0),
        (1, 0, 4),
        (2, 0, 0),
    ]
    assert topics.list_topics(conn) == {"cfg": 3, T: 2}
    assert topics.topic_metadata(conn, name="cfg").partitions == 3
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        topics.describe_topic(conn, name="nope")
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        topics.topic_metadata(conn, name="nope")
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        log.list_offsets(conn, topic="nope")


# --- retention -------------------------------------------------------------------------------


def _retain_until_done(conn: sa.Connection, *, now: datetime, batch: int = 10_000) -> int:
    total = 0
    for _ in range(1000):
        with server_time(conn, now):
            n = log.enforce_retention(conn, batch=batch)
        if n == 0:
            return total
        total += n
    raise AssertionError("retention never finished")


def _log_bytes(conn: sa.Connection, partition: int = 0, topic: str = T) -> tuple[int, int]:
    """(the partition's log_bytes counter, the bytes of its records actually stored)."""
    row = conn.execute(
        sa.text(
            "SELECT p.log_bytes, (SELECT coalesce(sum(coalesce(octet_length(r.key), 0)"
            " + coalesce(octet_length(r.value), 0)"
            " + coalesce(octet_length(r.headers::text), 0)), 0) FROM records r"
            " WHERE r.topic_id = p.topic_id AND r.partition = p.partition)"
            " FROM partitions p JOIN topics t USING (topic_id) WHERE t.name = :t AND p.partition = :p"
        ),
        {"t": topic, "p": partition},
    ).one()
    return int(row[0]), int(row[1])


def _stored(conn: sa.Connection, partition: int = 0, topic: str = T) -> int:
    return int(
        conn.execute(
            sa.text(
                "SELECT count(*) FROM records r JOIN topics t USING (topic_id) WHERE t.name = :t AND r.partition = :p"
            ),
            {"t": topic, "p": partition},
        ).scalar_one()
    )


def test_producer_state_survives_retention(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 2))
    send(conn, pid, 0, 2, batch("b", 1))
    last = send(conn, pid, 0, 3, batch("c", 2))
    topics.alter_topic_config(conn, name=T, config={"retention_ms": 1000})
    deleted = _retain_until_done(conn, now=db_now(conn) + timedelta(hours=1))
    assert deleted == 5
    assert offsets(conn) == (5, 5)
    assert _stored(conn) == 0
    assert state_rows(conn, pid) == 1
    # Complaint 3 (UNKNOWN_PRODUCER_ID after retention) does not happen: the retry is still a duplicate...
    again = send(conn, pid, 0, 3, batch("c", 2))
    assert again.duplicate
    assert (again.base_offset, again.last_offset, again.log_append_time) == (
        last.base_offset,
        last.last_offset,
        last.log_append_time,
    )
    # ...gaps are still refused, and the next sequence continues.
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, 0, batch("x", 1))
    nxt = send(conn, pid, 0, 5, batch("d", 1))
    assert (nxt.base_offset, nxt.duplicate) == (5, False)
    assert contents(conn) == [(5, b"d-0", pid, 0, 5)]


def _timed(base: datetime, tag: str, n: int, size: int = 10) -> list[RecordIn]:
    return [
        RecordIn(value=f"{tag}{i}".encode().ljust(size, b"."), timestamp=base + timedelta(seconds=i)) for i in range(n)
    ]


def test_time_retention_advances_the_log_start(conn: sa.Connection) -> None:
    base = datetime(2020, 1, 1, tzinfo=UTC)
    send(conn, None, None, None, _timed(base, "r", 10))
    send(conn, None, None, None, _timed(base, "s", 3), partition=1)
    topics.alter_topic_config(conn, name=T, config={"retention_ms": 5000})
    # Cutoff = now - 5 s = base + 7 s: records 0..6 are older, 7..9 stay.
    assert _retain_until_done(conn, now=base + timedelta(seconds=12)) == 7 + 3
    assert offsets(conn) == (7, 10)
    assert offsets(conn, 1) == (3, 3)
    assert [r.offset for r in read_all(conn)] == [7, 8, 9]
    for below in (0, 6):
        with pytest.raises(errors.OffsetOutOfRangeError):
            log.fetch(conn, topic=T, partition=0, offset=below)
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.fetch(conn, topic=T, partition=0, offset=11)  # above the high watermark
    assert log.fetch(conn, topic=T, partition=0, offset=10).records == []
    assert _log_bytes(conn) == (30, 30)
    # A pass at the same time changes nothing; a later one takes the rest.
    with server_time(conn, base + timedelta(seconds=12)):
        assert log.enforce_retention(conn) == 0
    assert _retain_until_done(conn, now=base + timedelta(seconds=100)) == 3
    assert offsets(conn) == (10, 10)


def test_size_retention_advances_the_log_start(conn: sa.Connection) -> None:
    send(conn, None, None, None, [RecordIn(value=b"v" * 10) for _ in range(10)])
    topics.alter_topic_config(conn, name=T, config={"retention_bytes": 30})
    assert _log_bytes(conn) == (100, 100)
    assert _retain_until_done(conn, now=db_now(conn)) == 7
    assert offsets(conn) == (7, 10)
    assert [r.offset for r in read_all(conn)] == [7, 8, 9]
    assert _log_bytes(conn) == (30, 30)
    with pytest.raises(errors.OffsetOutOfRangeError):
        log.fetch(conn, topic=T, partition=0, offset=6)
    # At the limit nothing more goes; one byte over and the oldest record goes.
    assert log.enforce_retention(conn) == 0
    send(conn, None, None, None, recs(b"z"))
    assert _retain_until_done(conn, now=db_now(conn)) == 1
    assert offsets(conn) == (8, 11)
    assert _log_bytes(conn) == (21, 21)


def test_size_retention_counts_keys_and_headers(conn: sa.Connection) -> None:
    record = RecordIn(value=b"v" * 4, key=b"k" * 3, headers=[("h", b"x")])
    size = record_size(record.key, record.value, encode_headers(record.headers))
    send(conn, None, None, None, [record] * 5)
    topics.alter_topic_config(conn, name=T, config={"retention_bytes": 2 * size})
    assert _log_bytes(conn) == (5 * size, 5 * size)
    _retain_until_done(conn, now=db_now(conn))
    assert offsets(conn) == (3, 5)
    assert _log_bytes(conn) == (2 * size, 2 * size)


def test_deletion_is_bounded_by_the_batch_argument(conn: sa.Connection) -> None:
    base = datetime(2020, 1, 1, tzinfo=UTC)
    send(conn, None, None, None, _timed(base, "a", 7), partition=0)
    send(conn, None, None, None, _timed(base, "b", 4), partition=1)
    topics.alter_topic_config(conn, name=T, config={"retention_ms": 1000})
    now = base + timedelta(days=1)
    # Each pass deletes at most 2 records per partition, oldest first.
    for deleted, left0, left1 in [(4, 5, 2), (4, 3, 0), (2, 1, 0), (1, 0, 0), (0, 0, 0)]:
        with server_time(conn, now):
            assert log.enforce_retention(conn, batch=2) == deleted
        assert (_stored(conn, 0), _stored(conn, 1)) == (left0, left1)
        assert conn.execute(sa.text('SELECT min("offset") FROM records WHERE partition = 0')).scalar_one() == (
            None if left0 == 0 else 7 - left0
        )
        # The log start moved on the first pass: nothing below it is readable, deleted or not.
        assert offsets(conn, 0) == (7, 7)
        assert offsets(conn, 1) == (4, 4)
    assert _log_bytes(conn, 0) == (0, 0)
    assert _log_bytes(conn, 1) == (0, 0)
    with pytest.raises(errors.InvalidRequestError):
        log.enforce_retention(conn, batch=0)


def test_bounded_size_retention_keeps_what_the_limit_allows(conn: sa.Connection) -> None:
    """Size retention in small passes must end where one big pass ends: 3 records of 10 bytes kept."""
    send(conn, None, None, None, [RecordIn(value=bytes([65 + i]) * 10) for i in range(10)])
    topics.alter_topic_config(conn, name=T, config={"retention_bytes": 30})
    _retain_until_done(conn, now=db_now(conn), batch=2)
    assert offsets(conn) == (7, 10)
    assert [r.value for r in read_all(conn)] == [b"H" * 10, b"I" * 10, b"J" * 10]
    assert _log_bytes(conn) == (30, 30)


def test_records_below_the_log_start_are_deleted_after_retention_is_turned_off(conn: sa.Connection) -> None:
    base = datetime(2020, 1, 1, tzinfo=UTC)
    send(conn, None, None, None, _timed(base, "a", 6))
    topics.alter_topic_config(conn, name=T, config={"retention_ms": 1000})
    with server_time(conn, base + DAY):
        assert log.enforce_retention(conn, batch=2) == 2
    assert offsets(conn) == (6, 6)
    topics.alter_topic_config(conn, name=T, config={"retention_ms": None})
    # Records below the log start are unreadable; turning retention off must not leave them stored forever.
    _retain_until_done(conn, now=base + DAY, batch=2)
    assert _stored(conn) == 0
    assert _log_bytes(conn) == (0, 0)


def test_the_largest_accepted_retention_does_not_break_retention(conn: sa.Connection) -> None:
    base = datetime(2020, 1, 1, tzinfo=UTC)
    topics.create_topic(conn, name="forever", partitions=1, config={"retention_ms": 2**63 - 1})
    topics.alter_topic_config(conn, name=T, config={"retention_ms": 1000})
    send(conn, None, None, None, _timed(base, "a", 3))
    send(conn, None, None, None, _timed(base, "f", 3), topic="forever")
    # The other topic's retention still runs, and the "forever" topic keeps everything.
    assert _retain_until_done(conn, now=base + DAY) == 3
    assert offsets(conn) == (3, 3)
    assert offsets(conn, topic="forever") == (0, 3)


# --- rule 9: producer-state expiry -----------------------------------------------------------


def test_expiry_keeps_state_idle_less_than_a_day(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 2))
    with server_time(conn, db_now(conn) + DAY - timedelta(minutes=1)):
        assert log.expire_producers(conn) == 0
    assert state_rows(conn, pid) == 1
    assert send(conn, pid, 0, 0, batch("a", 2)).duplicate
    assert send(conn, pid, 0, 2, batch("b", 1)).base_offset == 2


def test_expired_state_means_the_producer_starts_again_at_zero(conn: sa.Connection) -> None:
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 3), partition=0)
    send(conn, pid, 0, 0, batch("b", 1), partition=1)
    # Fixture by SQL: partition 0's state has been idle for two days (partition 1's is fresh,
    # so the producer id itself is still in use and is kept).
    conn.exec_driver_sql(
        f"UPDATE producer_partition_state SET updated_at = updated_at - interval '2 days' "
        f"WHERE producer_id = {pid} AND partition = 0"
    )
    assert log.expire_producers(conn) == 1
    assert state_rows(conn, pid) == 1
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, 3, batch("c", 1), partition=0)
    with pytest.raises(errors.OutOfOrderSequenceError):
        send(conn, pid, 0, 1, batch("c", 1), partition=0)
    r = send(conn, pid, 0, 0, batch("c", 1), partition=0)
    assert (r.base_offset, r.duplicate) == (3, False)
    # Partition 1 was untouched.
    assert send(conn, pid, 0, 0, batch("b", 1), partition=1).duplicate


def test_expiry_in_the_future_removes_state_and_idle_producer_ids(conn: sa.Connection) -> None:
    writer = new_producer(conn)
    idle = new_producer(conn)  # initialised, never wrote
    send(conn, writer, 0, 0, batch("a", 1), partition=0)
    send(conn, writer, 0, 0, batch("a", 1), partition=1)
    with server_time(conn, db_now(conn) + DAY + timedelta(minutes=1)):
        assert log.expire_producers(conn) == 2
    assert state_rows(conn, writer) == 0
    # Both ids had no state left and were idle past the expiration: forgotten entirely.
    for pid in (writer, idle):
        with pytest.raises(errors.UnknownProducerIdError):
            send(conn, pid, 0, 0, batch("x", 1))
        with pytest.raises(errors.UnknownProducerIdError):
            send(conn, pid, 0, 1, batch("x", 1))
    assert offsets(conn) == (0, 1)
    # InitProducerId with the forgotten id gives a new one, which starts at 0.
    fresh = log.init_producer_id(conn, producer_id=writer, epoch=0)
    assert fresh.producer_id != writer
    assert fresh.epoch == 0
    assert send(conn, fresh.producer_id, 0, 0, batch("n", 1)).base_offset == 1


def test_expiry_respects_the_configured_expiration(conn: sa.Connection) -> None:
    conn.exec_driver_sql("UPDATE settings SET producer_id_expiration_ms = 60000")
    pid = new_producer(conn)
    send(conn, pid, 0, 0, batch("a", 1))
    now = db_now(conn)
    with server_time(conn, now + timedelta(seconds=30)):
        assert log.expire_producers(conn) == 0
    assert send(conn, pid, 0, 0, batch("a", 1)).duplicate
    with server_time(conn, now + timedelta(minutes=5)):
        assert log.expire_producers(conn) == 1
    with pytest.raises(errors.UnknownProducerIdError):
        send(conn, pid, 0, 1, batch("b", 1))
