"""``oncelog.Consumer``: read partitions by offset.

``isolation_level="read_committed"`` (the default, unlike Kafka's client) returns only records
of committed transactions and plain writes, and stops at each partition's last stable offset;
``"read_uncommitted"`` reads to the high watermark. Control records are never returned.

Each poll reads all its partitions in ONE database snapshot, so a transaction that spans
partitions is returned on all of them or on none (Kafka cannot promise this).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from oncelog.client import Client
from oncelog.errors import ConfigurationError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from oncelog.serde import Deserializer, resolve_deserializer
from oncelog.store import log, txn
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.types import ConsumerRecord, TopicPartition

_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
_RESETS = ("earliest", "latest", "none")


class NoOffsetForPartitionError(ConfigurationError):
    """The consumer has no position for a partition and auto_offset_reset is 'none'."""


class Consumer(Client):
    """Read records from assigned partitions.

    >>> consumer = Consumer(url)  # read_committed
    >>> consumer.assign([TopicPartition("orders", 0)])
    >>> consumer.seek(TopicPartition("orders", 0), 0)
    >>> records = consumer.poll(timeout=1.0)
    """

    def __init__(
        self,
        database_url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        isolation_level: str = "read_committed",
        auto_offset_reset: str = "earliest",
        max_poll_records: int = 500,
        fetch_min_backoff_ms: int = 5,
        fetch_max_backoff_ms: int = 200,
        key_deserializer: str | Deserializer | None = "bytes",
        value_deserializer: str | Deserializer | None = "bytes",
    ) -> None:
        if isolation_level not in _ISOLATION_LEVELS:
            raise ConfigurationError(f"isolation_level must be one of {_ISOLATION_LEVELS}, not {isolation_level!r}")
        if auto_offset_reset not in _RESETS:
            raise ConfigurationError(f"auto_offset_reset must be one of {_RESETS}, not {auto_offset_reset!r}")
        if max_poll_records < 1:
            raise ConfigurationError("max_poll_records must be at least 1")
        if not 0 < fetch_min_backoff_ms <= fetch_max_backoff_ms:
            raise ConfigurationError("need 0 < fetch_min_backoff_ms <= fetch_max_backoff_ms")
        super().__init__(database_url, schema=schema, pool_size=1)
        self.isolation_level = isolation_level
        self._reset = auto_offset_reset
        self._max_poll_records = max_poll_records
        self._min_backoff = fetch_min_backoff_ms / 1000
        self._max_backoff = fetch_max_backoff_ms / 1000
        self._key_de = resolve_deserializer(key_deserializer)
        self._value_de = resolve_deserializer(value_deserializer)
        self._assignment: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        self._next = 0  # round-robin start, so one busy partition cannot starve the others

    # --- assignment and positions -----------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (replacing any earlier assignment)."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        with self._connect() as conn:
            for tp in wanted:
                offsets = {p.partition for p in log.list_offsets(conn, topic=tp.topic)}
                if tp.partition not in offsets:
                    raise UnknownTopicOrPartitionError(f"unknown partition {tp.partition} of topic {tp.topic!r}")
        self._assignment = list(dict.fromkeys(wanted))
        self._positions = {tp: pos for tp, pos in self._positions.items() if tp in self._assignment}
        self._paused &= set(self._assignment)

    def assignment(self) -> set[TopicPartition]:
        """The assigned partitions."""
        return set(self._assignment)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` at the next poll."""
        tp = self._assigned(partition)
        if offset < 0:
            raise OffsetOutOfRangeError(f"offset must be >= 0, not {offset}")
        self._positions[tp] = offset

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read from the log start of these (default: all assigned) partitions."""
        self._seek_to(partitions, end=False)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read from the end (see :meth:`end_offsets`) of these (default: all assigned) partitions."""
        self._seek_to(partitions, end=True)

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record poll will return for ``partition``."""
        tp = self._assigned(partition)
        if tp not in self._positions:
            self._reset_position(tp)
        return self._positions[tp]

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        return {tp: start for tp, (start, _) in self._bounds(partitions).items()}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The end of each partition for this consumer: the last stable offset for read_committed,
        the high watermark for read_uncommitted (as in Kafka)."""
        return {tp: end for tp, (_, end) in self._bounds(partitions).items()}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop returning records from these partitions until resumed."""
        self._paused |= {self._assigned(tp) for tp in partitions}

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Return records from these partitions again."""
        self._paused -= {TopicPartition(*tp) for tp in partitions}

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return set(self._paused)

    # --- reading ----------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> list[ConsumerRecord]:
        """Records from the assigned, unpaused partitions, waiting up to ``timeout`` seconds for some.

        At most ``max_poll_records`` records, in offset order within each partition. Waiting backs
        off from ``fetch_min_backoff_ms`` to ``fetch_max_backoff_ms`` between empty fetches.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        backoff = self._min_backoff
        while True:
            records = self._fetch_once()
            remaining = deadline - time.monotonic()
            if records or remaining <= 0:
                return records
            time.sleep(min(backoff, remaining))
            backoff = min(backoff * 2, self._max_backoff)

    def _fetch_once(self) -> list[ConsumerRecord]:
        active = [tp for tp in self._assignment if tp not in self._paused]
        if not active:
            return []
        start = self._next % len(active)
        self._next += 1
        order = active[start:] + active[:start]
        for tp in order:
            if tp not in self._positions:
                self._reset_position(tp)
        read_committed = self.isolation_level == "read_committed"
        with self._connect() as conn:
            result = log.fetch_many(
                conn,
                {tp: self._positions[tp] for tp in order},
                max_records=self._max_poll_records,
                read_committed=read_committed,
            )
            if read_committed and any(part.expired_transaction for part in result.values()):
                # An abandoned transaction past its timeout holds the last stable offset back:
                # readers abort it themselves, so no maintenance process is needed.
                txn.expire_transactions(conn)
        out: list[ConsumerRecord] = []
        for tp in order:
            part = result[(tp.topic, tp.partition)]
            if part.error == "unknown_topic_or_partition":
                raise UnknownTopicOrPartitionError(f"unknown partition {tp.partition} of topic {tp.topic!r}")
            if part.error == "offset_out_of_range":
                # Retention moved the log start past our position (or a seek went past the end):
                # reset as Kafka does, by auto_offset_reset.
                self._reset_position(tp)
                continue
            for r in part.records[: self._max_poll_records - len(out)]:
                out.append(
                    ConsumerRecord(
                        topic=tp.topic,
                        partition=tp.partition,
                        offset=r.offset,
                        key=self._key_de(r.key),
                        value=self._value_de(r.value),
                        headers=r.headers,
                        timestamp=r.timestamp,
                        producer_id=r.producer_id,
                    )
                )
                self._positions[tp] = r.offset + 1
            end = part.last_stable_offset if read_committed else part.high_watermark
            if not part.records and end is not None:
                # Nothing visible before the end: only markers (and aborted records) were there.
                self._positions[tp] = max(self._positions[tp], end)
        return out

    # --- helpers ----------------------------------------------------------------------------

    def _assigned(self, partition: TopicPartition) -> TopicPartition:
        tp = TopicPartition(*partition)
        if tp not in self._assignment:
            raise ConfigurationError(f"partition {tp} is not assigned to this consumer")
        return tp

    def _bounds(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        wanted = [TopicPartition(*tp) for tp in partitions]
        out: dict[TopicPartition, tuple[int, int]] = {}
        with self._connect() as conn:
            for topic in dict.fromkeys(tp.topic for tp in wanted):
                committed = self.isolation_level == "read_committed"
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
        tps = [self._assigned(tp) for tp in (self._assignment if partitions is None else partitions)]
        for tp, (start, hw) in self._bounds(tps).items():
            self._positions[tp] = hw if end else start

    def _reset_position(self, tp: TopicPartition) -> None:
        if self._reset == "none":
            raise NoOffsetForPartitionError(f"no position for {tp} and auto_offset_reset is 'none'")
        self._seek_to([tp], end=self._reset == "latest")
