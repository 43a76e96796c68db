"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, configs,
describe."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa

from oncelog.errors import UnknownTopicOrPartitionError
from oncelog.store.errors import mapped_errors
from oncelog.store.schema import partitions, settings, topics

#: The per-topic settings a user may set. Given as None, a setting takes its default: retention_ms
#: then follows the store-wide settings.log_retention_ms (Kafka's log.retention.ms, 7 days),
#: retention_bytes and max_compaction_lag_ms have no limit, the others take Kafka's defaults. -1
#: is no limit for either retention setting, as in Kafka.
TOPIC_CONFIG_KEYS = (
    "max_message_bytes",
    "retention_ms",
    "retention_bytes",
    "message_timestamp_after_max_ms",
    "cleanup_policy",
    "min_compaction_lag_ms",
    "max_compaction_lag_ms",
    "delete_retention_ms",
    "min_cleanable_dirty_ratio",
)

#: One setting's value: an integer, min_cleanable_dirty_ratio's fraction, cleanup_policy's word.
TopicSetting = int | float | str | None
TopicConfig = Mapping[str, TopicSetting]


def _literal(text: str) -> int | float | str:
    """A column default's SQL literal as a value: ``'delete'``, ``0.5``, ``86400000``."""
    if text.startswith("'"):
        return text.strip("'")
    return float(text) if "." in text else int(text)


#: The defaults of the settings the table declares one for (the others default to NULL: retention
#: follows the store-wide setting, no size limit, no maximum compaction lag).
COLUMN_DEFAULTS: dict[str, int | float | str] = {
    k: _literal(default.arg.text)
    for k in TOPIC_CONFIG_KEYS
    if isinstance(default := topics.c[k].server_default, sa.DefaultClause) and isinstance(default.arg, sa.TextClause)
}


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """One partition of a topic."""

    partition: int
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic: its partitions and configuration. ``config`` holds the values in force (None: no
    limit); ``defaults`` names the settings that follow the store-wide default rather than a value
    of the topic's own (``retention_ms`` without one follows settings.log_retention_ms)."""

    name: str
    topic_id: int
    partitions: list[PartitionDescription]
    config: dict[str, TopicSetting]
    created_at: datetime
    defaults: frozenset[str] = field(default_factory=frozenset)


def create_topic(conn: sa.Connection, *, name: str, partitions: int, config: TopicConfig | None = None) -> int:
    """CreateTopics; returns the topic id."""
    with mapped_errors():
        return int(
            conn.exec_driver_sql(
                "SELECT create_topic_v1(%(name)s, %(partitions)s, %(config)s::jsonb)",
                {"name": name, "partitions": partitions, "config": json.dumps(dict(config or {}))},
            ).scalar_one()
        )


def delete_topic(conn: sa.Connection, *, name: str) -> None:
    """DeleteTopics: the topic, its partitions and records."""
    with mapped_errors():
        conn.exec_driver_sql("SELECT delete_topic_v1(%(name)s)", {"name": name})


def create_partitions(conn: sa.Connection, *, name: str, total: int) -> None:
    """CreatePartitions: grow ``name`` to ``total`` partitions."""
    with mapped_errors():
        conn.exec_driver_sql("SELECT create_partitions_v1(%(name)s, %(total)s)", {"name": name, "total": total})


def delete_records(conn: sa.Connection, *, name: str, offsets: Mapping[int, int]) -> dict[int, int]:
    """DeleteRecords: move each partition's log start up to its offset in ``offsets`` (partition
    -> offset; -1 is the high watermark), all in one statement. Returns each partition's log
    start after it (Kafka's low watermark); an offset below it changes nothing.
    OffsetOutOfRangeError beyond the high watermark, UnknownTopicOrPartitionError for an unknown
    topic or partition."""
    parts = sorted(offsets)
    with mapped_errors():
        rows = conn.exec_driver_sql(
            "SELECT partition, low_watermark FROM delete_records_v1(%(name)s, %(p)s::integer[], %(o)s::bigint[])",
            {"name": name, "p": parts, "o": [offsets[p] for p in parts]},
        ).all()
    return {int(r.partition): int(r.low_watermark) for r in rows}


def alter_topic_config(conn: sa.Connection, *, name: str, config: TopicConfig) -> None:
    """IncrementalAlterConfigs: set the given keys (None resets to the default / no limit)."""
    with mapped_errors():
        conn.exec_driver_sql(
            "SELECT alter_topic_config_v1(%(name)s, %(config)s::jsonb)",
            {"name": name, "config": json.dumps(dict(config))},
        )


def list_topics(conn: sa.Connection) -> dict[str, int]:
    """Every topic with its partition count."""
    q = (
        sa.select(topics.c.name, sa.func.count(partitions.c.partition))
        .join(partitions, partitions.c.topic_id == topics.c.topic_id)
        .group_by(topics.c.name)
        .order_by(topics.c.name)
    )
    with mapped_errors():
        return {name: int(n) for name, n in conn.execute(q)}


def describe_topic(conn: sa.Connection, *, name: str) -> TopicDescription:
    """One topic's partitions (with offsets) and configuration."""
    with mapped_errors():
        topic = conn.execute(
            sa.select(topics, settings.c.log_retention_ms).select_from(topics.join(settings, sa.true()))
            .where(topics.c.name == name)
        ).one_or_none()  # fmt: skip
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        parts = conn.execute(
            sa.select(partitions.c.partition, partitions.c.log_start_offset, partitions.c.next_offset)
            .where(partitions.c.topic_id == topic.topic_id)
            .order_by(partitions.c.partition)
        ).all()
    config: dict[str, TopicSetting] = {k: getattr(topic, k) for k in TOPIC_CONFIG_KEYS}
    defaults = frozenset({"retention_ms"} if config["retention_ms"] is None else set())
    if config["retention_ms"] is None:
        config["retention_ms"] = topic.log_retention_ms
    elif config["retention_ms"] == -1:
        config["retention_ms"] = None
    return TopicDescription(
        name=topic.name,
        topic_id=topic.topic_id,
        partitions=[PartitionDescription(p.partition, p.log_start_offset, p.next_offset) for p in parts],
        config=config,
        created_at=topic.created_at,
        defaults=defaults,
    )


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """What a producer needs to route and size-check records for a topic."""

    partitions: int
    max_message_bytes: int


def topic_metadata(conn: sa.Connection, *, name: str) -> TopicMetadata:
    """Partition count and record size limit of ``name`` (UnknownTopicOrPartitionError if missing)."""
    q = (
        sa.select(topics.c.max_message_bytes, sa.func.count(partitions.c.partition))
        .join(partitions, partitions.c.topic_id == topics.c.topic_id)
        .where(topics.c.name == name)
        .group_by(topics.c.max_message_bytes)
    )
    with mapped_errors():
        row = conn.execute(q).one_or_none()
    if row is None:
        raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
    return TopicMetadata(partitions=int(row[1]), max_message_bytes=int(row[0]))
