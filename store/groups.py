"""Consumer group operations: JoinGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch and
TxnOffsetCommit (KIP-447). The store computes assignments; a member learns its partitions from
the join and every heartbeat, and names in each heartbeat the partitions it still holds: a
partition passes to its next owner only once its owner let go of it (KIP-848)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from oncelog.store import log, runtime, txn
from oncelog.store.errors import mapped_errors


@dataclass(frozen=True, slots=True)
class Membership:
    """A member's view of its group after a join or heartbeat.

    ``assignment`` is what the member owns and keeps: it is to revoke whatever else it holds and
    then stop naming it (the next heartbeat lets go of it). ``reconciling``: the member has
    partitions to give up or partitions to come once their owners let go, so it should
    heartbeat again soon.
    """

    member_id: str
    generation: int
    assignment: frozenset[tuple[str, int]]
    reconciling: bool = False


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """OffsetFetch's answer for one partition (``offset`` None: nothing committed)."""

    offset: int | None
    metadata: str
    error: str | None
    expired_transaction: bool


def _call(conn: sa.Connection, sql: str, params: dict[str, Any]) -> sa.CursorResult[Any]:
    with mapped_errors():
        return conn.exec_driver_sql(sql, params)


def _assignment(topics: list[str], partitions: list[int]) -> frozenset[tuple[str, int]]:
    return frozenset(zip(topics, partitions, strict=True))


def join_group(
    conn: sa.Connection,
    *,
    group_id: str,
    topics: Iterable[str],
    session_timeout_ms: int,
    assignor: str = "range",
    member_id: str | None = None,
    group_instance_id: str | None = None,
    client_id: str | None = None,
    owned: Iterable[tuple[str, int]] = (),
) -> Membership:
    """JoinGroup: join (or rejoin with ``member_id``, naming the partitions it still holds in
    ``owned``) and get the member id, generation and assignment."""
    held = sorted(set(owned))
    row = _call(
        conn,
        "SELECT member_id, generation, topics, partitions, reconciling FROM join_group_v2(%(g)s, %(m)s, %(i)s, "
        "%(c)s, %(t)s::text[], %(s)s, %(a)s, %(ot)s::text[], %(op)s::integer[])",
        {
            "g": group_id,
            "m": member_id,
            "i": group_instance_id,
            "c": client_id,
            "t": sorted(set(topics)),
            "s": session_timeout_ms,
            "a": assignor,
            "ot": [t for t, _ in held],
            "op": [p for _, p in held],
        },
    ).one()
    return Membership(
        row.member_id, int(row.generation), _assignment(row.topics, row.partitions), bool(row.reconciling)
    )


def heartbeat(
    conn: sa.Connection,
    *,
    group_id: str,
    member_id: str,
    group_instance_id: str | None = None,
    owned: Iterable[tuple[str, int]] = (),
) -> Membership:
    """Heartbeat (KIP-848's ConsumerGroupHeartbeat): stay a member, let go of the partitions it
    owns but no longer names in ``owned`` and no longer targets; returns the generation and what
    it owns and keeps."""
    held = sorted(set(owned))
    row = _call(
        conn,
        "SELECT generation, topics, partitions, reconciling FROM heartbeat_v2(%(g)s, %(m)s, %(i)s, "
        "%(ot)s::text[], %(op)s::integer[])",
        {"g": group_id, "m": member_id, "i": group_instance_id, "ot": [t for t, _ in held], "op": [p for _, p in held]},
    ).one()
    return Membership(member_id, int(row.generation), _assignment(row.topics, row.partitions), bool(row.reconciling))


def listen_for_changes(conn: sa.Connection) -> str:
    """LISTEN on ``conn`` (in autocommit) for changes of every group's target or owners, which
    the store announces with the group id's md5 (:func:`change_digest`); returns the channel."""
    return str(_call(conn, "SELECT group_listen_v1()", {}).scalar_one())


def change_digest(group_id: str) -> str:
    """The payload with which the store announces a change of ``group_id``."""
    return hashlib.md5(group_id.encode(), usedforsecurity=False).hexdigest()


