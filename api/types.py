"""Value types of the public API, named as in Kafka's clients."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic: the key of every offsets map."""

    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """An offset with the metadata stored beside it when committed."""

    offset: int
    metadata: str = ""


class OffsetAndTimestamp(NamedTuple):
    """A record's offset and timestamp: the first at or after a time
    (:meth:`oncelog.Consumer.offsets_for_times`), or the one with the largest timestamp
    (:meth:`oncelog.Admin.max_timestamp_offsets`)."""

    offset: int
    timestamp: datetime


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


class ConsumerRecord(NamedTuple):
    """A record returned by :meth:`oncelog.Consumer.poll` (keys and values deserialized).

    A named tuple, as in kafka-python: poll() builds one per record, and a tuple is much cheaper
    to build than a frozen dataclass (the read rates this serves: docs/bench/report.md).
    """

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


# --- the operator's views (Admin) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicSummary:
    """One topic in a listing: its partitions and the size of its log."""

    name: str
    partitions: int
    #: Offsets between the log start and the high watermark, summed over partitions (records and
    #: transaction markers, as Kafka counts offsets).
    offsets: int
    log_bytes: int
    open_transactions: int


@dataclass(frozen=True, slots=True)
class ProducerState:
    """What the store remembers of one producer on one partition (Kafka's DescribeProducers)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    last_timestamp: datetime
    #: The transactional id the producer id serves (None: an idempotent producer, or retired).
    transactional_id: str | None
    #: The first offset of its open transaction on this partition (None: no open transaction here).
    current_txn_start_offset: int | None


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One consumer group in a listing."""

    group_id: str
    state: str
    generation: int
    assignor: str
    members: int


@dataclass(frozen=True, slots=True)
class GroupMember:
    """A member of a consumer group and the partitions assigned to it."""

    member_id: str
    group_instance_id: str | None
    client_id: str | None
    subscription: tuple[str, ...]
    #: The partitions it owns now.
    assignment: tuple[TopicPartition, ...]
    last_heartbeat_at: datetime
    #: Silent past its session timeout (the next group call removes it).
    expired: bool
    #: The partitions the assignor gives it: each becomes its own once the previous owner lets go.
    target: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A group's position on one partition (Kafka's consumer-groups --describe row)."""

    topic: str
    partition: int
    #: The next offset the group will read (None: nothing committed yet).
    committed_offset: int | None
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    #: high watermark - committed offset (None without a committed offset).
    lag: int | None
    #: last stable offset - committed offset: what a read_committed member can still read.
    lag_committed: int | None
    #: The member the partition is assigned to (None: unassigned).
    member_id: str | None
    client_id: str | None
    #: Transactions holding offsets for this partition that their commit would apply (KIP-447).
    pending_transactional_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A consumer group: its state, members and per-partition positions."""

    group_id: str
    state: str
    generation: int
    assignor: str
    members: tuple[GroupMember, ...]
    offsets: tuple[PartitionLag, ...]


@dataclass(frozen=True, slots=True)
class OffsetReset:
    """One partition of an offset reset: the committed offset before (None: none) and after."""

    topic: str
    partition: int
    previous_offset: int | None
    new_offset: int


# --- access control (Admin.create_acls, docs/acl.md) -------------------------------------------

#: What an ACL protects.
AclResourceType = Literal["topic", "group", "transactional_id"]
#: How an ACL's resource name matches: the exact name (``*``: every name), or a name prefix.
AclPatternType = Literal["literal", "prefixed"]
#: What an ACL allows. ``describe`` is implied by ``read`` and ``write``, everything by ``all``.
#: Topics take all four; groups ``read``, ``describe``, ``all``; transactional ids ``write``,
#: ``describe``, ``all``.
AclOperation = Literal["read", "write", "describe", "all"]


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL (Kafka's AclBinding, allow only): ``principal`` (a PostgreSQL role, and so every
    role with its privileges) may perform ``operation`` on the resources that
    ``resource_name`` names literally or, with ``pattern_type="prefixed"``, by prefix."""

    principal: str
    resource_type: AclResourceType
    resource_name: str
    operation: AclOperation
    pattern_type: AclPatternType = "literal"


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects ACLs to describe or delete: each field that is None matches anything; the others
    match exactly (a name is compared as stored, not as a pattern)."""

    principal: str | None = None
    resource_type: AclResourceType | None = None
    resource_name: str | None = None
    operation: AclOperation | None = None
    pattern_type: AclPatternType | None = None
