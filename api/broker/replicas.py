"""Kafka's replica APIs, answered for the one replica each partition has here: ElectLeaders,
DescribeLogDirs, AlterReplicaLogDirs, AlterPartitionReassignments, ListPartitionReassignments.

Copies, failover and disks are PostgreSQL's business (its replication and its tablespaces), which
the Kafka protocol cannot describe. What the protocol can say stays true: this broker leads every
partition (no election is needed), the log lives in one directory (the store, named
``postgresql``, with each partition's size), and no reassignment is going on; asking for any
other replica or directory is refused, partition by partition, never silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oncelog import errors
from oncelog.broker.common import NONE, UNKNOWN_TOPIC_OR_PARTITION, Database, Node, error_code
from oncelog.store import ops, topics

__all__ = ["LOG_DIR", "ReplicaHandlers"]

#: The one log directory: the store.
LOG_DIR = "postgresql"
#: Kafka's ELECTION_NOT_NEEDED, LOG_DIR_NOT_FOUND and INVALID_REPLICA_ASSIGNMENT.
_ELECTION_NOT_NEEDED, _LOG_DIR_NOT_FOUND, _INVALID_REPLICA_ASSIGNMENT = 84, 57, 39


class ReplicaHandlers:
    """The replica APIs of a broker that is every partition's one replica."""

    def __init__(self, database: Database, run: Callable[..., Any], node: Node) -> None:
        self._db = database
        self._run = run
        self._node = node

    async def _known(self) -> dict[str, int]:
        return dict(await self._run(self._db.call, topics.list_topics))

    def _per_partition(
        self, asked: list[tuple[str, list[int]]], known: dict[str, int], code: int
    ) -> dict[str, list[tuple[int, int]]]:
        """``code`` for each partition asked for that exists, UNKNOWN_TOPIC_OR_PARTITION for the others."""
        out: dict[str, list[tuple[int, int]]] = {}
        for topic, partitions in asked:
            count = known.get(topic, 0)
            out.setdefault(topic, []).extend(
                (p, code if 0 <= p < count else UNKNOWN_TOPIC_OR_PARTITION) for p in partitions
            )
        return out

    async def elect_leaders(self, request: Any, response_class: Any) -> Any:
        known = await self._known()
        asked = (
            [(t.topic, list(t.partitions)) for t in request.topic_partitions]
            if request.topic_partitions is not None
            else [(name, list(range(count))) for name, count in sorted(known.items())]
        )
        result_class = response_class.ReplicaElectionResult
        return response_class(
            version=request.version,
            throttle_time_ms=0,
            error_code=NONE,
            replica_election_results=[
                result_class(
                    topic=topic,
                    partition_result=[
                        result_class.PartitionResult(partition_id=p, error_code=code, error_message=None)
                        for p, code in parts
                    ],
                )
                for topic, parts in self._per_partition(asked, known, _ELECTION_NOT_NEEDED).items()
            ],
        )

    async def describe_log_dirs(self, request: Any, response_class: Any) -> Any:
        result_class = response_class.DescribeLogDirsResult
        topic_class = result_class.DescribeLogDirsTopic
        try:
            sizes: dict[tuple[str, int], int] = await self._run(self._db.call, ops.partition_sizes)
            code = NONE
        except errors.OncelogError as exc:
            sizes, code = {}, error_code(exc)
        if request.topics is not None:
            wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
            sizes = {tp: size for tp, size in sizes.items() if tp in wanted}
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), size in sorted(sizes.items()):
            by_topic.setdefault(topic, []).append(
                topic_class.DescribeLogDirsPartition(
                    partition_index=partition, partition_size=size, offset_lag=0, is_future_key=False
                )
            )
        return response_class(
            version=request.version,
            throttle_time_ms=0,
            error_code=code,
            results=[
                result_class(
                    error_code=code,
                    log_dir=LOG_DIR,
                    topics=[topic_class(name=t, partitions=ps) for t, ps in by_topic.items()],
                    total_bytes=-1,  # the database's disk is not the broker's to report
                    usable_bytes=-1,
                    is_cordoned=False,
                )
            ],
        )

    async def alter_replica_log_dirs(self, request: Any, response_class: Any) -> Any:
        known = await self._known()
        result_class = response_class.AlterReplicaLogDirTopicResult
        out: dict[str, list[tuple[int, int]]] = {}
        for d in request.dirs:
            # Moving a replica to the directory it is in is a no-op, as in Kafka.
            code = NONE if d.path == LOG_DIR else _LOG_DIR_NOT_FOUND
            asked = [(t.name, list(t.partitions)) for t in d.topics]
            for topic, parts in self._per_partition(asked, known, code).items():
                out.setdefault(topic, []).extend(parts)
        return response_class(
            version=request.version,
            throttle_time_ms=0,
            results=[
                result_class(
                    topic_name=topic,
                    partitions=[
                        result_class.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=code)
                        for p, code in parts
                    ],
                )
                for topic, parts in out.items()
            ],
        )

    async def alter_partition_reassignments(self, request: Any, response_class: Any) -> Any:
        known = await self._known()
        here = [self._node.node_id]
        topic_class = response_class.ReassignableTopicResponse
        responses = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                if not 0 <= p.partition_index < known.get(t.name, 0):
                    code, message = UNKNOWN_TOPIC_OR_PARTITION, None
                elif p.replicas is None or list(p.replicas) == here:
                    code, message = NONE, None  # a cancel, or the assignment it has: nothing to move
                else:
                    code, message = (
                        _INVALID_REPLICA_ASSIGNMENT,
                        f"the one replica of each partition is broker {here[0]}",
                    )
                parts.append(
                    topic_class.ReassignablePartitionResponse(
                        partition_index=p.partition_index, error_code=code, error_message=message
                    )
                )
            responses.append(topic_class(name=t.name, partitions=parts))
        return response_class(
            version=request.version,
            throttle_time_ms=0,
            allow_replication_factor_change=False,
            error_code=NONE,
            error_message=None,
            responses=responses,
        )

    async def list_partition_reassignments(self, request: Any, response_class: Any) -> Any:
        # Nothing is ever being reassigned.
        return response_class(
            version=request.version, throttle_time_ms=0, error_code=NONE, error_message=None, topics=[]
        )
