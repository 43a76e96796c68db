"""Compacted topics (migration 0033, issue #22): what compaction keeps and removes, the parts of
the log it never touches (the last stable offset, min_compaction_lag_ms), tombstones and markers
past delete_retention_ms, keyless records refused on every write path, who may run it, and that
its byte count holds against retention, DeleteRecords and appends racing it, on a real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

import oncelog
from oncelog import Admin, Consumer, Producer, TopicPartition, errors
from oncelog.aio import Admin as AsyncAdmin
from oncelog.store import compaction, create_engine, log, topics, txn
from oncelog.store.records import FetchedRecord, ProduceBatch, ProduceResult, RecordIn
from oncelog.types import AclBinding
from tests.support.clock import server_time
from tests.support.roles import login_roles

TOPIC = "table"
DAY_MS = 86_400_000


@pytest.fixture
def admin(db_url: str) -> Iterator[Admin]:
    with Admin(db_url) as a:
        a.create_topic(TOPIC, partitions=2, config={"cleanup_policy": "compact"})
        yield a


def write(conn: sa.Connection, pairs: list[tuple[bytes | None, bytes | None]], partition: int = 0) -> list[int]:
    """Append (key, value) records in one batch; their offsets."""
    done = log.produce(conn, topic=TOPIC, partition=partition, records=[RecordIn(value=v, key=k) for k, v in pairs])
    return list(range(done.base_offset, done.base_offset + len(pairs)))


class Txn:
    """One transactional id driven through the store's functions."""

    def __init__(self, conn: sa.Connection, tid: str) -> None:
        self.conn, self.tid = conn, tid
        ident = txn.init_producer_id(conn, transactional_id=tid, transaction_timeout_ms=600_000)
        self.pid, self.epoch, self.number = ident.producer_id, ident.epoch, ident.txn_number
        self.seq: dict[int, int] = {}

    def write(self, pairs: list[tuple[bytes | None, bytes | None]], partition: int = 0) -> None:
        seq = self.seq.get(partition, 0)
        log.produce(
            self.conn,
            topic=TOPIC,
            partition=partition,
            records=[RecordIn(value=v, key=k) for k, v in pairs],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=seq,
            transactional_id=self.tid,
            txn_number=self.number + 1,
        )
        self.seq[partition] = seq + len(pairs)

    def end(self, commit: bool) -> None:
        txn.end_txn(
            self.conn,
            transactional_id=self.tid,
            producer_id=self.pid,
            epoch=self.epoch,
            txn_number=self.number + 1,
            commit=commit,
        )
        self.number += 1


def read(conn: sa.Connection, partition: int = 0, committed: bool = True) -> list[FetchedRecord]:
    """Every record a reader from the log start sees, stepping over holes."""
    start = {p.partition: p for p in log.list_offsets(conn, topic=TOPIC)}[partition].log_start_offset
    out: list[FetchedRecord] = []
    at = start
    while True:
        got = log.fetch_many(conn, {(TOPIC, partition): at}, max_records=1000, read_committed=committed)[
            (TOPIC, partition)
        ]
        assert got.error is None, got.error
        if got.records:
            out += got.records
            at = got.records[-1].offset + 1
        elif got.read_limit is not None and at < got.read_limit:
            at = got.read_limit
        else:
            return out


def stored(conn: sa.Connection, partition: int = 0) -> list[tuple[int, bytes | None, str | None]]:
    """The partition's rows as the table holds them: (offset, key, control type)."""
    rows = conn.exec_driver_sql(
        "SELECT r.offset, r.key, r.control_type FROM records r JOIN topics t USING (topic_id) "
        "WHERE t.name = %(t)s AND r.partition = %(p)s ORDER BY r.offset",
        {"t": TOPIC, "p": partition},
    ).all()
    return [(int(o), None if k is None else bytes(k), c) for o, k, c in rows]


