"""The schema refuses illegal states, whoever writes (these tests write as psql would)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa

from oncelog import errors
from oncelog.store.errors import mapped_errors


@pytest.fixture
def conn(engine: sa.Engine) -> Iterator[sa.Connection]:
    with engine.connect() as c:
        c.exec_driver_sql(
            "INSERT INTO topics (name) VALUES ('t'); "
            "INSERT INTO partitions (topic_id, partition) SELECT topic_id, 0 FROM topics WHERE name = 't'; "
        )
        c.commit()
        yield c


def _fails(conn: sa.Connection, sql: str, sqlstate: str) -> None:
    """``sql`` must fail with ``sqlstate``; the transaction is rolled back either way."""
    with pytest.raises(sa.exc.DBAPIError) as info:
        conn.exec_driver_sql(sql)
        conn.commit()  # deferred constraints fire here
    conn.rollback()
    assert isinstance(info.value.orig, psycopg.Error)
    assert info.value.orig.sqlstate == sqlstate, info.value


def _insert_producer(conn: sa.Connection, txn_id: str | None) -> int:
    return int(
        conn.execute(
            sa.text("INSERT INTO producers (transactional_id) VALUES (:t) RETURNING producer_id"),
            {"t": txn_id},
        ).scalar_one()
    )


UNIQUE, CHECK, FK = "23505", "23514", "23503"


def test_two_producers_cannot_share_a_transactional_id(conn: sa.Connection) -> None:
    _insert_producer(conn, "tx-1")
    conn.commit()
    _fails(conn, "INSERT INTO producers (transactional_id) VALUES ('tx-1')", UNIQUE)
    # Idempotent-only producers (NULL transactional id) are many.
    _insert_producer(conn, None)
    _insert_producer(conn, None)
    conn.commit()


def test_producer_ids_come_from_the_sequence_only(conn: sa.Connection) -> None:
    _fails(conn, "INSERT INTO producers (producer_id) VALUES (424242)", "428C9")  # generated always


def test_journal_rejects_unknown_state(conn: sa.Connection) -> None:
    pid = _insert_producer(conn, "tx-1")
    conn.execute(
        sa.text("INSERT INTO transactions (transactional_id, producer_id) VALUES ('tx-1', :p)"), {"p": pid}
    )
    conn.commit()
    _fails(conn, "UPDATE transactions SET state = 'Limbo'", "OL303")  # the trigger refuses first
    # and the CHECK refuses on its own (the trigger disabled inside the rolled-back transaction)
    _fails(
        conn,
        "ALTER TABLE transactions DISABLE TRIGGER transactions_transition; "
        "UPDATE transactions SET state = 'Limbo'",
        CHECK,
    )
    _fails(
        conn,
        "INSERT INTO txn_history (transactional_id, producer_id, producer_epoch, txn_number, to_state) "
        "VALUES ('tx-1', 0, 0, 0, 'Limbo')",
        CHECK,
    )


def test_journal_state_machine_is_enforced(conn: sa.Connection) -> None:
    pid = _insert_producer(conn, "tx-1")
    conn.execute(
        sa.text("INSERT INTO transactions (transactional_id, producer_id) VALUES ('tx-1', :p)"), {"p": pid}
    )
    conn.commit()
    # Empty -> CompleteCommit skips the transaction entirely.
    _fails(conn, "UPDATE transactions SET state = 'CompleteCommit'", "OL303")
    conn.exec_driver_sql("UPDATE transactions SET state = 'Ongoing', txn_started_at = now()")
    conn.exec_driver_sql("UPDATE transactions SET state = 'PrepareCommit'")
    conn.commit()
    # A commit being prepared can only complete as a commit.
    _fails(conn, "UPDATE transactions SET state = 'CompleteAbort', txn_started_at = NULL", "OL303")
    conn.exec_driver_sql("UPDATE transactions SET state = 'CompleteCommit', txn_started_at = NULL")
    conn.commit()
    # Open transactions carry a start time, completed ones do not.
    _fails(conn, "UPDATE transactions SET state = 'Ongoing'", CHECK)
    history = conn.exec_driver_sql(
        "SELECT from_state, to_state FROM txn_history WHERE transactional_id = 'tx-1' ORDER BY id"
    ).all()
    assert [tuple(r) for r in history] == [
        (None, "Empty"),
        ("Empty", "Ongoing"),
        ("Ongoing", "PrepareCommit"),
        ("PrepareCommit", "CompleteCommit"),
    ]


def test_journal_takes_the_one_update_steps_only_as_they_stand(conn: sa.Connection) -> None:
    """Revision 0024's two composite steps: Ongoing to Complete in one update, and a whole
    transaction opened and committed in one (the next number, the same producer only). Each is
    journaled as the steps it stands for; every other skip is still refused."""
    pid = _insert_producer(conn, "tx-1")
    other = _insert_producer(conn, "tx-2")
    conn.execute(
        sa.text("INSERT INTO transactions (transactional_id, producer_id) VALUES ('tx-1', :p)"), {"p": pid}
    )
    conn.commit()
    # Empty to CompleteCommit: only with the next transaction number.
    _fails(conn, "UPDATE transactions SET state = 'CompleteCommit'", "OL303")
    _fails(conn, "UPDATE transactions SET state = 'CompleteCommit', txn_number = txn_number + 2", "OL303")
    _fails(conn, "UPDATE transactions SET state = 'CompleteAbort', txn_number = txn_number + 1", "OL303")
    _fails(
        conn,
        f"UPDATE transactions SET state = 'CompleteCommit', txn_number = txn_number + 1, producer_id = {other}",
        "OL303",
    )
    conn.exec_driver_sql("UPDATE transactions SET state = 'CompleteCommit', txn_number = txn_number + 1")
    conn.commit()
    # CompleteCommit to itself: again only with the next number.
    _fails(conn, "UPDATE transactions SET state = 'CompleteCommit'", "OL303")
    conn.exec_driver_sql("UPDATE transactions SET state = 'CompleteCommit', txn_number = txn_number + 1")
    conn.exec_driver_sql("UPDATE transactions SET state = 'Ongoing', txn_number = 3, txn_started_at = now()")
    conn.exec_driver_sql("UPDATE transactions SET state = 'CompleteAbort', txn_started_at = NULL")
    conn.commit()
    history = conn.exec_driver_sql(
        "SELECT txn_number, from_state, to_state FROM txn_history WHERE transactional_id = 'tx-1' ORDER BY id"
    ).all()
    assert [tuple(r) for r in history] == [
        (0, None, "Empty"),
        (1, "Empty", "Ongoing"),
        (1, "Ongoing", "PrepareCommit"),
        (1, "PrepareCommit", "CompleteCommit"),
        (2, "CompleteCommit", "Ongoing"),
        (2, "Ongoing", "PrepareCommit"),
        (2, "PrepareCommit", "CompleteCommit"),
        (3, "CompleteCommit", "Ongoing"),
        (3, "Ongoing", "PrepareAbort"),
        (3, "PrepareAbort", "CompleteAbort"),
    ]


def test_journal_must_start_empty(conn: sa.Connection) -> None:
    pid = _insert_producer(conn, "tx-1")
    conn.commit()
    _fails(
        conn,
        f"INSERT INTO transactions (transactional_id, producer_id, state, txn_started_at) "
        f"VALUES ('tx-1', {pid}, 'Ongoing', now())",
        "OL303",
    )


def test_journal_history_is_append_only(conn: sa.Connection) -> None:
    pid = _insert_producer(conn, "tx-1")
    conn.execute(
        sa.text("INSERT INTO transactions (transactional_id, producer_id) VALUES ('tx-1', :p)"), {"p": pid}
    )
    conn.commit()
    _fails(conn, "UPDATE txn_history SET to_state = 'Dead'", "OL000")
    _fails(conn, "DELETE FROM txn_history", "OL000")


def test_transaction_must_point_at_its_own_producer(conn: sa.Connection) -> None:
    """A transactional id's row may only name the producer id that serves that transactional id."""
    _insert_producer(conn, "tx-1")
    other = _insert_producer(conn, "tx-2")
    conn.commit()
    _fails(conn, f"INSERT INTO transactions (transactional_id, producer_id) VALUES ('tx-1', {other})", FK)


