"""The set-based append (migration 0023): ``append_batches_v2`` appends every batch of a request in one
statement per table, and hands anything but the common case to ``produce_v2``. Proved against
``produce_v2`` batch by batch: the same requests, on two topics alike, leave the same log, partition
counters, sequence windows, transaction spans and answers. Each request also says which path it took
(``pg_stat_xact_user_functions``, in the caller's own transaction), so a test cannot pass by the
fallback alone."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from oncelog import errors
from oncelog.store import log, txn
from oncelog.store.records import ProduceBatch, ProduceResult, RecordIn

PARTITIONS = 4
FAST, REF = "fast", "ref"


@pytest.fixture
def conn(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A superuser connection counting function calls (track_functions needs a superuser)."""
    with engine.begin() as setup:
        for topic in (FAST, REF):
            setup.exec_driver_sql(f"SELECT create_topic_v1('{topic}', {PARTITIONS})")
    with engine.connect() as c:
        c.exec_driver_sql("SET track_functions = 'all'")
        c.commit()
        yield c


def _counts(conn: sa.Connection) -> dict[str, int]:
    """Function calls this session has not yet reported (pg_stat_xact_user_functions). A backend
    reports only between transactions, so two readings in one transaction bracket its calls."""
    rows = conn.exec_driver_sql("SELECT funcname, calls FROM pg_stat_xact_user_functions").all()
    return {str(name): int(calls) for name, calls in rows}


def _paths(conn: sa.Connection, before: dict[str, int]) -> tuple[int, int]:
    """Calls of append_batches_v2 and of produce_v2 since ``before``, in the open transaction."""
    now = _counts(conn)
    return tuple(now.get(f, 0) - before.get(f, 0) for f in ("append_batches_v2", "produce_v2"))  # type: ignore[return-value]


def _records(rng: random.Random, n: int, tag: str, *, rich: bool) -> list[RecordIn]:
    """``n`` records; ``rich`` ones have headers, explicit timestamps and some NULL keys or values."""
    out = []
    for i in range(n):
        if not rich:
            out.append(RecordIn(value=f"{tag}-{i}".encode() * rng.randint(1, 5), key=f"k{i}".encode()))
            continue
        out.append(
            RecordIn(
                value=None if i % 7 == 3 else f"{tag}-{i}".encode(),
                key=None if i % 2 else f"key-{tag}-{i}".encode(),
                headers=[("h", f"{i}".encode()), ("empty", None)] if i % 3 else None,
                timestamp=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i),
            )
        )
    return out


def _snapshot(conn: sa.Connection, topic: str, producer_id: int) -> dict[str, Any]:
    """Everything an append leaves behind in ``topic``, without what differs by nature between the
    two topics (topic ids, producer ids, append times)."""
    q = conn.exec_driver_sql
    args = {"t": topic, "p": producer_id}
    records = q(
        'SELECT r.partition, r."offset", r.producer_epoch, r.sequence, r.is_transactional, r.control_type, r.key, '
        "r.value, r.headers, CASE WHEN r.control_type IS NULL AND r.\"timestamp\" < '2026-06-01' "
        'THEN r."timestamp" END, '
        "r.aborted, r.txn_number FROM records r JOIN topics t USING (topic_id) WHERE t.name = %(t)s "
        "ORDER BY 1, 2",
        args,
    ).all()
    partitions = q(
        "SELECT p.partition, p.next_offset, p.log_bytes FROM partitions p JOIN topics t USING (topic_id) "
        "WHERE t.name = %(t)s ORDER BY 1",
        args,
    ).all()
    windows = q(
        "SELECT s.partition, s.epoch, s.first_sequences, s.last_sequences, s.first_offsets, s.last_offsets "
        "FROM producer_partition_state s JOIN topics t USING (topic_id) WHERE t.name = %(t)s AND s.producer_id = %(p)s "
        "ORDER BY 1",
        args,
    ).all()
    spans = q(
        "SELECT s.txn_number, s.partition, s.first_offset, s.last_offset "
        "FROM txn_spans s JOIN topics t USING (topic_id) WHERE t.name = %(t)s AND s.producer_id = %(p)s ORDER BY 1, 2",
        args,
    ).all()
    return {"records": records, "partitions": partitions, "windows": windows, "spans": spans}


