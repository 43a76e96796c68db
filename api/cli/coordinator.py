"""``oncelog coordinator run``: the maintenance loop.

Nothing depends on it for correctness: readers and initialisers abort expired transactions
themselves. It keeps the store tidy: times out abandoned transactions (so last stable offsets
move), expires idle transactional ids and producer state, and applies retention (records, and
the transaction journal's history).
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType

import click

from oncelog.admin import Admin
from oncelog.cli.context import CliContext


@click.group()
def coordinator() -> None:
    """The transaction coordinator's maintenance."""


@coordinator.command()
@click.option("--interval", default=10.0, show_default=True, help="Seconds between passes (Kafka checks every 10 s).")
@click.option("--once", is_flag=True, help="Run one pass and exit.")
@click.option(
    "--retention-batch",
    default=10_000,
    show_default=True,
    help="Records deleted per partition per step, and transaction history rows per step.",
)
@click.pass_obj
def run(obj: CliContext, interval: float, once: bool, retention_batch: int) -> None:
    """Expire transactions, transactional ids and producer state; apply retention (records and the
    transaction history). Stops on SIGINT/SIGTERM."""
    if interval <= 0:
        raise click.BadParameter("must be positive", param_hint="--interval")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    obj.engine()  # start and migrate the embedded server if that is what we use
    with Admin(obj.url(), schema=obj.schema) as admin:
        while True:
            started = time.monotonic()
            aborted = admin.expire_transactions()
            expired = admin.expire_producers()
            deleted = admin.enforce_retention(batch=retention_batch)
            pruned = admin.expire_txn_history(batch=retention_batch)
            click.echo(
                f"aborted {aborted} timed-out transactions, expired {expired} producer states, "
                f"deleted {deleted} records by retention, pruned {pruned} transaction history rows"
            )
            if once or stop.wait(max(interval - (time.monotonic() - started), 0.0)):
                return
