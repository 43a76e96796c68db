"""The promise holds against every client (revision 0017): each test is an attack by a principal
holding only the client role, with ACLs on, against another principal's producer, transaction or
records, and checks that the attack changes nothing and learns nothing.

Principals are separate login roles (tests.support.roles); races run real threads on their own
connections, repeated; no mocks.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from oncelog import Admin, Consumer, Producer, TopicPartition, errors
from oncelog.store import groups, log, txn
from oncelog.store.records import ProduceBatch, RecordIn
from tests.support.logcheck import wait_until
from tests.support.roles import Principal, client_principal, enforce_acls

TOPIC = "t"
PARTITIONS = 8


@pytest.fixture
def acls_on(engine: sa.Engine) -> None:
    enforce_acls(engine, {TOPIC: PARTITIONS})


@pytest.fixture
def victim(acls_on: None, engine: sa.Engine, db_url: str) -> Iterator[Principal]:
    yield from client_principal(engine, db_url)


@pytest.fixture
def attacker(acls_on: None, engine: sa.Engine, db_url: str) -> Iterator[Principal]:
    yield from client_principal(engine, db_url)


def _batch(n: int = 1, tag: bytes = b"v") -> list[RecordIn]:
    return [RecordIn(value=tag + str(i).encode()) for i in range(n)]


def _log(engine: sa.Engine, partition: int = 0) -> list[tuple[int, bytes | None, int | None]]:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            'SELECT "offset", value, producer_id FROM records WHERE partition = %(p)s AND control_type IS NULL '
            'ORDER BY "offset"',
            {"p": partition},
        ).all()
    return [(int(r[0]), r[1], r[2]) for r in rows]


# --- 1. a producer id is its principal's ------------------------------------------------------


def test_another_principals_idempotent_id_is_unknown_and_tells_nothing(
    victim: Principal, attacker: Principal, engine: sa.Engine
) -> None:
    ident = victim.call(log.init_producer_id)
    victim.call(
        log.produce, topic=TOPIC, partition=0, records=_batch(3), producer_id=ident.producer_id,
        producer_epoch=ident.epoch, base_sequence=0,
    )  # fmt: skip
    before = _log(engine)
    # Every (epoch, sequence) an attacker could guess, including the right ones: refused alike,
    # with nothing about the victim's epoch or sequence in the message.
    for epoch, seq in [(ident.epoch, 3), (ident.epoch, 0), (ident.epoch + 1, 0), (5, 99)]:
        with pytest.raises(errors.UnknownProducerIdError) as info:
            attacker.call(
                log.produce, topic=TOPIC, partition=0, records=_batch(1, b"forged"),
                producer_id=ident.producer_id, producer_epoch=epoch, base_sequence=seq,
            )  # fmt: skip
        assert not re.search(r"epoch \d|sequence \d|current", info.value.message), info.value.message
    # A KIP-360 bump of the victim's id hands the attacker a fresh id and leaves the victim alone.
    fresh = attacker.call(log.init_producer_id, producer_id=ident.producer_id, epoch=ident.epoch)
    assert fresh.producer_id != ident.producer_id and fresh.epoch == 0
    again = attacker.call(log.init_producer_id, producer_id=ident.producer_id, epoch=ident.epoch)
    assert again.producer_id not in (ident.producer_id, fresh.producer_id)
    assert _log(engine) == before
    # The victim carries on where it was: its epoch was never bumped, its next sequence is 3.
    result = victim.call(
        log.produce, topic=TOPIC, partition=0, records=_batch(1, b"next"), producer_id=ident.producer_id,
        producer_epoch=ident.epoch, base_sequence=3,
    )  # fmt: skip
    assert not result.duplicate and result.base_offset == 3


def test_a_transactional_id_is_held_by_its_principal(victim: Principal, attacker: Principal, engine: sa.Engine) -> None:
    ident = victim.call(txn.init_producer_id, transactional_id="victim-tx", transaction_timeout_ms=60_000)
    victim.call(
        log.produce, topic=TOPIC, partition=0, records=_batch(2), producer_id=ident.producer_id,
        producer_epoch=ident.epoch, base_sequence=0, transactional_id="victim-tx", txn_number=ident.txn_number + 1,
    )  # fmt: skip
    # The attacker (with ACLs allowing it the transactional id) uses the victim's identity: fenced,
    # without learning the epoch, on every path that names it.
    with pytest.raises(errors.ProducerFencedError) as info:
        attacker.call(
            log.produce, topic=TOPIC, partition=1, records=_batch(1, b"forged"), producer_id=ident.producer_id,
            producer_epoch=ident.epoch, base_sequence=0, transactional_id="victim-tx",
            txn_number=ident.txn_number + 1,
        )  # fmt: skip
    assert "epoch" not in info.value.message
    for commit in (True, False):
        with pytest.raises(errors.ProducerFencedError):
            attacker.call(
                txn.end_txn, transactional_id="victim-tx", producer_id=ident.producer_id, epoch=ident.epoch,
                txn_number=ident.txn_number + 1, commit=commit,
            )  # fmt: skip
    with pytest.raises(errors.ProducerFencedError):
        attacker.call(
            txn.init_producer_id, transactional_id="victim-tx", transaction_timeout_ms=60_000,
            producer_id=ident.producer_id, epoch=ident.epoch,
        )  # fmt: skip
    # Its id on the non-transactional path: refused to the attacker as unknown, to the victim itself
    # because a transactional id's producer writes in its transactions only.
    with pytest.raises(errors.UnknownProducerIdError):
        attacker.call(
            log.produce, topic=TOPIC, partition=0, records=_batch(1, b"forged"), producer_id=ident.producer_id,
            producer_epoch=ident.epoch, base_sequence=2,
        )  # fmt: skip
    with pytest.raises(errors.InvalidProducerIdMappingError):
        victim.call(
            log.produce, topic=TOPIC, partition=0, records=_batch(1, b"plain"), producer_id=ident.producer_id,
            producer_epoch=ident.epoch, base_sequence=2,
        )  # fmt: skip
    # The victim's transaction is untouched and commits.
    outcome = victim.call(
        txn.end_txn, transactional_id="victim-tx", producer_id=ident.producer_id, epoch=ident.epoch,
        txn_number=ident.txn_number + 1, commit=True,
    )  # fmt: skip
    assert outcome == "committed"
    assert [v for _, v, _ in _log(engine)] == [b"v0", b"v1"]
    # Taking the transactional id over is still possible (ACLs allow it): that fences the victim.
    taken = attacker.call(txn.init_producer_id, transactional_id="victim-tx", transaction_timeout_ms=60_000)
    assert taken.epoch == ident.epoch + 1
    with pytest.raises(errors.ProducerFencedError):
        victim.call(
            log.produce, topic=TOPIC, partition=0, records=_batch(1), producer_id=ident.producer_id,
            producer_epoch=ident.epoch, base_sequence=2, transactional_id="victim-tx", txn_number=taken.txn_number + 1,
        )  # fmt: skip


def test_a_whole_transaction_is_refused_to_another_principal_and_to_a_zombie(
    victim: Principal, attacker: Principal, engine: sa.Engine
) -> None:
    """Revision 0024: a transaction sent whole with its commit is opened and committed in one
    update, after an owner and epoch check of its own. Another principal naming the victim's
    identity, and the victim's own fenced instance, are still refused as txn_check_v1 refuses them
    (fenced, nothing about the epoch), and nothing is written."""
    first = victim.call(txn.init_producer_id, transactional_id="whole-tx", transaction_timeout_ms=60_000)
    batches = [ProduceBatch(TOPIC, p, 0, _batch(2, b"forged")) for p in (0, 1)]
    with pytest.raises(errors.ProducerFencedError) as info:
        attacker.call(
            log.produce_offsets_end_txn, transactional_id="whole-tx", producer_id=first.producer_id,
            producer_epoch=first.epoch, txn_number=first.txn_number + 1, batches=batches,
        )  # fmt: skip
    assert "epoch" not in info.value.message
    # A second instance fences the first; the first's whole transaction is refused.
    second = victim.call(txn.init_producer_id, transactional_id="whole-tx", transaction_timeout_ms=60_000)
    assert second.producer_id == first.producer_id and second.epoch == first.epoch + 1
    with pytest.raises(errors.ProducerFencedError):
        victim.call(
            log.produce_offsets_end_txn, transactional_id="whole-tx", producer_id=first.producer_id,
            producer_epoch=first.epoch, txn_number=second.txn_number + 1, batches=batches,
        )  # fmt: skip
    assert _log(engine, 0) == [] and _log(engine, 1) == []
    done = victim.call(
        log.produce_offsets_end_txn, transactional_id="whole-tx", producer_id=second.producer_id,
        producer_epoch=second.epoch, txn_number=second.txn_number + 1,
        batches=[ProduceBatch(TOPIC, p, 0, _batch(2)) for p in (0, 1)],
    )  # fmt: skip
    assert done.outcome == "committed"
    assert [v for _, v, _ in _log(engine, 0)] == [b"v0", b"v1"] == [v for _, v, _ in _log(engine, 1)]


def test_the_producer_api_recovers_from_another_principals_bumps(
    victim: Principal, attacker: Principal, engine: sa.Engine
) -> None:
    """Finding 3's attack: two foreign bumps used to wedge the victim's Producer for ever."""
    with Producer(victim.url, delivery_timeout_ms=10_000) as producer:
        producer.send(TOPIC, b"first", partition=0).result(timeout=30)
        with engine.connect() as conn:
            pid = conn.exec_driver_sql("SELECT producer_id, epoch FROM producers").one()
        for _ in range(2):
            attacker.call(log.init_producer_id, producer_id=pid[0], epoch=pid[1])
        producer.send(TOPIC, b"second", partition=0).result(timeout=30)
        assert producer.metrics()["epoch_bump_total"] == 0
    assert [v for _, v, _ in _log(engine)] == [b"first", b"second"]


# --- 2. the time is the server's ------------------------------------------------------------


def test_no_function_a_client_or_admin_can_call_takes_a_time(engine: sa.Engine) -> None:
    """The class, not the instance: every function granted to a non-owner role, by its argument types."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = current_schema() "
            "AND (has_function_privilege('oncelog_client', p.oid, 'EXECUTE') "
            "  OR has_function_privilege('oncelog_admin', p.oid, 'EXECUTE') "
            "  OR has_function_privilege('oncelog_reader', p.oid, 'EXECUTE')) "
            "AND EXISTS (SELECT 1 FROM unnest(p.proargtypes::oid[]) t "
            "            WHERE t IN ('timestamptz'::regtype, 'timestamp'::regtype, 'date'::regtype, "
            "                        'interval'::regtype, '_timestamptz'::regtype))"
        ).all()
        callable_by_client = conn.exec_driver_sql(
            "SELECT has_function_privilege('oncelog_client', 'expire_transactions_v2()', 'EXECUTE')"
        ).scalar_one()
    # produce_v2 and the functions that hand batches to it (produce_end_txn_v1/v2/v3,
    # produce_batches_v1) take record timestamps (validated against the server's time by
    # produce_v2), which are data, not the time; list_offsets_for_times_v1 takes the record time to
    # look for, a read-only search bound that decides nothing and writes nothing (0023); nothing
    # else may take one.
    assert sorted(r[0] for r in rows) == [
        "list_offsets_for_times_v1",
        "produce_batches_v1",
        "produce_end_txn_v1",
        "produce_end_txn_v2",
        "produce_end_txn_v3",
        "produce_v2",
    ]
    assert callable_by_client