def log_bytes_agree(conn: sa.Connection) -> None:
    """partitions.log_bytes equals the bytes of the live records, partition by partition."""
    rows = conn.exec_driver_sql(
        "SELECT p.partition, p.log_bytes, coalesce((SELECT sum(coalesce(octet_length(r.key), 0) "
        "+ coalesce(octet_length(r.value), 0) + coalesce(octet_length(r.headers::text), 0)) "
        "FROM records r WHERE r.topic_id = p.topic_id AND r.partition = p.partition "
        "AND r.offset >= p.log_start_offset), 0) FROM partitions p JOIN topics t USING (topic_id) "
        "WHERE t.name = %(t)s ORDER BY 1",
        {"t": TOPIC},
    ).all()
    for partition, counted, actual in rows:
        assert counted == actual, f"partition {partition}: log_bytes {counted}, records hold {actual}"


@contextlib.contextmanager
def engine_for(db_url: str) -> Iterator[sa.Connection]:
    """An autocommit connection of a short-lived engine."""
    engine = create_engine(db_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as c:
            yield c
    finally:
        engine.dispose()


def latest(records: list[FetchedRecord]) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for r in records:
        assert r.key is not None
        out[r.key] = (r.offset, r.value)
    return out


def test_compaction_keeps_each_keys_latest_record_at_its_offset(admin: Admin, conn: sa.Connection) -> None:
    offsets = write(conn, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"b", None), (b"a", b"3")])
    before = read(conn)
    done = admin.compact(TOPIC, force=True)
    after = read(conn)
    # Each key's last record stays where it was: offsets are never renumbered.
    assert [(r.offset, r.key, r.value) for r in after] == [
        (offsets[3], b"c", b"1"),
        (offsets[4], b"b", None),
        (offsets[5], b"a", b"3"),
    ]
    assert latest(after) == latest(before)
    assert done.removed == 3 and done.examined == 6
    assert done.removed_bytes == 3 * 2  # three one-byte keys with one-byte values
    log_bytes_agree(conn)
    status = {s.partition: s for s in admin.compaction_status(TOPIC)}
    assert status[0].clean_offset == offsets[-1] + 1 and status[0].removed_records == 3
    assert status[0].dirty_ratio == 0.0 and status[1].removed_records == 0
    # The next round finds nothing to do; new records of a key replace the clean one.
    assert admin.compact(TOPIC, force=True).passes == []
    more = write(conn, [(b"c", b"2")])
    admin.compact(TOPIC, force=True)
    assert [(r.offset, r.key) for r in read(conn)] == [(offsets[4], b"b"), (offsets[5], b"a"), (more[0], b"c")]
    log_bytes_agree(conn)


def test_small_batches_reach_the_same_log(admin: Admin, conn: sa.Connection) -> None:
    pairs: list[tuple[bytes | None, bytes | None]] = [(b"k%d" % (i % 7), b"v%d" % i) for i in range(100)]
    write(conn, pairs)
    want = latest(read(conn))
    done = admin.compact(TOPIC, batch=9, force=True)
    assert len(done.passes) >= 100 // 9
    assert latest(read(conn)) == want and len(read(conn)) == 7
    log_bytes_agree(conn)


def test_without_force_only_a_dirty_enough_partition_is_compacted(admin: Admin, conn: sa.Connection) -> None:
    write(conn, [(b"a", b"1"), (b"a", b"2")])
    admin.compact(TOPIC, force=True)
    # 1 dirty record against 1 clean one: a ratio of 0.5, the default threshold.
    write(conn, [(b"b", b"1")])
    admin.alter_topic_config(TOPIC, {"min_cleanable_dirty_ratio": 0.9})
    assert admin.compact(TOPIC, force=False).passes == []
    admin.alter_topic_config(TOPIC, {"min_cleanable_dirty_ratio": None})  # back to 0.5
    assert admin.compact(TOPIC, force=False).passes != []
    # max_compaction_lag_ms forces a pass below the ratio once the oldest dirty record is that old.
    write(conn, [(b"c", b"1")])
    admin.alter_topic_config(TOPIC, {"min_cleanable_dirty_ratio": 0.99, "max_compaction_lag_ms": 60_000})
    assert admin.compact(TOPIC, force=False).passes == []
    with server_time(conn, datetime.now(UTC) + timedelta(minutes=2)):
        assert [p.partition for p in admin.compact(TOPIC, force=False).passes] == [0]


