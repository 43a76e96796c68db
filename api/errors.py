"""One exception hierarchy for oncelog.

Every error is marked like Kafka's client errors:

* ``retriable``: the same request may succeed if sent again (a connection lost, a
  serialization failure, a transaction still completing). Clients retry these themselves.
* ``abortable``: the current transaction cannot commit, but the producer may abort it and
  carry on (KIP-360).
* ``fatal``: the producer (or consumer) instance can do nothing useful any more; close it.

Protocol errors raised inside the SQL functions carry SQLSTATE codes of our own, in the
class ``OL`` (unused by PostgreSQL). ``sqlstate`` on each class names the code; the mapping from
database errors to these classes lives in one place, :mod:`oncelog.store.errors`.

The docstring of each class is its default message.
"""

from __future__ import annotations

from typing import ClassVar


class OncelogError(Exception):
    """An oncelog operation failed."""

    #: Kafka's error name (``OUT_OF_ORDER_SEQUENCE_NUMBER``), where one exists.
    kafka_name: ClassVar[str | None] = None
    #: The SQLSTATE the SQL functions raise for this error, where they raise it.
    sqlstate: ClassVar[str | None] = None
    retriable: ClassVar[bool] = False
    abortable: ClassVar[bool] = False
    fatal: ClassVar[bool] = False

    def __init__(self, message: str | None = None) -> None:
        doc = (type(self).__doc__ or "").strip().splitlines()
        default = doc[0] if doc else type(self).__name__
        super().__init__(message or default)

    @property
    def message(self) -> str:
        """The human-readable message."""
        return str(self.args[0]) if self.args else ""


# --- families --------------------------------------------------------------------------------


class RetriableError(OncelogError):
    """A transient failure: the request may succeed if sent again."""

    retriable = True


class AbortableError(OncelogError):
    """The current transaction must be aborted; the producer may then carry on."""

    abortable = True


class FatalError(OncelogError):
    """This client instance cannot continue; close it and create a new one."""

    fatal = True


class InvalidRequestError(OncelogError):
    """The request is malformed."""

    kafka_name = "INVALID_REQUEST"
    sqlstate = "OL000"


class ConfigurationError(OncelogError):
    """A client or server setting is invalid."""

    kafka_name = "INVALID_CONFIG"
    sqlstate = "OL001"


# --- connection and infrastructure -----------------------------------------------------------


class DatabaseUnavailableError(RetriableError):
    """The database could not be reached, or the connection was lost."""

    kafka_name = "NETWORK_EXCEPTION"


class SerializationFailureError(RetriableError):
    """The database aborted the transaction because of a concurrent update; retry it."""


class RequestTimeoutError(RetriableError):
    """The database cancelled the statement: it waited for a lock or ran longer than the client's timeout.

    Raised for PostgreSQL's ``lock_timeout`` (55P03) and ``statement_timeout`` (57014), which the
    clients set on their connections from their own timeouts. The cancelled statement's database
    transaction was rolled back, so nothing it would have written was written.
    """


class SchemaNotReadyError(OncelogError):
    """The oncelog schema is missing or not at the migration head; run `oncelog db upgrade`."""


class ServerBinariesNotFoundError(OncelogError):
    """No PostgreSQL server binaries (initdb, pg_ctl) were found on this machine."""


class AuthorizationError(OncelogError):
    """The database role lacks the privilege for this operation (see the roles in docs/security.md)."""

    kafka_name = "CLUSTER_AUTHORIZATION_FAILED"


class EmbeddedServerError(OncelogError):
    """The embedded PostgreSQL server could not be started or stopped."""


# --- topics and records ------------------------------------------------------------------------


class UnknownTopicOrPartitionError(OncelogError):
    """This topic or partition does not exist.

    Kafka marks this retriable because metadata propagates between brokers; oncelog has one
    catalogue, so a missing topic stays missing and this is not retriable.
    """

    kafka_name = "UNKNOWN_TOPIC_OR_PARTITION"
    sqlstate = "OL101"


class TopicAlreadyExistsError(OncelogError):
    """A topic with this name already exists."""

    kafka_name = "TOPIC_ALREADY_EXISTS"
    sqlstate = "OL102"


class InvalidTopicError(OncelogError):
    """The topic name is not valid (letters, digits, '.', '_', '-'; 1 to 249 characters)."""

    kafka_name = "INVALID_TOPIC_EXCEPTION"
    sqlstate = "OL103"


