"""The producer's sender against a fake store: the KIP-360 re-initialisation loop is bounded.

Issue 14, finding 3: when the store bumps a producer's epoch behind its back (an operator, a
database restored to an earlier point), the producer used to retry for ever. Here the store is a
fake that plays the store's answers (tests/unit/fake_store.py: init_producer_id_v1 and
produce_v2's epoch rules, as migration 0002 writes them); what the database decides is proven by
tests/integration/test_producer_reinit.py.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

import oncelog.producer as producer_module
from oncelog import Producer, errors
from oncelog.sender import MAX_RESEQUENCE_TRIES
from oncelog.store.topics import TopicMetadata
from oncelog.types import TopicPartition
from tests.unit.fake_store import FakeStore

#: Bounds a future's wait in these tests; never an assertion on speed.
WAIT = 30.0


@contextlib.contextmanager
def fake_producer(store: FakeStore, monkeypatch: pytest.MonkeyPatch, **config: Any) -> Iterator[Producer]:
    """A Producer whose sender talks to ``store`` (no database is ever contacted)."""
    monkeypatch.setattr(producer_module, "_store", lambda client: store)
    producer = Producer("postgresql://nobody@127.0.0.1:1/none", linger_ms=0, retry_backoff_ms=1, **config)
    producer._metadata["t"] = (
        time.monotonic() + 3600,
        TopicMetadata(partitions=2, max_message_bytes=1 << 20),
        [TopicPartition("t", 0), TopicPartition("t", 1)],
    )
    try:
        yield producer
    finally:
        producer.close(timeout=5)


def test_epoch_bumped_twice_behind_its_back_falls_back_to_a_fresh_producer_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = FakeStore()
    with fake_producer(store, monkeypatch, delivery_timeout_ms=3000) as p:
        p.send("t", b"a", partition=0).result(WAIT)
        victim = p.producer_id
        assert victim is not None
        store.bump_behind_its_back(victim, times=2)
        meta = p.send("t", b"b", partition=0).result(WAIT)
        metrics = p.metrics()
        assert p.producer_id != victim and p.producer_epoch == 0
    assert meta.offset == 1
    # One refused produce, one refused bump (OL202), one fresh id, one produce: no loop.
    assert store.init_calls == [(None, None), (victim, 0), (None, None)]
    assert store.produce_calls == 3
    assert metrics["producer_id_reset_total"] == 1
    assert metrics["record_retry_total"] == 1


def test_epoch_bumped_once_behind_its_back_takes_the_current_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    store = FakeStore()
    with fake_producer(store, monkeypatch) as p:
        p.send("t", b"a", partition=0).result(WAIT)
        victim = p.producer_id
        assert victim is not None
        store.bump_behind_its_back(victim)
        p.send("t", b"b", partition=0).result(WAIT)
        assert (p.producer_id, p.producer_epoch) == (victim, 1)  # answered as a retried bump
        assert p.metrics()["producer_id_reset_total"] == 0


def test_an_identity_taken_away_at_every_attempt_fails_the_batch_after_bounded_tries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The adversary bumps whatever id the producer holds before each of its produces: the batch
    fails with a typed error after a bounded number of tries, well inside its delivery timeout,
    and the producer goes on with the next batch once the adversary stops."""
    store = FakeStore()
    adversary_on = True

    def adversary(s: FakeStore) -> None:
        if adversary_on:
            for pid, (current, _) in list(s.producers.items()):
                s.producers[pid] = (current + 1, current)

    with fake_producer(store, monkeypatch, delivery_timeout_ms=120_000) as p:
        p.send("t", b"a", partition=0).result(WAIT)
        store.before_produce = adversary
        started = time.monotonic()
        with pytest.raises(errors.InvalidProducerEpochError):
            p.send("t", b"b", partition=0).result(WAIT)
        assert time.monotonic() - started < WAIT
        tries = store.produce_calls - 1
        assert tries <= MAX_RESEQUENCE_TRIES
        adversary_on = False
        assert p.send("t", b"c", partition=1).result(WAIT).offset == 0


def test_reinitialisation_that_never_answers_ends_at_the_delivery_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before issue 14 the re-initialisation path neither counted an attempt nor looked at the
    deadline: a bump that kept failing made the batch retry for ever."""
    store = FakeStore()
    with fake_producer(store, monkeypatch, delivery_timeout_ms=500) as p:
        p.send("t", b"a", partition=0).result(WAIT)
        victim = p.producer_id
        assert victim is not None
        store.bump_behind_its_back(victim, times=2)
        store.init_error = errors.DatabaseUnavailableError("the store is restarting")
        started = time.monotonic()
        with pytest.raises(errors.DeliveryTimeoutError):
            p.send("t", b"b", partition=0).result(WAIT)
        assert time.monotonic() - started < 0.5 + 5
        calls = len(store.init_calls)
        assert p.metrics()["record_retry_total"] >= 1
        # The next batch is not held back by the failed one: once the store answers, it goes.
        store.init_error = None
        assert p.send("t", b"c", partition=1).result(WAIT).offset == 0
    assert calls < 50  # bounded by the deadline and the (exponential) backoff, not by luck
