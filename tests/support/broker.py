"""Brokers for the tests: in this process on a thread of its own (:func:`running_broker`), or
``oncelog broker`` run as a user runs it, a child process (:func:`broker_command`)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator

from oncelog.broker import serve_in_thread

#: A Broker over a URL on a free port, on a thread of its own (the product's helper).
running_broker = serve_in_thread


@contextlib.contextmanager
def broker_command(
    db_url: str, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Start ``oncelog broker --listen 127.0.0.1:0 ARGS...`` over ``db_url`` (with ``env`` added to
    the environment); yield the process and the address it listens on (read from its first line
    on stderr). Killed afterwards if still running."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "oncelog", "broker", "--listen", "127.0.0.1:0", *args],
        env={**os.environ, "ONCELOG_DATABASE_URL": db_url, **(env or {})},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"connect to (\S+:\d+)", line)
        if match is None:
            raise AssertionError(f"oncelog broker did not start: {line!r}")
        yield proc, match.group(1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()
