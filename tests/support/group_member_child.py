"""A consumer group member in a process of its own, logging every fetch and rebalance callback,
for tests/acceptance/test_group_ownership.py::

    ONCELOG_TEST_CHILD_URL=URL python -m tests.support.group_member_child GROUP TOPIC ASSIGNOR INSTANCE LOG

INSTANCE is a static member's group_instance_id, or ``-`` for a dynamic member. The member
polls until SIGTERM (then closes, which leaves unless it is static) or until it is killed. Each
line of LOG is JSON, written and flushed at once:

* ``{"e": "fetch", "p": P, "t0": T0, "t1": T1}``: a poll that started at T0 (time.time()) and
  returned records of partition P at T1;
* ``{"e": "assign" | "revoke" | "lost", "p": [P, ...], "t": T}``: a rebalance callback, at its
  start.

It never commits (every new owner of a partition starts from its beginning) and reads its
partitions again from the beginning once it has read them to the end, so there are always records
to fetch.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import time
from types import FrameType
from typing import Any

from oncelog import Consumer, TopicPartition
from tests.support import child_url


def main(argv: list[str]) -> int:
    group, topic, assignor, instance, log_path = argv
    log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - kept open until the end

    def write(**fields: Any) -> None:
        log.write(json.dumps(fields) + "\n")
        log.flush()

    def callback(event: str) -> Any:
        def record(parts: set[TopicPartition]) -> None:
            write(e=event, p=sorted(tp.partition for tp in parts), t=time.time())

        return record

    stop = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    consumer = Consumer(
        child_url(),
        group_id=group,
        group_instance_id=None if instance == "-" else instance,
        client_id="owner",
        session_timeout_ms=1500,
        heartbeat_interval_ms=100,
        enable_auto_commit=False,
        max_poll_records=8,
        partition_assignment_strategy=assignor,
    )
    try:
        consumer.subscribe(
            [topic], on_assign=callback("assign"), on_revoke=callback("revoke"), on_lost=callback("lost")
        )
        while not stop:
            t0 = time.time()
            records = consumer.poll(0.05)
            t1 = time.time()
            for p in sorted({r.partition for r in records}):
                write(e="fetch", p=p, t0=t0, t1=t1)
            if not records and consumer.assignment():
                consumer.seek_to_beginning()  # read again: a partition read to its end shows no fetches
            # "Processing", for up to 150 ms: a revocation waits for the next poll, so a store that
            # handed a partition over before its owner let go would show two owners at once.
            time.sleep(random.uniform(0.0, 0.15))
    finally:
        consumer.close()
        log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
