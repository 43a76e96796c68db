"""Consumer group operations: JoinGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch and
TxnOffsetCommit (KIP-447). The store computes assignments; a member learns its partitions from
the join and every heartbeat."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from oncelog.store import txn
from oncelog.store.errors import mapped_errors


@dataclass(frozen=True, slots=True)
class Membership:
    """A member's view of its group after a join or heartbeat."""

    member_id: str
    generation: int
    assignment: frozenset[tuple[str, int]]


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
) -> Membership:
    """JoinGroup: join (or rejoin) and get the member id, generation and assignment."""
    row = _call(
        conn,
        "SELECT member_id, generation, topics, partitions FROM join_group_v1(%(g)s, %(m)s, %(i)s, %(c)s, "
        "%(t)s::text[], %(s)s, %(a)s)",
        {
            "g": group_id,
            "m": member_id,
            "i": group_instance_id,
            "c": client_id,
            "t": sorted(set(topics)),
            "s": session_timeout_ms,
            "a": assignor,
        },
    ).one()
    return Membership(row.member_id, int(row.generation), _assignment(row.topics, row.partitions))


def heartbeat(
    conn: sa.Connection, *, group_id: str, member_id: str, group_instance_id: str | None = None
) -> Membership:
    """Heartbeat: stay a member; returns the current generation and this member's assignment."""
    row = _call(
        conn,
        "SELECT generation, topics, partitions FROM heartbeat_v1(%(g)s, %(m)s, %(i)s)",
        {"g": group_id, "m": member_id, "i": group_instance_id},
    ).one()
    return Membership(member_id, int(row.generation), _assignment(row.topics, row.partitions))


def leave_group(conn: sa.Connection, *, group_id: str, member_id: str) -> None:
    """LeaveGroup: the rest of the group is rebalanced at once."""
    _call(conn, "SELECT leave_group_v1(%(g)s, %(m)s)", {"g": group_id, "m": member_id})


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
        time.sleep(backoff)
        backoff = min(backoff * 2, max_backoff_s)
