"""The outbox benchmark runs end to end (``--quick``) and reports every case.

A smoke test only: it checks the output's shape and that the numbers are there and positive, never
how fast anything is (performance is measured with ``bench/run``, not asserted here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import REPO


def test_the_outbox_benchmark_runs_and_reports_every_case(server_url: str, tmp_path: Path) -> None:
    out = tmp_path / "outbox.json"
    env = {**os.environ, "ONCELOG_DATABASE_URL": server_url}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.outbox", "--quick", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert "| threads | oncelog.send txn/s |" in proc.stdout
    assert [c["threads"] for c in result["cases"]] == [1, 8]
    for case in result["cases"]:
        assert case["send_per_s"] > 0 and case["business_only_per_s"] > 0 and case["raw_outbox_per_s"] > 0
