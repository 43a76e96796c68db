"""OffsetFetch with require_stable waits by backing off, never by spinning.

An expired transaction holding pending offsets is aborted by the reader itself; when another
session holds that transaction's row (expire_transactions skips locked rows), the reader must back
off like for any unstable answer instead of asking again at once in a tight loop.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from oncelog import Admin, Consumer, Producer, TopicPartition
from oncelog.store import groups


@pytest.fixture
def expired_holder(db_url: str, engine: sa.Engine) -> Iterator[str]:
    """A group whose offsets are pending in a transaction past its timeout, whose coordinator row
    another session holds locked. Yields the group id."""
    with Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    with Producer(db_url) as p:
        p.send("t", b"x", partition=0).result(10)
    group = "g"
    consumer = Consumer(db_url, group_id=group, enable_auto_commit=False)
    consumer.subscribe(["t"])
    consumer.poll(1.0)
    producer = Producer(db_url, transactional_id="holder", transaction_timeout_ms=1, send_offsets_with_commit=False)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send_offsets_to_transaction({TopicPartition("t", 0): 1}, consumer.group_metadata())
    consumer.close()
    with engine.connect() as holder:
        holder.exec_driver_sql("SELECT 1 FROM transactions WHERE transactional_id = 'holder' FOR UPDATE")
        yield group
        holder.rollback()
    producer.close(timeout=5)


@pytest.mark.timeout(60)  # the bug this guards against spun for ever
def test_a_locked_expired_transaction_is_waited_for_with_backoff(
    expired_holder: str, engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    real = groups.offset_fetch

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(groups, "offset_fetch", counting)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        answers = groups.offset_fetch_stable(
            conn, group_id=expired_holder, partitions=[("t", 0)], wait_s=0.5, min_backoff_s=0.05, max_backoff_s=0.2
        )
    # Backing off from 50 ms to 200 ms inside 0.5 s is a handful of asks; a spin is thousands.
    assert calls <= 6, calls
    answer = answers[("t", 0)]
    assert answer.expired_transaction or answer.error == "unstable_offset_commit"


def test_once_the_row_is_free_the_reader_aborts_it_and_reads(db_url: str, engine: sa.Engine) -> None:
    with Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    with Producer(db_url) as p:
        p.send("t", b"x", partition=0).result(10)
    consumer = Consumer(db_url, group_id="g", enable_auto_commit=False)
    consumer.subscribe(["t"])
    consumer.poll(1.0)
    consumer.commit({TopicPartition("t", 0): 0})
    with Producer(
        db_url, transactional_id="late", transaction_timeout_ms=1, send_offsets_with_commit=False
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({TopicPartition("t", 0): 1}, consumer.group_metadata())
        consumer.close()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            answers = groups.offset_fetch_stable(conn, group_id="g", partitions=[("t", 0)], wait_s=30)
        # The reader aborted the expired transaction: its pending offset is gone, the old one stands.
        assert answers[("t", 0)].error is None and answers[("t", 0)].offset == 0