def test_epoch_exhaustion_swap_commits_atomically(conn: sa.Connection) -> None:
    """The deferred key lets a new producer id take over a transactional id in one transaction."""
    old = _insert_producer(conn, "tx-1")
    conn.execute(
        sa.text("INSERT INTO transactions (transactional_id, producer_id) VALUES ('tx-1', :p)"), {"p": old}
    )
    conn.commit()
    conn.execute(sa.text("UPDATE producers SET transactional_id = NULL WHERE producer_id = :p"), {"p": old})
    new = _insert_producer(conn, "tx-1")
    conn.execute(sa.text("UPDATE transactions SET producer_id = :p"), {"p": new})
    conn.commit()
    assert conn.exec_driver_sql("SELECT producer_id FROM transactions").scalar_one() == new


@pytest.mark.parametrize(
    ("sql", "sqlstate"),
    [
        # markers carry no data, and come only from transactional producers
        (
            'INSERT INTO records (topic_id, partition, "offset", control_type, value) '
            "SELECT topic_id, 0, 0, 'commit', 'x' FROM topics",
            CHECK,
        ),
        (
            'INSERT INTO records (topic_id, partition, "offset", control_type) '
            "SELECT topic_id, 0, 0, 'commit' FROM topics",
            CHECK,
        ),
        (
            'INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, '
            "is_transactional, control_type) SELECT topic_id, 0, 0, 1, 0, true, 'resume' FROM topics",
            CHECK,
        ),
        # an idempotent data record needs its sequence; sequences are 32-bit and non-negative
        (
            'INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch) '
            "SELECT topic_id, 0, 0, 1, 0 FROM topics",
            CHECK,
        ),
        (
            'INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, sequence) '
            "SELECT topic_id, 0, 0, 1, 0, -1 FROM topics",
            CHECK,
        ),
        (
            'INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, sequence) '
            "SELECT topic_id, 0, 0, 1, 32768, 0 FROM topics",
            "22003",
        ),
        # records belong to an existing partition
        ('INSERT INTO records (topic_id, partition, "offset") SELECT topic_id, 7, 0 FROM topics', FK),
        (
            'INSERT INTO records (topic_id, partition, "offset", headers) '
            "SELECT topic_id, 0, 0, '{\"k\": 1}' FROM topics",
            CHECK,
        ),
        # the log end never falls behind the log start
        ("UPDATE partitions SET log_start_offset = 5", CHECK),
        ("INSERT INTO topics (name) VALUES ('bad name')", CHECK),
        ("INSERT INTO topics (name) VALUES ('..')", CHECK),
        ("INSERT INTO topics (name) VALUES (repeat('a', 250))", CHECK),
        ("INSERT INTO topics (name) VALUES ('t')", UNIQUE),
        ("INSERT INTO topics (name, max_message_bytes) VALUES ('u', 0)", CHECK),
        ("INSERT INTO settings DEFAULT VALUES", UNIQUE),
        ("INSERT INTO settings (id) VALUES (2)", CHECK),
        ("UPDATE settings SET producer_id_expiration_ms = 0", CHECK),
    ],
)
def test_log_and_topic_constraints(conn: sa.Connection, sql: str, sqlstate: str) -> None:
    _fails(conn, sql, sqlstate)


def test_sequence_window_keeps_at_most_five_batches(conn: sa.Connection) -> None:
    pid = _insert_producer(conn, None)
    conn.commit()
    base = (
        "INSERT INTO producer_partition_state (producer_id, topic_id, partition, epoch, first_sequences, "
        "last_sequences, first_offsets, last_offsets, timestamps) SELECT {pid}, topic_id, 0, 0, "
    )
    six = "'{0,1,2,3,4,5}', '{0,1,2,3,4,5}', '{0,1,2,3,4,5}', '{0,1,2,3,4,5}', array_fill(now(), ARRAY[6])"
    _fails(conn, base.format(pid=pid) + six + " FROM topics", CHECK)
    ragged = "'{0,1}', '{0}', '{0,1}', '{0,1}', array_fill(now(), ARRAY[2])"
    _fails(conn, base.format(pid=pid) + ragged + " FROM topics", CHECK)
    ok = "'{0,1}', '{0,1}', '{0,1}', '{0,1}', array_fill(now(), ARRAY[2])"
    conn.exec_driver_sql(base.format(pid=pid) + ok + " FROM topics")
    conn.commit()


def test_group_constraints(conn: sa.Connection) -> None:
    conn.exec_driver_sql(
        "INSERT INTO groups (group_id) VALUES ('g'); "
        "INSERT INTO group_members (group_id, member_id, group_instance_id, session_timeout_ms, joined_generation) "
        "VALUES ('g', 'm1', 'i1', 10000, 0), ('g', 'm2', NULL, 10000, 0), ('g', 'm3', NULL, 10000, 0); "
        "INSERT INTO member_assignments (group_id, topic_id, partition, member_id, generation) "
        "SELECT 'g', topic_id, 0, 'm1', 0 FROM topics"
    )
    conn.commit()
    # one owner per partition and group
    _fails(
        conn,
        "INSERT INTO member_assignments (group_id, topic_id, partition, member_id, generation) "
        "SELECT 'g', topic_id, 0, 'm2', 0 FROM topics",
        UNIQUE,
    )
    # one live member per static instance id
    _fails(
        conn,
        "INSERT INTO group_members (group_id, member_id, group_instance_id, session_timeout_ms, "
        "joined_generation) VALUES ('g', 'm4', 'i1', 10000, 0)",
        UNIQUE,
    )
    # an assignment names a real member
    _fails(conn, "UPDATE member_assignments SET member_id = 'ghost'", FK)
    _fails(conn, "UPDATE groups SET state = 'Rebalancing'", CHECK)
    _fails(
        conn,
        "INSERT INTO committed_offsets (group_id, topic_id, partition, committed_offset, commit_seq, "
        "metadata) SELECT 'g', topic_id, 0, 1, 1, repeat('x', 4097) FROM topics",
        CHECK,
    )
    _fails(
        conn,
        "INSERT INTO committed_offsets (group_id, topic_id, partition, committed_offset, commit_seq) "
        "SELECT 'g', topic_id, 0, -1, 1 FROM topics",
        CHECK,
    )
    # removing a member drops its assignments with it
    conn.exec_driver_sql("DELETE FROM group_members WHERE member_id = 'm1'")
    conn.commit()
    assert conn.exec_driver_sql("SELECT count(*) FROM member_assignments").scalar_one() == 0


def test_deleting_a_topic_removes_its_partitions_and_records(conn: sa.Connection) -> None:
    conn.exec_driver_sql(
        'INSERT INTO records (topic_id, partition, "offset") SELECT topic_id, 0, 0 FROM topics'
    )
    conn.exec_driver_sql("DELETE FROM topics")
    conn.commit()
    assert conn.exec_driver_sql("SELECT count(*) FROM records").scalar_one() == 0
    assert conn.exec_driver_sql("SELECT count(*) FROM partitions").scalar_one() == 0


def test_protocol_errors_raised_in_sql_map_to_typed_errors(conn: sa.Connection) -> None:
    pid = _insert_producer(conn, "tx-1")
    conn.execute(
        sa.text("INSERT INTO transactions (transactional_id, producer_id) VALUES ('tx-1', :p)"), {"p": pid}
    )
    conn.commit()
    with pytest.raises(errors.InvalidTxnStateError, match="Empty -> CompleteAbort"), mapped_errors():
        conn.exec_driver_sql("UPDATE transactions SET state = 'CompleteAbort'")
    conn.rollback()
