"""``oncelog groups list|describe|lag|delete|delete-offsets|reset-offsets``: consumer groups and their offsets."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click
from rich.table import Table

from oncelog.admin import Admin
from oncelog.cli.context import CliContext
from oncelog.cli.render import OpsGroup, admin_for, emit, fields, json_option, state, table
from oncelog.errors import GroupIdNotFoundError, InvalidRequestError, UnknownTopicOrPartitionError
from oncelog.types import PartitionLag, TopicPartition


def _lag_table(title: str | None, rows: Sequence[PartitionLag]) -> Table:
    return table(
        title,
        [
            "topic",
            "partition",
            "committed",
            "log start",
            "high watermark",
            "last stable",
            "lag",
            "lag (committed)",
            "member",
            "pending in",
        ],
        [
            (
                r.topic,
                r.partition,
                r.committed_offset,
                r.log_start_offset,
                r.high_watermark,
                r.last_stable_offset,
                r.lag,
                r.lag_committed,
                r.member_id,
                r.pending_transactional_ids,
            )
            for r in rows
        ],
        numeric=["partition", "committed", "log start", "high watermark", "last stable", "lag", "lag (committed)"],
    )


@click.group(cls=OpsGroup)
def groups() -> None:
    """Inspect consumer groups; reset their offsets."""


@groups.command(name="list")
@json_option
@click.pass_obj
def list_(obj: CliContext, as_json: bool) -> None:
    """List consumer groups with their state and number of members."""
    with admin_for(obj) as admin:
        found = admin.list_groups()
    emit(
        as_json,
        found,
        table(
            None,
            ["group", "state", "generation", "assignor", "members"],
            [(g.group_id, state(g.state), g.generation, g.assignor, g.members) for g in found],
            numeric=["generation", "members"],
        ),
    )


@groups.command()
@click.argument("group")
@json_option
@click.pass_obj
def describe(obj: CliContext, group: str, as_json: bool) -> None:
    """Show GROUP: state, members with their assignments, and offsets with lag."""
    with admin_for(obj) as admin:
        found = admin.describe_group(group)
    emit(
        as_json,
        found,
        fields(
            f"group {found.group_id}",
            [
                ("state", state(found.state)),
                ("generation", found.generation),
                ("assignor", found.assignor),
                ("members", len(found.members)),
            ],
        ),
        table(
            "members",
            ["member", "instance id", "client id", "subscription", "assignment", "target", "last heartbeat", "expired"],
            [
                (
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.subscription,
                    m.assignment,
                    m.target,
                    m.last_heartbeat_at,
                    m.expired,
                )
                for m in found.members
            ],
        ),
        _lag_table("offsets", found.offsets),
    )


@groups.command()
@click.argument("group")
@json_option
@click.pass_obj
def lag(obj: CliContext, group: str, as_json: bool) -> None:
    """Show GROUP's committed offset and lag per partition, and the total lag."""
    with admin_for(obj) as admin:
        found = admin.group_lag(group)
    total = sum(r.lag or 0 for r in found)
    total_committed = sum(r.lag_committed or 0 for r in found)
    emit(
        as_json,
        {"group": group, "total_lag": total, "total_lag_committed": total_committed, "partitions": found},
        _lag_table(f"group {group}: total lag {total} ({total_committed} committed)", found),
    )


# --- reset-offsets -------------------------------------------------------------------------------


def _scope(admin: Admin, group: str, topics: tuple[str, ...], all_topics: bool) -> list[TopicPartition]:
    """The partitions named by ``--topic NAME[:P,P...]`` or ``--all-topics`` (those the group has offsets for)."""
    if all_topics:
        found = sorted(
            {TopicPartition(r.topic, r.partition) for r in admin.group_lag(group) if r.committed_offset is not None}
        )
        if not found:
            raise InvalidRequestError(f"group {group!r} has no committed offsets: name the partitions with --topic")
        return found
    out: list[TopicPartition] = []
    for spec in topics:
        name, _, numbers = spec.partition(":")
        existing = [p.partition for p in admin.list_offsets(name)]
        if not numbers:
            out.extend(TopicPartition(name, p) for p in existing)
            continue
        try:
            wanted = [int(n) for n in numbers.split(",")]
        except ValueError:
            raise InvalidRequestError(f"expected --topic NAME or NAME:P,P..., not {spec!r}") from None
        for p in wanted:
            if p not in existing:
                raise UnknownTopicOrPartitionError(f"unknown partition {name}-{p}")
            out.append(TopicPartition(name, p))
    return out