def _answers(answers: list[ProduceResult | errors.OncelogError]) -> list[tuple[Any, ...]]:
    return [
        (a.base_offset, a.last_offset, a.duplicate) if isinstance(a, ProduceResult) else (type(a).__name__,)
        for a in answers
    ]


def _request(rng: random.Random, round_no: int, sequences: dict[int, int]) -> list[ProduceBatch]:
    """Batches for 1 to 4 distinct partitions in a random order, each next in its sequence."""
    partitions = rng.sample(range(PARTITIONS), rng.randint(2, PARTITIONS))
    rich = round_no % 2 == 1
    batches = []
    for p in partitions:
        n = rng.choice((1, 2, 7, 300))
        batches.append(ProduceBatch("", p, sequences[p], _records(rng, n, f"r{round_no}p{p}", rich=rich)))
        sequences[p] += n
    return batches


def _on(topic: str, batches: list[ProduceBatch]) -> list[ProduceBatch]:
    return [ProduceBatch(topic, b.partition, b.base_sequence, b.records) for b in batches]


def test_idempotent_requests_append_as_produce_v2_would(conn: sa.Connection) -> None:
    rng = random.Random(23)
    fast = log.init_producer_id(conn)
    ref = log.init_producer_id(conn)
    conn.commit()
    sequences = dict.fromkeys(range(PARTITIONS), 0)
    for round_no in range(9):  # more than five batches per partition: the windows roll over
        batches = _request(rng, round_no, sequences)
        before = _counts(conn)
        got = log.produce_batches(
            conn, batches=_on(FAST, batches), producer_id=fast.producer_id, producer_epoch=fast.epoch
        )
        assert _paths(conn, before) == (1, 0)
        conn.commit()
        want = _on_reference(conn, ref, batches)
        conn.commit()
        assert _answers(got) == _answers(want)  # type: ignore[arg-type]
    assert _snapshot(conn, FAST, fast.producer_id) == _snapshot(conn, REF, ref.producer_id)


def test_anything_but_the_common_case_goes_to_produce_v2(conn: sa.Connection) -> None:
    """A duplicate, a gap, a partition named twice, a record too large, an unknown partition: the
    set-based path writes nothing and produce_v2 answers each batch as before."""
    ident = log.init_producer_id(conn)
    conn.commit()
    pid, epoch = ident.producer_id, ident.epoch
    small = [RecordIn(value=b"v")]
    first = [ProduceBatch(FAST, 0, 0, small), ProduceBatch(FAST, 1, 0, small)]
    assert _answers(log.produce_batches(conn, batches=first, producer_id=pid, producer_epoch=epoch)) == [
        (0, 0, False),
        (0, 0, False),
    ]
    conn.commit()
    cases: list[tuple[list[ProduceBatch], list[tuple[Any, ...]]]] = [
        # A retry of partition 0's batch beside a new batch for partition 1.
        ([ProduceBatch(FAST, 0, 0, small), ProduceBatch(FAST, 1, 1, small)], [(0, 0, True), (1, 1, False)]),
        # A gap in partition 2's sequence: refused alone.
        (
            [ProduceBatch(FAST, 2, 5, small), ProduceBatch(FAST, 3, 0, small)],
            [("OutOfOrderSequenceError",), (0, 0, False)],
        ),
        # Partition 1 twice, in sequence.
        ([ProduceBatch(FAST, 1, 2, small), ProduceBatch(FAST, 1, 3, small)], [(2, 2, False), (3, 3, False)]),
        # A record over the topic's max_message_bytes.
        (
            [ProduceBatch(FAST, 2, 0, [RecordIn(value=b"x" * 2_000_000)]), ProduceBatch(FAST, 3, 1, small)],
            [("RecordTooLargeError",), (1, 1, False)],
        ),
        # A partition the topic does not have.
        (
            [ProduceBatch(FAST, 9, 0, small), ProduceBatch(FAST, 0, 1, small)],
            [("UnknownTopicOrPartitionError",), (1, 1, False)],
        ),
    ]
    for batches, expected in cases:
        before = _counts(conn)
        answers = log.produce_batches(conn, batches=batches, producer_id=pid, producer_epoch=epoch)
        # produce_v2 ran for every batch; a call that raised is not counted (PostgreSQL counts a call
        # when it returns).
        assert _paths(conn, before) == (1, sum(1 for e in expected if len(e) == 3))
        conn.commit()
        assert _answers(answers) == expected


