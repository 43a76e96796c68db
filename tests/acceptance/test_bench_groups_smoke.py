"""The consumer-group benchmark runs end to end (``--quick``) and reports every case.

A smoke test only: it checks the output's shape and that the numbers are there and positive, never
how fast anything is (performance is measured with ``bench/run``, not asserted here).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.bench import run_quick


def test_the_groups_benchmark_runs_and_reports_every_case(server_url: str, tmp_path: Path) -> None:
    result, stdout = run_quick("bench.groups", server_url, tmp_path)
    assert "| members before | join to stable (ms) |" in stdout
    assert [c["members"] for c in result["cases"]] == [1, 2]
    for case in result["cases"]:
        m = case["median"]
        assert m["join_to_stable_ms"] > 0 and m["steady_records_per_s"] > 0
        assert m["stop_the_world_ms"] > 0 and m["handovers"] >= 1
