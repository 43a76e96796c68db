"""RecordFuture and BatchResult: one completion per batch, a Future per record for the caller.

What send() returns must behave as a ``concurrent.futures.Future`` everywhere a caller may use
one (result, exception, callbacks, ``wait``, ``as_completed``, ``asyncio.wrap_future``), while the
producer completes a whole batch at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from datetime import UTC, datetime

import pytest

from oncelog import errors
from oncelog.record_future import BatchResult, RecordFuture
from oncelog.types import RecordMetadata

APPENDED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
OWN = datetime(2020, 1, 1, tzinfo=UTC)


def futures(n: int) -> tuple[BatchResult, list[RecordFuture]]:
    batch = BatchResult("t", 3)
    return batch, [RecordFuture(batch, i) for i in range(n)]


def test_each_record_gets_its_offset_and_the_batch_append_time() -> None:
    batch, fs = futures(3)
    assert not any(f.done() for f in fs) and all(f.running() for f in fs)
    batch.succeed(40, APPENDED)
    assert [f.result(0) for f in fs] == [RecordMetadata("t", 3, 40 + i, APPENDED) for i in range(3)]
    assert all(f.done() and f.exception(0) is None and not f.running() for f in fs)


def test_get_is_result_by_kafka_pythons_name() -> None:
    batch, fs = futures(1)
    with pytest.raises(TimeoutError):
        fs[0].get(0.01)
    batch.succeed(7, APPENDED)
    assert fs[0].get(timeout=0) == fs[0].result() == RecordMetadata("t", 3, 7, APPENDED)


def test_a_record_with_its_own_timestamp_keeps_it() -> None:
    batch, fs = futures(2)
    batch.timestamps = [None, OWN]
    batch.succeed(0, APPENDED)
    assert [f.result().timestamp for f in fs] == [APPENDED, OWN]


def test_a_failed_batch_fails_every_record_and_completes_once() -> None:
    batch, fs = futures(2)
    error = errors.DeliveryTimeoutError("late")
    batch.fail(error)
    batch.succeed(1, APPENDED)  # ignored: a batch completes once
    for f in fs:
        assert f.exception(0) is error
        with pytest.raises(errors.DeliveryTimeoutError):
            f.result(0)


def test_waiting_times_out_with_timeout_error() -> None:
    _, fs = futures(1)
    with pytest.raises(TimeoutError):
        fs[0].result(0.01)
    with pytest.raises(TimeoutError):
        fs[0].exception(0.01)


def test_result_waits_for_another_thread_to_complete_the_batch() -> None:
    batch, fs = futures(1)
    timer = threading.Timer(0.05, batch.succeed, args=(7, APPENDED))
    timer.start()
    assert fs[0].result(30).offset == 7
    timer.join()


def test_callbacks_run_once_each_before_or_after_completion() -> None:
    batch, fs = futures(2)
    seen: list[object] = []
    fs[0].add_done_callback(seen.append)
    fs[1].add_record_callback(lambda meta, exc: seen.append((meta, exc)))
    assert seen == []
    batch.succeed(10, APPENDED)
    assert seen == [fs[0], (RecordMetadata("t", 3, 11, APPENDED), None)]
    fs[0].add_done_callback(seen.append)  # after completion: at once
    assert seen[-1] is fs[0] and len(seen) == 3


def test_a_failing_callback_is_logged_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    batch, fs = futures(2)
    seen: list[object] = []

    def broken(meta: RecordMetadata | None, exc: BaseException | None) -> None:
        raise RuntimeError("the application's bug")

    fs[0].add_record_callback(broken)
    fs[1].add_record_callback(lambda meta, exc: seen.append(exc))
    error = errors.ProducerFencedError("fenced")
    batch.fail(error)
    assert seen == [error]
    assert "callback raised" in caplog.text


def test_it_cannot_be_cancelled_nor_completed_by_the_caller() -> None:
    batch, fs = futures(1)
    assert fs[0].cancel() is False and fs[0].cancelled() is False
    with pytest.raises(concurrent.futures.InvalidStateError):
        fs[0].set_result(RecordMetadata("t", 0, 0, OWN))
    with pytest.raises(concurrent.futures.InvalidStateError):
        fs[0].set_exception(None)
    with pytest.raises(concurrent.futures.InvalidStateError):
        fs[0].set_running_or_notify_cancel()
    batch.succeed(0, APPENDED)
    assert "acknowledged" in repr(fs[0])


def test_concurrent_futures_wait_and_as_completed() -> None:
    batch, fs = futures(5)
    early = fs[:2]
    done, pending = concurrent.futures.wait(early, timeout=0.01)
    assert done == set() and pending == set(early)
    timer = threading.Timer(0.05, batch.succeed, args=(0, APPENDED))
    timer.start()
    done, pending = concurrent.futures.wait(fs, timeout=30)  # two materialised before, three now
    assert done == set(fs) and pending == set()
    assert sorted(f.result().offset for f in concurrent.futures.as_completed(fs, timeout=30)) == list(range(5))
    timer.join()


def test_wait_on_futures_of_a_batch_that_completed_before_anyone_looked() -> None:
    batch, fs = futures(2)
    batch.fail(errors.DeliveryTimeoutError("late"))
    done, _ = concurrent.futures.wait(fs, timeout=0, return_when=concurrent.futures.FIRST_EXCEPTION)
    assert done == set(fs)


def test_asyncio_wraps_it() -> None:
    batch, fs = futures(1)

    async def main() -> RecordMetadata:
        asyncio.get_running_loop().call_later(0.02, batch.succeed, 5, APPENDED)
        return await asyncio.wrap_future(fs[0])

    assert asyncio.run(main()).offset == 5


def test_materialising_races_completion_without_losing_a_wakeup() -> None:
    # wait() makes a future materialise its Future state while another thread completes the
    # batch: whichever goes first, the waiter must see the record done. 300 rounds.
    for _ in range(300):
        batch, fs = futures(3)
        go = threading.Barrier(2)

        def complete(b: BatchResult = batch, barrier: threading.Barrier = go) -> None:
            barrier.wait()
            b.succeed(0, APPENDED)

        t = threading.Thread(target=complete)
        t.start()
        go.wait()
        done, pending = concurrent.futures.wait(fs, timeout=30)
        t.join()
        assert done == set(fs) and not pending
