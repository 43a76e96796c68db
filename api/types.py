"""Value types of the public API, named as in Kafka's clients."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic: the key of every offsets map."""

    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """An offset with the metadata stored beside it when committed."""

    offset: int
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed."""

    topic: str
    partition: int
    offset: int
    timestamp: datetime

    @property
    def topic_partition(self) -> TopicPartition:
        """The record's partition."""
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """A record returned by :meth:`oncelog.Consumer.poll` (keys and values deserialized)."""

    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: datetime
    producer_id: int | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        """The record's partition."""
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What a transactional producer needs to commit a consumer's offsets in its transaction
    (``Producer.send_offsets_to_transaction``): the member and generation they belong to."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """A flushed, still open transaction handed over by ``Producer.prepare_transaction`` for
    another party to commit or abort (as in Kafka's KIP-939 two-phase commit)."""

    transactional_id: str
    producer_id: int
    epoch: int
    txn_number: int
