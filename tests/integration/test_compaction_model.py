"""Compaction against a model: random histories of keyed writes, tombstones, transactions
committed, aborted and left open, compaction passes of random sizes and time passing, on a real
PostgreSQL (issue #22).

The model is the committed log and each key's latest committed record. After every compaction a
reader from the log start must see, in offset order, only records the log had (nothing aborted),
and every key's latest committed value at its own offset: compaction never loses the newest value.
Every row at or past the last stable offset must be untouched. Once all is decided and compacted,
each key appears at most once; a pass delete_retention_ms later leaves exactly each key's latest
value, with no tombstone and no marker of a transaction that has no record left.

Each hypothesis example gets a topic of its own in the test's database (the function-scoped
``conn`` is shared by the examples, hence the suppressed health check).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.store import compaction, log, topics, txn
from oncelog.store.records import RecordIn
from tests.support.clock import server_time

KEYS = [b"a", b"b", b"c", b"d"]
RETENTION_MS = 3_600_000
_names = itertools.count()


Pair = tuple[bytes, bytes | None]
values = st.one_of(st.none(), st.binary(min_size=0, max_size=3))
pairs = st.lists(st.tuples(st.sampled_from(KEYS), values), min_size=1, max_size=4)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("write"), pairs),
        st.tuples(st.just("txn"), pairs, st.booleans()),
        st.tuples(st.just("open"), pairs),
        st.tuples(st.just("end"), st.booleans()),
        st.tuples(st.just("compact"), st.integers(min_value=1, max_value=12)),
        st.tuples(st.just("wait"), st.sampled_from([60_000, RETENTION_MS + 1000])),
    ),
    min_size=1,
    max_size=25,
)


@dataclass
class Model:
    """What the log must hold: committed records by offset, and the open transaction's."""

    committed: dict[int, Pair] = field(default_factory=dict)
    aborted: set[int] = field(default_factory=set)
    open_offsets: list[int] = field(default_factory=list)
    open_pairs: list[Pair] = field(default_factory=list)

    def latest(self, below: int | None = None) -> dict[bytes, tuple[int, bytes | None]]:
        """Each key's last committed record (below an offset, if given)."""
        out: dict[bytes, tuple[int, bytes | None]] = {}
        for offset in sorted(o for o in self.committed if below is None or o < below):
            key, value = self.committed[offset]
            out[key] = (offset, value)
        return out


