"""A standalone consumer's offsets in a transaction (revision 0027): a consumer that assigns
itself its partitions commits them with its output, as Kafka's coordinator takes them, only while
the group has no members; a member's checks are unchanged. Real PostgreSQL, real threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from oncelog import Admin, Consumer, Producer, TopicPartition, errors
from oncelog.store import create_engine, groups
from oncelog.types import ConsumerGroupMetadata

IN, OUT = "in", "out"
WAIT = 30.0


@pytest.fixture
def topics(db_url: str) -> Iterator[str]:
    with Admin(db_url) as admin:
        admin.create_topic(IN, partitions=1)
        admin.create_topic(OUT, partitions=1)
    with Producer(db_url) as producer:
        for i in range(10):
            producer.send(IN, b"%d" % i, partition=0)
    yield db_url


def _committed(engine: sa.Engine, group: str) -> int | None:
    with engine.connect() as conn:
        row = conn.exec_driver_sql(
            "SELECT committed_offset FROM committed_offsets WHERE group_id = %(g)s", {"g": group}
        ).first()
    return None if row is None else int(row[0])


def test_an_assigning_consumer_commits_its_offsets_with_its_output(topics: str, engine: sa.Engine) -> None:
    db_url = topics
    with (
        Consumer(db_url, group_id="copier", enable_auto_commit=False) as consumer,
        Producer(db_url, transactional_id="tx-copier") as producer,
    ):
        consumer.assign([TopicPartition(IN, 0)])
        consumer.seek(TopicPartition(IN, 0), 0)
        meta = consumer.group_metadata()
        assert (meta.group_id, meta.generation_id, meta.member_id) == ("copier", -1, "")
        producer.init_transactions()
        for abort in (True, False):
            producer.begin_transaction()
            producer.send(OUT, b"copied", partition=0)
            producer.send_offsets_to_transaction({TopicPartition(IN, 0): 4}, meta)
            if abort:
                producer.abort_transaction()
                assert _committed(engine, "copier") is None  # the group was made, no offset
            else:
                producer.commit_transaction()
    assert _committed(engine, "copier") == 4


def test_a_standalone_commit_is_refused_while_the_group_has_members(topics: str, engine: sa.Engine) -> None:
    db_url = topics
    member = Consumer(db_url, group_id="shared", enable_auto_commit=False, session_timeout_ms=6000)
    try:
        member.subscribe([IN])
        member.poll(1.0)
        with Producer(db_url, transactional_id="tx-standalone") as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(OUT, b"x", partition=0)
            standalone = ConsumerGroupMetadata("shared", -1, "")
            producer.send_offsets_to_transaction({TopicPartition(IN, 0): 3}, standalone)
            with pytest.raises(errors.TransactionAbortableError, match="has members"):
                producer.commit_transaction()
            producer.abort_transaction()
    finally:
        member.close()
    assert _committed(engine, "shared") is None


def test_standalone_commits_racing_a_joining_member(topics: str, engine: sa.Engine) -> None:
    """A member joins and leaves over and over while a standalone copier commits its offsets in
    transactions, 150 times: each commit is refused (a member was there) or applies its offset;
    none fails any other way, and the committed offset only moves to values a commit carried."""
    db_url = topics
    stop = threading.Event()
    failures: list[BaseException] = []

    def churn() -> None:
        member_engine = create_engine(db_url, isolation_level="AUTOCOMMIT")
        try:
            with member_engine.connect() as conn:
                while not stop.is_set():
                    m = groups.join_group(conn, group_id="race", topics=[IN], session_timeout_ms=6000)
                    groups.leave_group(conn, group_id="race", member_id=m.member_id)
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)
        finally:
            member_engine.dispose()

    worker = threading.Thread(target=churn)
    worker.start()
    applied, refused = 0, 0
    try:
        with Producer(db_url, transactional_id="tx-race") as producer:
            producer.init_transactions()
            for i in range(150):
                producer.begin_transaction()
                producer.send(OUT, b"%d" % i, partition=0)
                producer.send_offsets_to_transaction(
                    {TopicPartition(IN, 0): i % 10}, ConsumerGroupMetadata("race", -1, "")
                )
                try:
                    producer.commit_transaction()
                    applied += 1
                except errors.TransactionAbortableError as exc:
                    assert "has members" in str(exc)
                    producer.abort_transaction()
                    refused += 1
    finally:
        stop.set()
        worker.join(WAIT)
    assert not failures, failures
    assert applied + refused == 150 and applied > 0
    assert _committed(engine, "race") in set(range(10))
