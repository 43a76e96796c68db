"""A Spark standalone cluster on the loopback, started from the pyspark wheel: one master and
worker processes (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``,
what ``start-master.sh`` would run; the wheel has no sbin scripts). docs/guide-spark.md shows the
same commands for a real cluster."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: How long the master and each worker may take to come up (a JVM each).
START_S = 120.0


@dataclass(frozen=True)
class StandaloneCluster:
    """A running cluster: its master URL and each worker's work directory (one subdirectory per
    application whose executors ran there)."""

    master: str
    work_dirs: tuple[Path, ...]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_class() -> Path:
    import pyspark  # noqa: PLC0415 - the optional spark extra

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"the Spark {what} did not start:\n{log.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def standalone_cluster(
    root: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g"
) -> Iterator[StandaloneCluster]:
    """Start a master and ``workers`` workers (``cores`` cores and ``memory`` each) with their
    logs and work directories under ``root``; stop them all afterwards."""
    spark_class = str(_spark_class())
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    port = _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        master_log = root / "master.log"
        with master_log.open("wb") as out:
            master = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", str(_free_port())],
                env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        procs.append(master)
        _wait_for(master_log, "I have been elected leader", master, "master")
        work_dirs = []
        for i in range(workers):
            work = root / f"worker{i}"
            work.mkdir()
            log = root / f"worker{i}.log"
            with log.open("wb") as out:
                worker = subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
                     "--cores", str(cores), "--memory", memory, "--work-dir", str(work),
                     "--webui-port", str(_free_port())],
                    env=env, stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
            procs.append(worker)
            _wait_for(log, "Successfully registered with master", worker, f"worker {i}")
            work_dirs.append(work)
        yield StandaloneCluster(master_url, tuple(work_dirs))
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