def test_nothing_at_or_past_the_last_stable_offset_is_touched(admin: Admin, conn: sa.Connection) -> None:
    write(conn, [(b"a", b"1"), (b"b", b"1")])
    open_txn = Txn(conn, "t-open")
    open_txn.write([(b"a", b"txn")])
    behind = write(conn, [(b"a", b"2"), (b"b", b"2"), (b"a", b"3")])
    rows_before = stored(conn)
    admin.compact(TOPIC, force=True)
    # Below the open transaction's first offset both keys had one record: nothing to remove.
    assert stored(conn) == rows_before
    open_txn.end(commit=True)
    admin.compact(TOPIC, force=True)
    assert [(r.offset, r.key, r.value) for r in read(conn)] == [(behind[1], b"b", b"2"), (behind[2], b"a", b"3")]
    log_bytes_agree(conn)


def test_aborted_records_go_at_once_and_markers_after_the_delete_retention(admin: Admin, conn: sa.Connection) -> None:
    admin.alter_topic_config(TOPIC, {"delete_retention_ms": DAY_MS})
    t = Txn(conn, "t")
    t.write([(b"a", b"aborted")])
    t.end(commit=False)
    t.write([(b"b", b"kept"), (b"b", b"kept-2")])
    t.end(commit=True)
    write(conn, [(b"c", None)])  # a tombstone
    kinds_before = [c for _, _, c in stored(conn)]
    assert kinds_before == [None, "abort", None, None, "commit", None]
    now = datetime.now(UTC)
    with server_time(conn, now):
        admin.compact(TOPIC, force=True)
    # The aborted record and b's first record are gone; markers and the tombstone stay a day.
    assert [(k, c) for _, k, c in stored(conn)] == [(None, "abort"), (b"b", None), (None, "commit"), (b"c", None)]
    with server_time(conn, now + timedelta(hours=23)):
        assert admin.compact(TOPIC, force=True).passes == []
    with server_time(conn, now + timedelta(days=1, seconds=1)):
        done = admin.compact(TOPIC, force=True)
    # The abort marker and the tombstone go; the commit marker stays while its record does.
    assert [(k, c) for _, k, c in stored(conn)] == [(b"b", None), (None, "commit")]
    assert done.removed == 2
    assert [(r.key, r.value) for r in read(conn)] == [(b"b", b"kept-2")]
    # Once b's record is superseded (and that pass is a day old), its commit marker goes too.
    later = write(conn, [(b"b", b"plain")])
    with server_time(conn, now + timedelta(days=2)):
        admin.compact(TOPIC, force=True)
    with server_time(conn, now + timedelta(days=3, seconds=2)):
        admin.compact(TOPIC, force=True)
    assert stored(conn) == [(later[0], b"b", None)]
    log_bytes_agree(conn)


def test_min_compaction_lag_leaves_young_records_alone(admin: Admin, conn: sa.Connection) -> None:
    admin.alter_topic_config(TOPIC, {"min_compaction_lag_ms": 3_600_000})
    write(conn, [(b"a", b"1"), (b"a", b"2"), (b"a", b"3")])
    assert admin.compact(TOPIC, force=True).passes == []
    assert len(stored(conn)) == 3
    with server_time(conn, datetime.now(UTC) + timedelta(hours=2)):
        admin.compact(TOPIC, force=True)
    assert [k for _, k, _ in stored(conn)] == [b"a"]


