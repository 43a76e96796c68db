"""What the broker's parts share: the table of APIs served, Kafka's error codes for the store's
errors, and this broker's address."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa

from oncelog import errors
from oncelog.store.engine import discarded_if_lost
from oncelog.store.errors import mapped_errors

__all__ = [
    "API_RANGES",
    "CLIENT_ID",
    "CLUSTER_AUTHORIZATION_FAILED",
    "ERROR_CODES",
    "FETCH_AHEAD",
    "INVALID_REQUEST",
    "NONE",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "Database",
    "FetchAhead",
    "Node",
    "admin_error_code",
    "commit_answer",
    "committed_offsets",
    "error_code",
]

#: The versions served of each API (key: min, max): dispatch and the ApiVersions answer both read
#: this one table, so they cannot drift. Produce from 3 and Fetch from 4 are record batch v2
#: (librdkafka turns v2 on only when both are offered, even to a pure producer); Produce 12 and
#: later need KIP-890's transaction protocol, Fetch 13 and later topic ids.
API_RANGES: dict[int, tuple[int, int]] = {
    0: (3, 11),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 10),  # ListOffsets (7: -3, 8: -4, 9: -5, 10: a timeout)
    3: (0, 12),  # Metadata
    8: (2, 8),  # OffsetCommit
    9: (1, 7),  # OffsetFetch
    10: (0, 3),  # FindCoordinator
    11: (0, 5),  # JoinGroup
    12: (0, 3),  # Heartbeat
    13: (0, 5),  # LeaveGroup (3: members by id or group instance id, in a batch)
    14: (0, 3),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups (5: group types, KIP-848)
    17: (1, 1),  # SaslHandshake (v0 sends raw SASL tokens after it: not served)
    18: (0, 3),  # ApiVersions
    19: (0, 5),  # CreateTopics (6 and later: topic ids)
    20: (0, 5),  # DeleteTopics (6 and later: topic ids)
    21: (0, 2),  # DeleteRecords
    22: (0, 4),  # InitProducerId
    24: (0, 3),  # AddPartitionsToTxn (4 and later: the brokers' batched form, KIP-890)
    25: (0, 3),  # AddOffsetsToTxn
    26: (0, 4),  # EndTxn (5 and later: KIP-890's epoch bump per transaction)
    28: (0, 3),  # TxnOffsetCommit
    29: (0, 3),  # DescribeAcls
    30: (0, 3),  # CreateAcls
    31: (0, 3),  # DeleteAcls
    32: (0, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    34: (0, 2),  # AlterReplicaLogDirs
    35: (0, 4),  # DescribeLogDirs (5: cordoned log dirs, KIP-1066)
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    42: (0, 2),  # DeleteGroups
    47: (0, 0),  # OffsetDelete
    43: (0, 2),  # ElectLeaders
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 0),  # AlterPartitionReassignments (1: replication factor changes)
    46: (0, 0),  # ListPartitionReassignments
    61: (0, 0),  # DescribeProducers
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions (2: a transactional id pattern)
    75: (0, 0),  # DescribeTopicPartitions (KIP-966): Metadata's partitions, paged
}

#: Store errors as the Kafka error codes of the same meaning (Kafka's Errors.java).
ERROR_CODES: dict[type[errors.OncelogError], int] = {
    errors.OffsetOutOfRangeError: 1,
    errors.CorruptRecordError: 2,
    errors.UnknownTopicOrPartitionError: 3,
    errors.RequestTimeoutError: 7,
    errors.RecordTooLargeError: 10,
    errors.DatabaseUnavailableError: 13,  # NETWORK_EXCEPTION: retriable, outcome unknown
    errors.RecordBatchTooLargeError: 18,
    errors.TopicAuthorizationError: 29,
    errors.InvalidTimestampError: 32,
    errors.InvalidRequestError: 42,
    errors.OutOfOrderSequenceError: 45,
    errors.InvalidProducerEpochError: 47,
    errors.InvalidProducerIdMappingError: 49,
    errors.TransactionalIdAuthorizationError: 53,
    errors.UnknownProducerIdError: 59,
    errors.InvalidRecordError: 87,
    errors.ProducerFencedError: 90,
    errors.OffsetMetadataTooLargeError: 12,
    errors.IllegalGenerationError: 22,
    errors.UnassignedPartitionError: 22,  # a commit for a partition the member does not own: rejoin
    errors.InvalidGroupIdError: 24,
    errors.UnknownMemberIdError: 25,
    errors.RebalanceInProgressError: 27,
    errors.GroupAuthorizationError: 30,
    errors.NonEmptyGroupError: 68,
    errors.GroupSubscribedToTopicError: 86,
    errors.GroupIdNotFoundError: 69,
    errors.FencedInstanceIdError: 82,
    errors.UnstableOffsetCommitError: 88,
    errors.InvalidTopicError: 17,
    errors.TopicAlreadyExistsError: 36,
    errors.InvalidPartitionsError: 37,
    errors.InvalidTxnStateError: 48,
    errors.TransactionalIdNotFoundError: 49,  # INVALID_PRODUCER_ID_MAPPING, as Kafka answers an unknown id
    errors.InvalidTransactionTimeoutError: 50,
    errors.ConcurrentTransactionsError: 51,
    # The store aborted the transaction (its timeout) and bumped the epoch: abortable, and the
    # client's KIP-360 bump recovers, as after Kafka's coordinator-side timeout (KIP-588).
    errors.TransactionTimeoutError: 47,
    errors.TransactionAbortableError: 47,
}
UNKNOWN_SERVER_ERROR, NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST = -1, 0, 3, 42
#: Kafka's CLUSTER_AUTHORIZATION_FAILED: the admin role is Kafka's cluster permission.
CLUSTER_AUTHORIZATION_FAILED = 31


def error_code(exc: BaseException, *, denied: int | None = None) -> int:
    """The Kafka error code of ``exc``: its class's, or its nearest base class's. ``denied``: the
    code of the store's plain AuthorizationError (the role may not call a function or read a
    view) for the request at hand, e.g. CLUSTER_AUTHORIZATION_FAILED for admin APIs, which need
    the admin role; its subclasses (topic, group, transactional id) keep their own codes."""
    if denied is not None and type(exc) is errors.AuthorizationError:
        return denied
    for cls in type(exc).__mro__:
        code = ERROR_CODES.get(cls)
        if code is not None:
            return code
    return UNKNOWN_SERVER_ERROR


def admin_error_code(exc: BaseException) -> int:
    """:func:`error_code` for an admin API: the store's plain AuthorizationError (the role is not
    the admin role) is CLUSTER_AUTHORIZATION_FAILED."""
    return error_code(exc, denied=CLUSTER_AUTHORIZATION_FAILED)


@dataclass(frozen=True, slots=True)
class Node:
    """This broker as clients must reach it (``--advertised-listener``)."""

    node_id: int
    host: str
    port: int


def committed_offsets(request: Any) -> dict[tuple[str, int], tuple[int, str]]:
    """An OffsetCommit's or TxnOffsetCommit's offsets: (topic, partition) -> (offset, metadata)."""
    return {
        (t.name, p.partition_index): (p.committed_offset, p.committed_metadata or "")
        for t in request.topics
        for p in t.partitions
    }


def commit_answer(request: Any, response_class: Any, topic_class: Any, code: int) -> Any:
    """The answer to an OffsetCommit or TxnOffsetCommit whose offsets all got ``code`` (the
    store commits them together or not at all)."""
    partition_class = next(
        getattr(topic_class, name) for name in dir(topic_class) if name.endswith("ResponsePartition")
    )
    return response_class(
        version=request.version,
        throttle_time_ms=0,
        topics=[
            topic_class(
                name=t.name,
                partitions=[partition_class(partition_index=p.partition_index, error_code=code) for p in t.partitions],
            )
            for t in request.topics
        ],
    )


T = TypeVar("T")

#: The client id of the request being answered (its header's), which the store keeps for group members.
CLIENT_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("oncelog_broker_client_id", default=None)

#: The engine of the principal the current connection authenticated as (SASL); None: the broker's own.
PRINCIPAL_ENGINE: contextvars.ContextVar[sa.Engine | None] = contextvars.ContextVar(
    "oncelog_broker_principal_engine", default=None
)


class FetchAhead:
    """One connection's fetch read ahead: the request it answers (positions, budgets, isolation)
    and the task reading it. Set per connection in :data:`FETCH_AHEAD`.

    What it read is at most ``fresh_s`` old when it answers: a read ahead is the state of the log
    when it started, and a Fetch answered from it must not trail the log by more than a fetch
    that took that long would (records deleted, permissions revoked, writes acknowledged since).
    Past that, and at any other request on the connection (which may have written, deleted or
    changed what a Fetch after it must see), it is dropped, and so is the memory it holds."""

    def __init__(self, fresh_s: float) -> None:
        self.fresh_s = fresh_s
        self._key: tuple[frozenset[Any], frozenset[Any], bool] | None = None
        self._task: asyncio.Future[Any] | None = None
        self._started = 0.0

    def start(self, key: tuple[frozenset[Any], frozenset[Any], bool], task: asyncio.Future[Any]) -> None:
        """Hold ``task``, the read ahead for the Fetch ``key`` names, until it is taken or stale."""
        self.drop()
        self._key, self._task, self._started = key, task, time.monotonic()
        # A read that fails and is never taken must not be reported as an unretrieved exception.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        asyncio.get_running_loop().call_later(self.fresh_s, self._expire, task)

    def take(self, key: tuple[frozenset[Any], frozenset[Any], bool]) -> asyncio.Future[Any] | None:
        """The read ahead if it is for ``key`` and fresh; either way the connection holds none after."""
        task, fresh = self._task, time.monotonic() - self._started <= self.fresh_s
        if task is not None and (self._key != key or not fresh):
            self.drop()
            return None
        self._task = None
        return task

    def drop(self) -> None:
        """Drop what is read ahead (a store call under way still completes, and is ignored)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _expire(self, task: asyncio.Future[Any]) -> None:
        if self._task is task:
            self.drop()


