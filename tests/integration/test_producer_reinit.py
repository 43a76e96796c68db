"""A producer whose epoch the store moved behind its back recovers, in bounded time (issue 14).

Finding 3: after a foreign epoch bump, or a database restored to an earlier point (which
docs/operations.md says recovers by itself), the KIP-360 re-initialisation failed with OL202 and
the producer retried for ever. Here the victim's producer row is changed by direct SQL as the
owner, as an operator's bump or a restore would; send() with delivery_timeout_ms=3000 must then
complete (under a new producer id where the old one cannot be bumped) within 3 s plus a margin.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest

import oncelog
from tests.support.logcheck import read_partition, values

#: Added to the delivery timeout to bound how long a send may take (scheduling on a loaded host).
MARGIN = 5.0


def _bump_twice(conn: psycopg.Connection, producer_id: int) -> None:
    conn.execute(
        "UPDATE oncelog.producers SET epoch = epoch + 2, last_epoch = epoch + 1 WHERE producer_id = %s", (producer_id,)
    )


def _restore_to_before_it_existed(conn: psycopg.Connection, producer_id: int) -> None:
    conn.execute("DELETE FROM oncelog.producers WHERE producer_id = %s", (producer_id,))


def _rewind_one_epoch(conn: psycopg.Connection, producer_id: int) -> None:
    conn.execute(
        "UPDATE oncelog.producers SET epoch = epoch - 1, last_epoch = NULL WHERE producer_id = %s", (producer_id,)
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("change", "new_id"),
    [(_bump_twice, True), (_restore_to_before_it_existed, True), (_rewind_one_epoch, None)],
    ids=["bumped-twice", "row-deleted", "epoch-rewound"],
)
def test_send_after_the_store_moved_the_epoch_completes_within_the_delivery_timeout(
    db_url: str, change: Callable[[psycopg.Connection, int], None], new_id: bool | None
) -> None:
    with oncelog.Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    with (
        psycopg.connect(db_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as owner,
        oncelog.Producer(db_url, linger_ms=0, delivery_timeout_ms=3000) as producer,
    ):
        producer.send("t", b"a").result(30)
        if change is _rewind_one_epoch:
            owner.execute(
                "UPDATE oncelog.producers SET epoch = 1, last_epoch = 0 WHERE producer_id = %s", (producer.producer_id,)
            )
            producer.send("t", b"at-epoch-1").result(30)  # takes epoch 1 (answered as a retried bump)
            assert producer.producer_epoch == 1
        victim = producer.producer_id
        assert victim is not None
        change(owner, victim)
        started = time.monotonic()
        future = producer.send("t", b"b")
        try:
            meta = future.result(3 + MARGIN)
        except oncelog.errors.OncelogError:  # a typed failure is acceptable; no answer is not
            meta = None
        assert time.monotonic() - started < 3 + MARGIN
        assert meta is not None, future.exception()
        if new_id is not None:
            assert (producer.producer_id != victim) is new_id
        metrics = producer.metrics()
        # The producer goes on: the next batch is sent at once under the identity it now holds.
        producer.send("t", b"c").result(30)
    expected = [b"a", b"at-epoch-1", b"b", b"c"] if change is _rewind_one_epoch else [b"a", b"b", b"c"]
    assert values(read_partition(db_url, "t", 0)) == expected
    assert metrics["record_retry_total"] <= 3, metrics