def await_change(conn: sa.Connection, channel: str, digest: str, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds on ``conn`` (see :func:`listen_for_changes`) for a change of
    the group whose :func:`change_digest` is ``digest``; True if one came. Announcements of
    other groups are passed over."""
    return log.await_notification(conn, channel, digest.__eq__, timeout)


def leave_group(conn: sa.Connection, *, group_id: str, member_id: str) -> None:
    """LeaveGroup: the rest of the group is rebalanced at once."""
    _call(conn, "SELECT leave_group_v1(%(g)s, %(m)s)", {"g": group_id, "m": member_id})


def leave_group_members(
    conn: sa.Connection, *, group_id: str, members: Sequence[tuple[str | None, str | None]]
) -> list[tuple[str | None, str | None, str | None]]:
    """LeaveGroup v3 and later (KIP-345): remove each (member id, group instance id) named, by its
    instance id when given (a member id beside it must match); the rest of the group is
    rebalanced once. Per member, in order: (member id, instance id, error), the error None when
    it was removed, else ``unknown_member_id`` (none such, or one the caller may not remove: only
    its joining principal, the owner or the admin role may) or ``fenced_instance_id``.
    GroupIdNotFoundError for an unknown group."""
    rows = _call(
        conn,
        "SELECT member_id, group_instance_id, error FROM leave_group_members_v1(%(g)s, %(m)s::text[], "
        "%(i)s::text[]) ORDER BY idx",
        {"g": group_id, "m": [m for m, _ in members], "i": [i for _, i in members]},
    ).all()
    return [(r.member_id, r.group_instance_id, r.error) for r in rows]


def _unzip(offsets: Mapping[tuple[str, int], tuple[int, str]]) -> dict[str, list[Any]]:
    keys = list(offsets)
    return {
        "t": [t for t, _ in keys],
        "p": [p for _, p in keys],
        "o": [offsets[k][0] for k in keys],
        "md": [offsets[k][1] for k in keys],
    }


def offset_commit(
    conn: sa.Connection,
    *,
    group_id: str,
    offsets: Mapping[tuple[str, int], tuple[int, str]],
    member_id: str | None = None,
    group_instance_id: str | None = None,
    generation: int | None = None,
) -> None:
    """OffsetCommit of ``{(topic, partition): (offset, metadata)}`` by a member in ``generation``
    (or, with no member id, by a standalone consumer while the group has no members)."""
    _call(
        conn,
        "SELECT offset_commit_v1(%(g)s, %(m)s, %(i)s, %(gen)s, %(t)s::text[], %(p)s::integer[], %(o)s::bigint[], "
        "%(md)s::text[])",
        {"g": group_id, "m": member_id, "i": group_instance_id, "gen": generation, **_unzip(offsets)},
    )


def lock_standalone_commit(conn: sa.Connection, *, group_id: str, timeout_ms: int) -> None:
    """Until ``conn``'s transaction ends, hold the lock that the standalone commits of
    ``group_id``'s pipeline runs share (a transaction-level advisory lock named after the group),
    so that one run at a time compares the group's offsets with where it started and commits.

    Anyone may take an advisory lock, a hostile client this one too: the wait ends after
    ``timeout_ms`` (lock_timeout, for the rest of this transaction) with RequestTimeoutError."""
    _call(conn, "SELECT set_config('lock_timeout', %(t)s, true)", {"t": f"{max(int(timeout_ms), 1)}ms"})
    _call(conn, "SELECT pg_advisory_xact_lock(hashtextextended('oncelog standalone commit ' || %(g)s, 0))",
          {"g": group_id})  # fmt: skip


def offset_fetch(
    conn: sa.Connection, *, group_id: str, partitions: Iterable[tuple[str, int]], require_stable: bool = True
) -> dict[tuple[str, int], CommittedOffset]:
    """OffsetFetch; with ``require_stable`` a partition whose offsets a transaction holds answers
    ``error='unstable_offset_commit'`` (retry after that transaction ends)."""
    keys = list(partitions)
    rows = _call(
        conn,
        "SELECT topic, partition, committed_offset, metadata, error, expired_transaction FROM offset_fetch_v1("
        "%(g)s, %(t)s::text[], %(p)s::integer[], %(s)s)",
        {"g": group_id, "t": [t for t, _ in keys], "p": [p for _, p in keys], "s": require_stable},
    ).all()
    return {
        (r.topic, r.partition): CommittedOffset(
            None if r.committed_offset is None else int(r.committed_offset),
            r.metadata or "",
            r.error,
            bool(r.expired_transaction),
        )
        for r in rows
    }


def txn_offset_commit(
    conn: sa.Connection,
    *,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    txn_number: int,
    group_id: str,
    member_id: str,
    group_instance_id: str | None,
    generation: int,
    offsets: Mapping[tuple[str, int], tuple[int, str]],
) -> None:
    """TxnOffsetCommit: offsets pending in the transaction, applied by its commit (KIP-447)."""
    _call(
        conn,
        "SELECT txn_offset_commit_v1(%(tid)s, %(pid)s, %(e)s::smallint, %(n)s, %(g)s, %(m)s, %(i)s, %(gen)s, "
        "%(t)s::text[], %(p)s::integer[], %(o)s::bigint[], %(md)s::text[])",
        {
            "tid": transactional_id,
            "pid": producer_id,
            "e": epoch,
            "n": txn_number,
            "g": group_id,
            "m": member_id,
            "i": group_instance_id,
            "gen": generation,
            **_unzip(offsets),
        },
    )


def offset_fetch_stable(
    conn: sa.Connection,
    *,
    group_id: str,
    partitions: Iterable[tuple[str, int]],
    require_stable: bool = True,
    wait_s: float = 0.0,
    min_backoff_s: float = 0.005,
    max_backoff_s: float = 0.2,
) -> dict[tuple[str, int], CommittedOffset]:
    """OffsetFetch that waits up to ``wait_s`` (backing off) while open transactions hold pending
    offsets, and aborts such a transaction itself once it is past its timeout, as a reader.

    ``conn`` must be in autocommit: the abort has to commit for others to see it. Returns the last
    answers; some may still say ``unstable_offset_commit`` when the wait ran out.
    """
    keys = list(partitions)
    deadline = time.monotonic() + wait_s
    backoff = min_backoff_s
    while True:
        answers = offset_fetch(conn, group_id=group_id, partitions=keys, require_stable=require_stable)
        if any(a.expired_transaction for a in answers.values()) and txn.expire_transactions(conn):
            continue  # ask again at once: the abort released the partitions it held
        # Nothing aborted (another session holds the expired transaction's row right now, and
        # expire_transactions skips locked rows): wait and back off like any unstable answer.
        unstable = any(a.error == "unstable_offset_commit" or a.expired_transaction for a in answers.values())
        if not unstable or time.monotonic() + backoff > deadline:
            return answers
        runtime.sleep(backoff)
        backoff = min(backoff * 2, max_backoff_s)
