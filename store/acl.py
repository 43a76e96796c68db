"""Access control lists (migration 0009): the ACL tables' models and the administration calls.

The checks themselves live in the SQL functions (``acl_require_v1`` inside every protocol
function, ``acl_allowed_v1`` in the views), so psql and JDBC callers are held to them too; this
module only creates, deletes and lists ACLs and switches enforcement (docs/acl.md).

The two tables (``acls``, ``acl_settings``) are modelled with the others in
:mod:`oncelog.store.schema`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from oncelog.store.errors import mapped_errors
from oncelog.store.schema import acl_settings
from oncelog.types import AclBinding, AclBindingFilter


def _driver(conn: sa.Connection, sql: str, params: dict[str, Any]) -> sa.CursorResult[Any]:
    with mapped_errors():
        return conn.exec_driver_sql(sql, params)


def _binding(row: Any) -> AclBinding:
    return AclBinding(
        principal=row.principal,
        resource_type=row.resource_type,
        resource_name=row.resource_name,
        pattern_type=row.pattern_type,
        operation=row.operation,
    )


def _filter_params(acl_filter: AclBindingFilter) -> dict[str, Any]:
    return {
        "principal": acl_filter.principal,
        "type": acl_filter.resource_type,
        "name": acl_filter.resource_name,
        "pattern": acl_filter.pattern_type,
        "op": acl_filter.operation,
    }


def create_acls(conn: sa.Connection, bindings: Iterable[AclBinding]) -> list[AclBinding]:
    """CreateAcls, in the caller's transaction; returns the bindings that did not exist yet.

    InvalidRequestError for an unknown role, a resource type, pattern type or operation that does
    not fit, or a name that is not valid for its resource type."""
    created = []
    for binding in bindings:
        new = _driver(
            conn,
            "SELECT create_acl_v1(%(principal)s, %(type)s, %(name)s, %(pattern)s, %(op)s)",
            {
                "principal": binding.principal,
                "type": binding.resource_type,
                "name": binding.resource_name,
                "pattern": binding.pattern_type,
                "op": binding.operation,
            },
        ).scalar_one()
        if new:
            created.append(binding)
    return created


def delete_acls(conn: sa.Connection, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
    """DeleteAcls: remove every ACL matching one of ``filters`` (None fields match anything);
    returns what was removed."""
    gone: list[AclBinding] = []
    for acl_filter in filters:
        rows = _driver(
            conn,
            "SELECT principal, resource_type, resource_name, pattern_type, operation FROM delete_acls_v1("
            "%(principal)s, %(type)s, %(name)s, %(pattern)s, %(op)s)",
            _filter_params(acl_filter),
        ).all()
        gone.extend(_binding(r) for r in rows)
    return gone


def describe_acls(conn: sa.Connection, acl_filter: AclBindingFilter) -> list[AclBinding]:
    """DescribeAcls: the ACLs matching ``acl_filter``, ordered by principal, then resource."""
    rows = _driver(
        conn,
        "SELECT principal, resource_type, resource_name, pattern_type, operation FROM describe_acls_v1("
        "%(principal)s, %(type)s, %(name)s, %(pattern)s, %(op)s)",
        _filter_params(acl_filter),
    ).all()
    return [_binding(r) for r in rows]


def set_acl_enforcement(conn: sa.Connection, *, enforce: bool) -> bool:
    """Switch ACL enforcement on or off; returns the previous setting."""
    return bool(_driver(conn, "SELECT set_acl_enforcement_v1(%(on)s)", {"on": enforce}).scalar_one())


def acl_enforcement(conn: sa.Connection) -> bool:
    """Whether this installation enforces its ACLs."""
    with mapped_errors():
        return bool(conn.execute(sa.select(acl_settings.c.enforce)).scalar_one())
