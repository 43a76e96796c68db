"""Kafka's ACL APIs over the store's ACLs: CreateAcls, DescribeAcls, DeleteAcls (docs/acl.md).

The store's ACLs are Kafka's allow ACLs for three resource types (topics, groups, transactional
ids) and four operations (read, write, describe, all), for principals that are PostgreSQL roles
(``User:billing_app`` is the role ``billing_app``), from any host. What does not fit (DENY, a
host other than ``*``, another resource type or operation, a principal type other than
``User``) is refused with INVALID_REQUEST and a message naming it, never stored as something
else. Only the admin role may create, delete or list ACLs (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from oncelog import errors
from oncelog.broker.common import INVALID_REQUEST, NONE, Database, admin_error_code
from oncelog.store import acl
from oncelog.types import AclBinding, AclBindingFilter, AclOperation, AclPatternType, AclResourceType

T = TypeVar("T")

__all__ = ["AclHandlers"]

#: Kafka's ResourceType, PatternType, AclOperation and AclPermissionType codes the store holds.
_RESOURCE_TYPES: dict[int, AclResourceType] = {2: "topic", 3: "group", 5: "transactional_id"}
_PATTERN_TYPES: dict[int, AclPatternType] = {3: "literal", 4: "prefixed"}
_OPERATIONS: dict[int, AclOperation] = {2: "all", 3: "read", 4: "write", 8: "describe"}
_ANY, _MATCH, _ALLOW = 1, 2, 3
_USER = "User:"


class _Unfit(Exception):
    """A field the store's ACLs cannot hold: INVALID_REQUEST with this message."""


class _MatchesNothing(Exception):
    """A filter no stored ACL can match (a principal that is not ``User:<role>``): Kafka's
    filters compare principals exactly, so the answer is empty, not an error."""


def _pick(codes: dict[int, T], code: int, what: str) -> T:
    if code not in codes:
        raise _Unfit(f"{what} {code} is not one the store's ACLs hold")
    return codes[code]


def _pick_or_any(codes: dict[int, T], code: int, what: str) -> T | None:
    return None if code == _ANY else _pick(codes, code, what)


def _role(principal: str | None, *, any_ok: bool) -> str | None:
    if principal is None and any_ok:
        return None
    if principal is None or not principal.startswith(_USER) or len(principal) == len(_USER):
        raise _Unfit(f"principal {principal!r}: the store's principals are User:<PostgreSQL role>")
    return principal[len(_USER) :]


def _check_host_and_permission(host: str | None, permission: int, *, filtering: bool) -> None:
    if host not in ("*", None) or (host is None and not filtering):
        raise _Unfit(f"host {host!r}: the store's ACLs hold for every host (*)")
    if permission != _ALLOW and not (filtering and permission == _ANY):
        raise _Unfit("the store's ACLs allow; DENY ACLs are not held")


def _binding(c: Any) -> AclBinding:
    _check_host_and_permission(c.host, c.permission_type, filtering=False)
    return AclBinding(
        principal=_role(c.principal, any_ok=False) or "",
        resource_type=_pick(_RESOURCE_TYPES, c.resource_type, "resource type"),
        resource_name=c.resource_name,
        pattern_type=_pick(_PATTERN_TYPES, getattr(c, "resource_pattern_type", 3), "pattern type"),  # v0: literal
        operation=_pick(_OPERATIONS, c.operation, "operation"),
    )


def _filter(f: Any) -> AclBindingFilter:
    _check_host_and_permission(f.host_filter, f.permission_type, filtering=True)
    principal = f.principal_filter
    if principal is not None and not (principal.startswith(_USER) and len(principal) > len(_USER)):
        raise _MatchesNothing
    pattern = getattr(f, "pattern_type_filter", 3)  # v0: literal only
    if pattern == _MATCH:
        raise _Unfit("pattern type MATCH is not served: filter by LITERAL, PREFIXED or ANY")
    return AclBindingFilter(
        principal=_role(f.principal_filter, any_ok=True),
        resource_type=_pick_or_any(_RESOURCE_TYPES, f.resource_type_filter, "resource type"),
        resource_name=f.resource_name_filter,
        pattern_type=_pick_or_any(_PATTERN_TYPES, pattern, "pattern type"),
        operation=_pick_or_any(_OPERATIONS, f.operation, "operation"),
    )