def test_a_compacted_topic_refuses_records_without_a_key(admin: Admin, conn: sa.Connection, db_url: str) -> None:
    with pytest.raises(errors.InvalidRecordError, match="compacted"):
        write(conn, [(b"a", b"1"), (None, b"keyless")])
    assert stored(conn) == []
    # The producer's batch fails alone; the next one (with a key) lands.
    with Producer(db_url) as producer:
        refused = producer.send(TOPIC, b"keyless", partition=0)
        with pytest.raises(errors.InvalidRecordError):
            refused.get(timeout=30)
        producer.send(TOPIC, b"v", key=b"k", partition=0).get(timeout=30)
    assert [(k, c) for _, k, c in stored(conn)] == [(b"k", None)]
    # A topic with the delete policy takes them, and one altered to compact refuses them.
    admin.create_topic("plain", config={"cleanup_policy": "delete"})
    log.produce(conn, topic="plain", partition=0, records=[RecordIn(value=b"x")])
    admin.alter_topic_config("plain", {"cleanup_policy": "compact,delete"})
    with pytest.raises(errors.InvalidRecordError):
        log.produce(conn, topic="plain", partition=0, records=[RecordIn(value=b"x")])


def test_keyless_records_written_before_the_topic_was_compacted_are_removed(admin: Admin, conn: sa.Connection) -> None:
    admin.create_topic("was-plain")
    log.produce(conn, topic="was-plain", partition=0, records=[RecordIn(value=b"x"), RecordIn(value=b"y", key=b"k")])
    with pytest.raises(errors.ConfigurationError, match="not compacted"):
        admin.compact("was-plain", force=True)
    admin.alter_topic_config("was-plain", {"cleanup_policy": "compact"})
    assert admin.compact("was-plain", force=True).removed == 1


def test_settings_are_checked_and_described(admin: Admin) -> None:
    described = admin.describe_topic(TOPIC).config
    assert described["cleanup_policy"] == "compact"
    assert described["min_compaction_lag_ms"] == 0 and described["max_compaction_lag_ms"] is None
    assert described["delete_retention_ms"] == DAY_MS and described["min_cleanable_dirty_ratio"] == 0.5
    admin.alter_topic_config(TOPIC, {"cleanup_policy": "delete, compact"})
    assert admin.describe_topic(TOPIC).config["cleanup_policy"] == "compact,delete"
    for bad in (
        {"cleanup_policy": "shred"},
        {"cleanup_policy": 1},
        {"min_cleanable_dirty_ratio": 1.5},
        {"min_cleanable_dirty_ratio": "half"},
        {"min_compaction_lag_ms": -1},
        {"max_compaction_lag_ms": 0},
        {"delete_retention_ms": 1.5},
    ):
        with pytest.raises(errors.ConfigurationError):
            admin.alter_topic_config(TOPIC, bad)
    with pytest.raises(errors.ConfigurationError):
        admin.alter_topic_config(TOPIC, {"min_cleanable_dirty_ratio": float("nan")})
    assert admin.describe_topic(TOPIC).config["cleanup_policy"] == "compact,delete"


def test_retention_leaves_a_topic_that_is_only_compacted(admin: Admin, conn: sa.Connection) -> None:
    admin.alter_topic_config(TOPIC, {"retention_ms": 1000})
    write(conn, [(b"a", b"1")])
    with server_time(conn, datetime.now(UTC) + timedelta(hours=1)):
        assert admin.enforce_retention() == 0
        admin.alter_topic_config(TOPIC, {"cleanup_policy": "compact,delete"})
        assert admin.enforce_retention() == 1


def test_only_the_admin_compacts_and_describe_needs_the_acl(admin: Admin, engine: sa.Engine, db_url: str) -> None:
    with login_roles(engine, db_url, kinds=("client",)) as urls:
        client = create_engine(urls["client"], isolation_level="AUTOCOMMIT")
        try:
            with client.connect() as c:
                with pytest.raises(errors.AuthorizationError):
                    compaction.compact(c, topic=TOPIC, force=True)
                assert len(compaction.compaction_status(c, topic=TOPIC)) == 2  # enforcement is off
                admin.set_acl_enforcement(True)
                with pytest.raises(errors.TopicAuthorizationError):
                    compaction.compaction_status(c, topic=TOPIC)
                role = str(c.exec_driver_sql("SELECT current_user").scalar_one())
                admin.create_acls([AclBinding(role, "topic", TOPIC, "describe")])
                assert len(compaction.compaction_status(c, topic=TOPIC)) == 2
                with pytest.raises(errors.AuthorizationError):
                    compaction.compact(c, topic=TOPIC, force=True)
        finally:
            client.dispose()


