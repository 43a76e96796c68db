"""Kafka's classic consumer group protocol over the store's groups.

Kafka's classic protocol has a client-side leader compute the assignment; the store computes it
itself and hands a partition to its next owner only once its owner let go of it. The broker
bridges the two without a second source of truth:

- every member is a follower: JoinGroup names as leader an id no member has, so each member
  sends an empty SyncGroup and gets, in its answer, what the store assigned it;
- the partitions a member consumes are the ones its last SyncGroup answer gave it, and every
  Heartbeat names them to the store as still owned, so none of them goes to another member while
  it may still read them;
- when the store's answer differs (partitions to give up, or new ones free for it) or the
  generation moved, Heartbeat answers REBALANCE_IN_PROGRESS: the client rejoins. An eager client
  (range, roundrobin) has given up every partition when it rejoins, so JoinGroup names none as
  owned; a cooperative one names those it keeps in its subscription, and they stay its own.

What each member was given lives in the broker's memory. A member the broker does not know (it
rejoined through another broker, or this one restarted) is told to rebalance, which is always
safe: it rejoins and names what it owns.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from oncelog import errors
from oncelog.broker.common import (
    CLIENT_ID,
    ERROR_CODES,
    NONE,
    Database,
    Node,
    commit_answer,
    committed_offsets,
    error_code,
)
from oncelog.store import groups, topics

__all__ = ["GroupHandlers", "encode_assignment"]

logger = logging.getLogger(__name__)

#: Kafka's REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID and INCONSISTENT_GROUP_PROTOCOL.
REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, INCONSISTENT_GROUP_PROTOCOL = 27, 25, 23
#: The leader every JoinGroup names: no member has this id, so every member is a follower.
NO_LEADER = "oncelog-assigns-in-the-store"
#: Client protocols (assignor names) and the store's assignor that stands for each.
ASSIGNORS = {"range": "range", "roundrobin": "roundrobin", "sticky": "sticky", "cooperative-sticky": "sticky"}
_COOPERATIVE = {"cooperative-sticky"}
_GROUP_COORDINATOR = 0
#: How much of a client id the store keeps (Kafka's header allows 32767 bytes).
_CLIENT_ID_CHARS = 255

Partitions = frozenset[tuple[str, int]]


def encode_assignment(partitions: Iterable[tuple[str, int]]) -> bytes:
    """Partitions as the consumer protocol's assignment (SyncGroup's answer, DescribeGroups'
    member assignment), topics and partitions in order."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    entry = ConsumerProtocolAssignment.TopicPartition
    return bytes(
        ConsumerProtocolAssignment(
            version=0,
            assigned_partitions=[entry(topic=t, partitions=ps) for t, ps in by_topic.items()],
            user_data=b"",
        ).encode()
    )


