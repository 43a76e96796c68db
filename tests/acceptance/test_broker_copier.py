"""Exactly once through ``oncelog broker`` with Kafka's own client, under SIGKILL.

In the spirit of Kafka's transactions system test (tests/kafkatest/tests/core/transactions_test.py):
copiers written with confluent-kafka (tests/support/broker_copier_child.py) consume ``in`` in one
consumer group and write ``out`` in transactions that carry their consumer offsets (KIP-447),
while the test kills them with SIGKILL at random moments and starts them again. A read_committed
reader follows ``out`` all along. At the end each partition of ``out`` holds exactly the copies of
the same partition of ``in``, in order: nothing lost, nothing twice, and the reader never saw a
record of an aborted transaction.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

import oncelog
from oncelog import Consumer, TopicPartition
from tests.support.broker import running_broker
from tests.support.broker_copier_child import GROUP, IN, OUT

PARTITIONS = 4
RECORDS = 100_000
COPIERS = 2


@pytest.fixture
def loaded(db_url: str) -> dict[int, list[bytes]]:
    """``in`` holding RECORDS records over its partitions, ``out`` empty; the values per partition."""
    with oncelog.Admin(db_url) as admin:
        admin.create_topic(IN, partitions=PARTITIONS)
        admin.create_topic(OUT, partitions=PARTITIONS)
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    with oncelog.Producer(db_url, linger_ms=20) as producer:
        for i in range(RECORDS):
            value = b"r%06d" % i
            producer.send(IN, value, key=value, partition=i % PARTITIONS)
            sent[i % PARTITIONS].append(value)
    return sent


def _start(bootstrap: str, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.broker_copier_child", bootstrap, name],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _end(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` (if still running) and reap it."""
    proc.kill()
    proc.wait(10)
    if proc.stderr is not None:
        proc.stderr.close()


class _Reader(threading.Thread):
    """A read_committed reader of ``out`` from the start, until stopped: what it saw, in order."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.seen: dict[int, list[bytes | None]] = {p: [] for p in range(PARTITIONS)}
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Consumer(self.url, isolation_level="read_committed") as consumer:
                tps = [TopicPartition(OUT, p) for p in range(PARTITIONS)]
                consumer.assign(tps)
                for tp in tps:
                    consumer.seek(tp, 0)
                while not self.stop.is_set():
                    for record in consumer.poll(0.2):
                        self.seen[record.partition].append(record.value)
        except BaseException as exc:  # reported by the test
            self.error = exc


@pytest.fixture
def reader(db_url: str) -> Iterator[_Reader]:
    r = _Reader(db_url)
    r.start()
    yield r
    r.stop.set()
    r.join(30)


@pytest.mark.timeout(600)
def test_librdkafka_copiers_killed_and_restarted_copy_each_record_exactly_once(
    db_url: str, loaded: dict[int, list[bytes]], reader: _Reader
) -> None:
    rng = random.Random(20261127)
    kills, done = 0, 0
    with running_broker(db_url) as bootstrap:
        copiers = {f"c{n}": _start(bootstrap, f"c{n}") for n in range(COPIERS)}
        try:
            deadline = time.monotonic() + 420
            with oncelog.Admin(db_url) as admin:
                while time.monotonic() < deadline:
                    time.sleep(rng.uniform(0.3, 1.2))
                    for name, proc in copiers.items():
                        if proc.poll() is not None:
                            raise AssertionError(f"copier {name} died: {proc.stderr.read() if proc.stderr else b''!r}")
                    try:
                        lags = admin.group_lag(GROUP)
                    except oncelog.errors.GroupIdNotFoundError:
                        lags = []  # no copier joined yet
                    done = sum(lag.committed_offset or 0 for lag in lags if lag.topic == IN)
                    if done >= RECORDS:
                        break
                    if kills < 20 and done < RECORDS * 0.9:
                        name = rng.choice(sorted(copiers))
                        _end(copiers[name])
                        copiers[name] = _start(bootstrap, name)
                        kills += 1
            assert done >= RECORDS, f"the copiers committed {done} of {RECORDS} records"
        finally:
            for proc in copiers.values():
                _end(proc)
    caught_up = time.monotonic() + 60
    while sum(len(v) for v in reader.seen.values()) < RECORDS and time.monotonic() < caught_up:
        time.sleep(0.1)  # the reader catches up with the last commit
    time.sleep(0.5)  # and would see anything more (a record twice) by now
    reader.stop.set()
    reader.join(30)
    assert reader.error is None, reader.error
    assert kills >= 5, f"only {kills} copiers were killed: the run proved little"
    for p in range(PARTITIONS):
        expected = [b"copy:" + v for v in loaded[p]]
        assert reader.seen[p] == expected, f"partition {p}: the read_committed reader saw something else"
