"""docs/sql-reference.md documents exactly what migration head installs, and its generated pieces
are current: scripts/sql_reference.py --update, run on a copy against a fresh database at head,
finds nothing missing or gone and changes nothing. (Run the script on the page after a migration.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import REPO


def test_the_sql_reference_is_complete_and_current(db_url: str, tmp_path: Path) -> None:
    page = REPO / "docs" / "sql-reference.md"
    copy = tmp_path / "sql-reference.md"
    shutil.copy(page, copy)
    proc = subprocess.run(
        [sys.executable, "scripts/sql_reference.py", "--update", str(copy)],
        cwd=REPO,
        env={**os.environ, "ONCELOG_DATABASE_URL": db_url},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert copy.read_text(encoding="utf-8") == page.read_text(encoding="utf-8"), (
        "docs/sql-reference.md is stale: run scripts/sql_reference.py --update docs/sql-reference.md"
    )
