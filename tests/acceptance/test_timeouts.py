"""Every wait is bounded by the caller's timeout (issue 14, finding 6), against a real PostgreSQL.

A real second session holds a partition's row lock (as the owner, in an open transaction), and a
fault proxy stalls the network; each call must return or raise a typed error within its own
timeout plus a generous margin. The margin only bounds the call: nothing here asserts speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

import oncelog
from oncelog import aio, errors
from oncelog.types import TopicPartition
from tests.support.logcheck import host_port, read_partition, sslmode_disable, values, wait_until
from tests.support.proxy import FaultProxy

#: Added to a call's own timeout to bound how long it may take (scheduling on a loaded host).
MARGIN = 5.0


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@contextlib.contextmanager
def partition_locked(db_url: str, topic: str, partition: int) -> Iterator[psycopg.Connection]:
    """A second session holding ``topic``'s partition row FOR UPDATE until the block ends."""
    with psycopg.connect(_libpq(db_url)) as conn:
        conn.execute(
            "SELECT p.next_offset FROM oncelog.partitions p JOIN oncelog.topics t USING (topic_id) "
            "WHERE t.name = %s AND p.partition = %s FOR UPDATE",
            (topic, partition),
        )
        try:
            yield conn
        finally:
            conn.rollback()


@pytest.mark.timeout(120)
def test_send_behind_a_partition_lock_fails_typed_in_time_and_other_partitions_go_on(db_url: str) -> None:
    with oncelog.Admin(db_url) as admin:
        admin.create_topic("t", partitions=2)
    producer = oncelog.Producer(db_url, linger_ms=0, delivery_timeout_ms=3000)
    try:
        producer.send("t", b"warm", partition=1).result(30)  # a producer id and a connection exist
        with partition_locked(db_url, "t", 0):
            started = time.monotonic()
            blocked = producer.send("t", b"blocked", partition=0)
            other = producer.send("t", b"other", partition=1)
            # The other partition's batch is not held back behind the lock wait.
            assert other.result(3 + MARGIN).offset == 1
            with pytest.raises(errors.DeliveryTimeoutError):
                blocked.result(3 + MARGIN)
            assert time.monotonic() - started < 3 + MARGIN
            assert producer.metrics()["record_retry_total"] >= 1
        # The lock is gone: the partition takes records again, with no gap and no duplicate, and
        # no epoch bump was needed (every cancelled attempt was rolled back by the server).
        assert producer.send("t", b"after", partition=0).result(30).offset == 0
        assert producer.metrics()["epoch_bump_total"] == 0
    finally:
        producer.close(timeout=10)
    assert values(read_partition(db_url, "t", 0)) == [b"after"]
    assert values(read_partition(db_url, "t", 1)) == [b"warm", b"other"]


@pytest.mark.timeout(120)
def test_transactional_commit_behind_a_partition_lock_raises_within_its_timeout(db_url: str) -> None:
    with oncelog.Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    producer = oncelog.Producer(db_url, transactional_id="tx", linger_ms=0, delivery_timeout_ms=60_000)
    try:
        producer.init_transactions(timeout=30)
        with partition_locked(db_url, "t", 0):
            producer.begin_transaction()
            producer.send("t", b"r", partition=0)
            started = time.monotonic()
            with pytest.raises(errors.OncelogError) as raised:
                producer.commit_transaction(timeout=2)
            assert time.monotonic() - started < 2 + MARGIN
            assert raised.value.retriable
        producer.commit_transaction(timeout=30)  # the lock is gone: the same commit completes
    finally:
        producer.close(timeout=10)
    with oncelog.Consumer(db_url) as consumer:  # read_committed
        consumer.assign([TopicPartition("t", 0)])
        consumer.seek(TopicPartition("t", 0), 0)
        assert [r.value for r in consumer.poll(timeout=10)] == [b"r"]


@pytest.mark.timeout(120)
def test_poll_through_a_stalled_network_returns_within_its_timeout(db_url: str) -> None:
    with oncelog.Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    with oncelog.Producer(db_url, linger_ms=0) as producer:
        producer.send("t", b"r0").result(30)
    host, port = host_port(db_url)
    with FaultProxy(host, port) as proxy:
        consumer = oncelog.Consumer(proxy.url_for(sslmode_disable(db_url)), isolation_level="read_uncommitted")
        try:
            tp = TopicPartition("t", 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            assert [r.value for r in consumer.poll(timeout=10)] == [b"r0"]
            proxy.stall(40)
            for _ in range(2):  # the kept connection, then a fresh one through the same stall
                started = time.monotonic()
                # Nothing by its timeout, not an error: the stall is shorter than default_api_timeout_ms.
                assert consumer.poll(timeout=1) == []
                assert time.monotonic() - started < 1 + MARGIN
            proxy.resume()
            with oncelog.Producer(db_url, linger_ms=0) as producer:
                producer.send("t", b"r1").result(30)
            got: list[bytes | None] = []

            def read_r1() -> bool:
                got.extend(r.value for r in consumer.poll(timeout=1))  # a connection cut in the stall is retried
                return got == [b"r1"]

            wait_until(read_r1, 60, "the consumer to read again after the stall")
        finally:
            proxy.resume()
            consumer.close()


@pytest.mark.timeout(120)
def test_a_consumer_carries_on_through_an_outage_shorter_than_default_api_timeout_ms(db_url: str) -> None:
    """A failover or restart, as Kafka's consumer meets a broker gone: poll returns nothing by its
    timeout, and committed, commit, end_offsets and position wait for the database to come back,
    for up to default_api_timeout_ms, instead of failing at the first refused connection."""
    with oncelog.Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    with oncelog.Producer(db_url, linger_ms=0) as producer:
        producer.send("t", b"r0").result(30)
    host, port = host_port(db_url)
    tp = TopicPartition("t", 0)
    with FaultProxy(host, port) as proxy:
        consumer = oncelog.Consumer(proxy.url_for(sslmode_disable(db_url)), group_id="g", enable_auto_commit=False)
        try:
            consumer.assign([tp])
            assert [r.value for r in consumer.poll(timeout=10)] == [b"r0"]
            consumer.commit()

            def outage() -> None:
                proxy.block_new_connections(True)
                proxy.cut_all()

            def back_in(seconds: float) -> None:
                threading.Timer(seconds, proxy.block_new_connections, (False,)).start()

            outage()
            assert consumer.poll(timeout=0.5) == []
            back_in(2)
            assert consumer.committed([tp])[tp] == oncelog.OffsetAndMetadata(1, "")
            for call in (
                lambda: consumer.commit({tp: 1}),
                lambda: consumer.end_offsets([tp]),
                lambda: consumer.seek_to_beginning([tp]),
            ):
                refused = proxy.stats.connections_refused
                outage()
                back_in(2)
                call()
                assert proxy.stats.connections_refused > refused  # it met the outage and waited it out
            assert consumer.position(tp) == 0
            assert [r.value for r in consumer.poll(timeout=10)] == [b"r0"]
        finally:
            proxy.block_new_connections(False)
            consumer.close()


@pytest.mark.timeout(120)
def test_a_consumer_waiting_for_writes_rides_out_the_loss_of_its_connections(db_url: str) -> None:
    """The usual failover: the consumer is idle, waiting (LISTEN) for a write, when every
    connection dies and new ones are refused; its poll returns nothing by its timeout, and once
    the database is back it reads the next write."""
    with oncelog.Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    host, port = host_port(db_url)
    tp = TopicPartition("t", 0)
    with FaultProxy(host, port) as proxy:
        consumer = oncelog.Consumer(proxy.url_for(sslmode_disable(db_url)), isolation_level="read_uncommitted")
        try:
            consumer.assign([tp])
            assert consumer.poll(timeout=0.5) == []  # registered and listening
            refused = proxy.stats.connections_refused

            def outage() -> None:
                proxy.block_new_connections(True)
                proxy.cut_all()

            threading.Timer(0.5, outage).start()
            assert consumer.poll(timeout=3) == []  # waiting when the connections died
            assert proxy.stats.connections_refused > refused
            proxy.block_new_connections(False)
            with oncelog.Producer(db_url, linger_ms=0) as producer:
                producer.send("t", b"after", partition=0).result(30)
            got: list[bytes | None] = []

            def read_after() -> bool:
                got.extend(r.value for r in consumer.poll(timeout=1))
                return got == [b"after"]

            wait_until(read_after, 60, "the consumer to read after the outage")
        finally:
            proxy.block_new_connections(False)
            consumer.close()


@pytest.mark.timeout(120)
def test_a_consumer_raises_once_the_database_stays_unreachable_for_default_api_timeout_ms(db_url: str) -> None:
    with oncelog.Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    host, port = host_port(db_url)
    tp = TopicPartition("t", 0)
    with FaultProxy(host, port) as proxy:
        consumer = oncelog.Consumer(proxy.url_for(sslmode_disable(db_url)), group_id="g", default_api_timeout_ms=1500)
        try:
            consumer.assign([tp])
            assert consumer.poll(timeout=0.2) == []
            proxy.block_new_connections(True)
            proxy.cut_all()
            started = time.monotonic()
            refused = proxy.stats.connections_refused
            polls = 0
            with pytest.raises(errors.DatabaseUnavailableError):
                while time.monotonic() - started < 1.5 + MARGIN:
                    assert consumer.poll(timeout=0) == []
                    polls += 1
            # The polls of the outage returned nothing, and a tight loop of them tried the
            # database only as often as the retry backoff allows.
            attempts = proxy.stats.connections_refused - refused
            assert polls > 100 and 0 < attempts <= 40, (polls, attempts)
            started = time.monotonic()
            with pytest.raises(errors.DatabaseUnavailableError):
                consumer.committed([tp])
            assert time.monotonic() - started < 1.5 + MARGIN
        finally:
            proxy.block_new_connections(False)
            consumer.close()


@pytest.mark.timeout(120)
def test_admin_calls_and_flush_through_a_stalled_network_end_within_their_timeouts(db_url: str) -> None:
    with oncelog.Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    host, port = host_port(db_url)
    with FaultProxy(host, port) as proxy:
        url = proxy.url_for(sslmode_disable(db_url))
        admin = oncelog.Admin(url, request_timeout_ms=2000)
        producer = oncelog.Producer(url, linger_ms=0, delivery_timeout_ms=4000)
        try:
            assert admin.list_topics() == {"t": 1}  # a pooled connection exists
            producer.send("t", b"r0").result(30)
            proxy.stall(40)
            for _ in range(2):  # the pooled connection (its ping), then a new one
                started = time.monotonic()
                with pytest.raises(errors.DatabaseUnavailableError):
                    admin.list_topics()
                assert time.monotonic() - started < 2 + MARGIN
            future = producer.send("t", b"r1")
            started = time.monotonic()
            with pytest.raises(errors.DeliveryTimeoutError):
                producer.flush(timeout=1)
            assert time.monotonic() - started < 1 + MARGIN
            with pytest.raises(errors.DeliveryTimeoutError):
                future.result(4 + MARGIN)  # its delivery timeout ends it, stall or not
            assert time.monotonic() - started < 4 + MARGIN
        finally:
            proxy.resume()
            producer.close(timeout=10)
            admin.close()


@pytest.mark.timeout(120)
def test_the_asyncio_clients_through_a_stalled_network_end_within_their_timeouts(db_url: str) -> None:
    """oncelog.aio on async connections: the same bounds (the watchdog cuts an async connection's
    socket too), and the loop keeps running meanwhile."""
    with oncelog.Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    host, port = host_port(db_url)

    async def main(url: str, proxy: FaultProxy) -> None:
        admin = aio.Admin(url, request_timeout_ms=2000)
        producer = aio.Producer(url, linger_ms=0, delivery_timeout_ms=4000)
        consumer = aio.Consumer(url, isolation_level="read_uncommitted")
        try:
            assert await admin.list_topics() == {"t": 1}  # a pooled connection exists
            await producer.send_and_wait("t", b"r0")
            tp = TopicPartition("t", 0)
            await consumer.assign([tp])
            assert [r.value for r in await consumer.poll(timeout=10)] == [b"r0"]
            proxy.stall(40)
            for _ in range(2):  # the pooled connection (its ping), then a new one
                started = time.monotonic()
                with pytest.raises(errors.DatabaseUnavailableError):
                    await admin.list_topics()
                assert time.monotonic() - started < 2 + MARGIN
            for _ in range(2):  # the kept connection, then a fresh one through the same stall
                started = time.monotonic()
                assert await consumer.poll(timeout=1) == []
                assert time.monotonic() - started < 1 + MARGIN
            started = time.monotonic()
            future = await producer.send("t", b"r1")
            with pytest.raises(errors.DeliveryTimeoutError):
                await future  # its delivery timeout ends it
            assert time.monotonic() - started < 4 + MARGIN
        finally:
            proxy.resume()
            await producer.close(timeout=10)
            await consumer.close()
            await admin.close()

    with FaultProxy(host, port) as proxy:
        asyncio.run(main(proxy.url_for(sslmode_disable(db_url)), proxy))
