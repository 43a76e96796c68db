"""produce_end_txn_v2 (migration 0019): a transaction's queued batches for every partition, its
consumer offsets and EndTxn in one database transaction. Tried as separate login roles with ACLs
on, including callers that choose hostile arguments, and with real racing threads."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from oncelog import errors
from oncelog.store import groups, log, txn
from oncelog.store.records import CommitResult, ProduceBatch, RecordIn, TxnOffsets
from tests.support.roles import Principal

TOPIC = "t"
PARTITIONS = 6


@pytest.fixture
def acls_on(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"SELECT create_topic_v1('{TOPIC}', {PARTITIONS})")
        conn.exec_driver_sql("SELECT create_topic_v1('in', 2)")
        conn.exec_driver_sql("SELECT set_acl_enforcement_v1(true)")


def _records(n: int, tag: str) -> list[RecordIn]:
    return [RecordIn(value=f"{tag}-{i}".encode(), key=b"k" if i % 2 else None) for i in range(n)]


def _data(engine: sa.Engine) -> list[tuple[int, int, bytes | None, bool]]:
    """Every data record: (partition, offset, value, aborted)."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            'SELECT partition, "offset", value, aborted FROM records WHERE control_type IS NULL ORDER BY 1, 2'
        ).all()
    return [(int(r[0]), int(r[1]), r[2], bool(r[3])) for r in rows]


def _markers(engine: sa.Engine) -> list[tuple[int, str]]:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            'SELECT partition, control_type FROM records WHERE control_type IS NOT NULL ORDER BY 1, "offset"'
        ).all()
    return [(int(r[0]), str(r[1])) for r in rows]


def _commit(
    who: Principal,
    ident: Any,
    tid: str,
    n: int,
    batches: list[ProduceBatch],
    offsets: TxnOffsets | None = None,
) -> tuple[list[Any], str]:
    result: CommitResult = who.call(
        log.produce_offsets_end_txn, transactional_id=tid, producer_id=ident.producer_id,
        producer_epoch=ident.epoch, txn_number=n, batches=batches, offsets=offsets,
    )  # fmt: skip
    return result.results, result.outcome


def test_batches_for_many_partitions_offsets_and_end_txn_land_together(client: Principal, engine: sa.Engine) -> None:
    ident = client.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)
    member = client.call(groups.join_group, group_id="g", topics=["in"], session_timeout_ms=30_000)
    owned = sorted(member.assignment)
    batches = [ProduceBatch(TOPIC, p, 0, _records(p + 1, f"p{p}")) for p in (3, 0, 5, 1)]
    offsets = TxnOffsets("g", member.member_id, None, member.generation, {tp: (7, "md") for tp in owned})
    results, outcome = _commit(client, ident, "tx", ident.txn_number + 1, batches, offsets)

    assert outcome == "committed"
    assert [(r.base_offset, r.last_offset, r.duplicate) for r in results] == [
        (0, 3, False),
        (0, 0, False),
        (0, 5, False),
        (0, 1, False),
    ]
    assert _data(engine) == sorted(
        (b.partition, i, f"p{b.partition}-{i}".encode(), False) for b in batches for i in range(len(b.records))
    )
    assert _markers(engine) == [(p, "commit") for p in (0, 1, 3, 5)]
    fetched = client.call(groups.offset_fetch, group_id="g", partitions=owned)
    assert {tp: (o.offset, o.metadata) for tp, o in fetched.items()} == {tp: (7, "md") for tp in owned}

    # A retry of the same call (its reply lost): the original offsets, nothing appended again.
    again, outcome = _commit(client, ident, "tx", ident.txn_number + 1, batches, offsets)
    assert outcome == "already_committed"
    assert [(r.base_offset, r.last_offset, r.duplicate) for r in again] == [
        (r.base_offset, r.last_offset, True) for r in results
    ]
    assert len(_data(engine)) == sum(len(b.records) for b in batches)
    # A "retry" naming a batch that was not in the commit is refused: it would be lost silently.
    with pytest.raises(errors.InvalidTxnStateError, match="already committed, without this batch"):
        _commit(client, ident, "tx", ident.txn_number + 1, [ProduceBatch(TOPIC, 2, 0, _records(1, "late"))])


def test_a_partitions_batches_follow_one_another_and_earlier_batches_join_the_commit(
    client: Principal, engine: sa.Engine
) -> None:
    ident = client.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)
    n = ident.txn_number + 1
    # A batch sent before the commit (its own database transaction) is part of the transaction.
    client.call(
        log.produce, topic=TOPIC, partition=2, records=_records(2, "early"), producer_id=ident.producer_id,
        producer_epoch=ident.epoch, base_sequence=0, transactional_id="tx", txn_number=n,
    )  # fmt: skip
    batches = [ProduceBatch(TOPIC, 2, 2, _records(3, "a")), ProduceBatch(TOPIC, 2, 5, _records(1, "b")),
               ProduceBatch(TOPIC, 4, 0, _records(1, "c"))]  # fmt: skip
    results, outcome = _commit(client, ident, "tx", n, batches)
    assert outcome == "committed"
    assert [(r.base_offset, r.last_offset) for r in results] == [(2, 4), (5, 5), (0, 0)]
    assert _markers(engine) == [(2, "commit"), (4, "commit")]
    # Out of sequence inside one call: refused, and nothing of that call lands.
    n += 1
    bad = [ProduceBatch(TOPIC, 0, 0, _records(1, "x")), ProduceBatch(TOPIC, 2, 99, _records(1, "y"))]
    before = _data(engine)
    with pytest.raises(errors.OutOfOrderSequenceError):
        _commit(client, ident, "tx", n, bad)
    assert _data(engine) == before
    assert client.call(txn.describe_transaction, transactional_id="tx").state == "CompleteCommit"


