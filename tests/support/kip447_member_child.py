"""P2/C2 of scenario 18 (docs/concepts.md: a partition handed over mid-transaction, the case KIP-447
solves), in a process of its own so it can really crash::

    ONCELOG_TEST_CHILD_URL=URL python -m tests.support.kip447_member_child GROUP TRANSACTIONAL_ID TXN_TIMEOUT_MS EVENTS

The consumer joins GROUP (client id ``c2``, a short session timeout) subscribed to ``in``; the
parent's consumer (client id ``c1``) is already a member, so the range assignor gives this one
``in-1``, once the parent's consumer has let go of it. The transactional producer then:

1. reads in-1 offsets 0..4, writes their upper-cased copies to ``out`` (same partition) and
   commits them together with the offset 5 (event ``committed``);
2. reads offsets 5..9, writes their copies, puts the offset 10 in the transaction
   (send_offsets_to_transaction), flushes, and reports ``pending`` with its producer epoch;
3. waits to be killed (SIGKILL from the parent), its transaction open.

Events are JSON lines appended to EVENTS, flushed at once.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from oncelog import Consumer, ConsumerRecord, Producer, TopicPartition
from tests.support import child_url

IN, OUT = "in", "out"
TP = TopicPartition(IN, 1)


def main(argv: list[str]) -> int:
    group, transactional_id, timeout_text, events_path = argv
    url = child_url()
    events = open(events_path, "a", encoding="utf-8")  # noqa: SIM115 - kept open until killed

    def event(name: str, **fields: Any) -> None:
        events.write(json.dumps({"event": name, **fields}) + "\n")
        events.flush()

    consumer = Consumer(
        url,
        group_id=group,
        client_id="c2",
        session_timeout_ms=1000,
        heartbeat_interval_ms=100,
        enable_auto_commit=False,
        max_poll_records=5,
    )
    # Kafka's TxnOffsetCommit at send_offsets_to_transaction(): the test needs the offsets
    # pending in the store while the transaction is open.
    producer = Producer(
        url,
        transactional_id=transactional_id,
        transaction_timeout_ms=int(timeout_text),
        linger_ms=1,
        send_offsets_with_commit=False,
    )
    try:
        producer.init_transactions()
        consumer.subscribe([IN])
        # in-1 is ours once the parent's consumer lets go of it, at one of its polls. What our
        # polls return meanwhile is dropped: start from the committed offset, as a new owner.
        deadline = time.monotonic() + 60
        while consumer.assignment() != {TP}:
            if time.monotonic() > deadline:
                raise SystemExit(f"expected to own {TP}, got {consumer.assignment()}")
            consumer.poll(0.05)
        done = consumer.committed([TP])[TP]
        consumer.seek(TP, done.offset if done is not None else 0)
        meta = consumer.group_metadata()
        event("joined", member_id=meta.member_id, generation=meta.generation_id)
        for target in (5, 10):
            records: list[ConsumerRecord] = []
            deadline = time.monotonic() + 60
            while len(records) < 5:
                if time.monotonic() > deadline:
                    raise SystemExit("no input records")
                records += consumer.poll(0.1)
            if [r.offset for r in records] != list(range(target - 5, target)):
                raise SystemExit(f"unexpected offsets {[r.offset for r in records]}")
            producer.begin_transaction()
            for r in records:
                producer.send(OUT, r.value.upper(), key=r.key, partition=r.partition)
            producer.send_offsets_to_transaction({TP: consumer.position(TP)}, consumer.group_metadata())
            if target == 5:
                producer.commit_transaction()
                event("committed", offset=5)
            else:
                producer.flush()
                event("pending", offset=10, producer_id=producer.producer_id, epoch=producer.producer_epoch)
        while True:  # the parent kills us here, with the transaction open
            time.sleep(1)
    finally:
        producer.close(timeout=5)
        consumer.close()
        events.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
