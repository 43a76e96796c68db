"""``oncelog broker`` for a run of ``oncelog verify --via broker``: the Kafka clients' server.

The broker is a child process speaking to PostgreSQL through the run's fault proxy, so every
network and server fault reaches it as it reaches oncelog's own clients; the ``broker-kill`` fault
SIGKILLs it and starts it again on the same port (Kafka clients reconnect to the address they
bootstrapped from). A broker that exits on its own is a crash: counted, and started again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["BrokerProcess", "running_broker"]

_LOG = logging.getLogger(__name__)

#: How long a start may take (imports, the first connection through a proxy that may be stalled).
_START_TIMEOUT_S = 60.0
#: How long a restart keeps trying when a start fails (the port taken for a moment, say), and the
#: longest pause between two tries.
_START_RETRY_S = 10.0
_START_BACKOFF_MAX_S = 2.0
#: The line ``oncelog broker`` writes on stderr once it listens.
_LISTENING = re.compile(r"Kafka clients may connect to (\S+):(\d+)")


class BrokerProcess:
    """One ``oncelog broker`` child over ``url`` (the run's proxy), listening on loopback; its
    output goes to ``log``. :meth:`kill` and :meth:`start` are what the nemesis calls."""

    def __init__(self, url: str, *, schema: str, log: Path) -> None:
        self._url = url
        self._schema = schema
        self._log = log
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[str] | None = None
        self._port = 0  # chosen by the first start, then kept
        self._state = "stopped"  # running | killed | stopped
        self._watcher: threading.Thread | None = None
        self._stopping = threading.Event()
        self._counted: subprocess.Popen[str] | None = None  # the last exit counted as a crash
        self.starts = 0
        self.crashes: list[int] = []
        """The exit status of every exit the broker made on its own."""

    @property
    def bootstrap(self) -> str:
        """``host:port`` for Kafka clients' ``bootstrap.servers``."""
        if not self._port:
            raise RuntimeError("the broker has not started yet")
        return f"127.0.0.1:{self._port}"

    def start(self) -> str:
        """Start the broker unless it runs (on the port of its first start); its address."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return self.bootstrap
            self._spawn_retrying()
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, name="verify-broker", daemon=True)
                self._watcher.start()
            return self.bootstrap

    def kill(self) -> bool:
        """SIGKILL the broker; it stays down until :meth:`start`. False if it was not running."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                return False
            self._proc.kill()
            self._proc.wait()
            self._state = "killed"
            return True

    def stop(self) -> None:
        """SIGTERM (the broker closes its connections), SIGKILL after 10 s."""
        self._stopping.set()
        with self._lock:
            self._state = "stopped"
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._watcher is not None:
            self._watcher.join(5)

    def _spawn_retrying(self) -> None:
        """:meth:`_spawn`, tried again with a growing pause for ``_START_RETRY_S`` (a restart on
        the same port can find it taken for a moment); the last failure is raised."""
        deadline = time.monotonic() + _START_RETRY_S
        pause = 0.1
        while True:
            try:
                self._spawn()
                return
            except RuntimeError as exc:
                if not self._port or time.monotonic() + pause > deadline:
                    raise  # the first start, or out of time
                _LOG.warning("%s; trying again", exc)
            time.sleep(pause)
            pause = min(pause * 2, _START_BACKOFF_MAX_S)

    def _spawn(self) -> None:
        listening = threading.Event()
        with open(self._log, "a", encoding="utf-8") as out:
            out.write(f"--- start {self.starts + 1} ---\n")
        proc = subprocess.Popen(
            [sys.executable, "-m", "oncelog", "broker", "--listen", f"127.0.0.1:{self._port}"],
            # The URL holds the password: the environment, never the command line.
            env={**os.environ, "ONCELOG_DATABASE_URL": self._url, "ONCELOG_SCHEMA": self._schema},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a Ctrl-C reaches the runner, which stops the broker last
        )
        assert proc.stderr is not None  # stderr=PIPE
        threading.Thread(
            target=self._copy, args=(proc.stderr, listening), name="verify-broker-log", daemon=True
        ).start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not listening.wait(0.1):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"oncelog broker did not start (exit status {proc.returncode}); see {self._log}")
        self._proc = proc
        self._state = "running"
        self.starts += 1

    def _copy(self, stream: IO[str], listening: threading.Event) -> None:
        """The broker's stderr into the log file; its listening line tells the port."""
        with stream, open(self._log, "a", encoding="utf-8") as out:
            for line in stream:
                out.write(line)
                out.flush()
                match = _LISTENING.search(line)
                if match is not None and not listening.is_set():
                    self._port = int(match.group(2))
                    listening.set()

    def _watch(self) -> None:
        """Start again a broker that exited on its own."""
        while not self._stopping.wait(0.2):
            with self._lock:
                proc = self._proc
                if self._state != "running" or proc is None or proc.poll() is None:
                    continue
                if proc is not self._counted:
                    self._counted = proc
                    self.crashes.append(proc.returncode)
                    _LOG.warning("oncelog broker exited with %s; starting it again", proc.returncode)
                try:
                    self._spawn_retrying()
                except RuntimeError as exc:
                    _LOG.warning("%s", exc)
                    self._stopping.wait(_START_BACKOFF_MAX_S)


@contextlib.contextmanager
def running_broker(url: str, *, schema: str, log: Path) -> Iterator[BrokerProcess]:
    """A started :class:`BrokerProcess`, stopped however the block ends."""
    broker = BrokerProcess(url, schema=schema, log=log)
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()