def test_a_client_cannot_move_the_clock(victim: Principal, attacker: Principal) -> None:
    ident = victim.call(txn.init_producer_id, transactional_id="open-tx", transaction_timeout_ms=60_000)
    victim.call(
        log.produce, topic=TOPIC, partition=0, records=_batch(1), producer_id=ident.producer_id,
        producer_epoch=ident.epoch, base_sequence=0, transactional_id="open-tx", txn_number=ident.txn_number + 1,
    )  # fmt: skip
    for attack in (
        "SELECT expire_transactions_v1('infinity')",
        "SELECT expire_transactions_v2('infinity')",
        "UPDATE clock SET frozen_at = 'infinity'",
        "SELECT set_config('oncelog.now', 'infinity', false), expire_transactions_v2()",
    ):
        try:
            attacker.sql(attack)
        except psycopg.Error as exc:
            assert exc.sqlstate in {"42883", "42501"}, (attack, exc)
    assert attacker.sql("SELECT expire_transactions_v2()") == [(0,)]
    outcome = victim.call(
        txn.end_txn, transactional_id="open-tx", producer_id=ident.producer_id, epoch=ident.epoch,
        txn_number=ident.txn_number + 1, commit=True,
    )  # fmt: skip
    assert outcome == "committed"


# --- 4. one lock order: commits over shuffled partitions never deadlock -----------------------


