"""``oncelog dev-cluster`` without a cluster: what it reports of states, of a folder never used
and of a machine without pg_auto_failover (the cluster itself: tests/acceptance/test_failover.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from oncelog.cli import cli
from oncelog.dev_cluster import MONITOR, NODES, ClusterStatus, DevCluster, NodeState, _gone, find_autoctl
from oncelog.errors import EmbeddedServerError, ServerBinariesNotFoundError


def status(*nodes: tuple[str, str, str, bool], running: tuple[str, ...] = (MONITOR, *NODES)) -> ClusterStatus:
    states = tuple(
        NodeState(name, 5000 + i, reported, assigned, ok) for i, (name, reported, assigned, ok) in enumerate(nodes)
    )
    return ClusterStatus(Path("/x"), True, running, states, "postgresql://x")


def test_healthy_means_a_settled_primary_two_settled_standbys_and_every_keeper() -> None:
    good = [("node1", "primary", "primary", True), ("node2", "secondary", "secondary", True),
            ("node3", "secondary", "secondary", True)]  # fmt: skip
    assert status(*good).healthy and status(*good).primary == "node1"
    assert not status(*good, running=(MONITOR, "node1", "node2")).healthy  # a keeper is down
    draining = [("node1", "primary", "draining", False), *good[1:]]
    assert status(*draining).primary is None and not status(*draining).healthy
    catching_up = [good[0], good[1], ("node3", "catchingup", "secondary", True)]
    assert status(*catching_up).primary == "node1" and not status(*catching_up).healthy
    unreachable = [good[0], good[1], ("node3", "secondary", "secondary", False)]
    assert not status(*unreachable).healthy


def test_a_folder_never_used_is_not_initialized(tmp_path: Path) -> None:
    cluster = DevCluster(tmp_path / "none")
    assert cluster.status() == ClusterStatus(tmp_path / "none", False, (), (), None)
    assert cluster.stop() is False
    with pytest.raises(EmbeddedServerError, match="never started"):
        cluster.url()
    shown = CliRunner().invoke(cli, ["dev-cluster", "--dir", str(tmp_path / "none"), "status", "--json"])
    assert shown.exit_code == 3
    assert json.loads(shown.output)["initialized"] is False


def test_without_pg_autoctl_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ServerBinariesNotFoundError, match="apt-get install -y pg-auto-failover-cli"):
        find_autoctl()


def test_an_exited_process_is_gone_even_unreaped() -> None:
    """A keeper is not our child: once it exits, whoever should reap it may never do so."""
    assert not _gone(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, left a zombie
        assert _gone(child.pid)
    finally:
        child.wait()
    assert _gone(child.pid)  # reaped: no such process
