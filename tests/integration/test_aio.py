"""oncelog.aio against a real PostgreSQL: the asyncio clients keep the sync clients' semantics,
never block the event loop and start no thread.

The exactly-once loop killed and restarted runs in tests/acceptance/test_eos_pipeline.py, with
examples/aio_consume_transform_produce.py beside the sync example.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from oncelog import ConsumerRecord, TopicPartition, errors
from oncelog import Producer as SyncProducer
from oncelog.aio import Admin, Consumer, Producer, send
from oncelog.txn_state import TxnState
from tests.support.roles import Principal, client_principal, enforce_acls

_T = TypeVar("_T")
TOPIC = "aio"
PARTITIONS = 3


def run(main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    return asyncio.run(main())


@pytest.fixture
def acls_on(engine: sa.Engine) -> None:
    enforce_acls(engine, {TOPIC: PARTITIONS})


@pytest.fixture
def app(acls_on: None, engine: sa.Engine, db_url: str) -> Iterator[Principal]:
    """A login role holding only the client role, which the ACLs allow everything."""
    yield from client_principal(engine, db_url)


async def read_all(url: str, isolation_level: str = "read_committed") -> list[ConsumerRecord]:
    async with Consumer(url, isolation_level=isolation_level) as consumer:
        await consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        out: list[ConsumerRecord] = []
        while batch := await consumer.poll(0.2):
            out.extend(batch)
        return out


def test_round_trip_as_a_client_login(app: Principal) -> None:
    async def main() -> None:
        async with Producer(app.url, linger_ms=1) as producer:
            futures = [await producer.send(TOPIC, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(300)]
            metas = await asyncio.gather(*futures)
            last = await producer.send_and_wait(TOPIC, b"last", partition=2)
            assert producer.producer_id is not None
        assert sorted((m.partition, m.offset) for m in metas) == sorted(
            (p, o) for p in range(PARTITIONS) for o in range(sum(m.partition == p for m in metas))
        )
        records = await read_all(app.url)
        assert sorted(r.value for r in records) == sorted([f"v{i}".encode() for i in range(300)] + [b"last"])
        assert (last.partition, last.offset) in {(r.partition, r.offset) for r in records}
        # Per partition, in the order sent.
        for p in range(PARTITIONS):
            sent = [f.result().offset for f in futures if f.result().partition == p]
            assert sent == sorted(sent)

    run(main)


def test_transactions_commit_abort_and_read_committed(app: Principal) -> None:
    async def main() -> None:
        async with Producer(app.url, transactional_id="aio-tx", max_batch_records=10, linger_ms=60_000) as producer:
            await producer.init_transactions()
            async with producer.transaction():
                for i in range(50):
                    await producer.send(TOPIC, b"committed", partition=i % PARTITIONS)
            assert producer.transaction_state is TxnState.READY
            producer.begin_transaction()
            doomed = [await producer.send(TOPIC, b"aborted", partition=i % PARTITIONS) for i in range(30)]
            await producer.flush()  # in the log, then aborted
            await producer.abort_transaction()
            called: list[object] = []
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    dropped = await producer.send(TOPIC, b"dropped", partition=0)
                    assert not dropped.done()
                    with pytest.raises(asyncio.InvalidStateError):
                        dropped.result()
                    dropped.add_done_callback(called.append)
                    raise RuntimeError("the application failed")
            assert producer.transaction_state is TxnState.READY
            assert called == [dropped] and isinstance(dropped.exception(), errors.TransactionAbortedError)
            with pytest.raises(errors.TransactionAbortedError):
                await dropped
        assert all(f.done() and f.exception() is None for f in doomed)
        committed = [r.value for r in await read_all(app.url)]
        assert committed == [b"committed"] * 50
        everything = [r.value for r in await read_all(app.url, "read_uncommitted")]
        assert sorted(set(everything)) == [b"aborted", b"committed"]
        assert everything.count(b"aborted") == 30 and b"dropped" not in everything

    run(main)


def test_a_newer_instance_fences_the_old_one(app: Principal) -> None:
    async def main() -> None:
        old = Producer(app.url, transactional_id="aio-zombie")
        await old.init_transactions()
        old.begin_transaction()
        await old.send_and_wait(TOPIC, b"zombie", partition=0)
        async with Producer(app.url, transactional_id="aio-zombie") as new:
            await new.init_transactions()  # aborts the old instance's transaction
            with pytest.raises(errors.ProducerFencedError):
                await old.commit_transaction()
            assert old.transaction_state is TxnState.FATAL_ERROR
            async with new.transaction():
                await new.send(TOPIC, b"new", partition=0)
        await old.close()
        assert [r.value for r in await read_all(app.url)] == [b"new"]

    run(main)


def test_consume_transform_produce_in_a_group(app: Principal) -> None:
    """Offsets committed in the producer's transaction (KIP-447), rebalance callbacks that are
    coroutines and await the consumer's own calls."""

    async def main() -> None:
        async with Producer(app.url) as producer:
            for i in range(60):
                await producer.send(TOPIC, f"in-{i}".encode(), partition=i % PARTITIONS)
        assigned: list[set[TopicPartition]] = []
        async with (
            Consumer(app.url, group_id="aio-copiers", enable_auto_commit=False) as consumer,
            Producer(app.url, transactional_id="aio-copier") as producer,
        ):

            async def on_assign(partitions: set[TopicPartition]) -> None:
                for tp in partitions:
                    await consumer.position(tp)  # the consumer's own call, inside its subscribe()
                assigned.append(partitions)

            await producer.init_transactions()
            await consumer.subscribe([TOPIC], on_assign=on_assign)
            copied = 0
            while copied < 60:
                records = await consumer.poll(5.0)
                assert records, "the input stopped short"
                async with producer.transaction():
                    for r in records:
                        await producer.send(TOPIC, r.value.upper(), partition=r.partition)
                    positions = {tp: await consumer.position(tp) for tp in consumer.assignment()}
                    await producer.send_offsets_to_transaction(positions, consumer.group_metadata())
                copied += len(records)
            committed = await consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        assert assigned == [{TopicPartition(TOPIC, p) for p in range(PARTITIONS)}]
        assert {tp.partition: om.offset for tp, om in committed.items() if om is not None} == {
            p: 20 for p in range(PARTITIONS)
        }
        values = sorted(r.value for r in await read_all(app.url))
        assert values == sorted([f"in-{i}".encode() for i in range(60)] + [f"IN-{i}".encode() for i in range(60)])

    run(main)


