"""Per-topic access control (migration 0009, docs/acl.md), tried as real login roles.

* Off by default: ACLs may exist, and nothing is refused, until an admin switches enforcement on.
* On: a client allowed topic ``a`` produces and consumes ``a`` and gets TopicAuthorizationError on
  ``b`` from every path (Producer, store calls, the SQL functions psql would call), with nothing
  written; prefixed patterns and the literal ``*``; transactional id prefixes (Init, Produce,
  AddPartitions, EndTxn); group prefixes (join, heartbeat, leave, offset commit and fetch,
  TxnOffsetCommit).
* The reader views show only the topics, groups and transactional ids a role may see, behind a
  security barrier (a reader's own leaky function sees no hidden row); ``txn_history`` has a
  row-level policy.
* SET ROLE narrows what a session may do and cannot widen it; the admin role and the owner are not
  subject to ACLs; only the admin role administers ACLs, only the owner writes the tables; hostile
  names are data, never SQL; revocations apply from the next call.
* ``oncelog acls list|add|remove|enforce``, and the migration round trip restoring every function
  and view exactly as revision 0008 had them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from oncelog import Admin, Consumer, Producer, TopicPartition, errors
from oncelog.cli import cli
from oncelog.store import create_engine, groups, log, migrate, txn
from oncelog.store.engine import database_url
from oncelog.store.errors import mapped_errors
from oncelog.store.records import RecordIn
from oncelog.types import AclBinding, AclBindingFilter, AclOperation, AclResourceType

DENIED = "42501"  # insufficient_privilege
CLIENT, READER, ADMIN = "oncelog_client", "oncelog_reader", "oncelog_admin"
FAST_GROUP: dict[str, Any] = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 100, "enable_auto_commit": False}


# --- fixtures and helpers --------------------------------------------------------------------


class Roles:
    """Roles made for one test (cluster-wide objects, so each name carries a unique suffix)."""

    def __init__(self, engine: sa.Engine, db_url: str) -> None:
        self._engine = engine
        self._base = database_url(db_url)
        self._suffix = uuid.uuid4().hex[:8]
        self._made: list[str] = []

    def name(self, short: str) -> str:
        """The full name of role ``short``."""
        return f"acl_{short}_{self._suffix}"

    def group(self, short: str, *member_of: str) -> str:
        """A NOLOGIN role, member of ``member_of``; returns its name."""
        return self._create(short, "NOLOGIN", member_of)

    def login(self, short: str, *member_of: str) -> str:
        """A login role, member of ``member_of``; returns its URL."""
        name = self._create(short, f"LOGIN PASSWORD 'pw-{self._suffix}'", member_of)
        return self._base.set(username=name, password=f"pw-{self._suffix}").render_as_string(hide_password=False)

    def _create(self, short: str, options: str, member_of: tuple[str, ...]) -> str:
        name = self.name(short)
        member = f" IN ROLE {', '.join(member_of)}" if member_of else ""
        with self._engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE ROLE {name} {options}{member}")
        self._made.append(name)
        return name

    def drop(self) -> None:
        with self._engine.begin() as conn:
            for name in reversed(self._made):
                conn.exec_driver_sql(f"DROP ROLE {name}")


@pytest.fixture
def roles(engine: sa.Engine, db_url: str) -> Iterator[Roles]:
    made = Roles(engine, db_url)
    yield made
    made.drop()


@pytest.fixture
def admin(db_url: str) -> Iterator[Admin]:
    """An Admin as the schema owner (not subject to ACLs), with topics a and b of two partitions."""
    with Admin(db_url) as owner:
        owner.create_topic("a", partitions=2)
        owner.create_topic("b", partitions=2)
        yield owner


@contextmanager
def connect(url: str) -> Iterator[sa.Connection]:
    """An autocommit connection as the role of ``url`` (each store call is its own transaction)."""
    engine = create_engine(url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            yield conn
    finally:
        engine.dispose()


def sql(conn: sa.Connection, statement: str, **params: Any) -> list[Any]:
    """Run ``statement`` as psql would, with database errors mapped to oncelog errors."""
    with mapped_errors():
        return list(conn.exec_driver_sql(statement, params).all())


def count(engine: sa.Engine, statement: str, **params: Any) -> int:
    with engine.connect() as conn:
        return int(conn.exec_driver_sql(statement, params).scalar_one())


def allow(
    admin: Admin, principal: str, kind: AclResourceType, name: str, *operations: AclOperation, prefixed: bool = False
) -> None:
    admin.create_acls(
        [AclBinding(principal, kind, name, op, "prefixed" if prefixed else "literal") for op in operations]
    )


def values(records: list[Any]) -> list[bytes]:
    return [bytes(r.value) for r in records]


# --- off by default ----------------------------------------------------------------------------


def test_off_by_default_acls_change_nothing(admin: Admin, roles: Roles, engine: sa.Engine) -> None:
    client = roles.login("c", CLIENT)
    reader = roles.login("r", READER)
    assert admin.acl_enforcement() is False
    # An ACL on a only: not enforced, so b stays open to everyone.
    allow(admin, roles.name("c"), "topic", "a", "read")
    with Producer(client) as producer:
        producer.send("b", b"plain", partition=0).result(30)
    with connect(client) as conn:
        ident = txn.init_producer_id(conn, transactional_id="any-id", transaction_timeout_ms=60_000)
        log.produce(
            conn,
            topic="b",
            partition=1,
            records=[RecordIn(b"txn")],
            producer_id=ident.producer_id,
            producer_epoch=ident.epoch,
            base_sequence=0,
            transactional_id="any-id",
            txn_number=1,
        )
        assert (
            txn.end_txn(
                conn,
                transactional_id="any-id",
                producer_id=ident.producer_id,
                epoch=ident.epoch,
                txn_number=1,
                commit=True,
            )
            == "committed"
        )
        member = groups.join_group(conn, group_id="any-group", topics=["b"], session_timeout_ms=3000)
        assert member.assignment == {("b", 0), ("b", 1)}
        assert values(log.fetch(conn, topic="b", partition=0, offset=0).records) == [b"plain"]
        assert [r.transactional_id for r in txn.list_transactions(conn)] == ["any-id"]
    with connect(reader) as conn:
        assert sorted(r.value for r in sql(conn, "SELECT value FROM committed_records")) == [b"plain", b"txn"]
        assert {r.topic for r in sql(conn, "SELECT topic FROM partition_offsets")} == {"a", "b"}
        assert [r.group_id for r in sql(conn, "SELECT group_id FROM group_status")] == ["any-group"]
        assert sql(conn, "SELECT acl_allowed_v1('topic', 'b', 'write') AS ok")[0].ok is True


# --- topics --------------------------------------------------------------------------------------


def test_a_client_allowed_topic_a_is_refused_topic_b_and_nothing_is_written(
    admin: Admin, roles: Roles, engine: sa.Engine
) -> None:
    client = roles.login("c", CLIENT)
    allow(admin, roles.name("c"), "topic", "a", "read", "write")
    assert admin.set_acl_enforcement(True) is False
    assert admin.acl_enforcement() is True

    with Producer(client) as producer:
        producer.send("a", b"allowed", partition=0).result(30)
        refused = producer.send("b", b"refused", partition=0)
        with pytest.raises(errors.TopicAuthorizationError, match="write topic 'b'"):
            refused.result(30)
    with connect(client) as conn:
        with pytest.raises(errors.TopicAuthorizationError):
            log.produce(conn, topic="b", partition=1, records=[RecordIn(b"x")])
        assert values(log.fetch(conn, topic="a", partition=0, offset=0).records) == [b"allowed"]
        # One refused partition refuses the whole read (it is one snapshot of all of them).
        with pytest.raises(errors.TopicAuthorizationError, match="read topic 'b'"):
            log.fetch_many(conn, {("a", 0): 0, ("b", 0): 0})
        # The functions psql or JDBC would call directly are held to the same ACLs.
        for statement in (
            "SELECT * FROM fetch_v1('b', 0, 0, 10)",
            "SELECT * FROM fetch_v2('{b}', '{0}', '{0}', 10, false)",
            "SELECT * FROM fetch_v3('{b}', '{0}', '{0}', 10, true)",
            "SELECT * FROM list_offsets_v1('b')",
            "SELECT * FROM list_offsets_for_times_v1('{b}', '{0}', ARRAY[now()], true)",
            "SELECT * FROM list_offsets_max_timestamp_v1('{b}', '{0}', true)",
            "SELECT * FROM produce_v2('b', 0, NULL, NULL, NULL, ARRAY[NULL::bytea], ARRAY['x'::bytea])",
        ):
            with pytest.raises(errors.TopicAuthorizationError) as info:
                sql(conn, statement)
            assert isinstance(info.value, errors.AuthorizationError) and info.value.sqlstate == "OL501"
        assert [r.partition for r in sql(conn, "SELECT partition FROM list_offsets_v1('a')")] == [0, 1]
        # ListOffsets through the store names the refusal too (the view alone would only hide b).
        with pytest.raises(errors.TopicAuthorizationError):
            log.list_offsets(conn, topic="b")
        with pytest.raises(errors.TopicAuthorizationError):  # as Kafka: existence is not revealed
            log.list_offsets(conn, topic="no-such-topic")
        assert [p.partition for p in log.list_offsets(conn, topic="a")] == [0, 1]
        found = log.list_offsets_for_times(
            conn, requests=[("a", 0, datetime(2000, 1, 1, tzinfo=UTC))], read_committed=True
        )
        assert [f[0] if f else None for f in found] == [0]
        newest = log.list_offsets_max_timestamp(conn, partitions=[("a", 0)], read_committed=True)
        assert [f[0] if f else None for f in newest] == [0]
    with Consumer(client, isolation_level="read_committed") as consumer:
        consumer.assign([TopicPartition("a", 0)])
        consumer.seek(TopicPartition("a", 0), 0)
        assert values(consumer.poll(timeout=5)) == [b"allowed"]
    assert count(engine, "SELECT count(*) FROM records r JOIN topics t USING (topic_id) WHERE t.name = 'b'") == 0
    assert count(engine, "SELECT count(*) FROM records") == 1


def test_prefixed_patterns_and_the_literal_wildcard(admin: Admin, roles: Roles) -> None:
    for name in ("orders.eu", "orders.us", "orders", "ordersX", "payments"):
        admin.create_topic(name)
    client = roles.login("c", CLIENT)
    allow(admin, roles.name("c"), "topic", "orders.", "write", prefixed=True)
    admin.set_acl_enforcement(True)

    def writes(topic: str) -> bool:
        with connect(client) as conn:
            try:
                log.produce(conn, topic=topic, partition=0, records=[RecordIn(b"v")])
            except errors.TopicAuthorizationError:
                return False
            return True

    def reads(topic: str) -> bool:
        with connect(client) as conn:
            try:
                log.fetch(conn, topic=topic, partition=0, offset=0)
            except errors.TopicAuthorizationError:
                return False
            return True

    assert [writes(t) for t in ("orders.eu", "orders.us", "orders", "ordersX", "payments")] == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert not reads("orders.eu")  # write does not imply read
    allow(admin, roles.name("c"), "topic", "*", "read")  # a literal * is every topic
    assert all(reads(t) for t in ("orders.eu", "orders", "payments", "a"))
    assert not writes("payments")


# --- transactional ids ---------------------------------------------------------------------------


def test_transactional_id_prefixes(admin: Admin, roles: Roles, engine: sa.Engine) -> None:
    client = roles.login("c", CLIENT)
    other = roles.login("o", CLIENT)  # may write topic a, but has no transactional id
    allow(admin, roles.name("c"), "transactional_id", "app-", "write", prefixed=True)
    allow(admin, roles.name("c"), "topic", "a", "write")
    allow(admin, roles.name("o"), "topic", "a", "write")
    admin.set_acl_enforcement(True)

    with Producer(client, transactional_id="app-1") as producer:
        producer.init_transactions()
        with producer.transaction():
            producer.send("a", b"in-txn", partition=0)
    with Producer(client, transactional_id="other-1") as producer:
        with pytest.raises(errors.TransactionalIdAuthorizationError) as info:
            producer.init_transactions()
        assert info.value.fatal and info.value.sqlstate == "OL503"
    assert count(engine, "SELECT count(*) FROM transactions WHERE transactional_id = 'other-1'") == 0

    with connect(client) as conn:
        ident = txn.init_producer_id(conn, transactional_id="app-2", transaction_timeout_ms=60_000)
        # A topic the role may not write, inside its own transaction: refused before the
        # transaction is opened or the partition added.
        with pytest.raises(errors.TopicAuthorizationError):
            log.produce(
                conn,
                topic="b",
                partition=0,
                records=[RecordIn(b"x")],
                producer_id=ident.producer_id,
                producer_epoch=ident.epoch,
                base_sequence=0,
                transactional_id="app-2",
                txn_number=1,
            )
        with pytest.raises(errors.TopicAuthorizationError):
            txn.add_partitions_to_txn(
                conn,
                transactional_id="app-2",
                producer_id=ident.producer_id,
                epoch=ident.epoch,
                txn_number=1,
                partitions=[("a", 0), ("b", 0)],
            )
        assert (
            sql(conn, "SELECT to_state FROM txn_history WHERE transactional_id = 'app-2' ORDER BY id")[-1][0] == "Empty"
        )
        txn.add_partitions_to_txn(
            conn,
            transactional_id="app-2",
            producer_id=ident.producer_id,
            epoch=ident.epoch,
            txn_number=1,
            partitions=[("a", 0)],
        )
    assert count(engine, "SELECT count(*) FROM txn_partitions WHERE transactional_id = 'app-2'") == 1

    # Knowing another producer's identity is not enough to end its transaction.
    with connect(other) as conn, pytest.raises(errors.TransactionalIdAuthorizationError):
        txn.end_txn(
            conn,
            transactional_id="app-2",
            producer_id=ident.producer_id,
            epoch=ident.epoch,
            txn_number=1,
            commit=False,
        )
    assert (
        count(engine, "SELECT count(*) FROM transactions WHERE transactional_id = 'app-2' AND state = 'Ongoing'") == 1
    )
    with connect(client) as conn:
        assert (
            txn.end_txn(
                conn,
                transactional_id="app-2",
                producer_id=ident.producer_id,
                epoch=ident.epoch,
                txn_number=1,
                commit=False,
            )
            == "aborted"
        )


# --- groups ----------------------------------------------------------------------------------------


def test_group_prefixes(admin: Admin, roles: Roles, engine: sa.Engine, db_url: str) -> None:
    client = roles.login("c", CLIENT)
    allow(admin, roles.name("c"), "group", "billing-", "read", prefixed=True)
    allow(admin, roles.name("c"), "topic", "a", "read", "write")
    allow(admin, roles.name("c"), "transactional_id", "app-", "write", prefixed=True)
    with connect(db_url) as owner:
        groups.join_group(owner, group_id="other", topics=["a"], session_timeout_ms=60_000)
    admin.set_acl_enforcement(True)

    with connect(client) as conn:
        me = groups.join_group(conn, group_id="billing-x", topics=["a"], session_timeout_ms=60_000)
        assert groups.heartbeat(conn, group_id="billing-x", member_id=me.member_id).generation == me.generation
        groups.offset_commit(
            conn, group_id="billing-x", member_id=me.member_id, generation=me.generation, offsets={("a", 0): (0, "")}
        )
        assert groups.offset_fetch(conn, group_id="billing-x", partitions=[("a", 0)])[("a", 0)].offset == 0
        with pytest.raises(errors.TopicAuthorizationError):
            groups.offset_fetch(conn, group_id="billing-x", partitions=[("b", 0)])
        with pytest.raises(errors.GroupAuthorizationError) as info:
            groups.join_group(conn, group_id="nope", topics=["a"], session_timeout_ms=60_000)
        assert info.value.sqlstate == "OL502" and isinstance(info.value, errors.AuthorizationError)
        with pytest.raises(errors.TopicAuthorizationError):
            groups.join_group(conn, group_id="billing-y", topics=["a", "b"], session_timeout_ms=60_000)
        other = sql(conn, "SELECT member_id FROM group_status WHERE group_id = 'other'")
        assert other == []  # the view hides the group too
        other_member = admin.describe_group("other").members[0].member_id
        for call in (
            lambda: groups.heartbeat(conn, group_id="other", member_id=other_member),
            lambda: groups.leave_group(conn, group_id="other", member_id=other_member),
            lambda: groups.offset_fetch(conn, group_id="other", partitions=[("a", 0)]),
            lambda: groups.offset_commit(conn, group_id="other", offsets={("a", 0): (0, "")}),
        ):
            with pytest.raises(errors.GroupAuthorizationError):
                call()
        ident = txn.init_producer_id(conn, transactional_id="app-1", transaction_timeout_ms=60_000)
        txn_offsets: dict[str, Any] = {
            "transactional_id": "app-1",
            "producer_id": ident.producer_id,
            "epoch": ident.epoch,
            "txn_number": 1,
            "group_instance_id": None,
            "offsets": {("a", 0): (1, "")},
        }
        with pytest.raises(errors.GroupAuthorizationError):
            groups.txn_offset_commit(conn, group_id="other", member_id=other_member, generation=1, **txn_offsets)
        groups.txn_offset_commit(
            conn, group_id="billing-x", member_id=me.member_id, generation=me.generation, **txn_offsets
        )
        groups.leave_group(conn, group_id="billing-x", member_id=me.member_id)
    assert count(engine, "SELECT count(*) FROM groups WHERE group_id IN ('nope', 'billing-y')") == 0
    assert count(engine, "SELECT count(*) FROM group_members WHERE group_id = 'other'") == 1

    with Consumer(client, group_id="billing-z", **FAST_GROUP) as consumer:
        consumer.subscribe(["a"])
        assert consumer.assignment() == {TopicPartition("a", 0), TopicPartition("a", 1)}
    with Consumer(client, group_id="nope", **FAST_GROUP) as consumer, pytest.raises(errors.GroupAuthorizationError):
        consumer.subscribe(["a"])


# --- views and row-level security -------------------------------------------------------------------


@pytest.fixture
def everything(admin: Admin, db_url: str) -> None:
    """As the owner: records on a and b, transactions tx-a (on a) and tx-b (on b), committed offsets of
    groups g1 and g2 on both topics, and offsets of group g3 pending in open transaction tx-p."""
    with connect(db_url) as conn:
        for topic in ("a", "b"):
            log.produce(conn, topic=topic, partition=0, records=[RecordIn(topic.encode())])
        for tid, topic in (("tx-a", "a"), ("tx-b", "b")):
            ident = txn.init_producer_id(conn, transactional_id=tid, transaction_timeout_ms=60_000)
            txn.add_partitions_to_txn(
                conn,
                transactional_id=tid,
                producer_id=ident.producer_id,
                epoch=ident.epoch,
                txn_number=1,
                partitions=[(topic, 1)],
            )
            txn.end_txn(
                conn,
                transactional_id=tid,
                producer_id=ident.producer_id,
                epoch=ident.epoch,
                txn_number=1,
                commit=True,
            )
        for group in ("g1", "g2"):
            groups.offset_commit(conn, group_id=group, offsets={("a", 0): (1, ""), ("b", 0): (1, "")})
        member = groups.join_group(conn, group_id="g3", topics=["a", "b"], session_timeout_ms=600_000)
        ident = txn.init_producer_id(conn, transactional_id="tx-p", transaction_timeout_ms=600_000)
        groups.txn_offset_commit(
            conn,
            transactional_id="tx-p",
            producer_id=ident.producer_id,
            epoch=ident.epoch,
            txn_number=1,
            group_id="g3",
            member_id=member.member_id,
            group_instance_id=None,
            generation=member.generation,
            offsets={("a", 0): (1, ""), ("b", 0): (1, "")},
        )


VIEW_QUERIES = {
    "committed_records": "SELECT DISTINCT topic FROM committed_records",
    "partition_offsets": "SELECT DISTINCT topic FROM partition_offsets",
    "transaction_status": "SELECT transactional_id FROM transaction_status",
    "group_status": "SELECT DISTINCT group_id FROM group_status",
    "group_offsets": "SELECT group_id || '/' || topic FROM group_offsets",
    "pending_group_offsets": "SELECT group_id || '/' || topic FROM pending_group_offsets",
}


def visible(url: str) -> dict[str, set[str]]:
    with connect(url) as conn:
        return {view: {r[0] for r in sql(conn, query)} for view, query in VIEW_QUERIES.items()}


@pytest.mark.usefixtures("everything")
def test_the_views_show_only_what_a_role_may_see(admin: Admin, roles: Roles, db_url: str) -> None:
    reader = roles.login("r", READER)
    describer = roles.login("d", CLIENT)
    allow(admin, roles.name("r"), "topic", "a", "read")
    allow(admin, roles.name("r"), "group", "g1", "describe")
    allow(admin, roles.name("r"), "group", "g3", "read")  # read implies describe
    allow(admin, roles.name("r"), "transactional_id", "tx-a", "describe")
    allow(admin, roles.name("d"), "topic", "b", "describe")
    everything_seen = {
        "committed_records": {"a", "b"},
        "partition_offsets": {"a", "b"},
        "transaction_status": {"tx-a", "tx-b", "tx-p"},
        "group_status": {"g1", "g2", "g3"},
        "group_offsets": {"g1/a", "g1/b", "g2/a", "g2/b"},
        "pending_group_offsets": {"g3/a", "g3/b"},
    }
    assert visible(reader) == everything_seen  # not enforced yet

    admin.set_acl_enforcement(True)
    assert visible(reader) == {
        "committed_records": {"a"},
        "partition_offsets": {"a"},
        "transaction_status": {"tx-a"},
        "group_status": {"g1", "g3"},
        "group_offsets": {"g1/a"},
        "pending_group_offsets": {"g3/a"},
    }
    # DESCRIBE shows a topic's offsets, not its records.
    assert visible(describer) == {
        "committed_records": set(),
        "partition_offsets": {"b"},
        "transaction_status": set(),
        "group_status": set(),
        "group_offsets": set(),
        "pending_group_offsets": set(),
    }
    # The operator's Admin calls read the same views, so they are filtered the same way.
    with Admin(reader) as as_reader:
        assert [t.name for t in as_reader.topic_summaries()] == ["a"]
        assert [g.group_id for g in as_reader.list_groups()] == ["g1", "g3"]
        assert [t.transactional_id for t in as_reader.list_transactions()] == ["tx-a"]
        with pytest.raises(errors.GroupIdNotFoundError):
            as_reader.describe_group("g2")
    assert visible(db_url) == everything_seen
    admin.set_acl_enforcement(False)
    assert visible(reader) == everything_seen


@pytest.mark.usefixtures("everything")
def test_a_leaky_function_in_a_readers_query_sees_no_hidden_row(admin: Admin, roles: Roles, engine: sa.Engine) -> None:
    """The views are security barriers: their ACL filter runs before any function of the caller's.
    (Without the barrier, the planner runs this cheap function first on partition_offsets' rows and
    it sees topic b.)"""
    reader = roles.login("r", READER)
    allow(admin, roles.name("r"), "topic", "a", "read")
    schema = f"leak_{roles.name('r')}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema} AUTHORIZATION {roles.name('r')}")
    admin.set_acl_enforcement(True)
    seen: list[str] = []
    try:
        with psycopg.connect(reader.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
            conn.add_notice_handler(lambda diag: seen.append(str(diag.message_primary)))
            conn.execute(
                f"CREATE FUNCTION {schema}.leak(t text) RETURNS boolean LANGUAGE plpgsql COST 0.0001 AS "
                "$$ BEGIN RAISE NOTICE 'saw %', t; RETURN true; END $$"
            )
            for view in ("partition_offsets", "committed_records"):
                rows = conn.execute(f"SELECT DISTINCT topic FROM oncelog.{view} WHERE {schema}.leak(topic)").fetchall()
                assert rows == [("a",)], view
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
    assert seen and set(seen) == {"saw a"}, seen


@pytest.mark.usefixtures("everything")
def test_txn_history_shows_a_client_only_its_transactional_ids(admin: Admin, roles: Roles, engine: sa.Engine) -> None:
    client = roles.login("c", CLIENT)
    allow(admin, roles.name("c"), "transactional_id", "tx-a", "write")
    allow(admin, roles.name("c"), "transactional_id", "tx-p", "describe")
    with connect(client) as conn:
        assert set(txn.committed_transactional_ids(conn, pattern=".*")) == {"tx-a", "tx-b"}
    admin.set_acl_enforcement(True)
    with connect(client) as conn:
        assert set(txn.committed_transactional_ids(conn, pattern=".*")) == {"tx-a"}
        assert {r[0] for r in sql(conn, "SELECT DISTINCT transactional_id FROM txn_history")} == {"tx-a", "tx-p"}
    assert count(engine, "SELECT count(DISTINCT transactional_id) FROM txn_history") == 3  # the owner sees all


# --- who the principal is ---------------------------------------------------------------------------


def test_set_role_narrows_a_session_and_cannot_widen_it(admin: Admin, roles: Roles, engine: sa.Engine) -> None:
    with engine.connect() as conn:
        owner = conn.exec_driver_sql("SELECT session_user").scalar_one()
    team_a = roles.group("team_a", CLIENT)
    team_b = roles.group("team_b", CLIENT)
    both = roles.login("both", team_a, team_b)
    only_a = roles.login("only_a", team_a)
    allow(admin, team_a, "topic", "a", "write")
    allow(admin, team_b, "topic", "b", "write")
    admin.set_acl_enforcement(True)
    one = [RecordIn(b"v")]

    with connect(both) as conn:  # a member of both teams has the ACLs of both
        log.produce(conn, topic="a", partition=0, records=one)
        log.produce(conn, topic="b", partition=0, records=one)
        conn.exec_driver_sql(f"SET ROLE {team_a}")
        log.produce(conn, topic="a", partition=0, records=one)
        with pytest.raises(errors.TopicAuthorizationError, match=team_a):
            log.produce(conn, topic="b", partition=0, records=one)
        conn.exec_driver_sql("RESET ROLE")
        log.produce(conn, topic="b", partition=0, records=one)

    with connect(only_a) as conn:
        for attempt in (
            f"SET ROLE {team_b}",
            f"SELECT set_config('role', '{team_b}', false)",
            f"SET ROLE {ADMIN}",
            f"SET SESSION AUTHORIZATION {roles.name('both')}",
            f"SET ROLE {owner}",
        ):
            with pytest.raises(errors.AuthorizationError):
                sql(conn, attempt)
        with pytest.raises(errors.TopicAuthorizationError, match=roles.name("only_a")):
            log.produce(conn, topic="b", partition=0, records=one)
        # "May I?" takes no principal: a role can ask only about itself.
        assert sql(conn, "SELECT acl_allowed_v1('topic', 'b', 'write') AS ok")[0].ok is False
        assert sql(conn, "SELECT acl_allowed_v1('topic', 'a', 'write') AS ok")[0].ok is True


def test_the_admin_role_and_the_owner_are_not_subject_to_acls(admin: Admin, roles: Roles, db_url: str) -> None:
    ops = roles.login("ops", ADMIN)
    admin.set_acl_enforcement(True)  # and no ACL at all
    for url in (ops, db_url):
        with connect(url) as conn:
            log.produce(conn, topic="b", partition=0, records=[RecordIn(b"v")])
            ident = txn.init_producer_id(conn, transactional_id=f"ops-{uuid.uuid4()}", transaction_timeout_ms=60_000)
            assert ident.epoch == 0
            member = groups.join_group(conn, group_id=f"ops-{uuid.uuid4()}", topics=["b"], session_timeout_ms=3000)
            assert member.assignment == {("b", 0), ("b", 1)}
            assert len(log.fetch(conn, topic="b", partition=0, offset=0).records) >= 1
        assert visible(url)["committed_records"] == {"b"}


#: Functions a client or reader may call that make no ACL check, each for a reason (docs/acl.md).
UNCHECKED = {
    "init_producer_id_v1",  # an idempotent producer id grants nothing: every produce is checked
    "expire_transactions_v2",  # enforces timeouts (at the server's time), which any reader may trigger
    "fetch_v2",  # a view of fetch_v3, which checks
    "end_txn_v2",  # end_txn_v1, which checks, and the waiting readers of what it committed
    "produce_end_txn_v3",  # produce_end_txn_v2, which checks, and the same
    "wake_channel_v1",  # a channel's name: any role may LISTEN or NOTIFY in PostgreSQL anyway
    "fetch_wait_v1",  # registers through fetch_wait_register_v1, which checks
    "fetch_wait_v2",  # the same
    "wake_readers_v1",  # a NOTIFY (any role may send one); ends only registrations whose readers hear it
    "group_listen_v1",  # a LISTEN on the group channel, whose payloads are md5s of group ids
    "send",  # send_v1, which checks, under a stable name
    "acl_allowed_v1",  # the question "may I?" itself
    "dirty_ratio_v2",  # arithmetic over its arguments, for the compaction_status view; reads nothing
}


def test_every_function_a_client_or_reader_may_call_checks_acls(engine: sa.Engine) -> None:
    """Guards later migrations too: a new protocol function must check, or be named here."""
    with engine.connect() as conn:
        callable_by_them = conn.exec_driver_sql(
            "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'oncelog' AND p.prorettype <> 'trigger'::regtype "
            "AND (has_function_privilege(%(client)s, p.oid, 'EXECUTE') "
            "     OR has_function_privilege(%(reader)s, p.oid, 'EXECUTE'))",
            {"client": CLIENT, "reader": READER},
        ).all()
    names = {name for name, _ in callable_by_them}
    assert names >= UNCHECKED and "produce_v2" in names
    unchecked = {name for name, source in callable_by_them if "acl_require_v1" not in source}
    assert unchecked == UNCHECKED


# --- administration ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["client", "reader", "admin"])
def test_only_the_admin_role_administers_acls_and_only_the_owner_writes_them(
    admin: Admin, roles: Roles, engine: sa.Engine, kind: str
) -> None:
    url = roles.login(kind, f"oncelog_{kind}")
    attacks = [
        "INSERT INTO acls (principal, resource_type, resource_name, pattern_type, operation) "
        "VALUES ('x', 'topic', 'b', 'literal', 'all')",
        "UPDATE acl_settings SET enforce = false",
        "DELETE FROM acls",
        "SELECT acl_require_v1('topic', ARRAY['b'], 'write')",  # internal: granted to nobody
        "SELECT acl_match_v1(0, 'topic', 'b', 'write')",
    ]
    if kind != "admin":
        attacks += [
            f"SELECT create_acl_v1('{roles.name(kind)}', 'topic', 'b', 'literal', 'all')",
            "SELECT * FROM delete_acls_v1()",
            "SELECT * FROM describe_acls_v1()",
            "SELECT set_acl_enforcement_v1(false)",
        ]
    allow(admin, roles.name(kind), "topic", "a", "read")
    admin.set_acl_enforcement(True)
    libpq = url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(libpq, autocommit=True, options="-c search_path=oncelog") as conn:
        for attack in attacks:
            with pytest.raises(psycopg.Error) as info:
                conn.execute(attack)
            assert info.value.sqlstate == DENIED, (attack, info.value)
    with Admin(url) as as_role:
        if kind == "admin":
            assert as_role.set_acl_enforcement(True) is True
            assert len(as_role.describe_acls()) == 1
        else:
            with pytest.raises(errors.AuthorizationError):
                as_role.create_acls([AclBinding(roles.name(kind), "topic", "b", "all")])
            with pytest.raises(errors.AuthorizationError):
                as_role.set_acl_enforcement(False)
    assert admin.acl_enforcement() is True
    assert admin.describe_acls() == [AclBinding(roles.name(kind), "topic", "a", "read")]


def test_create_describe_delete(admin: Admin, roles: Roles) -> None:
    alice, bob = roles.group("alice"), roles.group("bob")
    wanted = [
        AclBinding(alice, "topic", "a", "read"),
        AclBinding(alice, "topic", "orders.", "write", "prefixed"),
        AclBinding(alice, "group", "billing-", "read", "prefixed"),
        AclBinding(bob, "transactional_id", "*", "all"),
        AclBinding(bob, "topic", "a", "describe"),
    ]
    assert admin.create_acls(wanted) == wanted
    assert admin.create_acls([wanted[0], AclBinding(bob, "group", "g", "all")]) == [
        AclBinding(bob, "group", "g", "all")
    ]
    assert len(admin.describe_acls()) == 6
    assert admin.describe_acls(AclBindingFilter(principal=alice)) == sorted(
        wanted[:3], key=lambda a: (a.resource_type, a.resource_name)
    )
    assert admin.describe_acls(AclBindingFilter(resource_type="topic", resource_name="a")) == [
        AclBinding(alice, "topic", "a", "read"),
        AclBinding(bob, "topic", "a", "describe"),
    ]
    assert admin.describe_acls(AclBindingFilter(pattern_type="prefixed", operation="write")) == [wanted[1]]
    # A filter's name matches as stored, not as a pattern.
    assert admin.describe_acls(AclBindingFilter(resource_name="orders.eu")) == []
    gone = admin.delete_acls(
        [AclBindingFilter(principal=bob, resource_type="group"), AclBindingFilter(operation="read")]
    )
    assert sorted(gone, key=repr) == sorted([AclBinding(bob, "group", "g", "all"), wanted[0], wanted[2]], key=repr)
    assert sorted(admin.describe_acls(), key=repr) == sorted([wanted[1], wanted[3], wanted[4]], key=repr)


@pytest.mark.parametrize(
    ("binding", "match"),
    [
        (AclBinding("no_such_role_anywhere", "topic", "a", "read"), "not a role"),
        (AclBinding("{alice}", "cluster", "a", "read"), "resource type"),  # type: ignore[arg-type]
        (AclBinding("{alice}", "topic", "a", "read", "match"), "pattern type"),  # type: ignore[arg-type]
        (AclBinding("{alice}", "topic", "a", "alter"), "operation"),  # type: ignore[arg-type]
        (AclBinding("{alice}", "group", "g", "write"), "operation 'write' does not apply to a group"),
        (AclBinding("{alice}", "transactional_id", "t", "read"), "does not apply to a transactional id"),
        (AclBinding("{alice}", "topic", "bad name", "read"), "not a valid literal topic"),
        (AclBinding("{alice}", "topic", "..", "read"), "not a valid"),
        (AclBinding("{alice}", "topic", "*", "read", "prefixed"), "not a valid prefixed topic"),
        (AclBinding("{alice}", "group", "", "read"), "not a valid"),
        (AclBinding("{alice}", "group", "x" * 256, "read"), "not a valid"),
    ],
)
def test_bad_acls_are_refused_and_a_batch_is_all_or_nothing(
    admin: Admin, roles: Roles, binding: AclBinding, match: str
) -> None:
    alice = roles.group("alice")
    bad = AclBinding(
        binding.principal.replace("{alice}", alice),
        binding.resource_type,
        binding.resource_name,
        binding.operation,
        binding.pattern_type,
    )
    with pytest.raises(errors.InvalidRequestError, match=match):
        admin.create_acls([AclBinding(alice, "topic", "a", "read"), bad])
    assert admin.describe_acls() == []


@pytest.mark.parametrize(
    "hostile",
    [
        "t'; DROP TABLE acls; --",
        't"; DROP TABLE records; --',
        "x') OR (1=1",
        "$$; DROP TABLE acls; $$",
        "*",
    ],
)
def test_sql_injection_through_acl_names_is_inert(admin: Admin, roles: Roles, engine: sa.Engine, hostile: str) -> None:
    client = roles.login("c", CLIENT)
    # As a principal: not a role (no quoting is ever applied to it, so it cannot become one).
    with pytest.raises(errors.InvalidRequestError, match="not a role"):
        admin.create_acls([AclBinding(hostile, "topic", "a", "read")])
    # As a group id it is stored and matched as data.
    allow(admin, roles.name("c"), "group", hostile, "read")
    allow(admin, roles.name("c"), "topic", "a", "read")
    assert admin.describe_acls(AclBindingFilter(resource_type="group")) == [
        AclBinding(roles.name("c"), "group", hostile, "read")
    ]
    admin.set_acl_enforcement(True)
    with connect(client) as conn:
        groups.join_group(conn, group_id=hostile, topics=["a"], session_timeout_ms=3000)
        if hostile != "*":  # the literal * is the wildcard; any other name only allows itself
            with pytest.raises(errors.GroupAuthorizationError):
                groups.join_group(conn, group_id=hostile + "x", topics=["a"], session_timeout_ms=3000)
    with engine.connect() as conn:
        for table in ("acls", "acl_settings", "records"):
            assert conn.exec_driver_sql(f"SELECT to_regclass('oncelog.{table}') IS NOT NULL").scalar_one()


def test_a_role_whose_name_needs_quoting_is_a_principal_like_any_other(
    admin: Admin, engine: sa.Engine, db_url: str
) -> None:
    odd = f"acl odd'\"; DROP TABLE acls; -- {uuid.uuid4().hex[:6]}"
    quoted = '"' + odd.replace('"', '""') + '"'
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE ROLE {quoted} LOGIN PASSWORD 'pw' IN ROLE {CLIENT}")
    url = database_url(db_url).set(username=odd, password="pw").render_as_string(hide_password=False)
    try:
        binding = AclBinding(odd, "topic", "a", "write")
        assert admin.create_acls([binding]) == [binding]
        assert admin.describe_acls(AclBindingFilter(principal=odd)) == [binding]
        admin.set_acl_enforcement(True)
        with connect(url) as conn:
            log.produce(conn, topic="a", partition=0, records=[RecordIn(b"v")])
            with pytest.raises(errors.TopicAuthorizationError):
                log.produce(conn, topic="b", partition=0, records=[RecordIn(b"v")])
        assert admin.delete_acls([AclBindingFilter(principal=odd)]) == [binding]
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP ROLE {quoted}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT to_regclass('oncelog.acls') IS NOT NULL").scalar_one()


def test_revoking_an_acl_or_switching_off_applies_to_the_next_call(admin: Admin, roles: Roles) -> None:
    client = roles.login("c", CLIENT)
    allow(admin, roles.name("c"), "topic", "a", "write")
    admin.set_acl_enforcement(True)
    with connect(client) as conn:  # one session throughout: nothing is cached in it
        log.produce(conn, topic="a", partition=0, records=[RecordIn(b"1")])
        assert admin.delete_acls([AclBindingFilter(principal=roles.name("c"))]) == [
            AclBinding(roles.name("c"), "topic", "a", "write")
        ]
        with pytest.raises(errors.TopicAuthorizationError):
            log.produce(conn, topic="a", partition=0, records=[RecordIn(b"2")])
        assert admin.set_acl_enforcement(False) is True
        log.produce(conn, topic="a", partition=0, records=[RecordIn(b"3")])
        assert values(log.fetch(conn, topic="a", partition=0, offset=0).records) == [b"1", b"3"]


# --- the CLI --------------------------------------------------------------------------------------

ENV: dict[str, str | None] = {"ONCELOG_SCHEMA": None, "ONCELOG_DEV_DB_DIR": None, "NO_COLOR": None, "COLUMNS": "200"}


def run(db_url: str, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--database-url", db_url, *args], input=input, env=ENV, catch_exceptions=False)


def js(db_url: str, *args: str, input: str | None = None) -> Any:
    result = run(db_url, *args, "--json", input=input)
    assert result.exit_code == 0, (args, result.output)
    return json.loads(result.stdout)


def test_cli_acls_add_list_remove_enforce(db_url: str, admin: Admin, roles: Roles) -> None:
    alice = roles.group("alice")
    client = roles.login("c", CLIENT)
    added = js(
        db_url, "acls", "add", "--principal", alice, "--topic", "a", "--operation", "read", "--operation", "WRITE"
    )
    assert [(a["resource_name"], a["operation"]) for a in added["created"]] == [("a", "read"), ("a", "write")]
    again = js(db_url, "acls", "add", "--principal", alice, "--topic", "a", "--operation", "read")
    assert again == {"created": [], "existing": [added["created"][0]]}
    js(
        db_url,
        "acls",
        "add",
        "--principal",
        alice,
        "--group",
        "billing-",
        "--pattern-type",
        "prefixed",
        "--operation",
        "read",
    )

    # One binding that does not fit: nothing of the command is created.
    refused = run(db_url, "acls", "add", "--principal", alice, "--topic", "t2", "--group", "g", "--operation", "write")
    assert refused.exit_code == 1 and "does not apply to a group" in refused.stderr
    assert len(js(db_url, "acls", "list")) == 3
    assert [a["operation"] for a in js(db_url, "acls", "list", "--topic", "a")] == ["read", "write"]
    assert js(db_url, "acls", "list", "--resource-type", "group") == [
        {
            "principal": alice,
            "resource_type": "group",
            "resource_name": "billing-",
            "operation": "read",
            "pattern_type": "prefixed",
        }
    ]
    table = run(db_url, "acls", "list")
    assert table.exit_code == 0 and alice in table.stdout and "enforcement off" in table.stdout

    assert js(db_url, "acls", "enforce") == {"enforce": False, "previous": None, "acls": 3}
    assert js(db_url, "acls", "enforce", "on") == {"enforce": True, "previous": False, "acls": 3}
    assert admin.acl_enforcement() is True
    denied = run(client, "acls", "list")
    assert denied.exit_code == 1 and "permission denied" in denied.stderr

    assert run(db_url, "acls", "remove").exit_code == 2  # no filter: a usage error, nothing removed
    assert run(db_url, "acls", "remove", "--topic", "a", input="n\n").exit_code == 1  # declined
    assert len(admin.describe_acls()) == 3
    removed = js(db_url, "acls", "remove", "--topic", "a", "--operation", "write", "-y")
    assert [(a["resource_name"], a["operation"]) for a in removed["removed"]] == [("a", "write")]
    # (--json answers go to stdout alone, so a prompt is confirmed with -y there.)
    accepted = run(db_url, "acls", "remove", "--all", input="y\n")
    assert accepted.exit_code == 0 and "removed 2 ACL(s)" in accepted.stdout
    assert admin.describe_acls() == []
    empty = run(db_url, "acls", "enforce")
    assert empty.exit_code == 0 and "ACL enforcement is on (0 ACL(s))" in empty.stdout
    assert "every client and reader role is refused" in empty.stderr
    assert js(db_url, "acls", "enforce", "off")["enforce"] is False


# --- the migration ------------------------------------------------------------------------------

#: What revision 0009 changes in place (everything else it adds is new).
CHANGED_FUNCTIONS = {
    "fetch_v1",
    "list_offsets_v1",
    "produce_v2",
    "init_transactional_producer_id_v1",
    "add_partitions_to_txn_v1",
    "end_txn_v1",
    "join_group_v1",
    "heartbeat_v1",
    "leave_group_v1",
    "offset_commit_v1",
    "offset_fetch_v1",
    "txn_offset_commit_v1",
    "fetch_v3",
}
CHANGED_VIEWS = {
    "committed_records",
    "partition_offsets",
    "transaction_status",
    "group_status",
    "group_offsets",
    "pending_group_offsets",
}


def definitions(engine: sa.Engine) -> dict[str, tuple[Any, ...]]:
    """Every function and relation of the schema: definition, grants, options, comment, RLS."""
    with engine.connect() as conn:
        functions = conn.exec_driver_sql(
            "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), p.proacl::text, "
            "obj_description(p.oid, 'pg_proc') "
            "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'oncelog'"
        ).all()
        relations = conn.exec_driver_sql(
            "SELECT c.relname, CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) END, c.relacl::text, "
            "c.reloptions::text, c.relrowsecurity, obj_description(c.oid, 'pg_class') "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'oncelog'"
        ).all()
    return {f"function {r[0]}": tuple(r[1:]) for r in functions} | {f"relation {r[0]}": tuple(r[1:]) for r in relations}


def test_the_migration_changes_only_what_it_says_and_restores_it_exactly(empty_db_url: str) -> None:
    engine = create_engine(empty_db_url)
    try:
        migrate.upgrade(engine, revision="0008")
        before = definitions(engine)
        migrate.upgrade(engine, revision="0009")  # this migration alone (later ones change other things)
        after = definitions(engine)
        changed = {k for k in before if before[k] != after[k]}
        changed_functions = {k.split(" ", 1)[1].split("(")[0] for k in changed if k.startswith("function ")}
        assert changed_functions == CHANGED_FUNCTIONS
        assert {k for k in changed if k.startswith("relation ")} == {f"relation {v}" for v in CHANGED_VIEWS} | {
            "relation txn_history"
        }
        for key in changed - {f"relation {v}" for v in CHANGED_VIEWS} - {"relation txn_history"}:
            old, new = before[key], after[key]
            assert "acl_require_v1" in new[0] and "acl_require_v1" not in old[0]
            assert new[1:] == old[1:], key  # grants and comment kept
        for name in CHANGED_VIEWS:
            assert after[f"relation {name}"][2] == "{security_barrier=true}", name
        assert after["relation txn_history"][3] is True
        migrate.downgrade(engine, revision="0008")
        assert definitions(engine) == before
    finally:
        engine.dispose()


def test_error_classes() -> None:
    for cls, code in (
        (errors.TopicAuthorizationError, "OL501"),
        (errors.GroupAuthorizationError, "OL502"),
        (errors.TransactionalIdAuthorizationError, "OL503"),
    ):
        assert issubclass(cls, errors.AuthorizationError)
        assert errors.error_for_sqlstate(code) is cls
    assert errors.TransactionalIdAuthorizationError.fatal
    assert not errors.TopicAuthorizationError.retriable and not errors.TopicAuthorizationError.fatal
