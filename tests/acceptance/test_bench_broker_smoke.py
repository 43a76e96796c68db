"""The broker benchmark runs end to end (``--quick``) and reports every kind.

A smoke test only: it checks the output's shape and that the numbers are there and positive, never
how fast anything is (performance is measured with ``bench/run``, not asserted here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.broker import KINDS
from tests.support import REPO


def test_the_broker_benchmark_runs_and_reports_every_kind(server_url: str, tmp_path: Path) -> None:
    out = tmp_path / "broker.json"
    env = {**os.environ, "ONCELOG_DATABASE_URL": server_url}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.broker", "--quick", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert "| value | records | store call | broker, idempotent |" in proc.stdout
    assert [c["value_bytes"] for c in result["cases"]] == [100, 1024]
    for case in result["cases"]:
        assert all(case[f"{kind}_per_s"] > 0 for kind in KINDS), case
