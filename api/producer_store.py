"""The store operations the producer's parts use, as one seam they are handed at construction.

:class:`ProducerStore` names what the sender and the transaction manager need from the store
(connections, InitProducerId, Produce, the commit carrying the queued batches and offsets, EndTxn,
TxnOffsetCommit, and the wake-ups of waiting readers);
:class:`DatabaseStore` is the real one, a thin adapter over :mod:`oncelog.store` (which alone
builds SQL). Unit tests hand the parts a fake instead, as Kafka's SenderTest and
TransactionManagerTest use a mock client, so retries and epoch bumps run without PostgreSQL.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from oncelog import errors
from oncelog.store import groups, log, txn
from oncelog.store.engine import CLIENT_GRACE_S, bounded, set_request_timeout
from oncelog.store.records import CommitResult, ProduceBatch, ProduceResult, ProducerIdAndEpoch, TxnOffsets
from oncelog.store.txn import TransactionalIdentity

__all__ = ["DatabaseStore", "ProducerStore"]

logger = logging.getLogger(__name__)


class ProducerStore(Protocol):
    """What the producer's sender and transaction manager ask of the store.

    A connection is opaque to the callers: they get one from :meth:`connect`, pass it to every
    call, and hand it back to :meth:`release` (``invalidate`` when it may be broken).
    """

    def connect(self) -> Any:
        """A connection in autocommit (each call below is one database transaction)."""

    def release(self, conn: Any, *, invalidate: bool) -> None:
        """Close ``conn``; ``invalidate``: it may be broken and must not be reused."""

    def request(self, conn: Any, seconds: float) -> contextlib.AbstractContextManager[None]:
        """Bound the calls made inside the block on ``conn`` to ``seconds``."""

    def init_producer_id(
        self, conn: Any, *, producer_id: int | None = None, epoch: int | None = None
    ) -> ProducerIdAndEpoch:
        """InitProducerId without a transactional id (with the current id and epoch: a KIP-360 bump)."""

    def produce_batches(
        self,
        conn: Any,
        *,
        batches: Sequence[ProduceBatch],
        producer_id: int | None,
        producer_epoch: int | None,
        transactional_id: str | None,
        txn_number: int | None,
    ) -> list[ProduceResult | errors.OncelogError]:
        """Append batches for any partitions in one request; each is answered on its own (its
        result, or the error it was refused with; a retry of an appended one is a duplicate)."""

    def produce_offsets_end_txn(
        self,
        conn: Any,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        txn_number: int,
        batches: Sequence[ProduceBatch],
        offsets: TxnOffsets | None,
    ) -> CommitResult:
        """A transaction's queued batches (any partitions), its consumer offsets and its commit,
        in one database transaction; each batch's result, EndTxn's outcome, the partitions to wake."""

    def init_transactional_id(
        self,
        conn: Any,
        *,
        transactional_id: str,
        transaction_timeout_ms: int,
        producer_id: int | None,
        epoch: int | None,
    ) -> TransactionalIdentity:
        """InitProducerId for a transactional id (with the current id and epoch: a KIP-360 bump)."""

    def end_txn(
        self, conn: Any, *, transactional_id: str, producer_id: int, epoch: int, txn_number: int, commit: bool
    ) -> tuple[str, list[str]]:
        """EndTxn: commit or abort; the outcome (``committed``, ``already_aborted``, ...) and the
        wake tokens of a commit's partitions on which a reader waits."""

    def txn_offset_commit(
        self,
        conn: Any,
        *,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        txn_number: int,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation: int,
        offsets: Mapping[tuple[str, int], tuple[int, str]],
    ) -> None:
        """TxnOffsetCommit: a group's offsets, pending in the transaction (KIP-447)."""

    def wake_readers(self, conn: Any, tokens: Sequence[str]) -> int:
        """Wake the readers of the partitions of ``tokens``; the number of NOTIFYs sent."""


class DatabaseStore:
    """:class:`ProducerStore` on PostgreSQL: each operation is one :mod:`oncelog.store` call.

    The store functions are looked up at every call (``log.produce``, not a bound copy), so a
    test that wraps one of them in :mod:`oncelog.store` sees the producer's calls too.
    """

    def __init__(self, connect: Callable[[], sa.Connection]) -> None:
        self._connect = connect

    def connect(self) -> sa.Connection:
        """A pooled connection in autocommit (the client's)."""
        return self._connect()

    def release(self, conn: sa.Connection, *, invalidate: bool) -> None:
        """Close ``conn``; an invalidated one never returns to the pool."""
        try:
            if invalidate:
                conn.invalidate()
            conn.close()
        except Exception:  # a broken connection may fail to close; it is discarded anyway
            logger.debug("closing a broken connection failed", exc_info=True)

    @contextlib.contextmanager
    def request(self, conn: sa.Connection, seconds: float) -> Iterator[None]:
        """The server cancels a call past ``seconds`` (statement and lock timeouts: a retriable
        RequestTimeoutError, nothing written); should the network stall instead, the connection
        is cut shortly after (DatabaseUnavailableError, outcome unknown)."""
        seconds = max(seconds, 0.001)
        with bounded(conn, seconds + CLIENT_GRACE_S):
            set_request_timeout(conn, int(seconds * 1000) or 1)
            yield

    def init_producer_id(
        self, conn: sa.Connection, *, producer_id: int | None = None, epoch: int | None = None
    ) -> ProducerIdAndEpoch:
        """See :func:`oncelog.store.log.init_producer_id`."""
        return log.init_producer_id(conn, producer_id=producer_id, epoch=epoch)

    def produce_batches(self, conn: sa.Connection, **request: Any) -> list[ProduceResult | errors.OncelogError]:
        """See :func:`oncelog.store.log.produce_batches`."""
        return log.produce_batches(conn, **request)

    def produce_offsets_end_txn(self, conn: sa.Connection, **commit: Any) -> CommitResult:
        """See :func:`oncelog.store.log.produce_offsets_end_txn`."""
        return log.produce_offsets_end_txn(conn, **commit)

    def init_transactional_id(self, conn: sa.Connection, **args: Any) -> TransactionalIdentity:
        """See :func:`oncelog.store.txn.init_producer_id`."""
        return txn.init_producer_id(conn, **args)

    def end_txn(self, conn: sa.Connection, **args: Any) -> tuple[str, list[str]]:
        """See :func:`oncelog.store.txn.end_txn_waking`."""
        return txn.end_txn_waking(conn, **args)

    def txn_offset_commit(self, conn: sa.Connection, **args: Any) -> None:
        """See :func:`oncelog.store.groups.txn_offset_commit`."""
        groups.txn_offset_commit(conn, **args)

    def wake_readers(self, conn: sa.Connection, tokens: Sequence[str]) -> int:
        """See :func:`oncelog.store.log.wake_readers`."""
        return log.wake_readers(conn, tokens)
