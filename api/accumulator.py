"""Batches waiting to be sent, per partition (the producer's RecordAccumulator).

Pure bookkeeping under the producer's lock: no I/O here. A partition's batches leave in order,
one at a time, so sequence numbers are assigned in order and a batch is never overtaken.

A batch keeps its records as columns (keys, values, headers, timestamps), the form the store
takes them in, and one :class:`~oncelog.record_future.BatchResult` that completes all of them:
appending a record allocates nothing but its handle (docs/design.md, "The producer client").
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from oncelog.record_future import BatchResult, RecordFuture
from oncelog.store.records import RecordColumns
from oncelog.types import TopicPartition

_batch_ids = itertools.count()


@dataclass(slots=True)
class ProducerBatch:
    """Records for one partition that are sent (and retried) together.

    ``base_sequence`` and ``epoch`` are fixed when the batch is first sent and kept for every
    retry, which is what lets the store recognise a retry as a duplicate; an epoch bump clears
    them, and the batch is sequenced again under the new epoch.
    """

    tp: TopicPartition
    created: float
    #: The records, as the store takes them; appended to while the batch is open.
    columns: RecordColumns
    #: Completes every record's future at once.
    result: BatchResult
    size: int = 0
    full: bool = False
    base_sequence: int | None = None
    epoch: int | None = None
    producer_id: int | None = None
    #: The transaction the batch belongs to (transactional producers only).
    txn_number: int | None = None
    attempts: int = 0
    #: Every time the sender took the batch up, sends and the producer id (re)initialisation
    #: before a send alike: what bounds the re-sequencing loop (``attempts`` counts sends only).
    tries: int = 0
    #: An attempt may have been appended without our hearing back (a retriable failure): until a
    #: retry under the same epoch and sequence settles it, the batch must keep them.
    unknown_outcome: bool = False
    #: Sent with EndTxn (queued when its transaction's commit began: produce_offsets_end_txn):
    #: every retry carries it too, since the first attempt may have committed the transaction.
    ends_txn: bool = False
    #: Sent in a request of its own from now on: a request of many failed, and a partition that
    #: fails (its lock held by another session) must not hold the others' batches up again.
    solo: bool = False
    next_attempt_at: float = 0.0
    id: int = field(default_factory=lambda: next(_batch_ids))

    @classmethod
    def open(cls, tp: TopicPartition, now: float, txn_number: int | None = None) -> ProducerBatch:
        """An empty batch for ``tp``, started at ``now``."""
        return cls(tp, now, RecordColumns([], []), BatchResult(tp.topic, tp.partition), txn_number=txn_number)

    @property
    def count(self) -> int:
        """How many records the batch holds."""
        return len(self.columns.values)

    @property
    def sent_once(self) -> bool:
        """Whether an attempt may have reached the store (its outcome may be unknown)."""
        return self.attempts > 0

    def add(
        self, key: bytes | None, value: bytes | None, headers: str | None, timestamp: datetime | None, size: int
    ) -> RecordFuture:
        """Append one record (``headers`` already encoded: the store's JSON text); its future."""
        cols = self.columns
        index = len(cols.values)
        cols.keys.append(key)
        cols.values.append(value)
        # The optional columns exist from the first record that needs one (None before it).
        if headers is not None or cols.headers is not None:
            if cols.headers is None:
                cols.headers = [None] * index
            cols.headers.append(headers)
        if timestamp is not None or cols.timestamps is not None:
            if cols.timestamps is None:
                cols.timestamps = self.result.timestamps = [None] * index
            cols.timestamps.append(timestamp)
        self.size += size
        return RecordFuture(self.result, index)


class RecordAccumulator:
    """Per-partition queues of batches. Not thread-safe: the producer holds its lock around calls."""

    def __init__(self, *, batch_size: int, max_batch_records: int) -> None:
        self._batch_size = batch_size
        self._max_records = max_batch_records
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.buffered_bytes = 0

    def append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: str | None,
        timestamp: datetime | None,
        *,
        size: int,
        now: float,
        txn_number: int | None = None,
    ) -> tuple[ProducerBatch, RecordFuture]:
        """Add a record to the open batch of ``tp`` (a new one if none is open); return that
        batch and the record's future."""
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        batch = queue[-1] if queue else None
        if batch is None or batch.full or batch.attempts or batch.txn_number != txn_number:
            batch = ProducerBatch.open(tp, now, txn_number)
            queue.append(batch)
        future = batch.add(key, value, headers, timestamp, size)
        self.buffered_bytes += size
        if batch.size >= self._batch_size or len(batch.columns.values) >= self._max_records:
            batch.full = True
        return batch, future

    def ready(self, now: float, linger: float, flush: bool) -> list[ProducerBatch]:
        """The head batches to send now. When one is ready (full, lingered long enough, followed
        by another batch, flushing, or due for a retry), every partition's head that is not
        waiting out a retry's backoff goes with it, as Kafka's producer drains a node: one
        request and one commit carry them all, where waiting for each to fill would cost one
        commit per partition."""
        heads = [queue[0] for queue in self._queues.values() if queue and queue[0].next_attempt_at <= now]
        for head in heads:
            queue = self._queues[head.tp]
            if head.sent_once or head.full or flush or len(queue) > 1 or now - head.created >= linger:
                return heads
        return []

    def next_wakeup(self, now: float, linger: float) -> float | None:
        """Seconds until some head batch becomes ready (None: nothing is queued)."""
        times = []
        for queue in self._queues.values():
            if queue:
                head = queue[0]
                due = head.next_attempt_at if head.sent_once else head.created + linger
                times.append(max(due - now, 0.0))
        return min(times) if times else None

    def complete(self, batch: ProducerBatch) -> None:
        """Remove a finished (acknowledged or failed) batch, which must be its partition's head."""
        queue = self._queues[batch.tp]
        if not queue or queue[0] is not batch:
            raise RuntimeError("completed batch is not the head of its partition queue")
        queue.popleft()
        self.buffered_bytes -= batch.size
        if not queue:
            del self._queues[batch.tp]

    def remove_all_except(self, keep: set[int]) -> list[ProducerBatch]:
        """Remove every batch whose id is not in ``keep`` (those being sent now); return them."""
        removed: list[ProducerBatch] = []
        for tp, queue in list(self._queues.items()):
            kept = deque(b for b in queue if b.id in keep)
            removed.extend(b for b in queue if b.id not in keep)
            if kept:
                self._queues[tp] = kept
            else:
                del self._queues[tp]
        for b in removed:
            self.buffered_bytes -= b.size
        return removed

    def batches(self) -> Iterator[ProducerBatch]:
        """Every queued batch, head first per partition."""
        for queue in self._queues.values():
            yield from queue

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())