class InvalidPartitionsError(OncelogError):
    """The partition count is not valid."""

    kafka_name = "INVALID_PARTITIONS"
    sqlstate = "OL104"


class RecordTooLargeError(OncelogError):
    """A record is larger than the topic's max_message_bytes."""

    kafka_name = "MESSAGE_TOO_LARGE"
    sqlstate = "OL105"


class RecordBatchTooLargeError(OncelogError):
    """The batch holds more records than the store accepts in one request."""

    kafka_name = "RECORD_LIST_TOO_LARGE"
    sqlstate = "OL106"


class InvalidRecordError(OncelogError):
    """A record or batch is malformed (empty batch, bad sequence, control record from a client)."""

    kafka_name = "INVALID_RECORD"
    sqlstate = "OL107"


class InvalidTimestampError(InvalidRecordError):
    """A record's timestamp is outside [1970-01-01, now + the topic's message_timestamp_after_max_ms]."""

    kafka_name = "INVALID_TIMESTAMP"
    sqlstate = "OL109"


class CorruptRecordError(OncelogError):
    """A stored record cannot be decoded; seek past its offset to read on.

    Revision 0017 refuses such records on the write path; this is what a reader says of one
    written before it (or by the schema owner, who bypasses the protocol functions).
    """

    kafka_name = "CORRUPT_MESSAGE"

    def __init__(self, message: str | None = None, *, topic: str = "", partition: int = -1, offset: int = -1) -> None:
        super().__init__(message)
        #: Where the record is: ``consumer.seek(TopicPartition(topic, partition), offset + 1)`` skips it.
        self.topic = topic
        self.partition = partition
        self.offset = offset


class DeliveryTimeoutError(RetriableError):
    """The record was not acknowledged within delivery_timeout_ms; it may or may not have been written."""

    kafka_name = "REQUEST_TIMED_OUT"


class ProducerClosedError(OncelogError):
    """The producer is closed; records sent to it are not delivered."""


class OffsetOutOfRangeError(OncelogError):
    """The requested offset is outside the partition's log."""

    kafka_name = "OFFSET_OUT_OF_RANGE"
    sqlstate = "OL108"


# --- idempotent producer ---------------------------------------------------------------------


class OutOfOrderSequenceError(OncelogError):
    """The batch's first sequence does not follow the last one written for this producer and partition."""

    kafka_name = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    sqlstate = "OL201"


class InvalidProducerEpochError(AbortableError):
    """The producer's epoch is older than the one the store knows."""

    kafka_name = "INVALID_PRODUCER_EPOCH"
    sqlstate = "OL202"


class UnknownProducerIdError(OncelogError):
    """The store holds no state for this producer id (never issued, or expired)."""

    kafka_name = "UNKNOWN_PRODUCER_ID"
    sqlstate = "OL203"


# --- transactions ----------------------------------------------------------------------------


class ProducerFencedError(FatalError):
    """Another producer instance with the same transactional id has taken over (a newer epoch)."""

    kafka_name = "PRODUCER_FENCED"
    sqlstate = "OL301"


class InvalidProducerIdMappingError(FatalError):
    """The producer id does not belong to this transactional id (expired or replaced)."""

    kafka_name = "INVALID_PRODUCER_ID_MAPPING"
    sqlstate = "OL302"


class InvalidTxnStateError(OncelogError):
    """The request is not valid in the transaction's current state."""

    kafka_name = "INVALID_TXN_STATE"
    sqlstate = "OL303"


class InvalidTransactionTimeoutError(OncelogError):
    """The transaction timeout is not within (0, transaction_max_timeout_ms]."""

    kafka_name = "INVALID_TRANSACTION_TIMEOUT"
    sqlstate = "OL304"


class ConcurrentTransactionsError(RetriableError):
    """The previous transaction of this transactional id is still completing; retry shortly."""

    kafka_name = "CONCURRENT_TRANSACTIONS"
    sqlstate = "OL305"


class TransactionAbortableError(AbortableError):
    """The transaction cannot commit and must be aborted."""

    kafka_name = "TRANSACTION_ABORTABLE"
    sqlstate = "OL306"


class TransactionTimeoutError(AbortableError):
    """The transaction was open longer than its timeout and has been aborted."""

    kafka_name = "TRANSACTION_TIMED_OUT"
    sqlstate = "OL307"


class IllegalStateError(OncelogError):
    """The call is not valid in the client's current transaction state (a programming error)."""


class TransactionAbortedError(AbortableError):
    """The record was not written: its transaction was aborted before the record was sent."""


