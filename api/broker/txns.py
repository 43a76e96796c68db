"""Kafka's transaction APIs over the store's transactions.

A Kafka client names a transaction by its transactional id, producer id and epoch only; the
store numbers each transaction of a transactional id (``txn_number``), so that a retry of
transaction N is told from transaction N+1. The broker supplies the number: the one after the
last at InitProducerId, the same until EndTxn, the next after it. A transactional id this broker
has not seen (the client came through another broker, or this one restarted) takes its number
from the store: the open transaction's, or the one after the last.

An EndTxn resent after its answer was lost arrives when the next transaction has not started: it
is sent to the store again for the transaction it ended, and the store answers it as a retry, or
refuses the other decision (INVALID_TXN_STATE), as Kafka's coordinator does in CompleteCommit and
CompleteAbort. The broker's memory is not needed for this: after a restart the store's row says
which transaction ended last and how. An EndTxn that cannot reach the store is answered
COORDINATOR_LOAD_IN_PROGRESS, which clients resend, rather than an error after which they abort:
a commit that landed while its answer was lost then reads as the retry it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from oncelog import errors
from oncelog.broker.common import NONE, Database, Node, commit_answer, committed_offsets, error_code
from oncelog.store import groups, txn

__all__ = ["TxnHandlers"]

logger = logging.getLogger(__name__)


#: The store's states after an EndTxn: a later EndTxn with no write since names that transaction.
_ENDED = frozenset({"CompleteCommit", "CompleteAbort"})
#: Kafka's COORDINATOR_LOAD_IN_PROGRESS: clients resend the request (librdkafka, Kafka's Java
#: client), where after NETWORK_EXCEPTION they would abort a transaction that may have committed.
_COORDINATOR_LOAD_IN_PROGRESS = 14


def _coordinator_code(exc: errors.OncelogError) -> int:
    """The code a transaction API answers ``exc`` with: the store out of reach is the
    coordinator not ready, which clients resend (each of these requests is safe to repeat: the
    store answers a repeat as the retry it is); anything else as every API answers it."""
    if isinstance(exc, errors.DatabaseUnavailableError):
        return _COORDINATOR_LOAD_IN_PROGRESS
    return error_code(exc)


@dataclass(slots=True)
class _Slot:
    """What the broker knows of a transactional id: its producer and the transaction number in
    use (``started``: the store has seen it)."""

    producer_id: int
    epoch: int
    number: int
    started: bool = False


class TxnHandlers:
    """InitProducerId for a transactional id, AddPartitionsToTxn, AddOffsetsToTxn,
    TxnOffsetCommit and EndTxn; and the transaction number a transactional Produce writes in."""

    def __init__(
        self,
        database: Database,
        node: Node,
        run: Callable[..., Any],
        *,
        wake: Callable[[Iterable[str]], None],
    ) -> None:
        self._db = database
        self._node = node
        self._run = run
        self._wake = wake
        # Read and written on the event loop only: no lock.
        self._slots: dict[str, _Slot] = {}

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int, epoch: int) -> Any:
        """InitProducerId with a transactional id (a KIP-360 bump with the current id and epoch)."""
        ident = await self._run(
            self._db.call,
            txn.init_producer_id,
            transactional_id=transactional_id,
            transaction_timeout_ms=timeout_ms,
            producer_id=producer_id if producer_id >= 0 else None,
            epoch=epoch if producer_id >= 0 else None,
        )
        self._slots[transactional_id] = _Slot(ident.producer_id, ident.epoch, ident.txn_number + 1)
        return ident

    async def number(self, transactional_id: str, producer_id: int, epoch: int) -> int:
        """The transaction number a request of this producer writes in (the store checks the
        producer id and epoch against its own; this only picks the number)."""
        slot = await self._slot(transactional_id, producer_id, epoch)
        slot.started = True
        return slot.number

    async def _slot(self, transactional_id: str, producer_id: int, epoch: int) -> _Slot:
        slot = self._slots.get(transactional_id)
        if slot is not None and (slot.producer_id, slot.epoch) == (producer_id, epoch):
            return slot
        # Not ours, or another instance since: the store's row says where the id stands.
        status = await self._current(transactional_id, producer_id, epoch)
        ongoing = status.state == "Ongoing"
        slot = _Slot(producer_id, epoch, status.txn_number if ongoing else status.txn_number + 1, started=ongoing)
        self._slots[transactional_id] = slot
        return slot

    async def _current(self, transactional_id: str, producer_id: int, epoch: int) -> txn.TransactionStatus:
        """The store's row of ``transactional_id``, when this producer id and epoch are its
        current ones; otherwise the error Kafka's coordinator answers (a fenced instance, an id
        that is not this transactional id's)."""
        status: txn.TransactionStatus = await self._run(
            self._db.call, txn.describe_transaction, transactional_id=transactional_id
        )
        if status.producer_id != producer_id:
            raise errors.InvalidProducerIdMappingError(
                f"producer id {producer_id} is not transactional id {transactional_id!r}'s"
            )
        if status.producer_epoch > epoch:
            raise errors.ProducerFencedError(f"epoch {epoch} was fenced by epoch {status.producer_epoch}")
        if status.producer_epoch < epoch:
            raise errors.InvalidProducerEpochError(f"epoch {epoch} was never issued")
        return status

    async def add_partitions(self, request: Any, response_class: Any) -> Any:
        tid, pid, epoch = (
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
        )
        pairs = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
        try:
            number = await self.number(tid, pid, epoch)
            await self._run(
                self._db.call,
                txn.add_partitions_to_txn,
                transactional_id=tid,
                producer_id=pid,
                epoch=epoch,
                txn_number=number,
                partitions=pairs,
            )
            code = NONE
        except errors.OncelogError as exc:
            code = _coordinator_code(exc)
        topic_class = response_class.AddPartitionsToTxnTopicResult
        partition_class = topic_class.AddPartitionsToTxnPartitionResult
        return response_class(
            version=request.version,
            throttle_time_ms=0,
            results_by_topic_v3_and_below=[
                topic_class(
                    name=t.name,
                    results_by_partition=[
                        partition_class(partition_index=p, partition_error_code=code) for p in t.partitions
                    ],
                )
                for t in request.v3_and_below_topics
            ],
        )

    async def add_offsets(self, request: Any, response_class: Any) -> Any:
        # The offsets join the transaction with TxnOffsetCommit, which the store checks then.
        try:
            await self.number(request.transactional_id, request.producer_id, request.producer_epoch)
            code = NONE
        except errors.OncelogError as exc:
            code = _coordinator_code(exc)
        return response_class(version=request.version, throttle_time_ms=0, error_code=code)

    async def txn_offset_commit(self, request: Any, response_class: Any) -> Any:
        offsets = committed_offsets(request)
        try:
            number = await self.number(request.transactional_id, request.producer_id, request.producer_epoch)
            await self._run(
                self._db.call,
                groups.txn_offset_commit,
                transactional_id=request.transactional_id,
                producer_id=request.producer_id,
                epoch=request.producer_epoch,
                txn_number=number,
                group_id=request.group_id,
                member_id=getattr(request, "member_id", "") or "",
                group_instance_id=getattr(request, "group_instance_id", None),
                generation=getattr(request, "generation_id", -1),
                offsets=offsets,
            )
            code = NONE
        except errors.OncelogError as exc:
            code = _coordinator_code(exc)
        return commit_answer(request, response_class, response_class.TxnOffsetCommitResponseTopic, code)

    async def end_txn(self, request: Any, response_class: Any) -> Any:
        def answer(code: int) -> Any:
            return response_class(version=request.version, throttle_time_ms=0, error_code=code)

        tid, pid, epoch, commit = (
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
        )
        try:
            slot = await self._slot(tid, pid, epoch)
            number = slot.number
            if not slot.started:
                # No write of this transaction reached the store through this broker. Either
                # nothing was written in it, or this is an EndTxn resent for the transaction
                # that ended last (its answer lost, perhaps with the broker that gave it), or
                # the transaction was written through another broker: the store's row tells,
                # and the store answers a resend as the retry it is or refuses the other
                # decision. It also says whether this producer was fenced.
                status = await self._current(tid, pid, epoch)
                if status.state == "Ongoing":
                    # Opened through another broker since this one last saw the id. Nothing in
                    # the request tells an EndTxn meant for it from a late copy of the EndTxn
                    # for the transaction before it (docs/guide-broker.md, "A client that moves
                    # between brokers"): a late commit would commit it half-written, and a late
                    # abort would abort it without the epoch bump that makes the client's
                    # later writes fail, so they could go on in the next transaction. Refused
                    # (fatal to Kafka's clients): the client's next instance aborts it with
                    # its InitProducerId. Answering "nothing to end" told the client it had
                    # committed while the store aborted the transaction at its timeout.
                    return answer(error_code(errors.InvalidTxnStateError("opened through another broker")))
                if status.state not in _ENDED:
                    return answer(NONE)  # nothing was written in this transaction: nothing to end
                number = status.txn_number
        except errors.OncelogError as exc:
            return answer(_coordinator_code(exc))
        try:
            _, wake = await self._run(
                self._db.call,
                txn.end_txn_waking,
                transactional_id=tid,
                producer_id=pid,
                epoch=epoch,
                txn_number=number,
                commit=commit,
            )
        except errors.OncelogError as exc:
            # Unreachable, the outcome is unknown (the commit may have landed): the client
            # resends, and the store answers the resend as a retry, whatever happened.
            return answer(_coordinator_code(exc))
        if wake:
            self._wake(wake)  # read_committed readers of the partitions it held back
        if number == slot.number:
            slot.number, slot.started = number + 1, False
        return answer(NONE)
