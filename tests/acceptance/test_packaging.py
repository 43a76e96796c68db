"""The distributions as pip builds them: oncelog, and oncelog-verify (the ``verify`` extra) in its
own folder, each holding only its own modules; and ``oncelog verify`` without the optional part."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib.metadata import metadata
from pathlib import Path

import pytest

from tests.support import REPO


def _wheel_files(folder: Path, out: Path) -> list[str]:
    """The file names inside the wheel pip builds from ``folder`` (no dependencies, no isolation:
    the build tools are the test environment's)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(folder)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


@pytest.mark.timeout(600)
def test_verify_is_its_own_distribution(tmp_path: Path) -> None:
    core = _wheel_files(REPO, tmp_path / "core")
    harness = _wheel_files(REPO / "verify", tmp_path / "verify")

    core_modules = [f for f in core if f.startswith("oncelog/")]
    assert "oncelog/producer.py" in core_modules
    assert "oncelog/store/sql/log.sql" in core_modules
    assert "oncelog/migrations/versions/sql/0001_foundation.up.sql" in core_modules
    assert not [f for f in core_modules if f.startswith("oncelog/verify/")]
    metadata = next(f for f in core if f.endswith(".dist-info/METADATA"))
    assert metadata.startswith("oncelog-")

    harness_modules = sorted(f for f in harness if not f.startswith("oncelog_verify-"))
    assert harness_modules == sorted(
        f"oncelog/verify/{name}"
        for name in (
            "__init__.py",
            "broker.py",
            "checker.py",
            "cli.py",
            "faults.py",
            "history.py",
            "kafka_clients.py",
            "proxy.py",
            "py.typed",
            "runner.py",
            "workloads.py",
        )
    )


def test_the_core_distribution_declares_the_verify_extra() -> None:
    requires = metadata("oncelog").get_all("Requires-Dist") or []
    assert 'oncelog-verify==0.1.0; extra == "verify"' in requires


def test_verify_command_without_the_optional_part() -> None:
    """With oncelog.verify absent, ``oncelog verify`` is one clean line saying how to install it,
    and every other command still works."""
    blocked = (
        "import sys; sys.modules['oncelog.verify'] = None; "
        "from oncelog.cli import main; sys.argv[0] = 'oncelog'; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", blocked, "verify", "--duration", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: oncelog verify is an optional part that is not installed: pip install 'oncelog[verify]' "
        "(from a checkout: pip install ./verify)"
    ]
    listing = subprocess.run(
        [sys.executable, "-c", blocked, "--help"], capture_output=True, text=True, timeout=120, check=True
    )
    assert "verify" in listing.stdout
    assert "topics" in listing.stdout