def test_concurrent_commits_over_shuffled_partitions_never_deadlock(victim: Principal, engine: sa.Engine) -> None:
    """Finding 4: 3 producers x 300 transactions over 8 partitions in shuffled order gave 132
    deadlocks. Each transaction here writes its partitions in a shuffled order and sends its last
    batch with EndTxn (produce_end_txn_v1); a deadlock would surface as SerializationFailureError."""
    producers, per_producer = 3, 100
    deadlocks: list[BaseException] = []
    failures: list[BaseException] = []
    start = threading.Barrier(producers)

    def run(index: int) -> None:
        rng = random.Random(index)
        tid = f"shuffled-{index}"
        with victim.engine.connect() as conn:
            ident = txn.init_producer_id(conn, transactional_id=tid, transaction_timeout_ms=60_000)
            sequences = dict.fromkeys(range(PARTITIONS), 0)
            start.wait()
            for n in range(ident.txn_number + 1, ident.txn_number + 1 + per_producer):
                order = rng.sample(range(PARTITIONS), rng.randint(2, PARTITIONS))
                try:
                    for p in order[:-1]:
                        log.produce(
                            conn, topic=TOPIC, partition=p, records=_batch(1), producer_id=ident.producer_id,
                            producer_epoch=ident.epoch, base_sequence=sequences[p], transactional_id=tid,
                            txn_number=n,
                        )  # fmt: skip
                        sequences[p] += 1
                    last = order[-1]
                    _, outcome = log.produce_end_txn(
                        conn, topic=TOPIC, partition=last, records=_batch(1), producer_id=ident.producer_id,
                        producer_epoch=ident.epoch, base_sequence=sequences[last], transactional_id=tid,
                        txn_number=n,
                    )  # fmt: skip
                    sequences[last] += 1
                    assert outcome == "committed"
                except errors.SerializationFailureError as exc:
                    deadlocks.append(exc)
                    return
                except BaseException as exc:
                    failures.append(exc)
                    return

    threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures, failures[:3]
    assert not deadlocks, f"{len(deadlocks)} deadlocks: {deadlocks[0]}"
    with engine.connect() as conn:
        commits = conn.exec_driver_sql("SELECT count(*) FROM txn_history WHERE to_state = 'CompleteCommit'").scalar()
    assert commits == producers * per_producer


