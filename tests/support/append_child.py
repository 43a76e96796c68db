"""A writer for the commit-order tests: appends a planned sequence of small batches with
``oncelog.store.log.produce`` on one autocommit connection.

Used both in threads (``write_plan``) and as a separate process::

    ONCELOG_TEST_CHILD_URL=URL python -m tests.support.append_child
        TOPIC WRITER BATCHES PARTITIONS SEED {plain|idempotent}

The plan (which batch goes to which partition, with which values) is a pure function of its
arguments, so the parent knows exactly what every writer wrote without being told.
"""

from __future__ import annotations

import random
import sys
import threading
from collections import defaultdict

import sqlalchemy as sa

from oncelog.store import create_engine, log
from oncelog.store.records import RecordIn
from tests.support import child_url

Plan = list[tuple[int, list[bytes]]]


def plan(writer: str, batches: int, partitions: int, seed: int) -> Plan:
    """``batches`` batches of 1 to 3 records, each to a random partition; values ``<writer>-<n>``."""
    rng = random.Random(f"{seed}-{writer}")
    out: Plan = []
    n = 0
    for _ in range(batches):
        size = rng.randint(1, 3)
        out.append((rng.randrange(partitions), [f"{writer}-{n + i}".encode() for i in range(size)]))
        n += size
    return out


def write_plan(
    url: str,
    topic: str,
    batches: Plan,
    *,
    idempotent: bool,
    start: threading.Event | None = None,
) -> None:
    """Append ``batches`` in order, each its own transaction (autocommit)."""
    engine = create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            ident = log.init_producer_id(conn) if idempotent else None
            seq: dict[int, int] = defaultdict(int)
            if start is not None:
                start.wait(60)
            for part, vals in batches:
                log.produce(
                    conn,
                    topic=topic,
                    partition=part,
                    records=[RecordIn(v, key=v) for v in vals],
                    producer_id=ident.producer_id if ident else None,
                    producer_epoch=ident.epoch if ident else None,
                    base_sequence=seq[part] if ident else None,
                )
                seq[part] += len(vals)
    finally:
        engine.dispose()


def main(argv: list[str]) -> int:
    topic, writer, batches, partitions, seed, mode = argv
    url = child_url()
    if mode not in ("plain", "idempotent"):
        raise SystemExit(f"mode must be plain or idempotent, not {mode!r}")
    p = plan(writer, int(batches), int(partitions), int(seed))
    # Tell the parent we are connected-ready, then wait for its go (one line on stdin), so every
    # writer starts appending at the same moment.
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 2
    write_plan(url, topic, p, idempotent=mode == "idempotent")
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
