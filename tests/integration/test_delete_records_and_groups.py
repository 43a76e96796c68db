"""DeleteRecords and DeleteGroups (migration 0026): what they change, what they refuse, who may
call them, and that they hold against the calls they race (appends, joins and commits), with
real threads on a real PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from oncelog import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition, errors
from oncelog.store import create_engine, groups, log, ops, topics, txn
from oncelog.store.records import FetchedRecord
from tests.support.roles import login_roles

TOPIC = "ledger"
#: A bound on waiting for an event; never an assertion on speed.
WAIT = 30.0


@pytest.fixture
def admin(db_url: str) -> Iterator[Admin]:
    with Admin(db_url) as a:
        a.create_topic(TOPIC, partitions=2)
        yield a


@pytest.fixture
def store_conn(db_url: str) -> Iterator[sa.Connection]:
    """An autocommit connection for calling the store's functions directly."""
    engine = create_engine(db_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _produce(db_url: str, partition: int, values: list[bytes]) -> None:
    with Producer(db_url) as producer:
        for v in values:
            producer.send(TOPIC, v, partition=partition)
        producer.flush()


def _read_log(db_url: str, partition: int) -> list[FetchedRecord]:
    """Every record of the partition from its log start, checked dense up to the high watermark."""
    engine = create_engine(db_url, poolclass=sa.NullPool)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            bounds = {p.partition: p for p in log.list_offsets(conn, topic=TOPIC)}[partition]
            out: list[FetchedRecord] = []
            at = bounds.log_start_offset
            while at < bounds.high_watermark:
                got = log.fetch(conn, topic=TOPIC, partition=partition, offset=at, max_records=1000).records
                assert got and got[0].offset == at, f"a hole at {at}"
                out += got
                at = got[-1].offset + 1
            return out
    finally:
        engine.dispose()


def _records_below(engine: sa.Engine, partition: int, offset: int) -> int:
    with engine.connect() as conn:
        return int(
            conn.exec_driver_sql(
                "SELECT count(*) FROM records r JOIN topics t USING (topic_id) "
                "WHERE t.name = %(t)s AND r.partition = %(p)s AND r.offset < %(o)s",
                {"t": TOPIC, "p": partition, "o": offset},
            ).scalar_one()
        )


def test_delete_records_moves_the_log_start_and_readers_start_there(
    db_url: str, engine: sa.Engine, admin: Admin
) -> None:
    _produce(db_url, 0, [b"a%d" % i for i in range(10)])
    _produce(db_url, 1, [b"b%d" % i for i in range(5)])
    with engine.connect() as conn:
        before = ops.partition_sizes(conn)
    assert admin.delete_records(TOPIC, {0: 4, 1: -1}) == {0: 4, 1: 5}
    with engine.connect() as conn:
        after = ops.partition_sizes(conn)
    # The log's live bytes drop by what left it: 4 records of 2-byte values and no keys on partition 0.
    assert (before[(TOPIC, 0)] - after[(TOPIC, 0)], after[(TOPIC, 1)]) == (8, 0)
    assert [r.value for r in _read_log(db_url, 0)] == [b"a%d" % i for i in range(4, 10)]
    assert _read_log(db_url, 1) == []
    assert {(o.partition, o.log_start_offset, o.high_watermark) for o in admin.list_offsets(TOPIC)} == {
        (0, 4, 10),
        (1, 5, 5),
    }

    # An offset below the log start changes nothing; one beyond the high watermark is refused,
    # and so is the whole call it is part of.
    assert admin.delete_records(TOPIC, {0: 2}) == {0: 4}
    with pytest.raises(errors.OffsetOutOfRangeError, match=r"ledger-1: .* high watermark 5"):
        admin.delete_records(TOPIC, {0: 6, 1: 6})
    with pytest.raises(errors.UnknownTopicOrPartitionError, match="partition 7"):
        admin.delete_records(TOPIC, {0: 6, 7: 0})
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.delete_records("nope", {0: 0})
    with pytest.raises(errors.OffsetOutOfRangeError):
        admin.delete_records(TOPIC, {0: -2})
    assert {(o.partition, o.log_start_offset) for o in admin.list_offsets(TOPIC)} == {(0, 4), (1, 5)}

    # A consumer group positioned below the new log start resets as after retention.
    with Consumer(db_url, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek(TopicPartition(TOPIC, 0), 0)
        seen: list[int] = []
        deadline = time.monotonic() + WAIT
        while len(seen) < 6 and time.monotonic() < deadline:
            seen += [r.offset for r in consumer.poll(0.5)]
    assert seen == list(range(4, 10))

    # The rows themselves go at the next maintenance pass.
    assert _records_below(engine, 0, 4) == 4
    while admin.enforce_retention():
        pass
    assert _records_below(engine, 0, 4) == 0 and _records_below(engine, 1, 5) == 0


def test_only_the_admin_role_deletes_records_and_groups(db_url: str, engine: sa.Engine, admin: Admin) -> None:
    _produce(db_url, 0, [b"x", b"y"])
    with login_roles(engine, db_url, ("client", "reader")) as urls:
        for url in urls.values():
            role = create_engine(url, poolclass=sa.NullPool)
            try:
                with role.connect() as conn, pytest.raises(errors.AuthorizationError):
                    topics.delete_records(conn, name=TOPIC, offsets={0: 1})
                with role.connect() as conn, pytest.raises(errors.AuthorizationError):
                    ops.delete_group(conn, group_id="anything")
                with role.connect() as conn, pytest.raises(errors.AuthorizationError):
                    ops.offset_delete(conn, group_id="anything", partitions=[(TOPIC, 0)])
            finally:
                role.dispose()
    assert admin.list_offsets(TOPIC)[0].log_start_offset == 0


def test_delete_records_racing_appends_never_passes_the_high_watermark(
    db_url: str, engine: sa.Engine, admin: Admin
) -> None:
    """Producers append while another session deletes up to the high watermark (-1), hundreds of
    times: every answer is a log start the partition really had, log starts only rise, and what
    is above the last one is every record appended there, in order."""
    stop = threading.Event()
    failures: list[BaseException] = []
    lows: list[int] = []

    def produce(tag: int) -> None:
        try:
            with Producer(db_url) as producer:
                i = 0
                while not stop.is_set():
                    producer.send(TOPIC, b"%d-%d" % (tag, i), partition=0)
                    i += 1
                    if i % 20 == 0:
                        producer.flush()
        except BaseException as exc:  # reported by the test thread below
            failures.append(exc)

    writers = [threading.Thread(target=produce, args=(t,)) for t in range(3)]
    for w in writers:
        w.start()
    try:
        deleter = create_engine(db_url, isolation_level="AUTOCOMMIT")
        try:
            with deleter.connect() as conn:
                for _ in range(300):
                    lows.append(topics.delete_records(conn, name=TOPIC, offsets={0: -1})[0])
        finally:
            deleter.dispose()
    finally:
        stop.set()
        for w in writers:
            w.join(WAIT)
    assert not failures, failures
    assert lows == sorted(lows) and lows[-1] > 0
    (p0,) = [o for o in admin.list_offsets(TOPIC) if o.partition == 0]
    assert lows[-1] <= p0.log_start_offset <= p0.high_watermark
    rest = _read_log(db_url, 0)
    assert [r.offset for r in rest] == list(range(p0.log_start_offset, p0.high_watermark))
    values = [r.value or b"" for r in rest]
    for tag in range(3):
        numbers = [int(v.split(b"-")[1]) for v in values if v.startswith(b"%d-" % tag)]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)


def _committed(engine: sa.Engine, group: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.exec_driver_sql(
                "SELECT count(*) FROM committed_offsets WHERE group_id = %(g)s", {"g": group}
            ).scalar_one()
        )


def _assigned(consumer: Consumer) -> None:
    deadline = time.monotonic() + WAIT
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.assignment()


def test_delete_group_refuses_live_members_and_pending_offsets(
    db_url: str, engine: sa.Engine, admin: Admin, store_conn: sa.Connection
) -> None:
    _produce(db_url, 0, [b"x"])
    conn = store_conn
    consumer = Consumer(db_url, group_id="auditors", enable_auto_commit=False, session_timeout_ms=6000)
    try:
        consumer.subscribe([TOPIC])
        _assigned(consumer)
        consumer.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(1)})
        with pytest.raises(errors.NonEmptyGroupError, match="1 live member"):
            admin.delete_group("auditors")

        # TxnOffsetCommit as the broker sends it for a Kafka client: the offsets wait in the open
        # transaction (the Producer sends its offsets with the commit itself).
        meta = consumer.group_metadata()
        ident = txn.init_producer_id(conn, transactional_id="tx-audit", transaction_timeout_ms=60_000)
        number = ident.txn_number + 1
        txn.add_partitions_to_txn(
            conn,
            transactional_id="tx-audit",
            producer_id=ident.producer_id,
            epoch=ident.epoch,
            txn_number=number,
            partitions=[(TOPIC, 1)],
        )
        groups.txn_offset_commit(
            conn,
            transactional_id="tx-audit",
            producer_id=ident.producer_id,
            epoch=ident.epoch,
            txn_number=number,
            group_id="auditors",
            member_id=meta.member_id,
            group_instance_id=None,
            generation=meta.generation_id,
            offsets={(TOPIC, 0): (1, "")},
        )
    finally:
        consumer.close()  # leaves the group
    with pytest.raises(errors.NonEmptyGroupError, match="tx-audit"):
        admin.delete_group("auditors")
    assert _committed(engine, "auditors") == 1
    txn.end_txn(
        conn,
        transactional_id="tx-audit",
        producer_id=ident.producer_id,
        epoch=ident.epoch,
        txn_number=number,
        commit=False,
    )
    admin.delete_group("auditors")
    assert _committed(engine, "auditors") == 0
    with pytest.raises(errors.GroupIdNotFoundError):
        admin.describe_group("auditors")
    with pytest.raises(errors.GroupIdNotFoundError):
        admin.delete_group("auditors")
    with pytest.raises(errors.InvalidGroupIdError):
        admin.delete_group("")


