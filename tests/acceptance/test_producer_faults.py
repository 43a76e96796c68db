"""The idempotent producer's reason to exist, reproduced over a real, faulty network.

A Producer talks to PostgreSQL THROUGH the fault-injecting TCP proxy (tests/support/proxy.py);
every check of what landed is made on a direct connection, never through the proxy. The faults:

* the request is committed by the server but its reply is lost and the connection reset
  (``cut_after_next_reply(precise=True)``): the producer cannot tell this from a lost request, so it
  retries with the same producer id, epoch and sequence, and the store must answer the retry
  with the original offsets instead of appending again;
* the request never reaches the server (``cut_before_next_request``): the retry must append;
* a stalled network; a retry that reaches the server while the original request is still running
  there; and an outage longer than ``delivery_timeout_ms`` (the outcome stays unknown, so the
  producer must fail the records and carry on under a new epoch).

With idempotence off, the first fault duplicates records: that contrast is asserted too.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

import oncelog
from oncelog import errors
from oncelog.store import create_engine
from oncelog.store import log as store_log
from oncelog.types import RecordMetadata
from tests.support.clock import server_time
from tests.support.logcheck import read_partition, sslmode_disable, values, wait_until
from tests.support.proxy import FaultProxy

#: Generous bound on waiting for an acknowledgement; never an assertion on speed.
RESULT_TIMEOUT = 60.0

CUT_AFTER = "cut_after_next_reply"
CUT_BEFORE = "cut_before_next_request"


def create_topic(db_url: str, name: str, partitions: int) -> None:
    with oncelog.Admin(db_url) as admin:
        admin.create_topic(name, partitions=partitions)


@contextlib.contextmanager
def open_producer(url: str, **config: object) -> Iterator[oncelog.Producer]:
    """A Producer that is always closed with a bound (close() without one could wait for ever)."""
    producer = oncelog.Producer(url, **config)  # type: ignore[arg-type]
    try:
        yield producer
    finally:
        producer.close(timeout=15)


def arm(proxy: FaultProxy, fault: str) -> None:
    if fault == CUT_AFTER:
        proxy.cut_after_next_reply(precise=True)
    else:
        proxy.cut_before_next_request()


def results(futures: Sequence[Future[RecordMetadata]]) -> list[RecordMetadata]:
    return [f.result(RESULT_TIMEOUT) for f in futures]


# ------------------------------------------------------------------------------------------------
# (a) + (b): one fault, one record or many batches
# ------------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", [CUT_AFTER, CUT_BEFORE])
def test_single_record_survives_fault_exactly_once(
    db_url: str, proxy: FaultProxy, proxied_url: str, fault: str
) -> None:
    """The fault fires, then reconnecting is refused for a while: the test looks at the log while
    the producer is retrying, so it knows whether the first attempt committed (after-commit) or
    never arrived (before-request), then lets the retry through."""
    create_topic(db_url, "t", 1)
    with open_producer(proxied_url, linger_ms=0) as p:
        # Acknowledged: the sender's connection exists and is idle, so the fault hits the next send.
        m0 = p.send("t", b"r0", key=b"k").result(RESULT_TIMEOUT)
        proxy.block_new_connections(True)
        arm(proxy, fault)
        future = p.send("t", b"r1", key=b"k")
        wait_until(lambda: proxy.stats.connections_refused >= 1, 30, "the producer to try to reconnect")
        # While the producer retries: the first attempt committed, or never reached the server.
        assert values(read_partition(db_url, "t", 0)) == ([b"r0", b"r1"] if fault == CUT_AFTER else [b"r0"])
        assert not future.done()
        proxy.block_new_connections(False)
        m1 = future.result(RESULT_TIMEOUT)
        metrics, stats = p.metrics(), proxy.stats
        pid, epoch = p.producer_id, p.producer_epoch

    assert stats.faults_fired.get(fault) == 1, stats
    assert stats.bytes_dropped > 0, stats
    assert metrics["record_retry_total"] >= 1, metrics
    assert metrics["epoch_bump_total"] == 0, metrics  # a plain retry, not a new epoch
    assert metrics["record_error_total"] == 0, metrics
    log = read_partition(db_url, "t", 0)
    # After-commit: the retry was answered with the original offset, not appended again.
    assert values(log) == [b"r0", b"r1"]
    assert (m0.offset, m1.offset) == (0, 1)
    assert (m0.partition, m1.partition) == (0, 0)
    # The retry carried the same identity and sequence as the first attempt.
    assert pid is not None and epoch == 0
    assert [(r.producer_id, r.producer_epoch, r.sequence) for r in log] == [(pid, 0, 0), (pid, 0, 1)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fault", [CUT_AFTER, CUT_BEFORE])
def test_many_batches_survive_fault_exactly_once(db_url: str, proxy: FaultProxy, proxied_url: str, fault: str) -> None:
    """Several partitions, several batches queued per partition behind the one that hits the fault."""
    partitions, per_partition, batch_records = 3, 60, 25
    create_topic(db_url, "t", partitions)
    # One lane: the check below, made while the producer retries, reads what ONE request did
    # (with lanes, the other lanes' partitions go on meanwhile: test_producer_lanes.py).
    with (
        open_producer(proxied_url, linger_ms=60_000, max_batch_records=batch_records, max_in_flight=1) as p,
        ThreadPoolExecutor(1) as pool,
    ):
        warm = [p.send("t", f"warm-{i}".encode(), partition=i) for i in range(partitions)]
        p.flush(RESULT_TIMEOUT)
        results(warm)
        sent: dict[int, list[bytes]] = {i: [f"warm-{i}".encode()] for i in range(partitions)}
        # Armed while the connection is idle: a full batch leaves at once despite the linger, so
        # arming after queueing could miss the first request (CI once saw the fault hit the second).
        assert p.metrics()["record_send_total"] == partitions
        proxy.block_new_connections(True)
        arm(proxy, fault)
        futures: list[tuple[int, int, Future[RecordMetadata]]] = []
        for n in range(per_partition * partitions):
            part, value = n % partitions, f"v-{n}".encode()
            futures.append((part, len(sent[part]), p.send("t", value, partition=part)))
            sent[part].append(value)
        flushed = pool.submit(p.flush, RESULT_TIMEOUT)
        wait_until(lambda: proxy.stats.connections_refused >= 1, 30, "the producer to try to reconnect")
        # While the producer retries: exactly the first request committed, or nothing did. It
        # carried the full batch that made it leave and every other partition's head batch then
        # (the sender drains all partitions): at most one batch, a prefix, per partition.
        logged = {part: values(read_partition(db_url, "t", part)) for part in range(partitions)}
        grown = {part: len(logged[part]) - 1 for part in range(partitions) if len(logged[part]) > 1}
        if fault == CUT_AFTER:
            assert batch_records in grown.values(), grown
            assert all(0 < n <= batch_records for n in grown.values()), grown
            for part, n in grown.items():
                assert logged[part] == sent[part][: 1 + n]
        else:
            assert grown == {}
        assert not any(f.done() for _, _, f in futures)
        proxy.block_new_connections(False)
        flushed.result(RESULT_TIMEOUT)
        metrics, stats = p.metrics(), proxy.stats

    assert stats.faults_fired.get(fault) == 1, stats
    # The request that met the fault was retried whole (its full batch at least).
    assert metrics["record_retry_total"] >= batch_records, metrics
    assert metrics["epoch_bump_total"] == 0, metrics
    assert metrics["record_error_total"] == 0, metrics
    assert metrics["batch_send_total"] > partitions + 1, metrics  # really several batches
    for part, index, future in futures:
        meta = future.result(RESULT_TIMEOUT)
        assert (meta.partition, meta.offset) == (part, index)
    for part in range(partitions):
        log = read_partition(db_url, "t", part)
        assert values(log) == sent[part], f"partition {part}"


# ------------------------------------------------------------------------------------------------
# (c): many rounds, both faults, several partitions
# ------------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_alternating_faults_over_many_rounds_keep_log_equal_to_sends(
    db_url: str, proxy: FaultProxy, proxied_url: str
) -> None:
    partitions, rounds = 4, 30
    rng = random.Random(20261121)
    create_topic(db_url, "t", partitions)
    sent: dict[int, list[bytes]] = {i: [] for i in range(partitions)}
    acked: list[tuple[int, int, RecordMetadata]] = []
    with open_producer(proxied_url, linger_ms=60_000, max_batch_records=7) as p:
        # Warm up: the connection exists and every partition's metadata is cached.
        warm = []
        for i in range(partitions):
            sent[i].append(f"warm-{i}".encode())
            warm.append((i, 0, p.send("t", sent[i][0], partition=i)))
        p.flush(RESULT_TIMEOUT)
        acked += [(part, index, f.result(RESULT_TIMEOUT)) for part, index, f in warm]
        n = 0
        for rnd in range(rounds):
            # Armed before queueing, while the connection is idle (a full batch leaves at once).
            arm(proxy, CUT_AFTER if rnd % 2 == 0 else CUT_BEFORE)
            futures = []
            for _ in range(rng.randint(1, 40)):
                part = rng.randrange(partitions)
                value = f"r{rnd}-n{n}".encode()
                n += 1
                futures.append((part, len(sent[part]), p.send("t", value, key=value, partition=part)))
                sent[part].append(value)
            p.flush(RESULT_TIMEOUT)
            acked += [(part, index, f.result(RESULT_TIMEOUT)) for part, index, f in futures]
            # Every round's fault fired (so the next is armed while the connection is idle).
            fired = proxy.stats.faults_fired
            assert fired.get(CUT_AFTER, 0) + fired.get(CUT_BEFORE, 0) == rnd + 1, (rnd, fired)
        metrics, stats = p.metrics(), proxy.stats

    assert stats.faults_fired.get(CUT_AFTER) == rounds // 2, stats
    assert stats.faults_fired.get(CUT_BEFORE) == rounds // 2, stats
    assert metrics["record_retry_total"] >= rounds, metrics
    assert metrics["epoch_bump_total"] == 0, metrics
    assert metrics["record_error_total"] == 0, metrics
    for part, index, meta in acked:
        assert (meta.partition, meta.offset) == (part, index)
    for part in range(partitions):
        log = read_partition(db_url, "t", part)
        assert values(log) == sent[part], f"partition {part}"
        assert len({r.value for r in log}) == len(log)


@pytest.mark.timeout(300)
def test_a_cut_lane_retries_alone_while_the_others_carry_on(
    db_url: str, proxy: FaultProxy, proxied_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the fault proxy: each round arms a cut of the next request (its reply lost after
    the commit, or the request lost before it), which hits one lane's request; its batches are
    retried (answered as duplicates, or appended), the other lanes' are not touched, and the log
    equals what was sent."""
    monkeypatch.setattr("oncelog.sender.LANE_MIN_BYTES", 1)  # small rounds split too: many cut lanes, little data
    partitions = 8
    create_topic(db_url, "t", partitions)
    rng = random.Random(20261127)
    sent: dict[int, list[bytes]] = {part: [] for part in range(partitions)}
    with open_producer(proxied_url, max_in_flight=4, max_batch_records=5, linger_ms=60_000) as p:
        warm = [p.send("t", b"warm-%d" % part, partition=part) for part in range(partitions)]
        p.flush(RESULT_TIMEOUT)
        for part in range(partitions):
            sent[part].append(b"warm-%d" % part)
            assert warm[part].result(0).offset == 0
        rounds = 40
        for rnd in range(rounds):
            # Armed while every connection is idle: the round's first request to leave meets it.
            arm(proxy, CUT_AFTER if rnd % 2 == 0 else CUT_BEFORE)
            for n in range(rng.randint(8, 60)):
                part = rng.randrange(partitions)
                value = f"r{rnd}-{n}".encode()
                p.send("t", value, partition=part)
                sent[part].append(value)
            p.flush(RESULT_TIMEOUT)
        metrics, stats = p.metrics(), proxy.stats
    assert stats.faults_fired.get(CUT_AFTER) == rounds // 2, stats
    assert stats.faults_fired.get(CUT_BEFORE) == rounds // 2, stats
    assert stats.connections_open >= 3, "the lanes' connections, open side by side"
    assert metrics["record_error_total"] == 0, metrics
    assert metrics["epoch_bump_total"] == 0, metrics
    for part in range(partitions):
        assert values(read_partition(db_url, "t", part)) == sent[part], f"partition {part}"