def test_a_stale_epoch_is_refused_by_produce_v2_not_appended(conn: sa.Connection) -> None:
    old = log.init_producer_id(conn)
    new = log.init_producer_id(conn, producer_id=old.producer_id, epoch=old.epoch)
    conn.commit()
    batches = [ProduceBatch(FAST, p, 0, [RecordIn(value=b"v")]) for p in (0, 1)]
    answers = log.produce_batches(conn, batches=batches, producer_id=old.producer_id, producer_epoch=old.epoch)
    conn.commit()
    assert {type(a).__name__ for a in answers} == {"InvalidProducerEpochError"}
    answers = log.produce_batches(conn, batches=batches, producer_id=new.producer_id, producer_epoch=new.epoch)
    conn.commit()
    assert _answers(answers) == [(0, 0, False), (0, 0, False)]


def _on_reference(conn: sa.Connection, ident: Any, batches: list[ProduceBatch], **txn_args: Any) -> list[ProduceResult]:
    """``batches`` through produce_v2, one by one, on the reference topic, as ``ident`` (and in the
    transaction ``txn_args`` names, if any)."""
    return [
        log.produce(
            conn,
            topic=REF,
            partition=b.partition,
            records=b.records,
            producer_id=ident.producer_id,
            producer_epoch=ident.epoch,
            base_sequence=b.base_sequence,
            **txn_args,
        )
        for b in batches
    ]


def _reference_transaction(
    conn: sa.Connection, ident: Any, n: int, batches: list[ProduceBatch], *, commit: bool
) -> list[ProduceResult]:
    """Transaction ``n`` of tid-ref (``ident`` its InitProducerId answer) on the reference topic:
    every batch through produce_v2, one by one, then EndTxn; committed to the database."""
    want = _on_reference(conn, ident, batches, transactional_id="tid-ref", txn_number=ident.txn_number + n)
    txn.end_txn(
        conn, transactional_id="tid-ref", producer_id=ident.producer_id, epoch=ident.epoch,
        txn_number=ident.txn_number + n, commit=commit,
    )  # fmt: skip
    conn.commit()
    return want


def test_transactions_commit_as_produce_v2_and_end_txn_would(conn: sa.Connection) -> None:
    """Transactions written through produce_batches and committed through the one-call commit
    (both set-based), against the same batches through produce_v2 and EndTxn: the same records,
    markers, spans and windows; an aborted transaction the same on both sides too."""
    rng = random.Random(47)
    ids = {}
    for topic in (FAST, REF):
        ids[topic] = txn.init_producer_id(conn, transactional_id=f"tid-{topic}", transaction_timeout_ms=60_000)
    conn.commit()
    sequences = dict.fromkeys(range(PARTITIONS), 0)
    for n in range(1, 8):
        during, at_commit = _request(rng, n, sequences), _request(rng, n + 100, sequences)
        commit = n != 4  # the fourth is aborted
        f, r = ids[FAST], ids[REF]
        number = f.txn_number + n
        before = _counts(conn)
        got = log.produce_batches(
            conn,
            batches=_on(FAST, during),
            producer_id=f.producer_id,
            producer_epoch=f.epoch,
            transactional_id="tid-fast",
            txn_number=number,
        )
        assert _paths(conn, before) == (1, 0)
        conn.commit()
        if commit:
            before = _counts(conn)
            result = log.produce_offsets_end_txn(
                conn,
                transactional_id="tid-fast",
                producer_id=f.producer_id,
                producer_epoch=f.epoch,
                txn_number=f.txn_number + n,
                batches=_on(FAST, at_commit),
            )
            assert _paths(conn, before) == (1, 0)
            got_commit = [(b.base_offset, b.last_offset, b.duplicate) for b in result.results]
        else:
            got += log.produce_batches(
                conn,
                batches=_on(FAST, at_commit),
                producer_id=f.producer_id,
                producer_epoch=f.epoch,
                transactional_id="tid-fast",
                txn_number=number,
            )
            txn.end_txn(
                conn,
                transactional_id="tid-fast",
                producer_id=f.producer_id,
                epoch=f.epoch,
                txn_number=f.txn_number + n,
                commit=False,
            )
        conn.commit()
        want = _reference_transaction(conn, r, n, during + at_commit, commit=commit)
        if commit:
            assert _answers(got) + got_commit == _answers(want)  # type: ignore[arg-type]
        else:
            assert _answers(got) == _answers(want)  # type: ignore[arg-type]
    assert _snapshot(conn, FAST, ids[FAST].producer_id) == _snapshot(conn, REF, ids[REF].producer_id)


