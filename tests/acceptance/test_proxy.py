"""The fault-injecting proxy (tests/support/proxy.py) proven against a real PostgreSQL server.

Every fault is checked from both ends: the client must see the failure (psycopg raises
OperationalError) and a direct connection must show what the server really did.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.support.proxy import FaultProxy

# Generous bound for "wait until something happens" loops; never an assertion on speed.
WAIT_SECONDS = 30.0


# ------------------------------------------------------------------------------------------------
# LOCAL FIXTURE: a private PostgreSQL for this file only. It is deliberately self-contained (it
# does not use tests/conftest.py) and is meant to be replaced by the shared server fixture later.
# ------------------------------------------------------------------------------------------------

PG_BIN = Path(os.environ.get("ONCELOG_PG_BIN", "/usr/lib/postgresql/15/bin"))


@dataclass(frozen=True)
class LocalPg:
    """Address of the private server (user ``postgres``, trust auth, no SSL)."""

    host: str
    port: int

    def url(self, database: str = "postgres", **params: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in {"sslmode": "disable", **params}.items())
        return f"postgresql://postgres@{self.host}:{self.port}/{database}?{query}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def local_pg() -> Iterator[LocalPg]:
    """initdb + pg_ctl start in a temp dir; stopped and removed when the module is done."""
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"no PostgreSQL binaries in {PG_BIN}")
    # Not under pytest's tmp folder: under root that folder is closed to the postgres user.
    root = Path(tempfile.mkdtemp(prefix="oncelog-proxy-pg-"))
    # PostgreSQL refuses to run as root; run it as the postgres user then.
    as_pg: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, user="postgres")
        as_pg = ["runuser", "-u", "postgres", "--"]
    data, log = root / "pg", root / "log"
    started = False
    try:
        subprocess.run(
            [
                *as_pg,
                str(PG_BIN / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
            ],
            check=True,
            capture_output=True,
        )
        for _attempt in range(3):  # the free port may be taken between probe and bind
            port = _free_port()
            options = f"-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off"
            result = subprocess.run(
                [
                    *as_pg,
                    str(PG_BIN / "pg_ctl"),
                    "start",
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-w",
                    "-t",
                    "60",
                    "-l",
                    str(log),
                ],
                capture_output=True,
                check=False,
            )
            if result.returncode == 0:
                started = True
                break
        if not started:
            pytest.fail(f"PostgreSQL did not start:\n{log.read_text() if log.exists() else ''}")
        yield LocalPg("127.0.0.1", port)
    finally:
        if started:
            subprocess.run(
                [*as_pg, str(PG_BIN / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate", "-w"],
                capture_output=True,
                check=False,
            )
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def proxy(local_pg: LocalPg) -> Iterator[FaultProxy]:
    with FaultProxy(local_pg.host, local_pg.port) as p:
        yield p


@pytest.fixture
def direct(local_pg: LocalPg) -> Iterator[psycopg.Connection]:
    """A connection that bypasses the proxy: the ground truth of what the server did."""
    with psycopg.connect(local_pg.url(), autocommit=True) as conn:
        yield conn


@pytest.fixture
def table(direct: psycopg.Connection) -> Iterator[str]:
    """A fresh empty table ``t(x int)``."""
    direct.execute("DROP TABLE IF EXISTS t")
    direct.execute("CREATE TABLE t(x int)")
    yield "t"
    direct.execute("DROP TABLE IF EXISTS t")


class Proxied:
    """Opens psycopg connections through the proxy and closes them all at the end.

    Connections broken by a fault must still be closed, or psycopg warns (an error here).
    """

    def __init__(self, proxy: FaultProxy, local_pg: LocalPg) -> None:
        self._proxy = proxy
        self._pg = local_pg
        self._conns: list[psycopg.Connection] = []

    def connect(self, **params: str) -> psycopg.Connection:
        conn = psycopg.connect(self._proxy.url_for(self._pg.url(**params)), autocommit=True)
        self._conns.append(conn)
        return conn

    def close(self) -> None:
        for conn in self._conns:
            conn.close()


@pytest.fixture
def proxied(proxy: FaultProxy, local_pg: LocalPg) -> Iterator[Proxied]:
    p = Proxied(proxy, local_pg)
    yield p
    p.close()


def count(direct: psycopg.Connection) -> int:
    row = direct.execute("SELECT count(*) FROM t").fetchone()
    assert row is not None
    return int(row[0])


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition``; fail (rather than hang) if it never holds."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def backends_named(direct: psycopg.Connection, name: str) -> int:
    row = direct.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)).fetchone()
    assert row is not None
    return int(row[0])


# ------------------------------------------------------------------------------------------------
# 1. Pass-through
# ------------------------------------------------------------------------------------------------


def test_pass_through_small_queries(proxy: FaultProxy, proxied: Proxied) -> None:
    conn = proxied.connect()
    assert conn.execute("SELECT 1").fetchone() == (1,)
    # Extended protocol (parameters) as well as the simple one.
    assert conn.execute("SELECT %s::text || %s", ("a", "b")).fetchone() == ("ab",)
    stats = proxy.stats
    assert stats.connections_accepted == 1
    assert stats.bytes_client_to_server > 0
    assert stats.bytes_server_to_client > 0
    assert stats.faults_fired.get("cut_after_next_reply", 0) == 0


@pytest.mark.parametrize("sslmode", ["disable", "prefer"])
def test_pass_through_10mb_result_intact(proxy: FaultProxy, proxied: Proxied, sslmode: str) -> None:
    """A 10 MB result crosses many TCP chunks and arrives byte for byte (and with sslmode=prefer
    the server's bare 'N' answer to SSLRequest is handled)."""
    conn = proxied.connect(sslmode=sslmode)
    rows = conn.execute("SELECT i, repeat(md5(i::text), 32) FROM generate_series(1, 10000) AS i ORDER BY i").fetchall()
    assert len(rows) == 10000
    for i, payload in rows:
        assert payload == hashlib.md5(str(i).encode()).hexdigest() * 32
    assert proxy.stats.bytes_server_to_client > 10_000_000  # 10 MB


# ------------------------------------------------------------------------------------------------
# 2. cut_after_next_reply: the server commits, the client never hears about it
# ------------------------------------------------------------------------------------------------

PRECISE = pytest.mark.parametrize("precise", [False, True], ids=["simple", "precise"])


@PRECISE
def test_cut_after_reply_autocommit_insert_is_committed(
    proxy: FaultProxy, proxied: Proxied, direct: psycopg.Connection, precise: bool
) -> None:
    direct.execute("DROP TABLE IF EXISTS t")
    conn = proxied.connect()
    conn.execute("CREATE TABLE t(x int)")  # through the proxy: it passes traffic when unarmed
    try:
        proxy.cut_after_next_reply(precise=precise)
        with pytest.raises(psycopg.OperationalError):
            conn.execute("INSERT INTO t VALUES (1)")
        assert count(direct) == 1
        assert proxy.stats.faults_fired["cut_after_next_reply"] == 1
    finally:
        direct.execute("DROP TABLE t")


@PRECISE
def test_cut_after_reply_explicit_commit_is_committed(
    proxy: FaultProxy, proxied: Proxied, direct: psycopg.Connection, table: str, precise: bool
) -> None:
    conn = proxied.connect()
    conn.execute("BEGIN")
    conn.execute("INSERT INTO t VALUES (1)")
    proxy.cut_after_next_reply(precise=precise)
    with pytest.raises(psycopg.OperationalError):
        conn.execute("COMMIT")
    assert count(direct) == 1


@pytest.mark.parametrize("sslmode", ["disable", "prefer"])
def test_cut_after_reply_armed_before_connecting_hits_first_query(
    proxy: FaultProxy, proxied: Proxied, direct: psycopg.Connection, table: str, sslmode: str
) -> None:
    """Faults skip the startup/auth exchange: the handshake succeeds, the first query is hit."""
    proxy.cut_after_next_reply(precise=True)
    conn = proxied.connect(sslmode=sslmode)
    with pytest.raises(psycopg.OperationalError):
        conn.execute("INSERT INTO t VALUES (1)")
    assert count(direct) == 1


def test_cut_after_reply_precise_drops_whole_multichunk_reply(proxy: FaultProxy, proxied: Proxied) -> None:
    conn = proxied.connect()
    before = proxy.stats.bytes_server_to_client
    proxy.cut_after_next_reply(precise=True)
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT repeat('x', 1024) FROM generate_series(1, 10000)")
    stats = proxy.stats
    assert stats.bytes_server_to_client == before  # not one byte of the reply got through
    assert stats.bytes_dropped > 10_000_000  # 10 MB


def test_cut_after_reply_precise_lets_copy_in_proceed(
    proxy: FaultProxy, proxied: Proxied, direct: psycopg.Connection, table: str
) -> None:
    """COPY FROM STDIN needs the server's CopyInResponse; the reply *after* the data is lost."""
    conn = proxied.connect()
    proxy.cut_after_next_reply(precise=True)
    with (
        pytest.raises(psycopg.OperationalError),
        conn.cursor() as cur,
        cur.copy("COPY t (x) FROM STDIN") as copy,
    ):
        for i in range(3):
            copy.write_row((i,))
    assert count(direct) == 3


def test_cut_after_reply_is_one_shot_and_spares_other_connections(proxy: FaultProxy, proxied: Proxied) -> None:
    idle = proxied.connect()
    victim = proxied.connect()
    proxy.cut_after_next_reply(precise=True)
    with pytest.raises(psycopg.OperationalError):
        victim.execute("SELECT 1")
    assert idle.execute("SELECT 2").fetchone() == (2,)
    assert proxied.connect().execute("SELECT 3").fetchone() == (3,)
    assert proxy.stats.faults_fired["cut_after_next_reply"] == 1


# ------------------------------------------------------------------------------------------------
# 3. cut_before_next_request: the server never sees the request
# ------------------------------------------------------------------------------------------------


def test_cut_before_request_insert_is_lost(
    proxy: FaultProxy, proxied: Proxied, direct: psycopg.Connection, table: str
) -> None:
    conn = proxied.connect()
    proxy.cut_before_next_request()
    with pytest.raises(psycopg.OperationalError):
        conn.execute("INSERT INTO t VALUES (1)")
    assert count(direct) == 0
    assert proxy.stats.faults_fired["cut_before_next_request"] == 1
    # One-shot: the next connection works.
    proxied.connect().execute("INSERT INTO t VALUES (2)")
    assert count(direct) == 1


def test_cut_before_commit_rolls_back(
    proxy: FaultProxy, proxied: Proxied, direct: psycopg.Connection, table: str
) -> None:
    conn = proxied.connect(application_name="proxy_cut_before_commit")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO t VALUES (1)")
    proxy.cut_before_next_request()
    with pytest.raises(psycopg.OperationalError):
        conn.execute("COMMIT")
    # The server notices the reset and aborts the transaction; the row never becomes visible.
    wait_until(lambda: backends_named(direct, "proxy_cut_before_commit") == 0, "backend exit")
    assert count(direct) == 0


# ------------------------------------------------------------------------------------------------
# 4. stall
# ------------------------------------------------------------------------------------------------


def _query_in_thread(proxy: FaultProxy, conn: psycopg.Connection, result: dict[str, object]) -> threading.Thread:
    def run() -> None:
        try:
            result["rows"] = conn.execute("SELECT 42").fetchall()
        except Exception as exc:  # reported by the test, not lost in the thread
            result["error"] = exc
        # Sampled the moment the reply arrived: it must not have come through a live stall.
        result["stalled_at_return"] = proxy.stalled

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_stall_holds_the_reply_until_the_stall_ends(proxy: FaultProxy, proxied: Proxied) -> None:
    conn = proxied.connect()
    result: dict[str, object] = {}
    proxy.stall(0.5)
    thread = _query_in_thread(proxy, conn, result)
    thread.join(WAIT_SECONDS)
    assert not thread.is_alive()
    assert "error" not in result, result.get("error")
    assert result["rows"] == [(42,)]
    # Ordering, not timing: the proxy held the traffic, and the reply came only once the stall
    # was over.
    assert proxy.stats.chunks_stalled >= 1
    assert result["stalled_at_return"] is False
    assert proxy.stats.faults_fired["stall"] == 1


def test_stall_holds_query_until_resumed(proxy: FaultProxy, proxied: Proxied) -> None:
    """Event ordering, no timers: the request is provably held, the query has not returned;
    after resume() it returns."""
    conn = proxied.connect()
    result: dict[str, object] = {}
    proxy.stall(3600)  # ended by resume(), never by the clock
    thread = _query_in_thread(proxy, conn, result)
    wait_until(lambda: proxy.stats.chunks_stalled >= 1, "the request to be held by the stall")
    assert proxy.stalled
    assert thread.is_alive() and "rows" not in result
    proxy.resume()
    thread.join(WAIT_SECONDS)
    assert not thread.is_alive()
    assert result["rows"] == [(42,)]
    assert result["stalled_at_return"] is False


# ------------------------------------------------------------------------------------------------
# 5. cut_all and block_new_connections
# ------------------------------------------------------------------------------------------------


def test_cut_all_resets_every_connection(proxy: FaultProxy, proxied: Proxied, direct: psycopg.Connection) -> None:
    conns = [proxied.connect(application_name="proxy_cut_all") for _ in range(2)]
    for conn in conns:
        conn.execute("SELECT 1")
    assert backends_named(direct, "proxy_cut_all") == 2
    assert proxy.cut_all() == 2
    for conn in conns:
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    # The server side was closed too: its backends go away.
    wait_until(lambda: backends_named(direct, "proxy_cut_all") == 0, "server backends to exit")
    wait_until(lambda: proxy.stats.connections_open == 0, "proxy connections to be reaped")
    assert proxy.stats.faults_fired["cut_all"] == 2
    # New connections are unaffected.
    assert proxied.connect().execute("SELECT 7").fetchone() == (7,)


def test_block_new_connections(proxy: FaultProxy, proxied: Proxied, local_pg: LocalPg) -> None:
    existing = proxied.connect()
    proxy.block_new_connections(True)
    with pytest.raises(psycopg.OperationalError):
        proxied.connect()
    assert proxy.stats.connections_refused >= 1
    assert existing.execute("SELECT 1").fetchone() == (1,)  # existing connections keep working
    proxy.block_new_connections(False)
    assert proxied.connect().execute("SELECT 2").fetchone() == (2,)


# ------------------------------------------------------------------------------------------------
# 6. Clean shutdown
# ------------------------------------------------------------------------------------------------


def test_close_with_open_connections_leaks_no_threads(local_pg: LocalPg) -> None:
    before = threading.active_count()
    proxy = FaultProxy(local_pg.host, local_pg.port).start()
    conns: list[psycopg.Connection] = []
    try:
        for _ in range(3):
            conns.append(psycopg.connect(proxy.url_for(local_pg.url()), autocommit=True))
        for conn in conns:
            conn.execute("SELECT 1")
        proxy.stall(3600)  # one pump is held mid-stall when close() arrives
        result: dict[str, object] = {}
        thread = _query_in_thread(proxy, conns[0], result)
        wait_until(lambda: proxy.stats.chunks_stalled >= 1, "a held chunk")
        assert threading.active_count() > before
        proxy.close()
        proxy.close()  # idempotent
        thread.join(WAIT_SECONDS)
        assert isinstance(result.get("error"), psycopg.OperationalError)
        assert proxy.alive_threads() == 0
        wait_until(lambda: threading.active_count() == before, "thread count to return")
        for conn in conns[1:]:
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
    finally:
        proxy.close()
        for conn in conns:
            conn.close()


# ------------------------------------------------------------------------------------------------
# API details that need no server
# ------------------------------------------------------------------------------------------------


def test_url_for_replaces_only_the_address() -> None:
    with FaultProxy("127.0.0.1", 1) as proxy:
        port = proxy.port
        assert proxy.url_for("postgresql://u:p%40ss@db.example:5432/app?sslmode=disable") == (
            f"postgresql://u:p%40ss@127.0.0.1:{port}/app?sslmode=disable"
        )
        assert proxy.url_for("postgresql+psycopg://u@h1:1,h2:2/app?host=/tmp&port=9&x=a%20b") == (
            f"postgresql+psycopg://u@127.0.0.1:{port}/app?x=a%20b"
        )
        assert proxy.url_for("postgres://localhost/app") == f"postgres://127.0.0.1:{port}/app"
        with pytest.raises(ValueError):
            proxy.url_for("mysql://localhost/app")


def test_upstream_must_be_loopback() -> None:
    for host in ("10.0.0.1", "example.com", "0.0.0.0"):
        with pytest.raises(ValueError):
            FaultProxy(host, 5432)
    FaultProxy("localhost", 5432).close()  # never started: close is still fine


def test_unreachable_upstream_fails_the_client_not_the_proxy() -> None:
    with FaultProxy("127.0.0.1", _free_port()) as proxy:
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(proxy.url_for("postgresql://postgres@x/postgres?sslmode=disable"))
        wait_until(lambda: proxy.stats.upstream_failures == 1, "the upstream failure")
