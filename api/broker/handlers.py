"""What the broker answers to each request, and the one table of the APIs it serves.

Every answer comes from the store's own functions (:mod:`oncelog.store`), so the store's rules
stay the authority: producer ids and epochs are issued and checked there, sequences deduplicate
there, read_committed is the store's. A store error becomes the Kafka error code a Kafka client
reacts to in the same way (:data:`ERROR_CODES`). The store is called from a thread (its calls are
synchronous), one database connection per call from the broker's pool.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from oncelog import errors
from oncelog.broker.codec import (
    MAX_REQUEST_BYTES,
    BadBatch,
    ProducedBatch,
    commit_marker,
    fetched_batches,
    parse_produced,
)
from oncelog.broker.common import (
    API_RANGES,
    FETCH_AHEAD,
    INVALID_REQUEST,
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
    Database,
    FetchAhead,
    Node,
    error_code,
)
from oncelog.broker.txns import TxnHandlers
from oncelog.broker.wakeups import FetchWakeups
from oncelog.store import log, topics, txn
from oncelog.store.records import MAX_BATCHES_PER_REQUEST, PartitionFetch, ProduceBatch, ProduceResult, WireRecord

__all__ = ["Handlers"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How long an empty Fetch waits between looks at the store (it answers at max_wait_ms at the latest).
_FETCH_POLL_S = (0.005, 0.1)
#: The least time between two looks of a Fetch that wake-ups keep waking.
_WAKE_SPACING_S = 0.005
#: The longest an empty Fetch waits, whatever max_wait_ms a client asks for (clients ask 0.5 s).
_FETCH_MAX_WAIT_S = 30.0
#: Records one partition's fetch reads at most: the budget in bytes over 1 KiB, at most this
#: many (the store reads by records; the answer is then cut to the byte budget).
_FETCH_MAX_RECORDS = 1000


#: ListOffsets' EARLIEST_LOCAL_TIMESTAMP (v8, KIP-405) and LATEST_TIERED_TIMESTAMP (v9, KIP-1005).
_EARLIEST_LOCAL, _LATEST_TIERED = -4, -5
#: ListOffsets' MAX_TIMESTAMP (v7, KIP-734): the record with the largest timestamp.
_MAX_TIMESTAMP = -3
#: DescribeTopicPartitions' page size when the request names none (Kafka's default limit).
_PARTITION_PAGE = 2000


def _topic_id(name: str) -> uuid.UUID:
    """A topic's id in Metadata: derived from its name, so every broker answers the same one."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"oncelog:{name}")


