"""produce_batches_v1 (migration 0020): many partitions' batches in one database transaction, each
answered on its own. Tried as separate login roles with ACLs on, with hostile arguments, and with
real racing threads."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from oncelog import errors
from oncelog.store import log, txn
from oncelog.store.records import MAX_BATCHES_PER_REQUEST, ProduceBatch, ProduceResult, RecordIn
from tests.support.roles import Principal, client_principal

TOPIC = "t"
PARTITIONS = 8


@pytest.fixture
def acls_on(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"SELECT create_topic_v1('{TOPIC}', {PARTITIONS})")
        conn.exec_driver_sql("SELECT create_topic_v1('secret', 2)")
        conn.exec_driver_sql("SELECT set_acl_enforcement_v1(true)")


@pytest.fixture
def writer_of_t(acls_on: None, engine: sa.Engine, db_url: str) -> Iterator[Principal]:
    """A client that may write topic t only (not 'secret')."""
    yield from client_principal(engine, db_url, [("topic", TOPIC, "write")])


def _records(n: int, tag: str) -> list[RecordIn]:
    return [RecordIn(value=f"{tag}-{i}".encode()) for i in range(n)]


def _values(engine: sa.Engine) -> dict[tuple[str, int], list[bytes]]:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT t.name, r.partition, r.value FROM records r JOIN topics t USING (topic_id) "
            'WHERE r.control_type IS NULL ORDER BY 1, 2, r."offset"'
        ).all()
    out: dict[tuple[str, int], list[bytes]] = {}
    for name, partition, value in rows:
        out.setdefault((name, int(partition)), []).append(bytes(value))
    return out


def _produce(who: Principal, batches: list[ProduceBatch], **identity: Any) -> list[ProduceResult | errors.OncelogError]:
    answers: list[ProduceResult | errors.OncelogError] = who.call(log.produce_batches, batches=batches, **identity)
    return answers


def test_batches_for_many_partitions_land_in_one_call(client: Principal, engine: sa.Engine) -> None:
    ident = client.call(log.init_producer_id)
    batches = [ProduceBatch(TOPIC, p, 0, _records(p + 1, f"p{p}")) for p in (5, 0, 3)]
    answers = _produce(client, batches, producer_id=ident.producer_id, producer_epoch=ident.epoch)
    assert [(a.base_offset, a.last_offset, a.duplicate) for a in answers if isinstance(a, ProduceResult)] == [
        (0, 5, False),
        (0, 0, False),
        (0, 3, False),
    ]
    # The same request again: every batch a duplicate, with its first offsets; nothing appended.
    again = _produce(client, batches, producer_id=ident.producer_id, producer_epoch=ident.epoch)
    assert [(a.base_offset, a.duplicate) for a in again if isinstance(a, ProduceResult)] == [
        (0, True),
        (0, True),
        (0, True),
    ]
    assert _values(engine) == {(TOPIC, b.partition): [r.value for r in b.records] for b in batches}  # type: ignore[union-attr]


def test_a_refused_batch_is_its_own_answer_and_the_others_land(client: Principal, engine: sa.Engine) -> None:
    ident = client.call(log.init_producer_id)
    with engine.begin() as conn:
        conn.exec_driver_sql("SELECT alter_topic_config_v1('t', '{\"max_message_bytes\": 12}')")
    batches = [
        ProduceBatch(TOPIC, 0, 0, _records(1, "a")),
        ProduceBatch(TOPIC, 1, 5, _records(1, "o")),  # out of order
        ProduceBatch(TOPIC, 2, 0, [RecordIn(b"x" * 13)]),
        ProduceBatch(TOPIC, 99, 0, _records(1, "n")),
        ProduceBatch("no-such-topic", 0, 0, _records(1, "n")),
        ProduceBatch(TOPIC, 3, 0, _records(2, "b")),
    ]
    answers = _produce(client, batches, producer_id=ident.producer_id, producer_epoch=ident.epoch)
    kinds = [type(a).__name__ for a in answers]
    assert kinds == [
        "ProduceResult",
        "OutOfOrderSequenceError",
        "RecordTooLargeError",
        "UnknownTopicOrPartitionError",
        "UnknownTopicOrPartitionError",
        "ProduceResult",
    ]
    assert _values(engine) == {(TOPIC, 0): [b"a-0"], (TOPIC, 3): [b"b-0", b"b-1"]}


def test_a_denied_topic_is_refused_and_its_partitions_never_locked(writer_of_t: Principal, engine: sa.Engine) -> None:
    ident = writer_of_t.call(log.init_producer_id)
    answers = _produce(
        writer_of_t,
        [ProduceBatch("secret", 0, 0, _records(1, "s")), ProduceBatch(TOPIC, 0, 0, _records(1, "ok"))],
        producer_id=ident.producer_id,
        producer_epoch=ident.epoch,
    )
    assert isinstance(answers[0], errors.TopicAuthorizationError)
    assert isinstance(answers[1], ProduceResult)
    assert _values(engine) == {(TOPIC, 0): [b"ok-0"]}
    # While another session holds the denied topic's partition, the request still goes through:
    # it never waits for (or locks) a partition it may not write.
    with engine.connect() as holder:
        holder.exec_driver_sql(
            "SELECT 1 FROM partitions p JOIN topics t USING (topic_id) WHERE t.name = 'secret' FOR UPDATE"
        )
        with writer_of_t.engine.connect() as conn:
            conn.exec_driver_sql("SET lock_timeout = '2s'")
            answers = log.produce_batches(
                conn,
                batches=[ProduceBatch("secret", 0, 1, _records(1, "s")), ProduceBatch(TOPIC, 0, 1, _records(1, "ok"))],
                producer_id=ident.producer_id,
                producer_epoch=ident.epoch,
            )
        holder.rollback()
    assert isinstance(answers[0], errors.TopicAuthorizationError) and isinstance(answers[1], ProduceResult)


def test_another_principals_producer_id_is_unknown_and_its_row_never_locked(
    client: Principal, other: Principal, engine: sa.Engine
) -> None:
    victim = other.call(log.init_producer_id)
    answers = _produce(
        client,
        [ProduceBatch(TOPIC, 0, 0, _records(1, "x")), ProduceBatch(TOPIC, 1, 0, _records(1, "y"))],
        producer_id=victim.producer_id,
        producer_epoch=victim.epoch,
    )
    assert all(isinstance(a, errors.UnknownProducerIdError) for a in answers)
    assert _values(engine) == {}
    # The victim bumps its epoch (FOR UPDATE of its producer row) while the attacker's request
    # sits in a transaction the attacker keeps open: it never locked that row, so nothing waits.
    libpq = client.url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(libpq, options="-c search_path=oncelog") as attacker:
        attacker.execute(
            "SELECT * FROM produce_batches_v1(%s, %s::smallint, NULL, NULL, '{t,t}', '{0,1}', '{0,0}', '{1,1}', "
            "'{NULL,NULL}'::bytea[], '{x,y}'::bytea[], NULL, NULL)",
            (victim.producer_id, victim.epoch),
        )
        with other.engine.connect() as conn:
            conn.exec_driver_sql("SET lock_timeout = '2s'")
            bumped = log.init_producer_id(conn, producer_id=victim.producer_id, epoch=victim.epoch)
        attacker.rollback()
    assert bumped.epoch == victim.epoch + 1


@pytest.mark.parametrize(
    ("what", "batches"),
    [
        ("no batch", []),
        (
            "too many",
            [ProduceBatch(TOPIC, p % PARTITIONS, None, _records(1, "x")) for p in range(MAX_BATCHES_PER_REQUEST + 1)],
        ),
    ],
)
def test_a_request_of_no_batch_or_too_many_is_refused_whole(
    client: Principal, engine: sa.Engine, what: str, batches: list[ProduceBatch]
) -> None:
    assert MAX_BATCHES_PER_REQUEST == 64  # "too many" sends one more
    with pytest.raises(errors.InvalidRequestError):
        _produce(client, batches)
    assert _values(engine) == {}


def test_malformed_arrays_are_refused_whole_by_the_store(client: Principal, engine: sa.Engine) -> None:
    # (topics, partitions, sequences, counts, keys, values): one of each wrong.
    bad = [
        ("{t}", "{0,1}", None, "{1}", "{NULL}", "{x}"),  # partitions longer than topics
        ("{t}", "{0}", None, "{2}", "{NULL}", "{x}"),  # the counts add up to more records
        ("{t}", "{0}", None, "{0}", "{}", "{}"),  # an empty batch
        ("{t,t}", "{0,1}", "{0}", "{1,1}", "{NULL,NULL}", "{x,y}"),  # fewer sequences than batches
        ("{t}", "{0}", None, "{1}", "{NULL,NULL}", "{x}"),  # more keys than values
    ]
    for args in bad:
        with pytest.raises(Exception, match=r"differ in length|at least one record|add up"):
            client.sql(
                "SELECT * FROM produce_batches_v1(NULL, NULL, NULL, NULL, %s::text[], %s::integer[], "
                "%s::integer[], %s::integer[], %s::bytea[], %s::bytea[], NULL, NULL)",
                args,
            )
    assert _values(engine) == {}


def test_a_transactional_request_joins_the_transaction_and_is_fenced_whole(
    client: Principal, engine: sa.Engine
) -> None:
    ident = client.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)
    n = ident.txn_number + 1
    batches = [ProduceBatch(TOPIC, p, 0, _records(1, f"p{p}")) for p in (2, 1)]
    answers = _produce(
        client, batches, producer_id=ident.producer_id, producer_epoch=ident.epoch, transactional_id="tx", txn_number=n
    )
    assert all(isinstance(a, ProduceResult) for a in answers)
    with engine.connect() as conn:
        state, partitions = conn.exec_driver_sql(
            "SELECT state, partitions FROM transaction_status WHERE transactional_id = 'tx'"
        ).one()
    assert state == "Ongoing" and sorted(partitions) == ["t-1@0", "t-2@0"]
    # A newer instance fences this one: its next request fails whole (the transaction's check
    # comes before any batch), nothing of it lands; a request of one batch is answered with it.
    client.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)
    late = [ProduceBatch(TOPIC, 3, 0, _records(1, "late")), ProduceBatch(TOPIC, 0, 0, _records(1, "late"))]
    identity = {"producer_id": ident.producer_id, "producer_epoch": ident.epoch, "transactional_id": "tx"}
    with pytest.raises(errors.ProducerFencedError):
        _produce(client, late, **identity, txn_number=n)
    (alone,) = _produce(client, late[:1], **identity, txn_number=n)
    assert isinstance(alone, errors.ProducerFencedError)
    assert (TOPIC, 3) not in _values(engine)


def test_requests_naming_partitions_in_any_order_never_deadlock(client: Principal, engine: sa.Engine) -> None:
    # Three producers, 100 requests each over the same 8 partitions, each request's batches in a
    # shuffled order: the store locks them sorted, so no two requests deadlock.
    rounds, failures = 100, []
    start = threading.Barrier(3)

    def producer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with client.engine.connect() as conn:
                ident = log.init_producer_id(conn)
                sequences = dict.fromkeys(range(PARTITIONS), 0)
                start.wait()
                for _ in range(rounds):
                    order = rng.sample(range(PARTITIONS), k=rng.randint(2, PARTITIONS))
                    batches = [ProduceBatch(TOPIC, p, sequences[p], _records(2, str(seed))) for p in order]
                    answers = log.produce_batches(
                        conn, batches=batches, producer_id=ident.producer_id, producer_epoch=ident.epoch
                    )
                    assert all(isinstance(a, ProduceResult) and not a.duplicate for a in answers), answers
                    for p in order:
                        sequences[p] += 2
        except BaseException as exc:
            failures.append(exc)
            start.abort()

    threads = [threading.Thread(target=producer, args=(seed,)) for seed in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    with engine.connect() as conn:
        deadlocks = conn.exec_driver_sql("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        assert deadlocks.scalar_one() == 0
        # Dense offsets: each partition's log is exactly its records, in commit order.
        rows = conn.exec_driver_sql(
            'SELECT partition, count(*), max("offset") FROM records WHERE control_type IS NULL GROUP BY 1'
        ).all()
    assert all(int(n) == int(last) + 1 for _, n, last in rows)
