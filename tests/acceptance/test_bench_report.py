"""The benchmark report (``bench/report.py``) built from small hand-made results of every benchmark.

No database and no benchmark runs here: the fixtures have the shape the benchmarks write (see
``bench/{produce,transactions,pipeline,spark}.py``), with round numbers chosen so that the ratios, and so
the met / not met marks, are known in advance. Nothing is timed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from bench import report
from bench.report import END_MARKER, START_MARKER, Headline, MarkerError
from tests.support import REPO

ROOT = REPO
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ("produce_throughput.png", "txn_throughput.png", "latency.png", "read_rates.png", "pipeline_rates.png")


# --- fixtures: results shaped like the benchmarks' JSON ---------------------------------------


def _machine() -> dict[str, Any]:
    return {
        "nproc": 2,
        "nproc_usable": 2,
        "python": "3.11.7",
        "psycopg": "3.3.9 (binary, libpq 180006)",
        "sqlalchemy": "2.1.9",
        "platform": "Linux-6.1-x86_64-with-glibc2.36",
        "loadavg_start": [1.5, 1.2, 1.0],
        "loadavg_end": [2.5, 1.4, 1.1],
        "memory_gib": 23.5,
        "cpu": "AMD EPYC",
    }


def _server() -> dict[str, Any]:
    return {
        "version": "15.18 (Debian 15.18-0+deb12u1)",
        "settings": {"fsync": "on", "synchronous_commit": "on", "shared_buffers": "256MB"},
        "superuser": True,
        "target": "embedded default cluster in /var/lib/oncelog/dev-db (already running)",
        "checkpoint_before_each_case": True,
    }


def _common(name: str, when: str) -> dict[str, Any]:
    return {
        "benchmark": name,
        "quick": False,
        "repeat": 3,
        "database": f"oncelog_bench_{name}",
        "when": when,
        "machine": _machine(),
        "oncelog": {"migration_head": "0008", "git": "abc1234"},
        "server": _server(),
        "seconds": 100.0,
    }


def _rate(records_per_s: float, **extra: Any) -> dict[str, Any]:
    return {"records": 1000, "seconds": 1000 / records_per_s, "records_per_s": records_per_s, **extra}


def _latency(p50: float, p99: float) -> dict[str, Any]:
    return {"samples": 100, "p50_ms": p50, "p99_ms": p99, "max_ms": p99 * 2, "mean_ms": p50 * 1.1}


#: At batch 1000, INSERT ... unnest against binary COPY: faster for 100 B values, slower for 1 KiB.
UNNEST_OVER_COPY = {100: 1.5, 1024: 0.8}


#: At batch 1000, the tuned Producer's ratio to the store call (lowest 0.70: below the 0.8 target).
PRODUCER_1000 = {(100, 1): 0.90, (100, 8): 0.70, (1024, 1): 0.85, (1024, 8): 0.95}
#: Client CPU (us) and GC-tracked allocations per record, by kind.
COST = {
    "raw_copy": (2.0, 0.0),
    "raw_unnest": (1.5, 0.0),
    "store": (3.0, 0.01),
    "producer": (9.0, 0.05),
    "producer_defaults": (12.0, 0.2),
}


def _costed(records_per_s: float, kind: str, **extra: Any) -> dict[str, Any]:
    cpu, allocs = COST[kind]
    return _rate(
        records_per_s,
        mb_per_s=1.0,
        client_cpu_us_per_record=cpu,
        gc_allocations_per_record=allocs,
        gc_collections=[3, 1, 0],
        gc_seconds=0.012,
        **extra,
    )


def _target(what: str, value: float, goal: float, op: str = ">=") -> dict[str, Any]:
    return {
        "what": what,
        "target": goal,
        "op": op,
        "value": value,
        "met": value >= goal if op == ">=" else value <= goal,
    }


def produce_result() -> dict[str, Any]:
    """12 cases; at batch 1000 the ceiling is unnest (100 B: 1.5M records/s) or COPY (1 KiB: 1M), the store's
    ratios to it are 0.60, 0.55, 0.75, 0.80, the Producer's to the store 0.90, 0.70, 0.85, 0.95, and
    Producer(url) makes 0.75 of the tuned Producer."""
    store_1000 = {(100, 1): 0.60, (100, 8): 0.55, (1024, 1): 0.75, (1024, 8): 0.80}
    cases = []
    for size in (100, 1024):
        for parts in (1, 8):
            for batch in (1, 100, 1000):
                copy = 1000.0 * batch if batch > 1 else 3000.0
                unnest = copy * UNNEST_OVER_COPY[size]
                ceiling = max(copy, unnest)
                faster = "raw_unnest" if unnest > copy else "raw_copy"
                r_store = store_1000[(size, parts)] if batch == 1000 else 0.5
                r_producer = PRODUCER_1000[(size, parts)] if batch == 1000 else 0.5
                label = f"{'1 KiB' if size == 1024 else f'{size} B'}, {parts} part, batch {batch}"
                store, producer = ceiling * r_store, ceiling * r_store * r_producer
                case: dict[str, Any] = {
                    "key": f"{size}B/{parts}p/b{batch}",
                    "label": label,
                    "value_size": size,
                    "partitions": parts,
                    "batch": batch,
                    "records": 1000,
                    "raw_copy": _costed(copy, "raw_copy"),
                    "raw_unnest": _costed(unnest, "raw_unnest"),
                    "ceiling": {
                        "records_per_s": ceiling,
                        "runs_records_per_s": [ceiling] * 3,
                        "faster": faster,
                        "runs_faster": [faster] * 3,
                        "ratio_unnest_copy": UNNEST_OVER_COPY[size],
                    },
                    "store": _costed(store, "store"),
                    "producer": _costed(producer, "producer", batches=10, records_per_batch_avg=100.0),
                    "ratio_raw_copy": copy / ceiling,
                    "ratio_raw_unnest": unnest / ceiling,
                    "ratio_store": r_store,
                    "ratio_producer": round(r_store * r_producer, 3),
                    "ratio_producer_store": r_producer,
                }
                if batch == 1000:
                    case["producer_defaults"] = _costed(producer * 0.75, "producer_defaults", batches=40)
                    case["ratio_producer_defaults"] = round(r_store * r_producer * 0.75, 3)
                    case["ratio_defaults_tuned"] = 0.75
                    case["ratio_defaults_store"] = round(r_producer * 0.75, 3)
                cases.append(case)
    at_1000 = [c for c in cases if c["batch"] == 1000]
    return {
        **_common("produce", "2026-11-21T12:00:00+00:00"),
        "cases": cases,
        "latency": {
            "producer": _latency(1.2, 3.6),
            "store": _latency(0.8, 2.0),
            "raw": _latency(0.3, 1.2),
            "raw_copy": _latency(0.5, 1.5),
        },
        "gc_threshold": [700, 10, 10],
        "headline": {
            "target": 0.8,
            "cases": 4,
            "ratio_store_min": 0.55,
            "ratio_producer_min": min(c["ratio_producer"] for c in at_1000),
            "targets": {
                "store_vs_ceiling": _target("store call / raw ceiling", 0.55, 0.8),
                "producer_vs_store": _target("Producer (tuned) / store call", 0.7, 0.8),
                "defaults_vs_tuned": _target("Producer(url) defaults / tuned Producer", 0.75, 0.7),
                "latency_p50": _target("Producer p50 / raw p50", 4.0, 2.0, "<="),
            },
        },
    }


#: What bench/produce.py added to a case for #16 (the ceiling, the Producer against the store call, the defaults).
NEW_CASE_FIELDS = (
    "raw_unnest",
    "ceiling",
    "ratio_raw_copy",
    "ratio_raw_unnest",
    "ratio_producer_store",
    "producer_defaults",
    "ratio_producer_defaults",
    "ratio_defaults_tuned",
    "ratio_defaults_store",
)


def legacy_produce_result() -> dict[str, Any]:
    """The shape bench/produce.py wrote before #16: binary COPY alone as "raw", no Producer defaults, no client
    cost, its one target 0.5 (store call against COPY)."""
    result = produce_result()
    for case in result["cases"]:
        case["raw"] = case.pop("raw_copy")
        for key in NEW_CASE_FIELDS:
            case.pop(key, None)
        for kind in ("raw", "store", "producer"):
            for name in ("client_cpu_us_per_record", "gc_allocations_per_record", "gc_collections", "gc_seconds"):
                del case[kind][name]
    del result["latency"]["raw_copy"]
    del result["gc_threshold"]
    result["headline"] = {"target": 0.5, "cases": 4, "ratio_store_min": 0.55, "ratio_producer_min": 0.25}
    return result


def transactions_result(txn1000_ratios: tuple[float, float] = (0.81, 0.85), txn100_4p: float = 0.85) -> dict[str, Any]:
    """Transactions of 1000 records at the given ratios (1 and 4 partitions), of 100 records on 4 partitions at
    ``txn100_4p``; committing 10 records on 4 partitions 4 ms against the 10-row INSERT's 7 (the COPY's 8);
    fetch_many 0.16, Consumer 0.12."""
    throughput = []
    for parts, r1000 in zip((1, 4), txn1000_ratios, strict=True):
        for size in (1, 10, 100, 1000):
            r = r1000 if size == 1000 else txn100_4p if (parts, size) == (4, 100) else size / 2000
            throughput.append(
                {
                    "key": f"{parts}p/txn{size}",
                    "partitions": parts,
                    "txn_size": size,
                    "transactional": _rate(
                        40000.0 * r,
                        transactions=3,
                        transactions_per_s=40.0 * r / size * 1000,
                        produce_calls_per_txn=1.0,
                        commit_ms_avg=4.5,
                    ),
                    "idempotent": _rate(40000.0, produce_calls=40, records_per_call=25.0),
                    "ratio": r,
                    "idempotent_flushed": _rate(30000.0, produce_calls=40, records_per_call=25.0),
                    "ratio_flushed": round(40000.0 * r / 30000.0, 3),
                }
            )
    names = ("empty", "ten_1p", "ten_4p", "ten_flushed", "raw_one", "raw_ten")
    commit = {name: _latency(2.0 + i, 10.0 + i) for i, name in enumerate(names)}
    # The raw binary COPYs beside the INSERTs: faster for a single row, slower for 10.
    commit |= {"raw_one_copy": _latency(1.0, 20.0), "raw_ten_copy": _latency(8.0, 9.0)}
    readers = {
        "raw": {**_rate(500000.0), "ratio": 1.0},
        "raw_text": {**_rate(300000.0), "ratio": 0.6},
        "fetch_v3": {**_rate(250000.0), "ratio": 0.5},
        "fetch_rc": {**_rate(80000.0), "ratio": 0.16},
        "fetch_ru": {**_rate(85000.0), "ratio": 0.17},
        "consumer_rc": {**_rate(60000.0), "ratio": 0.12},
        "consumer_ru": {**_rate(65000.0), "ratio": 0.13},
    }
    return {
        **_common("transactions", "2026-11-21T12:10:00+00:00"),
        "producer_config": {"linger_ms": 5, "batch_size": 16384},
        "throughput": throughput,
        "commit_latency": commit,
        "reads": {
            "records": 200000,
            "partitions": 4,
            "batch": 500,
            "txn_records": 400,
            "max_seconds": 3.0,
            "load_seconds": 10.0,
            "readers": readers,
        },
        "headline": {
            "txn_target": 0.9,
            "txn1000_ratio_min": min(txn1000_ratios),
            "read_target": 0.7,
            "read_committed_fetch_many_ratio": 0.16,
            "read_committed_consumer_ratio": 0.12,
            "targets": {
                "txn100_4p": _target("transactions of 100 records on 4 partitions", txn100_4p, 0.8),
                "commit_ten_4p": _target("commit p50 / raw 10-row p50", 4.0 / 7.0, 2.0, "<="),
                "consumer_rc": _target("Consumer.poll read_committed / raw SELECT", 0.12, 0.8),
            },
        },
    }


def legacy_transactions_result() -> dict[str, Any]:
    """The shape bench/transactions.py wrote before #16: raw INSERTs alone, no targets list."""
    result = transactions_result()
    for key in ("raw_one_copy", "raw_ten_copy"):
        del result["commit_latency"][key]
    del result["headline"]["targets"]
    return result


