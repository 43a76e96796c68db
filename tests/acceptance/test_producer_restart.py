"""The producer rides through a PostgreSQL restart: every record lands once, in order.

A private, durable cluster per test (an immediate shutdown is a crash: with the test clusters'
synchronous_commit=off an acknowledged commit could be lost, which is the server's setting, not
ours to test).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from oncelog import Admin, Consumer, Producer, RecordMetadata, TopicPartition, errors
from oncelog.embedded import EmbeddedPostgres


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["immediate", "fast"])
def test_records_survive_a_server_restart(durable_server: EmbeddedPostgres, mode: str) -> None:
    url = durable_server.url()
    with Admin(url) as admin:
        admin.create_topic("t", partitions=3)
    futures: list[tuple[bytes, Future[RecordMetadata]]] = []
    sent_enough = threading.Event()
    stop = threading.Event()

    def produce(producer: Producer) -> None:
        i = 0
        while not stop.is_set() and i < 20_000:
            value = f"{i:06d}".encode()
            futures.append((value, producer.send("t", value, key=str(i % 7).encode())))
            i += 1
            if i == 300:
                sent_enough.set()
            if i % 50 == 0:
                # Let the sender keep up: pace by acknowledgements, not by time.
                futures[-1][1].exception(timeout=60)

    with Producer(url, linger_ms=2, delivery_timeout_ms=60_000, retry_backoff_max_ms=500) as producer:
        writer = threading.Thread(target=produce, args=(producer,))
        writer.start()
        assert sent_enough.wait(60)
        durable_server.stop(mode)
        assert durable_server.start() == url  # same port, so the producer's URL still works
        # Keep writing after the restart until enough has gone through the new durable_server.
        while len(futures) < 1500 and writer.is_alive():
            futures[-1][1].exception(timeout=60)
        stop.set()
        writer.join(60)
        producer.flush(timeout=90)
        retries = producer.metrics()["record_retry_total"]

    acked = {value: f.result(timeout=0) for value, f in futures}
    with Consumer(url) as consumer:
        consumer.assign([TopicPartition("t", p) for p in range(3)])
        log: list[tuple[int, int, bytes]] = []
        while batch := consumer.poll(timeout=0.3):
            log.extend((r.partition, r.offset, r.value) for r in batch)
    values = [v for _, _, v in log]
    assert len(values) == len(set(values)), "a record was written twice"
    assert set(values) == set(acked), "an acknowledged record is missing (or an unsent one is present)"
    for partition, offset, value in log:
        meta = acked[value]
        assert (meta.partition, meta.offset) == (partition, offset)
    for p in range(3):
        in_log = [v for part, _, v in sorted(log) if part == p]
        assert in_log == sorted(in_log), "send order not kept within a partition"
    assert retries > 0, "the restart was not noticed: the test did not test anything"


def test_send_waits_up_to_max_block_ms_for_the_database(durable_server: EmbeddedPostgres) -> None:
    """send() needs the topic's metadata: while the database is down it asks again (as Kafka's
    send() waits for metadata up to max.block.ms), and gives up after max_block_ms with the
    error, saying so."""
    url = durable_server.url()
    with Admin(url) as admin:
        admin.create_topic("t", partitions=1)
    durable_server.stop("fast")
    with (
        Producer(url, max_block_ms=300, linger_ms=0) as producer,
        pytest.raises(
            errors.DatabaseUnavailableError, match=r"no metadata for topic 't' within max_block_ms \(300 ms\)"
        ),
    ):
        producer.send("t", b"nobody there")
    started = threading.Event()

    def start_again() -> None:
        started.wait(30)
        durable_server.start()

    restarter = threading.Thread(target=start_again)
    restarter.start()
    try:
        with Producer(url, max_block_ms=120_000, linger_ms=0) as producer:
            started.set()  # the send below begins while the server is still down
            meta = producer.send("t", b"after the restart").result(timeout=120)
    finally:
        restarter.join(60)
    assert meta.offset == 0
