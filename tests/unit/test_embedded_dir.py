"""Where the embedded cluster lives by default: library code takes $XDG_DATA_HOME as an argument
(the CLI, an entry point, reads it), never from the environment itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oncelog import embedded
from oncelog.cli.context import CliContext


def test_the_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", "/from/the/environment")
    assert embedded.default_data_dir() == tmp_path / ".local" / "share" / "oncelog" / "dev-db"
    assert embedded.default_data_dir("/xdg") == Path("/xdg/oncelog/dev-db")
    context = CliContext(database_url=None, schema="oncelog", dev_db_dir=None, xdg_data_home="/xdg")
    assert context.embedded.data_dir == Path("/xdg/oncelog/dev-db")
    given = CliContext(database_url=None, schema="oncelog", dev_db_dir=str(tmp_path / "db"), xdg_data_home="/xdg")
    assert given.embedded.data_dir == tmp_path / "db"
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # root: a folder the postgres user reaches
    assert embedded.default_data_dir("/xdg") == Path("/var/lib/oncelog/dev-db")