def test_bad_arguments_are_refused(admin: Admin, conn: sa.Connection) -> None:
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        compaction.compact(conn, topic="nope")
    for batch in (0, -1, 10_000_001):
        with pytest.raises(errors.InvalidRequestError):
            compaction.compact(conn, topic=TOPIC, batch=batch)
    with pytest.raises(errors.InvalidRequestError):
        admin.compact(TOPIC, batch=0)


def test_huge_settings_do_not_overflow(admin: Admin, conn: sa.Connection) -> None:
    biggest = 2**63 - 1
    admin.alter_topic_config(
        TOPIC,
        {"min_compaction_lag_ms": biggest, "max_compaction_lag_ms": biggest, "delete_retention_ms": biggest},
    )
    write(conn, [(b"a", b"1"), (b"a", b"2")])
    assert admin.compact(TOPIC, force=True).passes == []  # every record is "young"
    admin.alter_topic_config(TOPIC, {"min_compaction_lag_ms": 0, "min_cleanable_dirty_ratio": 1})
    assert admin.compact(TOPIC, force=False).removed == 1  # all dirty: a ratio of 1
    write(conn, [(b"b", b"1")])
    # Half dirty, below the ratio: only max_compaction_lag_ms (never, here) could force a pass.
    assert admin.compact(TOPIC, force=False).passes == []
    assert admin.compact(TOPIC, force=True).removed == 0


def test_byte_count_holds_against_appends_retention_and_delete_records_racing_it(
    admin: Admin, db_url: str, conn: sa.Connection
) -> None:
    """Compaction, appends, DeleteRecords and retention on the same partitions from four threads:
    afterwards each partition's log_bytes equals its live records' bytes, and a reader from the
    log start sees each key's latest value (of those the log start left)."""
    admin.alter_topic_config(TOPIC, {"cleanup_policy": "compact,delete", "retention_bytes": 40_000})
    stop = threading.Event()
    failures: list[BaseException] = []

    def loop(body: object) -> None:
        assert callable(body)
        engine = create_engine(db_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as c:
                n = 0
                while not stop.is_set():
                    body(c, n)
                    n += 1
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)
        finally:
            engine.dispose()

    def append(c: sa.Connection, n: int) -> None:
        for partition in (0, 1):
            log.produce(
                c,
                topic=TOPIC,
                partition=partition,
                records=[RecordIn(value=b"v%05d" % (n * 10 + i), key=b"k%02d" % ((n + i) % 40)) for i in range(10)],
            )

    def clean(c: sa.Connection, n: int) -> None:
        compaction.compact(c, topic=TOPIC, batch=37, force=True)

    def retain(c: sa.Connection, n: int) -> None:
        log.enforce_retention(c, batch=50)

    def delete_some(c: sa.Connection, n: int) -> None:
        ends = {p.partition: p.high_watermark for p in log.list_offsets(c, topic=TOPIC)}
        if n % 5 == 4:
            topics.delete_records(c, name=TOPIC, offsets={p: max(hw - 300, 0) for p, hw in ends.items()})

    threads = [threading.Thread(target=loop, args=(f,)) for f in (append, clean, clean, retain, delete_some)]
    for t in threads:
        t.start()
    deadline = datetime.now(UTC) + timedelta(seconds=60)
    while datetime.now(UTC) < deadline and not failures:
        rows = conn.exec_driver_sql(
            "SELECT sum(s.removed_records) FROM cleaner_state s JOIN topics t USING (topic_id) WHERE t.name = %(t)s",
            {"t": TOPIC},
        ).scalar_one()
        if rows is not None and rows >= 8000:
            break
        stop.wait(0.2)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    assert not failures, failures
    log_bytes_agree(conn)
    admin.compact(TOPIC, force=True)
    log_bytes_agree(conn)
    for partition in (0, 1):
        seen = read(conn, partition)
        keys = [r.key for r in seen]
        assert len(keys) == len(set(keys)), "a key twice after a full compaction"


