"""Running a benchmark's ``--quick`` mode from a smoke test, as ``bench/run`` runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import REPO


def run_quick(module: str, server_url: str, tmp_path: Path) -> tuple[dict[str, Any], str]:
    """``python -m <module> --quick --json ...`` against ``server_url``: its JSON result and its
    markdown (AssertionError with its output if it fails)."""
    out = tmp_path / f"{module.rsplit('.', 1)[-1]}.json"
    env = {**os.environ, "ONCELOG_DATABASE_URL": server_url}
    proc = subprocess.run(
        [sys.executable, "-m", module, "--quick", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout
