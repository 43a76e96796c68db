"""examples/aio_service.py, the asyncio web service, started as its docstring says (``uvicorn
--factory examples.aio_service:main_app`` with ONCELOG_DATABASE_URL set) and used over HTTP:
orders posted land once, bad ones are refused, and the totals come from what read_committed
readers see; stopping the server commits the group's positions."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from oncelog import Consumer, TopicPartition
from tests.support import REPO

#: A bound on waiting, never a speed check.
WAIT = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(base: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=WAIT) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_service_writes_orders_once_and_adds_them_up(db_url: str) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "examples.aio_service:main_app", "--port", str(port)],
        cwd=REPO,
        env={**os.environ, "ONCELOG_DATABASE_URL": db_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT
        while True:
            assert server.poll() is None, server.communicate()[0].decode(errors="replace")
            try:
                if _request(base, "/totals")[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.2)
        placed = []
        for i in range(30):
            status, answer = _request(base, "/orders", {"customer": f"c{i % 3}", "amount": 1.5})
            assert status == 200, answer
            placed.append((answer["partition"], answer["offset"]))
        assert _request(base, "/orders", {"customer": "", "amount": -1})[0] == 422
        while (totals := _request(base, "/totals")[1]) != {"c0": 15.0, "c1": 15.0, "c2": 15.0}:
            assert time.monotonic() < deadline, totals
            time.sleep(0.1)
    finally:
        server.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown runs the lifespan's end
        output = server.communicate(timeout=WAIT)[0].decode(errors="replace")
    assert server.returncode == 0, output
    assert "Traceback" not in output, output
    assert len(set(placed)) == 30
    with Consumer(db_url, group_id="order-totals") as consumer:
        committed = consumer.committed([TopicPartition("orders", p) for p in range(3)])
    assert sum(om.offset for om in committed.values() if om is not None) == 30