def test_the_asyncio_admin_compacts(admin: Admin, conn: sa.Connection, db_url: str) -> None:
    write(conn, [(b"a", b"1"), (b"a", b"2")])

    async def main() -> tuple[int, float]:
        async with AsyncAdmin(db_url) as aio_admin:
            done = await aio_admin.compact(TOPIC, force=True)
            status = await aio_admin.compaction_status(TOPIC)
        return done.removed, status[0].dirty_ratio

    assert asyncio.run(main()) == (1, 0.0)


def test_a_transaction_with_a_keyless_record_aborts_and_the_next_one_commits(
    admin: Admin, conn: sa.Connection, db_url: str
) -> None:
    with Producer(db_url, transactional_id="keyless") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, b"kept-out", key=b"k", partition=0)
        refused = producer.send(TOPIC, b"keyless", partition=0)
        # As Kafka's INVALID_RECORD in a transaction: the batch fails, the transaction must abort.
        with pytest.raises(errors.TransactionAbortableError, match="every record needs a key"):
            producer.commit_transaction()
        with pytest.raises(errors.InvalidRecordError):
            refused.get(timeout=5)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(TOPIC, b"v", key=b"k", partition=0)
        producer.commit_transaction()
    assert [(r.key, r.value) for r in read(conn)] == [(b"k", b"v")]


def test_a_keyless_batch_fails_alone_in_a_request_of_many(admin: Admin, conn: sa.Connection) -> None:
    admin.create_topic("plain")
    answers = log.produce_batches(
        conn,
        batches=[
            ProduceBatch("plain", 0, None, [RecordIn(value=b"x")]),
            ProduceBatch(TOPIC, 0, None, [RecordIn(value=b"v", key=b"k"), RecordIn(value=b"keyless")]),
            ProduceBatch(TOPIC, 1, None, [RecordIn(value=b"v", key=b"k")]),
        ],
    )
    assert isinstance(answers[0], ProduceResult) and isinstance(answers[2], ProduceResult)
    assert isinstance(answers[1], errors.InvalidRecordError)
    assert stored(conn, 0) == [] and [k for _, k, _ in stored(conn, 1)] == [b"k"]


def test_send_in_the_applications_transaction_refuses_a_keyless_record(admin: Admin, engine: sa.Engine) -> None:
    with engine.begin() as app:
        oncelog.send(app, TOPIC, b"v", b"k")
        with pytest.raises(errors.InvalidRecordError, match="every record needs a key"):
            oncelog.send(app, TOPIC, b"keyless")


def test_a_clean_section_partly_below_the_log_start_still_counts_as_clean_in_proportion(
    admin: Admin, conn: sa.Connection
) -> None:
    """The dirty ratio after DeleteRecords moved the log start into the clean section: scaled, not
    read as a log with nothing dirty (which never reached the ratio again)."""
    admin.alter_topic_config(TOPIC, {"cleanup_policy": "compact,delete", "min_cleanable_dirty_ratio": 0.4})
    write(conn, [(b"k%03d" % i, b"v" * 10) for i in range(100)])
    admin.compact(TOPIC, force=True)
    admin.delete_records(TOPIC, {0: 90})
    write(conn, [(b"n%03d" % i, b"v" * 10) for i in range(10)])
    (status,) = [s for s in admin.compaction_status(TOPIC) if s.partition == 0]
    assert 0.4 <= status.dirty_ratio <= 0.6
    assert [p.partition for p in admin.compact(TOPIC).passes] == [0]


