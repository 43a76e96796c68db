"""Spark writes hold against a hostile client: real Spark jobs run as separate login roles holding
only the client role, with ACLs on.

The write path appends through the store's own protocol functions (produce_v2 in each task's
transaction, EndTxn in the driver's commit), so the store decides every rule: a principal cannot
run, commit, abort or append into another principal's job (its transactional ids need an ACL,
and even with one an identity initialised by another principal is fenced), cannot write a topic
it has no write ACL for, and cannot get past the record checks (max_message_bytes; timestamps
are the server's). The owner's connection only sets up and reads the log.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from pyspark.errors import PythonException

import oncelog.spark
from oncelog import errors
from oncelog.spark.task import TaskPlan
from oncelog.spark.writer import run_write_tasks
from oncelog.store import create_engine, log, txn
from oncelog.store.engine import DEFAULT_SCHEMA
from oncelog.store.records import RecordIn
from tests.support.roles import login_roles

pytestmark = [pytest.mark.spark]

OUT = "out"


@contextlib.contextmanager
def principal(engine: sa.Engine, db_url: str, acls: list[tuple[str, str, str, str]]) -> Iterator[str]:
    """A login role holding only oncelog_client, allowed ``acls`` (resource type, name, pattern,
    operation); yields its URL."""
    with login_roles(engine, db_url, ("client",)) as urls:
        url = urls["client"]
        name = sa.make_url(url).username
        with engine.begin() as conn:
            for resource, resource_name, pattern, operation in acls:
                conn.exec_driver_sql(
                    "SELECT create_acl_v1(%s, %s, %s, %s, %s)", (name, resource, resource_name, pattern, operation)
                )
        yield url


@pytest.fixture
def acls_on(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"SELECT create_topic_v1('{OUT}', 2)")
        conn.exec_driver_sql("""SELECT create_topic_v1('small', 1, '{"max_message_bytes": 64}')""")
        conn.exec_driver_sql("SELECT create_topic_v1('secret', 1)")
        conn.exec_driver_sql("SELECT set_acl_enforcement_v1(true)")


@pytest.fixture
def alice(acls_on: None, engine: sa.Engine, db_url: str) -> Iterator[str]:
    acls = [
        ("topic", OUT, "literal", "write"),
        ("topic", "small", "literal", "write"),
        ("transactional_id", "alice-", "prefixed", "write"),
    ]
    with principal(engine, db_url, acls) as url:
        yield url


@pytest.fixture
def mallory(acls_on: None, engine: sa.Engine, db_url: str) -> Iterator[str]:
    acls = [("topic", OUT, "literal", "write"), ("transactional_id", "mallory-", "prefixed", "write")]
    with principal(engine, db_url, acls) as url:
        yield url


def frame(spark: Any, tag: str, n: int = 20, slices: int = 2) -> Any:
    return spark.createDataFrame([(f"{tag}{i}", i % 2) for i in range(n)], "value string, p int").repartition(slices)


def log_values(engine: sa.Engine, topic: str) -> dict[bytes | None, bool]:
    """Every data record of ``topic`` in the log (the owner reads the table): value -> aborted."""
    with engine.connect() as conn:
        return {r.value: r.aborted for r in log.read_log(conn, topics=[topic]) if r.control_type is None}


def committed(engine: sa.Engine, topic: str, partitions: int) -> list[str]:
    with engine.connect() as conn:
        got = log.fetch_many(conn, {(topic, p): 0 for p in range(partitions)}, max_records=10_000)
    return sorted((r.value or b"").decode() for part in got.values() for r in part.records)


def call(url: str, fn: Any, **kwargs: Any) -> Any:
    eng = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with eng.connect() as conn:
            return fn(conn, **kwargs)
    finally:
        eng.dispose()


def test_a_principal_cannot_run_another_principals_job(spark: Any, engine: sa.Engine, alice: str, mallory: str) -> None:
    result = oncelog.spark.write(frame(spark, "a"), alice, OUT, job_id="alice-job", key_col=None, partition_col="p")
    assert result.records == 20
    before = log_values(engine, OUT)
    # Mallory "re-runs" Alice's job with her own rows: her tasks cannot initialise Alice's ids.
    with pytest.raises(PythonException, match="TransactionalIdAuthorizationError"):
        oncelog.spark.write(frame(spark, "m"), mallory, OUT, job_id="alice-job", key_col=None, partition_col="p")
    assert log_values(engine, OUT) == before
    assert committed(engine, OUT, 2) == sorted(f"a{i}" for i in range(20))


def test_nobody_else_commits_aborts_or_joins_a_jobs_open_transactions(
    spark: Any, engine: sa.Engine, db_url: str, alice: str, mallory: str
) -> None:
    """Alice's tasks have appended and left their transactions open (her driver has not committed
    yet). Mallory knows their identities (ids, epochs, numbers: she can guess them all)."""
    plan = TaskPlan(
        database_url=alice, schema=DEFAULT_SCHEMA, topic=OUT, job_id="alice-open", num_partitions=2,
        transaction_timeout_ms=600_000,
    )  # fmt: skip
    reports = run_write_tasks(frame(spark, "a"), plan, key_col=None, partition_col="p")
    prepared = [r.prepared for r in reports if r.prepared is not None]
    assert len(prepared) == 2
    p = prepared[0]

    def attacks(error: type[Exception]) -> None:
        for commit in (True, False):
            with pytest.raises(error):
                call(mallory, txn.end_txn, transactional_id=p.transactional_id, producer_id=p.producer_id,
                     epoch=p.epoch, txn_number=p.txn_number, commit=commit)  # fmt: skip
        with pytest.raises(error):
            call(mallory, log.produce, topic=OUT, partition=0, records=[RecordIn(b"forged")],
                 producer_id=p.producer_id, producer_epoch=p.epoch, base_sequence=100,
                 transactional_id=p.transactional_id, txn_number=p.txn_number)  # fmt: skip

    # Without an ACL on Alice's ids: refused before anything is looked at.
    attacks(errors.TransactionalIdAuthorizationError)
    # Even with one, the identity is Alice's: fenced, and the transaction untouched.
    with engine.begin() as conn:
        name = sa.make_url(mallory).username
        conn.exec_driver_sql("SELECT create_acl_v1(%s, 'transactional_id', 'alice-', 'prefixed', 'write')", (name,))
    attacks(errors.ProducerFencedError)
    assert committed(engine, OUT, 2) == []
    assert b"forged" not in log_values(engine, OUT)
    # Alice's driver commits as if nothing happened: exactly her rows, once.
    alice_engine = create_engine(alice)
    try:
        with alice_engine.begin() as conn:
            for q in prepared:
                assert txn.end_txn(conn, transactional_id=q.transactional_id, producer_id=q.producer_id,
                                   epoch=q.epoch, txn_number=q.txn_number, commit=True) == "committed"  # fmt: skip
    finally:
        alice_engine.dispose()
    assert committed(engine, OUT, 2) == sorted(f"a{i}" for i in range(20))


def test_a_job_cannot_write_a_topic_without_write_acl(spark: Any, engine: sa.Engine, mallory: str) -> None:
    with pytest.raises(PythonException, match="TopicAuthorizationError"):
        oncelog.spark.write(frame(spark, "m"), mallory, "secret", job_id="mallory-1", key_col=None)
    assert log_values(engine, "secret") == {}


def test_record_checks_hold_for_spark_jobs(spark: Any, engine: sa.Engine, alice: str) -> None:
    big = spark.createDataFrame([("x" * 65,), ("ok",)], "value string").repartition(1)
    with pytest.raises(PythonException, match="RecordTooLargeError"):
        oncelog.spark.write(big, alice, "small", job_id="alice-big", key_col=None)
    assert committed(engine, "small", 1) == []
    assert log_values(engine, "small") == {}  # the whole batch was refused
    # The store stamps the records it appends: a Spark job has no way to pass a timestamp or headers.
    before = datetime.now(UTC)
    oncelog.spark.write(frame(spark, "s", n=5, slices=1), alice, "small", job_id="alice-ok", key_col=None)
    after = datetime.now(UTC)
    with engine.connect() as conn:
        got = log.fetch_many(conn, {("small", 0): 0})[("small", 0)].records
    assert sorted((r.value or b"").decode() for r in got) == [f"s{i}" for i in range(5)]
    assert all(before <= r.timestamp <= after and r.headers == () for r in got)
