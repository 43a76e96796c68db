"""A transactional copier process, in the style of Kafka's transactions system test
(tests/kafkatest/tests/core/transactions_test.py and its TransactionalMessageCopier)::

    ONCELOG_TEST_CHILD_URL=URL python -m tests.support.copier_child
        GROUP PARTS TARGETS MAX_POLL TXN_TIMEOUT_MS CRASH HOLD EVENTS

The copier owns the input partitions PARTS (comma separated) of topic ``in`` and the transactional
id ``copier-<parts joined by '-'>``. It copies every record of its partitions to the same
partition of topic ``out`` (value ``copy:<value>``, same key), and records its progress
ATOMICALLY with the copies: each transaction also writes one record to partition GROUP of topic
``progress``, whose value is JSON ``{"<input partition>": <next offset>, ...}``. (Consumer groups
and send_offsets_to_transaction do not exist yet; this is the same idea with a topic of our own.)

On start it initialises its transactional id FIRST (fencing any older instance and aborting its
open transaction), THEN reads the last committed progress record with a read_committed Consumer,
and resumes from there. It stops when every partition reached its target (TARGETS, comma
separated, the end offset of each input partition), exit status 0; it exits 17 when fenced (a
newer instance took over), and anything else is a failure (traceback on stderr).

CRASH is ``none`` or ``<phase>:<k>``: the process SIGKILLs itself in its k-th transaction at
``mid_send`` (half of the copies sent and flushed: in the log, transaction open),
``before_commit`` (everything sent and flushed, EndTxn not sent) or ``after_commit`` (commit
returned, progress not yet logged). The parent also kills it at random moments from outside.
Phase ``stall`` is no crash: with half of the copies flushed the copier logs ``stalled`` and waits
for a line on stdin (the parent lets its transaction pass TXN_TIMEOUT_MS and be aborted by a
reader), then carries on: the store refuses the rest (abortable), the copier aborts (KIP-360
epoch bump) and copies the same records again from its committed progress.

HOLD is ``none`` or a fraction: once the committed positions reach that fraction of the targets
(and the planned CRASH or stall of this incarnation is behind it), the copier logs ``hold`` and
waits for a line on stdin before it carries on. That is how the parent gets a planned disruption in
before the copier finishes, however fast or slow the machine is, and without pre-empting the
planned crash; the disruption itself lands a random delay after the release, mid-stream.

EVENTS is a file the copier appends one JSON line to, flushed at once, for each step the parent
coordinates on: ``start`` (initialised, with the resumed positions and epoch), ``commit``
(transaction number and positions after it), ``abort``, ``fenced``, ``done``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import oncelog
from oncelog import Consumer, Producer, TopicPartition
from oncelog.txn_state import TxnState
from tests.support import child_url

IN, OUT, PROGRESS = "in", "out", "progress"
EXIT_FENCED = 17
POLL_TIMEOUT = 0.5


def transactional_id(parts: list[int]) -> str:
    return "copier-" + "-".join(str(p) for p in parts)


def read_progress(url: str, group: int, parts: list[int]) -> dict[int, int]:
    """The positions in the last committed progress record of ``group`` (0 if there is none)."""
    tp = TopicPartition(PROGRESS, group)
    last: dict[str, int] | None = None
    with Consumer(url, max_poll_records=10_000) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        while True:
            for record in consumer.poll(0.05):
                last = json.loads(record.value)
            if consumer.position(tp) >= consumer.end_offsets([tp])[tp]:
                break
    if last is None:
        return {p: 0 for p in parts}
    if sorted(int(p) for p in last) != sorted(parts):
        raise SystemExit(f"progress record {last} is not for partitions {parts}")
    return {int(p): int(offset) for p, offset in last.items()}


def main(argv: list[str]) -> int:
    group_text, parts_text, targets_text, max_poll_text, timeout_text, crash, hold_text, events_path = argv
    url = child_url()
    hold = None if hold_text == "none" else float(hold_text)
    group = int(group_text)
    parts = [int(p) for p in parts_text.split(",")]
    targets = dict(zip(parts, (int(t) for t in targets_text.split(",")), strict=True))
    crash_phase, crash_txn = (crash.split(":")[0], int(crash.split(":")[1])) if crash != "none" else ("", 0)
    crash_pending = bool(crash_phase)

    events = open(events_path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the whole run

    def event(name: str, **fields: Any) -> None:
        events.write(json.dumps({"event": name, **fields}) + "\n")
        events.flush()

    def die_if(phase: str, txn: int) -> None:
        if phase == crash_phase and txn == crash_txn:
            event("crash", phase=phase, txn=txn)
            os.kill(os.getpid(), signal.SIGKILL)

    producer = Producer(
        url, transactional_id=transactional_id(parts), linger_ms=5, transaction_timeout_ms=int(timeout_text)
    )
    consumer = Consumer(url, max_poll_records=int(max_poll_text))
    try:
        producer.init_transactions()
        # Only now: the previous instance's open transaction is aborted, so the last progress
        # record a read_committed reader sees is the one to resume from.
        positions = read_progress(url, group, parts)
        event("start", positions=positions, epoch=producer.producer_epoch, pid=os.getpid())
        tps = {p: TopicPartition(IN, p) for p in parts}
        consumer.assign(tps.values())
        for p, tp in tps.items():
            consumer.seek(tp, positions[p])
        txn = 0
        while any(positions[p] < targets[p] for p in parts):
            if hold is not None and not crash_pending and sum(positions.values()) >= hold * sum(targets.values()):
                event("hold", positions=positions)
                sys.stdin.readline()  # the parent's go-ahead
                hold = None
            records = consumer.poll(POLL_TIMEOUT)
            if not records:
                continue
            txn += 1
            after = dict(positions)
            try:
                producer.begin_transaction()
                for i, record in enumerate(records):
                    producer.send(OUT, b"copy:" + record.value, key=record.key, partition=record.partition)
                    after[record.partition] = record.offset + 1
                    if i == len(records) // 2 and crash_phase == "mid_send" and txn == crash_txn:
                        producer.flush(60)
                        die_if("mid_send", txn)
                    if i == len(records) // 2 and crash_phase == "stall" and txn == crash_txn:
                        producer.flush(60)
                        event("stalled", txn=txn, epoch=producer.producer_epoch)
                        sys.stdin.readline()  # the parent's go-ahead, once the transaction timed out
                        crash_pending = False
                producer.send(PROGRESS, json.dumps({str(p): o for p, o in after.items()}).encode(), partition=group)
                if crash_phase == "before_commit" and txn == crash_txn:
                    producer.flush(60)
                    die_if("before_commit", txn)
                producer.commit_transaction()
            except oncelog.OncelogError as exc:
                if exc.fatal or producer.transaction_state is TxnState.FATAL_ERROR:
                    event("fenced", txn=txn, error=type(exc).__name__)
                    return EXIT_FENCED
                # Abortable: abort, and copy the same records again from the committed positions.
                producer.abort_transaction()
                event("abort", txn=txn, error=type(exc).__name__, epoch=producer.producer_epoch)
                for p, tp in tps.items():
                    consumer.seek(tp, positions[p])
                continue
            positions = after
            event("commit", txn=txn, positions=positions)
            die_if("after_commit", txn)
        event("done", positions=positions)
        return 0
    finally:
        consumer.close()
        producer.close(timeout=10)
        events.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
