"""The idempotent producer against a model: random operation sequences, store vs. a pure-Python model.

The model is Kafka's rules as docs/concepts.md numbers them (1-5, 9 and 12 for ids without a
transactional id), written independently of the SQL: per producer id its current and previous
epoch; per (producer id, partition) the epoch and the last five batches; per partition the log.
Two client slots (producers) write to two partitions. Every operation's reply from the store
(offsets, duplicate flag and append time, or the error class) must equal the model's, and after
each run the log of both partitions must equal the model's log record for record.

Each hypothesis example gets a topic of its own and new producer ids in the test's database.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from oncelog import errors
from oncelog.store import log, topics
from oncelog.store.records import ProduceResult, RecordIn
from tests.support.clock import server_time

WINDOW = 5
MAX_SEQ = 2147483647
PARTITIONS = 2
SLOTS = 2

# --- the model -------------------------------------------------------------------------------


@dataclass
class Batch:
    """A batch the store accepted: what the client sent and where it landed."""

    epoch: int
    first_seq: int
    values: list[bytes]
    base_offset: int
    last_offset: int
    append_time: datetime

    @property
    def last_seq(self) -> int:
        return (self.first_seq + len(self.values) - 1) % (MAX_SEQ + 1)


@dataclass
class SeqState:
    """Rule 1: per producer and partition, the epoch and its last five batches."""

    epoch: int
    window: list[Batch] = field(default_factory=list)


@dataclass
class ProducerEntry:
    epoch: int
    last_epoch: int | None = None


@dataclass
class Ok:
    base_offset: int
    last_offset: int
    duplicate: bool
    append_time: datetime | None  # known in advance only for a duplicate


@dataclass
class Model:
    producers: dict[int, ProducerEntry] = field(default_factory=dict)
    state: dict[tuple[int, int], SeqState] = field(default_factory=dict)
    # Per partition: (value, producer id, epoch, sequence) in offset order.
    logs: list[list[tuple[bytes, int | None, int | None, int | None]]] = field(
        default_factory=lambda: [[] for _ in range(PARTITIONS)]
    )

    def produce(self, pid: int, epoch: int, seq: int, n: int, partition: int) -> Ok | type[errors.OncelogError]:
        """The reply the rules prescribe (without changing anything)."""
        entry = self.producers.get(pid)
        if entry is None:
            return errors.UnknownProducerIdError
        if epoch != entry.epoch:  # rule 2 (lower) and never issued (higher)
            return errors.InvalidProducerEpochError
        last_seq = (seq + n - 1) % (MAX_SEQ + 1)
        s = self.state.get((pid, partition))
        if s is not None and s.epoch == epoch:
            for b in s.window:  # rule 1: a duplicate is checked first
                if (b.first_seq, b.last_seq) == (seq, last_seq):
                    return Ok(b.base_offset, b.last_offset, True, b.append_time)
            expected = 0 if s.window[-1].last_seq == MAX_SEQ else s.window[-1].last_seq + 1
            if seq != expected:  # rule 3
                return errors.OutOfOrderSequenceError
        elif seq != 0:  # rules 4 and 5 (oncelog: a producer unknown on the partition starts at 0)
            return errors.OutOfOrderSequenceError
        base = len(self.logs[partition])
        return Ok(base, base + n - 1, False, None)

    def append(
        self, pid: int, epoch: int, seq: int, values: list[bytes], partition: int, result: ProduceResult
    ) -> Batch:
        b = Batch(epoch, seq, values, result.base_offset, result.last_offset, result.log_append_time)
        for i, v in enumerate(values):
            self.logs[partition].append((v, pid, epoch, (seq + i) % (MAX_SEQ + 1)))
        s = self.state.get((pid, partition))
        if s is None or s.epoch != epoch:
            s = self.state[(pid, partition)] = SeqState(epoch)
        s.window = [*s.window, b][-WINDOW:]
        return b

    def next_seq(self, pid: int, partition: int) -> int:
        """The sequence a well-behaved client sends next (its own view: 0 unless the store has a window)."""
        entry = self.producers.get(pid)
        s = self.state.get((pid, partition))
        if entry is None or s is None or s.epoch != entry.epoch:
            return 0
        last = s.window[-1].last_seq
        return 0 if last == MAX_SEQ else last + 1

    def init_producer_id(self, pid: int, epoch: int) -> tuple[int, int] | type[errors.OncelogError] | None:
        """KIP-360 for an id without a transactional id; None means "a new producer id at epoch 0"."""
        entry = self.producers.get(pid)
        if entry is None:
            return None
        if epoch == entry.epoch:
            if entry.epoch >= 32766:
                return None
            entry.last_epoch, entry.epoch = entry.epoch, entry.epoch + 1
            return (pid, entry.epoch)
        if epoch == entry.last_epoch:
            return (pid, entry.epoch)
        return errors.InvalidProducerEpochError


# --- the machine -----------------------------------------------------------------------------

_topic_numbers = itertools.count()

# Operations by name, repeated to weight them: mostly normal sends and retries, now and then
# a protocol violation, an epoch bump or a new id, rarely an expiry.
OPERATIONS = [
    *["send_next"] * 6,
    *["send_burst"] * 3,
    *["retry"] * 6,
    "send_without_idempotence",
    "send_gap",
    "send_repeat",
    "send_with_older_epoch",
    "send_with_newer_epoch",
    *["bump_epoch"] * 2,
    "retry_bump",
    "bump_with_a_wrong_epoch",
    "new_producer_id",
    "expire_one_partition",
    "expire_everything",
]


class SequenceMachine(RuleBasedStateMachine):
    conn: sa.Connection  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.topic = f"model-{next(_topic_numbers)}"
        topics.create_topic(self.conn, name=self.topic, partitions=PARTITIONS)
        self.model = Model()
        self.slots: list[tuple[int, int]] = []  # each client's (producer id, epoch)
        self.history: dict[tuple[int, int], list[Batch]] = {}  # every batch accepted, per (pid, partition)
        self.issued: set[int] = set()
        self.values = itertools.count()
        for _ in range(SLOTS):
            self.slots.append(self._new_id())

    # helpers

    def _new_id(self) -> tuple[int, int]:
        ident = log.init_producer_id(self.conn)
        return self._adopt_new(ident.producer_id, ident.epoch)

    def _adopt_new(self, pid: int, epoch: int) -> tuple[int, int]:
        assert epoch == 0
        assert pid not in self.issued, "a producer id was issued twice"
        self.issued.add(pid)
        self.model.producers[pid] = ProducerEntry(0)
        return (pid, 0)

    def _fresh_values(self, n: int) -> list[bytes]:
        return [f"{self.topic}/{next(self.values)}".encode() for _ in range(n)]

    def _produce(self, slot: int, slot_pid: int, epoch: int, seq: int, values: list[bytes], partition: int) -> None:
        expected = self.model.produce(slot_pid, epoch, seq, len(values), partition)
        event(
            "produce: "
            + (expected.__name__ if isinstance(expected, type) else "duplicate" if expected.duplicate else "appended")
        )
        try:
            got = log.produce(
                self.conn,
                topic=self.topic,
                partition=partition,
                records=[RecordIn(value=v) for v in values],
                producer_id=slot_pid,
                producer_epoch=epoch,
                base_sequence=seq,
            )
        except errors.OncelogError as exc:
            assert isinstance(expected, type), f"store refused with {exc!r}, model expected {expected}"
            assert type(exc) is expected, f"store refused with {exc!r}, model expected {expected.__name__}"
            if isinstance(exc, errors.UnknownProducerIdError) and self.slots[slot][0] == slot_pid:
                self.slots[slot] = self._new_id()  # what a producer does on UNKNOWN_PRODUCER_ID
            return
        assert isinstance(expected, Ok), f"store accepted {got}, model expected {expected.__name__}"
        assert (got.base_offset, got.last_offset, got.duplicate) == (
            expected.base_offset,
            expected.last_offset,
            expected.duplicate,
        )
        if expected.duplicate:
            assert got.log_append_time == expected.append_time
        else:
            b = self.model.append(slot_pid, epoch, seq, values, partition, got)
            self.history.setdefault((slot_pid, partition), []).append(b)

    def _init(self, slot: int, pid: int, epoch: int, *, adopt: bool = True) -> None:
        expected = self.model.init_producer_id(pid, epoch)
        event(
            "init_producer_id: "
            + (expected.__name__ if isinstance(expected, type) else "new id" if expected is None else "epoch")
        )
        try:
            got = log.init_producer_id(self.conn, producer_id=pid, epoch=epoch)
        except errors.OncelogError as exc:
            assert expected is errors.InvalidProducerEpochError, f"store refused with {exc!r}, model: {expected}"
            assert type(exc) is errors.InvalidProducerEpochError, exc
            return
        assert not isinstance(expected, type), f"store answered {got}, model expected {expected}"
        if expected is None:
            new = self._adopt_new(got.producer_id, got.epoch)
        else:
            assert (got.producer_id, got.epoch) == expected
            new = expected
        if adopt:
            self.slots[slot] = new

    # operations: one rule, so that common client actions can be drawn more often than rare ones

    @rule(
        op=st.sampled_from(OPERATIONS),
        slot=st.integers(0, SLOTS - 1),
        partition=st.integers(0, PARTITIONS - 1),
        n=st.integers(1, 3),
        k=st.integers(1, 8),
    )
    def step(self, op: str, slot: int, partition: int, n: int, k: int) -> None:
        getattr(self, op)(slot, partition, n, k)

    def send_next(self, slot: int, partition: int, n: int, k: int) -> None:
        """A well-behaved client sends its next batch."""
        pid, epoch = self.slots[slot]
        self._produce(slot, pid, epoch, self.model.next_seq(pid, partition), self._fresh_values(n), partition)

    def send_burst(self, slot: int, partition: int, n: int, k: int) -> None:
        """Up to eight batches in a row to one partition (a pipelining client), so windows fill up."""
        for _ in range(k):
            self.send_next(slot, partition, n, k)

    def send_without_idempotence(self, slot: int, partition: int, n: int, k: int) -> None:
        values = self._fresh_values(n)
        got = log.produce(self.conn, topic=self.topic, partition=partition, records=[RecordIn(value=v) for v in values])
        base = len(self.model.logs[partition])
        assert (got.base_offset, got.last_offset, got.duplicate) == (base, base + n - 1, False)
        self.model.logs[partition].extend((v, None, None, None) for v in values)

    def retry(self, slot: int, partition: int, n: int, k: int) -> None:
        """Send again, unchanged, the k-th last batch this producer id wrote (in or out of the window)."""
        pid, _ = self.slots[slot]
        sent = self.history.get((pid, partition), [])
        if sent:
            b = sent[-min(k, len(sent))]
            self._produce(slot, pid, b.epoch, b.first_seq, b.values, partition)

    def send_gap(self, slot: int, partition: int, n: int, k: int) -> None:
        """A batch ahead of the next sequence."""
        pid, epoch = self.slots[slot]
        seq = self.model.next_seq(pid, partition) + min(k, 4)
        self._produce(slot, pid, epoch, seq, self._fresh_values(n), partition)

    def send_repeat(self, slot: int, partition: int, n: int, k: int) -> None:
        """New records under an already used sequence (of any length: sometimes it matches a retained batch)."""
        pid, epoch = self.slots[slot]
        seq = self.model.next_seq(pid, partition) - k
        if seq >= 0:
            self._produce(slot, pid, epoch, seq, self._fresh_values(n), partition)

    def send_with_older_epoch(self, slot: int, partition: int, n: int, k: int) -> None:
        """A zombie of this producer still on an older epoch."""
        pid, epoch = self.slots[slot]
        if epoch > 0:
            older = max(0, epoch - k)
            self._produce(slot, pid, older, self.model.next_seq(pid, partition), self._fresh_values(n), partition)

    def send_with_newer_epoch(self, slot: int, partition: int, n: int, k: int) -> None:
        """A client that invents an epoch never issued."""
        pid, epoch = self.slots[slot]
        self._produce(slot, pid, epoch + k, 0, self._fresh_values(n), partition)

    def bump_epoch(self, slot: int, partition: int, n: int, k: int) -> None:
        """KIP-360: InitProducerId with the id and epoch the client holds."""
        pid, epoch = self.slots[slot]
        self._init(slot, pid, epoch)

    def retry_bump(self, slot: int, partition: int, n: int, k: int) -> None:
        """The bump's reply was lost: ask again with the epoch held before it."""
        pid, epoch = self.slots[slot]
        if epoch > 0:
            self._init(slot, pid, epoch - 1)

    def bump_with_a_wrong_epoch(self, slot: int, partition: int, n: int, k: int) -> None:
        """InitProducerId with an epoch two or more bumps old, or never issued (k=1 is the current one)."""
        pid, epoch = self.slots[slot]
        wrong = epoch + k - 1 if k % 2 else epoch - k
        if wrong >= 0 and wrong != epoch:
            self._init(slot, pid, wrong, adopt=False)

    def new_producer_id(self, slot: int, partition: int, n: int, k: int) -> None:
        """A client restarts and asks for a brand-new id (the old one is abandoned)."""
        self.slots[slot] = self._new_id()

    def expire_everything(self, slot: int, partition: int, n: int, k: int) -> None:
        """Rule 9, two days later: all sequence state goes, and so do the ids left without any."""
        now = self.conn.exec_driver_sql("SELECT now()").scalar_one()
        with server_time(self.conn, now + timedelta(days=2)):
            log.expire_producers(self.conn)
        self.model.state.clear()
        self.model.producers.clear()

    def expire_one_partition(self, slot: int, partition: int, n: int, k: int) -> None:
        """Rule 9 for one (producer, partition) idle for two days while the producer id stays in use.

        Aging that one row with SQL stands in for two days without writes to that partition.
        """
        pid, _ = self.slots[slot]
        aged = self.conn.execute(
            sa.text(
                "UPDATE producer_partition_state ps SET updated_at = ps.updated_at - interval '2 days' "
                "FROM topics t WHERE t.topic_id = ps.topic_id AND t.name = :t "
                "AND ps.producer_id = :p AND ps.partition = :part"
            ),
            {"t": self.topic, "p": pid, "part": partition},
        ).rowcount
        assert aged == (1 if (pid, partition) in self.model.state else 0)
        assert log.expire_producers(self.conn) == aged
        self.model.state.pop((pid, partition), None)

    # checks

    @invariant()
    def high_watermarks_match(self) -> None:
        got = [p.high_watermark for p in log.list_offsets(self.conn, topic=self.topic)]
        assert got == [len(x) for x in self.model.logs]

    def teardown(self) -> None:
        for partition in range(PARTITIONS):
            fetched = log.fetch(self.conn, topic=self.topic, partition=partition, offset=0, max_records=10_000)
            got = [(r.value, r.producer_id, r.producer_epoch, r.sequence) for r in fetched.records]
            assert [r.offset for r in fetched.records] == list(range(len(got)))
            assert got == self.model.logs[partition]


def test_store_matches_the_model(conn: sa.Connection) -> None:
    class Machine(SequenceMachine):
        pass

    Machine.conn = conn
    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=60,
            stateful_step_count=30,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )
