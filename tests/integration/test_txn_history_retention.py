"""Retention of the transaction journal's history (migration 0010).

History older than ``txn_history_retention_ms`` is pruned by maintenance, except the newest
CompleteCommit of each transactional id (so "has it ever committed?" keeps its answer); nothing
else may delete or change history.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import sqlalchemy as sa

from oncelog import Admin, Producer
from oncelog.store import txn
from tests.support.clock import server_time
from tests.support.roles import login_roles

LATER = timedelta(days=8)  # past the default retention of 7 days


def _history(engine: sa.Engine) -> list[tuple[str, str | None, str]]:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT transactional_id, from_state, to_state FROM txn_history ORDER BY id").all()
    return [(r[0], r[1], r[2]) for r in rows]


@pytest.fixture
def journal(db_url: str) -> Iterator[None]:
    """'a' commits twice, 'b' only aborts, 'c' commits then aborts."""
    with Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    for tid, outcomes in {"a": [True, True], "b": [False], "c": [True, False]}.items():
        with Producer(db_url, transactional_id=tid, linger_ms=0) as p:
            p.init_transactions()
            for commit in outcomes:
                p.begin_transaction()
                p.send("t", tid.encode())
                p.flush()
                if commit:
                    p.commit_transaction()
                else:
                    p.abort_transaction()
    yield


def _prune(engine: sa.Engine, *, now: datetime, batch: int = 10_000) -> int:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn, server_time(conn, now):
        return txn.expire_txn_history(conn, batch=batch)


@pytest.mark.usefixtures("journal")
@pytest.mark.parametrize("batch", [1, 3, 10_000])
def test_pruning_keeps_each_ids_newest_commit(engine: sa.Engine, batch: int) -> None:
    before = _history(engine)
    assert _prune(engine, now=datetime.now(UTC)) == 0  # nothing is old yet
    assert _history(engine) == before

    pruned = _prune(engine, now=datetime.now(UTC) + LATER, batch=batch)
    left = _history(engine)
    assert pruned == len(before) - len(left)
    assert left == [("a", "PrepareCommit", "CompleteCommit"), ("c", "PrepareCommit", "CompleteCommit")]
    # The newest commit of "a" is kept, not the first one.
    with engine.connect() as conn:
        kept = conn.exec_driver_sql("SELECT txn_number FROM txn_history WHERE transactional_id = 'a'").scalar_one()
        assert kept == max(
            r[0] for r in conn.exec_driver_sql("SELECT txn_number FROM transactions WHERE transactional_id = 'a'")
        )
        assert txn.committed_transactional_ids(conn, pattern="^[abc]$") == ["a", "c"]
    assert _prune(engine, now=datetime.now(UTC) + LATER) == 0  # idempotent


@pytest.mark.usefixtures("journal")
def test_retention_is_a_setting(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE settings SET txn_history_retention_ms = 3600000")  # one hour
    assert _prune(engine, now=datetime.now(UTC) + timedelta(minutes=30)) == 0
    assert _prune(engine, now=datetime.now(UTC) + timedelta(hours=2)) > 0
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        conn.exec_driver_sql("UPDATE settings SET txn_history_retention_ms = 0")


@pytest.mark.usefixtures("journal")
@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM txn_history",
        "UPDATE txn_history SET to_state = 'CompleteAbort'",
        # The pruning flag does not make an UPDATE possible.
        "SELECT set_config('oncelog.pruning_txn_history', 'on', true); UPDATE txn_history SET txn_number = 0",
    ],
)
def test_history_stays_append_only_for_the_owner(engine: sa.Engine, sql: str) -> None:
    before = _history(engine)
    with pytest.raises(sa.exc.DBAPIError, match="append-only"), engine.begin() as conn:
        for statement in sql.split("; "):
            conn.exec_driver_sql(statement)
    assert _history(engine) == before


@pytest.mark.usefixtures("journal")
def test_only_the_admin_role_may_prune(db_url: str, engine: sa.Engine) -> None:
    later = datetime.now(UTC) + LATER
    with (
        login_roles(engine, db_url, ("client", "admin")) as urls,
        engine.connect().execution_options(isolation_level="AUTOCOMMIT") as owner,
        server_time(owner, later),
    ):
        client = urls["client"].replace("postgresql+psycopg", "postgresql")
        with psycopg.connect(client, autocommit=True, options="-c search_path=oncelog") as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT expire_txn_history_v2()")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("DELETE FROM txn_history")
        admin = urls["admin"].replace("postgresql+psycopg", "postgresql")
        with psycopg.connect(admin, autocommit=True, options="-c search_path=oncelog") as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("DELETE FROM txn_history")  # only through the function
            deleted = conn.execute("SELECT expire_txn_history_v2()").fetchone()
            assert deleted is not None and deleted[0] > 0


def test_the_maintenance_loop_prunes(db_url: str) -> None:
    with Admin(db_url) as admin:
        assert admin.expire_txn_history() == 0  # runs on an empty journal