def test_delete_group_offsets_keeps_those_of_topics_a_live_member_subscribes_to(
    db_url: str, engine: sa.Engine, admin: Admin
) -> None:
    """OffsetDelete as Kafka's group coordinator answers it: per partition, deleted, or kept while
    a live member subscribes to its topic, or unknown; the group itself must exist."""
    admin.create_topic("other", partitions=1)
    mine, other = TopicPartition(TOPIC, 0), TopicPartition("other", 0)
    admin.reset_group_offsets("readers", {mine: 0, other: 0}, dry_run=False)
    consumer = Consumer(db_url, group_id="readers", enable_auto_commit=False, session_timeout_ms=6000)
    try:
        consumer.subscribe([TOPIC])
        _assigned(consumer)
        outcome = admin.delete_group_offsets("readers", [mine, other, TopicPartition("other", 7)])
        assert {tp: type(e).__name__ if e else None for tp, e in outcome.items()} == {
            mine: "GroupSubscribedToTopicError",
            other: None,
            TopicPartition("other", 7): "UnknownTopicOrPartitionError",
        }
        assert _committed(engine, "readers") == 1  # the subscribed topic's offset stayed
        assert admin.delete_group_offsets("readers", [other]) == {other: None}  # none left: nothing to do
    finally:
        consumer.close()  # leaves the group
    assert admin.delete_group_offsets("readers", [mine]) == {mine: None}
    assert _committed(engine, "readers") == 0
    with pytest.raises(errors.GroupIdNotFoundError):
        admin.delete_group_offsets("never-was", [mine])
    for bad in ("", None):
        with pytest.raises(errors.InvalidGroupIdError):
            admin.delete_group_offsets(bad, [mine])  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidRequestError):
        admin.delete_group_offsets("readers", "ledger-0")  # type: ignore[arg-type]


