"""Records in the application's own transaction (``oncelog.send``): outbox writes per second.

    .venv/bin/python -m bench.outbox [--quick] [--json PATH] [--repeat N]

The server is ``ONCELOG_DATABASE_URL`` when set (it needs CREATEDB), else the embedded default cluster
(see ``bench/produce.py``, whose setup this reuses), in a database of its own.

Application threads (1 and 8, each on its own psycopg connection) commit transactions as fast as
they can for a fixed time, each transaction one business row (an INSERT into an orders table) and:

* **send**: one record sent with ``oncelog.send`` to a 4-partition topic (100-byte value, a key),
  appended at the commit;
* **business row only** (baseline): nothing else, the same transaction without the record;
* **raw outbox table** (baseline): an INSERT of the same key and value into a plain table, what
  an application does by hand when a CDC tool ships the table later.

Transactions/s per case; the ratios are send / baseline, each pair measured back to back, repeated
``--repeat`` times (default 3; 1 with --quick), the median reported.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg

import oncelog
from bench.produce import (
    Bench,
    log,
    machine_info,
    result_fields,
    run_main,
    scratch_database,
    titled,
)
from bench.report import outbox_section

THREADS = (1, 8)
PARTITIONS = 4
VALUE = b"v" * 100
FULL_SECONDS = 3.0
QUICK_SECONDS = 0.3
CASES = ("send", "business_only", "raw_outbox")
APP_DDL = (
    "CREATE TABLE IF NOT EXISTS public.bench_orders (id bigint PRIMARY KEY, total numeric)",
    "CREATE TABLE IF NOT EXISTS public.bench_outbox (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
    "key bytea, value bytea)",
)


def transactions_per_s(conninfo: str, case: str, threads: int, seconds: float, topic: str) -> float:
    """``threads`` connections committing ``case`` transactions for ``seconds``; their total rate."""
    counts = [0] * threads
    start = threading.Barrier(threads + 1)
    stop = threading.Event()
    failures: list[BaseException] = []
    ids = iter(range(1, 1 << 62))
    lock = threading.Lock()

    def worker(k: int) -> None:
        try:
            with psycopg.connect(conninfo) as conn:
                start.wait()
                while not stop.is_set():
                    with lock:
                        order = next(ids)
                    key = b"order-%d" % order
                    conn.execute("INSERT INTO public.bench_orders VALUES (%s, 12.5)", (order,))
                    if case == "send":
                        oncelog.send(conn, topic, VALUE, key)
                    elif case == "raw_outbox":
                        conn.execute("INSERT INTO public.bench_outbox (key, value) VALUES (%s, %s)", (key, VALUE))
                    conn.commit()
                    counts[k] += 1
        except BaseException as exc:  # reported below
            failures.append(exc)
            if not start.broken:
                start.abort()

    workers = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join(60)
    elapsed = time.perf_counter() - began
    if failures:
        raise failures[0]
    return sum(counts) / elapsed


def reset(conninfo: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for ddl in APP_DDL:
            conn.execute(ddl)
        conn.execute("TRUNCATE public.bench_orders, public.bench_outbox")


def measure(bench: Bench, topic: str, threads: int, seconds: float, repeat: int) -> dict[str, Any]:
    runs: list[dict[str, float]] = []
    for _ in range(repeat):
        run: dict[str, float] = {}
        for case in CASES:
            reset(bench.conninfo)
            run[case] = transactions_per_s(bench.conninfo, case, threads, seconds, topic)
        runs.append(run)
    ratio_business = statistics.median(r["send"] / r["business_only"] for r in runs)
    ratio_raw = statistics.median(r["send"] / r["raw_outbox"] for r in runs)
    return {
        "threads": threads,
        "runs": runs,
        **{f"{case}_per_s": round(statistics.median(r[case] for r in runs), 1) for case in CASES},
        "ratio_to_business_only": round(ratio_business, 3),
        "ratio_to_raw_outbox": round(ratio_raw, 3),
    }


def run(quick: bool, repeat: int) -> dict[str, Any]:
    started = time.perf_counter()
    machine = machine_info()
    seconds = QUICK_SECONDS if quick else FULL_SECONDS
    with scratch_database() as (bench, server):
        topic, _ = bench.new_topic(PARTITIONS)
        cases = []
        for threads in THREADS:
            log(f"outbox: {threads} thread(s)")
            cases.append(measure(bench, topic, threads, seconds, repeat))
    return {
        **result_fields("outbox", quick, repeat, machine, server),
        "database": bench.name,
        "settings": {"partitions": PARTITIONS, "seconds": seconds, "value_bytes": len(VALUE), "repeat": repeat},
        "cases": cases,
        "seconds": round(time.perf_counter() - started, 1),
    }


def render(result: dict[str, Any]) -> str:
    return titled("# oncelog outbox benchmark", result["quick"], outbox_section(result))


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(
        argv,
        prog="bench.outbox",
        doc=__doc__,
        repeat_help="paired runs per case (default 3; 1 with --quick)",
        default_repeat=3,
        run=run,
        render=render,
    )


if __name__ == "__main__":
    sys.exit(main())
