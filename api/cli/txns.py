"""``oncelog txns list|describe|find-hanging|abort``: the transaction coordinator's state."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import click
from rich.table import Table

from oncelog.admin import HANGING_AFTER
from oncelog.cli.context import CliContext
from oncelog.cli.render import OpsGroup, admin_for, emit, fields, json_option, state, table
from oncelog.store.schema import TXN_STATES
from oncelog.store.txn import TransactionStatus


def _table(title: str | None, found: Sequence[TransactionStatus]) -> Table:
    return table(
        title,
        ["transactional id", "state", "producer id", "epoch", "txn", "age", "timeout", "partitions"],
        [
            (
                t.transactional_id,
                state(t.state),
                t.producer_id,
                t.producer_epoch,
                t.txn_number,
                t.age,
                timedelta(milliseconds=t.timeout_ms),
                t.partitions,
            )
            for t in found
        ],
        numeric=["producer id", "epoch", "txn", "age", "timeout"],
    )


def _fields(t: TransactionStatus) -> Table:
    return fields(
        f"transactional id {t.transactional_id}",
        [
            ("state", state(t.state)),
            ("producer id", t.producer_id),
            ("producer epoch", t.producer_epoch),
            ("transaction number", t.txn_number),
            ("timeout", timedelta(milliseconds=t.timeout_ms)),
            ("started", t.txn_started_at),
            ("age", t.age),
            ("past its timeout", t.expired),
            ("partitions (first offset)", t.partitions),
            ("updated", t.updated_at),
        ],
    )


@click.group(cls=OpsGroup)
def txns() -> None:
    """Inspect and abort transactions."""


@txns.command(name="list")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(TXN_STATES),
    help="Only transactional ids in this state (repeatable).",
)
@json_option
@click.pass_obj
def list_(obj: CliContext, states: tuple[str, ...], as_json: bool) -> None:
    """List transactional ids with their coordinator state."""
    with admin_for(obj) as admin:
        found = admin.list_transactions(list(states) or None)
    emit(as_json, found, _table(None, found))


@txns.command()
@click.argument("transactional_id")
@json_option
@click.pass_obj
def describe(obj: CliContext, transactional_id: str, as_json: bool) -> None:
    """Show the coordinator state of TRANSACTIONAL_ID."""
    with admin_for(obj) as admin:
        found = admin.describe_transaction(transactional_id)
    emit(as_json, found, _fields(found))


@txns.command(name="find-hanging")
@click.option(
    "--older-than",
    type=click.FloatRange(min=0),
    default=HANGING_AFTER.total_seconds() / 60,
    show_default=True,
    help="Minutes a transaction has been open.",
)
@json_option
@click.pass_obj
def find_hanging(obj: CliContext, older_than: float, as_json: bool) -> None:
    """List open transactions older than --older-than minutes: the ones holding last stable offsets back."""
    with admin_for(obj) as admin:
        found = admin.find_hanging_transactions(timedelta(minutes=older_than))
    emit(
        as_json,
        found,
        _table(f"open for more than {older_than:g} minutes", found) if found else "no hanging transactions",
    )


@txns.command()
@click.argument("transactional_id")
@json_option
@click.pass_obj
def abort(obj: CliContext, transactional_id: str, as_json: bool) -> None:
    """Abort the open transaction of TRANSACTIONAL_ID: its producer is fenced, its records are
    marked aborted and its pending offsets dropped."""
    with admin_for(obj) as admin:
        before = admin.describe_transaction(transactional_id)
        admin.abort_transaction(transactional_id)
        after = admin.describe_transaction(transactional_id)
    emit(
        as_json,
        after,
        f"aborted transaction {before.txn_number} of {transactional_id} "
        f"(producer {before.producer_id} fenced at epoch {before.producer_epoch}; now {after.state})",
    )
