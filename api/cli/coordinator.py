"""``oncelog coordinator run``: the maintenance loop.

Nothing depends on it for correctness: readers and initialisers abort expired transactions
themselves. It keeps the store tidy: times out abandoned transactions (so last stable offsets
move), expires idle transactional ids and producer state, applies retention (records, and
the transaction journal's history) and compacts the topics whose cleanup_policy says so.

The loop never dies of the database: a deadlock, a serialization failure, a statement cancelled
at its timeout, a lost connection or a restarting server costs one line on stderr and a pause
(exponential, bounded, with jitter), and the next pass starts over. ``--once`` reports the error
and exits 1 instead.

Every line it prints starts with the time (UTC, ISO 8601), as a daemon's log should; with
``--json`` each pass is one JSON object on stdout (a JSON line), and failures stay lines on stderr.
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType

import click

from oncelog.admin import Admin
from oncelog.cli.context import CliContext
from oncelog.cli.render import console, fail, json_option, print_json
from oncelog.errors import OncelogError

#: The first pause after a failed pass; it doubles per consecutive failure up to --max-backoff.
FIRST_BACKOFF_S = 0.5


@click.group()
def coordinator() -> None:
    """The transaction coordinator's maintenance."""


@coordinator.command()
@click.option("--interval", default=10.0, show_default=True, help="Seconds between passes (Kafka checks every 10 s).")
@click.option("--once", is_flag=True, help="Run one pass and exit (exit status 1 if it fails).")
@click.option(
    "--retention-batch",
    default=10_000,
    show_default=True,
    help="Records deleted per partition per step, and transaction history rows per step.",
)
@click.option(
    "--request-timeout",
    default=30.0,
    show_default=True,
    help="Seconds one database call may take (waiting for locks included) before it is cancelled.",
)
@click.option(
    "--max-backoff",
    default=30.0,
    show_default=True,
    help="Longest pause, in seconds, after failed passes before trying again.",
)
@json_option
@click.pass_obj
def run(  # noqa: PLR0917 - click passes each option as an argument
    obj: CliContext,
    interval: float,
    once: bool,
    retention_batch: int,
    request_timeout: float,
    max_backoff: float,
    as_json: bool,
) -> None:
    """Expire transactions, transactional ids and producer state; apply retention (records and the
    transaction history); compact compacted topics. Stops on SIGINT/SIGTERM; survives database
    failures. Each pass prints one line that starts with its time (UTC); --json prints each pass
    as one JSON object instead."""
    positive = {"--interval": interval, "--request-timeout": request_timeout, "--max-backoff": max_backoff}
    for name, value in positive.items():
        if value <= 0:
            raise click.BadParameter("must be positive", param_hint=name)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    obj.engine()  # start and migrate the embedded server if that is what we use

    def report(done: PassReport) -> None:
        if as_json:
            print_json(done, compact=True)
        else:
            click.echo(f"{stamp(done.finished_at)} {done}")

    with Admin(obj.url(), schema=obj.schema, request_timeout_ms=request_timeout * 1000) as admin:
        if once:
            err = console(stderr=True)
            shown = err.is_terminal and not as_json  # a spinner where a person watches
            try:
                with err.status("expiring and applying retention...") if shown else contextlib.nullcontext():
                    done = maintenance_pass(admin, retention_batch=retention_batch)
                report(done)
            except OncelogError as exc:
                fail(exc)  # one line on stderr, exit status 1
            return
        run_loop(
            admin,
            interval=interval,
            retention_batch=retention_batch,
            stop=stop,
            max_backoff=max_backoff,
            report=report,
            warn=lambda line: click.echo(f"{stamp(datetime.now(UTC))} {line}", err=True),
        )


@dataclass(frozen=True)
class PassReport:
    """What one maintenance pass did, and when it finished."""

    finished_at: datetime
    aborted_transactions: int
    expired_producer_states: int
    deleted_records: int
    pruned_history_rows: int
    #: Compaction: records examined and removed, bytes removed.
    compacted_examined: int = 0
    compacted_records: int = 0
    compacted_bytes: int = 0

    def __str__(self) -> str:
        return (
            f"aborted {self.aborted_transactions} timed-out transactions, expired {self.expired_producer_states} "
            f"producer states, deleted {self.deleted_records} records by retention, removed "
            f"{self.compacted_records} of {self.compacted_examined} records examined by compaction "
            f"({self.compacted_bytes} bytes), pruned {self.pruned_history_rows} transaction history rows"
        )


def stamp(at: datetime) -> str:
    """``at`` as the log lines' prefix: UTC, ISO 8601, milliseconds (``2026-11-27T05:20:01.123Z``)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def maintenance_pass(admin: Admin, *, retention_batch: int) -> PassReport:
    """One pass of every maintenance step, and what it did."""
    aborted = admin.expire_transactions()
    expired = admin.expire_producers()
    deleted = admin.enforce_retention(batch=retention_batch)
    compacted = admin.compact()
    pruned = admin.expire_txn_history(batch=retention_batch)
    return PassReport(
        datetime.now(UTC),
        aborted,
        expired,
        deleted,
        pruned,
        compacted_examined=compacted.examined,
        compacted_records=compacted.removed,
        compacted_bytes=compacted.removed_bytes,
    )


def backoff_delay(failures: int, max_backoff: float, rng: Callable[[], float] = random.random) -> float:
    """The pause after ``failures`` consecutive failed passes: exponential from FIRST_BACKOFF_S,
    capped at ``max_backoff``, then scaled by a random factor in [0.5, 1) so that several loops
    failing together (a server restart) do not all come back in step."""
    base = min(FIRST_BACKOFF_S * 2.0 ** max(failures - 1, 0), max_backoff)
    return base * (0.5 + rng() / 2)


def run_loop(
    admin: Admin,
    *,
    interval: float,
    retention_batch: int,
    stop: threading.Event,
    max_backoff: float,
    report: Callable[[PassReport], None],
    warn: Callable[[str], None],
) -> None:
    """Run maintenance passes every ``interval`` seconds until ``stop`` is set, each reported
    through ``report``.

    A pass that fails is reported in one line through ``warn`` and retried after a backoff; the
    loop itself never raises for a database failure. The admin's connections are pooled: a
    broken one is discarded by the pool's ping when next checked out, so the next pass simply
    connects again (to a restarted server too)."""
    failures = 0
    while not stop.is_set():
        started = time.monotonic()
        try:
            done = maintenance_pass(admin, retention_batch=retention_batch)
        except Exception as exc:  # a maintenance daemon outlives any one failure
            failures += 1
            delay = backoff_delay(failures, max_backoff)
            kind = "database error" if isinstance(exc, OncelogError) else "unexpected error"
            message = " ".join(str(exc).split())  # one line: libpq's messages span several
            warn(f"maintenance pass failed ({kind}, {type(exc).__name__}: {message}); retrying in {delay:.1f} s")
            if stop.wait(delay):
                return
            continue
        failures = 0
        report(done)
        if stop.wait(max(interval - (time.monotonic() - started), 0.0)):
            return
