"""Kafka's exactly-once loop on asyncio (``oncelog.aio``): consume, transform, produce, and
commit the input offsets in the same transaction as the output (KIP-98 with KIP-447).

The loop of examples/consume_transform_produce.py, awaited: run several copies with the same
group, and each input record's transformed copy lands in the output topic exactly once, while
members come, go and crash.

    python examples/aio_consume_transform_produce.py --input in --output out --group copiers

ONCELOG_DATABASE_URL names the server (read here, at the entry point only).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import uuid
from collections.abc import Mapping
from typing import Any

from oncelog import errors
from oncelog.aio import Consumer, Producer


def transform(value: bytes) -> bytes:
    """The application's work: here, upper-casing the value."""
    return value.upper()


async def copy(
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
    SIGTERM ends the loop after the transaction under way."""
    copied = 0
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    consumer = Consumer(
        url, group_id=group, enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500
    )
    producer = Producer(url, transactional_id=transactional_id, **{"linger_ms": 2, **(producer_config or {})})
    try:
        await producer.init_transactions()
        await consumer.subscribe([input_topic])
        idle = 0.0
        while not stop.is_set():
            records = await consumer.poll(timeout=0.5)
            if not records:
                idle += 0.5
                if idle_exit and idle >= idle_exit:
                    break
                continue
            idle = 0.0
            try:
                async with producer.transaction():
                    for record in records:
                        await producer.send(
                            output_topic, transform(record.value), key=record.key, partition=record.partition
                        )
                    positions = {tp: await consumer.position(tp) for tp in consumer.assignment()}
                    await producer.send_offsets_to_transaction(positions, consumer.group_metadata())
                copied += len(records)
            except errors.OncelogError as exc:
                if exc.fatal:
                    raise  # fenced by a newer instance of this transactional id: stop
                # Abortable (a rebalance took our partitions, a timeout...): transaction() aborted
                # it; go back to the group's committed offsets so nothing is skipped or copied twice.
                for tp, committed in (await consumer.committed(consumer.assignment())).items():
                    if committed is not None:
                        consumer.seek(tp, committed.offset)
                    else:
                        await consumer.seek_to_beginning([tp])
    finally:
        await producer.close()
        await consumer.close()
    return copied


def run(url: str, **kwargs: Any) -> int:
    """:func:`copy` on a new event loop (the same call as the sync example's ``run``)."""
    return asyncio.run(copy(url, **kwargs))


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