def test_a_run_ends_while_records_keep_arriving(admin: Admin, db_url: str) -> None:
    stop = threading.Event()

    def writer() -> None:
        engine = create_engine(db_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as c:
                n = 0
                while not stop.is_set():
                    log.produce(c, topic=TOPIC, partition=0, records=[RecordIn(value=b"%d" % n, key=b"k")])
                    n += 1
        finally:
            engine.dispose()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(20):
            admin.compact(TOPIC, batch=3, force=True)  # returns: records written since are the next run's
    finally:
        stop.set()
        thread.join()


def test_a_commit_marker_goes_once_its_records_are_below_the_log_start(admin: Admin, conn: sa.Connection) -> None:
    t = Txn(conn, "t")
    t.write([(b"a", b"1")])
    t.end(commit=True)
    write(conn, [(b"b", b"1")])
    now = datetime.now(UTC)
    with server_time(conn, now):
        admin.compact(TOPIC, force=True)
    assert [c for _, _, c in stored(conn)] == [None, "commit", None]
    admin.delete_records(TOPIC, {0: 1})  # the transaction's record leaves the log; its marker does not
    with server_time(conn, now + timedelta(days=1, seconds=1)):
        admin.compact(TOPIC, force=True)
    assert [c for o, _, c in stored(conn) if o >= 1] == [None]


def test_an_unknown_topics_status_needs_the_acl_too(admin: Admin, engine: sa.Engine, db_url: str) -> None:
    with login_roles(engine, db_url, kinds=("client",)) as urls:
        client = create_engine(urls["client"], isolation_level="AUTOCOMMIT")
        try:
            with client.connect() as c:
                with pytest.raises(errors.UnknownTopicOrPartitionError):
                    compaction.compaction_status(c, topic="no-such-topic")
                admin.set_acl_enforcement(True)
                with pytest.raises(errors.TopicAuthorizationError):
                    compaction.compaction_status(c, topic="no-such-topic")
        finally:
            client.dispose()


def test_compacting_a_topic_waits_for_the_appends_in_flight(admin: Admin, engine: sa.Engine, db_url: str) -> None:
    """Switched to compact while a keyless append holds a partition: the switch returns only after
    that append committed, so no keyless record is acknowledged after it."""
    admin.create_topic("switching")
    done = threading.Event()

    def switch() -> None:
        with Admin(db_url) as other:
            other.alter_topic_config("switching", {"cleanup_policy": "compact"})
        done.set()

    with engine.begin() as app:
        log.produce(app, topic="switching", partition=0, records=[RecordIn(value=b"keyless")])
        thread = threading.Thread(target=switch)
        thread.start()
        # Autocommit: within one transaction pg_stat_activity answers from one snapshot.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as watch:
            for _ in range(600):
                waiting = watch.exec_driver_sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%%alter_topic_config_v1%%'"
                ).scalar_one()
                if waiting:
                    break
                time.sleep(0.05)
        assert waiting == 1 and not done.is_set()
    thread.join(timeout=30)
    assert done.is_set()
    with engine.connect() as c, pytest.raises(errors.InvalidRecordError):
        log.produce(c, topic="switching", partition=0, records=[RecordIn(value=b"keyless")])


