"""The code, its tests and its benchmarks type-check (mypy --strict) and lint clean (ruff), as part of
the test suite."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO

ROOT = REPO


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )


def test_mypy_strict() -> None:
    result = _run("mypy", "-p", "oncelog", "-p", "oncelog.verify")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_tests_and_bench() -> None:
    """The tests and the benchmarks are typed too (pyproject.toml: strict, but for two checks in
    tests that misread a state read again after a call that changes it)."""
    result = _run("mypy", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff() -> None:
    result = _run("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr
