"""Roles cannot break the rules: each role connects and tries what it must not do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from oncelog import Admin, Consumer, Producer, TopicPartition, errors
from oncelog.store import create_engine
from tests.support.roles import login_roles

DENIED = "42501"  # insufficient_privilege
#: A role without USAGE on the schema does not even see its objects.
INVISIBLE = {"42P01", "42883"}  # undefined_table, undefined_function


@pytest.fixture
def logins(db_url: str, engine: sa.Engine) -> Iterator[dict[str, str]]:
    """A login role per oncelog role (plus one with no oncelog role), as URLs."""
    with login_roles(engine, db_url) as urls:
        with engine.begin() as conn:
            conn.exec_driver_sql("SELECT create_topic_v1('t', 2)")
        yield urls


def _refused(url: str, sql: str, *, outsider: bool = False) -> None:
    libpq = url.replace("postgresql+psycopg", "postgresql")
    allowed = {DENIED} | (INVISIBLE if outsider else set())
    with psycopg.connect(libpq, autocommit=True, options="-c search_path=oncelog") as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute(sql)
        assert info.value.sqlstate in allowed, (sql, info.value)


ATTACKS = [
    "INSERT INTO records (topic_id, partition, \"offset\", value) SELECT topic_id, 0, 99, 'x' FROM topics",
    'INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, is_transactional, '
    "control_type) SELECT topic_id, 0, 99, 0, 0, true, 'commit' FROM topics",
    "UPDATE producers SET epoch = 32000",
    "UPDATE partitions SET next_offset = 1000",
    "DELETE FROM txn_history",
    "UPDATE committed_offsets SET committed_offset = 0",
    "INSERT INTO pending_offsets (group_id, topic_id, partition, producer_id, transactional_id, committed_offset, "
    "commit_seq, generation, member_id) VALUES ('g', 1, 0, 0, 'x', 0, 0, 0, 'm')",
    "UPDATE transactions SET state = 'CompleteCommit'",
    "TRUNCATE records",
]


@pytest.mark.parametrize("role", ["reader", "client", "admin", "nobody"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_no_role_writes_base_tables(logins: dict[str, str], role: str, attack: str) -> None:
    _refused(logins[role], attack, outsider=role == "nobody")


@pytest.mark.parametrize(
    ("role", "sql"),
    [
        ("reader", "SELECT * FROM records"),
        ("reader", "SELECT * FROM producers"),
        ("reader", "SELECT * FROM init_producer_id_v1()"),
        ("reader", "SELECT * FROM fetch_v2('{t}', '{0}', '{0}', 10, false)"),  # read_uncommitted data
        ("client", "SELECT create_topic_v1('mine', 1)"),
        ("client", "SELECT delete_topic_v1('t')"),
        ("client", "SELECT abort_transaction_v1('someone')"),
        ("client", "SELECT enforce_retention_v2()"),
        ("client", "SELECT * FROM records"),
        ("client", "SELECT txn_complete_v1('someone', true)"),  # internal: markers without checks
        ("admin", "SELECT txn_complete_v1('someone', true)"),
        ("nobody", "SELECT * FROM committed_records"),
        ("nobody", "SELECT * FROM init_producer_id_v1()"),
    ],
)
def test_roles_only_reach_what_they_need(logins: dict[str, str], role: str, sql: str) -> None:
    _refused(logins[role], sql, outsider=role == "nobody")


def test_the_reader_reads_committed_views_only(logins: dict[str, str], db_url: str) -> None:
    with Producer(db_url, transactional_id="tx") as producer:
        producer.init_transactions()
        with producer.transaction():
            producer.send("t", b"committed", partition=0)
        producer.begin_transaction()
        producer.send("t", b"aborted", partition=0)
        producer.flush()
        producer.abort_transaction()
    reader = create_engine(logins["reader"])
    try:
        with reader.connect() as conn:
            values = conn.exec_driver_sql("SELECT value FROM committed_records").scalars().all()
            assert values == [b"committed"]
            assert conn.exec_driver_sql("SELECT count(*) FROM partition_offsets").scalar_one() == 2
            assert conn.exec_driver_sql("SELECT count(*) FROM transaction_status").scalar_one() == 1
    finally:
        reader.dispose()


def test_the_client_role_runs_the_whole_protocol(logins: dict[str, str]) -> None:
    url = logins["client"]
    with Producer(url, transactional_id="client-tx") as producer:
        producer.init_transactions()
        with producer.transaction():
            producer.send("t", b"v", key=b"k")
    with Producer(url) as plain:
        plain.send("t", b"w", partition=1).result(timeout=30)
    with Consumer(url, group_id="g", enable_auto_commit=False, session_timeout_ms=3000, heartbeat_interval_ms=200) as c:
        c.subscribe(["t"])
        seen: list[Any] = []
        while batch := c.poll(timeout=0.5):
            seen.extend(r.value for r in batch)
        c.commit()
        assert sorted(seen) == [b"v", b"w"]
        assert c.committed([TopicPartition("t", 1)])[TopicPartition("t", 1)] is not None
    with Admin(url) as admin, pytest.raises(errors.AuthorizationError):
        admin.create_topic("not-allowed")


def test_the_admin_role_administers_but_does_not_write_the_log_directly(logins: dict[str, str]) -> None:
    with Admin(logins["admin"]) as admin:
        admin.create_topic("made-by-admin", partitions=3)
        assert admin.list_topics()["made-by-admin"] == 3
        admin.delete_topic("made-by-admin")
    _refused(logins["admin"], "DELETE FROM topics")


@pytest.mark.parametrize(
    "hostile",
    [
        "t'; DROP TABLE records; --",
        't"; DROP TABLE records; --',
        "t) OR (1=1",
        "$$; DROP TABLE records; $$",
        "x\x00y",
    ],
)
def test_sql_injection_through_names_is_inert(logins: dict[str, str], engine: sa.Engine, hostile: str) -> None:
    url = logins["client"]
    with Producer(url) as producer, pytest.raises(errors.OncelogError):
        producer.send(hostile, b"v")
    # The constructors are inside pytest.raises: a name with NUL is refused there already.
    with pytest.raises(errors.OncelogError), Producer(url, transactional_id=hostile[:200]) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(hostile, b"v")
    with (
        pytest.raises(errors.OncelogError),
        Consumer(url, group_id=hostile, session_timeout_ms=3000, heartbeat_interval_ms=200) as consumer,
    ):
        consumer.subscribe([hostile])
    with Producer(url) as producer:
        producer.send("t", b"v", partition=0, headers=[(hostile.replace("\x00", ""), hostile.encode())]).result(30)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM records").scalar_one() >= 1
        assert conn.exec_driver_sql("SELECT to_regclass('oncelog.records') IS NOT NULL").scalar_one()