def test_a_consumer_reading_during_compaction_never_sees_a_key_go_back(admin: Admin, db_url: str) -> None:
    """Writers append versions 0, 1, 2, ... of each key while a loop compacts without pause and a
    read_committed consumer reads from the start: every key's versions arrive in increasing
    order, no offset twice, and the consumer ends at every key's last version."""
    keys, versions = 20, 150
    stop = threading.Event()
    failures: list[BaseException] = []

    def cleaner() -> None:
        engine = create_engine(db_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as c:
                while not stop.is_set():
                    compaction.compact(c, topic=TOPIC, batch=50, force=True)
        except BaseException as exc:
            failures.append(exc)
        finally:
            engine.dispose()

    thread = threading.Thread(target=cleaner)
    thread.start()
    seen: dict[bytes, int] = {}
    offsets: list[int] = []
    try:
        with Producer(db_url, linger_ms=0) as producer, Consumer(db_url) as consumer:
            consumer.assign([TopicPartition(TOPIC, 0)])
            for v in range(versions):
                for k in range(keys):
                    producer.send(TOPIC, b"%d" % v, key=b"k%02d" % k, partition=0)
                if v % 10 == 0:
                    producer.flush()
                for r in consumer.poll(0.0):
                    assert r.key is not None and r.value is not None
                    version = int(r.value)
                    assert version > seen.get(r.key, -1), f"key {r.key!r} went back to {version}"
                    seen[r.key] = version
                    offsets.append(r.offset)
            producer.flush()
            end = consumer.end_offsets([TopicPartition(TOPIC, 0)])[TopicPartition(TOPIC, 0)]
            while consumer.position(TopicPartition(TOPIC, 0)) < end:
                for r in consumer.poll(1.0):
                    assert r.key is not None and r.value is not None
                    assert int(r.value) > seen.get(r.key, -1)
                    seen[r.key] = int(r.value)
                    offsets.append(r.offset)
    finally:
        stop.set()
        thread.join()
    assert not failures, failures
    assert offsets == sorted(set(offsets))
    assert seen == {b"k%02d" % k: versions - 1 for k in range(keys)}


def test_an_exactly_once_copy_of_a_compacted_topic_equals_it(admin: Admin, conn: sa.Connection, db_url: str) -> None:
    """A consume-transform-produce copier (group offsets in each transaction) over a compacted
    input copies exactly what a reader of the compacted input sees, in order, once."""
    admin.create_topic("copy", config={"cleanup_policy": "compact"})
    t = Txn(conn, "history")
    for round_ in range(5):
        write(conn, [(b"k%d" % (i % 7), b"plain-%d-%d" % (round_, i)) for i in range(20)])
        t.write([(b"k%d" % i, b"txn-%d-%d" % (round_, i)) for i in range(3)])
        t.end(commit=round_ % 2 == 0)
    write(conn, [(b"k1", None)])  # a tombstone
    admin.compact(TOPIC, force=True)
    expected = [(r.key, r.value) for r in read(conn)]
    tp = TopicPartition(TOPIC, 0)
    with (
        Consumer(db_url, group_id="copier", enable_auto_commit=False) as consumer,
        Producer(db_url, transactional_id="copier-1") as producer,
    ):
        consumer.assign([tp])
        producer.init_transactions()
        end = consumer.end_offsets([tp])[tp]
        while consumer.position(tp) < end:
            got = consumer.poll(1.0)
            producer.begin_transaction()
            for r in got:
                producer.send("copy", r.value, key=r.key, partition=0)
            producer.send_offsets_to_transaction({tp: consumer.position(tp)}, consumer.group_metadata())
            producer.commit_transaction()
    with engine_for(db_url) as c:
        copied = [
            (r.key, r.value) for r in log.fetch_many(c, {("copy", 0): 0}, max_records=10_000)[("copy", 0)].records
        ]
    assert copied == expected and len(expected) == 7  # k0..k6, k1 as its tombstone


def test_the_compaction_status_view_shows_what_the_reader_may_describe(
    admin: Admin, engine: sa.Engine, db_url: str, conn: sa.Connection
) -> None:
    write(conn, [(b"a", b"1"), (b"a", b"2")])
    admin.compact(TOPIC, force=True)
    admin.create_topic("secret", config={"cleanup_policy": "compact,delete"})
    admin.create_topic("plain")
    query = (
        "SELECT topic, partition, clean_offset, removed_records, dirty_ratio FROM compaction_status "
        "ORDER BY topic, partition"
    )
    with login_roles(engine, db_url, kinds=("reader",)) as urls:
        reader = create_engine(urls["reader"], isolation_level="AUTOCOMMIT")
        try:
            with reader.connect() as c:
                admin.set_acl_enforcement(True)
                assert c.exec_driver_sql(query).all() == []
                role = str(c.exec_driver_sql("SELECT current_user").scalar_one())
                admin.create_acls([AclBinding(role, "topic", TOPIC, "describe")])
                assert [tuple(r) for r in c.exec_driver_sql(query)] == [(TOPIC, 0, 2, 1, 0.0), (TOPIC, 1, 0, 0, 0.0)]
                admin.set_acl_enforcement(False)
                # Every compacted topic's partitions, and none of a topic that is not compacted.
                assert [tuple(r)[:2] for r in c.exec_driver_sql(query)] == [("secret", 0), (TOPIC, 0), (TOPIC, 1)]
        finally:
            reader.dispose()