# ------------------------------------------------------------------------------------------------
# (d): the same fault without idempotence duplicates records
# ------------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_without_idempotence_a_lost_reply_duplicates_the_batch(
    db_url: str, proxy: FaultProxy, proxied_url: str
) -> None:
    """Why idempotence matters: at-least-once retries re-append a batch whose reply was lost."""
    create_topic(db_url, "t", 1)
    batch = [f"b{i}".encode() for i in range(5)]
    with open_producer(proxied_url, linger_ms=60_000, enable_idempotence=False) as p:
        p.send("t", b"r0", partition=0)
        p.flush(RESULT_TIMEOUT)
        futures = [p.send("t", v, partition=0) for v in batch]
        proxy.cut_after_next_reply(precise=True)
        p.flush(RESULT_TIMEOUT)
        metas = results(futures)
        metrics, stats = p.metrics(), proxy.stats
        assert p.producer_id is None

    assert stats.faults_fired.get(CUT_AFTER) == 1, stats
    assert metrics["record_retry_total"] == len(batch), metrics
    log = read_partition(db_url, "t", 0)
    # The committed first attempt AND the retry: every record of the batch is there twice.
    assert values(log) == [b"r0", *batch, *batch]
    assert all(r.producer_id is None and r.sequence is None for r in log)
    # The futures report the copy the retry wrote.
    assert [m.offset for m in metas] == list(range(1 + len(batch), 1 + 2 * len(batch)))


