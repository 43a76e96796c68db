"""``oncelog.Admin``: topics and maintenance."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta

from oncelog import errors, validate
from oncelog.client import Client
from oncelog.store import acl, compaction, groups, log, ops, outbox, topics, txn
from oncelog.store.compaction import CompactionReport
from oncelog.store.errors import mapped_errors
from oncelog.store.outbox import Capture
from oncelog.store.records import PartitionOffsets
from oncelog.store.topics import TopicConfig, TopicDescription
from oncelog.store.txn import TransactionStatus
from oncelog.types import (
    AclBinding,
    AclBindingFilter,
    GroupDescription,
    GroupListing,
    OffsetAndTimestamp,
    OffsetReset,
    PartitionLag,
    ProducerState,
    TopicPartition,
    TopicSummary,
)

#: Kafka's kafka-transactions.sh find-hanging default: open longer than 15 minutes.
HANGING_AFTER = timedelta(minutes=15)


class Admin(Client):
    """Administer topics; run the store's maintenance.

    >>> admin = Admin(url)
    >>> admin.create_topic("orders", partitions=3, config={"max_message_bytes": 1_000_000})
    """

    def create_topic(self, name: str, partitions: int = 1, config: TopicConfig | None = None) -> None:
        """Create a topic (TopicAlreadyExistsError, InvalidTopicError, InvalidPartitionsError).

        Without ``retention_ms`` its records are kept for the store-wide default,
        settings.log_retention_ms (7 days, as Kafka's log.retention.ms); ``-1`` keeps them for ever.
        Retention is applied by the maintenance loop (``oncelog coordinator run``, or
        :meth:`enforce_retention`): nothing is deleted while it does not run."""
        _topic(name)
        validate.integer("partitions", partitions, low=1, error=errors.InvalidPartitionsError)
        config = None if config is None else validate.topic_config(config)
        with self._request() as conn:
            topics.create_topic(conn, name=name, partitions=partitions, config=config)

    def delete_topic(self, name: str) -> None:
        """Delete a topic with all its records and offsets."""
        _topic(name)
        with self._request() as conn:
            topics.delete_topic(conn, name=name)

    def list_topics(self) -> dict[str, int]:
        """Topic names with their partition counts."""
        with self._request() as conn:
            return topics.list_topics(conn)

    def describe_topic(self, name: str) -> TopicDescription:
        """A topic's partitions (with offsets) and configuration."""
        _topic(name)
        with self._request() as conn:
            return topics.describe_topic(conn, name=name)

    def create_partitions(self, name: str, total: int) -> None:
        """Grow a topic to ``total`` partitions (partitions are never removed)."""
        _topic(name)
        validate.integer("total", total, low=1, error=errors.InvalidPartitionsError)
        with self._request() as conn:
            topics.create_partitions(conn, name=name, total=total)

    def delete_records(self, name: str, offsets: Mapping[int, int]) -> dict[int, int]:
        """Delete a topic's records below an offset, per partition (partition -> offset; -1 is the
        high watermark), as Kafka's DeleteRecords: each partition's log start moves up to its
        offset at once, and readers start there. Returns each partition's log start after it
        (Kafka's low watermark); an offset below it changes nothing. OffsetOutOfRangeError beyond
        the high watermark. The records themselves are removed by the maintenance loop
        (``oncelog coordinator run``, or :meth:`enforce_retention`)."""
        _topic(name)
        if not isinstance(offsets, Mapping) or not offsets:
            raise errors.InvalidRequestError("offsets must be a non-empty mapping of partition to offset")
        for partition, offset in offsets.items():
            validate.integer("partition", partition, low=0, error=errors.UnknownTopicOrPartitionError)
            validate.integer("offset", offset, low=-1, high=validate.INT64_MAX, error=errors.OffsetOutOfRangeError)
        with self._request() as conn:
            return topics.delete_records(conn, name=name, offsets=offsets)

    def alter_topic_config(self, name: str, config: TopicConfig) -> None:
        """Set per-topic settings; None resets a setting to its default (retention_ms then follows the
        store-wide settings.log_retention_ms, 7 days; retention_bytes has no limit); -1 is no limit
        for either retention setting."""
        _topic(name)
        config = validate.topic_config(config)
        with self._request() as conn:
            topics.alter_topic_config(conn, name=name, config=config)

    def list_transactions(self, states: list[str] | None = None) -> list[TransactionStatus]:
        """Every transactional id with its coordinator state (optionally only these states)."""
        if states is not None:
            states = [validate.text("state", s, error=errors.InvalidRequestError) for s in _iterable("states", states)]
        with self._request() as conn:
            return txn.list_transactions(conn, states=states)

    def describe_transaction(self, transactional_id: str) -> TransactionStatus:
        """The coordinator state of one transactional id (TransactionalIdNotFoundError if unknown)."""
        validate.text("transactional_id", transactional_id, error=errors.InvalidRequestError)
        with self._request() as conn:
            return txn.describe_transaction(conn, transactional_id=transactional_id)

    def find_hanging_transactions(self, older_than: timedelta = HANGING_AFTER) -> list[TransactionStatus]:
        """Open transactions older than ``older_than``: the ones holding a last stable offset back."""
        if not isinstance(older_than, timedelta):
            raise errors.InvalidRequestError(f"older_than must be a timedelta, not {older_than!r}")
        with self._request() as conn:
            return txn.list_transactions(
                conn, states=["Ongoing", "PrepareCommit", "PrepareAbort"], older_than=older_than
            )

    def abort_transaction(self, transactional_id: str) -> None:
        """Abort an open transaction through the coordinator: its producer is fenced, its records
        are marked aborted, its pending offsets dropped, and the journal says so."""
        validate.text("transactional_id", transactional_id, error=errors.InvalidRequestError)
        with self._request() as conn:
            txn.abort_transaction(conn, transactional_id=transactional_id)

    def expire_transactions(self) -> int:
        """Abort transactions open past their timeout; expire idle transactional ids. Returns aborts."""
        with self._request() as conn:
            return txn.expire_transactions(conn)

    def expire_producers(self) -> int:
        """Drop producer state idle past ``producer_id_expiration_ms``; returns state rows removed."""
        with self._request() as conn:
            return log.expire_producers(conn)

    def expire_txn_history(self, batch: int = 10_000) -> int:
        """Prune the transaction journal's history past ``txn_history_retention_ms`` (each
        transactional id keeps its newest CompleteCommit); returns rows deleted."""
        validate.integer("batch", batch, low=1, error=errors.InvalidRequestError)
        with self._request() as conn:
            return txn.expire_txn_history(conn, batch=batch)

    def enforce_retention(self, batch: int = 10_000) -> int:
        """Apply every topic's retention, deleting in bounded batches; returns records deleted."""
        validate.integer("batch", batch, low=1, error=errors.InvalidRequestError)
        total = 0
        with self._request() as conn:
            while deleted := log.enforce_retention(conn, batch=batch):
                total += deleted
        return total

    def compact(self, topic: str | None = None, *, batch: int = 50_000, force: bool = False) -> CompactionReport:
        """Compact topics whose cleanup_policy is compact (``topic`` only, if given), one bounded
        pass per database transaction: each key's latest record stays; superseded, aborted and
        keyless records go, and tombstones and transaction markers once past delete_retention_ms.
        Without ``force`` a partition is compacted when its dirty ratio reaches
        min_cleanable_dirty_ratio, or its oldest dirty record max_compaction_lag_ms, as Kafka's
        cleaner; with ``force``, whenever it has anything to clean. Stops when nothing needs a pass,
        or when a partition comes round again after its clean section reached the end it had when
        first met (records written since are the next call's), so it ends under any write load.
        ConfigurationError when ``topic`` is not compacted."""
        if topic is not None:
            _topic(topic)
        validate.integer("batch", batch, low=1, high=10_000_000, error=errors.InvalidRequestError)
        passes: list[compaction.CompactionPass] = []
        # Each partition's end when first met: a partition is done once its clean section reaches
        # it, or a pass finds nothing more; meeting a done partition again ends the run.
        targets: dict[tuple[str, int], int] = {}
        done_with: set[tuple[str, int]] = set()
        while True:
            with self._request() as conn:
                done = compaction.compact(conn, topic=topic, batch=batch, force=force)
            if done is None:
                break
            passes.append(done)  # committed: it counts even when it ends the run
            where = (done.topic, done.partition)
            if where in done_with:
                break
            target = targets.setdefault(where, done.clean_offset + done.dirty_offsets)
            if not done.more or done.clean_offset >= target:
                done_with.add(where)
        return CompactionReport(passes)

    def compaction_status(self, topic: str) -> list[compaction.PartitionCompaction]:
        """Per partition of ``topic``: its clean section, dirty ratio, and what compaction removed."""
        _topic(topic)
        with self._request() as conn:
            return compaction.compaction_status(conn, topic=topic)

    # --- the operator's views ------------------------------------------------------------------

    def topic_summaries(self) -> list[TopicSummary]:
        """Every topic with its partition count, offsets held, bytes and open transactions."""
        with self._request() as conn:
            return ops.topic_summaries(conn)

    def list_offsets(self, topic: str) -> list[PartitionOffsets]:
        """Log start offset, high watermark and last stable offset of every partition of ``topic``."""
        _topic(topic)
        with self._request() as conn:
            return log.list_offsets(conn, topic=topic)

    def offsets_for_times(self, topic: str, timestamp: datetime) -> dict[TopicPartition, int]:
        """Per partition, the first offset whose record is at or after ``timestamp`` (else the
        high watermark), as Kafka's ListOffsets by timestamp."""
        _topic(topic)
        validate.aware_datetime("timestamp", timestamp)
        with self._request() as conn:
            bounds = log.list_offsets(conn, topic=topic)
            found = log.list_offsets_for_times(
                conn, requests=[(topic, b.partition, timestamp) for b in bounds], read_committed=False
            )
        return {
            TopicPartition(topic, b.partition): b.high_watermark if f is None else f[0]
            for b, f in zip(bounds, found, strict=True)
        }

    def max_timestamp_offsets(
        self, topic: str, *, isolation_level: str = "read_uncommitted"
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the offset and timestamp of the record with the largest timestamp (the
        first of equals), as Kafka's ListOffsets with ``OffsetSpec.maxTimestamp()``; None for a
        partition without records. ``read_committed`` looks only below the last stable offset and
        past aborted records. Reads every record of the topic."""
        _topic(topic)
        if isolation_level not in ("read_committed", "read_uncommitted"):
            raise errors.InvalidRequestError(
                f"isolation_level must be 'read_committed' or 'read_uncommitted', not {isolation_level!r}"
            )
        with self._request() as conn:
            bounds = log.list_offsets(conn, topic=topic)
            found = log.list_offsets_max_timestamp(
                conn,
                partitions=[(topic, b.partition) for b in bounds],
                read_committed=isolation_level == "read_committed",
            )
        return {
            TopicPartition(topic, b.partition): None if f is None else OffsetAndTimestamp(*f)
            for b, f in zip(bounds, found, strict=True)
        }

    def capture_table(self, table: str, topic: str) -> None:
        """Capture ``table`` (``schema.name``, or a name on the connection's search path): every
        INSERT, UPDATE and DELETE of its rows becomes a record of ``topic`` in the same
        transaction, keyed by the primary key as JSON, the row after the change as JSON for its
        value (a tombstone for a DELETE), headers ``op`` and ``table``. TRUNCATE is then refused.
        Needs the TRIGGER privilege on the table (its owner has it) and a primary key."""
        validate.text("table", table, error=errors.InvalidRequestError)
        _topic(topic)
        with self._request() as conn:
            outbox.capture_table(conn, table=table, topic=topic)

    def remove_capture(self, table: str) -> bool:
        """Stop capturing ``table``; False if it was not captured."""
        validate.text("table", table, error=errors.InvalidRequestError)
        with self._request() as conn:
            return outbox.remove_capture(conn, table=table)

    def list_captures(self) -> list[Capture]:
        """The captured tables and their topics."""
        with self._request() as conn:
            return outbox.list_captures(conn)

    def describe_producers(self, topic: str, partition: int | None = None) -> list[ProducerState]:
        """The producers with sequence state on ``topic`` (Kafka's kafka-transactions.sh describe-producers)."""
        _topic(topic)
        if partition is not None:
            validate.integer("partition", partition, error=errors.InvalidRequestError)
        with self._request() as conn:
            return ops.describe_producers(conn, topic=topic, partition=partition)

    def list_groups(self) -> list[GroupListing]:
        """Every consumer group with its state and number of members."""
        with self._request() as conn:
            return ops.list_groups(conn)

    def describe_group(self, group_id: str) -> GroupDescription:
        """A group's state, members, assignments and offsets (GroupIdNotFoundError if unknown)."""
        validate.text("group_id", group_id, error=errors.InvalidGroupIdError)
        with self._request() as conn:
            return ops.describe_group(conn, group_id=group_id)

    def group_lag(self, group_id: str) -> list[PartitionLag]:
        """A group's committed offset and lag on every partition it reads or has offsets for."""
        validate.text("group_id", group_id, error=errors.InvalidGroupIdError)
        with self._request() as conn:
            return ops.group_lag(conn, group_id=group_id)

    def delete_group(self, group_id: str) -> None:
        """Delete a consumer group and its committed offsets, as Kafka's DeleteGroups. The group
        must have no live members and no offsets pending in an open transaction
        (NonEmptyGroupError); GroupIdNotFoundError when there is no such group."""
        validate.text("group_id", group_id, error=errors.InvalidGroupIdError)
        with self._request() as conn:
            ops.delete_group(conn, group_id=group_id)

    def delete_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, errors.OncelogError | None]:
        """Delete a consumer group's committed offsets of ``partitions``, as Kafka's
        ``deleteConsumerGroupOffsets`` (OffsetDelete): per partition None once its offset is gone
        (or if it had none), else why it stays: GroupSubscribedToTopicError while a live member
        subscribes to its topic, UnknownTopicOrPartitionError. The group's consumers then start
        those partitions by their ``auto_offset_reset``. GroupIdNotFoundError when there is no
        such group."""
        validate.text("group_id", group_id, error=errors.InvalidGroupIdError)
        wanted = validate.topic_partitions(partitions)
        with self._request() as conn:
            found = ops.offset_delete(conn, group_id=group_id, partitions=wanted)
        reasons: dict[str | None, Callable[[TopicPartition], errors.OncelogError | None]] = {
            None: lambda tp: None,
            "group_subscribed_to_topic": lambda tp: errors.GroupSubscribedToTopicError(
                f"group {group_id!r} has a live member subscribed to topic {tp.topic!r}: the offset of {tp} stays"
            ),
            "unknown_topic_or_partition": lambda tp: errors.UnknownTopicOrPartitionError(
                f"unknown topic or partition {tp}"
            ),
        }
        return {tp: reasons[found[(tp.topic, tp.partition)]](tp) for tp in wanted}

    def remove_group_members(
        self, group_id: str, *, instance_ids: Iterable[str] = (), member_ids: Iterable[str] = ()
    ) -> dict[str, errors.OncelogError | None]:
        """Remove members from a consumer group, as Kafka's ``removeMembersFromConsumerGroup``
        (LeaveGroup v3): static members by group instance id, others by member id; the rest of
        the group is rebalanced once, and the removed members' partitions move at once instead
        of after their session timeout. Per id given: None once removed, else
        UnknownMemberIdError. GroupIdNotFoundError when there is no such group."""
        validate.text("group_id", group_id, error=errors.InvalidGroupIdError)
        instances = validate.texts("instance_ids", instance_ids, error=errors.InvalidRequestError)
        members = validate.texts("member_ids", member_ids, error=errors.InvalidRequestError)
        wanted: list[tuple[str | None, str | None]] = [(None, i) for i in instances] + [(m, None) for m in members]
        if not wanted:
            raise errors.InvalidRequestError("name at least one member to remove (instance_ids or member_ids)")
        with self._request() as conn:
            left = groups.leave_group_members(conn, group_id=group_id, members=wanted)
        return {
            given: None
            if error is None
            else errors.UnknownMemberIdError(f"group {group_id!r} has no member {given!r} that may be removed")
            for given, (_, _, error) in zip(instances + members, left, strict=True)
        }

    def reset_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int], *, dry_run: bool = True
    ) -> list[OffsetReset]:
        """Set a consumer group's committed offsets, as Kafka's ``--reset-offsets``.

        The group must have no live members (NonEmptyGroupError) and every offset must lie within
        its partition's [log start offset, high watermark] (OffsetOutOfRangeError). With
        ``dry_run`` (the default) the same checks run and the answer is the same, but nothing is
        written: the call runs in a database transaction that is rolled back.
        """
        validate.text("group_id", group_id, error=errors.InvalidGroupIdError)
        wanted = {tp: offset for tp, (offset, _) in validate.offset_map(offsets).items()}
        if not isinstance(dry_run, bool):
            raise errors.InvalidRequestError(f"dry_run must be True or False, not {dry_run!r}")
        # Not the autocommit connection of the other calls: the dry run needs a transaction to roll back.
        with mapped_errors():
            conn = self._engine.connect()
        with conn:
            done = ops.reset_group_offsets(conn, group_id=group_id, offsets=wanted)
            if dry_run:
                conn.rollback()
            else:
                with mapped_errors():
                    conn.commit()
        return done

    # --- access control (docs/acl.md) ----------------------------------------------------------

    def create_acls(self, acls: Iterable[AclBinding]) -> list[AclBinding]:
        """Create ACLs, all or none (one database transaction); returns those that did not exist.

        InvalidRequestError for a principal that is not a role, or a resource type, pattern type,
        operation or name that does not fit. ACLs take effect only while enforcement is on
        (:meth:`set_acl_enforcement`)."""
        wanted = [validate.acl_binding(a) for a in _iterable("acls", acls)]
        with mapped_errors():
            conn = self._engine.connect()
        with conn:
            created = acl.create_acls(conn, wanted)
            with mapped_errors():
                conn.commit()
        return created

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Delete every ACL matching one of ``filters`` (a None field matches anything), in one
        database transaction; returns the ACLs deleted."""
        wanted = [validate.acl_filter(f) for f in _iterable("filters", filters)]
        with mapped_errors():
            conn = self._engine.connect()
        with conn:
            gone = acl.delete_acls(conn, wanted)
            with mapped_errors():
                conn.commit()
        return gone

    def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACLs matching ``acl_filter`` (all of them without one)."""
        if acl_filter is not None:
            validate.acl_filter(acl_filter)
        with self._request() as conn:
            return acl.describe_acls(conn, acl_filter or AclBindingFilter())

    def set_acl_enforcement(self, enabled: bool) -> bool:
        """Switch ACL enforcement on or off for the whole installation; returns the previous setting.

        On: client and reader roles may do only what an ACL allows (the admin role and the schema
        owner are not subject to ACLs); create the ACLs first. Off: every role may do what its
        grants allow, as before ACLs."""
        if not isinstance(enabled, bool):
            raise errors.InvalidRequestError(f"enabled must be True or False, not {enabled!r}")
        with self._request() as conn:
            return acl.set_acl_enforcement(conn, enforce=enabled)

    def acl_enforcement(self) -> bool:
        """Whether the installation enforces its ACLs."""
        with self._request() as conn:
            return acl.acl_enforcement(conn)


def _topic(name: object) -> None:
    """A topic name the store can look up (which names are legal is the store's rule)."""
    validate.text("topic", name, error=errors.InvalidTopicError)


def _iterable(name: str, values: object) -> list[object]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise errors.InvalidRequestError(f"{name} must be an iterable, not {values!r}")
    return list(values)