def test_async_iteration_and_commits(app: Principal) -> None:
    async def main() -> None:
        async with Producer(app.url) as producer:
            for i in range(30):
                await producer.send(TOPIC, f"{i}".encode(), partition=0)
        async with Consumer(app.url, group_id="aio-iter", consumer_timeout_ms=500) as consumer:
            await consumer.subscribe([TOPIC])
            seen = []
            async for record in consumer:
                seen.append(record.offset)
                if len(seen) == 10:
                    task = await consumer.commit(asynchronous=True)
                    assert task is not None
                    await task
            assert seen == list(range(30))
            await consumer.commit()
            tp = TopicPartition(TOPIC, 0)
            committed = (await consumer.committed([tp]))[tp]
            assert committed is not None and committed.offset == 30

    run(main)


async def _with_ticker(work: Awaitable[_T]) -> tuple[_T, int]:
    """``work``'s result, and how many times another task ran while it was under way."""
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            await asyncio.sleep(0.005)
            ticks += 0 if done else 1

    task = asyncio.create_task(ticker())
    try:
        result = await work
    finally:
        done = True
        await task
    return result, ticks


def test_the_loop_runs_while_calls_wait_and_no_thread_is_started(app: Principal) -> None:
    async def main() -> None:
        async with Admin(app.url) as admin:
            await admin.list_topics()  # the process-wide watchdog thread exists from here on
        before = {t.ident for t in threading.enumerate()}
        async with (
            Consumer(app.url, group_id="aio-loop", heartbeat_interval_ms=100) as consumer,
            Producer(app.url, transactional_id="aio-loop") as producer,
        ):
            await consumer.subscribe([TOPIC])
            # A poll that waits (nothing to read): other tasks run meanwhile, which a blocked
            # loop would not let them do.
            records, ticks = await _with_ticker(consumer.poll(0.5))
            assert records == [] and ticks > 0
            await producer.init_transactions()
            async with producer.transaction():
                await producer.send(TOPIC, b"x", partition=1)
            after = {t.ident for t in threading.enumerate()}
        assert after <= before, [t.name for t in threading.enumerate() if t.ident not in before]

    run(main)


