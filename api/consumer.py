"""``oncelog.Consumer``: read partitions by offset, alone or in a consumer group.

``isolation_level="read_committed"`` (the default, unlike Kafka's client) returns only records
of committed transactions and plain writes, and stops at each partition's last stable offset;
``"read_uncommitted"`` reads to the high watermark. Control records are never returned.

Each poll reads all its partitions in ONE database snapshot, so a transaction that spans
partitions is returned on all of them or on none (Kafka cannot promise this).

With a ``group_id`` and :meth:`Consumer.subscribe`, the store assigns partitions (range or round
robin) and a background thread heartbeats; a new generation seen by a heartbeat is applied at the
next poll (``on_revoke`` / ``on_assign`` run there, on the caller's thread). Positions of newly
assigned partitions start from the group's committed offsets, waiting while a transaction holds
pending offsets for them (KIP-447), so a new owner never starts from a stale offset.

The Consumer is the public API wiring its parts, as Kafka's KafkaConsumer does:
:class:`oncelog.positions.SubscriptionState` (assignment, positions, pauses: bookkeeping, no
I/O), :class:`oncelog.membership.ConsumerCoordinator` (join, heartbeat, rebalance, leave) and
:class:`oncelog.fetcher.Fetcher` (poll's connection and its read ahead).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from operator import itemgetter
from typing import Any, Literal, TypeVar

from oncelog import errors, validate
from oncelog.client import Client
from oncelog.errors import ConfigurationError, UnknownTopicOrPartitionError
from oncelog.fetcher import Fetcher
from oncelog.membership import FROM_CALLBACK, ConsumerCoordinator, DatabaseGroupStore, RebalanceCallback
from oncelog.metrics import WindowedRate
from oncelog.positions import RESETS, NoOffsetForPartitionError, SubscriptionState
from oncelog.serde import Deserializer, deserialize_bytes, resolve_deserializer
from oncelog.store import groups, log, runtime
from oncelog.store import topics as topic_store
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.store.records import PartitionFetch, WaitRegistration
from oncelog.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)

logger = logging.getLogger(__name__)

__all__ = ["Consumer", "NoOffsetForPartitionError", "RebalanceCallback"]

_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
_T = TypeVar("_T")
#: The longest client id the store keeps for a group member.
MAX_CLIENT_ID = 255
#: The generation of a consumer that is no group member (Kafka's UNKNOWN_GENERATION_ID).
STANDALONE_GENERATION = -1
_ASSIGNORS = ("range", "roundrobin", "sticky")
#: Kafka's request.timeout.ms default: the statement and lock timeout of every consumer connection.
_REQUEST_TIMEOUT_MS = 30_000
#: How long past poll()'s timeout its fetch may still take before its connection is cut (a fetch
#: made just before the deadline must be given time to answer).
_FETCH_GRACE_S = 1.0
#: The longest wait the store registers (fetch_wait_v2): a poll waiting longer registers again.
_MAX_WAIT_MS = 300_000
#: The shortest time between two fetches of a woken reader (see poll()).
_WAKE_SPACING_S = 0.005
#: A record's value by position, in a FetchedRecord and in a ConsumerRecord (bytes-consumed metric).
_VALUE = itemgetter(2)
_TAGGED_VALUE = itemgetter(4)


#: ``commit(asynchronous=True)``'s callback: the offsets it committed, and its exception or None.
CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], None]


class Consumer(Client):
    """Read records from assigned or subscribed partitions.

    >>> consumer = Consumer(url)  # read_committed
    >>> consumer.assign([TopicPartition("orders", 0)])
    >>> consumer.seek(TopicPartition("orders", 0), 0)
    >>> records = consumer.poll(timeout=1.0)

    >>> members = Consumer(url, group_id="billing", enable_auto_commit=False)
    >>> members.subscribe(["orders"], on_assign=print, on_revoke=print)
    """

    def __init__(
        self,
        database_url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        client_id: str | None = None,
        isolation_level: str = "read_committed",
        enable_auto_commit: bool | None = None,
        auto_commit_interval_ms: int = 5000,
        auto_offset_reset: str = "earliest",
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3000,
        max_poll_interval_ms: int = 300_000,
        metadata_max_age_ms: int = 300_000,
        consumer_timeout_ms: float | None = None,
        max_poll_records: int = 500,
        partition_assignment_strategy: str = "range",
        default_api_timeout_ms: int = 60_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        fetch_min_backoff_ms: int = 5,
        fetch_max_backoff_ms: int = 200,
        read_ahead: bool = False,
        listen_for_writes: bool = True,
        key_deserializer: str | Deserializer | None = "bytes",
        value_deserializer: str | Deserializer | None = "bytes",
    ) -> None:
        # Numbers first: the rules below compare them, which a str or a NaN would break.
        for name, value in (
            ("auto_commit_interval_ms", auto_commit_interval_ms),
            ("heartbeat_interval_ms", heartbeat_interval_ms),
            ("max_poll_interval_ms", max_poll_interval_ms),
            ("metadata_max_age_ms", metadata_max_age_ms),
            ("default_api_timeout_ms", default_api_timeout_ms),
            ("retry_backoff_ms", retry_backoff_ms),
            ("retry_backoff_max_ms", retry_backoff_max_ms),
            ("fetch_min_backoff_ms", fetch_min_backoff_ms),
            ("fetch_max_backoff_ms", fetch_max_backoff_ms),
        ):
            validate.number(name, value, error=ConfigurationError)
        # Sent to the store as integer columns.
        validate.integer("session_timeout_ms", session_timeout_ms, error=ConfigurationError)
        validate.integer("max_poll_records", max_poll_records, error=ConfigurationError)
        validate.optional_text("client_id", client_id, error=ConfigurationError, max_length=MAX_CLIENT_ID)
        validate.optional_text("group_instance_id", group_instance_id, error=ConfigurationError, max_length=255)
        validate.optional_text("group_id", group_id, error=errors.InvalidGroupIdError)
        if enable_auto_commit is not None and not isinstance(enable_auto_commit, bool):
            raise ConfigurationError(f"enable_auto_commit must be True, False or None, not {enable_auto_commit!r}")
        if isolation_level not in _ISOLATION_LEVELS:
            raise ConfigurationError(f"isolation_level must be one of {_ISOLATION_LEVELS}, not {isolation_level!r}")
        if auto_offset_reset not in RESETS:
            raise ConfigurationError(f"auto_offset_reset must be one of {RESETS}, not {auto_offset_reset!r}")
        if partition_assignment_strategy not in _ASSIGNORS:
            raise ConfigurationError(f"partition_assignment_strategy must be one of {_ASSIGNORS}")
        if max_poll_records < 1:
            raise ConfigurationError("max_poll_records must be at least 1")
        if consumer_timeout_ms is not None:
            validate.number("consumer_timeout_ms", consumer_timeout_ms, low=0, error=ConfigurationError)
        if not isinstance(read_ahead, bool):
            raise ConfigurationError(f"read_ahead must be True or False, not {read_ahead!r}")
        if read_ahead and self._event_loop:
            raise ConfigurationError("read_ahead fetches on a thread of its own: not on an event loop")
        if not isinstance(listen_for_writes, bool):
            raise ConfigurationError(f"listen_for_writes must be True or False, not {listen_for_writes!r}")
        if not 0 < fetch_min_backoff_ms <= fetch_max_backoff_ms:
            raise ConfigurationError("need 0 < fetch_min_backoff_ms <= fetch_max_backoff_ms")
        if not 0 < retry_backoff_ms <= retry_backoff_max_ms:
            raise ConfigurationError("need 0 < retry_backoff_ms <= retry_backoff_max_ms")
        if not 0 < heartbeat_interval_ms < session_timeout_ms:
            raise ConfigurationError("need 0 < heartbeat_interval_ms < session_timeout_ms")
        if (
            max_poll_interval_ms <= 0
            or auto_commit_interval_ms <= 0
            or default_api_timeout_ms <= 0
            or metadata_max_age_ms <= 0
        ):
            raise ConfigurationError("intervals and timeouts must be positive")
        if group_id is not None and not (isinstance(group_id, str) and 1 <= len(group_id) <= 255):
            raise errors.InvalidGroupIdError("group_id must be a string of 1 to 255 characters")
        if group_instance_id is not None and group_id is None:
            raise ConfigurationError("group_instance_id needs a group_id")
        if enable_auto_commit and group_id is None:
            raise ConfigurationError("enable_auto_commit needs a group_id")
        super().__init__(
            database_url,
            schema=schema,
            pool_size=2,
            request_timeout_ms=min(_REQUEST_TIMEOUT_MS, default_api_timeout_ms),
            client_id=client_id,
        )
        self.isolation_level = isolation_level
        self.group_id = group_id
        self._instance_id = group_instance_id
        self._client_id = client_id
        self._auto_commit = group_id is not None if enable_auto_commit is None else enable_auto_commit
        self._auto_commit_interval = auto_commit_interval_ms / 1000
        self._max_poll_records = max_poll_records
        self._iter_timeout = None if consumer_timeout_ms is None else consumer_timeout_ms / 1000
        self._read_ahead = read_ahead
        self._listen = listen_for_writes
        # The wait registered in the store (fetch_wait_v2): for which partitions and isolation,
        # valid until when (time.monotonic()), and the registration itself.
        self._registration: tuple[tuple[frozenset[TopicPartition], bool], float, WaitRegistration] | None = None
        self._api_timeout = default_api_timeout_ms / 1000
        self._retry_backoff = (retry_backoff_ms / 1000, retry_backoff_max_ms / 1000)
        # Since when poll() has found the database unreachable (None while it answers).
        self._unreachable_since: float | None = None
        self._unreachable_backoff = 0.0
        self._retry_at = 0.0  # time.monotonic() before which poll does not try the database again
        self._unreachable_last = 0.0  # when poll last found it unreachable
        self._min_backoff = fetch_min_backoff_ms / 1000
        self._max_backoff = fetch_max_backoff_ms / 1000
        self._key_de = resolve_deserializer(key_deserializer)
        self._value_de = resolve_deserializer(value_deserializer)
        self._raw_records = self._key_de is deserialize_bytes and self._value_de is deserialize_bytes
        self._subscriptions = SubscriptionState(auto_offset_reset)
        self._next = 0  # round-robin start, so one busy partition cannot starve the others
        # poll()'s kept connection and its read ahead (see oncelog.fetcher). The store hands
        # bytes over, so the default deserializers would only check them again: with both, it
        # builds the ConsumerRecords poll() returns.
        self._fetcher = Fetcher(
            self._connect,
            ConsumerRecord if self._raw_records else None,
            request_timeout=min(_REQUEST_TIMEOUT_MS, default_api_timeout_ms) / 1000 + _FETCH_GRACE_S,
        )
        # Metrics (see metrics()). Written by the caller's thread only; read under the lock.
        self._metrics_lock = threading.Lock()
        self._async_commits: ThreadPoolExecutor | None = None  # commit(asynchronous=True)'s thread
        self._metrics: dict[str, float] = {
            "records_consumed_total": 0,
            "bytes_consumed_total": 0,
            "fetch_total": 0,
            "fetch_latency_total_ms": 0.0,
            "fetch_latency_max_ms": 0.0,
            "commit_total": 0,
            "commit_latency_total_ms": 0.0,
        }
        self._lag: dict[TopicPartition, int] = {}
        self._records_rate = WindowedRate()
        self._fetch_rate = WindowedRate()

        # Group membership (with a group_id): the heartbeat thread is the coordinator's.
        self._coordinator: ConsumerCoordinator | None = None
        if group_id is not None:
            self._coordinator = ConsumerCoordinator(
                DatabaseGroupStore(self._request, self._connect if listen_for_writes else None),
                self._subscriptions,
                group_id=group_id,
                group_instance_id=group_instance_id,
                client_id=client_id,
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval=heartbeat_interval_ms / 1000,
                max_poll_interval=max_poll_interval_ms / 1000,
                assignor=partition_assignment_strategy,
                fill_positions=lambda partitions: self._initial_positions(partitions, wait=False),
                before_revoke=self._commit_revoked,
                list_topics=self._topic_names,
                metadata_max_age=metadata_max_age_ms / 1000,
                # On an event loop (oncelog.aio) the heartbeats are a task of the loop.
                event_loop=self._event_loop,
            )
        self._last_auto_commit = time.monotonic()

    # --- assignment and positions -----------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (replacing any earlier assignment); no group membership."""
        if self._coordinator is not None and self._coordinator.subscription is not None:
            raise errors.IllegalStateError("this consumer subscribed; unsubscribe() before assign()")
        wanted = validate.topic_partitions(partitions)
        self._retrying(lambda: self._bounds(wanted))  # raises for unknown partitions
        self._subscriptions.assign(wanted)

    def subscribe(
        self,
        topics: Iterable[str] = (),
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
    ) -> None:
        """Join the consumer group and read the partitions the store assigns to this member.

        ``topics`` need not exist yet: their partitions come once they are created (as in
        Kafka). With ``pattern`` (a regular expression, or a compiled one) instead, the member
        subscribes to every topic whose whole name it matches, and looks again every
        ``metadata_max_age_ms``, so topics created later are picked up.

        ``on_revoke(partitions)`` and ``on_assign(partitions)`` run on the caller's thread when a
        rebalance takes partitions away or hands new ones over (at subscribe and in poll). Only
        the partitions that move are revoked, and nobody else reads them until ``on_revoke``
        has returned: it may commit their offsets (with auto-commit, their positions are
        committed just before it), and their next owner starts from there.
        ``on_lost(partitions)`` runs instead when they may have been handed on already (the
        session timed out, or the member was removed): committing is then refused. Without
        ``on_lost``, ``on_revoke`` runs, as in Kafka.
        """
        if self._coordinator is None:
            raise ConfigurationError("subscribe() needs a group_id")
        compiled: re.Pattern[str] | None = None
        names: list[str] = []
        if pattern is not None:
            if topics:
                raise ConfigurationError("subscribe to topics or to a pattern, not both")
            if isinstance(pattern, str):
                try:
                    compiled = re.compile(pattern)
                except re.error as exc:
                    raise ConfigurationError(f"pattern {pattern!r} is not a regular expression: {exc}") from exc
            elif isinstance(pattern, re.Pattern) and isinstance(pattern.pattern, str):
                compiled = pattern
            else:
                raise ConfigurationError(f"pattern must be a str or a compiled str pattern, not {pattern!r}")
        else:
            if isinstance(topics, str | bytes) or not isinstance(topics, Iterable):
                raise ConfigurationError(f"subscribe to an iterable of topic names, not {topics!r}")
            names = sorted({validate.text("topic", t, error=errors.InvalidTopicError) for t in topics})
            if not names:
                raise ConfigurationError("subscribe to one or more topic names, or to a pattern")
        validate.callback("on_assign", on_assign)
        validate.callback("on_revoke", on_revoke)
        validate.callback("on_lost", on_lost)
        self._coordinator.subscribe(names, on_assign, on_revoke, on_lost, pattern=compiled)

    def unsubscribe(self) -> None:
        """Leave the group and drop the assignment."""
        if self._coordinator is not None:
            self._coordinator.unsubscribe()
        self._subscriptions.assign([])

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now."""
        return set(self._subscriptions.partitions)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` at the next poll."""
        self._subscriptions.seek(partition, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read from the log start of these (default: all assigned) partitions."""
        self._seek_to(partitions, end=False)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read from the end (see :meth:`end_offsets`) of these (default: all assigned) partitions."""
        self._seek_to(partitions, end=True)

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record poll will return for ``partition``."""
        tp = self._subscriptions.assigned(partition)
        if self._subscriptions.position(tp) is None:
            self._retrying(lambda: self._initial_positions([tp], wait=True))
        position = self._subscriptions.position(tp)
        if position is None:  # the wait above raises rather than leave it unknown
            raise errors.IllegalStateError(f"no position for {tp}")
        return position

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        wanted = validate.topic_partitions(partitions)
        return {tp: start for tp, (start, _) in self._retrying(lambda: self._bounds(wanted)).items()}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The end of each partition for this consumer: the last stable offset for read_committed,
        the high watermark for read_uncommitted (as in Kafka)."""
        wanted = validate.topic_partitions(partitions)
        return {tp: end for tp, (_, end) in self._retrying(lambda: self._bounds(wanted)).items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, datetime | float]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the offset and timestamp of the first record whose timestamp is at or
        after the one given (a timezone-aware datetime, or milliseconds since the epoch), as
        Kafka's ``offsetsForTimes``: None when no record is, and for read_committed only committed
        records below the last stable offset count. Seek to the offset to read from that time on.
        Timestamps need not grow with offsets, so the store scans each partition from its log start
        to the answer."""
        if not isinstance(timestamps, Mapping):
            raise errors.InvalidRequestError("offsets_for_times takes a mapping of partitions to timestamps")
        items = list(timestamps.items())
        wanted = validate.topic_partitions([tp for tp, _ in items])
        requests = []
        for tp, (_, value) in zip(wanted, items, strict=True):
            try:
                ts = validate.record_timestamp(value)
            except errors.InvalidRecordError as exc:
                raise errors.InvalidRequestError(f"offsets_for_times, {tp}: {exc}") from None
            if ts is None:
                raise errors.InvalidRequestError(f"offsets_for_times, {tp}: a timestamp is needed, not None")
            requests.append((tp.topic, tp.partition, ts))

        def ask() -> list[tuple[int, datetime] | None]:
            with self._request() as conn:
                return log.list_offsets_for_times(
                    conn, requests=requests, read_committed=self.isolation_level == "read_committed"
                )

        found = self._retrying(ask)
        return {tp: None if f is None else OffsetAndTimestamp(*f) for tp, f in zip(wanted, found, strict=True)}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop returning records from these partitions until resumed."""
        self._subscriptions.pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Return records from these partitions again."""
        self._subscriptions.resume(partitions)

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return self._subscriptions.paused()

    # --- offsets ----------------------------------------------------------------------------

    def commit(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        *,
        asynchronous: bool = False,
        callback: CommitCallback | None = None,
    ) -> Future[None] | None:
        """Commit offsets (default: the current positions of the assigned partitions) for the group.

        A member commits only for the partitions it owns (in ``on_revoke`` too: it owns them until
        that returns); for others the store answers UNASSIGNED_PARTITION, and UNKNOWN_MEMBER_ID
        once the member has been removed (the commit failed).

        ``asynchronous=True`` (confluent-kafka's ``commit(asynchronous=True)``, Kafka's
        ``commitAsync``) takes the offsets and the membership now and commits them on a thread of
        the consumer's own, in the order asked, returning a Future at once; ``callback(offsets,
        exception)`` runs there when the commit ends (exception None on success). An async commit
        that fails is not retried (a later one supersedes it, as in Kafka). close() waits for those
        still on their way.
        """
        if not isinstance(asynchronous, bool):
            raise errors.InvalidRequestError(f"asynchronous must be True or False, not {asynchronous!r}")
        if callback is not None:
            validate.callback("callback", callback)
        group_id = self._require_group()
        if offsets is None:
            offsets = self._subscriptions.positions()
        wanted = validate.offset_map(offsets)
        member = self._membership() if wanted else None
        if not asynchronous:
            if wanted:
                self._retrying(lambda: self._commit_now(group_id, wanted, member))
            return None
        if self._async_commits is None:
            self._async_commits = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oncelog-commit")

        def run() -> None:
            failure: BaseException | None = None
            try:
                if wanted:
                    self._commit_now(group_id, wanted, member)
            except BaseException as exc:  # handed to the future and the callback
                failure = exc
            if callback is not None:
                try:
                    callback({TopicPartition(*tp): OffsetAndMetadata(*om) for tp, om in wanted.items()}, failure)
                except Exception:  # the application's callback must not hide the commit's outcome
                    logger.exception("a commit callback raised")
            if failure is not None:
                raise failure

        return self._async_commits.submit(run)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        callback: CommitCallback | None = None,
    ) -> Future[None]:
        """kafka-python's name for ``commit(offsets, asynchronous=True, callback=callback)``."""
        future = self.commit(offsets, asynchronous=True, callback=callback)
        if future is None:  # pragma: no cover - asynchronous=True always returns one
            raise errors.IllegalStateError("an asynchronous commit returned no future")
        return future

    def _commit_now(
        self, group_id: str, wanted: dict[tuple[str, int], tuple[int, str]], member: groups.Membership | None
    ) -> None:
        started = time.monotonic()
        with self._request() as conn:
            groups.offset_commit(
                conn,
                group_id=group_id,
                offsets=wanted,
                member_id=member.member_id if member else None,
                group_instance_id=self._instance_id if member else None,
                generation=member.generation if member else None,
            )
        with self._metrics_lock:
            self._metrics["commit_total"] += 1
            self._metrics["commit_latency_total_ms"] += (time.monotonic() - started) * 1000

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (waiting, for read_committed, while a transaction holds
        pending offsets for a partition)."""
        group_id = self._require_group()
        wanted = validate.topic_partitions(partitions)
        found = self._retrying(lambda: self._fetch_committed(group_id, wanted, wait=True))
        return {tp: found.get(tp) for tp in wanted}

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's identity, for ``Producer.send_offsets_to_transaction``. A consumer that
        is not a member (it assigns itself its partitions, or has not joined yet) gets Kafka's
        standalone identity, generation -1 and no member id: the store takes its offsets in a
        transaction only while the group has no members."""
        group_id = self._require_group()
        member = self._membership()
        if member is None:
            return ConsumerGroupMetadata(group_id, STANDALONE_GENERATION, "", self._instance_id)
        return ConsumerGroupMetadata(group_id, member.generation, member.member_id, self._instance_id)

    # --- reading ----------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> list[ConsumerRecord]:
        """Records from the assigned, unpaused partitions, waiting up to ``timeout`` seconds for some.

        At most ``max_poll_records`` records (or one per partition, if there are more partitions),
        in offset order within each partition; a transaction is returned on all of its partitions
        in this poll or on none. With nothing to read, the consumer registers its wait and
        LISTENs (``listen_for_writes``): a producer that writes to one of its partitions wakes it
        (docs/design.md, "Waking readers"). It also looks again by itself, backing off from
        ``fetch_min_backoff_ms`` to ``fetch_max_backoff_ms`` between empty fetches.
        """
        # Not None: poll() always returns by its timeout. A negative one (a deadline passed) means 0.
        limit = validate.INT32_MAX / 1000
        wait = validate.number("timeout", timeout, low=-limit, high=limit, error=errors.InvalidRequestError)
        deadline = time.monotonic() + max(wait, 0.0)
        backoff = self._min_backoff
        last_fetch = 0.0
        # The least time between a fetch and the next one after a wake-up, and before a
        # registration: 5 ms (fetch_min_backoff_ms if shorter), doubled after every wake-up
        # that brought nothing.
        spacing = min(self._min_backoff, _WAKE_SPACING_S)
        settled = False  # the partitions stayed quiet for a spacing: worth a registration
        woken = False
        while True:
            if not self._retry_due(deadline):
                return []
            try:
                last_fetch = time.monotonic()
                records = self._poll_once(deadline)
                self._unreachable_since = None
                if self._coordinator is not None and not self._coordinator.session_alive():
                    # The session ran out around this fetch (a stalled process): its partitions
                    # may have new owners. Drop the records; the next round loses the partitions.
                    self._registration = None
                    continue
                if records:
                    # Records found may have come by a write that a wake-up announced, which
                    # ended the registration (one-shot, fetch_wait_v2): this reader registers
                    # again when it next finds nothing, so writers name its partitions only
                    # while it waits, not while it reads.
                    self._registration = None
                    return records
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return records
                if woken:
                    # Woken, and nothing to read: anyone may call wake_readers_v1, and a flood
                    # of wake-ups must not become a stream of fetches and registrations.
                    spacing = min(spacing * 2, max(self._max_backoff, spacing))
                woken = False
                registration = self._waiting(remaining, register=settled) if self._listen else None
                if registration is None and self._listen and not settled:
                    # Register only once the partitions stay quiet for a spacing. A registration
                    # costs a write, and a NOTIFY from the next writer; a reader of a busy
                    # partition would look no sooner than that spacing after a wake-up anyway,
                    # and finds the records then without either. A reader of a quiet partition
                    # registers a spacing later, so a record written in that spacing waits for
                    # the look that ends it.
                    settled = True
                    runtime.sleep(min(spacing, remaining))
                    continue
                if registration is False:
                    # Registered just now: fetch once more before waiting. A write committed
                    # before the registration is in that fetch; every later one wakes this reader.
                    continue
                if registration is not None:
                    woken = self._fetcher.await_wakeup(registration, min(backoff, remaining))
                    if woken:
                        # The wake-up may have ended the registration, whether or not the next
                        # fetch finds anything (a transaction's append announced to a
                        # read_uncommitted reader of the same partition, an abort's markers,
                        # a stranger's call of wake_readers_v1): registered again if that
                        # fetch finds nothing. However often it is woken, the reader looks no
                        # sooner than a spacing after its last fetch: a polling reader looks no
                        # more often by default, and the producers of a busy partition would
                        # otherwise buy a fetch with every commit.
                        self._registration = None
                        idle = spacing - (time.monotonic() - last_fetch)
                        if idle > 0:
                            runtime.sleep(min(idle, max(deadline - time.monotonic(), 0.0)))
                else:
                    runtime.sleep(min(backoff, remaining))
            except errors.DatabaseUnavailableError as exc:
                # A failover, a restart or a lost network, met by a fetch or by the wait for the
                # next write: like Kafka's consumer with a broker gone, poll keeps trying (and
                # returns nothing by its timeout); only a database unreachable for
                # default_api_timeout_ms reaches the caller. An application's rebalance callback
                # that failed so is the application's error, passed on.
                if getattr(exc, FROM_CALLBACK, False):
                    raise
                self._unreachable(exc)
                continue
            backoff = min(backoff * 2, self._max_backoff)

    def _poll_once(self, deadline: float) -> list[ConsumerRecord]:
        """One round of poll: the group's news, an auto-commit when due, missing positions, a fetch."""
        if self._coordinator is not None:
            self._coordinator.poll()
        # Before the fetch, as Kafka does: what is committed is what earlier polls returned
        # (which the application has had), never the records this poll is about to return,
        # so a crash after poll() returns re-delivers them (at least once) instead of losing them.
        self._maybe_auto_commit()
        awaiting = self._subscriptions.awaiting()
        if awaiting:
            self._initial_positions(awaiting, wait=False)
        return self._fetch_once(deadline)

    def _unreachable(self, error: errors.DatabaseUnavailableError) -> None:
        """After poll found the database unreachable: re-raises once it has been so for
        default_api_timeout_ms, else sets when poll may try again (the retry backoff, doubling)."""
        now = time.monotonic()
        if self._unreachable_since is None or now - self._unreachable_last > self._api_timeout:
            # A first failure, or the first after a long pause in polling: the count starts here.
            self._unreachable_since = now
            self._unreachable_backoff = self._retry_backoff[0]
        self._unreachable_last = now
        if now - self._unreachable_since >= self._api_timeout:
            self._unreachable_since = None
            self._retry_at = 0.0
            raise error
        self._retry_at = now + self._unreachable_backoff
        self._unreachable_backoff = min(self._unreachable_backoff * 2, self._retry_backoff[1])

    def _retry_due(self, deadline: float) -> bool:
        """Whether poll may ask the database now. After it was found unreachable, not before the
        retry backoff has passed: waited for if poll's ``deadline`` allows, else poll returns
        (a caller polling with timeout 0 in a loop must not turn into a stream of connection
        attempts)."""
        now = time.monotonic()
        wait = self._retry_at - now
        if wait <= 0:
            return True
        runtime.sleep(max(min(wait, deadline - now), 0.0))
        return wait <= deadline - now

    def _retrying(self, request: Callable[[], _T]) -> _T:
        """``request()``, tried again with a retry backoff while the database is unreachable, for up
        to default_api_timeout_ms (Kafka's consumer retries retriable errors within
        default.api.timeout.ms): a failover's promotion takes seconds, not a failed call."""
        deadline = time.monotonic() + self._api_timeout
        backoff, most = self._retry_backoff
        while True:
            try:
                return request()
            except errors.DatabaseUnavailableError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                logger.debug("database unreachable; retrying", exc_info=True)
                runtime.sleep(min(backoff, left))
                backoff = min(backoff * 2, most)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one at a time as they come (kafka-python's ``for record in consumer``), polling
        on until the consumer is closed, or until ``consumer_timeout_ms`` passes with none.

        A partition's position follows the records handed out: a ``commit()`` in the loop's body
        covers the records handed out so far, never those of the same poll still to come, and
        leaving the loop early leaves those to the next poll."""
        idle_since = time.monotonic()
        while not self._closed:
            wait = 1.0
            if self._iter_timeout is not None:
                wait = min(wait, self._iter_timeout - (time.monotonic() - idle_since))
                if wait <= 0:
                    return
            records = self.poll(wait)
            if not records:
                continue
            idle_since = time.monotonic()
            yield from self._hand_out(records)

    def _hand_out(self, records: list[ConsumerRecord]) -> Iterator[ConsumerRecord]:
        """A poll's records one at a time, each partition's position following them (see
        :meth:`__iter__`)."""
        subs = self._subscriptions
        # Where the poll left each partition, and where it stands as the records go out.
        final: dict[TopicPartition, int | None] = {}
        at: dict[TopicPartition, int] = {}
        for r in records:
            if r.topic_partition not in at:
                final[r.topic_partition] = subs.position(r.topic_partition)
                at[r.topic_partition] = r.offset
        for tp, first in at.items():
            end = final[tp]
            if end is None or not subs.move_if_at(tp, end, first):
                at[tp] = -1
        for r in records:
            tp = r.topic_partition
            # -1: sought or revoked by the caller meanwhile: the rest of its records are stale.
            if at[tp] < 0 or not subs.move_if_at(tp, at[tp], r.offset + 1):
                at[tp] = -1
                continue
            at[tp] = r.offset + 1
            yield r
        for tp, offset in at.items():
            end = final[tp]
            if offset >= 0 and end is not None:
                subs.move_if_at(tp, offset, end)  # past markers and aborted records after the last one

    def _waiting(self, remaining: float, *, register: bool) -> WaitRegistration | Literal[False] | None:
        """The registration of this reader's wait on the partitions it reads: the one it holds if
        it is still valid for them and no write it found may have ended it (a reader that keeps
        polling an idle partition registers once per validity, not once per poll); otherwise,
        with ``register``, a new one, and then False, since a fetch must follow it. None when
        there is nothing to read, or no registration is held and ``register`` is false."""
        fetchable = self._subscriptions.fetchable()
        if not fetchable:
            return None
        read_committed = self.isolation_level == "read_committed"
        key = (frozenset(fetchable), read_committed)
        now = time.monotonic()
        held = self._registration
        if held is not None and held[0] == key and now < held[1] and self._fetcher.listening:
            return held[2]
        if not register:
            return None
        # As long as this poll may still wait and at least a second (a reader that polls on
        # renews it once per second), plus a grace for the fetch that ends the wait.
        wait_ms = min(int(max(remaining, 1.0) * 1000) + 1000, _MAX_WAIT_MS)
        registration = self._fetcher.register_wait(
            [(tp.topic, tp.partition) for tp in fetchable],
            read_committed=read_committed,
            wait_ms=wait_ms,
            timeout=min(remaining + _FETCH_GRACE_S, self._api_timeout),
        )
        if not registration.tokens:
            # Not registered (a session kept the registration rows locked past the store's
            # bound): this round looks again on its backoff, the next one registers again.
            self._registration = None
            return None
        # Valid a little less long than the store holds it: the clocks differ by the round trip.
        self._registration = (key, now + wait_ms / 1000 - 0.5, registration)
        return False

    def _fetch_once(self, deadline: float) -> list[ConsumerRecord]:
        subscriptions = self._subscriptions
        active = subscriptions.fetchable()
        if not active:
            return []
        start = self._next % len(active)
        self._next += 1
        order = active[start:] + active[:start]
        read_committed = self.isolation_level == "read_committed"
        # The budget is split between partitions inside the one fetch (not cut from its result),
        # so the all-or-none guarantee for transactions covers exactly what poll returns.
        per_partition = max(1, self._max_poll_records // len(order))
        now_at = subscriptions.positions()
        positions: dict[tuple[str, int], int] = {tp: now_at[tp] for tp in order}
        started = time.monotonic()
        try:
            # Bounded by poll's timeout (plus a grace for the fetch itself): on a stalled network
            # the connection is cut rather than waited on.
            result = self._fetcher.fetch(
                positions, per_partition, read_committed, timeout=_fetch_bound(deadline, started)
            )
        except errors.DatabaseUnavailableError:
            # The kept connection may have died while idle (a server restart): one more try on a
            # fresh, pinged one before the error reaches the caller, if poll's timeout allows.
            if time.monotonic() >= deadline + _FETCH_GRACE_S:
                raise
            result = self._fetcher.fetch(
                positions, per_partition, read_committed, timeout=_fetch_bound(deadline, time.monotonic())
            )
        fetch_ms = (time.monotonic() - started) * 1000
        expired = read_committed and any(part.expired_transaction for part in result.values())
        if expired:
            # An abandoned transaction past its timeout holds the last stable offset back:
            # readers abort it themselves, so no maintenance process is needed.
            self._fetcher.expire_transactions()
        out: list[ConsumerRecord] = []
        advanced: dict[TopicPartition, int] = {}
        for tp in order:
            part = result[(tp.topic, tp.partition)]
            if part.error == "unknown_topic_or_partition":
                raise UnknownTopicOrPartitionError(f"unknown partition {tp.partition} of topic {tp.topic!r}")
            if part.error == "offset_out_of_range":
                # Retention moved the log start past our position (or a seek went past the end):
                # reset as Kafka does, by auto_offset_reset.
                subscriptions.reset([tp], self._bounds)
                continue
            if part.records:
                if self._raw_records:
                    out.extend(part.records)  # ConsumerRecords already (built by the store)
                else:
                    topic, partition = tp.topic, tp.partition
                    key_de, value_de = self._key_de, self._value_de
                    raw_keys, raw_values = key_de is deserialize_bytes, value_de is deserialize_bytes
                    out.extend(
                        ConsumerRecord(
                            topic,
                            partition,
                            r.offset,
                            r.key if raw_keys else key_de(r.key),
                            r.value if raw_values else value_de(r.value),
                            r.headers,
                            r.timestamp,
                            r.producer_id,
                        )
                        for r in part.records
                    )
                advanced[tp] = part.records[-1].offset + 1
            if not part.records and part.read_limit is not None:
                # Nothing visible before where this read stopped: only markers (and aborted
                # records) were there. Never past read_limit: records beyond it were withheld.
                advanced[tp] = max(now_at[tp], part.read_limit)
        # Positions move only once every record of this poll is built: a deserializer that fails
        # leaves them where they were, so nothing is skipped unseen.
        subscriptions.advance(advanced)
        if self._read_ahead and out and not expired and len(advanced) == len(order):
            # Records are flowing (and no partition needs a reset): the next fetch, from these
            # positions, runs while the application processes this poll's records.
            ahead: dict[tuple[str, int], int] = {tp: advanced[tp] for tp in order}
            self._fetcher.read_ahead(ahead, per_partition, read_committed)
        self._record_fetch(result, out, fetch_ms, read_committed)
        return out

    def _record_fetch(
        self,
        result: Mapping[tuple[str, int], PartitionFetch[Any]],
        records: list[ConsumerRecord],
        fetch_ms: float,
        read_committed: bool,
    ) -> None:
        value = _TAGGED_VALUE if self._raw_records else _VALUE
        consumed = sum(sum(map(len, filter(None, map(value, p.records)))) for p in result.values())
        with self._metrics_lock:
            m = self._metrics
            m["records_consumed_total"] += len(records)
            m["bytes_consumed_total"] += consumed
            m["fetch_total"] += 1
            m["fetch_latency_total_ms"] += fetch_ms
            m["fetch_latency_max_ms"] = max(m["fetch_latency_max_ms"], fetch_ms)
            for (topic, partition), part in result.items():
                # Lag as Kafka's records-lag: from the position to the end this reader can read.
                end = part.last_stable_offset if read_committed else part.high_watermark
                tp = TopicPartition(topic, partition)
                position = self._subscriptions.position(tp)
                if end is not None and position is not None:
                    self._lag[tp] = max(end - position, 0)
        self._records_rate.record(len(records))
        self._fetch_rate.record()

    def metrics(self) -> dict[str, float]:
        """Kafka's consumer metrics, as a plain dict (export: :func:`oncelog.metrics.register_prometheus`).

        Totals since the consumer was created, fetch latency average and maximum (one fetch is one
        round trip reading every assigned partition in one snapshot), records per fetch, rates
        over the last 30 to 60 seconds (``*_rate``), and ``records_lag_max``: the largest distance,
        in offsets, from a position to the partition's end as this reader sees it (last stable
        offset for read_committed, high watermark otherwise) at its last fetch.
        """
        with self._metrics_lock:
            m = dict(self._metrics)
            lags = [lag for tp, lag in self._lag.items() if self._subscriptions.is_assigned(tp)]
        fetches = m["fetch_total"] or 1
        m["fetch_latency_avg_ms"] = m.pop("fetch_latency_total_ms") / fetches
        m["records_per_request_avg"] = m["records_consumed_total"] / fetches
        m["commit_latency_avg_ms"] = m.pop("commit_latency_total_ms") / (m["commit_total"] or 1)
        m["records_consumed_rate"] = self._records_rate.rate()
        m["fetch_rate"] = self._fetch_rate.rate()
        m["records_lag_max"] = float(max(lags, default=0))
        return m

    def partition_metrics(self) -> dict[tuple[str, int], dict[str, float]]:
        """Per assigned partition: ``records_lag`` (as in :meth:`metrics`) and ``position``."""
        with self._metrics_lock:
            lag = dict(self._lag)
        out: dict[tuple[str, int], dict[str, float]] = {}
        for tp in self._subscriptions.partitions:
            position = self._subscriptions.position(tp)
            if tp in lag and position is not None:
                out[(tp.topic, tp.partition)] = {"records_lag": float(lag[tp]), "position": float(position)}
        return out

    def close(self) -> None:
        """Commit (with auto-commit), leave the group (a static member keeps its place until its
        session times out, so a restart does not rebalance), and release everything."""
        if self._closed:
            return
        if self._coordinator is not None:
            self._coordinator.stop()
        try:
            if self._auto_commit and self._membership() is not None and self._subscriptions.positions():
                self._commit_once(self._subscriptions.positions())
        except errors.OncelogError:
            logger.warning("the final auto-commit failed", exc_info=True)
        if self._async_commits is not None:
            self._async_commits.shutdown(wait=True)  # the async commits on their way, in order
        if self._instance_id is None and self._coordinator is not None:
            try:
                self._coordinator.leave()
            except errors.OncelogError:
                logger.warning("leaving the group failed", exc_info=True)
        self._fetcher.close()
        super().close()

    # --- group membership -------------------------------------------------------------------

    def _require_group(self) -> str:
        if self.group_id is None:
            raise ConfigurationError("this consumer has no group_id")
        return self.group_id

    def _membership(self) -> groups.Membership | None:
        return None if self._coordinator is None else self._coordinator.member

    # --- helpers ----------------------------------------------------------------------------

    def _bounds(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        wanted = validate.topic_partitions(partitions)
        out: dict[TopicPartition, tuple[int, int]] = {}
        committed = self.isolation_level == "read_committed"
        with self._request() as conn:
            for topic in dict.fromkeys(tp.topic for tp in wanted):
                bounds = {
                    p.partition: (p.log_start_offset, p.last_stable_offset if committed else p.high_watermark)
                    for p in log.list_offsets(conn, topic=topic)
                }
                for tp in wanted:
                    if tp.topic == topic:
                        if tp.partition not in bounds:
                            raise UnknownTopicOrPartitionError(f"unknown partition {tp.partition} of topic {topic!r}")
                        out[tp] = bounds[tp.partition]
        return out

    def _seek_to(self, partitions: Iterable[TopicPartition] | None, *, end: bool) -> None:
        given = self._subscriptions.partitions if partitions is None else validate.topic_partitions(partitions)
        tps = [self._subscriptions.assigned(tp) for tp in given]
        self._subscriptions.seek_to(self._retrying(lambda: self._bounds(tps)), end=end)

    def _initial_positions(self, partitions: list[TopicPartition], *, wait: bool) -> None:
        """Positions from the group's committed offsets (else auto_offset_reset). A partition whose
        offsets a transaction holds stays awaiting; with ``wait`` this blocks (up to
        default_api_timeout_ms) until that transaction ends."""
        if not partitions:
            return
        if self.group_id is None:
            self._subscriptions.reset(partitions, self._bounds)
            return
        found = self._fetch_committed(self.group_id, partitions, wait=wait)
        self._subscriptions.reset(self._subscriptions.apply_committed(partitions, found), self._bounds)

    def _fetch_committed(
        self, group_id: str, partitions: list[TopicPartition], *, wait: bool
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """Committed offsets of the stable partitions among ``partitions`` (all of them with ``wait``)."""
        with self._request(waits=self._api_timeout if wait else 0.0) as conn:
            answers = groups.offset_fetch_stable(
                conn,
                group_id=group_id,
                partitions=partitions,
                require_stable=self.isolation_level == "read_committed",
                wait_s=self._api_timeout if wait else 0.0,
                min_backoff_s=self._min_backoff,
                max_backoff_s=self._max_backoff,
            )
        out: dict[TopicPartition, OffsetAndMetadata | None] = {}
        unstable = []
        for (topic, partition), a in answers.items():
            tp = TopicPartition(topic, partition)
            if a.error == "unknown_topic_or_partition":
                raise UnknownTopicOrPartitionError(f"unknown partition {partition} of topic {topic!r}")
            if a.error == "unstable_offset_commit":
                unstable.append(tp)
                continue
            out[tp] = None if a.offset is None else OffsetAndMetadata(a.offset, a.metadata)
        if unstable and wait:
            raise errors.UnstableOffsetCommitError(
                f"a transaction still holds pending offsets for {sorted(unstable)} after default_api_timeout_ms"
            )
        return out

    def _commit_once(self, offsets: Mapping[TopicPartition, int]) -> None:
        """A commit tried once: auto-commit's, inside poll or a rebalance, which must not wait out
        an unreachable database (poll retries; a rebalance goes on without it)."""
        group_id = self._require_group()
        wanted = validate.offset_map(offsets)
        if wanted:
            self._commit_now(group_id, wanted, self._membership())

    def _maybe_auto_commit(self) -> None:
        if not self._auto_commit or self._membership() is None:
            return
        now = time.monotonic()
        if now - self._last_auto_commit < self._auto_commit_interval:
            return
        self._last_auto_commit = now
        try:
            self._commit_once(self._subscriptions.positions())
        except (errors.IllegalGenerationError, errors.UnknownMemberIdError, errors.UnassignedPartitionError):
            logger.info("auto-commit raced a rebalance; the new owner resumes from the last commit")

    def _topic_names(self) -> list[str]:
        with self._request() as conn:
            return list(topic_store.list_topics(conn))

    def _commit_revoked(self, partitions: set[TopicPartition]) -> None:
        """With auto-commit: commit the positions of partitions about to be revoked (Kafka does),
        so their next owner starts where this member stopped."""
        if not self._auto_commit:
            return
        positions = {tp: offset for tp, offset in self._subscriptions.positions().items() if tp in partitions}
        if not positions:
            return
        try:
            self._commit_once(positions)
        except errors.OncelogError:
            logger.warning("committing the revoked partitions failed; their next owner resumes from the last commit")


def _fetch_bound(deadline: float, now: float) -> float:
    """Seconds a fetch may take so that poll returns by its deadline plus the grace."""
    return max(deadline - now, 0.0) + _FETCH_GRACE_S