# --- 9. every decision under the lock it depends on -------------------------------------------


def _lock_waiters(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.exec_driver_sql(
                # A row lock is waited for as the holder's transaction id: no database in pg_locks.
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).scalar_one()
        )


def test_an_overlapping_retry_of_the_last_batch_is_answered_as_a_retry(victim: Principal, engine: sa.Engine) -> None:
    """Finding 9: the client's retry after a lost connection overlaps the original call. The
    original holds its locks (an open database transaction) while the retry arrives; the retry
    waits, then must see the commit and answer as a retry. Repeated, then raced freely."""
    ident = victim.call(txn.init_producer_id, transactional_id="retry-tx", transaction_timeout_ms=60_000)
    libpq = victim.url.replace("postgresql+psycopg", "postgresql")

    def last_batch(conn: psycopg.Connection[Any], n: int, seq: int) -> tuple[Any, ...]:
        row = conn.execute(
            "SELECT base_offset, duplicate, outcome FROM produce_end_txn_v1(%s, 0, %s, %s::smallint, %s, "
            "ARRAY[NULL]::bytea[], ARRAY['x'::bytea], NULL, NULL, 'retry-tx', %s)",
            (TOPIC, ident.producer_id, ident.epoch, seq, n),
        ).fetchone()
        assert row is not None
        return tuple(row)

    with (
        psycopg.connect(libpq, options="-c search_path=oncelog") as first,
        psycopg.connect(libpq, autocommit=True, options="-c search_path=oncelog") as retry,
    ):
        seq = 0
        for n in range(ident.txn_number + 1, ident.txn_number + 21):
            original = last_batch(first, n, seq)  # holds every lock until committed below
            answer: list[tuple[Any, ...]] = []
            waiter = threading.Thread(
                target=lambda n=n, seq=seq, answer=answer: answer.append(last_batch(retry, n, seq))
            )
            waiter.start()
            wait_until(lambda: _lock_waiters(engine) > 0, 10, "the retry waiting for the original's lock")
            first.commit()
            waiter.join(timeout=30)
            assert original[1:] == (False, "committed")
            assert answer == [(original[0], True, "already_committed")]
            seq += 1

    # Raced freely: two connections send the same last batch at once, 100 times.
    for n in range(ident.txn_number + 21, ident.txn_number + 121):
        results: list[tuple[Any, ...] | BaseException] = []
        go = threading.Barrier(2)

        def send(n: int = n, seq: int = seq, go: threading.Barrier = go, results: list[Any] = results) -> None:
            with psycopg.connect(libpq, autocommit=True, options="-c search_path=oncelog") as c:
                go.wait()
                try:
                    results.append(last_batch(c, n, seq))
                except psycopg.Error as exc:
                    results.append(exc)

        racers = [threading.Thread(target=send) for _ in range(2)]
        for r in racers:
            r.start()
        for r in racers:
            r.join(timeout=30)
        outcomes = sorted(r[2] for r in results if isinstance(r, tuple))
        assert outcomes == ["already_committed", "committed"], results
        seq += 1