def test_a_waiting_reader_is_woken_by_a_write(app: Principal) -> None:
    """LISTEN/NOTIFY on async connections: a reader whose poll would otherwise look again only
    at its end, 120 s on, gets the record within the bound of 30 s because the producer wakes it
    (and the producer says it sent the wake-up)."""

    async def main() -> None:
        async with (
            Consumer(app.url, fetch_min_backoff_ms=120_000, fetch_max_backoff_ms=120_000) as consumer,
            Producer(app.url, transactional_id="aio-wake") as producer,
        ):
            await consumer.assign([TopicPartition(TOPIC, 0)])
            assert await consumer.poll(0) == []  # its one fetch, then the wait is registered
            await producer.init_transactions()
            waiting = asyncio.create_task(consumer.poll(120.0))
            await asyncio.sleep(0.5)  # the poll fetched, registered its wait and LISTENs
            async with producer.transaction():
                await producer.send(TOPIC, b"wake", partition=0)
            assert [r.value for r in await asyncio.wait_for(waiting, 30)] == [b"wake"]
            for _ in range(100):  # the waker's task counts the NOTIFY once it is sent
                if producer.metrics()["reader_wakeup_total"] >= 1:
                    break
                await asyncio.sleep(0.05)
            assert producer.metrics()["reader_wakeup_total"] >= 1

    run(main)


def test_a_full_buffer_waits_on_the_loop(app: Principal) -> None:
    async def main() -> None:
        async with Producer(app.url, buffer_memory=4096, linger_ms=0) as producer:
            futures = [await producer.send(TOPIC, bytes(500), partition=i % PARTITIONS) for i in range(200)]
            await asyncio.gather(*futures)
        async with Producer(app.url, buffer_memory=600, max_block_ms=200, linger_ms=60_000) as producer:
            await producer.send(TOPIC, bytes(500), partition=0)
            with pytest.raises(errors.DeliveryTimeoutError, match="buffer_memory"):
                await producer.send(TOPIC, bytes(500), partition=0)
        assert len(await read_all(app.url)) == 201

    run(main)


def test_bad_input_is_a_typed_error(app: Principal) -> None:
    async def main() -> None:
        with pytest.raises(errors.ConfigurationError, match="read_ahead"):
            Consumer(app.url, read_ahead=True)
        with pytest.raises(errors.ConfigurationError):
            Producer(app.url, linger_ms=-1)
        with pytest.raises(errors.ConfigurationError, match=r"bootstrap\.servers"):
            Producer.from_config(app.url, {"bootstrap.servers": "x:9092"})
        async with Producer(app.url) as producer:
            with pytest.raises(errors.UnknownTopicOrPartitionError):
                await producer.send("no-such-topic", b"v")
            with pytest.raises(errors.UnknownTopicOrPartitionError):
                await producer.send(TOPIC, b"v", partition=PARTITIONS)
            with pytest.raises(errors.IllegalStateError):
                await producer.commit_transaction()  # not transactional
        async with Consumer(app.url) as consumer:
            with pytest.raises(errors.InvalidRequestError):
                await consumer.poll("soon")  # type: ignore[arg-type]
            with pytest.raises(errors.UnknownTopicOrPartitionError):
                await consumer.assign([TopicPartition("no-such-topic", 0)])
            with pytest.raises(errors.ConfigurationError):
                await consumer.commit()  # no group
        closed = Producer(app.url)
        await closed.close()
        with pytest.raises(errors.ProducerClosedError):
            await closed.send(TOPIC, b"v")
        assert await read_all(app.url) == []

    run(main)


def test_admin(db_url: str) -> None:
    async def main() -> None:
        async with Admin(db_url) as admin:
            await admin.create_topic("aio-admin", partitions=2, config={"retention_ms": 3_600_000})
            assert (await admin.list_topics())["aio-admin"] == 2
            described = await admin.describe_topic("aio-admin")
            assert described.config["retention_ms"] == 3_600_000
            await admin.create_partitions("aio-admin", 3)
            with pytest.raises(errors.TopicAlreadyExistsError):
                await admin.create_topic("aio-admin")
            async with Producer(db_url) as producer:
                await producer.send_and_wait("aio-admin", b"v", partition=0)
            assert [p.high_watermark for p in await admin.list_offsets("aio-admin")] == [1, 0, 0]
            assert await admin.list_transactions() == []
            await admin.delete_topic("aio-admin")
            assert "aio-admin" not in await admin.list_topics()

    run(main)


def test_kafka_configuration_names(app: Principal) -> None:
    async def main() -> None:
        async with (
            Producer.from_config(app.url, {"transactional.id": "aio-conf", "linger.ms": 1}) as producer,
            Consumer.from_config(app.url, {"group.id": "aio-conf", "auto.offset.reset": "earliest"}) as consumer,
            Admin.from_config(app.url, {"client.id": "aio-admin"}) as admin,
        ):
            assert producer.transactional_id == "aio-conf" and consumer.group_id == "aio-conf"
            await producer.init_transactions()
            async with producer.transaction():
                await producer.send(TOPIC, b"configured", partition=0)
            await consumer.subscribe([TOPIC])
            assert [r.value for r in await consumer.poll(5.0)] == [b"configured"]
            assert TOPIC in await admin.list_topics()
        with pytest.raises(errors.ConfigurationError, match="linger"):
            Producer.from_config(app.url, {"linger.ms": 1}, linger_ms=2)

    run(main)


