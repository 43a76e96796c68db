"""A producer process for the kill tests: sends ``<name>-<n>`` for n in 0..count-1 and records
every acknowledgement, one JSON line per record, flushed as soon as it is acknowledged::

    ONCELOG_TEST_CHILD_URL=URL python -m tests.support.producer_child TOPIC NAME COUNT ACK_FILE

Keys are ``k<n % 16>``, so the default partitioner spreads the records over the partitions. At
most ``MAX_OUTSTANDING`` records are unacknowledged at a time, so the process is always
mid-stream with records in flight. A line in the ack file means the Producer acknowledged that
record at that offset; a process killed with SIGKILL leaves a (possibly partial last) line file.
Exit status 0 when every record was acknowledged; 3 if any failed (the failures are in the file
as lines with an "error" key).
"""

from __future__ import annotations

import functools
import json
import sys
import threading

import oncelog
from oncelog.types import RecordMetadata
from tests.support import child_url

MAX_OUTSTANDING = 64
KEYS = 16


def key_for(n: int) -> bytes:
    """The key of record ``n`` (the parent recomputes partitions from it)."""
    return f"k{n % KEYS}".encode()


def value_for(name: str, n: int) -> bytes:
    return f"{name}-{n}".encode()


def main(argv: list[str]) -> int:
    topic, name, count_text, ack_path = argv
    url = child_url()
    count = int(count_text)
    slots = threading.BoundedSemaphore(MAX_OUTSTANDING)
    failed = threading.Event()
    with open(ack_path, "a", encoding="utf-8") as acks:

        def on_done(n: int, meta: RecordMetadata | None, exc: BaseException | None) -> None:
            # Runs on the producer's sender thread, one record after another.
            if exc is None and meta is not None:
                line = {
                    "topic": meta.topic,
                    "partition": meta.partition,
                    "offset": meta.offset,
                    "n": n,
                    "value": value_for(name, n).decode(),
                }
            else:
                failed.set()
                line = {"n": n, "value": value_for(name, n).decode(), "error": repr(exc)}
            acks.write(json.dumps(line) + "\n")
            acks.flush()
            slots.release()

        producer = oncelog.Producer(url, linger_ms=2, max_batch_records=20)
        try:
            for n in range(count):
                if not slots.acquire(timeout=120):
                    raise SystemExit(f"{name}: no acknowledgement for 120 s")
                producer.send(
                    topic,
                    value_for(name, n),
                    key=key_for(n),
                    callback=functools.partial(on_done, n),
                )
            producer.flush(120)
        finally:
            producer.close(timeout=30)
    return 3 if failed.is_set() else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