def test_a_zombie_cannot_claim_a_rotated_producer_id(victim: Principal, engine: sa.Engine) -> None:
    """Finding 9: after epoch exhaustion, a new instance rotates the transactional id to a new
    producer id; the zombie holding the old (id, 32766) must be fenced, not handed the new id. The
    instance that asked for a rotation still gets its answer again when it retries."""
    zombie = victim.call(txn.init_producer_id, transactional_id="rot", transaction_timeout_ms=60_000)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE producers SET epoch = 32766 WHERE producer_id = %(p)s", {"p": zombie.producer_id})
    # A new instance (no identity) rotates; the zombie still believes it holds (old, 32766).
    fresh = victim.call(txn.init_producer_id, transactional_id="rot", transaction_timeout_ms=60_000)
    assert fresh.producer_id != zombie.producer_id and fresh.epoch == 0
    with pytest.raises(errors.ProducerFencedError):
        victim.call(
            txn.init_producer_id, transactional_id="rot", transaction_timeout_ms=60_000,
            producer_id=zombie.producer_id, epoch=32766,
        )  # fmt: skip
    # The old id cannot write at all: it holds the fencing epoch now.
    with engine.connect() as conn:
        assert conn.exec_driver_sql(
            "SELECT epoch, transactional_id FROM producers WHERE producer_id = %(p)s", {"p": zombie.producer_id}
        ).one() == (32767, None)

    # The genuine retry: the holder of (id, 32766) asks for the rotation and retries it.
    holder = victim.call(txn.init_producer_id, transactional_id="rot2", transaction_timeout_ms=60_000)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE producers SET epoch = 32766 WHERE producer_id = %(p)s", {"p": holder.producer_id})
    kwargs = {"transactional_id": "rot2", "transaction_timeout_ms": 60_000, "producer_id": holder.producer_id}
    rotated = victim.call(txn.init_producer_id, **kwargs, epoch=32766)
    assert rotated.producer_id != holder.producer_id and rotated.epoch == 0
    assert victim.call(txn.init_producer_id, **kwargs, epoch=32766) == rotated
    with pytest.raises(errors.ProducerFencedError):  # any other epoch of the old id
        victim.call(txn.init_producer_id, **kwargs, epoch=32765)


def test_a_member_commits_with_its_generation(victim: Principal) -> None:
    """Finding 9: offset_commit_v1 with a member id and a NULL generation skipped the check."""
    with victim.engine.connect() as conn:
        m = groups.join_group(conn, group_id="g", member_id=None, topics=[TOPIC], session_timeout_ms=30_000)
        offsets = {(TOPIC, p): (5, "") for (p,) in [(0,)]}
        for generation in (None, m.generation + 1):
            with pytest.raises(errors.IllegalGenerationError):
                groups.offset_commit(conn, group_id="g", offsets=offsets, member_id=m.member_id, generation=generation)
        groups.offset_commit(conn, group_id="g", offsets=offsets, member_id=m.member_id, generation=m.generation)


