"""Kafka's inspection APIs over the store's views: DescribeGroups, ListGroups, DescribeProducers,
DescribeTransactions and ListTransactions (what ``kafka-consumer-groups.sh --describe`` and
``kafka-transactions.sh`` ask, and what Kafka's admin clients call ``describe_consumer_groups``
and ``list_transactions``).

Each answer is read from the same views the CLI and psql read (``group_status``,
``transaction_status``, ``producer_partition_state``), as the connection's principal: a client
role sees what its ACLs let it see, and producer state, which only the admin role may read, is
answered with an authorization error for anyone else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from oncelog import errors
from oncelog.broker.common import NONE, Database, error_code
from oncelog.broker.groups import encode_assignment
from oncelog.store import ops, txn
from oncelog.store.schema import TXN_STATES
from oncelog.types import TopicPartition

__all__ = ["KAFKA_GROUP_STATES", "KAFKA_TXN_STATES", "DescribeHandlers"]

#: Kafka's transaction states (TransactionState.java): the store's, and PrepareEpochFence, which
#: the store never rests in (it fences and aborts in one database transaction).
KAFKA_TXN_STATES = frozenset(TXN_STATES) | {"PrepareEpochFence"}
#: The store's group states as Kafka's classic group states: a group handing partitions over
#: (Reconciling) is one whose members are being told to rejoin.
KAFKA_GROUP_STATES = {"Empty": "Empty", "Stable": "Stable", "Reconciling": "PreparingRebalance"}
#: Kafka's TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
#: (A role that may not read a view gets the resource's own authorization error, as Kafka answers
#: a principal without DESCRIBE.)
_TOPIC_DENIED, _GROUP_DENIED, _TXN_DENIED = 29, 30, 53
#: Kafka's TRANSACTIONAL_ID_NOT_FOUND: DescribeTransactions' answer for an id nobody initialised.
_TXN_NOT_FOUND = 105


def _ms(at: datetime | None) -> int:
    return -1 if at is None else int(at.timestamp() * 1000)


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def _split(names: Iterable[str]) -> list[TopicPartition]:
    # transaction_status spells partitions topic-partition@first offset; topic names may contain
    # '-' and '@', the numbers never.
    out = []
    for name in names:
        topic, _, number = name.rpartition("@")[0].rpartition("-")
        out.append(TopicPartition(topic, int(number)))
    return out


class DescribeHandlers:
    """DescribeGroups, ListGroups, DescribeProducers, DescribeTransactions and ListTransactions."""

    def __init__(self, database: Database, run: Callable[..., Any]) -> None:
        self._db = database
        self._run = run

    async def describe_groups(self, request: Any, response_class: Any) -> Any:
        group_class = response_class.DescribedGroup
        member_class = group_class.DescribedGroupMember
        described = []
        for group_id in request.groups:
            try:
                group = await self._run(self._db.call, ops.describe_group, group_id=group_id)
            except errors.GroupIdNotFoundError:
                # Kafka describes an unknown group as Dead with no members, not as an error.
                described.append(self._group(group_class, group_id, state="Dead"))
                continue
            except errors.OncelogError as exc:
                described.append(self._group(group_class, group_id, code=error_code(exc, denied=_GROUP_DENIED)))
                continue
            members = [
                member_class(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id or "",
                    client_host="",
                    member_metadata=ConsumerProtocolSubscription(
                        version=0, topics=list(m.subscription), user_data=b""
                    ).encode(),
                    member_assignment=encode_assignment(m.assignment),
                )
                for m in group.members
            ]
            state = KAFKA_GROUP_STATES.get(group.state, group.state)
            described.append(self._group(group_class, group_id, state=state, assignor=group.assignor, members=members))
        return response_class(version=request.version, throttle_time_ms=0, groups=described)

    @staticmethod
    def _group(
        group_class: Any, group_id: str, *, code: int = NONE, state: str = "", assignor: str = "", members: Any = ()
    ) -> Any:
        return group_class(
            error_code=code,
            error_message=None,
            group_id=group_id,
            group_state=state,
            protocol_type="consumer" if state not in ("", "Dead") else "",
            protocol_data=assignor,
            members=list(members),
            authorized_operations=None,  # the codec's Integer.MIN_VALUE: not computed
        )

    async def list_groups(self, request: Any, response_class: Any) -> Any:
        try:
            listed = await self._run(self._db.call, ops.list_groups)
        except errors.OncelogError as exc:
            return response_class(
                version=request.version, throttle_time_ms=0, error_code=error_code(exc, denied=_GROUP_DENIED), groups=[]
            )
        wanted = set(getattr(request, "states_filter", None) or ())
        groups = []
        for g in listed:
            state = KAFKA_GROUP_STATES.get(g.state, g.state)
            if wanted and state not in wanted:
                continue
            groups.append(
                response_class.ListedGroup(
                    group_id=g.group_id, protocol_type="consumer", group_state=state, group_type="classic"
                )
            )
        return response_class(version=request.version, throttle_time_ms=0, error_code=NONE, groups=groups)

    async def describe_producers(self, request: Any, response_class: Any) -> Any:
        topic_class = response_class.TopicResponse
        partition_class = topic_class.PartitionResponse
        state_class = partition_class.ProducerState
        topics = []
        for topic in request.topics:
            try:
                found = await self._run(self._db.call, ops.describe_producers, topic=topic.name)
                code, message = NONE, None
            except errors.OncelogError as exc:
                found, code, message = [], error_code(exc, denied=_TOPIC_DENIED), exc.message
            partitions = []
            for index in topic.partition_indexes:
                partitions.append(
                    partition_class(
                        partition_index=index,
                        error_code=code,
                        error_message=message,
                        active_producers=[
                            state_class(
                                producer_id=s.producer_id,
                                producer_epoch=s.producer_epoch,
                                last_sequence=s.last_sequence,
                                last_timestamp=_ms(s.last_timestamp),
                                coordinator_epoch=-1,
                                current_txn_start_offset=(
                                    -1 if s.current_txn_start_offset is None else s.current_txn_start_offset
                                ),
                            )
                            for s in found
                            if s.partition == index
                        ],
                    )
                )
            topics.append(topic_class(name=topic.name, partitions=partitions))
        return response_class(version=request.version, throttle_time_ms=0, topics=topics)

    async def describe_transactions(self, request: Any, response_class: Any) -> Any:
        state_class = response_class.TransactionState
        topic_class = state_class.TopicData
        states = []
        for tid in request.transactional_ids:
            try:
                status = await self._run(self._db.call, txn.describe_transaction, transactional_id=tid)
            except errors.OncelogError as exc:
                code = (
                    _TXN_NOT_FOUND
                    if isinstance(exc, errors.TransactionalIdNotFoundError)
                    else error_code(exc, denied=_TXN_DENIED)
                )
                states.append(
                    state_class(
                        error_code=code,
                        transactional_id=tid,
                        transaction_state="",
                        transaction_timeout_ms=0,
                        transaction_start_time_ms=-1,
                        producer_id=-1,
                        producer_epoch=-1,
                        topics=[],
                    )
                )
                continue
            states.append(
                state_class(
                    error_code=NONE,
                    transactional_id=tid,
                    transaction_state=status.state,
                    transaction_timeout_ms=status.timeout_ms,
                    transaction_start_time_ms=_ms(status.txn_started_at),
                    producer_id=status.producer_id,
                    producer_epoch=status.producer_epoch,
                    topics=[
                        topic_class(topic=t, partitions=ps) for t, ps in _by_topic(_split(status.partitions)).items()
                    ],
                )
            )
        return response_class(version=request.version, throttle_time_ms=0, transaction_states=states)

    async def list_transactions(self, request: Any, response_class: Any) -> Any:
        asked = list(request.state_filters or ())
        unknown = [s for s in asked if s not in KAFKA_TXN_STATES]
        producer_ids = set(request.producer_id_filters or ())
        duration = getattr(request, "duration_filter", -1)
        try:
            found = await self._run(
                self._db.call,
                txn.list_transactions,
                states=asked or None,
                older_than=timedelta(milliseconds=duration) if duration is not None and duration >= 0 else None,
            )
        except errors.OncelogError as exc:
            return response_class(
                version=request.version,
                throttle_time_ms=0,
                error_code=error_code(exc, denied=_TXN_DENIED),
                unknown_state_filters=unknown,
                transaction_states=[],
            )
        return response_class(
            version=request.version,
            throttle_time_ms=0,
            error_code=NONE,
            unknown_state_filters=unknown,
            transaction_states=[
                response_class.TransactionState(
                    transactional_id=s.transactional_id, producer_id=s.producer_id, transaction_state=s.state
                )
                for s in found
                if not producer_ids or s.producer_id in producer_ids
            ],
        )
