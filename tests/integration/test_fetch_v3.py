"""The lean fetch (fetch_v3, migration 0008), fetch_v2 rebuilt on it, and the Consumer's read path.

fetch_v2 is kept for clients of the old name: it must answer exactly as fetch_v3 does, reshaped.
The Consumer keeps one connection for its fetches between polls; these tests kill that connection
from the server side and break a deserializer mid-poll, and check that nothing is lost or skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from oncelog import Admin, Consumer, Producer, TopicPartition, errors
from oncelog.store import log
from oncelog.store.records import ProduceBatch, RecordIn, WireRecord


@pytest.fixture
def admin(db_url: str) -> Iterator[Admin]:
    with Admin(db_url) as a:
        yield a


def _fill(db_url: str, topic: str, partitions: int, per_partition: int) -> None:
    """Committed transactions, an aborted one, and non-transactional records, on every partition."""
    with Producer(db_url, transactional_id=f"fill-{topic}") as p:
        p.init_transactions()
        for n in range(per_partition):
            p.begin_transaction()
            for part in range(partitions):
                p.send(topic, f"c{n}-{part}".encode(), key=b"k", partition=part, headers=[("h", b"v"), ("n", None)])
            if n % 3 == 2:
                p.flush()  # sent first, so the aborted records are in the log, marked aborted
                p.abort_transaction()
            else:
                p.commit_transaction()
    with Producer(db_url) as p:
        for part in range(partitions):
            p.send(topic, f"plain-{part}".encode(), partition=part)


def _call(
    engine: sa.Engine, fn: str, topic: str, partitions: int, offsets: list[int], n: int, rc: bool
) -> list[sa.Row[Any]]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(f"SELECT * FROM {fn}(:t, :p, :o, :n, :rc)"),
                {"t": [topic] * partitions, "p": list(range(partitions)), "o": offsets, "n": n, "rc": rc},
            )
        )


@pytest.mark.parametrize("read_committed", [True, False])
@pytest.mark.parametrize("limit", [1, 2, 5, 100])
def test_fetch_v2_answers_as_fetch_v3(
    db_url: str, engine: sa.Engine, admin: Admin, read_committed: bool, limit: int
) -> None:
    admin.create_topic("t", partitions=3)
    _fill(db_url, "t", 3, 6)
    offsets = [0, 3, 99]  # the last is out of range
    new = _call(engine, "fetch_v3", "t", 3, offsets, limit, read_committed)
    old = _call(engine, "fetch_v2", "t", 3, offsets, limit, read_committed)
    reshaped = []
    for r in new:
        if r.offset is None:
            b = r.bounds
            row = ("partition", offsets[r.idx - 1], b[0], b[1], b[2], b[3], b[4] == 1, r.error)
        else:
            row = ("record", r.offset, r.key, r.value, r.headers, r.timestamp, r.producer_id, r.sequence)
        reshaped.append((r.idx - 1, row))
    as_old = []
    for r in old:
        if r.kind == "partition":
            row = (
                "partition",
                r.offset,
                r.log_start_offset,
                r.high_watermark,
                r.last_stable_offset,
                r.read_limit,
                r.expired_open,
                r.error,
            )
        else:
            row = ("record", r.offset, r.key, r.value, r.headers, r.timestamp, r.producer_id, r.sequence)
        assert r.topic == "t"
        as_old.append((r.partition, row))
    assert reshaped == as_old
    assert [(i, row[-1]) for i, row in as_old if row[0] == "partition"] == [
        (0, None),
        (1, None),
        (2, "offset_out_of_range"),
    ]
    records = [row for _, row in reshaped if row[0] == "record"]
    assert records, "the fetch returned nothing to compare"
    aborted = [row for row in records if row[3].startswith((b"c2-", b"c5-"))]
    # Aborted transactions (every third) reach read_uncommitted only.
    assert bool(aborted) is not read_committed


def test_fetch_many_returns_records_in_order_with_headers(db_url: str, engine: sa.Engine, admin: Admin) -> None:
    admin.create_topic("t", partitions=2)
    _fill(db_url, "t", 2, 4)
    with engine.connect() as conn:
        got = log.fetch_many(conn, {("t", 0): 0, ("t", 1): 0}, max_records=100, read_committed=True)
    for part in (0, 1):
        recs = got[("t", part)].records
        assert [r.value for r in recs] == [f"c{n}-{part}".encode() for n in (0, 1, 3)] + [f"plain-{part}".encode()]
        assert [r.offset for r in recs] == sorted(r.offset for r in recs)
        assert recs[0].headers == (("h", b"v"), ("n", None))
        assert recs[-1].headers == ()
        assert recs[0].producer_id is not None and recs[0].sequence == 0 and recs[0].key == b"k"
        assert got[("t", part)].read_limit == got[("t", part)].high_watermark


def test_fetch_many_refuses_bad_arguments_with_typed_errors(engine: sa.Engine, admin: Admin) -> None:
    admin.create_topic("t", partitions=1)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        with pytest.raises(errors.InvalidRequestError):
            log.fetch_many(conn, {("t", 0): 0}, max_records=0)
        with pytest.raises(errors.InvalidRequestError):
            log.fetch_many(conn, {("t", 0): 2**63}, max_records=10)
        # The connection is still usable after a refused fetch.
        assert log.fetch_many(conn, {("t", 0): 0}, max_records=10)[("t", 0)].records == []


def test_consumer_survives_its_connection_being_killed_between_polls(
    db_url: str, engine: sa.Engine, admin: Admin
) -> None:
    admin.create_topic("t", partitions=2)
    _fill(db_url, "t", 2, 3)
    with Consumer(db_url, max_poll_records=2) as consumer:
        consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        seen = consumer.poll(1.0)
        assert seen
        with engine.connect() as conn:
            killed = conn.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                )
            ).scalar_one()
        assert killed >= 1
        while batch := consumer.poll(1.0):
            seen.extend(batch)
    values = sorted(r.value for r in seen)
    expected = sorted([f"c{n}-{p}".encode() for n in (0, 1) for p in (0, 1)] + [b"plain-0", b"plain-1"])
    assert values == expected


def test_a_failing_deserializer_moves_no_position(db_url: str, admin: Admin) -> None:
    admin.create_topic("t", partitions=2)
    with Producer(db_url) as p:
        for part in (0, 1):
            p.send("t", b"good", partition=part)
        p.send("t", b"bad", partition=1)

    def strict(data: bytes | None) -> str:
        if data == b"bad":
            raise ValueError("cannot read this")
        return (data or b"").decode()

    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    with Consumer(db_url, value_deserializer=strict) as consumer:
        consumer.assign(tps)
        before = {tp: consumer.position(tp) for tp in tps}
        with pytest.raises(ValueError, match="cannot read this"):
            consumer.poll(1.0)
        # Neither partition moved: the good records of this poll were not returned, so they must
        # be read again (nothing skipped unseen).
        assert {tp: consumer.position(tp) for tp in tps} == before
        consumer.seek(TopicPartition("t", 1), 2)
        assert [(r.partition, r.offset, r.value) for r in consumer.poll(1.0)] == [(0, 0, "good")]


def test_the_wire_fetch_reads_what_fetch_many_reads_with_timestamps_in_milliseconds(
    db_url: str, engine: sa.Engine, admin: Admin
) -> None:
    # Timestamps before 2000 (a negative count on PostgreSQL's own epoch), after it, with
    # sub-millisecond parts, and the server's own.
    admin.create_topic("wire", partitions=2)
    _fill(db_url, "wire", 2, 4)
    stamps = [
        datetime(1970, 1, 1, 0, 0, 0, 1000, UTC),
        datetime(1999, 12, 31, 23, 59, 59, 999_500, UTC),
        datetime(2000, 1, 1, tzinfo=UTC),
        datetime(2026, 11, 28, 12, 0, 0, 123_456, UTC),
    ]
    with engine.connect() as conn:
        log.produce_batches(
            conn, batches=[ProduceBatch("wire", 1, None, [RecordIn(b"t", timestamp=t) for t in stamps])]
        )
        conn.commit()
        for read_committed in (True, False):
            positions = {("wire", 0): 0, ("wire", 1): 0}
            plain = log.fetch_many(conn, positions, max_records=100, read_committed=read_committed)
            wire = log.fetch_many_wire(conn, positions, max_records=100, read_committed=read_committed)
            assert plain.keys() == wire.keys()
            for tp, fetched in plain.items():
                got = wire[tp]
                assert dataclasses.replace(got, records=[]) == dataclasses.replace(fetched, records=[])
                assert [r._replace(timestamp_ms=0) for r in got.records] == [
                    WireRecord(*r[:4], 0, *r[5:]) for r in fetched.records
                ]
                # Kafka's milliseconds: the datetime's, rounded down.
                assert [r.timestamp_ms for r in got.records] == [
                    (r.timestamp - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
                    for r in fetched.records
                ]
            assert len(wire[("wire", 1)].records) >= len(stamps)
