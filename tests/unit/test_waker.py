"""ReaderWaker against the fake store: wake-ups leave from their own thread, coalesced per
partition, and a failure is forgotten (readers also look again by themselves)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest

from oncelog import errors
from oncelog.waker import ReaderWaker
from tests.unit.fake_store import FakeStore

#: Bounds every wait in these tests; never an assertion on speed.
WAIT = 30.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def test_wake_ups_asked_for_while_one_is_on_its_way_go_together_once() -> None:
    store = FakeStore()
    gate, entered = threading.Event(), threading.Event()
    real = store.wake_readers

    def slow(conn: object, tokens: Sequence[str]) -> int:
        entered.set()
        assert gate.wait(WAIT)
        return real(conn, tokens)

    store.wake_readers = slow  # type: ignore[method-assign]
    counted: dict[str, float] = {}
    waker = ReaderWaker(store, request_timeout=1.0, metric=lambda name, by: counted.update({name: by}))
    waker.wake(["1:0"])
    assert entered.wait(WAIT)
    for p in (2, 1, 2, 1):  # while the first is on its way
        waker.wake([f"1:{p}"])
    gate.set()
    waker.close(WAIT)
    assert store.woken == [["1:0"], ["1:1", "1:2"]], "the second NOTIFY carries both"
    assert counted == {"reader_wakeup_total": 1}


def test_a_failed_wake_up_is_forgotten_and_the_next_uses_a_new_connection(caplog: pytest.LogCaptureFixture) -> None:
    store = FakeStore()
    store.fail("wake_readers", errors.DatabaseUnavailableError("connection lost"))
    waker = ReaderWaker(store, request_timeout=1.0)
    caplog.set_level("DEBUG", logger="oncelog.waker")
    waker.wake(["1:0"])
    wait_for(lambda: store.count("wake_readers") == 1, "the first wake-up was never tried")
    wait_for(lambda: store.released == [True], "the broken connection was not discarded")
    waker.wake(["1:1"])
    waker.close(WAIT)
    assert store.woken == [["1:1"]]
    assert "could not wake the readers" in caplog.text
    assert store.released == [True, False]


def test_nothing_starts_before_the_first_wake_up_and_nothing_is_taken_after_close() -> None:
    store = FakeStore()
    waker = ReaderWaker(store, request_timeout=1.0)
    waker.close(WAIT)
    waker.wake(["1:0"])
    assert store.calls == [] and not any(t.name == "oncelog-reader-waker" for t in threading.enumerate())


def test_a_failure_nobody_planned_for_does_not_stop_the_wake_ups(caplog: pytest.LogCaptureFixture) -> None:
    store = FakeStore()
    real, tried = store.wake_readers, threading.Event()

    def buggy_once(conn: object, tokens: Sequence[str]) -> int:
        if not tried.is_set():
            tried.set()
            raise RuntimeError("a bug")
        return real(conn, tokens)

    store.wake_readers = buggy_once  # type: ignore[method-assign]
    waker = ReaderWaker(store, request_timeout=1.0)
    waker.wake(["1:0"])
    assert tried.wait(WAIT), "the first wake-up was never tried"
    wait_for(lambda: store.released == [True], "the connection was not discarded")
    waker.wake(["1:1"])
    waker.close(WAIT)
    assert store.woken == [["1:1"]], "the next wake-up left"
    assert "could not wake the readers" in caplog.text