def test_one_failing_part_rolls_back_the_whole_commit(client: Principal, engine: sa.Engine) -> None:
    ident = client.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)
    member = client.call(groups.join_group, group_id="g", topics=["in"], session_timeout_ms=30_000)
    batches = [ProduceBatch(TOPIC, 0, 0, _records(2, "a")), ProduceBatch(TOPIC, 1, 0, _records(2, "b"))]
    stale = TxnOffsets("g", member.member_id, None, member.generation + 5, {("in", 0): (3, "")})
    with pytest.raises(errors.IllegalGenerationError):
        _commit(client, ident, "tx", ident.txn_number + 1, batches, stale)
    unknown = [*batches, ProduceBatch(TOPIC, PARTITIONS + 3, 0, _records(1, "c"))]
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        _commit(client, ident, "tx", ident.txn_number + 1, unknown)
    assert _data(engine) == [] and _markers(engine) == []
    assert client.call(groups.offset_fetch, group_id="g", partitions=[("in", 0)])[("in", 0)].offset is None
    # The same transaction then commits whole.
    _, outcome = _commit(client, ident, "tx", ident.txn_number + 1, batches)
    assert outcome == "committed" and len(_data(engine)) == 4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"counts": [2], "values": 1}, "add up"),
        ({"sequence": -1}, "base_sequence must be"),
        ({"group_only_offsets": True}, "need a group id"),
    ],
)
def test_malformed_requests_are_refused_before_any_lock(
    client: Principal, engine: sa.Engine, kwargs: dict[str, Any], match: str
) -> None:
    ident = client.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)
    args = {
        "tid": "tx", "pid": ident.producer_id, "epoch": ident.epoch, "n": ident.txn_number + 1,
        "topics": [TOPIC], "partitions": [0], "seqs": [kwargs.get("sequence", 0)], "counts": kwargs.get("counts", [1]),
        "values": [b"v"] * kwargs.get("values", 1),
        "ot": ["in"] if kwargs.get("group_only_offsets") else None,
        "o": [1] if kwargs.get("group_only_offsets") else None,
    }  # fmt: skip
    if kwargs.get("sequence") == -1:
        with pytest.raises(errors.InvalidRecordError, match=match):
            _commit(client, ident, "tx", ident.txn_number + 1, [ProduceBatch(TOPIC, 0, -1, _records(1, "x"))])
        return
    with engine.connect() as conn, pytest.raises(sa.exc.DBAPIError, match=match):
        conn.exec_driver_sql(
            "SELECT * FROM produce_end_txn_v2(%(tid)s, %(pid)s, %(epoch)s::smallint, %(n)s, %(topics)s::text[], "
            "%(partitions)s::integer[], %(seqs)s::integer[], %(counts)s::integer[], "
            "array_fill(NULL::bytea, ARRAY[cardinality(%(values)s::bytea[])]), %(values)s::bytea[], NULL, NULL, "
            "NULL, NULL, NULL, NULL, %(ot)s::text[], ARRAY[0], %(o)s::bigint[], NULL)",
            args,
        )
    assert _data(engine) == []


def test_record_timestamps_are_checked_as_produce_v2_checks_them(client: Principal, engine: sa.Engine) -> None:
    ident = client.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)
    future = datetime.now(UTC) + timedelta(days=3)
    batches = [
        ProduceBatch(TOPIC, 0, 0, _records(1, "ok")),
        ProduceBatch(TOPIC, 1, 0, [RecordIn(b"x", timestamp=future)]),
    ]
    with pytest.raises(errors.InvalidTimestampError):
        _commit(client, ident, "tx", ident.txn_number + 1, batches)
    assert _data(engine) == []


def test_another_principal_cannot_commit_or_replay_a_transaction(
    client: Principal, other: Principal, engine: sa.Engine
) -> None:
    ident = client.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)
    n = ident.txn_number + 1
    client.call(
        log.produce, topic=TOPIC, partition=0, records=_records(1, "open"), producer_id=ident.producer_id,
        producer_epoch=ident.epoch, base_sequence=0, transactional_id="tx", txn_number=n,
    )  # fmt: skip
    # Committing the victim's open transaction, with or without a forged batch: refused.
    for batches in ([], [ProduceBatch(TOPIC, 0, 1, _records(1, "forged"))]):
        with pytest.raises(errors.ProducerFencedError):
            _commit(other, ident, "tx", n, batches)
    assert _markers(engine) == []
    assert [v for _, _, v, _ in _data(engine)] == [b"open-0"]
    results, outcome = _commit(client, ident, "tx", n, [ProduceBatch(TOPIC, 1, 0, _records(1, "mine"))])
    assert outcome == "committed"
    # A replay of the committed call by another principal learns nothing of its offsets.
    with pytest.raises(errors.ProducerFencedError) as info:
        _commit(other, ident, "tx", n, [ProduceBatch(TOPIC, 1, 0, _records(1, "mine"))])
    assert str(results[0].base_offset) not in info.value.message.replace("tx", "")


