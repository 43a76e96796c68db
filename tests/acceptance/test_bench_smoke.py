"""The produce benchmark runs end to end (``--quick``) and reports every case.

A smoke test only: it checks the output's shape and that every number is positive, never how
fast anything is (performance is measured with ``bench/run``, not asserted here).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from oncelog.store import cluster
from tests.support import REPO

ROOT = REPO

VALUE_SIZES = (100, 1024)
PARTITIONS = (1, 8)
BATCHES = (1, 100, 1000)
KINDS = ("raw_copy", "raw_unnest", "store", "producer")
LATENCY_KINDS = ("raw", "raw_copy", "store", "producer")


@pytest.fixture(scope="module")
def quick_run(server_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, object]]:
    out = tmp_path_factory.mktemp("bench") / "produce.json"
    env = {**os.environ, "ONCELOG_DATABASE_URL": server_url}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.produce", "--quick", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(out.read_text())


def test_markdown_has_both_tables_and_the_headline(quick_run: tuple[str, dict[str, object]]) -> None:
    stdout, _ = quick_run
    assert (
        "| case | records | records/s | MB/s | client CPU us/record | GC-tracked allocations/record "
        "| ratio (to the raw ceiling) |" in stdout
    )
    assert "| path | samples | p50 ms | p99 ms | max ms | mean ms |" in stdout
    assert "Targets at 1000-record batches (the lowest of the 4 cases):" in stdout
    for line in ("- machine: ", "- Python ", "- server: ONCELOG_DATABASE_URL", "- PostgreSQL "):
        assert line in stdout
    # 12 configurations, each with a row for both raw writes, the store call and the Producer; the 4 with
    # 1000-record batches also one for Producer(url) with nothing set.
    for path, count in (
        ("binary COPY", 12),
        ("INSERT ... unnest", 12),
        ("store.log.produce", 12),
        ("Producer", 12),
        ("Producer(url), defaults", 4),
    ):
        rows = re.findall(rf"^\| {re.escape(path)}, .+, batch \d+ \|", stdout, flags=re.MULTILINE)
        assert len(rows) == count, (path, rows)
    # Every #16 target, each with its verdict.
    for what in (
        "store call / raw ceiling",
        "Producer (tuned) / store call",
        "Producer(url) defaults / tuned Producer",
        "Producer single-record p50 / raw single-row write p50",
    ):
        assert re.search(rf"^- {re.escape(what)}.*: \d+\.\d\d \(target [<>]= [\d.]+: (met|not met)\)", stdout, re.M), (
            what
        )


def test_json_has_every_case_with_positive_numbers(quick_run: tuple[str, dict[str, object]]) -> None:
    _, result = quick_run
    cases = result["cases"]
    assert isinstance(cases, list)
    by_key = {c["key"]: c for c in cases}
    expected = {f"{v}B/{p}p/b{b}" for v in VALUE_SIZES for p in PARTITIONS for b in BATCHES}
    assert set(by_key) == expected
    for key, case in by_key.items():
        assert case["records"] > 0, key
        kinds = (*KINDS, "producer_defaults") if case["batch"] == 1000 else KINDS
        assert ("producer_defaults" in case) == (case["batch"] == 1000), key
        for kind in kinds:
            m = case[kind]
            assert m["records"] == case["records"], (key, kind)
            assert m["seconds"] > 0, (key, kind)
            assert m["records_per_s"] > 0, (key, kind)
            assert m["mb_per_s"] > 0, (key, kind)
            # Every kind's ratio is to the raw ceiling of its run: the faster raw write reaches 1.
            assert case[f"ratio_{kind}"] > 0, (key, kind)
            # The client cost of every kind (allocations may round to 0 at --quick's counts).
            assert m["client_cpu_us_per_record"] > 0, (key, kind)
            assert m["gc_allocations_per_record"] >= 0, (key, kind)
            assert len(m["gc_collections"]) == 3, (key, kind)
        assert case["ratio_producer_store"] > 0, key
        if case["batch"] == 1000:
            assert case["ratio_defaults_tuned"] > 0, key
            assert case["ratio_defaults_store"] > 0, key
        ceiling = case["ceiling"]
        assert ceiling["faster"] in ("raw_copy", "raw_unnest"), key
        assert ceiling["records_per_s"] == max(case["raw_copy"]["records_per_s"], case["raw_unnest"]["records_per_s"])
        assert max(case["ratio_raw_copy"], case["ratio_raw_unnest"]) == 1.0, key
        assert ceiling["ratio_unnest_copy"] > 0, key
        # The Producer really sent batches of the configured size (the last one may be short).
        assert case["producer"]["records_per_batch_avg"] <= case["batch"], key

    latency = result["latency"]
    assert isinstance(latency, dict)
    assert set(latency) == set(LATENCY_KINDS)
    for kind, stats in latency.items():
        assert stats["samples"] > 0, kind
        for name in ("p50_ms", "p99_ms", "max_ms", "mean_ms"):
            assert stats[name] > 0, (kind, name)
        assert stats["p50_ms"] <= stats["p99_ms"] <= stats["max_ms"], kind

    machine, server = result["machine"], result["server"]
    assert isinstance(machine, dict)
    assert isinstance(server, dict)
    assert machine["nproc"] > 0
    assert machine["memory_gib"] > 0
    assert machine["python"]
    assert server["version"]
    assert server["settings"]["fsync"] in ("on", "off")
    headline = result["headline"]
    assert isinstance(headline, dict)
    assert headline["ratio_store_min"] > 0
    assert headline["ratio_producer_min"] > 0
    targets = headline["targets"]
    assert set(targets) == {"store_vs_ceiling", "producer_vs_store", "defaults_vs_tuned", "latency_p50"}
    for name, t in targets.items():
        assert t["value"] > 0, name
        assert t["met"] == (t["value"] <= t["target"] if t["op"] == "<=" else t["value"] >= t["target"]), name
    assert (targets["latency_p50"]["op"], targets["latency_p50"]["target"]) == ("<=", 2.0)
    assert len(targets["producer_vs_store"]["cases"]) == 4
    threshold = result["gc_threshold"]
    assert isinstance(threshold, list)
    assert threshold[0] > 0


def test_the_bench_database_is_dropped(server_url: str, quick_run: tuple[str, dict[str, object]]) -> None:
    _, result = quick_run
    name = result["database"]
    assert isinstance(name, str)
    assert name.startswith("oncelog_bench_")
    assert not cluster.database_exists(server_url, name)
