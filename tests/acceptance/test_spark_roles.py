"""Planned reads (what a Spark job does first) work for every oncelog role, not only the owner.

plan_ranges fixes each partition's range below its last stable offset and pulls the ranges back so
that a committed transaction is read on all of its partitions or on none. It used to need the
owner's rights (it called an internal function and read the topics table); read_limits_v1
(migration 0011) gives it to the reader, client and admin roles, held to topic ACLs.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from oncelog import Admin, Producer, errors
from oncelog.spark.reader import plan_ranges
from oncelog.store import create_engine, log, txn
from tests.support.roles import login_roles


@pytest.fixture
def role_urls(db_url: str, engine: sa.Engine) -> Iterator[dict[str, str]]:
    with login_roles(engine, db_url) as urls:
        yield urls


@pytest.fixture
def torn(db_url: str) -> Iterator[None]:
    """Topic t, 2 partitions: a committed transaction over both, then an open one on partition 0
    holding its last stable offset, then a committed one over both (so it lies above the open
    one on partition 0 and below the end on partition 1: readable on neither yet)."""
    with Admin(db_url) as admin:
        admin.create_topic("t", partitions=2)
    with Producer(db_url, transactional_id="w1") as w1, Producer(db_url, transactional_id="w2") as w2:
        w1.init_transactions()
        w2.init_transactions()
        with w1.transaction():
            w1.send("t", b"a0", partition=0)
            w1.send("t", b"a1", partition=1)
        w2.begin_transaction()
        w2.send("t", b"open", partition=0)
        w2.flush()
        with w1.transaction():
            w1.send("t", b"b0", partition=0)
            w1.send("t", b"b1", partition=1)
        yield
        w2.abort_transaction()


@pytest.mark.usefixtures("torn")
@pytest.mark.parametrize("role", ["reader", "client", "admin"])
def test_every_role_plans_reads_that_never_split_a_transaction(role_urls: dict[str, str], role: str) -> None:
    engine = create_engine(role_urls[role])
    try:
        ranges = {(r.topic, r.partition): (r.start, r.end) for r in plan_ranges(engine, ["t"], "earliest")}
    finally:
        engine.dispose()
    # Partition 0: a0 and its marker (offsets 0-1), then the open transaction at 2: stop there.
    # Partition 1: a1 + marker, b1 + marker; b is cut back to 2 because b0 is not readable yet.
    assert ranges == {("t", 0): (0, 2), ("t", 1): (0, 2)}


def test_a_role_without_oncelog_rights_is_refused(role_urls: dict[str, str]) -> None:
    engine = create_engine(role_urls["nobody"])
    try:
        with pytest.raises(errors.OncelogError), engine.connect() as conn:
            log.consistent_limits(conn, [("t", 0, 0, 0)])
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("ranges", "error", "message"),
    [
        ([("nope", 0, 0, 0)], errors.UnknownTopicOrPartitionError, "unknown partition nope-0"),
        ([("t", 7, 0, 0)], errors.UnknownTopicOrPartitionError, "unknown partition t-7"),
        ([("t", 0, 5, 2)], errors.InvalidRequestError, "start <= limit"),
        ([("t", 0, -1, 2)], errors.InvalidRequestError, "start <= limit"),
    ],
)
def test_bad_ranges_are_typed_errors(
    db_url: str, engine: sa.Engine, ranges: list[tuple[str, int, int, int]], error: type[Exception], message: str
) -> None:
    with Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    with pytest.raises(error, match=message), engine.connect() as conn:
        log.consistent_limits(conn, ranges)


def test_a_client_recovers_its_jobs_open_transactions(db_url: str, role_urls: dict[str, str]) -> None:
    """What a re-run Spark job does first, as the client role: abort what a crashed run left open."""
    with Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    zombie = Producer(db_url, transactional_id="job-7-0")
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send("t", b"half", partition=0)
    zombie.flush()
    other = Producer(db_url, transactional_id="other-1")
    other.init_transactions()
    other.begin_transaction()
    other.send("t", b"not mine", partition=0)
    other.flush()
    engine = create_engine(role_urls["client"])
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            assert txn.abort_open_transactions(conn, pattern="^job-7-[0-9]+$") == ["job-7-0"]
            states = {s.transactional_id: s.state for s in txn.list_transactions(conn)}
    finally:
        engine.dispose()
    # Re-initialised: the open transaction was aborted (its record is marked so), the id is idle.
    assert states == {"job-7-0": "Empty", "other-1": "Ongoing"}
    owner = create_engine(db_url)
    try:
        with owner.connect() as conn:
            aborted = {r.value: r.aborted for r in log.read_log(conn, topics=["t"]) if r.control_type is None}
    finally:
        owner.dispose()
    assert aborted == {b"half": True, b"not mine": False}
    with pytest.raises(errors.ProducerFencedError):
        zombie.commit_transaction()
    zombie.close(timeout=5)
    other.abort_transaction()
    other.close(timeout=5)