def _targets(
    admin: Admin,
    group: str,
    scope: list[TopicPartition],
    *,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    shift_by: int | None,
    to_datetime: datetime | None,
) -> dict[TopicPartition, int]:
    """The new offset of every partition in ``scope``, computed here; the store checks and writes it."""
    bounds = {}
    for topic in sorted({tp.topic for tp in scope}):
        for p in admin.list_offsets(topic):
            bounds[TopicPartition(topic, p.partition)] = (p.log_start_offset, p.high_watermark)
    if to_earliest:
        return {tp: bounds[tp][0] for tp in scope}
    if to_latest:
        return {tp: bounds[tp][1] for tp in scope}
    if to_offset is not None:
        # Not clamped: an explicit offset outside the log is a mistake the store refuses, by name.
        return {tp: to_offset for tp in scope}
    if to_datetime is not None:
        found: dict[TopicPartition, int] = {}
        for topic in sorted({tp.topic for tp in scope}):
            found.update(admin.offsets_for_times(topic, to_datetime))
        return {tp: found[tp] for tp in scope}
    if shift_by is None:  # exactly one target was checked by the caller
        raise InvalidRequestError("give one target: --to-offset, --to-datetime or --shift-by")
    try:
        positions = admin.group_lag(group)
    except GroupIdNotFoundError:
        positions = []
    committed = {TopicPartition(r.topic, r.partition): r.committed_offset for r in positions}
    out = {}
    for tp in scope:
        current = committed.get(tp)
        if current is None:
            raise InvalidRequestError(f"group {group!r} has no committed offset on {tp.topic}-{tp.partition} to shift")
        low, high = bounds[tp]
        # Clamped to the log, as Kafka's tool does: a shift is relative, the log's ends are its limits.
        out[tp] = min(max(current + shift_by, low), high)
    return out


def _parse_datetime(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"expected an ISO 8601 date and time (2026-11-21T13:00:00+00:00), not {value!r}"
        ) from None
    # Without a zone, the operator means local time (as Kafka's tool does).
    return parsed if parsed.tzinfo is not None else parsed.astimezone()


@groups.command()
@click.argument("group")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def delete(obj: CliContext, group: str, yes: bool, as_json: bool) -> None:
    """Delete GROUP and its committed offsets; it must have no live members and no offsets
    pending in an open transaction."""
    with admin_for(obj) as admin:
        admin.describe_group(group)  # unknown group: say so before asking
        if not yes:
            click.confirm(f"delete group {group} and its committed offsets?", abort=True, err=True)
        admin.delete_group(group)
    emit(as_json, {"deleted": group}, f"deleted group {group}")


@groups.command(name="delete-offsets")
@click.argument("group")
@click.option(
    "--topic", "topics", multiple=True, required=True, metavar="NAME[:P,P...]", help="Topic, or some of its partitions."
)
@json_option
@click.pass_obj
def delete_offsets(obj: CliContext, group: str, topics: tuple[str, ...], as_json: bool) -> None:
    """Delete GROUP's committed offsets of these partitions (Kafka's --delete-offsets): its
    consumers then start them by auto_offset_reset. Those of a topic a live member subscribes to
    stay; the command then exits 1."""
    with admin_for(obj) as admin:
        outcome = admin.delete_group_offsets(group, _scope(admin, group, topics, False))
    rows: list[dict[str, Any]] = []
    table = Table(title=f"group {group}: offsets deleted")
    for name in ("topic", "partition", "deleted", "why not"):
        table.add_column(name)
    for tp, error in outcome.items():
        why = "" if error is None else str(error)
        rows.append({"topic": tp.topic, "partition": tp.partition, "deleted": error is None, "error": why or None})
        table.add_row(tp.topic, str(tp.partition), "no" if why else "yes", why)
    emit(as_json, {"group": group, "offsets": rows}, table)
    if any(not r["deleted"] for r in rows):
        raise click.exceptions.Exit(1)


@groups.command(name="reset-offsets")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, metavar="NAME[:P,P...]", help="Topic, or some of its partitions.")
@click.option("--all-topics", is_flag=True, help="Every partition the group has committed offsets for.")
@click.option("--to-earliest", is_flag=True, help="To the log start offset.")
@click.option("--to-latest", is_flag=True, help="To the high watermark.")
@click.option("--to-offset", type=int, default=None, help="To this offset (must be inside the log).")
@click.option("--shift-by", type=int, default=None, help="Move the committed offset by N (clamped to the log).")
@click.option(
    "--to-datetime",
    default=None,
    callback=_parse_datetime,
    metavar="ISO8601",
    help="To the first record at or after this time (local time without a zone).",
)
@click.option("--execute", is_flag=True, help="Write the new offsets (without it: a dry run that changes nothing).")
@json_option
@click.pass_obj
def reset_offsets(
    obj: CliContext,
    *,
    group: str,
    topics: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    shift_by: int | None,
    to_datetime: datetime | None,
    execute: bool,
    as_json: bool,
) -> None:
    """Reset GROUP's committed offsets; the group must have no live members.

    A dry run by default: the plan is checked exactly as the write would be and printed, and
    nothing changes. Add --execute to write it.
    """
    chosen = [to_earliest, to_latest, to_offset is not None, shift_by is not None, to_datetime is not None]
    if sum(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --shift-by, --to-datetime")
    if bool(topics) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    with admin_for(obj) as admin:
        scope = _scope(admin, group, topics, all_topics)
        targets = _targets(
            admin,
            group,
            scope,
            to_earliest=to_earliest,
            to_latest=to_latest,
            to_offset=to_offset,
            shift_by=shift_by,
            to_datetime=to_datetime,
        )
        done = admin.reset_group_offsets(group, targets, dry_run=not execute)
    title = f"group {group}: offsets reset" if execute else f"group {group}: dry run, nothing changed (add --execute)"
    emit(
        as_json,
        {"group": group, "executed": execute, "offsets": done},
        table(
            title,
            ["topic", "partition", "current", "new"],
            [(r.topic, r.partition, r.previous_offset, r.new_offset) for r in done],
            numeric=["partition", "current", "new"],
        ),
    )
