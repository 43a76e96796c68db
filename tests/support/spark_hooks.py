"""Task hooks for the Spark writer tests (``oncelog.spark.write(..., task_hook=...)``).

A hook runs inside a Spark task, in a Python worker process, so it must be picklable by reference:
these are module-level classes (cloudpickle pickles their instances by naming this module, which
the workers import). Each hook can log every call it sees to a file (one ``index attempt`` line per
call), so a test can prove the failure it injected really happened and Spark really retried.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


class InjectedTaskFailure(RuntimeError):
    """The failure a hook injects (raised inside a Spark task)."""


def _log(path: str | None, index: int, attempt: int) -> None:
    if path is None:
        return
    # One short write per call with O_APPEND: lines from concurrent workers do not interleave.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{index} {attempt}\n".encode())
    finally:
        os.close(fd)


def read_log(path: str | os.PathLike[str]) -> list[tuple[int, int]]:
    """The ``(task index, attempt)`` calls a hook logged, in the order they happened."""
    p = Path(path)
    if not p.exists():
        return []
    return [(int(a), int(b)) for a, b in (line.split() for line in p.read_text().splitlines() if line)]


@dataclass(frozen=True)
class FailAttempts:
    """Raise in task ``task`` on the attempts in ``attempts`` (``None``: on every attempt, so the
    task, and with it the Spark job, fails for good). Other tasks and attempts pass."""

    task: int
    attempts: frozenset[int] | None = None
    log_path: str | None = None

    def __call__(self, index: int, attempt: int) -> None:
        _log(self.log_path, index, attempt)
        if index == self.task and (self.attempts is None or attempt in self.attempts):
            raise InjectedTaskFailure(f"injected failure in task {index}, attempt {attempt}")
