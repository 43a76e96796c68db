"""Kafka's exactly-once loop: consume, transform, produce, and commit the input offsets in the
same transaction as the output (KIP-98's consume-transform-produce, with KIP-447's group metadata).

Run several copies with the same group: each input record's transformed copy lands in the output
topic exactly once, while members come, go and crash.

    python examples/consume_transform_produce.py --input in --output out --group copiers

ONCELOG_DATABASE_URL names the server (read here, at the entry point only).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import uuid
from collections.abc import Mapping
from typing import Any

from oncelog import Consumer, Producer, errors


def transform(value: bytes) -> bytes:
    """The application's work: here, upper-casing the value."""
    return value.upper()


def run(
    url: str,
    *,
    input_topic: str,
    output_topic: str,
    group: str,
    transactional_id: str,
    idle_exit: float,
    producer_config: Mapping[str, Any] | None = None,
) -> int:
    """Copy ``input_topic`` to ``output_topic`` exactly once; return the number of records copied.

    ``producer_config``: more Producer settings (e.g. a small ``max_batch_records``, so batches
    leave before the commit and the store sees each transaction open while it is filled)."""
    copied = 0
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    consumer = Consumer(
        url, group_id=group, enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500
    )
    producer = Producer(url, transactional_id=transactional_id, **{"linger_ms": 2, **(producer_config or {})})
    try:
        producer.init_transactions()
        consumer.subscribe([input_topic])
        idle = 0.0
        while not stop:
            records = consumer.poll(timeout=0.5)
            if not records:
                idle += 0.5
                if idle_exit and idle >= idle_exit:
                    break
                continue
            idle = 0.0
            producer.begin_transaction()
            try:
                for record in records:
                    producer.send(output_topic, transform(record.value), key=record.key, partition=record.partition)
                positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
                producer.send_offsets_to_transaction(positions, consumer.group_metadata())
                producer.commit_transaction()
                copied += len(records)
            except errors.OncelogError as exc:
                if exc.fatal:
                    raise  # fenced by a newer instance of this transactional id: stop
                # Abortable (a rebalance took our partitions, a timeout...): abort, and go back to
                # the group's committed offsets so nothing is skipped or copied twice.
                producer.abort_transaction()
                for tp, committed in consumer.committed(consumer.assignment()).items():
                    if committed is not None:
                        consumer.seek(tp, committed.offset)
                    else:
                        consumer.seek_to_beginning([tp])
    finally:
        producer.close()
        consumer.close()
    return copied


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", default=f"copier-{uuid.uuid4()}")
    parser.add_argument("--idle-exit", type=float, default=0.0, help="exit after this many idle seconds (0: no)")
    args = parser.parse_args()
    url = os.environ.get("ONCELOG_DATABASE_URL")
    if not url:
        sys.exit(
            "set ONCELOG_DATABASE_URL (for the embedded server: export ONCELOG_DATABASE_URL=$(oncelog dev-db url))"
        )
    copied = run(
        url,
        input_topic=args.input,
        output_topic=args.output,
        group=args.group,
        transactional_id=args.transactional_id,
        idle_exit=args.idle_exit,
    )
    print(f"copied {copied} records")


if __name__ == "__main__":
    main()
