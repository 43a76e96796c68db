"""Kafka's admin APIs over the store: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords,
DeleteGroups, DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

Topics are the store's (``create_topic_v1`` and the others, which only the admin role may call):
a broker whose database role is a client's answers them with an authorization error. A topic's
configuration is the store's settings under Kafka's names; any other name is refused, so a
setting a client asks for is never silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oncelog import errors, validate
from oncelog.broker.common import ERROR_CODES, NONE, UNKNOWN_TOPIC_OR_PARTITION, Database, Node, admin_error_code
from oncelog.store import ops, topics

__all__ = ["KAFKA_TOPIC_CONFIGS", "AdminHandlers"]

#: Kafka's topic config names and the store's (topics.TOPIC_CONFIG_KEYS).
KAFKA_TOPIC_CONFIGS = {
    "max.message.bytes": "max_message_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "cleanup.policy": "cleanup_policy",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "delete.retention.ms": "delete_retention_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
}
#: Kafka's INVALID_REPLICATION_FACTOR and INVALID_CONFIG.
INVALID_REPLICATION_FACTOR, INVALID_CONFIG = 38, 40
#: DescribeConfigs resource types: a topic, a broker.
_TOPIC, _BROKER = 2, 4
#: DescribeConfigs config sources: set on the topic, the broker's command line, a default.
_TOPIC_CONFIG, _STATIC_BROKER_CONFIG, _DEFAULT_CONFIG = 1, 4, 5
#: DescribeConfigs (v3 and later) config types.
_BOOLEAN, _INT, _LONG, _DOUBLE, _LIST = 1, 3, 5, 6, 7
_TOPIC_CONFIG_TYPES = {
    "max.message.bytes": _INT,
    "retention.ms": _LONG,
    "retention.bytes": _LONG,
    "message.timestamp.after.max.ms": _LONG,
    "cleanup.policy": _LIST,
    "min.compaction.lag.ms": _LONG,
    "max.compaction.lag.ms": _LONG,
    "delete.retention.ms": _LONG,
    "min.cleanable.dirty.ratio": _DOUBLE,
}
#: Kafka's max.compaction.lag.ms default, Long.MAX_VALUE: the store's "no limit" (NULL).
_NO_COMPACTION_LAG_LIMIT = 2**63 - 1
#: IncrementalAlterConfigs operations: SET and DELETE (APPEND and SUBTRACT are for list configs,
#: and none of the served configs is a list).
_SET, _DELETE = 0, 1


class _BadConfig(Exception):
    """A config entry the store cannot take: INVALID_CONFIG with this message."""


def _store_config(name: str, value: str | None) -> tuple[str, topics.TopicSetting]:
    """The store's key and value for Kafka's config ``name`` = ``value`` (None: the default)."""
    key = KAFKA_TOPIC_CONFIGS.get(name)
    if key is None:
        raise _BadConfig(f"topic config {name!r} is not served (served: {sorted(KAFKA_TOPIC_CONFIGS)})")
    if value is None:
        return key, None
    try:
        setting = validate.topic_setting_text(key, value)
    except errors.ConfigurationError as exc:
        raise _BadConfig(f"{name}: {exc.message}") from None
    return key, None if key == "max_compaction_lag_ms" and setting == _NO_COMPACTION_LAG_LIMIT else setting


def _at_default(key: str, value: topics.TopicSetting, following: frozenset[str]) -> bool:
    """Whether a topic setting is at its default, as DescribeConfigs reports it: retention_ms
    when it follows the store-wide setting (None in ``config`` is an explicit "for ever" there),
    retention_bytes and max_compaction_lag_ms without a limit, the others at their column's
    default. The store keeps no mark of a value set explicitly, so one set to the default reads
    as the default."""
    if key == "retention_ms":
        return key in following
    if key in ("retention_bytes", "max_compaction_lag_ms"):
        return value is None
    return value == topics.COLUMN_DEFAULTS.get(key)


def _config_text(key: str, value: topics.TopicSetting) -> str:
    """A setting's value as DescribeConfigs shows it: Kafka's spelling of "no limit"."""
    if value is None:
        return str(_NO_COMPACTION_LAG_LIMIT) if key == "max_compaction_lag_ms" else "-1"
    return str(value)


class AdminHandlers:
    """CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DeleteGroups and the config
    APIs, for topics; a broker's settings (its command line's) are described, read-only."""

    def __init__(
        self,
        database: Database,
        run: Callable[..., Any],
        *,
        node: Node,
        security_protocol: str = "PLAINTEXT",
        auto_create_partitions: int | None = None,
    ) -> None:
        self._db = database
        self._run = run
        self._node = node
        self._security_protocol = security_protocol
        self._auto_create = auto_create_partitions

    def _broker_configs(self) -> list[tuple[str, str, int, int]]:
        """This broker's settings under Kafka's names: (name, value, type, source). They come from
        its command line, so they are read-only (STATIC_BROKER_CONFIG), as in Kafka 4."""
        node, auto = self._node, self._auto_create is not None
        from_command = _STATIC_BROKER_CONFIG if auto else _DEFAULT_CONFIG
        return [
            (
                "advertised.listeners",
                f"{self._security_protocol}://{node.host}:{node.port}",
                _LIST,
                _STATIC_BROKER_CONFIG,
            ),
            ("node.id", str(node.node_id), _INT, _STATIC_BROKER_CONFIG),
            ("broker.id", str(node.node_id), _INT, _STATIC_BROKER_CONFIG),
            ("auto.create.topics.enable", "true" if auto else "false", _BOOLEAN, from_command),
            ("num.partitions", str(self._auto_create or 1), _INT, from_command),
            ("default.replication.factor", "1", _INT, _DEFAULT_CONFIG),
        ]

    async def create_topics(self, request: Any, response_class: Any) -> Any:
        results = []
        for topic in request.topics:
            code, message = await self._create(topic, bool(getattr(request, "validate_only", False)))
            results.append(
                response_class.CreatableTopicResult(
                    name=topic.name,
                    error_code=code,
                    error_message=message,
                    num_partitions=topic.num_partitions if topic.num_partitions > 0 else 1,
                    replication_factor=1,
                    configs=[],
                )
            )
        return response_class(version=request.version, throttle_time_ms=0, topics=results)

    async def _create(self, topic: Any, validate_only: bool) -> tuple[int, str | None]:
        if topic.replication_factor not in (-1, 1) or topic.assignments:
            return INVALID_REPLICATION_FACTOR, "one replica: PostgreSQL's replication keeps the copies"
        try:
            config = dict(_store_config(entry.name, entry.value) for entry in topic.configs)
        except _BadConfig as exc:
            return INVALID_CONFIG, str(exc)
        partitions = topic.num_partitions if topic.num_partitions > 0 else 1  # Kafka's num.partitions default
        try:
            if validate_only:
                known = await self._run(self._db.call, topics.list_topics)
                if topic.name in known:
                    raise errors.TopicAlreadyExistsError(f"topic {topic.name!r} already exists")
            else:
                await self._run(
                    self._db.call, topics.create_topic, name=topic.name, partitions=partitions, config=config or None
                )
        except errors.OncelogError as exc:
            return admin_error_code(exc), exc.message
        return NONE, None

    async def delete_topics(self, request: Any, response_class: Any) -> Any:
        results = []
        for name in request.topic_names:
            try:
                await self._run(self._db.call, topics.delete_topic, name=name)
                code, message = NONE, None
            except errors.OncelogError as exc:
                code, message = admin_error_code(exc), exc.message
            results.append(response_class.DeletableTopicResult(name=name, error_code=code, error_message=message))
        return response_class(version=request.version, throttle_time_ms=0, responses=results)

    async def create_partitions(self, request: Any, response_class: Any) -> Any:
        results = []
        for topic in request.topics:
            code, message = NONE, None
            here = [self._node.node_id]
            if any(list(a.broker_ids) != here for a in topic.assignments or ()):
                # The one replica there is, this broker, is the only assignment there can be.
                code, message = INVALID_REPLICATION_FACTOR, f"each new partition's one replica is broker {here[0]}"
            else:
                try:
                    if request.validate_only:
                        described = await self._run(self._db.call, topics.describe_topic, name=topic.name)
                        if topic.count <= len(described.partitions):
                            raise errors.InvalidPartitionsError(
                                f"topic {topic.name!r} has {len(described.partitions)} partitions already"
                            )
                    else:
                        await self._run(self._db.call, topics.create_partitions, name=topic.name, total=topic.count)
                except errors.OncelogError as exc:
                    code, message = admin_error_code(exc), exc.message
            results.append(
                response_class.CreatePartitionsTopicResult(name=topic.name, error_code=code, error_message=message)
            )
        return response_class(version=request.version, throttle_time_ms=0, results=results)

    async def delete_records(self, request: Any, response_class: Any) -> Any:
        topic_class = response_class.DeleteRecordsTopicResult
        partition_class = topic_class.DeleteRecordsPartitionResult
        out = []
        for topic in request.topics:
            asked = {p.partition_index: p.offset for p in topic.partitions}
            results = await self._delete_records(topic.name, asked)
            out.append(
                topic_class(
                    name=topic.name,
                    partitions=[
                        partition_class(partition_index=p, low_watermark=low, error_code=code)
                        for p, (code, low) in results.items()
                    ],
                )
            )
        return response_class(version=request.version, throttle_time_ms=0, topics=out)

    async def _delete_records(self, topic: str, asked: dict[int, int]) -> dict[int, tuple[int, int]]:
        """(error code, low watermark) per partition. The store moves a topic's partitions in one
        call, all or none; when that call is refused, each partition goes alone, so a bad offset
        fails only its own partition, as in Kafka."""
        try:
            low = await self._run(self._db.call, topics.delete_records, name=topic, offsets=asked)
            return {p: (NONE, low[p]) for p in asked}
        except errors.OncelogError as exc:
            if len(asked) == 1:
                return {p: (admin_error_code(exc), -1) for p in asked}
        out: dict[int, tuple[int, int]] = {}
        for p, offset in asked.items():
            out.update(await self._delete_records(topic, {p: offset}))
        return out

    async def delete_groups(self, request: Any, response_class: Any) -> Any:
        results = []
        for group_id in request.groups_names:
            try:
                await self._run(self._db.call, ops.delete_group, group_id=group_id)
                code = NONE
            except errors.OncelogError as exc:
                code = admin_error_code(exc)
            results.append(response_class.DeletableGroupResult(group_id=group_id, error_code=code))
        return response_class(version=request.version, throttle_time_ms=0, results=results)

    async def offset_delete(self, request: Any, response_class: Any) -> Any:
        wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
        try:
            found = await self._run(self._db.call, ops.offset_delete, group_id=request.group_id, partitions=wanted)
        except errors.OncelogError as exc:  # the group: unknown, an invalid id, not authorized
            return response_class(
                version=request.version, error_code=admin_error_code(exc), throttle_time_ms=0, topics=[]
            )
        codes = {
            None: NONE,
            "group_subscribed_to_topic": ERROR_CODES[errors.GroupSubscribedToTopicError],
            "unknown_topic_or_partition": UNKNOWN_TOPIC_OR_PARTITION,
        }
        topic_class = response_class.OffsetDeleteResponseTopic
        partition_class = topic_class.OffsetDeleteResponsePartition
        return response_class(
            version=request.version,
            error_code=NONE,
            throttle_time_ms=0,
            topics=[
                topic_class(
                    name=t.name,
                    partitions=[
                        partition_class(
                            partition_index=p.partition_index, error_code=codes[found[(t.name, p.partition_index)]]
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ],
        )

    async def alter_configs(self, request: Any, response_class: Any) -> Any:
        # AlterConfigs replaces a topic's whole configuration: what it does not name returns to
        # the default, as in Kafka.
        def change(resource: Any) -> dict[str, topics.TopicSetting]:
            config: dict[str, topics.TopicSetting] = dict.fromkeys(KAFKA_TOPIC_CONFIGS.values())
            config.update(_store_config(c.name, c.value) for c in resource.configs)
            return config

        return await self._alter(request, response_class, change)

    async def incremental_alter_configs(self, request: Any, response_class: Any) -> Any:
        def change(resource: Any) -> dict[str, topics.TopicSetting]:
            config: dict[str, topics.TopicSetting] = {}
            for c in resource.configs:
                if c.config_operation not in (_SET, _DELETE):
                    raise _BadConfig(f"{c.name}: only SET and DELETE apply (it is not a list)")
                key, value = _store_config(c.name, c.value if c.config_operation == _SET else None)
                config[key] = value
            return config

        return await self._alter(request, response_class, change)

    async def _alter(
        self, request: Any, response_class: Any, change: Callable[[Any], dict[str, topics.TopicSetting]]
    ) -> Any:
        results = []
        for resource in request.resources:
            code, message = NONE, None
            if resource.resource_type != _TOPIC:
                code, message = INVALID_CONFIG, "only topic configs can be altered here"
            else:
                try:
                    config = change(resource)
                    if request.validate_only:
                        await self._run(self._db.call, topics.describe_topic, name=resource.resource_name)
                    else:
                        await self._run(
                            self._db.call, topics.alter_topic_config, name=resource.resource_name, config=config
                        )
                except _BadConfig as exc:
                    code, message = INVALID_CONFIG, str(exc)
                except errors.OncelogError as exc:
                    code, message = admin_error_code(exc), exc.message
            results.append(
                response_class.AlterConfigsResourceResponse(
                    error_code=code,
                    error_message=message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
        return response_class(version=request.version, throttle_time_ms=0, responses=results)

    async def describe_configs(self, request: Any, response_class: Any) -> Any:
        result_class = response_class.DescribeConfigsResult
        entry_class = result_class.DescribeConfigsResourceResult
        results = []
        for resource in request.resources:
            code, message = NONE, None
            entries: list[tuple[str, str, int, int, bool]] = []
            if resource.resource_type == _TOPIC:
                try:
                    described = await self._run(self._db.call, topics.describe_topic, name=resource.resource_name)
                except errors.OncelogError as exc:
                    code, message = admin_error_code(exc), exc.message
                else:
                    for kafka_name, key in KAFKA_TOPIC_CONFIGS.items():
                        value = described.config.get(key)
                        default = _at_default(key, value, described.defaults)
                        source = _DEFAULT_CONFIG if default else _TOPIC_CONFIG
                        value_text = _config_text(key, value)
                        entries.append((kafka_name, value_text, _TOPIC_CONFIG_TYPES[kafka_name], source, False))
            elif resource.resource_type == _BROKER:
                if resource.resource_name not in ("", str(self._node.node_id)):
                    code, message = INVALID_CONFIG, f"this is broker {self._node.node_id}, not {resource.resource_name}"
                else:
                    entries = [(*entry, True) for entry in self._broker_configs()]
            else:
                code, message = INVALID_CONFIG, f"resource type {resource.resource_type} has no configs here"
            results.append(
                result_class(
                    error_code=code,
                    error_message=message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=[
                        entry_class(
                            name=name,
                            value=value,
                            read_only=read_only,
                            is_default=source == _DEFAULT_CONFIG,
                            config_source=source,
                            is_sensitive=False,
                            synonyms=[],
                            config_type=config_type,
                            documentation=None,
                        )
                        for name, value, config_type, source, read_only in entries
                        if resource.configuration_keys is None or name in resource.configuration_keys
                    ],
                )
            )
        return response_class(version=request.version, throttle_time_ms=0, results=results)
