"""The code examples of the project's Markdown, for tests that run them as written."""

from __future__ import annotations

import re
from types import CodeType

from tests.support import REPO


def python_example(page: str, heading: str) -> str:
    """The first ```python block after ``heading`` in ``page`` (a path from the repository root)."""
    text = (REPO / page).read_text(encoding="utf-8")
    found = re.search(r"```python\n(.*?)```", text[text.index(heading) :], re.S)
    assert found is not None, f"{page}: no python block after {heading!r}"
    return found.group(1)


def as_program(code: str, name: str) -> CodeType:
    """``code`` compiled as a program of its own: without the calling module's ``from __future__``
    imports (string annotations would break an ORM example's mapped classes)."""
    return compile(code, name, "exec", dont_inherit=True)
