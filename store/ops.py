"""The operator's questions (``oncelog topics|producers|groups``) and the offset reset.

Reads go through the documented views (``partition_offsets``, ``group_status``, ``group_offsets``,
``pending_group_offsets``) wherever they answer the question, so a reader role can inspect groups
too; producer state and record timestamps live only in base tables, which the admin role reads.
The writes: :func:`reset_group_offsets` calls ``reset_group_offsets_v1`` (migration 0007),
:func:`delete_group` ``delete_group_v1`` (migration 0026).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from oncelog.errors import GroupIdNotFoundError, UnknownTopicOrPartitionError
from oncelog.store.errors import mapped_errors
from oncelog.types import (
    GroupDescription,
    GroupListing,
    GroupMember,
    OffsetReset,
    PartitionLag,
    ProducerState,
    TopicPartition,
    TopicSummary,
)


def _driver(conn: sa.Connection, sql: str, params: dict[str, Any]) -> sa.CursorResult[Any]:
    with mapped_errors():
        return conn.exec_driver_sql(sql, params)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def topic_summaries(conn: sa.Connection) -> list[TopicSummary]:
    """Every topic with its partition count, offsets held, bytes and open transactions."""
    rows = _driver(
        conn,
        "SELECT topic, count(*) AS partitions, sum(high_watermark - log_start_offset) AS offsets, "
        "sum(log_bytes) AS log_bytes, sum(open_transactions) AS open_transactions "
        "FROM partition_offsets GROUP BY topic ORDER BY topic",
        {},
    ).all()
    return [
        TopicSummary(r.topic, int(r.partitions), int(r.offsets), int(r.log_bytes), int(r.open_transactions))
        for r in rows
    ]


def partition_sizes(conn: sa.Connection) -> dict[tuple[str, int], int]:
    """Every partition the caller may describe, with the bytes of keys, values and headers in its
    log (what Kafka's DescribeLogDirs reports as a partition's size)."""
    rows = _driver(
        conn, "SELECT topic, partition, log_bytes FROM partition_offsets ORDER BY topic, partition", {}
    ).all()
    return {(r.topic, int(r.partition)): int(r.log_bytes) for r in rows}


def _require_topic(conn: sa.Connection, topic: str) -> None:
    if _driver(conn, "SELECT 1 FROM topics WHERE name = %(t)s", {"t": topic}).first() is None:
        raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")


def describe_producers(conn: sa.Connection, *, topic: str, partition: int | None = None) -> list[ProducerState]:
    """The producers the store keeps sequence state for on ``topic`` (one partition, or all).

    The window arrays hold the last five batches oldest first, so their last elements describe
    the producer's latest batch."""
    _require_topic(conn, topic)
    rows = _driver(
        conn,
        "SELECT s.partition, s.producer_id, s.epoch, s.last_sequences[cardinality(s.last_sequences)] AS last_sequence, "
        "s.last_offsets[cardinality(s.last_offsets)] AS last_offset, "
        "s.timestamps[cardinality(s.timestamps)] AS last_timestamp, p.transactional_id, "
        "(SELECT tp.first_offset FROM transactions x JOIN txn_partitions tp USING (transactional_id) "
        " WHERE x.producer_id = s.producer_id AND tp.topic_id = s.topic_id AND tp.partition = s.partition "
        "   AND x.state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort')) AS current_txn_start_offset "
        "FROM producer_partition_state s JOIN topics t USING (topic_id) JOIN producers p USING (producer_id) "
        "WHERE t.name = %(t)s AND (%(p)s::integer IS NULL OR s.partition = %(p)s::integer) "
        "ORDER BY s.partition, s.producer_id",
        {"t": topic, "p": partition},
    ).all()
    return [
        ProducerState(
            topic=topic,
            partition=int(r.partition),
            producer_id=int(r.producer_id),
            producer_epoch=int(r.epoch),
            last_sequence=int(r.last_sequence),
            last_offset=int(r.last_offset),
            last_timestamp=r.last_timestamp,
            transactional_id=r.transactional_id,
            current_txn_start_offset=_opt_int(r.current_txn_start_offset),
        )
        for r in rows
    ]


def list_groups(conn: sa.Connection) -> list[GroupListing]:
    """Every consumer group with its state, generation, assignor and number of members."""
    rows = _driver(
        conn,
        "SELECT group_id, state, generation, assignor, count(member_id) AS members FROM group_status "
        "GROUP BY group_id, state, generation, assignor ORDER BY group_id",
        {},
    ).all()
    return [GroupListing(r.group_id, r.state, int(r.generation), r.assignor, int(r.members)) for r in rows]


def _split_assignment(names: list[str] | None) -> tuple[TopicPartition, ...]:
    # group_status spells partitions topic-partition; topic names may contain '-', the number never.
    out = []
    for name in names or []:
        topic, _, number = name.rpartition("-")
        out.append(TopicPartition(topic, int(number)))
    return tuple(out)