class History:
    """Drives one topic through the store's functions, keeping the model beside it."""

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn
        self.topic = f"cm-{next(_names)}"
        topics.create_topic(
            conn,
            name=self.topic,
            partitions=1,
            config={"cleanup_policy": "compact", "delete_retention_ms": RETENTION_MS},
        )
        self.model = Model()
        self.now = datetime.now(UTC)
        ident = txn.init_producer_id(conn, transactional_id=self.topic, transaction_timeout_ms=900_000)
        self.pid, self.epoch, self.number = ident.producer_id, ident.epoch, ident.txn_number
        self.seq = 0
        self.in_txn = False

    def _txn_write(self, batch: list[Pair]) -> list[int]:
        done = log.produce(
            self.conn,
            topic=self.topic,
            partition=0,
            records=[RecordIn(value=v, key=k) for k, v in batch],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            transactional_id=self.topic,
            txn_number=self.number + 1,
        )
        self.seq += len(batch)
        return list(range(done.base_offset, done.base_offset + len(batch)))

    def _end(self, commit: bool) -> None:
        txn.end_txn(
            self.conn,
            transactional_id=self.topic,
            producer_id=self.pid,
            epoch=self.epoch,
            txn_number=self.number + 1,
            commit=commit,
        )
        self.number += 1
        if commit:
            self.model.committed.update(zip(self.model.open_offsets, self.model.open_pairs, strict=True))
        else:
            self.model.aborted.update(self.model.open_offsets)
        self.model.open_offsets, self.model.open_pairs = [], []
        self.in_txn = False

    def apply(self, op: tuple[object, ...]) -> None:
        kind = op[0]
        if kind == "write":
            batch: list[Pair] = list(op[1])  # type: ignore[call-overload]
            done = log.produce(
                self.conn, topic=self.topic, partition=0, records=[RecordIn(value=v, key=k) for k, v in batch]
            )
            for i, pair in enumerate(batch):
                self.model.committed[done.base_offset + i] = pair
        elif kind in ("txn", "open"):
            if self.in_txn:
                return
            batch = list(op[1])  # type: ignore[call-overload]
            self.in_txn = True
            self.model.open_offsets = self._txn_write(batch)
            self.model.open_pairs = batch
            if kind == "txn":
                self._end(bool(op[2]))
        elif kind == "end":
            if self.in_txn:
                self._end(bool(op[1]))
        elif kind == "compact":
            self.compact(int(op[1]))  # type: ignore[call-overload]
        elif kind == "wait":
            self.now += timedelta(milliseconds=int(op[1]))  # type: ignore[call-overload]

    def compact(self, batch: int = 50_000) -> None:
        rows_past_lso = self._rows(lambda o: o >= self._lso())
        with server_time(self.conn, self.now):
            while compaction.compact(self.conn, topic=self.topic, batch=batch, force=True) is not None:
                pass
        assert self._rows(lambda o: o >= self._lso()) == rows_past_lso, "compaction touched the unstable part"
        self.check()

    def _lso(self) -> int:
        (bounds,) = log.list_offsets(self.conn, topic=self.topic)
        return bounds.last_stable_offset

    def _rows(self, wanted: object) -> list[tuple[int, bytes | None, bytes | None, str | None]]:
        assert callable(wanted)
        rows = self.conn.exec_driver_sql(
            "SELECT r.offset, r.key, r.value, r.control_type FROM records r JOIN topics t USING (topic_id) "
            "WHERE t.name = %(t)s ORDER BY r.offset",
            {"t": self.topic},
        ).all()
        return [
            (int(o), None if k is None else bytes(k), None if v is None else bytes(v), c)
            for o, k, v, c in rows
            if wanted(int(o))
        ]

    def read(self) -> list[tuple[int, bytes | None, bytes | None]]:
        """What a read_committed reader from the log start sees, stepping over holes."""
        out: list[tuple[int, bytes | None, bytes | None]] = []
        at = 0
        while True:
            got = log.fetch_many(self.conn, {(self.topic, 0): at}, max_records=7, read_committed=True)[(self.topic, 0)]
            assert got.error is None
            if got.records:
                out += [(r.offset, r.key, r.value) for r in got.records]
                at = got.records[-1].offset + 1
            elif got.read_limit is not None and at < got.read_limit:
                at = got.read_limit
            else:
                return out

    def check(self) -> None:
        seen = self.read()
        offsets = [o for o, _, _ in seen]
        assert offsets == sorted(offsets)
        for offset, key, value in seen:
            assert offset not in self.model.aborted, "an aborted record was read"
            assert self.model.committed.get(offset) == (key, value), "a record the log never had"
        by_offset = {o: (k, v) for o, k, v in seen}
        # A read_committed reader stops at the last stable offset; below it each key's newest value stays.
        for key, (offset, value) in self.model.latest(below=self._lso()).items():
            if value is not None:
                assert by_offset.get(offset) == (key, value), f"key {key!r} lost its latest value"


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=operations)
def test_compaction_keeps_what_the_model_says(conn: sa.Connection, history: list[tuple[object, ...]]) -> None:
    h = History(conn)
    for op in history:
        h.apply(op)
    if h.in_txn:
        h.apply(("end", True))
    h.compact()
    # Once clean: each key at most once, and exactly the latest committed record of each key
    # whose latest is a value (a tombstone may still be there, within its retention).
    seen = h.read()
    keys = [k for _, k, _ in seen]
    assert len(keys) == len(set(keys))
    latest = h.model.latest()
    assert {k: (o, v) for o, k, v in seen if v is not None} == {k: ov for k, ov in latest.items() if ov[1] is not None}
    # delete_retention_ms after that pass, tombstones and markers go: only values are left.
    h.now += timedelta(milliseconds=RETENTION_MS + 1000)
    h.compact()
    assert [(o, k, v) for o, k, v in h.read()] == sorted((o, k, v) for k, (o, v) in latest.items() if v is not None)
    orphans = conn.exec_driver_sql(
        "SELECT count(*) FROM records m JOIN topics t USING (topic_id) WHERE t.name = %(t)s AND m.control_type "
        "IS NOT NULL AND NOT EXISTS (SELECT 1 FROM records d WHERE d.topic_id = m.topic_id AND d.partition = "
        "m.partition AND d.control_type IS NULL AND d.producer_id = m.producer_id AND d.txn_number = m.txn_number)",
        {"t": h.topic},
    ).scalar_one()
    assert orphans == 0, "a marker outlived its transaction's records"
