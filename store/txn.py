"""The transaction coordinator's operations: InitProducerId with a transactional id,
AddPartitionsToTxn, EndTxn, and the operator's views of transactions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from oncelog.errors import TransactionalIdNotFoundError, TransactionTimeoutError
from oncelog.store.errors import mapped_errors


@dataclass(frozen=True, slots=True)
class TransactionalIdentity:
    """What InitProducerId returns for a transactional id: the identity and the last transaction number."""

    producer_id: int
    epoch: int
    txn_number: int


@dataclass(frozen=True, slots=True)
class TransactionStatus:
    """One row of the ``transaction_status`` view."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    txn_number: int
    timeout_ms: int
    txn_started_at: datetime | None
    age: timedelta | None
    expired: bool
    partitions: list[str]
    updated_at: datetime


def _call(conn: sa.Connection, sql: str, params: dict[str, Any]) -> sa.CursorResult[Any]:
    with mapped_errors():
        return conn.exec_driver_sql(sql, params)


def init_producer_id(
    conn: sa.Connection,
    *,
    transactional_id: str,
    transaction_timeout_ms: int,
    producer_id: int | None = None,
    epoch: int | None = None,
) -> TransactionalIdentity:
    """InitProducerId with a transactional id: bump the epoch (fencing older instances and aborting
    their open transaction), or with the current (id, epoch) the KIP-360 bump."""
    row = _call(
        conn,
        "SELECT producer_id, producer_epoch, txn_number FROM init_transactional_producer_id_v1("
        "%(tid)s, %(timeout)s, %(pid)s, %(epoch)s::smallint)",
        {"tid": transactional_id, "timeout": transaction_timeout_ms, "pid": producer_id, "epoch": epoch},
    ).one()
    return TransactionalIdentity(int(row.producer_id), int(row.producer_epoch), int(row.txn_number))


def add_partitions_to_txn(
    conn: sa.Connection,
    *,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    txn_number: int,
    partitions: Iterable[tuple[str, int]],
) -> None:
    """AddPartitionsToTxn (opening transaction ``txn_number`` if the previous one completed)."""
    pairs = list(partitions)
    _call(
        conn,
        "SELECT add_partitions_to_txn_v1(%(tid)s, %(pid)s, %(epoch)s::smallint, %(n)s, %(topics)s::text[], "
        "%(parts)s::integer[])",
        {
            "tid": transactional_id,
            "pid": producer_id,
            "epoch": epoch,
            "n": txn_number,
            "topics": [t for t, _ in pairs],
            "parts": [p for _, p in pairs],
        },
    )


def end_txn(
    conn: sa.Connection, *, transactional_id: str, producer_id: int, epoch: int, txn_number: int, commit: bool
) -> str:
    """EndTxn: commit or abort transaction ``txn_number``.

    Returns ``committed``/``aborted``, or ``already_committed``/``already_aborted`` for a retry
    whose first attempt took effect; an abort of a transaction past its timeout returns
    ``aborted_timed_out``/``already_aborted_timed_out`` (the epoch was bumped: re-initialise). A
    commit that came after the timeout raises TransactionTimeoutError (the store aborted the
    transaction and bumped the epoch).
    """
    outcome = str(
        _call(
            conn,
            "SELECT end_txn_v1(%(tid)s, %(pid)s, %(epoch)s::smallint, %(n)s, %(commit)s)",
            {"tid": transactional_id, "pid": producer_id, "epoch": epoch, "n": txn_number, "commit": commit},
        ).scalar_one()
    )
    return end_txn_outcome(outcome, transactional_id=transactional_id, txn_number=txn_number)


def end_txn_waking(
    conn: sa.Connection, *, transactional_id: str, producer_id: int, epoch: int, txn_number: int, commit: bool
) -> tuple[str, list[str]]:
    """:func:`end_txn`, and the wake tokens of the partitions of the commit or abort on which a
    read_committed reader waits (an abort lets it read what committed behind the transaction):
    wake them with :func:`oncelog.store.log.wake_readers` once this call has returned."""
    row = _call(
        conn,
        "SELECT outcome, wake FROM end_txn_v2(%(tid)s, %(pid)s, %(epoch)s::smallint, %(n)s, %(commit)s)",
        {"tid": transactional_id, "pid": producer_id, "epoch": epoch, "n": txn_number, "commit": commit},
    ).one()
    outcome = end_txn_outcome(str(row.outcome), transactional_id=transactional_id, txn_number=txn_number)
    return outcome, list(row.wake or [])


