"""Kafka's transaction APIs over the store's transactions.

A Kafka client names a transaction by its transactional id, producer id and epoch only; the
store numbers each transaction of a transactional id (``txn_number``), so that a retry of
transaction N is told from transaction N+1. The broker supplies the number: the one after the
last at InitProducerId, the same until EndTxn, the next after it. A transactional id this broker
has not seen (the client came through another broker, or this one restarted) takes its number
from the store: the open transaction's, or the one after the last. So does one whose remembered
number the store refuses, or whose transaction starts here with a Produce or ends here with
nothing written through this broker: the client may have gone on through another broker meanwhile.

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
        known = self._slots.get(transactional_id)
        if known is not None and not known.started:
            # This transaction's first request here (a Produce before any AddPartitionsToTxn):
            # the store's row names its number, in case it went on through another broker.
            self._forget(transactional_id, known)
        slot = await self._slot(transactional_id, producer_id, epoch)
        slot.started = True
        return slot.number

    async def _numbered(self, transactional_id: str, producer_id: int, epoch: int, call: Callable[[int], Any]) -> Any:
        """``call(number)`` (a store call) in the transaction this producer writes in, taking its
        number from the store once more if the store refused the one this broker remembered.

        The broker's number is stale when the producer's transactions went on through another
        broker meanwhile (its connection here was lost, the client found another coordinator,
        then came back): the store then answers INVALID_TXN_STATE, which every client takes as
        fatal, where Kafka's single coordinator would just go on. The store's row, read after it
        confirmed the producer id and epoch, names the transaction open (which the call then
        joins) or the last one (the call opens the next). Once only: a refusal with the store's
        own number is the client's to hear."""
        slot = await self._slot(transactional_id, producer_id, epoch)
        slot.started = True
        try:
            return await call(slot.number)
        except errors.InvalidTxnStateError:
            self._forget(transactional_id, slot)
            fresh = await self._slot(transactional_id, producer_id, epoch)
            fresh.started = True
            if fresh.number == slot.number:
                raise
            logger.info(
                "transactional id %r: transaction %s, not %s (it went on through another broker)",
                transactional_id,
                fresh.number,
                slot.number,
            )
            return await call(fresh.number)

    def _forget(self, transactional_id: str, slot: _Slot) -> None:
        """Drop ``slot``, unless another request replaced it already: the next one reads the store."""
        if self._slots.get(transactional_id) is slot:
            del self._slots[transactional_id]

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
            await self._numbered(
                tid,
                pid,
                epoch,
                lambda number: self._run(
                    self._db.call,
                    txn.add_partitions_to_txn,
                    transactional_id=tid,
                    producer_id=pid,
                    epoch=epoch,
                    txn_number=number,
                    partitions=pairs,
                ),
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
            await self._numbered(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                lambda number: self._run(
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
                ),
            )
            code = NONE
        except errors.OncelogError as exc:
            code = _coordinator_code(exc)
        return commit_answer(request, response_class, response_class.TxnOffsetCommitResponseTopic, code)

    async def end_txn(self, request: Any, response_class: Any) -> Any:
        code = await self._end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed, again=True
        )
        return response_class(version=request.version, throttle_time_ms=0, error_code=code)

    async def _end_txn(self, tid: str, pid: int, epoch: int, commit: bool, *, again: bool) -> int:
        """EndTxn's error code; ``again``: a refusal of the number this broker remembered is
        answered by taking the number from the store's row and ending once more (_numbered)."""
        try:
            slot = await self._slot(tid, pid, epoch)
            number, remembered = slot.number, slot.started
            if not slot.started:
                # No write of this transaction reached the store through this broker. The store's
                # row tells what to end (and whether this producer was fenced): a transaction
                # open there was opened through another broker (this one's memory is older) and
                # is ended; after an ended one this is an EndTxn resent for it (its answer lost,
                # perhaps with the broker that gave it), which the store answers as the retry it
                # is or refuses for the other decision; otherwise nothing was written at all.
                status = await self._current(tid, pid, epoch)
                if status.state != "Ongoing" and status.state not in _ENDED:
                    return NONE
                number = status.txn_number
        except errors.OncelogError as exc:
            return _coordinator_code(exc)
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
        except errors.InvalidTxnStateError as exc:
            if not (again and remembered):
                return _coordinator_code(exc)
            self._forget(tid, slot)
            return await self._end_txn(tid, pid, epoch, commit, again=False)
        except errors.OncelogError as exc:
            # Unreachable, the outcome is unknown (the commit may have landed): the client
            # resends, and the store answers the resend as a retry, whatever happened.
            return _coordinator_code(exc)
        if wake:
            self._wake(wake)  # read_committed readers of the partitions it held back
        if number >= slot.number:
            slot.number, slot.started = number + 1, False
        return NONE