class TransactionalIdNotFoundError(OncelogError):
    """No transaction state exists for this transactional id."""

    kafka_name = "TRANSACTIONAL_ID_NOT_FOUND"
    sqlstate = "OL308"


# --- consumer groups -------------------------------------------------------------------------


class InvalidGroupIdError(OncelogError):
    """The group id is not valid."""

    kafka_name = "INVALID_GROUP_ID"
    sqlstate = "OL401"


class UnknownMemberIdError(OncelogError):
    """The member id is not a member of the group (it left or was removed)."""

    kafka_name = "UNKNOWN_MEMBER_ID"
    sqlstate = "OL402"


class IllegalGenerationError(OncelogError):
    """The generation is not the group's current generation."""

    kafka_name = "ILLEGAL_GENERATION"
    sqlstate = "OL403"


class RebalanceInProgressError(RetriableError):
    """The group is rebalancing; rejoin and retry."""

    kafka_name = "REBALANCE_IN_PROGRESS"
    sqlstate = "OL404"


class FencedInstanceIdError(FatalError):
    """Another member with the same group_instance_id has taken this member's place."""

    kafka_name = "FENCED_INSTANCE_ID"
    sqlstate = "OL405"


class OffsetMetadataTooLargeError(OncelogError):
    """The offset commit's metadata is larger than the store accepts."""

    kafka_name = "OFFSET_METADATA_TOO_LARGE"
    sqlstate = "OL406"


class UnstableOffsetCommitError(RetriableError):
    """A transaction holds pending offsets for this partition; wait until it ends."""

    kafka_name = "UNSTABLE_OFFSET_COMMIT"
    sqlstate = "OL407"


class UnassignedPartitionError(OncelogError):
    """The member committed offsets for a partition not assigned to it in this generation (KIP-1287)."""

    kafka_name = "UNASSIGNED_PARTITION"
    sqlstate = "OL408"


class GroupIdNotFoundError(OncelogError):
    """The group does not exist."""

    kafka_name = "GROUP_ID_NOT_FOUND"
    sqlstate = "OL409"


class NonEmptyGroupError(OncelogError):
    """The group has live members; stop its consumers before changing its offsets."""

    kafka_name = "NON_EMPTY_GROUP"
    sqlstate = "OL410"


class GroupSubscribedToTopicError(OncelogError):
    """A live member of the group subscribes to the partition's topic: its committed offset stays
    (Admin.delete_group_offsets; stop the consumers, or unsubscribe them from the topic, first)."""

    kafka_name = "GROUP_SUBSCRIBED_TO_TOPIC"


# --- access control (ACLs, docs/acl.md) ----------------------------------------------------------


class ConcurrentRunError(OncelogError):
    """Another run of the pipeline's group committed offsets since this run fixed its input:
    nothing of this run was committed; run it again (it reads from the new offsets)."""


class TopicAuthorizationError(AuthorizationError):
    """No ACL allows this role the operation on the topic (ACL enforcement is on; see docs/acl.md)."""

    kafka_name = "TOPIC_AUTHORIZATION_FAILED"
    sqlstate = "OL501"


class GroupAuthorizationError(AuthorizationError):
    """No ACL allows this role the operation on the consumer group (ACL enforcement is on; see docs/acl.md)."""

    kafka_name = "GROUP_AUTHORIZATION_FAILED"
    sqlstate = "OL502"


class TransactionalIdAuthorizationError(AuthorizationError):
    """No ACL allows this role to use the transactional id (ACL enforcement is on; see docs/acl.md).

    Fatal, as in Kafka: the producer cannot initialise, commit or abort under this id."""

    kafka_name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    sqlstate = "OL503"
    fatal = True


def _all_subclasses(cls: type[OncelogError]) -> list[type[OncelogError]]:
    out: list[type[OncelogError]] = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


def error_for_sqlstate(sqlstate: str) -> type[OncelogError] | None:
    """The error class that the SQL functions raise with ``sqlstate``, if it is one of ours."""
    return _BY_SQLSTATE.get(sqlstate)


_ALL: list[type[OncelogError]] = [OncelogError, *_all_subclasses(OncelogError)]
# Only classes that declare a code themselves: a subclass inherits its parent's code but is not
# what the SQL functions mean by it.
_BY_SQLSTATE: dict[str, type[OncelogError]] = {c.sqlstate: c for c in _ALL if c.sqlstate and "sqlstate" in c.__dict__}
