"""What ``Producer.send`` returns: one cheap handle per record, one completion per batch.

Kafka's producer completes a whole batch at once (``ProduceRequestResult``) and hands each record
a light ``FutureRecordMetadata`` pointing at the batch and the record's place in it. Doing the
same here keeps the hot path free of a ``concurrent.futures.Future`` per record, whose
``threading.Condition`` and lists cost more than the rest of ``send()`` and, being garbage the
collector must trace, most of the producer's client CPU.

:class:`RecordFuture` is still a ``concurrent.futures.Future``: ``result()``, ``exception()``,
``done()`` and ``add_done_callback()`` read the batch's outcome directly, and only a caller that
reaches into a future's internals (``concurrent.futures.wait``/``as_completed``) makes that one
future materialise a real Future state, completed with its batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from datetime import datetime
from typing import Any

from oncelog.types import RecordMetadata

__all__ = ["BatchResult", "RecordCallback", "RecordFuture"]

logger = logging.getLogger(__name__)

#: A send() callback: ``(metadata, None)`` on success, ``(None, exception)`` on failure.
RecordCallback = Callable[[RecordMetadata | None, BaseException | None], None]

#: The Future internals ``concurrent.futures.wait`` and ``as_completed`` touch directly.
_FUTURE_STATE = frozenset({"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"})


class BatchResult:
    """The outcome of one batch (Kafka's ``ProduceRequestResult``): set once, for every record.

    ``timestamps`` is the batch's timestamp column (None when no record set one): a record's
    metadata carries its own timestamp, or the batch's log append time.
    """

    __slots__ = (
        "_base_offset",
        "_callbacks",
        "_done",
        "_error",
        "_event",
        "_lock",
        "_log_append_time",
        "_materialized",
        "partition",
        "timestamps",
        "topic",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.timestamps: list[datetime | None] | None = None
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._done = False
        self._base_offset = 0
        self._log_append_time: datetime | None = None
        self._error: BaseException | None = None
        # (future, callback, kafka_style): Future-style callbacks take the future, send()'s take
        # (metadata, exception). Only records that asked for one appear here.
        self._callbacks: list[tuple[RecordFuture, Callable[..., object], bool]] = []
        self._materialized: list[RecordFuture] = []

    @property
    def done(self) -> bool:
        """Whether the batch was acknowledged or failed."""
        return self._done

    def wait(self, timeout: float | None) -> bool:
        """Wait until the batch completes; False if ``timeout`` passed first."""
        return self._event.wait(timeout)

    def succeed(self, base_offset: int, log_append_time: datetime) -> None:
        """The batch landed at ``base_offset``: complete every record."""
        with self._lock:
            if self._done:
                return
            self._base_offset = base_offset
            self._log_append_time = log_append_time
            self._done = True
        self._complete()

    def fail(self, error: BaseException) -> None:
        """The batch failed with ``error``: fail every record (a batch completes once)."""
        with self._lock:
            if self._done:
                return
            self._error = error
            self._done = True
        self._complete()

    def metadata(self, index: int) -> RecordMetadata:
        """The metadata of record ``index`` of an acknowledged batch."""
        ts = self.timestamps[index] if self.timestamps is not None else None
        return RecordMetadata(self.topic, self.partition, self._base_offset + index, ts or self._log_append_time)  # type: ignore[arg-type]

    def error(self) -> BaseException | None:
        """The batch's error (None once acknowledged)."""
        return self._error

    def add_callback(self, future: RecordFuture, fn: Callable[..., object], kafka_style: bool) -> bool:
        """Register ``fn`` for ``future``'s completion; False when the batch has completed already
        (the caller runs it then)."""
        with self._lock:
            if self._done:
                return False
            self._callbacks.append((future, fn, kafka_style))
            return True

    def materialize(self, future: RecordFuture) -> None:
        """Give ``future`` a real Future state, completed with the batch (now, if it has)."""
        with self._lock:
            if "_condition" in future.__dict__:
                return
            Future.__init__(future)
            pending = not self._done
            if pending:
                self._materialized.append(future)
        if not pending:
            future.settle()

    def _complete(self) -> None:
        # Every field is set and _done is true: no list below grows any more.
        self._event.set()
        for future in self._materialized:
            future.settle()
        for future, fn, kafka_style in self._callbacks:
            _run_callback(future, fn, kafka_style)
        self._callbacks = []
        self._materialized = []


class RecordFuture(Future[RecordMetadata]):
    """The future of one record: where it landed, or why it failed (Kafka's ``FutureRecordMetadata``).

    A ``concurrent.futures.Future`` whose state lives in its batch's :class:`BatchResult`. It
    cannot be cancelled (as in Kafka), and only the producer completes it.
    """

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: BatchResult, index: int) -> None:  # no Future.__init__: see the module
        self._batch = batch
        self._index = index

    def __getattr__(self, name: str) -> Any:
        # Only reached for an attribute not set yet: the Future internals of a future nobody
        # touched that way before.
        if name in _FUTURE_STATE:
            self._batch.materialize(self)
            return self.__dict__[name]
        raise AttributeError(name)

    def settle(self) -> None:
        """Copy the batch's outcome into this future's materialized Future state (waking
        ``concurrent.futures.wait``)."""
        batch = self._batch
        error = batch.error()
        if error is None:
            Future.set_result(self, batch.metadata(self._index))
        else:
            Future.set_exception(self, error)

    # --- the Future API, from the batch ----------------------------------------------------

    def done(self) -> bool:
        """Whether the record was acknowledged or failed."""
        return self._batch.done

    def running(self) -> bool:
        """Whether the record is still on its way (queued or being sent)."""
        return not self._batch.done

    def cancelled(self) -> bool:
        """Never: a record handed to the producer cannot be cancelled."""
        return False

    def cancel(self) -> bool:
        """A record handed to the producer cannot be cancelled: returns False."""
        return False

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Where the record landed; raises its error, or TimeoutError after ``timeout`` seconds."""
        batch = self._batch
        if not batch.done and not batch.wait(timeout):
            raise TimeoutError(f"the record was not acknowledged within {timeout} s")
        error = batch.error()
        if error is not None:
            raise error
        return batch.metadata(self._index)

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """:meth:`result`, by the name kafka-python's ``FutureRecordMetadata`` gives it."""
        return self.result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The record's error (None once acknowledged); TimeoutError after ``timeout`` seconds."""
        batch = self._batch
        if not batch.done and not batch.wait(timeout):
            raise TimeoutError(f"the record was not acknowledged within {timeout} s")
        return batch.error()

    def add_done_callback(self, fn: Callable[[Future[RecordMetadata]], object]) -> None:
        """Call ``fn(future)`` when the record completes (at once if it has), on the thread that
        completes it."""
        if not self._batch.add_callback(self, fn, False):
            _run_callback(self, fn, False)

    def add_record_callback(self, fn: RecordCallback) -> None:
        """Call ``fn(metadata, exception)`` when the record completes (send()'s ``callback``)."""
        if not self._batch.add_callback(self, fn, True):
            _run_callback(self, fn, True)

    def set_result(self, result: RecordMetadata) -> None:
        """Only the producer completes a record's future."""
        raise InvalidStateError("a record's future is completed by the producer only")

    def set_exception(self, exception: BaseException | None) -> None:
        """Only the producer completes a record's future."""
        raise InvalidStateError("a record's future is completed by the producer only")

    def set_running_or_notify_cancel(self) -> bool:
        """Not for a record's future (it is running from the moment send() returns)."""
        raise InvalidStateError("a record's future is completed by the producer only")

    def __repr__(self) -> str:
        batch = self._batch
        state = "pending" if not batch.done else ("failed" if batch.error() is not None else "acknowledged")
        return f"<RecordFuture {batch.topic}-{batch.partition} #{self._index} {state}>"


def _run_callback(future: RecordFuture, fn: Callable[..., object], kafka_style: bool) -> None:
    try:
        if kafka_style:
            error = future._batch.error()
            fn(None, error) if error is not None else fn(future._batch.metadata(future._index), None)
        else:
            fn(future)
    except Exception:  # an application's callback must not kill the thread completing records
        logger.exception("a record's callback raised")