def group_lag(conn: sa.Connection, *, group_id: str) -> list[PartitionLag]:
    """The group's position on every partition it has committed offsets for, is assigned, or has
    offsets pending in an open transaction for."""
    _require_group(conn, group_id)
    rows = _driver(
        conn,
        "WITH assigned AS ("
        "  SELECT s.member_id, s.client_id, regexp_replace(a.name, '-[0-9]+$', '') AS topic, "
        "         substring(a.name FROM '-([0-9]+)$')::integer AS partition "
        "  FROM group_status s CROSS JOIN LATERAL unnest(s.assignment) AS a(name) WHERE s.group_id = %(g)s"
        "), pending AS ("
        "  SELECT topic, partition, array_agg(DISTINCT transactional_id ORDER BY transactional_id) AS ids "
        "  FROM pending_group_offsets WHERE group_id = %(g)s GROUP BY topic, partition"
        "), wanted AS ("
        "  SELECT topic, partition FROM group_offsets WHERE group_id = %(g)s "
        "  UNION SELECT topic, partition FROM assigned UNION SELECT topic, partition FROM pending"
        ") "
        "SELECT w.topic, w.partition, c.committed_offset, o.log_start_offset, o.high_watermark, "
        "       o.last_stable_offset, c.lag, c.lag_committed, a.member_id, a.client_id, "
        "       coalesce(p.ids, '{}') AS pending "
        "FROM wanted w "
        "JOIN partition_offsets o ON o.topic = w.topic AND o.partition = w.partition "
        "LEFT JOIN group_offsets c ON c.group_id = %(g)s AND c.topic = w.topic AND c.partition = w.partition "
        "LEFT JOIN assigned a ON a.topic = w.topic AND a.partition = w.partition "
        "LEFT JOIN pending p ON p.topic = w.topic AND p.partition = w.partition "
        "ORDER BY w.topic, w.partition",
        {"g": group_id},
    ).all()
    return [
        PartitionLag(
            topic=r.topic,
            partition=int(r.partition),
            committed_offset=_opt_int(r.committed_offset),
            log_start_offset=int(r.log_start_offset),
            high_watermark=int(r.high_watermark),
            last_stable_offset=int(r.last_stable_offset),
            lag=_opt_int(r.lag),
            lag_committed=_opt_int(r.lag_committed),
            member_id=r.member_id,
            client_id=r.client_id,
            pending_transactional_ids=tuple(r.pending),
        )
        for r in rows
    ]


def _require_group(conn: sa.Connection, group_id: str) -> Any:
    row = _driver(
        conn,
        "SELECT group_id, state, generation, assignor FROM group_status WHERE group_id = %(g)s LIMIT 1",
        {"g": group_id},
    ).first()
    if row is None:
        raise GroupIdNotFoundError(f"no group {group_id!r}")
    return row


def describe_group(conn: sa.Connection, *, group_id: str) -> GroupDescription:
    """The group's state, its members with their assignments, and its per-partition positions."""
    group = _require_group(conn, group_id)
    members = _driver(
        conn,
        "SELECT member_id, group_instance_id, client_id, subscription, assignment, last_heartbeat_at, expired, "
        "target FROM group_status WHERE group_id = %(g)s AND member_id IS NOT NULL "
        "ORDER BY coalesce(group_instance_id, member_id), member_id",
        {"g": group_id},
    ).all()
    return GroupDescription(
        group_id=group.group_id,
        state=group.state,
        generation=int(group.generation),
        assignor=group.assignor,
        members=tuple(
            GroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                subscription=tuple(m.subscription or ()),
                assignment=_split_assignment(m.assignment),
                last_heartbeat_at=m.last_heartbeat_at,
                expired=bool(m.expired),
                target=_split_assignment(m.target),
            )
            for m in members
        ),
        offsets=tuple(group_lag(conn, group_id=group_id)),
    )


def delete_group(conn: sa.Connection, *, group_id: str) -> None:
    """DeleteGroups: the group and its committed offsets. NonEmptyGroupError while it has live
    members or an open transaction holds offsets for it; GroupIdNotFoundError when unknown."""
    _driver(conn, "SELECT delete_group_v1(%(g)s)", {"g": group_id})


def offset_delete(
    conn: sa.Connection, *, group_id: str, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], str | None]:
    """OffsetDelete: remove the group's committed offsets of ``partitions``, except those of topics
    a live member subscribes to. Per partition, None (its offset is gone, or there was none) or
    the reason it stays: ``group_subscribed_to_topic`` or ``unknown_topic_or_partition``.
    GroupIdNotFoundError when there is no such group."""
    rows = _driver(
        conn,
        "SELECT topic, partition, error FROM offset_delete_v1(%(g)s, %(t)s::text[], %(p)s::integer[])",
        {"g": group_id, "t": [t for t, _ in partitions], "p": [p for _, p in partitions]},
    ).all()
    return {(r.topic, int(r.partition)): r.error for r in rows}


def reset_group_offsets(
    conn: sa.Connection, *, group_id: str, offsets: Mapping[tuple[str, int], int]
) -> list[OffsetReset]:
    """Set the committed offsets of a group with no live members (NonEmptyGroupError otherwise);
    every offset within [log start, high watermark] (OffsetOutOfRangeError otherwise).

    Writes in the caller's transaction: roll it back for a dry run that checks everything."""
    keys = list(offsets)
    rows = _driver(
        conn,
        "SELECT topic, partition, previous_offset, new_offset FROM reset_group_offsets_v1("
        "%(g)s, %(t)s::text[], %(p)s::integer[], %(o)s::bigint[])",
        {"g": group_id, "t": [t for t, _ in keys], "p": [p for _, p in keys], "o": [offsets[k] for k in keys]},
    ).all()
    return [OffsetReset(r.topic, int(r.partition), _opt_int(r.previous_offset), int(r.new_offset)) for r in rows]
