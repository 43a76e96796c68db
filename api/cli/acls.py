"""``oncelog acls list|add|remove|enforce``: per-topic access control (Kafka's kafka-acls.sh).

An ACL allows a PostgreSQL role (and so every role with its privileges) an operation on topics,
consumer groups or transactional ids, named literally or by prefix. ACLs are enforced only after
``oncelog acls enforce on``; the model is in docs/acl.md. Every command needs the admin role.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast, get_args

import click
from rich.table import Table

from oncelog.cli.context import CliContext
from oncelog.cli.render import OpsGroup, admin_for, emit, json_option, table
from oncelog.types import AclBinding, AclBindingFilter, AclOperation, AclPatternType, AclResourceType

_OPERATIONS = click.Choice(get_args(AclOperation), case_sensitive=False)
_PATTERNS = click.Choice(get_args(AclPatternType), case_sensitive=False)
_TYPES = click.Choice(get_args(AclResourceType), case_sensitive=False)


def _table(title: str | None, found: Sequence[AclBinding]) -> Table:
    return table(
        title,
        ["principal", "resource type", "name", "pattern", "operation"],
        [(a.principal, a.resource_type, a.resource_name, a.pattern_type, a.operation) for a in found],
    )


def _describe_for_prompt(found: Sequence[AclBinding]) -> str:
    """The ACLs a removal would delete, one per line (for the confirmation prompt)."""
    return "\n".join(
        f"  {a.principal}: {a.operation} {a.resource_type.replace('_', ' ')} {a.resource_name!r} ({a.pattern_type})"
        for a in found
    )


def _resources(topics: Sequence[str], groups: Sequence[str], txn_ids: Sequence[str]) -> list[tuple[str, str]]:
    """The ``(resource type, name)`` pairs named by --topic, --group and --transactional-id."""
    return [("topic", n) for n in topics] + [("group", n) for n in groups] + [("transactional_id", n) for n in txn_ids]


def _filter(
    *,
    principal: str | None,
    resource_type: str | None,
    topics: Sequence[str],
    groups: Sequence[str],
    txn_ids: Sequence[str],
    pattern_type: str | None,
    operation: str | None,
) -> AclBindingFilter:
    """The filter of ``list`` and ``remove``: at most one resource, by name or by type."""
    named = _resources(topics, groups, txn_ids)
    if len(named) > 1 or (named and resource_type is not None):
        raise click.UsageError("give at most one of --topic, --group, --transactional-id, --resource-type")
    kind, name = named[0] if named else (resource_type, None)
    return AclBindingFilter(
        principal=principal,
        resource_type=cast("AclResourceType | None", kind.lower() if kind else None),
        resource_name=name,
        operation=cast("AclOperation | None", operation.lower() if operation else None),
        pattern_type=cast("AclPatternType | None", pattern_type.lower() if pattern_type else None),
    )


_principal = click.option("--principal", metavar="ROLE", default=None, help="The role the ACL allows.")
_topic = click.option("--topic", "topics", multiple=True, metavar="NAME", help="A topic (name or prefix).")
_group = click.option("--group", "groups", multiple=True, metavar="ID", help="A consumer group (id or prefix).")
_txn = click.option(
    "--transactional-id", "txn_ids", multiple=True, metavar="ID", help="A transactional id (id or prefix)."
)


@click.group(cls=OpsGroup)
def acls() -> None:
    """List, add and remove ACLs; switch their enforcement on or off (admin role)."""


@acls.command(name="list")
@_principal
@_topic
@_group
@_txn
@click.option("--resource-type", type=_TYPES, default=None, help="Only ACLs on this kind of resource.")
@click.option("--pattern-type", type=_PATTERNS, default=None, help="Only literal or only prefixed ACLs.")
@click.option("--operation", type=_OPERATIONS, default=None, help="Only ACLs allowing this operation.")
@json_option
@click.pass_obj
def list_(
    obj: CliContext,
    *,
    principal: str | None,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    txn_ids: tuple[str, ...],
    resource_type: str | None,
    pattern_type: str | None,
    operation: str | None,
    as_json: bool,
) -> None:
    """List ACLs (all, or those matching the options; names match exactly, not as patterns)."""
    acl_filter = _filter(
        principal=principal,
        resource_type=resource_type,
        topics=topics,
        groups=groups,
        txn_ids=txn_ids,
        pattern_type=pattern_type,
        operation=operation,
    )
    with admin_for(obj) as admin:
        found = admin.describe_acls(acl_filter)
        enforced = admin.acl_enforcement()
    emit(
        as_json,
        found,
        _table(f"ACLs (enforcement {'on' if enforced else 'off'})", found),
    )


@acls.command()
@click.option("--principal", metavar="ROLE", required=True, help="The role to allow (and every role it is granted to).")
@_topic
@_group
@_txn
@click.option(
    "--pattern-type",
    type=_PATTERNS,
    default="literal",
    show_default=True,
    help="literal: the exact name (* is every name); prefixed: every name starting with it.",
)
@click.option(
    "--operation",
    "operations",
    type=_OPERATIONS,
    multiple=True,
    required=True,
    help="What to allow (repeatable): read, write, describe (implied by read and write), all.",
)
@json_option
@click.pass_obj
def add(
    obj: CliContext,
    *,
    principal: str,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    txn_ids: tuple[str, ...],
    pattern_type: str,
    operations: tuple[str, ...],
    as_json: bool,
) -> None:
    """Allow ROLE each --operation on each resource named (all ACLs or none are created)."""
    resources = _resources(topics, groups, txn_ids)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group or --transactional-id")
    wanted = [
        AclBinding(
            principal=principal,
            resource_type=cast("AclResourceType", kind),
            resource_name=name,
            operation=cast("AclOperation", op.lower()),
            pattern_type=cast("AclPatternType", pattern_type.lower()),
        )
        for kind, name in resources
        for op in dict.fromkeys(operations)
    ]
    with admin_for(obj) as admin:
        created = admin.create_acls(wanted)
    existing = [a for a in wanted if a not in created]
    emit(
        as_json,
        {"created": created, "existing": existing},
        _table(f"created {len(created)} ACL(s)", created),
        *([_table(f"{len(existing)} already existed", existing)] if existing else []),
    )


@acls.command()
@_principal
@_topic
@_group
@_txn
@click.option("--resource-type", type=_TYPES, default=None, help="Only ACLs on this kind of resource.")
@click.option("--pattern-type", type=_PATTERNS, default=None, help="Only literal or only prefixed ACLs.")
@click.option("--operation", type=_OPERATIONS, default=None, help="Only ACLs allowing this operation.")
@click.option("--all", "everything", is_flag=True, help="Remove every ACL (when no other option is given).")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def remove(
    obj: CliContext,
    *,
    principal: str | None,
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    txn_ids: tuple[str, ...],
    resource_type: str | None,
    pattern_type: str | None,
    operation: str | None,
    everything: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Remove the ACLs matching the options (names match exactly, not as patterns)."""
    acl_filter = _filter(
        principal=principal,
        resource_type=resource_type,
        topics=topics,
        groups=groups,
        txn_ids=txn_ids,
        pattern_type=pattern_type,
        operation=operation,
    )
    if acl_filter == AclBindingFilter() and not everything:
        raise click.UsageError("give a filter (--principal, --topic, ...), or --all to remove every ACL")
    with admin_for(obj) as admin:
        matching = admin.describe_acls(acl_filter)
        if matching and not yes:
            click.echo(_describe_for_prompt(matching), err=True)
            click.confirm(f"remove these {len(matching)} ACL(s)?", abort=True, err=True)
        gone = admin.delete_acls([acl_filter]) if matching else []
    emit(as_json, {"removed": gone}, _table(f"removed {len(gone)} ACL(s)", gone))


@acls.command()
@click.argument("state", required=False, type=click.Choice(["on", "off"], case_sensitive=False))
@json_option
@click.pass_obj
def enforce(obj: CliContext, state: str | None, as_json: bool) -> None:
    """Show whether ACLs are enforced, or switch enforcement on or off (STATE)."""
    with admin_for(obj) as admin:
        previous = admin.set_acl_enforcement(state.lower() == "on") if state is not None else None
        enforced = admin.acl_enforcement()
        count = len(admin.describe_acls())
    if enforced and count == 0:
        click.secho(
            "warning: enforcement is on and there are no ACLs: every client and reader role is refused",
            fg="yellow",
            err=True,
        )
    if previous is None:
        text = f"ACL enforcement is {'on' if enforced else 'off'} ({count} ACL(s))"
    else:
        text = f"ACL enforcement: {'on' if enforced else 'off'} (was {'on' if previous else 'off'}; {count} ACL(s))"
    emit(as_json, {"enforce": enforced, "previous": previous, "acls": count}, text)
