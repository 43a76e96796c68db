"""The embedded PostgreSQL: start, reuse, stop, crash recovery, as root and as a normal user."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from oncelog.embedded import EmbeddedPostgres, find_server_binaries
from oncelog.errors import EmbeddedServerError, ServerBinariesNotFoundError


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Not under pytest's tmp folder: under root that folder is closed to the postgres user.
    path = Path(tempfile.mkdtemp(prefix="oncelog-embedded-"))
    yield path
    EmbeddedPostgres(path).destroy()
    shutil.rmtree(path, ignore_errors=True)


def _postmaster_pid(server: EmbeddedPostgres) -> int:
    return int((server.pgdata / "postmaster.pid").read_text().splitlines()[0])


def _query(url: str) -> int:
    with psycopg.connect(url, connect_timeout=10) as conn:
        row = conn.execute("SELECT 1").fetchone()
        assert row is not None
        return int(row[0])


def test_lifecycle_start_reuse_stop(data_dir: Path) -> None:
    server = EmbeddedPostgres(data_dir, durable=False)
    assert not server.status().initialized
    url = server.start()
    assert url.startswith("postgresql://postgres@127.0.0.1:") and url.endswith("/oncelog")
    assert _query(url) == 1
    status = server.status()
    assert status.running and status.initialized and status.url == url
    pid = _postmaster_pid(server)

    # A second start (another process would do the same) reuses the running server.
    assert EmbeddedPostgres(data_dir).start() == url
    assert _postmaster_pid(server) == pid

    assert server.stop() is True
    assert not server.status().running
    assert server.stop() is False
    with pytest.raises(psycopg.OperationalError):
        _query(url)

    # Restarting keeps the URL stable.
    assert server.start() == url
    assert _query(url) == 1


def test_listens_on_loopback_tcp_only(data_dir: Path) -> None:
    server = EmbeddedPostgres(data_dir, durable=False)
    url = server.start()
    with psycopg.connect(url) as conn:
        settings: dict[str, str] = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('listen_addresses', 'unix_socket_directories', 'fsync')"
            ).fetchall()
        )
    assert settings == {"listen_addresses": "127.0.0.1", "unix_socket_directories": "", "fsync": "off"}
    hba = (server.pgdata / "pg_hba.conf").read_text()
    assert [line for line in hba.splitlines() if line and not line.startswith("#")] == [
        "host all postgres 127.0.0.1/32 trust",
        "host all all 127.0.0.1/32 scram-sha-256",
    ]
    # Every role but the superuser is asked its password.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE ROLE emb_user LOGIN PASSWORD 'right'")
    other = sa.make_url(url).set(drivername="postgresql", username="emb_user")
    with psycopg.connect(other.set(password="right").render_as_string(hide_password=False)):
        pass
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(other.set(password="wrong").render_as_string(hide_password=False)).close()


def test_restarts_after_the_server_was_killed(data_dir: Path) -> None:
    """kill -9 of the postmaster leaves a stale pid file; start() must recover (crash recovery).

    Durable: with the test clusters' synchronous_commit=off a crash may lose the last commits.
    """
    server = EmbeddedPostgres(data_dir, durable=True)
    url = server.start()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE survivor (x int); INSERT INTO survivor VALUES (42)")
    os.kill(_postmaster_pid(server), signal.SIGKILL)
    # The children notice the postmaster is gone and exit; wait until the server is really down.
    for _ in range(200):
        if not server.status().running:
            break
        subprocess.run(["sleep", "0.05"], check=True)
    assert server.start() == url
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT x FROM survivor").fetchone()
    assert row == (42,)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the data directory to the postgres user")
def test_root_refuses_a_data_directory_the_server_cannot_reach(data_dir: Path) -> None:
    os.chmod(data_dir, 0o700)
    with pytest.raises(EmbeddedServerError, match="cannot enter"):
        EmbeddedPostgres(data_dir / "inner").start()


def test_missing_binaries_say_how_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(ServerBinariesNotFoundError) as info:
        find_server_binaries(tmp_path)
    assert "apt-get install" in str(info.value) and "docker compose" in str(info.value)


def _run_as(user: str, data_dir: Path) -> int:
    """Start and stop a cluster in a child process that has dropped root for ``user``."""
    entry = pwd.getpwnam(user)
    pid = os.fork()
    if pid == 0:  # child: become the user, then use the same code path a normal user would
        code = 1
        try:
            os.setgroups([])
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            server = EmbeddedPostgres(data_dir, durable=False)
            url = server.start()
            ok = _query(url) == 1 and server.status().running and server.stop()
            code = 0 if ok else 2
        except BaseException:  # report any failure through the exit code
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to test both the root and the normal-user paths")
def test_runs_as_root_and_as_a_normal_user(data_dir: Path) -> None:
    # As root: the server runs as the postgres user, which owns the data directory.
    os.chmod(data_dir, 0o755)
    server = EmbeddedPostgres(data_dir / "as-root", durable=False)
    url = server.start()
    assert _query(url) == 1
    assert (data_dir / "as-root").stat().st_uid == pwd.getpwnam("postgres").pw_uid
    server.stop()

    # As a normal user (nobody): initdb and pg_ctl run directly, no runuser involved.
    user_dir = data_dir / "as-user"
    user_dir.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(user_dir, nobody.pw_uid, nobody.pw_gid)
    assert _run_as("nobody", user_dir) == 0
    assert (user_dir / "pgdata" / "PG_VERSION").stat().st_uid == nobody.pw_uid