def test_a_group_member_is_bound_to_its_principal(victim: Principal, attacker: Principal, engine: sa.Engine) -> None:
    """Migration 0021: with a victim's member id (visible in group_status), another principal
    cannot heartbeat for it (a heartbeat naming none of its partitions would hand them to another
    member while the victim still reads them), make it leave, rejoin as it, commit for it, or take
    its static instance over."""
    join = {"group_id": "g", "topics": [TOPIC], "session_timeout_ms": 60_000}
    me = victim.call(groups.join_group, **join, group_instance_id="inst")
    assert len(me.assignment) == PARTITIONS
    them = attacker.call(groups.join_group, **join)  # a member of its own: half the partitions are its target
    assert them.assignment == frozenset() and them.reconciling

    def unknown(call: Any, **kwargs: Any) -> None:
        with pytest.raises(errors.UnknownMemberIdError):
            attacker.call(call, **kwargs)

    unknown(groups.heartbeat, group_id="g", member_id=me.member_id, group_instance_id="inst", owned=[])
    unknown(groups.heartbeat, group_id="g", member_id=me.member_id, owned=[])
    unknown(groups.join_group, **join, member_id=me.member_id, group_instance_id="inst")
    offsets = {(TOPIC, 0): (5, "")}
    unknown(groups.offset_commit, group_id="g", offsets=offsets, member_id=me.member_id, generation=me.generation)
    attacker.call(groups.leave_group, group_id="g", member_id=me.member_id)  # changes nothing
    with pytest.raises(errors.FencedInstanceIdError, match="another principal"):
        attacker.call(groups.join_group, **join, group_instance_id="inst")
    # The victim still owns everything; the attacker's own member still waits for its share.
    with engine.connect() as conn:
        owners = conn.exec_driver_sql(
            "SELECT member_id, count(*) FROM member_assignments WHERE group_id = 'g' GROUP BY member_id"
        ).all()
    assert [tuple(r) for r in owners] == [(me.member_id, PARTITIONS)]
    assert attacker.call(groups.heartbeat, group_id="g", member_id=them.member_id, owned=[]).assignment == frozenset()
    # The victim lets go of what moves; only then does the attacker's member get it.
    seen = victim.call(
        groups.heartbeat, group_id="g", member_id=me.member_id, group_instance_id="inst", owned=me.assignment
    )
    victim.call(groups.heartbeat, group_id="g", member_id=me.member_id, group_instance_id="inst", owned=seen.assignment)
    got = attacker.call(groups.heartbeat, group_id="g", member_id=them.member_id, owned=[])
    assert got.assignment == me.assignment - seen.assignment and len(got.assignment) == PARTITIONS // 2


# --- 5, 7. nothing malformed gets in; nothing stored stops a reader ----------------------------

BAD_HEADERS = [
    "[1]",
    '[{"key": "k"}]',
    '[{"key": "k", "value": "not base64!"}]',
    '[{"key": "k", "value": "YQ"}]',  # unpadded
    '[{"key": 1, "value": null}]',
    '[{"key": "k", "value": null, "extra": 1}]',
    '[{"key": "k", "value": 5}]',
    '[{"value": "YQ=="}]',
    '{"key": "k", "value": null}',
    '"text"',
    "null",
    '[[{"key": "k", "value": null}]]',
]


@pytest.mark.parametrize("headers", BAD_HEADERS)
def test_headers_a_reader_cannot_decode_are_refused(victim: Principal, engine: sa.Engine, headers: str) -> None:
    with pytest.raises(psycopg.Error) as info:
        victim.sql(
            "SELECT * FROM produce_v2(%s, 0, NULL, NULL, NULL, ARRAY[NULL]::bytea[], ARRAY['x'::bytea], "
            "ARRAY[%s::jsonb])",
            (TOPIC, headers),
        )
    assert info.value.sqlstate == "OL107"
    assert _log(engine) == []


