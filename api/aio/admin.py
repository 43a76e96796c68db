"""``oncelog.aio.Admin``: topics, transactions, groups, ACLs and maintenance, for asyncio.

Every method is :class:`oncelog.Admin`'s, with the same arguments, answers and errors, awaited:
its database calls run on psycopg's async connections without blocking the loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Self

from oncelog import kafka_config
from oncelog.admin import HANGING_AFTER
from oncelog.admin import Admin as SyncAdmin
from oncelog.aio._loop import call
from oncelog.store.compaction import CompactionReport, PartitionCompaction
from oncelog.store.outbox import Capture
from oncelog.store.records import PartitionOffsets
from oncelog.store.topics import TopicConfig, TopicDescription
from oncelog.store.txn import TransactionStatus
from oncelog.types import (
    AclBinding,
    AclBindingFilter,
    GroupDescription,
    GroupListing,
    OffsetReset,
    PartitionLag,
    ProducerState,
    TopicPartition,
    TopicSummary,
)

__all__ = ["Admin"]


class _LoopAdmin(SyncAdmin):
    """The synchronous Admin on the event loop's engine."""

    _event_loop = True


class Admin:
    """Administer topics and run the store's maintenance from asyncio code. Takes the keywords
    of :class:`oncelog.Admin`.

    >>> async with Admin(url) as admin:
    ...     await admin.create_topic("orders", partitions=3)
    """

    def __init__(self, database_url: str, **config: Any) -> None:
        self._sync = _LoopAdmin(database_url, **config)

    @classmethod
    def from_config(cls, database_url: str, config: Mapping[str, Any], **overrides: Any) -> Self:
        """An admin client configured with Kafka's names, as :meth:`oncelog.Admin.from_config`."""
        return cls(database_url, **kafka_config.with_overrides(config, overrides, SyncAdmin, cls.__name__))

    def __repr__(self) -> str:
        return repr(self._sync)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Release the connection pool."""
        await call(self._sync.close)

    async def create_topic(self, name: str, partitions: int = 1, config: TopicConfig | None = None) -> None:
        """As :meth:`oncelog.Admin.create_topic`, awaited."""
        return await call(self._sync.create_topic, name, partitions, config)

    async def delete_topic(self, name: str) -> None:
        """As :meth:`oncelog.Admin.delete_topic`, awaited."""
        return await call(self._sync.delete_topic, name)

    async def list_topics(self) -> dict[str, int]:
        """As :meth:`oncelog.Admin.list_topics`, awaited."""
        return await call(self._sync.list_topics)

    async def describe_topic(self, name: str) -> TopicDescription:
        """As :meth:`oncelog.Admin.describe_topic`, awaited."""
        return await call(self._sync.describe_topic, name)

    async def create_partitions(self, name: str, total: int) -> None:
        """As :meth:`oncelog.Admin.create_partitions`, awaited."""
        return await call(self._sync.create_partitions, name, total)

    async def alter_topic_config(self, name: str, config: TopicConfig) -> None:
        """As :meth:`oncelog.Admin.alter_topic_config`, awaited."""
        return await call(self._sync.alter_topic_config, name, config)

    async def list_transactions(self, states: list[str] | None = None) -> list[TransactionStatus]:
        """As :meth:`oncelog.Admin.list_transactions`, awaited."""
        return await call(self._sync.list_transactions, states)

    async def describe_transaction(self, transactional_id: str) -> TransactionStatus:
        """As :meth:`oncelog.Admin.describe_transaction`, awaited."""
        return await call(self._sync.describe_transaction, transactional_id)

    async def find_hanging_transactions(self, older_than: timedelta = HANGING_AFTER) -> list[TransactionStatus]:
        """As :meth:`oncelog.Admin.find_hanging_transactions`, awaited."""
        return await call(self._sync.find_hanging_transactions, older_than)

    async def abort_transaction(self, transactional_id: str) -> None:
        """As :meth:`oncelog.Admin.abort_transaction`, awaited."""
        return await call(self._sync.abort_transaction, transactional_id)

    async def expire_transactions(self) -> int:
        """As :meth:`oncelog.Admin.expire_transactions`, awaited."""
        return await call(self._sync.expire_transactions)

    async def expire_producers(self) -> int:
        """As :meth:`oncelog.Admin.expire_producers`, awaited."""
        return await call(self._sync.expire_producers)

    async def expire_txn_history(self, batch: int = 10_000) -> int:
        """As :meth:`oncelog.Admin.expire_txn_history`, awaited."""
        return await call(self._sync.expire_txn_history, batch)

    async def compact(self, topic: str | None = None, *, batch: int = 50_000, force: bool = False) -> CompactionReport:
        """As :meth:`oncelog.Admin.compact`, awaited."""
        return await call(self._sync.compact, topic, batch=batch, force=force)

    async def compaction_status(self, topic: str) -> list[PartitionCompaction]:
        """As :meth:`oncelog.Admin.compaction_status`, awaited."""
        return await call(self._sync.compaction_status, topic)

    async def enforce_retention(self, batch: int = 10_000) -> int:
        """As :meth:`oncelog.Admin.enforce_retention`, awaited."""
        return await call(self._sync.enforce_retention, batch)

    async def topic_summaries(self) -> list[TopicSummary]:
        """As :meth:`oncelog.Admin.topic_summaries`, awaited."""
        return await call(self._sync.topic_summaries)

    async def list_offsets(self, topic: str) -> list[PartitionOffsets]:
        """As :meth:`oncelog.Admin.list_offsets`, awaited."""
        return await call(self._sync.list_offsets, topic)

    async def offsets_for_times(self, topic: str, timestamp: datetime) -> dict[TopicPartition, int]:
        """As :meth:`oncelog.Admin.offsets_for_times`, awaited."""
        return await call(self._sync.offsets_for_times, topic, timestamp)

    async def capture_table(self, table: str, topic: str) -> None:
        """As :meth:`oncelog.Admin.capture_table`, awaited."""
        return await call(self._sync.capture_table, table, topic)

    async def remove_capture(self, table: str) -> bool:
        """As :meth:`oncelog.Admin.remove_capture`, awaited."""
        return await call(self._sync.remove_capture, table)

    async def list_captures(self) -> list[Capture]:
        """As :meth:`oncelog.Admin.list_captures`, awaited."""
        return await call(self._sync.list_captures)

    async def describe_producers(self, topic: str, partition: int | None = None) -> list[ProducerState]:
        """As :meth:`oncelog.Admin.describe_producers`, awaited."""
        return await call(self._sync.describe_producers, topic, partition)

    async def list_groups(self) -> list[GroupListing]:
        """As :meth:`oncelog.Admin.list_groups`, awaited."""
        return await call(self._sync.list_groups)

    async def describe_group(self, group_id: str) -> GroupDescription:
        """As :meth:`oncelog.Admin.describe_group`, awaited."""
        return await call(self._sync.describe_group, group_id)

    async def group_lag(self, group_id: str) -> list[PartitionLag]:
        """As :meth:`oncelog.Admin.group_lag`, awaited."""
        return await call(self._sync.group_lag, group_id)

    async def reset_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int], *, dry_run: bool = True
    ) -> list[OffsetReset]:
        """As :meth:`oncelog.Admin.reset_group_offsets`, awaited."""
        return await call(self._sync.reset_group_offsets, group_id, offsets, dry_run=dry_run)

    async def create_acls(self, acls: Iterable[AclBinding]) -> list[AclBinding]:
        """As :meth:`oncelog.Admin.create_acls`, awaited."""
        return await call(self._sync.create_acls, acls)

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """As :meth:`oncelog.Admin.delete_acls`, awaited."""
        return await call(self._sync.delete_acls, filters)

    async def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """As :meth:`oncelog.Admin.describe_acls`, awaited."""
        return await call(self._sync.describe_acls, acl_filter)

    async def set_acl_enforcement(self, enabled: bool) -> bool:
        """As :meth:`oncelog.Admin.set_acl_enforcement`, awaited."""
        return await call(self._sync.set_acl_enforcement, enabled)

    async def acl_enforcement(self) -> bool:
        """As :meth:`oncelog.Admin.acl_enforcement`, awaited."""
        return await call(self._sync.acl_enforcement)