def test_members_are_removed_by_instance_id_or_member_id_by_whom_may(
    db_url: str, engine: sa.Engine, admin: Admin
) -> None:
    """LeaveGroup v3 (KIP-345): a static member by its instance id, a dynamic one by its member
    id, one rebalance; an instance id with another member's id is fenced; another role's
    members stay unless the caller is the admin role (or the owner)."""
    static = Consumer(db_url, group_id="crew", group_instance_id="deck-1", enable_auto_commit=False)
    dynamic = Consumer(db_url, group_id="crew", enable_auto_commit=False)
    try:
        static.subscribe([TOPIC])
        dynamic.subscribe([TOPIC])
        _assigned(static)
        dynamic_id = dynamic.group_metadata().member_id
        static_id = static.group_metadata().member_id
        assert static_id and dynamic_id
        with login_roles(engine, db_url, ("client",)) as urls:
            role = create_engine(urls["client"], poolclass=sa.NullPool)
            try:
                with role.connect() as conn:
                    refused = groups.leave_group_members(conn, group_id="crew", members=[(dynamic_id, None)])
                assert refused == [(dynamic_id, None, "unknown_member_id")]  # not its member to remove
            finally:
                role.dispose()
        with engine.connect() as conn:
            fenced = groups.leave_group_members(conn, group_id="crew", members=[(dynamic_id, "deck-1")])
            conn.commit()
        assert fenced == [(dynamic_id, "deck-1", "fenced_instance_id")]
        outcome = admin.remove_group_members("crew", instance_ids=["deck-1", "deck-9"], member_ids=[dynamic_id])
        assert {k: type(v).__name__ if v else None for k, v in outcome.items()} == {
            "deck-1": None,
            "deck-9": "UnknownMemberIdError",
            dynamic_id: None,
        }
        assert admin.describe_group("crew").members == ()
        with pytest.raises(errors.InvalidRequestError):
            admin.remove_group_members("crew")
        with pytest.raises(errors.InvalidRequestError):
            admin.remove_group_members("crew", instance_ids="deck-1")
        with pytest.raises(errors.GroupIdNotFoundError):
            admin.remove_group_members("never-was", member_ids=["x"])
    finally:
        static.close()
        dynamic.close()