def _history(conn: sa.Connection, tid: str) -> list[tuple[Any, ...]]:
    rows = conn.exec_driver_sql(
        "SELECT txn_number, from_state, to_state FROM txn_history WHERE transactional_id = %(t)s ORDER BY id",
        {"t": tid},
    ).all()
    return [tuple(row) for row in rows]


def test_whole_transactions_commit_with_their_markers_as_end_txn_would(conn: sa.Connection) -> None:
    """A transaction sent whole with its commit (revision 0024: its markers and spans written with
    its records, no txn_partitions row) leaves what produce_v2 and EndTxn leave for the same
    batches: records, markers, spans, windows, partition counters and the transaction's journal.
    One batch, many, rich records; a whole transaction that is not the common case (a partition
    twice) falls back to produce_v2 and end_txn_v1; a transaction sent earlier takes the old way."""
    rng = random.Random(2024)
    ids = {}
    for topic in (FAST, REF):
        ids[topic] = txn.init_producer_id(conn, transactional_id=f"tid-{topic}", transaction_timeout_ms=60_000)
    conn.commit()
    f, r = ids[FAST], ids[REF]
    sequences = dict.fromkeys(range(PARTITIONS), 0)
    for n in range(1, 10):
        if n in (2, 7):  # one batch
            p = rng.randrange(PARTITIONS)
            count = rng.choice((1, 5))
            batches = [ProduceBatch("", p, sequences[p], _records(rng, count, f"w{n}", rich=n == 7))]
            sequences[p] += count
        elif n == 5:  # partition 0 twice: not the common case
            batches = []
            for _ in range(2):
                batches.append(ProduceBatch("", 0, sequences[0], _records(rng, 3, f"w{n}", rich=False)))
                sequences[0] += 3
        else:
            batches = _request(rng, n, sequences)
        before = _counts(conn)
        result = log.produce_offsets_end_txn(
            conn,
            transactional_id="tid-fast",
            producer_id=f.producer_id,
            producer_epoch=f.epoch,
            txn_number=f.txn_number + n,
            batches=_on(FAST, batches),
        )
        now = _counts(conn)
        calls = {fn: now.get(fn, 0) - before.get(fn, 0) for fn in ("append_batches_v2", "produce_v2", "end_txn_v1")}
        if n == 5:
            assert calls == {"append_batches_v2": 1, "produce_v2": 2, "end_txn_v1": 1}
        else:
            assert calls == {"append_batches_v2": 1, "produce_v2": 0, "end_txn_v1": 0}
        conn.commit()
        assert result.outcome == "committed"
        want = _reference_transaction(conn, r, n, batches, commit=True)
        assert [(b.base_offset, b.last_offset, b.duplicate) for b in result.results] == _answers(want)  # type: ignore[arg-type]
        # A retry of the whole call is answered from the sequence state, the same offsets.
        retry = log.produce_offsets_end_txn(
            conn,
            transactional_id="tid-fast",
            producer_id=f.producer_id,
            producer_epoch=f.epoch,
            txn_number=f.txn_number + n,
            batches=_on(FAST, batches),
        )
        conn.commit()
        assert retry.outcome == "already_committed"
        assert [(b.base_offset, b.last_offset) for b in retry.results] == [
            (b.base_offset, b.last_offset) for b in result.results
        ]
        assert conn.exec_driver_sql("SELECT count(*) FROM txn_partitions").scalar() == 0
    assert _snapshot(conn, FAST, f.producer_id) == _snapshot(conn, REF, r.producer_id)
    assert _history(conn, "tid-fast") == _history(conn, "tid-ref")