def end_txn_outcome(outcome: str, *, transactional_id: str, txn_number: int) -> str:
    """EndTxn's answer as the store functions return it: ``timed_out`` (a commit that came after
    the timeout: the store aborted the transaction and bumped the epoch) raises
    TransactionTimeoutError, any other answer is returned."""
    if outcome == "timed_out":
        raise TransactionTimeoutError(
            f"transaction {txn_number} of {transactional_id!r} exceeded its timeout and was aborted"
        )
    return outcome


def expire_transactions(conn: sa.Connection) -> int:
    """Abort transactions open past their timeout (fencing their epoch); expire idle transactional ids.
    Returns the number of transactions aborted.

    The time is the server's (a caller cannot choose it). The SQL function aborts one per call, so
    that each abort keeps the lock order; use an autocommit connection, so each call commits on its
    own (as every oncelog client does)."""
    total = 0
    while n := int(_call(conn, "SELECT expire_transactions_v2()", {}).scalar_one()):
        total += n
    return total


def abort_transaction(conn: sa.Connection, *, transactional_id: str) -> None:
    """An operator's abort of an open transaction: fences its producer and aborts it."""
    _call(conn, "SELECT abort_transaction_v1(%(tid)s)", {"tid": transactional_id})


_STATUS = (
    "SELECT transactional_id, state, producer_id, producer_epoch, txn_number, timeout_ms, txn_started_at, age, "
    "expired, partitions, updated_at FROM transaction_status"
)


def list_transactions(
    conn: sa.Connection, *, states: Iterable[str] | None = None, older_than: timedelta | None = None
) -> list[TransactionStatus]:
    """Transactional ids with their state (optionally only some states, or open longer than ``older_than``)."""
    rows = _call(
        conn,
        _STATUS + " WHERE (%(states)s::text[] IS NULL OR state = ANY(%(states)s::text[])) "
        "AND (%(older)s::interval IS NULL OR age > %(older)s::interval) ORDER BY transactional_id",
        {"states": list(states) if states is not None else None, "older": older_than},
    ).all()
    return [TransactionStatus(**r._mapping) for r in rows]


def expire_txn_history(conn: sa.Connection, *, batch: int = 10_000) -> int:
    """Prune the transaction journal's history past ``txn_history_retention_ms`` (each
    transactional id keeps its newest CompleteCommit), ``batch`` rows per database transaction.
    Returns the rows deleted. Use an autocommit connection, so each batch commits on its own."""
    total = 0
    while n := int(_call(conn, "SELECT expire_txn_history_v2(%(batch)s)", {"batch": batch}).scalar_one()):
        total += n
    return total


def describe_transaction(conn: sa.Connection, *, transactional_id: str) -> TransactionStatus:
    """The coordinator state of one transactional id."""
    row = _call(conn, _STATUS + " WHERE transactional_id = %(tid)s", {"tid": transactional_id}).one_or_none()
    if row is None:
        raise TransactionalIdNotFoundError(f"no transactional id {transactional_id!r}")
    return TransactionStatus(**row._mapping)


def committed_transactional_ids(conn: sa.Connection, *, pattern: str) -> list[str]:
    """Transactional ids matching the regular expression ``pattern`` that have ever committed a
    transaction (from the journal, which survives re-initialisation): how a re-run job learns it
    already finished."""
    rows = _call(
        conn,
        "SELECT DISTINCT transactional_id FROM txn_history "
        "WHERE transactional_id ~ %(p)s AND to_state = 'CompleteCommit' ORDER BY 1",
        {"p": pattern},
    ).all()
    return [r[0] for r in rows]


def abort_open_transactions(conn: sa.Connection, *, pattern: str) -> list[str]:
    """Abort the open transactions whose transactional ids match the regular expression
    ``pattern``, the way a new instance of their producer would: InitProducerId bumps the epoch,
    fencing the old holder and aborting its transaction. Unlike the operator's abort
    (:func:`abort_transaction`, admin only) this needs only the client role, which is what a job
    recovering its own transactional ids (Spark) runs as. Returns the ids aborted."""
    rows = _call(
        conn,
        "SELECT transactional_id, timeout_ms FROM transaction_status WHERE state = 'Ongoing' "
        "AND transactional_id ~ %(p)s ORDER BY 1",
        {"p": pattern},
    ).all()
    for row in rows:
        init_producer_id(conn, transactional_id=row.transactional_id, transaction_timeout_ms=int(row.timeout_ms))
    return [row.transactional_id for row in rows]