class Handlers:
    """One method per API; each takes the decoded request and returns the response (None: no
    response, for acks=0 produce). ``run(fn, *args)`` runs ``fn(conn, *args)`` on a connection of
    the broker's engine, off the event loop. ``wake(tokens)`` wakes the readers the store named in
    its answers to writes (:class:`oncelog.waker.ReaderWaker`); returns at once. ``wakeups``: the
    broker's listening session, through which empty Fetches are woken (the broker closes it)."""

    def __init__(
        self,
        database: Database,
        node: Node,
        run: Callable[..., Any],
        *,
        cluster_id: str = "oncelog",
        auto_create_partitions: int | None = None,
        wakeups: FetchWakeups,
        wake: Callable[[Iterable[str]], None],
    ) -> None:
        self._db = database
        self._wakeups = wakeups
        self.node = node
        self._run = run
        self._cluster_id = cluster_id
        self._auto_create = auto_create_partitions
        self._wake = wake
        self.transactions = TxnHandlers(database, node, run, wake=wake)

    # --- ApiVersions, Metadata ---------------------------------------------------------------------

    async def api_versions(self, request: Any, response_class: Any) -> Any:
        entry = response_class.ApiVersion
        return response_class(
            version=request.version,
            error_code=NONE,
            api_keys=[entry(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(API_RANGES.items())],
            throttle_time_ms=0,
        )

    async def metadata(self, request: Any, response_class: Any) -> Any:
        known: dict[str, int] = await self._run(self._db.call, topics.list_topics)
        wanted = request.topics
        names = sorted(known) if wanted is None or (request.version == 0 and not wanted) else [t.name for t in wanted]
        missing = [name for name in names if name not in known]
        if missing and self._auto_create is not None and getattr(request, "allow_auto_topic_creation", True):
            for name in missing:
                try:
                    await self._run(self._db.call, topics.create_topic, name=name, partitions=self._auto_create)
                except errors.TopicAlreadyExistsError:
                    pass  # another client's request created it meanwhile
                except errors.OncelogError as exc:  # not allowed, or not a valid name: unknown, as before
                    logger.info("auto-creating topic %r failed: %s", name, exc)
            known = await self._run(self._db.call, topics.list_topics)
        node = self.node
        topic_class = response_class.MetadataResponseTopic
        out = []
        for name in names:
            count = known.get(name)
            parts = [self._led_here(topic_class.MetadataResponsePartition, p) for p in range(count or 0)]
            out.append(
                topic_class(
                    error_code=NONE if count is not None else UNKNOWN_TOPIC_OR_PARTITION,
                    name=name,
                    topic_id=_topic_id(name) if count is not None else uuid.UUID(int=0),
                    is_internal=False,
                    partitions=parts,
                )
            )
        return response_class(
            version=request.version,
            throttle_time_ms=0,
            brokers=[
                response_class.MetadataResponseBroker(node_id=node.node_id, host=node.host, port=node.port, rack=None)
            ],
            cluster_id=self._cluster_id,
            controller_id=node.node_id,
            topics=out,
        )

    def _led_here(self, partition_class: Any, index: int) -> Any:
        # Every partition has one replica, this broker, which leads it.
        node_id = self.node.node_id
        return partition_class(
            error_code=NONE,
            partition_index=index,
            leader_id=node_id,
            leader_epoch=0,
            replica_nodes=[node_id],
            isr_nodes=[node_id],
            offline_replicas=[],
        )

    async def describe_topic_partitions(self, request: Any, response_class: Any) -> Any:
        """DescribeTopicPartitions (KIP-966): Metadata's partitions, in topic name order, at most
        ``response_partition_limit`` of them, from the request's cursor on; the answer's cursor
        names where the next page starts."""
        known: dict[str, int] = await self._run(self._db.call, topics.list_topics)
        names = sorted({t.name for t in request.topics}) if request.topics else sorted(known)
        cursor = request.cursor
        if cursor is not None:
            names = [n for n in names if n >= cursor.topic_name]
        budget = request.response_partition_limit if request.response_partition_limit > 0 else _PARTITION_PAGE
        topic_class = response_class.DescribeTopicPartitionsResponseTopic
        out, next_cursor = [], None
        for name in names:
            count = known.get(name)
            if count is None:
                out.append(
                    topic_class(
                        error_code=UNKNOWN_TOPIC_OR_PARTITION,
                        name=name,
                        topic_id=uuid.UUID(int=0),
                        is_internal=False,
                        partitions=[],
                    )
                )
                continue
            first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            if budget == 0:
                next_cursor = response_class.Cursor(topic_name=name, partition_index=first)
                break
            last = min(count, first + budget)
            partition_class = topic_class.DescribeTopicPartitionsResponsePartition
            parts = [self._led_here(partition_class, p) for p in range(first, last)]
            budget -= len(parts)
            out.append(
                topic_class(error_code=NONE, name=name, topic_id=_topic_id(name), is_internal=False, partitions=parts)
            )
            if last < count:
                next_cursor = response_class.Cursor(topic_name=name, partition_index=last)
                break
        return response_class(version=request.version, throttle_time_ms=0, topics=out, next_cursor=next_cursor)

    # --- InitProducerId ------------------------------------------------------------------------------

    async def init_producer_id(self, request: Any, response_class: Any) -> Any:
        def answer(code: int, producer_id: int = -1, epoch: int = -1) -> Any:
            return response_class(
                version=request.version,
                throttle_time_ms=0,
                error_code=code,
                producer_id=producer_id,
                producer_epoch=epoch,
            )

        current = getattr(request, "producer_id", -1)
        epoch = getattr(request, "producer_epoch", -1)
        try:
            if request.transactional_id is not None:
                ident = await self.transactions.init_producer_id(
                    request.transactional_id, request.transaction_timeout_ms, current, epoch
                )
            elif current is not None and current >= 0:
                ident = await self._run(self._db.call, log.init_producer_id, producer_id=current, epoch=epoch)
            else:
                ident = await self._run(self._db.call, log.init_producer_id)
        except errors.OncelogError as exc:
            return answer(error_code(exc))
        return answer(NONE, ident.producer_id, ident.epoch)

    # --- Produce -------------------------------------------------------------------------------------

    async def produce(self, request: Any, response_class: Any) -> Any:
        codes: dict[tuple[str, int], int] = {}
        parsed: list[tuple[tuple[str, int], ProducedBatch]] = []
        budget = MAX_REQUEST_BYTES  # for the request's records, decompressed, all partitions together
        for t in request.topic_data:
            for p in t.partition_data:
                try:
                    batch = parse_produced(p.records, budget)
                    budget -= batch.size
                    parsed.append(((t.name, p.index), batch))
                except BadBatch as exc:
                    codes[(t.name, p.index)] = exc.code
                    logger.info("produce to %s-%s refused: %s", t.name, p.index, exc)
        offsets: dict[tuple[str, int], int] = {}
        tid = request.transactional_id
        number: int | None = None
        if parsed and tid is not None:
            first = parsed[0][1]
            try:
                pid = -1 if first.producer_id is None else first.producer_id
                epoch = -1 if first.producer_epoch is None else first.producer_epoch
                number = await self.transactions.number(tid, pid, epoch)
            except errors.OncelogError as exc:
                codes.update({tp: error_code(exc) for tp, _ in parsed})
                parsed = []
        if parsed:
            results = await self._run(self._append, parsed, tid, number)
            for tp, result in results:
                if isinstance(result, BaseException):
                    codes.setdefault(tp, error_code(result))
                else:
                    offsets.setdefault(tp, result)
        if request.acks == 0:
            return None
        return self._produce_response(request, response_class, codes, offsets)

    def _append(
        self, parsed: list[tuple[tuple[str, int], ProducedBatch]], transactional_id: str | None, number: int | None
    ) -> list[tuple[tuple[str, int], Any]]:
        """Append the request's batches: those of one producer identity together, in requests of
        at most MAX_BATCHES_PER_REQUEST (in transaction ``number`` of ``transactional_id``, if
        given). Each batch's answer is its base offset, or the error."""
        out: list[tuple[tuple[str, int], Any]] = []
        groups: dict[tuple[int | None, int | None], list[tuple[tuple[str, int], ProducedBatch]]] = {}
        for tp, batch in parsed:
            groups.setdefault((batch.producer_id, batch.producer_epoch), []).append((tp, batch))
        # The partitions the store says a reader waits on (read_committed ones only for appends
        # outside a transaction): woken once the appends committed, as oncelog's Producer does.
        tokens: set[str] = set()
        try:
            with self._db.connect() as conn:
                for items in groups.values():
                    for start in range(0, len(items), MAX_BATCHES_PER_REQUEST):
                        chunk = items[start : start + MAX_BATCHES_PER_REQUEST]
                        answers = self._append_chunk(conn, chunk, transactional_id, number)
                        if transactional_id is None and self._bumped_locally(conn, chunk, answers):
                            answers = self._append_chunk(conn, chunk, None, None)
                        for (tp, _), answer in zip(chunk, answers, strict=True):
                            out.append((tp, answer if isinstance(answer, BaseException) else answer.base_offset))
                            if isinstance(answer, ProduceResult) and answer.wake:
                                tokens.add(answer.wake)
        except errors.OncelogError as exc:
            # The database went away (at checkout, or between chunks): a partition with a batch
            # not answered yet gets its error (which wins over its other answers), and producers
            # retry.
            left = Counter(tp for tp, _ in parsed)
            left.subtract(tp for tp, _ in out)
            out += [(tp, exc) for tp, n in left.items() if n > 0]
        if tokens:
            self._wake(tokens)
        return out

    @staticmethod
    def _append_chunk(
        conn: sa.Connection,
        chunk: list[tuple[tuple[str, int], ProducedBatch]],
        transactional_id: str | None,
        number: int | None,
    ) -> list[Any]:
        """The store's answer to one producer identity's batches: each one's result or error."""
        first = chunk[0][1]
        try:
            return log.produce_batches(
                conn,
                batches=[ProduceBatch(t, p, b.base_sequence, b.records) for (t, p), b in chunk],
                producer_id=first.producer_id,
                producer_epoch=first.producer_epoch,
                transactional_id=transactional_id,
                txn_number=number,
            )
        except errors.OncelogError as exc:
            return [exc] * len(chunk)

    @staticmethod
    def _bumped_locally(
        conn: sa.Connection, chunk: list[tuple[tuple[str, int], ProducedBatch]], answers: list[Any]
    ) -> bool:
        """Whether an idempotent producer's batches were refused for an epoch it bumped itself,
        and the store has now made that bump its own.

        Kafka's Java idempotent producer, after an OutOfOrderSequence or UnknownProducerId, takes
        the next epoch of its producer id on its own and restarts every partition at sequence 0;
        Kafka's brokers accept such a batch. The store refuses epochs it did not issue
        (deviation 3), so the broker asks the store for that bump, as a KIP-360 InitProducerId
        with the id and the epoch before: the store checks that epoch is the current one and
        fences the older epoch's appends, exactly as when a client asks. Only when the store's
        answer is the very epoch the batches carry (not a new producer id) are they sent again.
        """
        first = chunk[0][1]
        pid, epoch = first.producer_id, first.producer_epoch
        if pid is None or pid < 0 or epoch is None or epoch <= 0:
            return False
        if not all(isinstance(a, errors.InvalidProducerEpochError) for a in answers):
            return False
        if any(b.base_sequence != 0 for _, b in chunk):
            return False
        try:
            bumped = log.init_producer_id(conn, producer_id=pid, epoch=epoch - 1)
        except errors.OncelogError:
            return False
        return (bumped.producer_id, bumped.epoch) == (pid, epoch)

    @staticmethod
    def _produce_response(
        request: Any, response_class: Any, codes: dict[tuple[str, int], int], offsets: dict[tuple[str, int], int]
    ) -> Any:
        partition_class = response_class.TopicProduceResponse.PartitionProduceResponse

        def partition(topic: str, p: Any) -> Any:
            code = codes.get((topic, p.index), NONE)
            return partition_class(
                index=p.index,
                error_code=code,
                base_offset=offsets.get((topic, p.index), -1) if code == NONE else -1,
                log_append_time_ms=-1,
                log_start_offset=-1,
                record_errors=[],
                error_message=None,
            )

        return response_class(
            version=request.version,
            throttle_time_ms=0,
            responses=[
                response_class.TopicProduceResponse(name=name, partition_responses=parts)
                for name, parts in _per_partition(request.topic_data, "name", "partition_data", partition)
            ],
        )

    # --- ListOffsets ---------------------------------------------------------------------------------

    async def list_offsets(self, request: Any, response_class: Any) -> Any:
        committed = getattr(request, "isolation_level", 0) == 1
        answers = await self._run(self._list_offsets, request.topics, committed)
        partition_class = response_class.ListOffsetsTopicResponse.ListOffsetsPartitionResponse

        def partition(topic: str, p: Any) -> Any:
            code, offset, timestamp = answers[(topic, p.partition_index)]
            return partition_class(
                partition_index=p.partition_index, error_code=code, timestamp=timestamp, offset=offset, leader_epoch=0
            )

        return response_class(
            version=request.version,
            throttle_time_ms=0,
            topics=[
                response_class.ListOffsetsTopicResponse(name=name, partitions=parts)
                for name, parts in _per_partition(request.topics, "name", "partitions", partition)
            ],
        )

    def _list_offsets(self, wanted: Sequence[Any], committed: bool) -> dict[tuple[str, int], tuple[int, int, int]]:
        """(error code, offset, timestamp ms) per partition: -2 (and -4, the local log start) the
        log start, -1 the end (the last stable offset for read_committed), -3 the record with the
        largest timestamp, -5 (the last tiered offset) -1 as nothing is tiered, a time the first
        offset at or after it."""
        out: dict[tuple[str, int], tuple[int, int, int]] = {}
        try:
            with self._db.connect() as conn:
                for t in wanted:
                    try:
                        bounds = {b.partition: b for b in log.list_offsets(conn, topic=t.name)}
                    except errors.OncelogError as exc:
                        for p in t.partitions:
                            out[(t.name, p.partition_index)] = (error_code(exc), -1, -1)
                        continue
                    for p in t.partitions:
                        key, b, ts = (t.name, p.partition_index), bounds.get(p.partition_index), p.timestamp
                        if b is None:
                            out[key] = (UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
                        elif ts in (-2, _EARLIEST_LOCAL):
                            out[key] = (NONE, b.log_start_offset, -1)  # no tiered storage: all of it is local
                        elif ts == -1:
                            out[key] = (NONE, b.last_stable_offset if committed else b.high_watermark, -1)
                        elif ts == _LATEST_TIERED:
                            out[key] = (NONE, -1, -1)  # nothing is tiered: Kafka's answer without remote storage
                        elif ts < 0 and ts != _MAX_TIMESTAMP:
                            out[key] = (INVALID_REQUEST, -1, -1)
                        else:
                            try:
                                if ts == _MAX_TIMESTAMP:
                                    (found,) = log.list_offsets_max_timestamp(
                                        conn, partitions=[(t.name, p.partition_index)], read_committed=committed
                                    )
                                else:
                                    (found,) = log.list_offsets_for_times(
                                        conn,
                                        requests=[(t.name, p.partition_index, datetime.fromtimestamp(ts / 1000, UTC))],
                                        read_committed=committed,
                                    )
                            except errors.OncelogError as exc:
                                out[key] = (error_code(exc), -1, -1)
                                continue
                            out[key] = (
                                (NONE, -1, -1) if found is None else (NONE, found[0], int(found[1].timestamp() * 1000))
                            )
        except errors.OncelogError as exc:  # the database went away: what is left gets its error
            for t in wanted:
                for p in t.partitions:
                    out.setdefault((t.name, p.partition_index), (error_code(exc), -1, -1))
        return out

    # --- Fetch ---------------------------------------------------------------------------------------

    async def fetch(self, request: Any, response_class: Any) -> Any:
        committed = getattr(request, "isolation_level", 0) == 1
        positions: dict[tuple[str, int], int] = {}
        budgets: dict[tuple[str, int], int] = {}
        for t in request.topics:
            for p in t.partitions:
                positions[(t.topic, p.partition)] = p.fetch_offset
                budgets[(t.topic, p.partition)] = p.partition_max_bytes
        ahead = FETCH_AHEAD.get()
        read = await self._read_ahead(ahead, positions, budgets, committed)
        deadline = time.monotonic() + min(max(request.max_wait_ms, 0) / 1000, _FETCH_MAX_WAIT_S)
        if read is None:
            read = await self._await_records(positions, budgets, committed, deadline)
        fetched, following = read
        if ahead is not None and any(body for _, _, body in fetched.values()):
            # The next Fetch of a reader that is catching up asks for what follows this answer:
            # read it now, while this answer travels and the client takes it in.
            ahead.start(
                _fetch_key(following, budgets, committed),
                asyncio.ensure_future(self._run(self._fetch, following, budgets, committed)),
            )
        partition_class = response_class.FetchableTopicResponse.PartitionData

        def partition(topic: str, p: Any) -> Any:
            code, seen, body = fetched[(topic, p.partition)]
            return partition_class(
                partition_index=p.partition,
                error_code=code,
                high_watermark=-1 if seen is None else seen.high_watermark,
                last_stable_offset=-1 if seen is None else seen.last_stable_offset,
                log_start_offset=-1 if seen is None else seen.log_start_offset,
                aborted_transactions=[],
                preferred_read_replica=-1,
                records=body,  # an empty record set, never null: librdkafka needs the bytes
            )

        return response_class(
            version=request.version,
            throttle_time_ms=0,
            error_code=NONE,
            session_id=0,
            responses=[
                response_class.FetchableTopicResponse(topic=name, partitions=parts)
                for name, parts in _per_partition(request.topics, "topic", "partitions", partition)
            ],
        )

    async def _await_records(
        self,
        positions: dict[tuple[str, int], int],
        budgets: dict[tuple[str, int], int],
        committed: bool,
        deadline: float,
    ) -> tuple[dict[tuple[str, int], Any], dict[tuple[str, int], int]]:
        """Read until there are records or ``deadline`` passes (Kafka's purgatory for a Fetch):
        woken by a write to one of the partitions once the wait is registered in the store
        (:mod:`oncelog.broker.wakeups`), and looking again on a timer whatever comes."""
        pause, spacing = _FETCH_POLL_S[0], _WAKE_SPACING_S
        waited = False
        with self._wakeups.waiter() as waiter:
            while True:
                started = time.monotonic()
                answer, after = await self._run(self._fetch, positions, budgets, committed)
                if any(body for _, _, body in answer.values()) or time.monotonic() >= deadline:
                    return answer, after
                if not waiter.registered:
                    # Only partitions the client may read and that exist: no writer is made to
                    # wake this Fetch for a partition it was refused.
                    readable = [tp for tp, (code, _, _) in answer.items() if code == NONE]
                    await waiter.register(readable, committed, deadline - time.monotonic())
                    continue  # look once more: a write that committed before the registration woke nobody
                if not waited:
                    waited = True
                    logger.debug("a Fetch of %s waits for a wake-up", sorted(positions))
                if await waiter.wait(min(pause, max(deadline - time.monotonic(), 0))):
                    logger.debug("a Fetch of %s woken", sorted(positions))
                    # Any role may NOTIFY: however often it is woken, a Fetch looks at most once
                    # per 5 ms, as oncelog's Consumer does, and a wake-up after which it found
                    # nothing (a flood, or writes it may not see yet) doubles that spacing, up to
                    # its timer's longest pause.
                    await asyncio.sleep(max(started + spacing - time.monotonic(), 0))
                    spacing = min(spacing * 2, _FETCH_POLL_S[1])
                else:
                    pause = min(pause * 2, _FETCH_POLL_S[1])

    async def _read_ahead(
        self,
        ahead: FetchAhead | None,
        positions: dict[tuple[str, int], int],
        budgets: dict[tuple[str, int], int],
        committed: bool,
    ) -> tuple[_Answer, dict[tuple[str, int], int]] | None:
        """The connection's read ahead, when it was for this very request, is fresh (FetchAhead)
        and found records and no error; else None (the request is read afresh). Records read a
        moment ago are still there to be read: committed ones stay committed, and an answer may
        always hold fewer records than the log has by now (the next Fetch gets the rest)."""
        task = None if ahead is None else ahead.take(_fetch_key(positions, budgets, committed))
        if task is None:
            return None
        try:
            answer, following = await task
        except Exception:  # the read failed: read afresh, which reports the error itself
            logger.debug("a fetch read ahead failed", exc_info=True)
            return None
        if any(code != NONE for code, _, _ in answer.values()) or not any(body for _, _, body in answer.values()):
            return None
        logger.debug("a fetch of %d partition(s) answered from its read ahead", len(positions))
        return answer, following

    def _fetch(
        self, positions: dict[tuple[str, int], int], budgets: dict[tuple[str, int], int], committed: bool
    ) -> tuple[_Answer, dict[tuple[str, int], int]]:
        """Per partition: (error code, what the store saw, the record set to send); and the
        positions that follow what is sent (a reader's next fetch, if it takes it all)."""
        most = max(1, min(_FETCH_MAX_RECORDS, max(budgets.values(), default=0) // 1024))
        try:
            with self._db.connect() as conn:
                seen = log.fetch_many_wire(conn, positions, max_records=most, read_committed=committed)
                if any(f.expired_transaction for f in seen.values()) and txn.expire_transactions(conn):
                    seen = log.fetch_many_wire(conn, positions, max_records=most, read_committed=committed)
        except errors.OncelogError as exc:
            return {tp: (error_code(exc), None, b"") for tp in positions}, dict(positions)
        out: _Answer = {}
        following = dict(positions)
        for tp, position in positions.items():
            f = seen.get(tp)
            if f is None or f.error is not None:
                code = 1 if f is not None and f.error == "offset_out_of_range" else UNKNOWN_TOPIC_OR_PARTITION
                out[tp] = (code, f, b"")
                continue
            records = _within(f.records, budgets[tp])
            if records:
                body = fetched_batches(records)
                following[tp] = records[-1].offset + 1
            elif f.read_limit is not None and f.read_limit > position:
                # Nothing this reader may see lies below the read's limit (commit markers, aborted
                # records): a marker at the last of those offsets moves the reader past them, as
                # Kafka's markers do. Only when nothing was returned: with records, the limit may
                # lie past records the record cap left for the next fetch.
                body = commit_marker(f.read_limit - 1, int(time.time() * 1000))
                following[tp] = f.read_limit
            else:
                body = b""
            # The answer keeps the partition's offsets, not the records it read (a read ahead
            # holds the answer until the next Fetch: the encoded batches are enough).
            out[tp] = (NONE, dataclasses.replace(f, records=[]), body)
        return out, following


#: A Fetch's answer per partition: (error code, what the store saw, the record set to send).
_Answer = dict[tuple[str, int], tuple[int, PartitionFetch[WireRecord] | None, bytes]]


def _fetch_key(
    positions: dict[tuple[str, int], int], budgets: dict[tuple[str, int], int], committed: bool
) -> tuple[frozenset[Any], frozenset[Any], bool]:
    """What a read ahead must match to answer a Fetch: its positions, byte budgets and isolation."""
    return frozenset(positions.items()), frozenset(budgets.items()), committed


def _per_partition(
    topics: Sequence[Any], name: str, parts: str, answer: Callable[[str, Any], Any]
) -> list[tuple[str, list[Any]]]:
    """Each requested topic's name (attribute ``name``) and the answer for each of its requested
    partitions (attribute ``parts``): the nesting of every per-partition Kafka response."""
    return [(getattr(t, name), [answer(getattr(t, name), p) for p in getattr(t, parts)]) for t in topics]


def _within(records: list[WireRecord], budget: int) -> list[WireRecord]:
    """The first records of ``records`` that fit ``budget`` bytes (at least one, as Kafka sends
    a record larger than the budget alone so that a reader is never stuck)."""
    used = 0
    for i, r in enumerate(records):
        used += len(r.key or b"") + len(r.value or b"") + 70
        if used > budget and i > 0:
            return records[:i]
    return records
