"""The compaction benchmark runs end to end (``--quick``) and reports every figure.

A smoke test only: the output's shape, and that compaction really removed the superseded records
(as many as the raw DELETE of the same rows), never how fast anything is.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.bench import run_quick


def test_the_compaction_benchmark_runs_and_reports(server_url: str, tmp_path: Path) -> None:
    result, stdout = run_quick("bench.compaction", server_url, tmp_path)
    assert "| records | compaction: examined/s |" in stdout
    rate = result["throughput"]
    assert rate["median"]["removed"] == rate["median"]["raw_deleted"] > 0
    assert rate["examined_per_s"] > 0 and rate["ratio_to_raw_delete"] > 0
    beside = result["produce"]
    assert beside["alone_per_s"] > 0 and beside["beside_per_s"] > 0 and beside["elsewhere_per_s"] > 0
    # The passes meanwhile are reported (their number may be 0 at --quick sizes: the writers can
    # finish first), and the ratios are the rates' own.
    assert {"beside_passes", "elsewhere_passes"} <= set(beside["median"])
    assert beside["ratio"] == round(beside["median"]["ratio"], 3)
