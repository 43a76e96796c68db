"""The outbox benchmark runs end to end (``--quick``) and reports every case.

A smoke test only: it checks the output's shape and that the numbers are there and positive, never
how fast anything is (performance is measured with ``bench/run``, not asserted here).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.bench import run_quick


def test_the_outbox_benchmark_runs_and_reports_every_case(server_url: str, tmp_path: Path) -> None:
    result, stdout = run_quick("bench.outbox", server_url, tmp_path)
    assert "| threads | oncelog.send txn/s |" in stdout
    assert [c["threads"] for c in result["cases"]] == [1, 8]
    for case in result["cases"]:
        assert case["send_per_s"] > 0 and case["business_only_per_s"] > 0 and case["raw_outbox_per_s"] > 0
