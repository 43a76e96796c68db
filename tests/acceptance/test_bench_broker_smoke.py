"""The broker benchmark runs end to end (``--quick``) and reports every kind.

A smoke test only: it checks the output's shape and that the numbers are there and positive, never
how fast anything is (performance is measured with ``bench/run``, not asserted here).
"""

from __future__ import annotations

from pathlib import Path

from bench.broker import KINDS
from tests.support.bench import run_quick


def test_the_broker_benchmark_runs_and_reports_every_kind(server_url: str, tmp_path: Path) -> None:
    result, stdout = run_quick("bench.broker", server_url, tmp_path)
    assert "| value | records | store call | broker, idempotent |" in stdout
    assert [c["value_bytes"] for c in result["cases"]] == [100, 1024]
    for case in result["cases"]:
        assert all(case[f"{kind}_per_s"] > 0 for kind in KINDS), case