def pipeline_result() -> dict[str, Any]:
    throughput = [
        {
            "members": members,
            "records": 20000,
            "seconds": 20000 / rate,
            "records_per_s": rate,
            "transactions": 100,
            "aborted_transactions": 0,
            "records_per_txn": 200.0,
            "copied_per_member": [20000 // members] * members,
            "member_cpu_s": [1.0] * members,
        }
        for members, rate in ((1, 3500.0), (4, 11900.0))
    ]
    waiters = {
        backoff: {**_latency(p50, p50 * 4), "min_ms": -0.1, "client_cpu_pct": 1.0, "server_cpu_pct": 0.5}
        for backoff, p50 in (("200", 60.0), ("200-polling", 12.0), ("5-polling", 6.0))
    }
    notify = [
        {
            "threads": t,
            "mode": mode,
            "commits_per_s": 1000.0 * t * r,
            "runs_commits_per_s": [1000.0 * t * r],
            "ratio": r,
        }
        for t in (1, 8)
        for mode, r in (("plain", 1.0), ("notify", 0.9), ("notify_listened", 0.8))
    ]
    return {
        **_common("pipeline", "2026-11-21T12:20:00+00:00"),
        "throughput": throughput,
        "latency": [{"members": m, "rate_per_s": 200, **_latency(49.0 * m, 104.0 * m)} for m in (1, 4)],
        "wakeup": {
            "samples": 150,
            "max_gap_s": 0.4,
            "waiters": waiters,
            "notify": {**_latency(0.4, 1.5), "min_ms": 0.2},
            "cost": {
                "producers": 4,
                "seconds": 4.0,
                "commits_per_s_on": 1900.0,
                "commits_per_s_off": 2000.0,
                "runs_on": [1900.0],
                "runs_off": [2000.0],
                "ratio": 0.95,
                "target": 0.95,
            },
        },
        "notify_throughput": notify,
        "headline": {
            "records_per_s_1_member": 3500.0,
            "records_per_s_4_members": 11900.0,
            "wakeup_default_p50_ms": 60.0,
            "wakeup_default_p99_ms": 240.0,
            "notify_ratio_8_threads": 0.9,
        },
    }


def write_back(ratio: float = 0.55) -> dict[str, Any]:
    """The Spark write-back against a raw JVM JDBC write: 200k rows/s of JDBC, oncelog at ``ratio`` of it."""
    return {
        "records": 400000,
        "oncelog_rows_per_s": 200000.0 * ratio,
        "raw_jdbc_rows_per_s": 200000.0,
        "ratio": ratio,
        "target": 0.5,
        "phases_s": {"read input": 1.0, "python workers": 2.0, "append": 0.5, "commit": 0.5},
    }


def spark_result(view_ratio: float = 0.97, write_back_ratio: float | None = 0.55) -> dict[str, Any]:
    """The shape bench/spark.py writes: its own keys, "server" the target, PostgreSQL under "postgres"; the
    write-back (#16) unless ``write_back_ratio`` is None (results from before it)."""
    common = _common("spark", "2026-11-21T12:30:00+00:00")
    extra = {} if write_back_ratio is None else {"write_back": write_back(write_back_ratio)}
    return {
        **extra,
        "records": 400000,
        "partitions": 4,
        "tasks": 4,
        "raw_rows_per_s": 980000.0,
        "committed_rows_per_s": 980000.0 * view_ratio,
        "ratio": view_ratio,
        "rows": [400000, 400000],
        "pass": 1,
        "pipeline_records": 400000,
        "pipeline_records_per_s": 25000.0,
        "machine": _machine(),
        "server": "embedded default cluster in /var/lib/oncelog/dev-db (already running)",
        "benchmark": "spark",
        "quick": False,
        "when": common["when"],
        "oncelog": common["oncelog"],
        "postgres": {k: v for k, v in _server().items() if k in ("version", "settings", "superuser")},
        "ratio_target": 0.8,
        "seconds": 90.0,
    }


def groups_result() -> dict[str, Any]:
    """The shape bench/groups.py writes."""

    def case(members: int, join_ms: float) -> dict[str, Any]:
        run = {
            "members": members,
            "join_to_stable_ms": join_ms,
            "steady_records_per_s": 4000.0,
            "through_records_per_s": 3000.0,
            "through_ratio": 0.75,
            "stop_the_world_ms": 210.0,
            "steady_gap_ms": 200.0,
            "handovers": members,
            "handover_p50_ms": 40.0,
            "handover_max_ms": 90.0,
        }
        return {"members": members, "runs": [run], "median": run}

    return {
        **_common("groups", "2026-11-21T12:30:00+00:00"),
        "settings": {"partitions": 16, "repeat": 1, "rate": 4000, "steady_s": 4.0, "after_s": 1.0},
        "cases": [case(1, 120.0), case(4, 150.0), case(8, 180.0)],
    }


def outbox_result() -> dict[str, Any]:
    """The shape bench/outbox.py writes."""

    def case(threads: int) -> dict[str, Any]:
        return {
            "threads": threads,
            "runs": [],
            "send_per_s": 800.0 * threads,
            "business_only_per_s": 1000.0 * threads,
            "raw_outbox_per_s": 950.0 * threads,
            "ratio_to_business_only": 0.8,
            "ratio_to_raw_outbox": 0.842,
        }

    return {
        **_common("outbox", "2026-11-21T12:30:00+00:00"),
        "settings": {"partitions": 4, "seconds": 3.0, "value_bytes": 100, "repeat": 3},
        "cases": [case(1), case(8)],
    }


def broker_result() -> dict[str, Any]:
    """The shape bench/broker.py writes."""

    def case(size: int, scale: float) -> dict[str, Any]:
        return {
            "value_bytes": size,
            "records": 1000,
            "runs": [],
            "store_per_s": 100_000.0 * scale,
            "broker_idempotent_per_s": 75_000.0 * scale,
            "broker_transactional_per_s": 60_000.0 * scale,
            "producer_per_s": 90_000.0 * scale,
            "producer_transactional_per_s": 120_000.0 * scale,
            "consume_broker_per_s": 50_000.0 * scale,
            "consume_poll_per_s": 100_000.0 * scale,
            "ratio_idempotent_to_store": 0.75,
            "ratio_transactional_to_store": 0.6,
            "ratio_producer_to_store": 0.9,
            "ratio_transactional_to_producer_transactional": 0.5,
            "ratio_consume_to_poll": 0.5,
        }

    return {
        **_common("broker", "2026-11-21T12:30:00+00:00"),
        "settings": {"partitions": 4, "batch": 1000, "repeat": 3, "librdkafka": "2.16.0"},
        "cases": [case(100, 1.0), case(1024, 0.5)],
    }


def replication_result() -> dict[str, Any]:
    """The shape bench/replication.py writes."""

    def latency(quorum_ms: float, alone_ms: float) -> dict[str, Any]:
        def figures(p50: float) -> dict[str, float]:
            return {"samples": 400, "p50_ms": p50, "p99_ms": 3 * p50, "max_ms": 4 * p50, "mean_ms": 1.2 * p50}

        return {
            "quorum": figures(quorum_ms),
            "alone": figures(alone_ms),
            "ratio_p50": round(quorum_ms / alone_ms, 3),
            "ratio_p99": round(quorum_ms / alone_ms, 3),
        }

    return {
        **_common("replication", "2026-11-21T12:30:00+00:00"),
        "server": {
            "version": _server()["version"],
            "settings": {"synchronous_standby_names": "ANY 1 (pgautofailover_standby_2, pgautofailover_standby_3)"},
            "standbys": [
                {"name": "pgautofailover_standby_2", "sync_state": "quorum"},
                {"name": "pgautofailover_standby_3", "sync_state": "quorum"},
            ],
        },
        "settings": {
            "records": 40_000,
            "samples": 400,
            "partitions": 4,
            "value_bytes": 100,
            "txn_records": 10,
            "repeat": 3,
        },
        "throughput": {"runs": [], "quorum_per_s": 30_000.0, "alone_per_s": 40_000.0, "ratio": 0.75},
        "latency": {"raw_insert": latency(1.5, 0.5), "send": latency(2.0, 1.0), "txn_commit": latency(3.0, 1.5)},
    }


def storage_result() -> dict[str, Any]:
    """The shape bench/storage.py writes."""

    def case(size: int) -> dict[str, Any]:
        median = {"deleted": 500_000.0, "drop_s": 0.004}
        return {
            "value_bytes": size,
            "records": 1_000_000,
            "runs": [],
            "median": median,
            "bytes_per_record": 236.0 + size,
            "heap_per_record": 205.0 + size,
            "indexes_per_record": 31.0,
            "toast_per_record": 0.0,
            "retention_records_per_s": 800_000.0,
            "retention_wal_per_record": 73.0,
            "raw_delete_records_per_s": 2_000_000.0,
            "ratio_retention_to_raw_delete": 0.45,
            "drop_s": 0.004,
            "scaled": {"records": 100_000_000, "table_gib": 22.0, "retention_hours": 0.04, "raw_delete_hours": 0.02},
        }

    return {
        **_common("storage", "2026-11-21T12:30:00+00:00"),
        "settings": {"partitions": 4, "batch": 1000, "retention_batch": 10_000, "repeat": 2, "scale_to": 100_000_000},
        "cases": [case(100), case(1024)],
        "hot_path": {
            "partitions": 16,
            "segments_per_partition": 48,
            "segment_offsets": 5000,
            "leaf_tables": 768,
            "value_bytes": 100,
            "rows": [
                {"measure": "append 1", "calls": 600, "plain_ms": 0.3, "partitioned_ms": 0.31, "ratio": 1.03},
                {"measure": "fetch 10 anywhere", "calls": 600, "plain_ms": 0.15, "partitioned_ms": 0.9, "ratio": 6.0},
            ],
            "locks": {"create partition of": "AccessExclusiveLock", "attach": "ShareUpdateExclusiveLock"},
        },
    }


def compaction_result() -> dict[str, Any]:
    """The shape bench/compaction.py writes."""
    return {
        **_common("compaction", "2026-11-21T12:30:00+00:00"),
        "settings": {
            "partitions": 4,
            "batch": 1000,
            "value_bytes": 100,
            "keys_per_partition": 1024,
            "pass_offsets": 50_000,
            "loop_pass_offsets": 5_000,
            "repeat": 3,
        },
        "throughput": {
            "records": 400_000,
            "runs": [],
            "median": {},
            "examined_per_s": 300_000.0,
            "removed_per_s": 290_000.0,
            "raw_deleted_per_s": 600_000.0,
            "ratio_to_raw_delete": 0.5,
        },
        "produce": {
            "records": 400_000,
            "runs": [],
            "median": {"beside_passes": 120.0, "elsewhere_passes": 130.0},
            "alone_per_s": 100_000.0,
            "beside_per_s": 90_000.0,
            "elsewhere_per_s": 95_000.0,
            "ratio": 0.9,
            "ratio_elsewhere": 0.95,
        },
    }


def full_results() -> dict[str, dict[str, Any]]:
    return {
        "produce": produce_result(),
        "transactions": transactions_result(),
        "pipeline": pipeline_result(),
        "spark": spark_result(),
        "groups": groups_result(),
        "outbox": outbox_result(),
        "broker": broker_result(),
        "replication": replication_result(),
        "storage": storage_result(),
        "compaction": compaction_result(),
    }


def write_results(folder: Path, results: dict[str, dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, result in results.items():
        (folder / f"{name}.json").write_text(json.dumps(result, indent=2))
    return folder


@pytest.fixture
def full_report(tmp_path: Path) -> tuple[Path, str]:
    """The report of every benchmark, built into tmp_path/out."""
    results = write_results(tmp_path / "results", full_results())
    _, path = report.build(results, tmp_path / "out")
    return path.parent, path.read_text()


def render_with_readme(results: Path, out: Path, readme: Path) -> int:
    """``python -m bench.report --results ... --out ... --update-readme README`` (markdown only, for speed)."""
    return report.main(["--results", str(results), "--out", str(out), "--update-readme", str(readme), "--no-plots"])


def report_rows(full_report: tuple[Path, str]) -> list[Headline]:
    """The headline rows of the report ``full_report`` built."""
    return report.headlines(report.load_outcomes(full_report[0].parent / "results"))


def figures(row: Headline) -> tuple[str, str, str]:
    """A headline row's figure, its baseline and the ratio, as the table shows them."""
    return row.oncelog, row.baseline, row.ratio


def headline_by_prefix(rows: list[Headline], prefix: str) -> Headline:
    matches = [r for r in rows if r.what.startswith(prefix)]
    assert len(matches) == 1, (prefix, [r.what for r in rows])
    return matches[0]


# --- the report -------------------------------------------------------------------------------


def test_the_report_names_every_figure_beside_its_baseline_and_ratio(full_report: tuple[Path, str]) -> None:
    _, md = full_report
    for section in (
        "## Headline",
        "## Throughput against batch size",
        "## Throughput against transaction size",
        "## Latency percentiles",
        "## Read rates",
        "## Pipeline rates",
    ):
        assert section in md, section
    # produce: every case, with both raw baselines, the ceiling (the faster named) and both ratios
    for case in produce_result()["cases"]:
        assert f"| {case['label']} | " in md, case["label"]
    assert (
        "| 100 B, 8 part, batch 1000 | 825,000 | 577,500 | 1,000,000 | 1,500,000 | 1,500,000 (unnest) | 1.50 | 0.55 "
        in md
    )
    assert (
        "| 1 KiB, 1 part, batch 1000 | 750,000 | 637,500 | 1,000,000 | 800,000 | 1,000,000 (COPY) | 0.80 | 0.75 " in md
    )
    # the Producer beside the store call, and Producer(url) beside the tuned Producer
    assert "| 100 B, 8 part, batch 1000 | 577,500 | 825,000 | 0.70 | 433,125 | 0.75 | 0.53 |" in md
    assert "| 100 B, 8 part, batch 100 | 37,500 | 75,000 | 0.50 | | | |" in md
    # the client cost of every kind, and what is counted
    assert (
        "| case | client CPU us/record: COPY / unnest / store call / Producer / Producer(url) "
        "| GC-tracked allocations/record: COPY / unnest / store call / Producer / Producer(url) |" in md
    )
    assert (
        "| 1 KiB, 8 part, batch 1000 | 2.0 / 1.5 / 3.0 / 9.0 / 12.0 | 0.00 / 0.00 / 0.01 / 0.05 / 0.20 | 3.0x |" in md
    )
    assert "| 1 KiB, 8 part, batch 1 | 2.0 / 1.5 / 3.0 / 9.0 / - | 0.00 / 0.00 / 0.01 / 0.05 / - | 3.0x |" in md
    assert "times the gen0 threshold (700), divided by the records" in md
    assert "| raw binary COPY records/s | raw INSERT ... unnest records/s | ceiling records/s (the faster) |" in md
    assert "the ceiling of a run is the faster of the two in that run, and every ratio is against it" in md
    producer_latency = "| Producer (linger_ms=0): send + wait for the future | 100 | 1.20 | 3.60 | 7.20 "
    assert f"{producer_latency}| single-row INSERT | 0.30 / 1.20 | 4.0x | 3.0x |" in md
    assert "| raw: single-row binary COPY, autocommit | 100 | 0.50 | 1.50 | 3.00 | single-row INSERT " in md
    # transactions: every size and partition count, the idempotent baseline, both ratios
    for parts in (1, 4):
        for size in ("1", "10", "100", "1,000"):
            assert f"| {parts} | {size} | " in md, (parts, size)
    assert "| 1 | 1,000 | " in md
    assert "| 32,400 | 40,000 | 0.81 | 30,000 | 1.08 | 4.50 |" in md
    for title, _ in report.COMMIT_CASES.values():
        assert f"| {title} |" in md, title
    # An EndTxn alone against the faster single-row write (the COPY), a commit of 10 records against the
    # faster 10-row write (the INSERT); every raw write listed too.
    assert (
        "| commit_transaction, empty transaction (EndTxn only) | 100 | "
        "2.00 | 10.0 | 20.0 | single-row binary COPY | 1.00 / 20.0 | 2.0x | 0.5x |" in md
    )
    assert (
        "| commit_transaction, 10 records lingering, 4 partitions | 100 | "
        "4.00 | 12.0 | 24.0 | 10-row INSERT ... unnest | 7.00 / 15.0 | 0.6x | 0.8x |" in md
    )
    for raw in ("single-row INSERT", "single-row binary COPY", "10-row INSERT ... unnest", "10-row binary COPY"):
        assert f"| raw: {raw} | 100 | " in md, raw
    # reads and Spark, each beside its raw baseline
    for title in report.READ_TITLES.values():
        assert f"| {title} |" in md, title
    assert "| store.log.fetch_many, read_committed | 1,000 | 80,000 | 500,000 | 0.16 |" in md
    assert (
        "| oncelog.spark.read_committed (committed_records view) | 950,600 | 980,000 | 0.97 | >= 0.8: **met** |" in md
    )
    # pipelines: rates, end-to-end latency, wake-up against LISTEN/NOTIFY, the cost of NOTIFY
    assert "| 1 | 20,000 | 5.71 | 3,500 | 100 (0) | 200.0 |" in md
    assert "| 4 | 20,000 | 1.68 | 11,900 |" in md
    assert (
        "| Consumer, defaults (listens; polls 5..200 ms) | 100 | 60.0 | 240 | 480 | 0.40 / 1.50 | 150x | 160x |" in md
    )
    assert "| Consumer, polling only, fetch_max_backoff_ms=5 | 100 | 6.00 |" in md
    assert "| on | 1,900 | 0.95 | >= 0.95: **met** |" in md
    assert "| 8 | INSERT + NOTIFY, no listener | 7,200 | 8,000 | 0.90 |" in md
    assert "25,000 records/s end to end" in md
    # the machine, the server and the run
    assert "- machine: 2 CPUs, AMD EPYC, 23.5 GiB RAM, Linux-6.1-x86_64-with-glibc2.36" in md
    assert "- PostgreSQL 15.18 (Debian 15.18-0+deb12u1): fsync=on, synchronous_commit=on, shared_buffers=256MB" in md
    assert "- run: 2026-11-21, 12:00 to 12:30 UTC; oncelog commit abc1234, migrations at 0008" in md
    assert "embedded default cluster" in md
    # nothing missing, nothing that failed to render, no quick-run banner, no mixed runs
    for absent in ("not measured", "Could not render", "not drawn", "--quick run", "different runs"):
        assert absent not in md, absent


def test_the_spark_write_back_is_a_headline_row_and_a_section(full_report: tuple[Path, str]) -> None:
    _, md = full_report
    rows = report_rows(full_report)
    row = headline_by_prefix(rows, "Spark write-back vs raw JVM JDBC write")
    assert row.what == "Spark write-back vs raw JVM JDBC write, 400k records"
    assert figures(row) == ("110k rows/s", "200k rows/s (JDBC)", "0.55")
    assert (row.value, row.target, row.status) == (0.55, 0.5, "met")
    assert "| 0.55 | >= 0.5: **met** |" in md
    assert "| oncelog write-back | 110,000 | 200,000 | 0.55 | >= 0.5: **met** |" in md
    assert "| raw JVM JDBC write (the baseline) | 200,000 | | 1.00 | |" in md
    # Every phase, with its share of the write-back's time.
    for phase in ("| read input | 1.00 | 25% |", "| python workers | 2.00 | 50% |", "| commit | 0.50 | 12% |"):
        assert phase in md, phase


@pytest.mark.parametrize(
    ("write_back_field", "shown"),
    [
        (None, "_Spark write-back: not in these results (measured since #16)._"),
        ({"error": "the JVM ran out of memory", "target": 0.5}, "_Spark write-back: failed: the JVM ran out of"),
        ({**write_back(0.4), "phases_s": {}}, "| oncelog write-back | 80,000 | 200,000 | 0.40 | >= 0.5: **not met** |"),
    ],
)
def test_a_spark_result_without_a_usable_write_back_still_renders(
    tmp_path: Path, write_back_field: dict[str, Any] | None, shown: str
) -> None:
    results = full_results()
    if write_back_field is None:
        del results["spark"]["write_back"]
    else:
        results["spark"]["write_back"] = write_back_field
    outcomes, path = report.build(write_results(tmp_path / "results", results), tmp_path / "out")
    md = path.read_text()
    assert shown in md
    assert "Could not render" not in md
    assert "unexpected spark.json" not in md
    assert (tmp_path / "out" / "pipeline_rates.png").exists()
    rows = [r for r in report.headlines(outcomes) if r.what.startswith("Spark write-back")]
    if write_back_field is None:
        assert rows == []  # older results: no row, nothing claimed
    elif "error" in write_back_field:
        assert [r.status for r in rows] == ["not measured"]
    else:
        assert [(r.value, r.status) for r in rows] == [(0.4, "not met")]
        assert "Where the write-back's time went" not in md


def test_the_plots_exist_are_valid_pngs_and_are_referenced(full_report: tuple[Path, str]) -> None:
    out, md = full_report
    for name in PLOTS:
        path = out / name
        data = path.read_bytes()
        assert data.startswith(PNG_SIGNATURE), name
        with Image.open(path) as image:
            image.verify()  # the whole file decodes (checksums included)
        with Image.open(path) as image:
            assert image.format == "PNG"
            assert image.width >= 600 and image.height >= 200, (name, image.size)
        assert f"]({name})" in md, name


def _legend_labels(res: dict[str, Any]) -> list[list[str]]:
    return [ax.get_legend_handles_labels()[1] for ax in report.produce_figure(res).axes if ax.get_visible()]


def test_the_produce_plot_draws_both_raw_writes_and_the_defaults() -> None:
    labels = _legend_labels(produce_result())
    assert len(labels) == 4  # 100 B and 1 KiB, 1 and 8 partitions
    for panel in labels:
        assert panel == [
            "raw binary COPY",
            "raw INSERT ... unnest",
            "store.log.produce",
            "Producer",
            "Producer(url)",
        ], panel
    # Older results: COPY alone, no defaults.
    assert {tuple(panel) for panel in _legend_labels(legacy_produce_result())} == {
        ("raw binary COPY", "store.log.produce", "Producer")
    }


def test_the_latency_and_pipeline_plots_draw_the_new_baselines(tmp_path: Path) -> None:
    outcomes = report.load_outcomes(write_results(tmp_path / "results", full_results()))
    bars = {
        title: [(label, baseline) for label, _, baseline in panel] for title, panel in report._latency_panels(outcomes)
    }
    assert ("raw COPY", True) in bars["produce, 1 record"]
    for raw in ("1-row INSERT", "1-row binary COPY", "10-row INSERT", "10-row binary COPY"):
        assert (raw, True) in bars["commit_transaction"], raw
    rates = dict(report._pipeline_panels(outcomes))
    assert rates["Spark write-back, rows/s (grey: raw JVM JDBC write)"] == [
        ("raw JDBC write", 200000.0, True),
        ("oncelog write-back", pytest.approx(110000.0), False),
    ]


def test_rendering_the_same_results_twice_writes_the_same_files(tmp_path: Path) -> None:
    results = write_results(tmp_path / "results", full_results())
    report.build(results, tmp_path / "a")
    report.build(results, tmp_path / "b")
    for name in ("report.md", *PLOTS):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


# --- the headline: met / not met --------------------------------------------------------------


def test_verdict_holds_a_figure_to_its_target() -> None:
    assert report.verdict(0.9, 0.9) == "met"  # the target is inclusive (">= 0.9")
    assert report.verdict(0.95, 0.9) == "met"
    assert report.verdict(0.89, 0.9) == "not met"
    assert report.verdict(0.5, None) == ""  # reported for what it is, held to nothing
    assert report.verdict(None, 0.9) == "not measured"
    assert report.verdict(0.95, 0.9, missing="the benchmark failed") == "not measured"
    assert report.verdict(None, None, missing="stalled") == "not measured"


def test_headline_rows_are_marked_against_the_issue_targets(full_report: tuple[Path, str]) -> None:
    _, md = full_report
    rows = report_rows(full_report)
    produce = headline_by_prefix(rows, "idempotent produce, 1000-record batches")
    assert (produce.value, produce.target, produce.status) == (0.55, 0.8, "not met")
    assert produce.ratio == "0.60, 0.55, 0.75, 0.80"
    assert produce.what.endswith("100B/1p, 100B/8p, 1KiB/1p, 1KiB/8p")
    assert produce.baseline == "ceiling 1.50M unnest, 1.50M unnest, 1.00M COPY, 1.00M COPY"
    ceiling = headline_by_prefix(rows, "raw write ceiling, 1000-record batches")
    assert ceiling.baseline == (
        "COPY 1.00M, 1.00M, 1.00M, 1.00M; unnest 1.50M, 1.50M, 800k, 800k; the faster: unnest, unnest, COPY, COPY"
    )
    assert (ceiling.ratio, ceiling.status) == ("unnest / COPY 1.50, 1.50, 0.80, 0.80", "")
    txn = headline_by_prefix(rows, "transactions of 1000 records")
    assert (txn.value, txn.target, txn.status) == (0.81, 0.9, "not met")
    assert txn.ratio == "0.81 / 0.85"
    fetch = headline_by_prefix(rows, "read_committed reads (store.log.fetch_many)")
    assert (fetch.value, fetch.target, fetch.status) == (0.16, 0.7, "not met")
    consumer = headline_by_prefix(rows, "read_committed reads (Consumer.poll)")
    assert consumer.status == "not met"
    spark = headline_by_prefix(rows, "Spark: committed view vs raw JDBC")
    assert (spark.value, spark.target, spark.status) == (0.97, 0.8, "met")
    one = headline_by_prefix(rows, "consume-transform-produce, 1 member(s)")
    assert (one.oncelog, one.ratio, one.target, one.status) == ("3.5k records/s", "0.22", 2.0, "not met")
    four = headline_by_prefix(rows, "consume-transform-produce, 4 member(s)")
    assert (four.ratio, four.status) == ("0.57", "not met")
    wake = headline_by_prefix(rows, "wake-up of a waiting read_committed consumer")
    assert (wake.value, wake.target, wake.status, wake.goal()) == (60.0, 5.0, "not met", "<= 5 ms")
    cost = headline_by_prefix(rows, "commit rate of 4 producers while a consumer waits")
    assert (cost.value, cost.status) == (0.95, "met")
    latency = headline_by_prefix(rows, "single-record produce latency")
    assert figures(latency) == (
        "1.20 / 3.60 ms",
        "0.30 / 1.20 ms (single-row INSERT)",
        "4.0x / 3.0x",
    )
    assert headline_by_prefix(rows, "Spark exactly-once pipeline").oncelog == "25.0k records/s"
    # In the markdown: the mark beside each target, and a summary sentence.
    assert "| 0.60, 0.55, 0.75, 0.80 | >= 0.8 (lowest): **not met** |" in md
    assert "| 0.81 / 0.85 | >= 0.9 (lowest): **not met** |" in md
    assert "| 0.16 | >= 0.7: **not met** |" in md
    assert "| 0.97 | >= 0.8: **met** |" in md
    assert (
        "Targets met: the Producer's defaults against the tuned Producer (0.75); transactions of 100 records on 4 "
        "partitions (0.85); commit latency p50 of 10 records on 4 partitions (0.6x); the wake-ups' cost (0.95); Spark "
        "reads through the committed view (0.97); Spark write-back against a raw JDBC write (0.55); the broker's "
        "idempotent producer against the store call (0.75)." in md
    )
    assert (
        "Not met: idempotent produce (store call) at 1000-record batches (0.55, target >= 0.8); the Producer against "
        "the store call (0.70, target >= 0.8); single-record produce latency p50 (4.0x, target <= 2x); "
        "transactional throughput at 1000 records per transaction (0.81, target >= 0.9); read_committed reads "
        "through store.log.fetch_many (0.16, target >= 0.7); read_committed reads through Consumer.poll (0.12, "
        "target >= 0.8); consume-transform-produce, 1 member(s) (0.22, target >= 2); consume-transform-produce, "
        "4 member(s) (0.57, target >= 2); wake-up latency (60 ms, target <= 5 ms); the broker's transactional "
        "producer against the store call (0.60, target >= 0.7)." in md
    )


def test_the_transaction_rows_hold_the_issue_16_targets(full_report: tuple[Path, str]) -> None:
    _, md = full_report
    rows = report_rows(full_report)
    txn100 = headline_by_prefix(rows, "transactions of 100 records on 4 partitions")
    assert figures(txn100) == ("34.0k records/s", "idempotent 40.0k", "0.85")
    assert (txn100.value, txn100.target, txn100.status) == (0.85, 0.8, "met")
    commit = headline_by_prefix(rows, "commit latency p50 / p99, a 10-record transaction on 4 partitions")
    assert figures(commit) == (
        "4.00 / 12.0 ms",
        "7.00 / 15.0 ms (10-row INSERT ... unnest)",
        "0.6x / 0.8x",
    )
    assert (commit.value, commit.target, commit.at_most, commit.status) == (0.57, 2.0, True, "met")
    consumer = headline_by_prefix(rows, "read_committed reads (Consumer.poll)")
    assert (consumer.value, consumer.target, consumer.status) == (0.12, 0.8, "not met")
    assert "| 0.85 | >= 0.8: **met** |" in md
    assert "| 0.6x / 0.8x | <= 2x: **met** |" in md
    assert "| 0.12 | >= 0.8: **not met** |" in md


def test_transactions_results_from_before_issue_16_still_render(tmp_path: Path) -> None:
    """Without the raw COPYs and the targets list: the INSERTs are the baselines, the targets the issue's."""
    results = {**full_results(), "transactions": legacy_transactions_result()}
    outcomes, path = report.build(write_results(tmp_path / "results", results), tmp_path / "out")
    md = path.read_text()
    rows = report.headlines(outcomes)
    commit = headline_by_prefix(rows, "commit latency p50 / p99, a 10-record transaction on 4 partitions")
    assert (commit.baseline, commit.status) == ("7.00 / 15.0 ms (10-row INSERT ... unnest)", "met")
    assert headline_by_prefix(rows, "transactions of 100 records on 4 partitions").target == 0.8
    assert "| commit_transaction, empty transaction (EndTxn only) | 100 | 2.00 | 10.0 | 20.0 | single-row INSERT " in md
    assert "| raw: single-row binary COPY |" not in md
    assert "Could not render" not in md
    assert (tmp_path / "out" / "latency.png").exists()


def test_the_producer_rows_hold_the_issue_16_targets(full_report: tuple[Path, str]) -> None:
    _, md = full_report
    rows = report_rows(full_report)
    producer = headline_by_prefix(rows, "Producer (tuned: full 1000-record batches) vs the store call")
    assert (producer.value, producer.target, producer.status) == (0.7, 0.8, "not met")
    assert (producer.oncelog, producer.baseline) == (
        "810k, 578k, 638k, 760k records/s",
        "store call 900k, 825k, 750k, 800k",
    )
    assert producer.ratio == "0.90, 0.70, 0.85, 0.95"
    defaults = headline_by_prefix(rows, "Producer(url), nothing set, vs the tuned Producer")
    assert (defaults.value, defaults.target, defaults.status) == (0.75, 0.7, "met")
    assert defaults.ratio == "0.75, 0.75, 0.75, 0.75 (of the store call: 0.68, 0.53, 0.64, 0.71)"
    cost = headline_by_prefix(rows, "Producer client CPU / GC-tracked allocations per record")
    assert figures(cost) == ("9.0 us / 0.05", "store call 3.0 us / 0.01", "CPU 3.0x")
    assert cost.status == ""
    latency = headline_by_prefix(rows, "single-record produce latency")
    assert (latency.value, latency.target, latency.at_most, latency.status) == (4.0, 2.0, True, "not met")
    assert "| 4.0x / 3.0x | <= 2x: **not met** |" in md
    assert "| 0.90, 0.70, 0.85, 0.95 | >= 0.8 (lowest): **not met** |" in md
    assert "| 0.75, 0.75, 0.75, 0.75 (of the store call: 0.68, 0.53, 0.64, 0.71) | >= 0.7 (lowest): **met** |" in md


def test_the_targets_recorded_in_the_results_are_the_ones_held(tmp_path: Path) -> None:
    """A benchmark's JSON names its targets; the report holds each figure to the recorded one."""
    results = full_results()
    recorded = results["produce"]["headline"]["targets"]
    recorded["defaults_vs_tuned"]["target"] = 0.8
    recorded["latency_p50"]["target"] = 5.0
    results["transactions"]["headline"]["targets"]["txn100_4p"]["target"] = 0.9
    outcomes, _ = report.build(write_results(tmp_path / "results", results), tmp_path / "out", plots=False)
    rows = report.headlines(outcomes)
    defaults = headline_by_prefix(rows, "Producer(url), nothing set")
    assert (defaults.target, defaults.status) == (0.8, "not met")
    latency = headline_by_prefix(rows, "single-record produce latency")
    assert (latency.target, latency.status) == (5.0, "met")
    assert headline_by_prefix(rows, "transactions of 100 records on 4 partitions").status == "not met"


def test_a_latency_target_is_a_ceiling() -> None:
    assert report.verdict(2.0, 2.0, at_most=True) == "met"
    assert report.verdict(1.5, 2.0, at_most=True) == "met"
    assert report.verdict(2.01, 2.0, at_most=True) == "not met"
    row = Headline("latency", target=2.0, value=3.0, at_most=True)
    assert (row.status, row.target_cell()) == ("not met", "<= 2x: **not met**")


def test_a_ratio_at_the_target_is_met(tmp_path: Path) -> None:
    results = full_results()
    results["transactions"] = transactions_result((0.9, 0.95))
    results["spark"] = spark_result(0.79)
    outcomes, _ = report.build(write_results(tmp_path / "results", results), tmp_path / "out", plots=False)
    rows = report.headlines(outcomes)
    assert headline_by_prefix(rows, "transactions of 1000 records").status == "met"
    assert headline_by_prefix(rows, "Spark: committed view vs raw JDBC").status == "not met"


def test_a_reader_without_progress_is_not_measured_rather_than_a_zero_ratio(tmp_path: Path) -> None:
    results = full_results()
    readers = results["transactions"]["reads"]["readers"]
    readers["fetch_rc"] = {"records": 0, "seconds": 0.0, "records_per_s": 0.0, "ratio": 0.0, "error": "stuck at 0"}
    outcomes, path = report.build(write_results(tmp_path / "results", results), tmp_path / "out")
    fetch = headline_by_prefix(report.headlines(outcomes), "read_committed reads (store.log.fetch_many)")
    assert fetch.status == "not measured"
    assert "no progress: stuck at 0" in fetch.missing
    md = path.read_text()
    assert "| store.log.fetch_many, read_committed | - | no progress: stuck at 0 |" in md
    assert (tmp_path / "out" / "read_rates.png").exists()  # the other readers are still plotted


def test_the_latency_baseline_is_the_faster_raw_write(tmp_path: Path) -> None:
    results = full_results()
    results["produce"]["latency"]["raw_copy"] = _latency(0.2, 2.4)
    outcomes, path = report.build(write_results(tmp_path / "results", results), tmp_path / "out", plots=False)
    latency = headline_by_prefix(report.headlines(outcomes), "single-record produce latency")
    assert (latency.baseline, latency.ratio) == ("0.20 / 2.40 ms (single-row binary COPY)", "6.0x / 1.5x")
    md = path.read_text()
    assert "| raw: single-row INSERT, autocommit | 100 | 0.30 | 1.20 | 2.40 | single-row binary COPY " in md


def test_results_from_before_the_unnest_baseline_still_render(tmp_path: Path) -> None:
    """Older produce results hold binary COPY alone ("raw"): the ceiling is COPY, and the report says unnest
    was not measured rather than failing."""
    results = {**full_results(), "produce": legacy_produce_result()}
    outcomes, path = report.build(write_results(tmp_path / "results", results), tmp_path / "out")
    md = path.read_text()
    rows = report.headlines(outcomes)
    produce = headline_by_prefix(rows, "idempotent produce, 1000-record batches")
    assert produce.baseline == "ceiling 1.00M COPY, 1.00M COPY, 1.00M COPY, 1.00M COPY"
    assert (produce.value, produce.status) == (0.55, "met")
    ceiling = headline_by_prefix(rows, "raw write ceiling, 1000-record batches")
    assert ceiling.status == "not measured"
    assert "INSERT ... unnest not measured (results from before it): the ceiling is binary COPY" in md
    assert "| 100 B, 8 part, batch 1000 | 825,000 | 577,500 | 1,000,000 | 0.55 | 0.39 |" in md
    # The Producer as it was reported then (against the ceiling, no target); no defaults, no client cost.
    assert headline_by_prefix(rows, "same through the Producer API").status == ""
    for absent in ("vs the store call", "nothing set", "client CPU"):
        assert not [r for r in rows if absent in r.what], absent
    assert "Client cost per record" not in md
    assert "The Producer against the store call" not in md
    assert "these results predate the INSERT ... unnest baseline: the ceiling is COPY" in md
    assert "Could not render" not in md
    assert (tmp_path / "out" / "produce_throughput.png").exists()


def test_a_produce_run_of_some_cases_only_still_renders(tmp_path: Path) -> None:
    """``bench.produce --only b1``: no 1000-record case, so no defaults, no targets and a null headline."""
    produce = produce_result()
    produce["cases"] = [c for c in produce["cases"] if c["batch"] == 1]
    produce["headline"] = None
    outcomes, path = report.build(
        write_results(tmp_path / "results", {**full_results(), "produce": produce}), tmp_path / "out"
    )
    md = path.read_text()
    row = headline_by_prefix(report.headlines(outcomes), "idempotent produce, 1000-record batches")
    assert (row.status, row.missing) == ("not measured", "no 1000-record case in the results")
    assert "| 100 B, 1 part, batch 1 | 1,125 | 2,250 | 0.50 | | | |" in md
    assert "| 1 KiB, 8 part, batch 1 | 2.0 / 1.5 / 3.0 / 9.0 | 0.00 / 0.00 / 0.01 / 0.05 | 3.0x |" in md
    assert "Could not render" not in md
    assert (tmp_path / "out" / "produce_throughput.png").exists()


# --- benchmarks that failed, were skipped, or left odd results --------------------------------


def test_failed_skipped_and_missing_benchmarks_are_reported_not_fatal(tmp_path: Path) -> None:
    results = write_results(tmp_path / "results", {"produce": produce_result()})
    (results / "transactions.failed").write_text(
        "exit 1\nTraceback (most recent call last):\n  File 'x.py'\nRuntimeError: the log holds 3 | 4 records\n"
    )
    (results / "spark.skipped").write_text("skipped with --skip spark\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "txn_throughput.png").write_bytes(b"an old plot")  # from an earlier report: must not linger
    outcomes, path = report.build(results, out)
    md = path.read_text()

    assert [o.status for o in outcomes.values()] == [
        "ok",
        "failed",
        "missing",
        "skipped",
        "missing",
        "missing",
        "missing",
        "missing",
        "missing",
        "missing",
    ]
    assert "the transactions benchmark failed (exit 1: RuntimeError: the log holds 3 / 4 records)" in md
    assert "the pipeline benchmark has no results (no pipeline.json in " in md
    assert "the spark benchmark was skipped (skipped with --skip spark)" in md
    assert "| transactions, commit latency, reads (bench/transactions.py) | **failed**: exit 1: " in md
    assert "_Transactional throughput: not measured; the transactions benchmark failed" in md
    assert "_Spark reads: not measured; the spark benchmark was skipped" in md
    # The produce figures are all there; the others' headline rows say why they are not.
    assert "| 0.60, 0.55, 0.75, 0.80 | >= 0.8 (lowest): **not met** |" in md
    rows = report.headlines(outcomes)
    assert [r.status for r in rows if r.missing] == ["not measured"] * 9
    assert "Not measured: transactions of 1000 records" in md
    # Only the plots the results allow; the stale one is gone.
    assert sorted(p.name for p in out.glob("*.png")) == ["latency.png", "produce_throughput.png"]
    assert "](txn_throughput.png)" not in md


def test_no_results_at_all_still_make_a_report(tmp_path: Path) -> None:
    outcomes, path = report.build(tmp_path / "nothing", tmp_path / "out", plots=False)
    md = path.read_text()
    assert {o.status for o in outcomes.values()} == {"missing"}
    assert "- run: unknown date" in md
    assert "Not measured: " in md
    assert not list((tmp_path / "out").glob("*.png"))


def test_unreadable_or_unexpected_results_are_reported_not_fatal(tmp_path: Path) -> None:
    odd = produce_result()
    odd["machine"] = "not an object"
    odd["server"]["settings"] = ["fsync"]
    results = write_results(tmp_path / "results", {"produce": odd})
    (results / "transactions.json").write_text('{"benchmark": "transactions", ')  # cut short
    (results / "spark.json").write_text("[1, 2]")
    broken = pipeline_result()
    del broken["wakeup"]  # e.g. an older benchmark version
    broken["throughput"] = [{"members": 1}]
    (results / "pipeline.json").write_text(json.dumps(broken))
    outcomes, path = report.build(results, tmp_path / "out", plots=False)
    md = path.read_text()
    assert outcomes["transactions"].status == "unreadable"
    assert "the transactions benchmark left unreadable results (transactions.json: " in md
    assert "the spark benchmark left unreadable results (spark.json: not a JSON object)" in md
    assert outcomes["pipeline"].status == "ok"
    assert "unexpected pipeline.json (KeyError: " in md
    assert "_Could not render pipeline latency from the results (KeyError: 'wakeup')._" in md
    assert "_Could not render pipeline rates from the results (KeyError: " in md


def test_quick_results_are_flagged(tmp_path: Path) -> None:
    results = full_results()
    for result in results.values():
        result["quick"] = True
    _, path = report.build(write_results(tmp_path / "results", results), tmp_path / "out", plots=False)
    md = path.read_text()
    assert "**--quick run**" in md
    assert "| ok, --quick |" in md


def test_results_from_different_runs_are_flagged(tmp_path: Path) -> None:
    results = full_results()
    results["spark"]["oncelog"] = {"migration_head": "0007", "git": "fff0000"}
    _, path = report.build(write_results(tmp_path / "results", results), tmp_path / "out", plots=False)
    md = path.read_text()
    assert (
        "The results differ in commit (produce: abc1234; transactions: abc1234; pipeline: abc1234; spark: fff0000; "
        "groups: abc1234; outbox: abc1234; broker: abc1234; replication: abc1234; storage: abc1234; compaction: "
        "abc1234)" in md
    )


# --- the README block -------------------------------------------------------------------------

README = f"""# project

Intro.

## Measured (old)
{START_MARKER}
| what | old |
|---|---|
| x | 1 |
{END_MARKER}

## Layout

The rest.
"""


def test_replacing_the_block_keeps_everything_else_byte_for_byte() -> None:
    new = report.replace_block(README, "## Measured (new)\n\n| a | b |\n")
    before, after = README.split(START_MARKER, maxsplit=1)[0], README.split(END_MARKER, maxsplit=1)[1]
    assert new == f"{before}{START_MARKER}\n## Measured (new)\n\n| a | b |\n{END_MARKER}{after}"
    assert report.replace_block(new, "## Measured (new)\n\n| a | b |\n") == new  # idempotent
    assert report.replace_block(new, "\n\n## Measured (new)\n\n| a | b |") == new  # surrounding blank lines
    # And back: the block is all that changes.
    old_block = README.split(START_MARKER, maxsplit=1)[1].split(END_MARKER, maxsplit=1)[0]
    assert report.replace_block(new, old_block) == README


@pytest.mark.parametrize(
    "text",
    [
        "no markers at all\n",
        f"{START_MARKER}\nonly the start\n",
        f"only the end\n{END_MARKER}\n",
        f"{END_MARKER}\nreversed\n{START_MARKER}\n",
        f"{START_MARKER}\n{START_MARKER}\ntwice\n{END_MARKER}\n",
        f"{START_MARKER}\ntwice\n{END_MARKER}\n{END_MARKER}\n",
    ],
)
def test_a_readme_without_exactly_one_pair_of_markers_is_refused(text: str) -> None:
    with pytest.raises(MarkerError):
        report.replace_block(text, "block")


def test_the_repository_readme_has_the_markers() -> None:
    text = (ROOT / "README.md").read_text()
    assert text.count(START_MARKER) == 1 and text.count(END_MARKER) == 1
    block = text.split(START_MARKER)[1].split(END_MARKER)[0]
    assert report.replace_block(text, block) == text


def test_update_readme_writes_the_headline_once(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README)
    results = write_results(tmp_path / "results", full_results())
    assert render_with_readme(results, tmp_path / "docs" / "bench", readme) == 0
    text = readme.read_text()
    assert text.startswith(
        "# project\n\nIntro.\n\n## Measured (old)\n" + START_MARKER + "\n## Measured (2 CPUs (AMD EPYC), "
    )
    assert text.endswith(f"{END_MARKER}\n\n## Layout\n\nThe rest.\n")
    block = text.split(START_MARKER)[1].split(END_MARKER)[0]
    assert "PostgreSQL 15.18, fsync=on, synchronous_commit=on; 2026-11-21, commit abc1234)" in block
    assert "| 0.81 / 0.85 | >= 0.9 (lowest): **not met** |" in block
    assert "[docs/bench/report.md](docs/bench/report.md)" in block
    # The new ceiling, the faster named, and the #16 targets reach the README too.
    assert "the faster: unnest, unnest, COPY, COPY" in block
    assert "the raw write ceiling is the faster, in each run, of binary COPY and INSERT ... SELECT FROM unnest" in block
    assert "| 0.90, 0.70, 0.85, 0.95 | >= 0.8 (lowest): **not met** |" in block
    assert "| 0.6x / 0.8x | <= 2x: **met** |" in block
    assert "| 0.55 | >= 0.5: **met** |" in block  # the Spark write-back
    assert "| x | 1 |" not in block
    # A second run over the same results changes nothing.
    assert not report.update_readme(readme, block)
    assert render_with_readme(results, tmp_path / "docs" / "bench", readme) == 0
    assert readme.read_text() == text


def test_quick_results_never_reach_the_readme(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README)
    results = full_results()
    results["produce"]["quick"] = True
    folder = write_results(tmp_path / "results", results)
    assert render_with_readme(folder, tmp_path / "out", readme) == 0
    assert readme.read_text() == README
    assert (tmp_path / "out" / "report.md").exists()


def test_an_incomplete_run_never_reaches_the_readme(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README)
    results = full_results()
    del results["spark"]
    folder = write_results(tmp_path / "results", results)
    (folder / "spark.skipped").write_text("skipped with --skip spark\n")
    assert render_with_readme(folder, tmp_path / "out", readme) == 0
    assert readme.read_text() == README
    assert "the spark benchmark was skipped" in (tmp_path / "out" / "report.md").read_text()


def test_a_readme_without_markers_is_an_error_not_an_edit(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    folder = write_results(tmp_path / "results", full_results())
    assert render_with_readme(folder, tmp_path / "out", readme) == 1
    assert readme.read_text() == "# no markers\n"


def test_the_groups_benchmark_is_a_section_and_headline_rows(full_report: tuple[Path, str]) -> None:
    _, md = full_report
    assert "## Consumer groups through a rebalance" in md
    assert "| 8 | 180 | 4,000 | 3,000 | 0.75 | 210 | 200 | 8 | 40.0 / 90.0 |" in md
    assert "consumer group of 8 + 1 joining: records/s from the join until stable, against before" in md


def test_the_outbox_benchmark_is_a_section_and_headline_rows(full_report: tuple[Path, str]) -> None:
    _, md = full_report
    assert "## Records in the application's own transaction" in md
    assert "| 8 | 6,400 | 8,000 | 0.80 | 7,600 | 0.84 |" in md
    assert "outbox (a business row + oncelog.send), 8 thread(s), against the business row alone" in md


def test_the_replication_benchmark_is_a_section_and_headline_rows(full_report: tuple[Path, str]) -> None:
    _, md = full_report
    rows = report_rows(full_report)
    produce = headline_by_prefix(rows, "synchronous replication (ANY 1 of 2 standbys): idempotent produce")
    assert figures(produce) == ("30.0k rec/s", "40.0k rec/s", "0.75")
    commit = headline_by_prefix(rows, "synchronous replication: commit of a 10-record transaction")
    assert figures(commit) == ("3.00 ms", "1.50 ms", "2.0x")
    assert "## Synchronous replication" in md
    assert "| commit_transaction, 10 records on 4 partitions | 3.00 | 9.00 | 1.50 | 4.50 | 2.00 | 2.00 |" in md


def test_the_storage_benchmark_is_a_section_and_headline_rows(full_report: tuple[Path, str]) -> None:
    _, md = full_report
    rows = report_rows(full_report)
    retention = headline_by_prefix(rows, "retention of 100B records")
    assert figures(retention) == ("800k records/s", "2.00M records/s", "0.45")
    assert "## Storage and retention" in md
    assert "| 100B | 1,000,000 | 305 | 31 | 0 | 336 | 22.0 GiB |" in md
    assert "| 1KiB | 500,000 | 800,000 | 2,000,000 | 0.45 | 73 | 4.00 ms | 0.04 h | 0.02 h |" in md
    assert "| fetch 10 anywhere | 0.150 | 0.900 | 6.00 |" in md
    assert "create partition of: AccessExclusiveLock; attach: ShareUpdateExclusiveLock." in md


def test_the_compaction_benchmark_is_a_section_and_headline_rows(full_report: tuple[Path, str]) -> None:
    _, md = full_report
    rows = report_rows(full_report)
    assert figures(headline_by_prefix(rows, "compaction of a keyed topic")) == (
        "300k records examined/s",
        "600k rows deleted/s",
        "0.50",
    )
    assert figures(headline_by_prefix(rows, "idempotent produce into partitions being compacted")) == (
        "90.0k rec/s",
        "100k rec/s",
        "0.90",
    )
    assert "## Compaction" in md
    assert "| 400,000 | 300,000 | 290,000 | 600,000 | 0.50 |" in md
    assert "| 400,000 | 100,000 | 90,000 | 0.90 | 95,000 | 0.95 | 120, 130 |" in md


def test_the_broker_benchmark_is_a_section_and_headline_rows(full_report: tuple[Path, str]) -> None:
    _, md = full_report
    assert "## Kafka's own clients through oncelog broker" in md
    # Writes (store call, idempotent, oncelog Producer, transactional, oncelog's transactional Producer), then reads.
    assert "| 100B | 1,000 | 100,000 | 75,000 | 0.75 | 90,000 | 0.90 | 60,000 | 0.60 | 120,000 | 0.50 |" in md
    assert "| 100B | 1,000 | 100,000 | 50,000 | 0.50 |" in md
    assert "confluent-kafka producer through oncelog broker, transactional, 1000-record transactions" in md
    assert "against oncelog's transactional Producer, 1000-record transactions: 100B, 1KiB" in md
    assert "the broker's transactional producer against the store call (0.60, target >= 0.7)" in md


def test_broker_results_from_before_the_transactional_baseline_still_render() -> None:
    result = broker_result()
    for case in result["cases"]:
        del case["producer_transactional_per_s"], case["ratio_transactional_to_producer_transactional"]
    lines = report.broker_section(result)
    assert "| 100B | 1,000 | 100,000 | 75,000 | 0.75 | 90,000 | 0.90 | 60,000 | 0.60 | - | - |" in lines
    assert not any("oncelog's transactional Producer" in h.what for h in report.broker_headlines(result))