#: The current connection's :class:`FetchAhead`; None outside a connection (no read ahead).
FETCH_AHEAD: contextvars.ContextVar[FetchAhead | None] = contextvars.ContextVar(
    "oncelog_broker_fetch_ahead", default=None
)


class Database:
    """The store as a request sees it: through the engine of the PostgreSQL role its connection
    authenticated as (SASL/PLAIN), else through the broker's own. Every store call of a request
    takes its connection here, so the store's ACLs and ownership checks see that role."""

    def __init__(self, engine: sa.Engine) -> None:
        self.default = engine

    @contextlib.contextmanager
    def connect(self) -> Iterator[sa.Connection]:
        """A pooled autocommit connection of the current principal. A connection refused or
        lost is a DatabaseUnavailableError (checkout included), which the handlers answer with
        a retriable code, not a failure of the broker that closes the client's connection."""
        with mapped_errors(), (PRINCIPAL_ENGINE.get() or self.default).connect() as conn, discarded_if_lost(conn):
            yield conn

    def own_connection(self) -> sa.Connection:
        """A connection of the broker's own role that its caller keeps (the waker's, the
        wake-up session's) and closes; a refused one is a DatabaseUnavailableError."""
        with mapped_errors():
            return self.default.connect()

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(conn, *args, **kwargs)`` on a connection of the current principal (a store
        function; the broker runs this on a thread)."""
        with self.connect() as conn:
            return fn(conn, *args, **kwargs)