class GroupHandlers:
    """FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch."""

    def __init__(self, database: Database, node: Node, run: Callable[..., Any]) -> None:
        self._db = database
        self._node = node
        self._run = run
        self._lock = threading.Lock()
        #: (group, member) -> (generation, the partitions its last SyncGroup answer gave it).
        self._given: dict[tuple[str, str], tuple[int, Partitions]] = {}

    async def find_coordinator(self, request: Any, response_class: Any) -> Any:
        node = self._node
        # Groups (0) and transactions (1): the store coordinates both.
        code = NONE if getattr(request, "key_type", _GROUP_COORDINATOR) in (0, 1) else 42
        # Every broker coordinates every group: the store is the coordinator, and any broker reaches it.
        return response_class(
            version=request.version,
            throttle_time_ms=0,
            error_code=code,
            error_message=None,
            node_id=node.node_id,
            host=node.host,
            port=node.port,
        )

    async def join_group(self, request: Any, response_class: Any) -> Any:
        def answer(code: int, generation: int = -1, member: str = "", protocol: str | None = None) -> Any:
            return response_class(
                version=request.version,
                throttle_time_ms=0,
                error_code=code,
                generation_id=generation,
                protocol_name=protocol,
                leader=NO_LEADER,
                member_id=member,
                members=[],
            )

        offered = [p for p in request.protocols if p.name in ASSIGNORS]
        if request.protocol_type != "consumer" or not offered:
            return answer(INCONSISTENT_GROUP_PROTOCOL, member=request.member_id)
        chosen = offered[0]
        try:
            subscription = ConsumerProtocolSubscription.decode(bytes(chosen.metadata))
        except Exception:  # not a consumer subscription: the member speaks something else
            return answer(INCONSISTENT_GROUP_PROTOCOL, member=request.member_id)
        owned: list[tuple[str, int]] = []
        if chosen.name in _COOPERATIVE:
            owned = [(tp.topic, p) for tp in subscription.owned_partitions or () for p in tp.partitions]
        try:
            joined = await self._run(
                self._db.call,
                groups.join_group,
                group_id=request.group_id,
                topics=list(subscription.topics),
                session_timeout_ms=request.session_timeout_ms,
                assignor=ASSIGNORS[chosen.name],
                member_id=request.member_id or None,
                group_instance_id=getattr(request, "group_instance_id", None),
                # The store keeps 255 characters of it (Kafka's header allows 32767 bytes).
                client_id=(CLIENT_ID.get() or "")[:_CLIENT_ID_CHARS] or None,
                owned=owned,
            )
        except errors.OncelogError as exc:
            return answer(error_code(exc), member=request.member_id)
        with self._lock:
            # Until its SyncGroup answer it consumes only what it kept (cooperative) or nothing.
            self._given[(request.group_id, joined.member_id)] = (joined.generation, frozenset(owned))
        return answer(NONE, joined.generation, joined.member_id, chosen.name)

    async def sync_group(self, request: Any, response_class: Any) -> Any:
        def answer(code: int, assignment: Partitions = frozenset()) -> Any:
            return response_class(
                version=request.version, throttle_time_ms=0, error_code=code, assignment=encode_assignment(assignment)
            )

        key = (request.group_id, request.member_id)
        with self._lock:
            known = self._given.get(key)
        if known is None:
            return answer(UNKNOWN_MEMBER_ID)
        code, now = await self._beat(request, known[1])
        if code != NONE or now.generation != request.generation_id:
            return answer(code if code != NONE else REBALANCE_IN_PROGRESS)
        with self._lock:
            self._given[key] = (now.generation, now.assignment)
        return answer(NONE, now.assignment)

    async def heartbeat(self, request: Any, response_class: Any) -> Any:
        def answer(code: int) -> Any:
            return response_class(version=request.version, throttle_time_ms=0, error_code=code)

        with self._lock:
            known = self._given.get((request.group_id, request.member_id))
        if known is None:
            return answer(REBALANCE_IN_PROGRESS)  # not ours (another broker's, or before a restart)
        generation, given = known
        code, now = await self._beat(request, given)
        if code != NONE:
            return answer(code)
        if now.generation != generation or now.assignment != given or now.reconciling:
            return answer(REBALANCE_IN_PROGRESS)
        return answer(NONE)

    async def _beat(self, request: Any, owned: Iterable[tuple[str, int]]) -> tuple[int, groups.Membership]:
        try:
            now = await self._run(
                self._db.call,
                groups.heartbeat,
                group_id=request.group_id,
                member_id=request.member_id,
                group_instance_id=getattr(request, "group_instance_id", None),
                owned=owned,
            )
        except errors.OncelogError as exc:
            return error_code(exc), groups.Membership(request.member_id, -1, frozenset())
        return NONE, now

    async def leave_group(self, request: Any, response_class: Any) -> Any:
        if request.version >= 3:
            return await self._leave_members(request, response_class)
        with self._lock:
            self._given.pop((request.group_id, request.member_id), None)
        try:
            await self._run(self._db.call, groups.leave_group, group_id=request.group_id, member_id=request.member_id)
        except errors.OncelogError as exc:
            return response_class(version=request.version, throttle_time_ms=0, error_code=error_code(exc))
        return response_class(version=request.version, throttle_time_ms=0, error_code=NONE)

    async def _leave_members(self, request: Any, response_class: Any) -> Any:
        """LeaveGroup v3 and later (KIP-345): members by member id or group instance id, in a batch
        (a consumer leaving, or an admin's removeMembersFromConsumerGroup)."""
        wanted = [(m.member_id or None, m.group_instance_id) for m in request.members]
        member_class = response_class.MemberResponse
        try:  # no member named: the store's INVALID_REQUEST
            left = await self._run(self._db.call, groups.leave_group_members, group_id=request.group_id, members=wanted)
        except errors.OncelogError as exc:
            return response_class(version=request.version, throttle_time_ms=0, error_code=error_code(exc), members=[])
        codes = {
            None: NONE,
            "unknown_member_id": UNKNOWN_MEMBER_ID,
            "fenced_instance_id": ERROR_CODES[errors.FencedInstanceIdError],
        }
        with self._lock:
            for member_id, _, error in left:
                if error is None:
                    self._given.pop((request.group_id, member_id), None)
        return response_class(
            version=request.version,
            throttle_time_ms=0,
            error_code=NONE,
            members=[
                member_class(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=codes[error])
                for m, (_, _, error) in zip(request.members, left, strict=True)
            ],
        )

    # --- offsets ---------------------------------------------------------------------------------------

    async def offset_commit(self, request: Any, response_class: Any) -> Any:
        offsets = committed_offsets(request)
        member = request.member_id or None
        generation = request.generation_id_or_member_epoch
        try:
            await self._run(
                self._db.call,
                groups.offset_commit,
                group_id=request.group_id,
                offsets=offsets,
                member_id=member,
                group_instance_id=getattr(request, "group_instance_id", None),
                generation=generation if member is not None and generation >= 0 else None,
            )
            code = NONE
        except errors.OncelogError as exc:
            code = error_code(exc)
        return commit_answer(request, response_class, response_class.OffsetCommitResponseTopic, code)

    async def offset_fetch(self, request: Any, response_class: Any) -> Any:
        stable = bool(getattr(request, "require_stable", False))
        try:
            found = await self._run(self._offset_fetch, request.group_id, request.topics, stable)
            code = NONE
        except errors.OncelogError as exc:
            found, code = {}, error_code(exc)
        by_topic: dict[str, list[Any]] = {}
        partition_class = response_class.OffsetFetchResponseTopic.OffsetFetchResponsePartition
        for (topic, partition), committed in sorted(found.items()):
            unstable = committed.error == "unstable_offset_commit"
            by_topic.setdefault(topic, []).append(
                partition_class(
                    partition_index=partition,
                    committed_offset=-1 if committed.offset is None else committed.offset,
                    # Every partition's leader epoch is 0 here (Metadata says so), so an offset
                    # was committed in epoch 0.
                    committed_leader_epoch=-1 if committed.offset is None else 0,
                    metadata=committed.metadata,
                    error_code=88 if unstable else (3 if committed.error else NONE),  # UNSTABLE_OFFSET_COMMIT
                )
            )
        return response_class(
            version=request.version,
            throttle_time_ms=0,
            error_code=code,
            topics=[response_class.OffsetFetchResponseTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )

    def _offset_fetch(self, group_id: str, wanted: Any, stable: bool) -> dict[tuple[str, int], groups.CommittedOffset]:
        """The committed offsets asked for; with no topics named (v2 and later), every partition
        of every topic that has one."""
        with self._db.connect() as conn:
            if wanted is None:
                known = topics.list_topics(conn)
                every = [(t, p) for t, n in known.items() for p in range(n)]
                answers = groups.offset_fetch(conn, group_id=group_id, partitions=every, require_stable=stable)
                return {tp: a for tp, a in answers.items() if a.offset is not None}
            asked = [(t.name, p) for t in wanted for p in t.partition_indexes]
            return groups.offset_fetch_stable(conn, group_id=group_id, partitions=asked, require_stable=stable)