def test_send_in_the_applications_own_async_transaction(app: Principal) -> None:
    """oncelog.aio.send on the application's own async connections (SQLAlchemy's AsyncSession and
    AsyncConnection, psycopg's AsyncConnection): appended when the transaction commits, never if
    it rolls back, checked at once."""

    async def main() -> None:
        engine = create_async_engine(app.url.replace("postgresql+psycopg://", "postgresql+psycopg_async://"))
        try:
            async with AsyncSession(engine) as session, session.begin():
                assert await send(session, TOPIC, b"session", partition=0) == 0
            async with engine.connect() as conn:
                await send(conn, TOPIC, b"rolled back", partition=0)
                await conn.rollback()
                with pytest.raises(errors.UnknownTopicOrPartitionError):
                    await send(conn, "no-such-topic", b"v")
                await conn.rollback()
                await send(conn, TOPIC, {"n": 1}, key="k", value_serializer="json", key_serializer="str")
                await conn.commit()
        finally:
            await engine.dispose()
        conninfo = app.url.replace("postgresql+psycopg://", "postgresql://")
        async with await psycopg.AsyncConnection.connect(conninfo) as pg:
            await send(pg, TOPIC, b"psycopg", partition=2)
            await pg.commit()
        with pytest.raises(errors.InvalidRequestError, match="AsyncConnection"):
            await send(object(), TOPIC, b"v")  # type: ignore[arg-type]
        values = sorted(r.value or b"" for r in await read_all(app.url))
        assert values == sorted([b"session", b'{"n":1}', b"psycopg"])

    run(main)


async def _second_member_joins(
    first: Consumer, first_done: Callable[[], bool], second: Consumer, *, bound: float
) -> None:
    """``second`` joins ``first``'s group and polls until it holds partitions, while ``first``
    polls until ``first_done()`` (its revocation ran); within ``bound`` seconds."""

    async def first_polls() -> None:
        while not first_done():
            await first.poll(0.2)

    async def second_joins() -> None:
        await second.subscribe([TOPIC])
        while not second.assignment():
            await second.poll(0.2)

    await asyncio.wait_for(asyncio.gather(first_polls(), second_joins()), bound)


def test_a_member_hears_of_a_rebalance_before_its_next_heartbeat(app: Principal) -> None:
    """The heartbeat task LISTENs for the group's changes, as the heartbeat thread does: with
    heartbeats 60 s apart, a member joining still gets its partitions within the 20 s bound,
    because the member holding them hears of the change and lets them go at once."""

    async def main() -> None:
        slow = {"heartbeat_interval_ms": 60_000, "session_timeout_ms": 120_000}
        async with Consumer(app.url, group_id="aio-rebalance", **slow) as first:
            revoked: list[set[TopicPartition]] = []

            async def on_revoke(partitions: set[TopicPartition]) -> None:
                revoked.append(partitions)

            await first.subscribe([TOPIC], on_revoke=on_revoke)
            assert len(first.assignment()) == PARTITIONS
            async with Consumer(app.url, group_id="aio-rebalance", **slow) as second:
                await _second_member_joins(first, lambda: bool(revoked), second, bound=20)
                assert first.assignment().isdisjoint(second.assignment())
                assert first.assignment() | second.assignment() == {TopicPartition(TOPIC, p) for p in range(PARTITIONS)}

    run(main)


def test_hundreds_of_tasks_share_one_producer(app: Principal) -> None:
    """A service's request handlers: 300 tasks sending through one producer at once (small
    batches, so the sender is busy while they append). Each record lands once, each task's
    records in the order it sent them."""

    async def main() -> None:
        async with Producer(app.url, linger_ms=1, max_batch_records=7, buffer_memory=20_000) as producer:

            async def handler(n: int) -> list[tuple[int, int]]:
                return [
                    ((meta := await producer.send_and_wait(TOPIC, f"{n}:{i}".encode(), key=str(n).encode())).partition,
                     meta.offset)
                    for i in range(10)
                ]  # fmt: skip

            placed = await asyncio.gather(*(handler(n) for n in range(300)))
        flat = [where for task in placed for where in task]
        assert len(set(flat)) == 3000
        for task in placed:
            assert len({p for p, _ in task}) == 1 and [o for _, o in task] == sorted(o for _, o in task)
        values = sorted(r.value or b"" for r in await read_all(app.url))
        assert values == sorted(f"{n}:{i}".encode() for n in range(300) for i in range(10))

    run(main)


