"""A transactional producer in a process of its own, driven line by line over stdin/stdout.

Used by the zombie-fencing tests, which need two real processes sharing a transactional id and
must pause one of them (SIGSTOP) at a known point::

    ONCELOG_TEST_CHILD_URL=URL python -m tests.support.txn_child TRANSACTIONAL_ID TRANSACTION_TIMEOUT_MS

Each stdin line is one JSON command; the child answers each with exactly one JSON line on stdout
and then blocks reading the next command, so after a reply the parent knows the process is idle
(no call of the producer running) and may stop it. Commands (``op``):

* ``init``, ``begin``, ``commit``, ``abort``, ``flush``: the Producer method of that name;
* ``send``: ``{"op": "send", "topic": T, "records": [[partition, value], ...], "flush": bool}``;
  sends each record (a send that raises stops there and is reported), then optionally flushes
  and reports every record's outcome (its offset, or the error class that failed its future);
* ``state``: nothing, just the state;
* ``close``: ``producer.close()``, then the child exits 0.

Every reply carries ``ok``, the client transaction ``state``, ``producer_id`` and ``epoch``, the
metrics, and for a failed call ``error`` (class name), ``message`` and the error's ``fatal`` /
``abortable`` / ``retriable`` flags.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import oncelog
from oncelog.types import RecordMetadata
from tests.support import child_url

FLUSH_TIMEOUT = 60.0


def describe_error(exc: BaseException) -> dict[str, Any]:
    return {
        "error": type(exc).__name__,
        "message": str(exc),
        "fatal": bool(getattr(exc, "fatal", False)),
        "abortable": bool(getattr(exc, "abortable", False)),
        "retriable": bool(getattr(exc, "retriable", False)),
    }


def outcome(future: Future[RecordMetadata]) -> dict[str, Any]:
    exc = future.exception(FLUSH_TIMEOUT)
    if exc is not None:
        return describe_error(exc)
    meta = future.result()
    return {"partition": meta.partition, "offset": meta.offset}


def main(argv: list[str]) -> int:
    transactional_id, timeout_ms = argv
    url = child_url()
    producer = oncelog.Producer(
        url,
        transactional_id=transactional_id,
        transaction_timeout_ms=int(timeout_ms),
        # Nothing leaves before a flush: what is in the log is exactly what the parent flushed.
        linger_ms=60_000,
    )

    def reply(ok: bool, **extra: Any) -> None:
        state = producer.transaction_state
        body = {
            "ok": ok,
            "state": state.name if state is not None else None,
            "producer_id": producer.producer_id,
            "epoch": producer.producer_epoch,
            "metrics": producer.metrics(),
            **extra,
        }
        sys.stdout.write(json.dumps(body) + "\n")
        sys.stdout.flush()

    simple: dict[str, Callable[[], None]] = {
        "init": producer.init_transactions,
        "begin": producer.begin_transaction,
        "commit": producer.commit_transaction,
        "abort": producer.abort_transaction,
        "flush": lambda: producer.flush(FLUSH_TIMEOUT),
        "state": lambda: None,
    }
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        if op == "close":
            producer.close(timeout=10)
            reply(True)
            return 0
        if op == "send":
            futures: list[Future[RecordMetadata]] = []
            try:
                for partition, value in command["records"]:
                    futures.append(producer.send(command["topic"], value.encode(), partition=partition))
            except Exception as exc:  # reported, not raised: the parent asserts on it
                reply(False, sent=len(futures), **describe_error(exc))
                continue
            if command.get("flush"):
                producer.flush(FLUSH_TIMEOUT)
                reply(True, sent=len(futures), results=[outcome(f) for f in futures])
            else:
                reply(True, sent=len(futures))
            continue
        try:
            simple[op]()
        except Exception as exc:  # reported, not raised
            reply(False, **describe_error(exc))
        else:
            reply(True)
    producer.close(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