def test_acls_apply_to_every_topic_and_the_group(client: Principal, engine: sa.Engine) -> None:
    """Every batch's topic needs write, the group and the offsets' topics read."""
    with engine.begin() as conn:
        conn.exec_driver_sql("SELECT create_topic_v1('secret', 1)")
        # Only the topic t and the input topic from now on: 'secret' is not the client's.
        conn.exec_driver_sql(f"SELECT delete_acls_v1('{client.name}', 'topic')")
        for topic in (TOPIC, "in"):
            conn.exec_driver_sql(f"SELECT create_acl_v1('{client.name}', 'topic', '{topic}')")
    ident = client.call(txn.init_producer_id, transactional_id="tx", transaction_timeout_ms=60_000)
    batches = [ProduceBatch(TOPIC, 0, 0, _records(1, "ok")), ProduceBatch("secret", 0, 0, _records(1, "no"))]
    with pytest.raises(errors.TopicAuthorizationError):
        _commit(client, ident, "tx", ident.txn_number + 1, batches)
    member = client.call(groups.join_group, group_id="g", topics=["in"], session_timeout_ms=30_000)
    offsets = TxnOffsets("g", member.member_id, None, member.generation, {("secret", 0): (1, "")})
    with pytest.raises(errors.TopicAuthorizationError):
        _commit(client, ident, "tx", ident.txn_number + 1, batches[:1], offsets)
    assert _data(engine) == []


def test_racing_commits_over_shuffled_partitions_and_groups_never_deadlock(
    client: Principal, engine: sa.Engine
) -> None:
    """Producers commit shuffled partition sets with offsets of one shared group while the group's
    members heartbeat and plain EndTxn commits run: every lock is taken in the documented order,
    so no deadlock (SerializationFailureError) and every commit lands."""
    producers, per_producer = 4, 40
    members = [client.call(groups.join_group, group_id="shared", topics=["in"], session_timeout_ms=60_000)]
    members.append(client.call(groups.join_group, group_id="shared", topics=["in"], session_timeout_ms=60_000))
    failures: list[BaseException] = []
    start = threading.Barrier(producers + 1)
    done = threading.Event()

    def produce(index: int) -> None:
        rng = random.Random(index)
        tid = f"race-{index}"
        sequences = dict.fromkeys(range(PARTITIONS), 0)
        try:
            with client.engine.connect() as conn:
                ident = txn.init_producer_id(conn, transactional_id=tid, transaction_timeout_ms=60_000)
                start.wait()
                for n in range(ident.txn_number + 1, ident.txn_number + 1 + per_producer):
                    order = rng.sample(range(PARTITIONS), rng.randint(1, PARTITIONS))
                    if rng.random() < 0.3:  # one batch on its own first, the rest with the commit
                        p = order.pop()
                        log.produce(
                            conn, topic=TOPIC, partition=p, records=_records(1, tid), producer_id=ident.producer_id,
                            producer_epoch=ident.epoch, base_sequence=sequences[p], transactional_id=tid,
                            txn_number=n,
                        )  # fmt: skip
                        sequences[p] += 1
                    batches = []
                    for p in order:
                        batches.append(ProduceBatch(TOPIC, p, sequences[p], _records(2, tid)))
                        sequences[p] += 2
                    group = groups.heartbeat(conn, group_id="shared", member_id=members[index % 2].member_id)
                    owned = sorted(group.assignment)
                    offsets = TxnOffsets("shared", members[index % 2].member_id, None, group.generation,
                                         {tp: (n, tid) for tp in owned}) if owned else None  # fmt: skip
                    outcome = log.produce_offsets_end_txn(
                        conn, transactional_id=tid, producer_id=ident.producer_id, producer_epoch=ident.epoch,
                        txn_number=n, batches=batches, offsets=offsets,
                    ).outcome  # fmt: skip
                    assert outcome == "committed"
        except BaseException as exc:
            failures.append(exc)
            start.abort()

    def heartbeats() -> None:
        start.wait()
        with client.engine.connect() as conn:
            while not done.is_set():
                for m in members:
                    groups.heartbeat(conn, group_id="shared", member_id=m.member_id)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
    beat = threading.Thread(target=heartbeats)
    for t in [*threads, beat]:
        t.start()
    for t in threads:
        t.join(timeout=300)
    done.set()
    beat.join(timeout=60)
    assert not failures, failures[:3]
    with engine.connect() as conn:
        commits = conn.exec_driver_sql("SELECT count(*) FROM txn_history WHERE to_state = 'CompleteCommit'").scalar()
    assert commits == producers * per_producer
