"""The error hierarchy: one class per protocol error, flags like Kafka's, codes unique."""

from __future__ import annotations

import psycopg
import pytest

from oncelog import errors
from oncelog.store.errors import translate


def _all() -> list[type[errors.OncelogError]]:
    out: list[type[errors.OncelogError]] = []
    todo = [errors.OncelogError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def test_sqlstates_are_ours_and_unique() -> None:
    codes = [c.sqlstate for c in _all() if c.sqlstate and "sqlstate" in c.__dict__]
    assert len(codes) == len(set(codes))
    assert all(len(c) == 5 and c.startswith("OL") for c in codes)
    for cls in _all():
        if cls.sqlstate and "sqlstate" in cls.__dict__:
            assert errors.error_for_sqlstate(cls.sqlstate) is cls


def test_flags_follow_kafka() -> None:
    assert errors.ProducerFencedError.fatal and not errors.ProducerFencedError.retriable
    assert errors.InvalidProducerIdMappingError.fatal
    assert errors.InvalidProducerEpochError.abortable  # since Kafka 2.7, not fatal
    assert errors.ConcurrentTransactionsError.retriable
    assert errors.UnstableOffsetCommitError.retriable
    assert errors.DatabaseUnavailableError.retriable
    assert not errors.OutOfOrderSequenceError.retriable
    for cls in _all():
        assert sum([cls.retriable, cls.abortable, cls.fatal]) <= 1, cls


def test_docstring_is_the_default_message() -> None:
    assert str(errors.ProducerFencedError()).startswith("Another producer instance")
    assert str(errors.ProducerFencedError("custom")) == "custom"


@pytest.mark.parametrize("cls", [c for c in _all() if c is not errors.OncelogError])
def test_every_error_is_documented(cls: type[errors.OncelogError]) -> None:
    assert cls.__doc__ and cls.__doc__.strip()


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.errors.LockNotAvailable("canceling statement due to lock timeout"),
        psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
    ],
)
def test_statement_and_lock_timeouts_are_a_retriable_request_timeout(exc: psycopg.Error) -> None:
    """55P03 and 57014: the client's own bound on a statement fired (issue 14); the statement was
    rolled back, so the request may simply be sent again."""
    mapped = translate(exc)
    assert isinstance(mapped, errors.RequestTimeoutError)
    assert mapped.retriable and not mapped.abortable and not mapped.fatal
    assert "timeout" in str(mapped)
