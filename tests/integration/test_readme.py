"""The README's API example runs as written (against a fresh database in place of its URL)."""

from __future__ import annotations

import re

from tests.support import REPO


def api_example() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## The API") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "the README's API section has no python block"
    return found.group(1)


def test_the_readme_api_example_runs(db_url: str) -> None:
    code = api_example()
    assert 'url = "postgresql://' in code
    code = re.sub(r'^url = "[^"]*"', "url = DB_URL", code, count=1, flags=re.M)
    namespace: dict[str, object] = {"DB_URL": db_url}
    exec(compile(code, "README.md (The API)", "exec"), namespace)
    records = namespace["records"]
    assert isinstance(records, list) and len(records) == 1
    for name in ("admin", "consumer"):
        namespace[name].close()  # type: ignore[attr-defined]