def _codes_of(binding: AclBinding) -> dict[str, Any]:
    """Kafka's codes for a stored ACL."""

    def code(codes: dict[int, Any], name: str) -> int:
        return next(k for k, v in codes.items() if v == name)

    return {
        "resource_type": code(_RESOURCE_TYPES, binding.resource_type),
        "resource_name": binding.resource_name,
        "pattern_type": code(_PATTERN_TYPES, binding.pattern_type),
        "principal": _USER + binding.principal,
        "host": "*",
        "operation": code(_OPERATIONS, binding.operation),
        "permission_type": _ALLOW,
    }


class AclHandlers:
    """CreateAcls, DescribeAcls and DeleteAcls."""

    def __init__(self, database: Database, run: Callable[..., Any]) -> None:
        self._db = database
        self._run = run

    async def create_acls(self, request: Any, response_class: Any) -> Any:
        results = []
        for creation in request.creations:
            code, message = NONE, None
            try:
                await self._run(self._db.call, acl.create_acls, [_binding(creation)])
            except _Unfit as exc:
                code, message = INVALID_REQUEST, str(exc)
            except errors.OncelogError as exc:
                code, message = admin_error_code(exc), exc.message
            results.append(response_class.AclCreationResult(error_code=code, error_message=message))
        return response_class(version=request.version, throttle_time_ms=0, results=results)

    async def describe_acls(self, request: Any, response_class: Any) -> Any:
        def answer(code: int, message: str | None, found: list[AclBinding]) -> Any:
            resource_class = response_class.DescribeAclsResource
            by_resource: dict[tuple[int, str, int], list[Any]] = {}
            for binding in found:
                c = _codes_of(binding)
                by_resource.setdefault((c["resource_type"], c["resource_name"], c["pattern_type"]), []).append(
                    resource_class.AclDescription(
                        principal=c["principal"],
                        host=c["host"],
                        operation=c["operation"],
                        permission_type=c["permission_type"],
                    )
                )
            return response_class(
                version=request.version,
                throttle_time_ms=0,
                error_code=code,
                error_message=message,
                resources=[
                    resource_class(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
                    for (t, n, p), acls in by_resource.items()
                ],
            )

        try:
            found = await self._run(self._db.call, acl.describe_acls, _filter(request))
        except _MatchesNothing:
            return answer(NONE, None, [])
        except _Unfit as exc:
            return answer(INVALID_REQUEST, str(exc), [])
        except errors.OncelogError as exc:
            return answer(admin_error_code(exc), exc.message, [])
        return answer(NONE, None, found)

    async def delete_acls(self, request: Any, response_class: Any) -> Any:
        result_class = response_class.DeleteAclsFilterResult
        results = []
        for f in request.filters:
            code, message, gone = NONE, None, []
            try:
                gone = await self._run(self._db.call, acl.delete_acls, [_filter(f)])
            except _MatchesNothing:
                gone = []
            except _Unfit as exc:
                code, message = INVALID_REQUEST, str(exc)
            except errors.OncelogError as exc:
                code, message = admin_error_code(exc), exc.message
            results.append(
                result_class(
                    error_code=code,
                    error_message=message,
                    matching_acls=[
                        result_class.DeleteAclsMatchingAcl(error_code=NONE, error_message=None, **_codes_of(b))
                        for b in gone
                    ],
                )
            )
        return response_class(version=request.version, throttle_time_ms=0, filter_results=results)