def test_delete_group_racing_joins_and_commits(db_url: str, engine: sa.Engine, admin: Admin) -> None:
    """One session joins, commits and leaves a group over and over while another deletes it, 200
    times: each delete either finds members (refused) or takes the group and its offsets whole;
    a join after it makes a new group; no call fails any other way, and none deadlocks."""
    stop = threading.Event()
    failures: list[BaseException] = []
    outcomes: dict[str, int] = {"deleted": 0, "non_empty": 0, "not_found": 0}

    def churn() -> None:
        member_engine = create_engine(db_url, isolation_level="AUTOCOMMIT")
        try:
            with member_engine.connect() as conn:
                while not stop.is_set():
                    m = groups.join_group(conn, group_id="churn", topics=[TOPIC], session_timeout_ms=6000)
                    if m.assignment:
                        groups.offset_commit(
                            conn,
                            group_id="churn",
                            member_id=m.member_id,
                            generation=m.generation,
                            offsets={next(iter(sorted(m.assignment))): (0, "")},
                        )
                    groups.leave_group(conn, group_id="churn", member_id=m.member_id)
        except errors.OncelogError as exc:
            # A commit can meet its group deleted between the join and the commit (the join made
            # it, the delete took it): Kafka's answer, rejoin. Anything else is a failure.
            if not isinstance(exc, errors.UnknownMemberIdError | errors.IllegalGenerationError):
                failures.append(exc)
            if not stop.is_set():
                churn()
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)
        finally:
            member_engine.dispose()

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        deleter = create_engine(db_url, isolation_level="AUTOCOMMIT")
        try:
            with deleter.connect() as conn:
                for _ in range(200):
                    try:
                        ops.delete_group(conn, group_id="churn")
                        outcomes["deleted"] += 1
                    except errors.NonEmptyGroupError:
                        outcomes["non_empty"] += 1
                    except errors.GroupIdNotFoundError:
                        outcomes["not_found"] += 1
        finally:
            deleter.dispose()
    finally:
        stop.set()
        worker.join(WAIT)
    assert not failures, failures
    assert sum(outcomes.values()) == 200 and outcomes["deleted"] > 0, outcomes
    with engine.connect() as conn:
        orphans = conn.exec_driver_sql(
            "SELECT count(*) FROM committed_offsets c "
            "WHERE NOT EXISTS (SELECT 1 FROM groups g WHERE g.group_id = c.group_id)"
        ).scalar_one()
    assert orphans == 0
