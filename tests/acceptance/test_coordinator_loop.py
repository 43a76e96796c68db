"""``oncelog coordinator run`` never dies of the database (issue 14), against a real PostgreSQL.

The loop runs in a thread (run_loop, what the command runs) while its backend is terminated, a
deadlock and a serialization failure are injected, a lock holder makes a step time out, and an
embedded server is restarted under it; after each, it must log one line and go on to do its work.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime

import psycopg
import pytest
from click.testing import CliRunner

import oncelog
from oncelog import errors
from oncelog.admin import Admin
from oncelog.cli import cli
from oncelog.cli.coordinator import FIRST_BACKOFF_S, backoff_delay, run_loop
from oncelog.embedded import EmbeddedPostgres
from oncelog.store.errors import translate
from tests.support.logcheck import wait_until

#: The CLI runner's environment: nothing inherited that would change what the commands do.
ENV: dict[str, str | None] = {"ONCELOG_SCHEMA": None, "ONCELOG_DEV_DB_DIR": None, "NO_COLOR": None}
#: Added to a call's own timeout to bound how long it may take (scheduling on a loaded host).
MARGIN = 5.0


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


class Loop:
    """run_loop on a thread, its report and warning lines collected."""

    def __init__(self, admin: Admin, *, interval: float = 0.1) -> None:
        self.reports: list[str] = []
        self.warnings: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=run_loop,
            kwargs={
                "admin": admin,
                "interval": interval,
                "retention_batch": 1000,
                "stop": self.stop,
                "max_backoff": 0.5,
                "report": lambda done: self.reports.append(str(done)),
                "warn": self.warnings.append,
            },
            daemon=True,
        )

    def __enter__(self) -> Loop:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the loop did not stop"

    def wait_report(self, predicate: Callable[[str], bool], what: str, after: int = 0) -> None:
        wait_until(lambda: any(predicate(line) for line in self.reports[after:]), 60, what)
        assert self.thread.is_alive()


def _old_record(db_url: str, topic: str) -> None:
    """A topic whose retention (1 ms) makes its one record due for deletion."""
    with oncelog.Admin(db_url) as admin:
        admin.create_topic(topic, partitions=1, config={"retention_ms": 1})
    with oncelog.Producer(db_url, linger_ms=0) as producer:
        producer.send(topic, b"old").result(30)
    time.sleep(0.05)


@contextlib.contextmanager
def partition_locked(db_url: str, topic: str) -> Iterator[psycopg.Connection]:
    """A second session holding the topic's partition 0 row FOR UPDATE until the block ends."""
    with psycopg.connect(_libpq(db_url)) as conn:
        conn.execute(
            "SELECT 1 FROM oncelog.partitions p JOIN oncelog.topics t USING (topic_id) "
            "WHERE t.name = %s AND p.partition = 0 FOR UPDATE",
            (topic,),
        )
        try:
            yield conn
        finally:
            conn.rollback()


def test_backoff_is_exponential_bounded_and_jittered() -> None:
    assert backoff_delay(1, 30, rng=lambda: 0.0) == FIRST_BACKOFF_S / 2
    assert backoff_delay(3, 30, rng=lambda: 0.999999) == pytest.approx(FIRST_BACKOFF_S * 4, rel=1e-5)
    assert backoff_delay(50, 30, rng=lambda: 0.999999) <= 30
    assert backoff_delay(50, 30, rng=lambda: 0.0) == 15


@pytest.mark.timeout(120)
def test_once_behind_a_lock_holder_fails_cleanly_in_time(db_url: str) -> None:
    _old_record(db_url, "t")
    with partition_locked(db_url, "t"):  # retention must move this partition's log start
        started = time.monotonic()
        result = CliRunner().invoke(
            cli,
            ["--database-url", db_url, "coordinator", "run", "--once", "--request-timeout", "2"],
            env=ENV,
            catch_exceptions=False,
        )
        assert time.monotonic() - started < 2 + MARGIN
    assert result.exit_code == 1, result.output
    assert "error:" in result.output and "timeout" in result.output, result.output
    # Released: the same pass now completes.
    done = CliRunner().invoke(cli, ["--database-url", db_url, "coordinator", "run", "--once"], env=ENV)
    assert done.exit_code == 0, done.output
    assert "deleted 1 records by retention" in done.output


