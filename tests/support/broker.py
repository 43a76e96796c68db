"""Brokers for the tests: in this process on a thread of its own (:func:`running_broker`), or
``oncelog broker`` run as a user runs it, a child process (:func:`broker_command`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

from oncelog.broker import Broker, Listener
from oncelog.store import create_engine


@contextlib.contextmanager
def running_broker(url: str, **options: Any) -> Iterator[str]:
    """A :class:`Broker` over ``url`` on a free port, serving from a thread's event loop; yields its
    bootstrap address. ``options`` go to the Broker."""
    engine = create_engine(url, pool_size=8)
    loop = asyncio.new_event_loop()
    server = Broker(engine, Listener("127.0.0.1", 0), **options)
    loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.address.port}"
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        engine.dispose()


@contextlib.contextmanager
def broker_command(db_url: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Start ``oncelog broker --listen 127.0.0.1:0`` over ``db_url``; yield the process and the
    address it listens on (read from its first line on stderr). Killed afterwards if still running."""
    env = {**os.environ, "ONCELOG_DATABASE_URL": db_url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "oncelog", "broker", "--listen", "127.0.0.1:0"],
        env=env,
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
