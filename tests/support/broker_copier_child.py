"""A consume-transform-produce copier written with confluent-kafka (librdkafka) against
``oncelog broker``, as Kafka's transactions system test runs them::

    python -m tests.support.broker_copier_child BOOTSTRAP NAME

It consumes topic ``in`` in consumer group ``copiers`` (read_committed) and, in one transaction
per poll, writes each record to the same partition of topic ``out`` (value ``copy:<value>``, same
key) with the consumer's positions (``send_offsets_to_transaction``, KIP-447). Its transactional
id is ``copier-NAME``: a restarted copier fences its killed predecessor. An abortable error (a
rebalance under way) aborts the transaction and rewinds to the committed offsets. It runs until
killed; the parent kills it with SIGKILL at random moments and starts it again.
"""

from __future__ import annotations

import sys

import confluent_kafka as ck

IN, OUT, GROUP = "in", "out", "copiers"


def _rewind(consumer: ck.Consumer) -> None:
    """Back to the group's committed offsets (what the aborted transaction had consumed is read again)."""
    assigned = consumer.assignment()
    if not assigned:
        return
    for tp in consumer.committed(assigned, timeout=30):
        consumer.seek(ck.TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def main(bootstrap: str, name: str) -> None:
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"copier-{name}", "linger.ms": 5})
    producer.init_transactions(60)
    consumer.subscribe([IN])
    while True:
        messages = [m for m in consumer.consume(500, timeout=0.5) if m.error() is None]
        if not messages:
            continue
        producer.begin_transaction()
        try:
            for m in messages:
                partition = m.partition()
                if partition is None:
                    raise RuntimeError("a consumed record without its partition")
                producer.produce(OUT, b"copy:" + (m.value() or b""), key=m.key(), partition=partition)
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(60)
        except ck.KafkaException as exc:
            error = exc.args[0]
            if error.fatal() or not error.txn_requires_abort():
                raise
            producer.abort_transaction(60)
            _rewind(consumer)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
