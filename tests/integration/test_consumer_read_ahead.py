"""The consumer's read ahead (``read_ahead=True``, oncelog.fetcher) never changes what poll() returns.

After a poll that returned records, the next fetch is already on its way when the application
gets them; a seek, a pause or a resume in between must make the consumer discard that answer,
and records written after it was sent must still be read. A hypothesis state machine drives one
consumer against a model of the log (positions, pauses, seeks, writes between polls) and checks
every poll: per partition, records contiguous from the position, within the per-partition
budget, exactly the log's; and draining (two empty polls in a row) reaches the end of every
unpaused partition.
"""

from __future__ import annotations

import itertools

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from oncelog import Consumer, TopicPartition
from oncelog.errors import ConfigurationError
from oncelog.store import log, topics
from oncelog.store.records import RecordIn

PARTITIONS = 3
MAX_POLL_RECORDS = 6
_topics = itertools.count()


class ReadAheadMachine(RuleBasedStateMachine):
    conn: sa.Connection
    db_url: str

    def __init__(self) -> None:
        super().__init__()
        self.topic = f"ahead{next(_topics)}"
        topics.create_topic(self.conn, name=self.topic, partitions=PARTITIONS)
        self.tps = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        self.logs: list[list[bytes]] = [[] for _ in range(PARTITIONS)]
        self.positions = dict.fromkeys(self.tps, 0)
        self.paused: set[TopicPartition] = set()
        self.consumer = Consumer(
            self.db_url, max_poll_records=MAX_POLL_RECORDS, auto_offset_reset="earliest", read_ahead=True
        )
        self.consumer.assign(self.tps)
        for tp in self.tps:
            self.consumer.seek(tp, 0)
        self._values = itertools.count()

    @rule(partition=st.integers(0, PARTITIONS - 1), n=st.integers(1, 7))
    def write(self, partition: int, n: int) -> None:
        values = [b"v%d" % next(self._values) for _ in range(n)]
        log.produce(self.conn, topic=self.topic, partition=partition, records=[RecordIn(v) for v in values])
        self.logs[partition].extend(values)

    @rule()
    def poll(self) -> None:
        self._poll_and_check()

    @rule(partition=st.integers(0, PARTITIONS - 1), data=st.data())
    def seek(self, partition: int, data: st.DataObject) -> None:
        tp = self.tps[partition]
        offset = data.draw(st.integers(0, len(self.logs[partition])))
        self.consumer.seek(tp, offset)
        self.positions[tp] = offset

    @rule(partition=st.integers(0, PARTITIONS - 1))
    def pause(self, partition: int) -> None:
        self.consumer.pause([self.tps[partition]])
        self.paused.add(self.tps[partition])

    @rule(partition=st.integers(0, PARTITIONS - 1))
    def resume(self, partition: int) -> None:
        self.consumer.resume([self.tps[partition]])
        self.paused.discard(self.tps[partition])

    @rule()
    def drain(self) -> None:
        empty = 0
        while empty < 2:
            empty = 0 if self._poll_and_check() else empty + 1
        for tp in self.tps:
            if tp not in self.paused:
                assert self.positions[tp] == len(self.logs[tp.partition]), tp

    @invariant()
    def positions_match(self) -> None:
        assert {tp: self.consumer.position(tp) for tp in self.tps} == self.positions

    def _poll_and_check(self) -> int:
        records = self.consumer.poll(0)
        active = [tp for tp in self.tps if tp not in self.paused]
        budget = max(1, MAX_POLL_RECORDS // len(active)) if active else 0
        by_tp: dict[TopicPartition, list[tuple[int, bytes | None]]] = {}
        for r in records:
            by_tp.setdefault(TopicPartition(r.topic, r.partition), []).append((r.offset, r.value))
        assert set(by_tp) <= set(active), "a paused partition returned records"
        for tp, got in by_tp.items():
            start = self.positions[tp]
            assert len(got) <= budget
            expected = list(enumerate(self.logs[tp.partition]))[start : start + len(got)]
            assert got == expected, (tp, start)
            self.positions[tp] = start + len(got)
        return len(records)

    def teardown(self) -> None:
        self.consumer.close()


def test_read_ahead_returns_exactly_what_the_positions_ask_for(conn: sa.Connection, db_url: str) -> None:
    class Machine(ReadAheadMachine):
        pass

    Machine.conn = conn
    Machine.db_url = db_url
    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=80,
            stateful_step_count=40,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )


def test_records_written_after_the_read_ahead_was_sent_are_read(conn: sa.Connection, db_url: str) -> None:
    topics.create_topic(conn, name="t", partitions=1)
    log.produce(conn, topic="t", partition=0, records=[RecordIn(b"a%d" % i) for i in range(4)])
    with Consumer(db_url, max_poll_records=4, read_ahead=True) as consumer:
        consumer.assign([TopicPartition("t", 0)])
        consumer.seek(TopicPartition("t", 0), 0)
        assert [r.value for r in consumer.poll(5)] == [b"a0", b"a1", b"a2", b"a3"]
        # The fetch from offset 4 was sent when that poll returned: let it finish (it finds
        # nothing), then write. A poll that does not wait must still see these at once, not
        # hand over the stale empty answer (which made poll(timeout) back off first).
        ahead = consumer._fetcher._ahead
        assert ahead is not None
        assert all(not part.records for part in ahead[1].result(10).values())
        log.produce(conn, topic="t", partition=0, records=[RecordIn(b"b%d" % i) for i in range(3)])
        assert [r.value for r in consumer.poll(0)] == [b"b0", b"b1", b"b2"]


@pytest.mark.parametrize("change", ["seek", "pause"])
def test_a_change_between_polls_discards_the_read_ahead(conn: sa.Connection, db_url: str, change: str) -> None:
    topics.create_topic(conn, name="t", partitions=2)
    for p in (0, 1):
        log.produce(conn, topic="t", partition=p, records=[RecordIn(b"%d-%d" % (p, i)) for i in range(10)])
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    with Consumer(db_url, max_poll_records=4, read_ahead=True) as consumer:
        consumer.assign(tps)
        got = consumer.poll(5)  # two from each partition; the fetch from offsets 2 and 2 is sent
        assert sorted((r.partition, r.offset) for r in got) == [(0, 0), (0, 1), (1, 0), (1, 1)]
        if change == "seek":
            consumer.seek(tps[0], 7)
            expected = [(0, 7), (0, 8), (1, 2), (1, 3)]
        else:
            consumer.pause([tps[1]])
            expected = [(0, 2), (0, 3), (0, 4), (0, 5)]  # the whole budget goes to partition 0
        assert sorted((r.partition, r.offset) for r in consumer.poll(5)) == expected


def test_read_ahead_is_off_unless_asked_for_and_takes_only_a_bool(conn: sa.Connection, db_url: str) -> None:
    topics.create_topic(conn, name="t", partitions=1)
    log.produce(conn, topic="t", partition=0, records=[RecordIn(b"x")])
    with Consumer(db_url) as consumer:
        consumer.assign([TopicPartition("t", 0)])
        assert len(consumer.poll(5)) == 1
        assert consumer._fetcher._ahead is None  # nothing was sent after the poll
    with pytest.raises(ConfigurationError):
        Consumer(db_url, read_ahead="yes")  # type: ignore[arg-type]
