"""The README's API example runs as written (against a fresh database in place of its URL)."""

from __future__ import annotations

import re

from tests.support.docs import as_program, python_example


def test_the_readme_api_example_runs(db_url: str) -> None:
    code = python_example("README.md", "## The API")
    assert 'url = "postgresql://' in code
    code = re.sub(r'^url = "[^"]*"', "url = DB_URL", code, count=1, flags=re.M)
    namespace: dict[str, object] = {"DB_URL": db_url}
    exec(as_program(code, "README.md (The API)"), namespace)
    records = namespace["records"]
    assert isinstance(records, list) and len(records) == 1
    for name in ("admin", "consumer"):
        namespace[name].close()  # type: ignore[attr-defined]