# ------------------------------------------------------------------------------------------------
# (e): a stalled network, and a retry racing its original on the server
# ------------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_stalled_network_delivers_once_without_retry(db_url: str, proxy: FaultProxy, proxied_url: str) -> None:
    partitions = 3
    create_topic(db_url, "t", partitions)
    with open_producer(proxied_url, linger_ms=0) as p:
        p.send("t", b"warm", partition=0).result(RESULT_TIMEOUT)
        proxy.stall(3.0)
        futures = [p.send("t", f"s{i}".encode(), partition=i % partitions) for i in range(30)]
        metas = results(futures)
        metrics, stats = p.metrics(), proxy.stats

    assert stats.chunks_stalled > 0, stats  # the traffic really was held
    # Slowness is not failure: nothing was retried, so nothing could be duplicated.
    assert metrics["record_retry_total"] == 0, metrics
    assert metrics["record_error_total"] == 0, metrics
    logs = {part: read_partition(db_url, "t", part) for part in range(partitions)}
    for part in range(partitions):
        expected = ([b"warm"] if part == 0 else []) + [f"s{i}".encode() for i in range(30) if i % partitions == part]
        assert values(logs[part]) == expected
    for i, meta in enumerate(metas):
        assert meta.partition == i % partitions
        assert logs[meta.partition][meta.offset].value == f"s{i}".encode()


