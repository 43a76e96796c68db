"""The broker's listening session (``oncelog.broker.wakeups``) when things go wrong: a database it
cannot reach, a failure nobody planned for, a registration stuck behind a lock, and a client that
names ever other partitions. Against a real PostgreSQL; the event loop is the test's own."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import sqlalchemy as sa

import oncelog
from oncelog.broker import wakeups
from oncelog.broker.common import Database
from oncelog.broker.wakeups import FetchWakeups
from oncelog.store import create_engine, log

TOPIC = "t"
#: Bounds every wait of these tests; never an assertion on speed.
WAIT = 30.0


@pytest.fixture
def topic(db_url: str) -> str:
    with oncelog.Admin(db_url) as admin:
        admin.create_topic(TOPIC, partitions=2)
    return TOPIC


@pytest.fixture
def broker_engine(db_url: str) -> Any:
    engine = create_engine(db_url).execution_options(isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def test_without_a_database_a_registration_answers_empty_instead_of_hanging() -> None:
    # Nothing listens on port 1: every connection is refused.
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none", connect_args={"connect_timeout": 2})
    hub = FetchWakeups(Database(engine.execution_options(isolation_level="AUTOCOMMIT")).own_connection)

    async def register() -> frozenset[str]:
        return await asyncio.wait_for(hub.register(frozenset({(TOPIC, 0)}), True), WAIT)

    try:
        assert asyncio.run(register()) == frozenset()
        assert asyncio.run(register()) == frozenset(), "the thread lives on and answers again"
    finally:
        hub.close()
        engine.dispose()


def test_an_unplanned_failure_does_not_end_the_wakeups(
    topic: str, broker_engine: sa.Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = log.wakeups
    failures = [RuntimeError("a bug")]

    def failing_once(conn: sa.Connection, channel: str, timeout: float) -> set[str]:
        if failures:
            raise failures.pop()
        return real(conn, channel, timeout)

    monkeypatch.setattr(log, "wakeups", failing_once)
    hub = FetchWakeups(Database(broker_engine).own_connection)

    async def waits_and_is_woken() -> bool:
        with hub.waiter() as first:
            await first.register([(topic, 1)], True, WAIT)  # then the session fails
        deadline = asyncio.get_running_loop().time() + WAIT
        while hub._session < 1 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert not failures, "the session failed"
        # The same partitions again: the thread came back, made a new session and registers.
        with hub.waiter() as waiter:
            await waiter.register([(topic, 1)], True, WAIT)
            writer = threading.Thread(target=_write, args=(db_url, topic, 1))
            writer.start()
            woken = await waiter.wait(WAIT)
            await asyncio.to_thread(writer.join)
            return woken

    try:
        assert asyncio.run(waits_and_is_woken())
    finally:
        hub.close()


def _write(db_url: str, topic: str, partition: int) -> None:
    with oncelog.Producer(db_url, linger_ms=0) as producer:  # it wakes the readers it was told of
        producer.send(topic, b"x", partition=partition).result(WAIT)


def test_a_registration_held_up_answers_its_fetch_by_the_deadline(
    topic: str, broker_engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A registration waits (for a lock, a slow server): the Fetch's own deadline still holds.
    release = threading.Event()
    real = log.fetch_wait

    def stuck(conn: sa.Connection, partitions: Any, **kwargs: Any) -> Any:
        if partitions:
            release.wait(WAIT)
        return real(conn, partitions, **kwargs)

    monkeypatch.setattr(log, "fetch_wait", stuck)
    hub = FetchWakeups(Database(broker_engine).own_connection)

    async def register() -> bool:
        with hub.waiter() as waiter:
            await asyncio.wait_for(waiter.register([(topic, 0)], True, 0.2), WAIT)
            return waiter.registered

    try:
        assert asyncio.run(register()), "back by its deadline, while the registration still waits"
    finally:
        release.set()
        hub.close()


def test_registrations_kept_for_ever_other_partition_sets_stay_bounded(broker_engine: sa.Engine) -> None:
    hub = FetchWakeups(Database(broker_engine).own_connection)
    far = float("inf")
    for n in range(wakeups._KEPT_MAX + 500):
        hub._keep((frozenset({(f"topic-{n}", 0)}), True), (frozenset(), far, 0))
    assert len(hub._kept) == wakeups._KEPT_MAX
    assert (frozenset({(f"topic-{wakeups._KEPT_MAX + 499}", 0)}), True) in hub._kept, "the newest stay"
