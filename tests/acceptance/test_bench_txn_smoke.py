"""The transactions and pipeline benchmarks run end to end (``--quick``) and report every case.

Smoke tests only: they check the output's shape and that every number is positive, never how fast
anything is (performance is measured with ``bench/transactions.py`` and ``bench/pipeline.py``, not
asserted here).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oncelog.store import cluster
from tests.support import REPO

ROOT = REPO

TXN_SIZES = (1, 10, 100, 1000)
TXN_PARTITIONS = (1, 4)
LATENCY_CASES = ("empty", "ten_1p", "ten_4p", "ten_flushed", "raw_one", "raw_one_copy", "raw_ten", "raw_ten_copy")
READERS = ("raw", "raw_text", "fetch_v3", "fetch_rc", "fetch_ru", "consumer_rc", "consumer_ru")
WAKERS = ("200", "200-polling", "5-polling")
NOTIFY_MODES = ("plain", "notify", "notify_listened")


def _quick(module: str, server_url: str, out: Path) -> tuple[str, dict[str, Any]]:
    env = {**os.environ, "ONCELOG_DATABASE_URL": server_url}
    proc = subprocess.run(
        [sys.executable, "-m", module, "--quick", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(out.read_text())


@pytest.fixture(scope="module")
def txn_run(server_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    return _quick("bench.transactions", server_url, tmp_path_factory.mktemp("bench") / "transactions.json")


@pytest.fixture(scope="module")
def pipeline_run(server_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    return _quick("bench.pipeline", server_url, tmp_path_factory.mktemp("bench") / "pipeline.json")


def _check_stats(stats: dict[str, Any], name: str, *, may_be_negative: bool = False) -> None:
    """Latency percentiles: present, ordered, positive (a wake-up may beat the commit's reply: min < 0)."""
    assert stats["samples"] > 0, name
    for key in ("p50_ms", "p99_ms", "max_ms", "mean_ms"):
        assert isinstance(stats[key], float | int), (name, key)
        if not may_be_negative:
            assert stats[key] > 0, (name, key)
    assert stats["p50_ms"] <= stats["p99_ms"] <= stats["max_ms"], name


def _check_common(result: dict[str, Any], stdout: str) -> None:
    for line in ("- machine: ", "- Python ", "- server: ONCELOG_DATABASE_URL", "- PostgreSQL "):
        assert line in stdout
    machine, server = result["machine"], result["server"]
    assert machine["nproc"] > 0
    assert machine["memory_gib"] > 0
    assert server["version"]
    assert server["settings"]["fsync"] in ("on", "off")
    assert result["seconds"] > 0


# --- bench.transactions -----------------------------------------------------------------------


def test_transactions_markdown_has_every_table(txn_run: tuple[str, dict[str, Any]]) -> None:
    stdout, result = txn_run
    _check_common(result, stdout)
    assert "| case | records | transactions | txn/s | records/s | produce calls per txn |" in stdout
    assert "| what is timed | samples | p50 ms | p99 ms | max ms | mean ms |" in stdout
    assert "| reader | records | records/s | ratio (reader / raw binary) |" in stdout
    rows = re.findall(r"^\| \d partition\(s\), \d+ records per transaction \|", stdout, flags=re.MULTILINE)
    assert len(rows) == len(TXN_SIZES) * len(TXN_PARTITIONS), rows
    assert "transactions of 1000 records: ratio " in stdout
    assert "(target >= 0.9)" in stdout
    assert "(target >= 0.7)" in stdout
    # The #16 targets, each with its verdict.
    for what in (
        "transactions of 100 records on 4 partitions / idempotent producer",
        "commit_transaction p50, 10 records on 4 partitions / raw 10-row write p50",
        "Consumer.poll read_committed / raw binary SELECT",
    ):
        assert re.search(rf"^- {re.escape(what)}.*: \d+\.\d\d \(target [<>]= [\d.]+: (met|not met)\)$", stdout, re.M), (
            what
        )


def test_transactions_json_has_positive_numbers(txn_run: tuple[str, dict[str, Any]]) -> None:
    _, result = txn_run
    cases = {c["key"]: c for c in result["throughput"]}
    assert set(cases) == {f"{p}p/txn{s}" for p in TXN_PARTITIONS for s in TXN_SIZES}
    for key, case in cases.items():
        txn, idem, flushed = case["transactional"], case["idempotent"], case["idempotent_flushed"]
        assert txn["records"] > 0, key
        assert txn["records"] == txn["transactions"] * case["txn_size"], key
        for m in (txn, idem, flushed):
            assert m["seconds"] > 0, key
            assert m["records_per_s"] > 0, key
        assert txn["transactions_per_s"] > 0, key
        assert txn["produce_calls_per_txn"] >= 1, key
        assert txn["commit_ms_avg"] > 0, key
        assert case["ratio"] > 0, key
        assert case["ratio_flushed"] > 0, key

    assert set(result["commit_latency"]) == set(LATENCY_CASES)
    for name, stats in result["commit_latency"].items():
        _check_stats(stats, name)

    reads = result["reads"]
    assert reads["records"] > 0
    assert set(reads["readers"]) == set(READERS)
    for name, r in reads["readers"].items():
        assert "error" not in r, (name, r.get("error"))  # a reader that stopped advancing
        assert 0 < r["records"] <= reads["records"], name  # readers are time-boxed: a part may be enough
        assert r["records_per_s"] > 0, name
        assert r["ratio"] > 0, name

    headline = result["headline"]
    assert headline["txn1000_ratio_min"] > 0
    targets = headline["targets"]
    assert set(targets) == {"txn100_4p", "commit_ten_4p", "consumer_rc"}
    assert targets["txn100_4p"]["value"] == cases["4p/txn100"]["ratio"]
    assert (targets["commit_ten_4p"]["op"], targets["commit_ten_4p"]["target"]) == ("<=", 2.0)
    assert targets["consumer_rc"]["value"] == reads["readers"]["consumer_rc"]["ratio"]
    for name, t in targets.items():
        assert t["met"] == (t["value"] <= t["target"] if t["op"] == "<=" else t["value"] >= t["target"]), name
    assert headline["read_committed_fetch_many_ratio"] > 0
    assert headline["read_committed_consumer_ratio"] > 0


def test_transactions_database_is_dropped(server_url: str, txn_run: tuple[str, dict[str, Any]]) -> None:
    _, result = txn_run
    assert result["database"].startswith("oncelog_bench_")
    assert not cluster.database_exists(server_url, result["database"])


# --- bench.pipeline ---------------------------------------------------------------------------


def test_pipeline_markdown_has_every_table(pipeline_run: tuple[str, dict[str, Any]]) -> None:
    stdout, result = pipeline_run
    _check_common(result, stdout)
    assert "| members | input records | seconds | records/s | transactions (aborted) |" in stdout
    assert "| members | rate records/s | samples | p50 ms | p99 ms | max ms | mean ms |" in stdout
    assert "| waiting reader | samples | p50 ms | p99 ms | max ms | min ms |" in stdout
    assert "| threads | statement | commits/s | ratio (to INSERT alone) |" in stdout
    assert "| Consumer, defaults (listens; polls 5..200 ms) |" in stdout
    assert "| on (producers wake, the consumer listens) |" in stdout
    assert "| raw LISTEN/NOTIFY" in stdout
    assert "wake-up with the default backoff: p50 " in stdout


def test_pipeline_json_has_positive_numbers(pipeline_run: tuple[str, dict[str, Any]]) -> None:
    _, result = pipeline_run
    throughput = result["throughput"]
    assert [c["members"] for c in throughput] == [1, 4]
    for case in throughput:
        assert "error" not in case, case.get("error")  # the pipeline stalled
        assert case["records"] > 0
        assert case["seconds"] > 0
        assert case["records_per_s"] > 0
        assert case["transactions"] > 0
        # Exactly once: the members together copied every input record once (checked by the
        # benchmark against the output too).
        assert sum(case["copied_per_member"]) == case["records"]
        assert len(case["copied_per_member"]) == case["members"]

    assert [r["members"] for r in result["latency"]] == [1, 4]
    for r in result["latency"]:
        assert "error" not in r, r.get("error")
        _check_stats(r, f"latency {r['members']}")

    wake = result["wakeup"]
    assert set(wake["waiters"]) == set(WAKERS)
    for name, stats in wake["waiters"].items():
        _check_stats(stats, f"wake {name}", may_be_negative=True)
        assert stats["max_ms"] > 0, name
    _check_stats(wake["notify"], "notify", may_be_negative=True)
    cost = wake["cost"]
    assert cost["commits_per_s_on"] > 0 and cost["commits_per_s_off"] > 0 and cost["ratio"] > 0, cost

    notify = result["notify_throughput"]
    assert {(c["threads"], c["mode"]) for c in notify} == {(t, m) for t in (1, 8) for m in NOTIFY_MODES}
    for c in notify:
        assert c["commits_per_s"] > 0, c
        assert c["ratio"] > 0, c


def test_pipeline_database_is_dropped(server_url: str, pipeline_run: tuple[str, dict[str, Any]]) -> None:
    _, result = pipeline_run
    assert result["database"].startswith("oncelog_bench_")
    assert not cluster.database_exists(server_url, result["database"])