@pytest.mark.parametrize(
    "timestamp", ["infinity", "-infinity", "20000-01-01 00:00:00+00", "1969-12-31 23:59:59+00", "FUTURE"]
)
def test_timestamps_are_bounded(victim: Principal, engine: sa.Engine, timestamp: str) -> None:
    if timestamp == "FUTURE":  # beyond the default message_timestamp_after_max_ms of one hour
        timestamp = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    with pytest.raises(psycopg.Error) as info:
        victim.sql(
            "SELECT * FROM produce_v2(%s, 0, NULL, NULL, NULL, ARRAY[NULL]::bytea[], ARRAY['x'::bytea], NULL, "
            "ARRAY[%s::timestamptz])",
            (TOPIC, timestamp),
        )
    assert info.value.sqlstate == "OL109", info.value
    assert _log(engine) == []


def test_the_future_bound_is_a_topic_setting(db_url: str, engine: sa.Engine) -> None:
    with Admin(db_url) as admin, Producer(db_url) as producer:
        admin.create_topic("late", partitions=1, config={"message_timestamp_after_max_ms": 3 * 3600_000})
        assert admin.describe_topic("late").config["message_timestamp_after_max_ms"] == 3 * 3600_000
        two_hours = datetime.now(UTC) + timedelta(hours=2)
        assert producer.send("late", b"ok", timestamp=two_hours).result(timeout=30).offset == 0
        with pytest.raises(errors.InvalidTimestampError):
            producer.send("late", b"no", timestamp=two_hours + timedelta(hours=2)).result(timeout=30)
        admin.alter_topic_config("late", {"message_timestamp_after_max_ms": None})  # back to one hour
        assert admin.describe_topic("late").config["message_timestamp_after_max_ms"] == 3600_000


def _write_as_owner(engine: sa.Engine, partition: int, rows: list[tuple[bytes, str | None, str]]) -> None:
    """Records only the owner can write (bypassing produce_v2): what a database written before
    revision 0017 may hold."""
    with engine.begin() as conn:
        for value, headers, ts in rows:
            conn.exec_driver_sql(
                'INSERT INTO records (topic_id, partition, "offset", is_transactional, value, headers, "timestamp") '
                "SELECT t.topic_id, p.partition, p.next_offset, false, %(v)s, %(h)s::jsonb, %(ts)s::timestamptz "
                "FROM topics t JOIN partitions p USING (topic_id) WHERE t.name = %(t)s AND p.partition = %(p)s",
                {"v": value, "h": headers, "ts": ts, "t": TOPIC, "p": partition},
            )
            conn.exec_driver_sql(
                "UPDATE partitions SET next_offset = next_offset + 1 FROM topics t "
                "WHERE t.topic_id = partitions.topic_id AND t.name = %(t)s AND partition = %(p)s",
                {"t": TOPIC, "p": partition},
            )


@pytest.mark.parametrize(
    ("headers", "timestamp"),
    [
        ('[{"key": "k", "value": "%%%"}]', "2024-01-01 00:00:00+00"),
        ("[1]", "2024-01-01 00:00:00+00"),
        (None, "infinity"),
        (None, "-infinity"),
        (None, "20000-01-01 00:00:00+00"),
    ],
)
def test_a_reader_names_a_stored_bad_record_and_seeks_past_it(
    victim: Principal, engine: sa.Engine, headers: str | None, timestamp: str
) -> None:
    _write_as_owner(
        engine,
        0,
        [(b"before", None, "2024-01-01 00:00:00+00"), (b"bad", headers, timestamp), (b"after", None, "2024-01-01")],
    )
    _write_as_owner(engine, 1, [(b"other", None, "2024-01-01 00:00:00+00")])
    tp0, tp1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
    with Consumer(victim.url, isolation_level="read_uncommitted") as consumer:
        consumer.assign([tp0, tp1])
        consumer.seek(tp0, 0)
        consumer.seek(tp1, 0)
        seen: list[bytes | None] = []
        with pytest.raises(errors.CorruptRecordError) as info:
            for _ in range(5):
                seen.extend(r.value for r in consumer.poll(timeout=1.0))
        assert (info.value.topic, info.value.partition, info.value.offset) == (TOPIC, 0, 1)
        consumer.seek(tp0, info.value.offset + 1)
        for _ in range(3):
            seen.extend(r.value for r in consumer.poll(timeout=0.5))
    assert b"bad" not in seen
    assert {b"after", b"other"} <= set(seen)
