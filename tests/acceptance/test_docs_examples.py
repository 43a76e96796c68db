"""Every Python example of the README and the guides runs as written, in order, page by page,
against a fresh database named by ONCELOG_DATABASE_URL (as the guides tell the reader to set it).

A page's blocks share one namespace, as they share a reader: a fragment (a line that uses the
``url`` of the block before it) and a ``>>>`` session run after the blocks above them; ``>>>``
sessions are checked as doctests. The README's block names its server inline: the URL is swapped
for the test database's. Whatever a page leaves open (producers, consumers) is closed at the end.
"""

from __future__ import annotations

import contextlib
import doctest
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.broker import broker_command
from tests.support.docs import as_program

PAGES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("guide-*.md"))]
#: Pages whose examples start Spark (they need a JVM: the spark marker).
SPARK_PAGES = {"docs/guide-spark.md"}
#: Pages whose examples connect to `oncelog broker`, at the address they name: it is started over
#: the test database (as the page tells the reader to) and the address swapped for its own.
BROKER_PAGES = {"docs/guide-broker.md": "127.0.0.1:9092"}


def _blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / page).read_text(encoding="utf-8"), re.S)


def _cases() -> Iterator[object]:
    for page in PAGES:
        marks = [pytest.mark.spark, pytest.mark.timeout(900)] if page in SPARK_PAGES else [pytest.mark.timeout(300)]
        yield pytest.param(page, marks=marks, id=page)


def test_every_page_has_examples_to_run() -> None:
    counts = {page: len(_blocks(page)) for page in PAGES}
    assert all(counts.values()), counts
    assert sum(counts.values()) >= 20, counts  # the README's and the guides' examples, all found


@pytest.mark.parametrize("page", list(_cases()))
def test_the_examples_of_a_page_run_as_written(page: str, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONCELOG_DATABASE_URL", db_url)
    namespace: dict[str, object] = {"__name__": f"docs_example_{Path(page).stem.replace('-', '_')}"}
    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(broker_command(db_url))[1] if page in BROKER_PAGES else None
        _run_page(page, namespace, broker)


def _run_page(page: str, namespace: dict[str, object], broker: str | None) -> None:
    try:
        for n, block in enumerate(_blocks(page), start=1):
            name = f"{page} (example {n})"
            code = block if broker is None else block.replace(BROKER_PAGES[page], broker)
            if page == "README.md":  # its one block names a server inline
                code = re.sub(r'^url = "[^"]*"', "url = __import__('os').environ['ONCELOG_DATABASE_URL']", block,
                              count=1, flags=re.M)  # fmt: skip
            if code.lstrip().startswith(">>>"):
                test = doctest.DocTestParser().get_doctest(code, namespace, name, page, 0)
                runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
                runner.run(test, clear_globs=False)
                assert runner.failures == 0, f"{name}: {runner.failures} doctest example(s) failed"
                namespace.update(test.globs)
            else:
                exec(as_program(code, name), namespace)
    finally:
        for value in list(namespace.values()):
            close = getattr(value, "close", None)
            if callable(close) and type(value).__module__.startswith("oncelog"):
                close()