def test_a_pass_is_reported_with_its_time_or_as_one_json_object(db_url: str) -> None:
    _old_record(db_url, "t")
    as_json = CliRunner().invoke(cli, ["--database-url", db_url, "coordinator", "run", "--once", "--json"], env=ENV)
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.output)
    assert doc["deleted_records"] == 1 and doc["aborted_transactions"] == 0
    assert datetime.fromisoformat(doc["finished_at"]).utcoffset() is not None
    text = CliRunner().invoke(cli, ["--database-url", db_url, "coordinator", "run", "--once"], env=ENV)
    assert text.exit_code == 0, text.output
    at, line = text.output.strip().split(" ", 1)
    assert datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ")  # UTC, milliseconds
    assert line.startswith("aborted 0 timed-out transactions") and "deleted 0 records by retention" in line


@pytest.mark.timeout(120)
def test_loop_survives_a_terminated_backend(db_url: str) -> None:
    _old_record(db_url, "t")
    with (
        Admin(db_url, request_timeout_ms=20_000) as admin,
        partition_locked(db_url, "t") as holder,
        psycopg.connect(_libpq(db_url), autocommit=True) as owner,
        Loop(admin) as loop,
    ):
        # Its retention step waits for the lock: kill that backend under it.
        waiters: list[int] = []

        def waiting() -> bool:
            waiters[:] = [
                pid
                for (pid,) in owner.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND pid <> %s",
                    (holder.info.backend_pid,),
                ).fetchall()
            ]
            return bool(waiters)

        wait_until(waiting, 30, "the loop to wait for the partition lock")
        owner.execute("SELECT pg_terminate_backend(%s)", (waiters[0],))
        wait_until(lambda: len(loop.warnings) >= 1, 30, "the loop to report the failure")
        holder.rollback()  # the lock is gone: the loop goes on and does the retention
        loop.wait_report(lambda line: "deleted 1 records by retention" in line, "retention to be applied")
    assert len(loop.warnings) == 1, loop.warnings
    assert "DatabaseUnavailableError" in loop.warnings[0] and "retrying in" in loop.warnings[0]
    assert "\n" not in loop.warnings[0]


@pytest.mark.timeout(120)
def test_loop_survives_deadlocks_and_serialization_failures(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    injected = [
        translate(psycopg.errors.DeadlockDetected("deadlock detected")),
        translate(psycopg.errors.SerializationFailure("could not serialize access")),
        translate(psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")),
    ]
    assert [type(e) for e in injected] == [
        errors.SerializationFailureError,
        errors.SerializationFailureError,
        errors.RequestTimeoutError,
    ]
    with Admin(db_url) as admin:
        real = admin.expire_transactions

        def flaky() -> int:
            if injected:
                raise injected.pop(0)  # type: ignore[misc]
            return real()

        monkeypatch.setattr(admin, "expire_transactions", flaky)
        with Loop(admin) as loop:
            loop.wait_report(lambda line: line.startswith("aborted 0"), "a pass after the injected failures")
    assert len(loop.warnings) == 3, loop.warnings
    assert not injected


@pytest.mark.timeout(240)
def test_loop_survives_a_server_restart(durable_server: EmbeddedPostgres) -> None:
    url = durable_server.url()
    with Admin(url, request_timeout_ms=5_000) as admin, Loop(admin, interval=0.2) as loop:
        loop.wait_report(lambda line: line.startswith("aborted"), "a first pass")
        durable_server.stop("fast")
        wait_until(lambda: len(loop.warnings) >= 1, 60, "the loop to notice the server is gone")
        assert durable_server.start() == url
        seen = len(loop.reports)
        loop.wait_report(lambda line: line.startswith("aborted"), "a pass after the restart", after=seen)
    assert all("retrying in" in w and "\n" not in w for w in loop.warnings), loop.warnings