def test_tasks_racing_on_one_consumer(app: Principal) -> None:
    """One task polls while others commit, read committed offsets and positions, 200 rounds:
    the calls take turns (no deadlock on the loop's one thread, bounded at 60 s) and the last
    commit covers everything read."""

    async def main() -> None:
        async with Producer(app.url) as producer:
            for i in range(600):
                await producer.send(TOPIC, f"{i}".encode(), partition=i % PARTITIONS)
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        async with Consumer(app.url, group_id="aio-race", heartbeat_interval_ms=50, max_poll_records=3) as consumer:
            await consumer.subscribe([TOPIC])
            read = 0
            done = asyncio.Event()

            async def reader() -> None:
                nonlocal read
                while read < 600:
                    read += len(await consumer.poll(0.05))
                done.set()

            async def committer() -> None:
                while not done.is_set():
                    await consumer.commit(asynchronous=True)
                    await consumer.committed(tps)
                    await asyncio.sleep(0)

            async def positions() -> None:
                while not done.is_set():
                    for tp in tps:
                        await consumer.position(tp)
                    await asyncio.sleep(0)

            await asyncio.wait_for(asyncio.gather(reader(), committer(), positions()), 60)
            await consumer.commit()
            committed = await consumer.committed(tps)
        assert read == 600
        assert {tp.partition: om.offset for tp, om in committed.items() if om is not None} == {
            p: 200 for p in range(PARTITIONS)
        }

    run(main)


@pytest.mark.timeout(120)
def test_close_waits_for_a_coordinator_call_under_way(app: Principal, engine: sa.Engine) -> None:
    """A commit's EndTxn waits on a lock another session holds; close() from another task (a
    shutdown handler) waits for it instead of freezing the loop on the coordinator's thread lock."""

    async def main() -> None:
        producer = Producer(app.url, transactional_id="aio-close")
        await producer.init_transactions()
        producer.begin_transaction()
        with engine.connect() as locker:
            locker.exec_driver_sql("SELECT 1 FROM oncelog.transactions WHERE transactional_id = 'aio-close' FOR UPDATE")
            commit = asyncio.create_task(producer.commit_transaction())  # EndTxn alone: nothing was sent
            await asyncio.sleep(0.3)
            close = asyncio.create_task(producer.close())
            await asyncio.sleep(0.3)  # a frozen loop would never come back here
            locker.rollback()
        await asyncio.wait_for(asyncio.gather(commit, close), 30)
        assert producer.transaction_state is TxnState.READY

    run(main)


def test_heartbeats_go_on_while_a_call_waits(app: Principal) -> None:
    """committed() waits (default_api_timeout_ms) while a transaction holds pending offsets for
    the member's partition; the heartbeat task does not wait behind it, so the member keeps its
    session (6 s, shorter than the wait) and its partitions."""

    async def main() -> None:
        lost: list[set[TopicPartition]] = []
        async with Consumer(
            app.url,
            group_id="aio-hb",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            default_api_timeout_ms=8000,
        ) as consumer:
            await consumer.subscribe([TOPIC], on_revoke=lost.append, on_lost=lost.append)
            generation = consumer.group_metadata().generation_id
            with SyncProducer(app.url, transactional_id="aio-hb-pending", send_offsets_with_commit=False) as pending:
                pending.init_transactions()
                pending.begin_transaction()
                pending.send_offsets_to_transaction({TopicPartition(TOPIC, 0): 1}, consumer.group_metadata())
                with pytest.raises(errors.UnstableOffsetCommitError):
                    await consumer.committed([TopicPartition(TOPIC, 0)])
                pending.abort_transaction()
            await consumer.poll(0)
            assert lost == []
            assert consumer.group_metadata().generation_id == generation
            assert len(consumer.assignment()) == PARTITIONS

    run(main)


def test_a_rebalance_callback_may_await_an_async_commit(app: Principal) -> None:
    async def main() -> None:
        async with Consumer(app.url, group_id="aio-cb") as first:
            committed: list[set[TopicPartition]] = []

            async def on_revoke(partitions: set[TopicPartition]) -> None:
                task = await first.commit({tp: 0 for tp in partitions}, asynchronous=True)
                assert task is not None
                await task  # the commit runs beside the poll that called this
                committed.append(partitions)

            await first.subscribe([TOPIC], on_revoke=on_revoke)
            async with Consumer(app.url, group_id="aio-cb") as second:
                await _second_member_joins(first, lambda: bool(committed), second, bound=30)
        assert committed and committed[0]

    run(main)