def _lock_waiters(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.timeout(120)
def test_retry_arriving_while_original_still_runs_on_server_lands_once(
    db_url: str, proxy: FaultProxy, proxied_url: str
) -> None:
    """The connection dies while the server is still executing the request (blocked on the
    partition lock); the retry reaches the server while the original is still alive there.
    Whichever of the two appends, the other must be recognised as a duplicate."""
    create_topic(db_url, "t", 1)
    with (
        psycopg.connect(sslmode_disable(db_url).replace("+psycopg", ""), autocommit=True) as watcher,
        psycopg.connect(sslmode_disable(db_url).replace("+psycopg", "")) as blocker,
        open_producer(proxied_url, linger_ms=0) as p,
    ):
        p.send("t", b"r0", partition=0).result(RESULT_TIMEOUT)
        # Hold partition 0's row lock: produce_v2 will wait for it inside the server.
        blocker.execute(
            "SELECT 1 FROM oncelog.partitions pt JOIN oncelog.topics t USING (topic_id) "
            "WHERE t.name = 't' AND pt.partition = 0 FOR UPDATE OF pt"
        )
        future = p.send("t", b"r1", partition=0)
        wait_until(lambda: _lock_waiters(watcher) == 1, 30, "the produce request to wait for the lock")
        assert proxy.cut_all() >= 1
        # The retry reaches the server too, while the original still waits there.
        wait_until(lambda: _lock_waiters(watcher) == 2, 30, "the retry to wait beside the original")
        assert not future.done()
        blocker.commit()
        meta = future.result(RESULT_TIMEOUT)
        metrics = p.metrics()
        epoch = p.producer_epoch

    assert metrics["record_retry_total"] >= 1, metrics
    assert metrics["epoch_bump_total"] == 0 and epoch == 0, metrics
    assert values(read_partition(db_url, "t", 0)) == [b"r0", b"r1"]
    assert meta.offset == 1


# ------------------------------------------------------------------------------------------------
# (f): delivery timeout, then an epoch bump and no duplicates afterwards
# ------------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("committed", [False, True], ids=["request-lost", "reply-lost"])
def test_delivery_timeout_fails_the_record_then_producer_carries_on_under_new_epoch(
    db_url: str, proxy: FaultProxy, proxied_url: str, committed: bool
) -> None:
    """An outage longer than delivery_timeout_ms. ``request-lost``: every connection is cut and new
    ones refused before the record is sent. ``reply-lost``: the record is committed, its reply
    lost, and new connections refused. Either way the producer cannot know the outcome: the
    future fails with DeliveryTimeoutError, and after the outage the producer bumps its epoch."""
    create_topic(db_url, "t", 1)
    with open_producer(proxied_url, linger_ms=0, delivery_timeout_ms=1500) as p:
        p.send("t", b"r0", partition=0).result(RESULT_TIMEOUT)
        assert p.producer_epoch == 0
        proxy.block_new_connections(True)
        if committed:
            proxy.cut_after_next_reply(precise=True)
        else:
            assert proxy.cut_all() >= 1
        lost = p.send("t", b"r1", partition=0)
        with pytest.raises(errors.DeliveryTimeoutError):
            lost.result(RESULT_TIMEOUT)
        proxy.block_new_connections(False)
        later = [p.send("t", f"r{i}".encode(), partition=0) for i in range(2, 6)]
        later_metas = results(later)
        metrics, stats = p.metrics(), proxy.stats
        epoch = p.producer_epoch

    assert stats.connections_refused >= 1, stats  # reconnecting really was refused
    assert epoch is not None and epoch > 0, "the producer must bump its epoch after an unknown outcome"
    assert metrics["epoch_bump_total"] >= 1, metrics
    assert metrics["record_error_total"] == 1, metrics
    log = read_partition(db_url, "t", 0)
    expected_r1 = [b"r1"] if committed else []  # committed before its reply was lost; or never arrived
    assert values(log) == [b"r0", *expected_r1, b"r2", b"r3", b"r4", b"r5"]
    assert [m.offset for m in later_metas] == list(range(1 + len(expected_r1), 5 + len(expected_r1)))
    # The later records were written under the new epoch, their sequences restarting at 0.
    assert [(r.producer_epoch, r.sequence) for r in log[-4:]] == [(epoch, 0), (epoch, 1), (epoch, 2), (epoch, 3)]


@pytest.mark.timeout(120)
def test_batch_waiting_behind_a_timed_out_one_is_delivered_once(
    db_url: str, proxy: FaultProxy, proxied_url: str
) -> None:
    """Records queued while the outage lasts are sent after it, exactly once, in order."""
    create_topic(db_url, "t", 1)
    with open_producer(proxied_url, linger_ms=0, delivery_timeout_ms=1500, max_batch_records=1) as p:
        p.send("t", b"r0", partition=0).result(RESULT_TIMEOUT)
        proxy.block_new_connections(True)
        proxy.cut_after_next_reply(precise=True)
        first = p.send("t", b"r1", partition=0)
        # r2 is queued behind r1 while r1 is being retried.
        wait_until(lambda: p.metrics()["record_retry_total"] >= 1, 30, "the first retry")
        second = p.send("t", b"r2", partition=0)
        with pytest.raises(errors.DeliveryTimeoutError):
            first.result(RESULT_TIMEOUT)
        proxy.block_new_connections(False)
        outcome: list[object] = []
        try:
            outcome.append(second.result(RESULT_TIMEOUT))
        except errors.OncelogError as exc:
            outcome.append(exc)
        tail = p.send("t", b"r3", partition=0).result(RESULT_TIMEOUT)

    log = values(read_partition(db_url, "t", 0))
    # r1 committed (its reply was lost); r2 either timed out in the queue (absent) or was sent
    # after the outage (present once); r3 once, last.
    assert log[:2] == [b"r0", b"r1"]
    if isinstance(outcome[0], RecordMetadata):
        assert log.count(b"r2") == 1 and log[outcome[0].offset] == b"r2"
    else:  # failed: it may have reached the server before its time ran out, but only once
        assert log.count(b"r2") <= 1, outcome
    assert log.count(b"r3") == 1 and log[-1] == b"r3"
    assert tail.offset == len(log) - 1
    assert len(set(log)) == len(log)


@pytest.mark.timeout(120)
def test_epoch_bump_never_resequences_a_batch_whose_outcome_is_unknown(
    db_url: str, proxy: FaultProxy, proxied_url: str
) -> None:
    """KIP-360 bumps the epoch and restarts sequences, but a batch already sent under the old epoch
    whose outcome is unknown (reply lost, retry pending) may be in the log: re-sending it under the
    new epoch with new sequences appends it a second time. Kafka bumps only once no batch is in
    flight (or resolves them first). Trigger: partition 0's sequence state expires (maintenance),
    so the batch for partition 0 is rejected with OUT_OF_ORDER_SEQUENCE and asks for a bump, while
    the batch for partition 1 was committed but its reply lost."""
    create_topic(db_url, "t", 2)
    with (
        open_producer(proxied_url, linger_ms=60_000) as p,
        psycopg.connect(sslmode_disable(db_url).replace("+psycopg", ""), autocommit=True) as direct,
    ):
        # Partition 0 then partition 1, so partition 0's state is the older one.
        for part in (0, 1):
            p.send("t", f"w{part}".encode(), partition=part)
            p.flush(RESULT_TIMEOUT)
        pid = p.producer_id
        rows: dict[int, datetime] = dict(
            direct.execute(
                "SELECT partition, updated_at FROM oncelog.producer_partition_state WHERE producer_id = %s", (pid,)
            ).fetchall()
        )
        (expiration_ms,) = direct.execute("SELECT producer_id_expiration_ms FROM oncelog.settings").fetchone() or (0,)
        assert rows[0] < rows[1]
        # Run expiry "at" a moment when partition 0's state is past the expiration and 1's is not.
        now = rows[0] + (rows[1] - rows[0]) / 2 + timedelta(milliseconds=expiration_ms)
        engine = create_engine(db_url, poolclass=sa.NullPool)
        try:
            with (
                engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn,
                server_time(conn, now),
            ):
                assert store_log.expire_producers(conn) == 1
        finally:
            engine.dispose()
        b = p.send("t", b"B", partition=1)  # partition 1's queue first: B is sent first
        a = p.send("t", b"A", partition=0)
        proxy.cut_after_next_reply(precise=True)  # B commits, its reply is lost
        p.flush(RESULT_TIMEOUT)
        meta_b, meta_a = b.result(RESULT_TIMEOUT), a.result(RESULT_TIMEOUT)
        metrics, stats = p.metrics(), proxy.stats

    assert stats.faults_fired.get(CUT_AFTER) == 1, stats
    assert metrics["epoch_bump_total"] >= 1, metrics  # the expired state did force a bump
    assert values(read_partition(db_url, "t", 0)) == [b"w0", b"A"]
    assert meta_a.offset == 1
    log1 = read_partition(db_url, "t", 1)
    assert values(log1) == [b"w1", b"B"], [(r.value, r.producer_epoch, r.sequence) for r in log1]
    assert meta_b.offset == 1


@pytest.mark.timeout(120)
def test_delivery_timeout_bump_never_resequences_another_partitions_unknown_batch(
    db_url: str, proxy: FaultProxy, proxied_url: str
) -> None:
    """The same rule, reached through (f): batch A (partition 0) times out with its outcome unknown,
    so the producer bumps its epoch before its next batch; batch B (partition 1), sent later, was
    committed but its reply lost and is waiting to be retried. B must not be appended again under
    the new epoch. Orchestration: A is held inside the server by a lock on partition 0, connections
    are cut to make outcomes unknown, and waiting on pg_stat_activity tells when each request is
    inside the server. Every attempt's statement carries a lock timeout ending by the batch's
    deadline (finding 6), so A is let through (and lands) well inside its first attempt's bound,
    after its connection was cut; new connections are then refused until A's deadline has passed,
    so its outcome stays unknown. Nothing asserts on time."""
    timeout_s = 16.0  # one attempt's bound is a quarter of it: 4 s for the dance below
    create_topic(db_url, "t", 2)
    libpq = sslmode_disable(db_url).replace("+psycopg", "")
    with (
        psycopg.connect(libpq, autocommit=True) as watcher,
        psycopg.connect(libpq) as blocker,
        open_producer(
            proxied_url, linger_ms=0, delivery_timeout_ms=timeout_s * 1000, retry_backoff_max_ms=200
        ) as p,
    ):
        for part in (0, 1):
            p.send("t", f"w{part}".encode(), partition=part).result(RESULT_TIMEOUT)
        blocker.execute(
            "SELECT 1 FROM oncelog.partitions pt JOIN oncelog.topics t USING (topic_id) "
            "WHERE t.name = 't' AND pt.partition = 0 FOR UPDATE OF pt"
        )
        a = p.send("t", b"A", partition=0)
        wait_until(lambda: _lock_waiters(watcher) == 1, 30, "A to wait inside the server")
        time.sleep(1.5)  # B is younger than A by this much: it outlives A's deadline
        b = p.send("t", b"B", partition=1)  # queued: the sender is busy with A
        proxy.cut_after_next_reply(precise=True)  # claimed by B's request on the next connection
        proxy.cut_all()  # A's reply can never come: A is retried, B is sent, commits, loses its reply
        wait_until(lambda: proxy.stats.faults_fired.get(CUT_AFTER) == 1, 30, "B's reply to be lost")
        wait_until(lambda: b"B" in values(read_partition(db_url, "t", 1)), 30, "B to be committed")
        # A's retry waits inside the server beside the original A (whose bound is 4 s).
        wait_until(lambda: _lock_waiters(watcher) == 2, 30, "A's retry to wait inside the server")
        assert not b.done()
        proxy.block_new_connections(True)  # from now until A's deadline, nothing gets through
        proxy.cut_all()  # A's retry loses its reply too
        blocker.commit()  # the original A lands (once: A's retry is answered as its duplicate)
        wait_until(lambda: b"A" in values(read_partition(db_url, "t", 0)), 30, "A to be committed")
        with pytest.raises(errors.DeliveryTimeoutError):
            a.result(RESULT_TIMEOUT)
        proxy.block_new_connections(False)
        # Before bumping, the producer settles B under its old epoch and sequence: the store
        # answers its retry as a duplicate, with B's original offset.
        meta_b = b.result(RESULT_TIMEOUT)
        # The next batch makes the producer bump.
        p.send("t", b"C", partition=0).result(RESULT_TIMEOUT)
        metrics = p.metrics()

    assert metrics["epoch_bump_total"] >= 1, metrics
    log0 = read_partition(db_url, "t", 0)
    assert values(log0) == [b"w0", b"A", b"C"]  # A did land, once, though its future failed
    assert log0[-1].producer_epoch == 1 and log0[-1].sequence == 0
    log1 = read_partition(db_url, "t", 1)
    assert values(log1) == [b"w1", b"B"], [(r.value, r.producer_epoch, r.sequence) for r in log1]
    assert meta_b.offset == 1
