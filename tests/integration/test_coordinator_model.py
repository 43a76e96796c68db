"""The transaction coordinator against a model: random operation sequences, store vs. pure Python.

The model is Kafka's coordinator (rules 11-21 and 25-28 of docs/concepts.md, and its state machine) with
oncelog's documented choices (every call names its transaction number; InitProducerId on an open
transaction fences and aborts it in one step; a KIP-360 retry, or the holder of an epoch fenced by a
timeout, gets the current identity; a partition written to is added implicitly; EndTxn of a
transaction that never reached the store completes it empty). It keeps, per transactional id, its
state, producer id, transaction number and open partitions; per producer id its epoch and the epoch
before the last bump; per partition the log (data records, aborted flags, markers).

Two transactional ids with two producer instances each; an instance holds the identity its last
InitProducerId returned (unless that reply was "lost") and the number of its current transaction.
Operations: InitProducerId (plain, KIP-360, either with the reply lost), transactional produce and
AddPartitionsToTxn naming the current, the previous or the next transaction (also with the other
id's name), a plain idempotent write, EndTxn commit/abort (current, previous = a retry, next),
expire_transactions at a future ``now`` (one hour: timeouts; eight days: also idle ids), an
operator's abort, and time passing for one open transaction (setup by SQL: its start is moved two
hours back). Every reply (value or error class) must equal the model's; after every step the
transaction_status view, txn_history, the whole log (markers and aborted flags included), the
high watermark and last stable offset, and read_committed / read_uncommitted content must too.

Each hypothesis example uses a topic and transactional ids of its own; its teardown aborts and
expires everything it left, so one example's maintenance calls never see another's transactions.
"""

from __future__ import annotations

import itertools
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from oncelog import errors
from oncelog.store import log, topics, txn
from oncelog.store.records import RecordIn
from tests.support.clock import server_time

PARTITIONS = 2
TIDS = 2
INSTANCES_PER_TID = 2
TIMEOUT_MS = 600_000  # ten minutes: no transaction times out by itself during a test
TOP_EPOCH = 32767
EXHAUSTED = 32766
COMPLETE = ("Empty", "CompleteCommit", "CompleteAbort")

Outcome = tuple[str, Any]  # ("ok", value) or ("err", error class name)


def ok(value: Any = None) -> Outcome:
    return ("ok", value)


def err(cls: type[errors.OncelogError]) -> Outcome:
    return ("err", cls.__name__)


# --- the model -------------------------------------------------------------------------------


@dataclass
class ProducerM:
    epoch: int = 0
    last_epoch: int | None = None


@dataclass
class TidM:
    pid: int
    state: str = "Empty"
    prev_pid: int | None = None  # the id retired by the last rotation (expiry or exhausted epoch)
    txn: int = 0
    timed_out: bool = False  # the open transaction is past its timeout
    opened: int = 0  # when its open transaction started, in the model's order of events
    moved_back: int = 0  # how many times "time passes" moved that start two hours back
    parts: dict[int, int | None] = field(default_factory=dict)  # open transaction: partition -> first offset
    history: list[tuple[str | None, str, int, int, int]] = field(default_factory=list)


@dataclass
class Entry:
    """One record of a partition's log."""

    value: bytes | None
    control: str | None  # None, 'commit' or 'abort'
    pid: int
    epoch: int
    txn: tuple[str, int] | None  # (transactional id, number) of a transactional data record
    aborted: bool = False


class Model:
    def __init__(self) -> None:
        self.tids: dict[str, TidM] = {}
        self.producers: dict[int, ProducerM] = {}
        self.logs: list[list[Entry]] = [[] for _ in range(PARTITIONS)]
        self.seqs: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, partition) -> (epoch, next sequence)
        self._clock = itertools.count(1)  # orders the transactions' starts

    # internal transitions

    def _move(self, tid: str, to: str) -> None:
        t = self.tids[tid]
        t.history.append((t.state if t.history else None, to, t.pid, self.producers[t.pid].epoch, t.txn))
        t.state = to

    def _new_pid(self, tid: str, pid: int) -> None:
        self.producers[pid] = ProducerM()
        self.tids[tid].pid = pid

    def _open(self, tid: str, n: int) -> None:
        t = self.tids[tid]
        if t.state != "Ongoing":
            t.txn = n
            t.opened = next(self._clock)
            t.moved_back = 0
            self._move(tid, "Ongoing")
            t.timed_out = False
            t.parts = {}

    def _complete(self, tid: str, commit: bool) -> None:
        t = self.tids[tid]
        self._move(tid, "PrepareCommit" if commit else "PrepareAbort")
        epoch = self.producers[t.pid].epoch
        for p in sorted(t.parts):
            if t.parts[p] is None:
                continue  # added, never written: no marker
            if not commit:
                for e in self.logs[p]:
                    if e.txn == (tid, t.txn):
                        e.aborted = True
            self.logs[p].append(Entry(None, "commit" if commit else "abort", t.pid, epoch, None))
        t.parts = {}
        t.timed_out = False
        self._move(tid, "CompleteCommit" if commit else "CompleteAbort")

    def _fence_abort(self, tid: str, recoverable: bool) -> None:
        pr = self.producers[self.tids[tid].pid]
        pr.last_epoch = pr.epoch if recoverable else None
        pr.epoch = min(pr.epoch + 1, TOP_EPOCH)
        self._complete(tid, False)

    def _check(self, tid: str, pid: int, epoch: int, n: int) -> Outcome | None:
        """The checks of every transactional call; None if transaction n may go on (or open)."""
        t = self.tids.get(tid)
        if t is None or t.state == "Dead" or t.pid != pid:
            return err(errors.InvalidProducerIdMappingError)
        pr = self.producers[t.pid]
        if epoch != pr.epoch:
            if epoch == pr.last_epoch:
                return err(errors.InvalidProducerEpochError)
            return err(errors.ProducerFencedError)
        if t.state == "Ongoing":
            if t.txn != n:
                return err(errors.InvalidTxnStateError)
            if t.timed_out:
                return err(errors.TransactionTimeoutError)
            return None
        if n == t.txn + 1:
            return None
        return err(errors.InvalidTxnStateError)

    # requests

    def init(self, tid: str, pid: int | None, epoch: int | None, new_pid: Callable[[], int]) -> Outcome:
        t = self.tids.get(tid)
        if t is None:
            self.tids[tid] = TidM(pid=-1)
            self._new_pid(tid, new_pid())
            self._move(tid, "Empty")
            return ok((self.tids[tid].pid, 0, 0))
        if pid is not None and t.state != "Dead":
            pr = self.producers[t.pid]
            if pid == t.prev_pid and t.state != "Ongoing" and self.producers[pid].last_epoch == epoch:
                # A retry of the call that rotated the id, from the identity that asked for it
                # (the retired id remembers that identity's epoch): the same answer.
                return ok((t.pid, pr.epoch, t.txn))
            if pid != t.pid:
                return err(errors.ProducerFencedError)
            if epoch == pr.last_epoch and epoch != pr.epoch:
                if t.state == "Ongoing":
                    return err(errors.ProducerFencedError)
                return ok((t.pid, pr.epoch, t.txn))  # a retried bump: the same answer
            if epoch != pr.epoch:
                return err(errors.ProducerFencedError)
        pr = self.producers[t.pid]
        if t.state == "Ongoing":
            self._fence_abort(tid, False)
            if pid is not None:
                pr.last_epoch = epoch
        elif t.state == "Dead" or pr.epoch >= EXHAUSTED:
            # The old id is retired with the fencing epoch: nothing can write with it any more. It
            # remembers the identity that asked for the move (none if the caller named none).
            pr.epoch, pr.last_epoch = TOP_EPOCH, epoch if pid is not None and pid == t.pid else None
            t.prev_pid = t.pid
            self._new_pid(tid, new_pid())
        else:
            pr.last_epoch = pr.epoch if pid is not None else None
            pr.epoch += 1
        self._move(tid, "Empty")
        return ok((t.pid, self.producers[t.pid].epoch, t.txn))

    def next_seq(self, pid: int, epoch: int, partition: int) -> int:
        e, nxt = self.seqs.get((pid, partition), (-1, 0))
        return nxt if e == epoch else 0

    def _append(self, pid: int, epoch: int, partition: int, value: bytes, txn_ref: tuple[str, int] | None) -> int:
        offset = len(self.logs[partition])
        self.logs[partition].append(Entry(value, None, pid, epoch, txn_ref))
        self.seqs[(pid, partition)] = (epoch, self.next_seq(pid, epoch, partition) + 1)
        return offset

    def produce(self, tid: str, pid: int, epoch: int, n: int, partition: int, value: bytes) -> Outcome:
        refused = self._check(tid, pid, epoch, n)
        if refused:
            return refused
        self._open(tid, n)
        t = self.tids[tid]
        offset = self._append(pid, epoch, partition, value, (tid, n))
        if t.parts.get(partition) is None:
            t.parts[partition] = offset  # added implicitly on its first write
        return ok(offset)

    def produce_plain(self, pid: int, epoch: int, partition: int, value: bytes) -> Outcome:
        # Stricter than Kafka's rule 6 (deviation 38): a producer id serving a transactional id
        # writes in its transactions only, open or not.
        if any(t.pid == pid for t in self.tids.values()):
            return err(errors.InvalidProducerIdMappingError)
        if epoch != self.producers[pid].epoch:
            return err(errors.InvalidProducerEpochError)
        return ok(self._append(pid, epoch, partition, value, None))

    def add(self, tid: str, pid: int, epoch: int, n: int, parts: list[int]) -> Outcome:
        refused = self._check(tid, pid, epoch, n)
        if refused:
            return refused
        if any(p >= PARTITIONS for p in parts):
            return err(errors.UnknownTopicOrPartitionError)
        self._open(tid, n)
        for p in parts:
            self.tids[tid].parts.setdefault(p, None)
        return ok()

    def end(self, tid: str, pid: int, epoch: int, n: int, commit: bool) -> Outcome:
        t = self.tids.get(tid)
        if t is None or t.state == "Dead" or t.pid != pid:
            return err(errors.InvalidProducerIdMappingError)
        pr = self.producers[t.pid]
        done = "CompleteCommit" if commit else "CompleteAbort"
        if epoch != pr.epoch:
            if epoch == pr.last_epoch and not commit and t.state == "CompleteAbort" and t.txn == n:
                return ok("already_aborted_timed_out")  # aborted by its timeout: satisfied, re-initialise
            if epoch == pr.last_epoch:
                return err(errors.InvalidProducerEpochError)
            return err(errors.ProducerFencedError)
        if t.txn == n and t.state == "Ongoing":
            if t.timed_out:
                self._fence_abort(tid, True)
                return err(errors.TransactionTimeoutError) if commit else ok("aborted_timed_out")
            self._complete(tid, commit)
            return ok("committed" if commit else "aborted")
        if t.txn == n - 1 and t.state in COMPLETE:
            self._open(tid, n)  # never reached the store: opened and completed empty
            self._complete(tid, commit)
            return ok("committed" if commit else "aborted")
        if t.txn == n and t.state == done:
            return ok("already_committed" if commit else "already_aborted")
        return err(errors.InvalidTxnStateError)

    def expire(self, idle: bool) -> Outcome:
        """Every open transaction is past its timeout an hour from now; with ``idle`` (eight days
        from now) every id in Empty/Complete* is also past the transactional id expiration -- including
        one this very call aborted (its change is stamped with the real clock, days before ``now``)."""
        aborted = 0
        # Oldest transaction first, as the store aborts them (its markers land in that order): one
        # whose start "time passes" moved back two hours is older than any it did not (an
        # example's events are seconds apart), and the order of events decides between the rest.
        for tid in sorted(self.tids, key=lambda x: (-self.tids[x].moved_back, self.tids[x].opened, x)):
            if self.tids[tid].state == "Ongoing":
                self._fence_abort(tid, True)
                aborted += 1
        if idle:
            for tid in sorted(self.tids):
                if self.tids[tid].state in COMPLETE:
                    self._move(tid, "Dead")
        return ok(aborted)

    def abort_transaction(self, tid: str) -> Outcome:
        t = self.tids.get(tid)
        if t is None:
            return err(errors.TransactionalIdNotFoundError)
        if t.state != "Ongoing":
            return err(errors.InvalidTxnStateError)
        self._fence_abort(tid, False)
        return ok()

    # what readers see

    def lso(self, partition: int) -> int:
        firsts = [
            f
            for t in self.tids.values()
            if t.state == "Ongoing"
            for p, f in t.parts.items()
            if p == partition and f is not None
        ]
        return min([len(self.logs[partition]), *firsts])

    def read_limits(self) -> list[int]:
        """Where a read_committed fetch of every partition at once stops: each last stable offset,
        pulled back (until nothing changes) to the first record of any committed transaction that
        has a record at or past some partition's limit, the same partition's included: a
        transaction is returned whole or not at all (beyond Kafka, which returns what is below
        the LSO)."""
        limits = [self.lso(p) for p in range(PARTITIONS)]
        changed = True
        while changed:
            changed = False
            for p in range(PARTITIONS):
                here = {e.txn for e in self.logs[p][: limits[p]] if e.txn and e.control is None and not e.aborted}
                beyond = {e.txn for q in range(PARTITIONS) for e in self.logs[q][limits[q] :] if e.control is None}
                torn = here & beyond
                cut = min((o for o, e in enumerate(self.logs[p][: limits[p]]) if e.txn in torn), default=limits[p])
                if cut < limits[p]:
                    limits[p], changed = cut, True
        return limits

    def read(self, partition: int, committed: bool) -> list[bytes]:
        """What a fetch of every partition at once returns of ``partition``."""
        end = self.read_limits()[partition] if committed else len(self.logs[partition])
        return [
            e.value
            for e in self.logs[partition][:end]
            if e.control is None and e.value is not None and not (committed and e.aborted)
        ]


# --- the machine -----------------------------------------------------------------------------


@dataclass
class InstanceM:
    """A producer instance: its transactional id, the identity it holds, its current transaction."""

    tid: str
    ident: tuple[int, int] | None = None  # (producer id, epoch)
    n: int = 1
    recover: bool = False  # after an abortable error: re-initialise with KIP-360 next
    last_end: tuple[int, bool] | None = None  # its last EndTxn (number, commit), for a retry


_examples = itertools.count()

# Operations by name, repeated to weight them: mostly a holder producing and ending its current
# transaction, now and then a retry, a delayed or early call, a takeover, maintenance or an operator.
OPERATIONS = [
    *["produce_current"] * 10,
    "produce_previous",
    "produce_next",
    "produce_other_id",
    *["produce_plain"] * 2,
    *["add_current"] * 2,
    "add_previous",
    "add_next",
    *["commit_current"] * 3,
    *["abort_current"] * 2,
    *["retry_end"] * 2,
    "end_previous",
    "end_next",
    *["init_plain"] * 2,
    *["init_kip360"] * 2,
    "init_reply_lost",
    "kip360_reply_lost",
    "time_passes",
    "expire_timeouts",
    "expire_idle",
    "operator_abort",
]


class CoordinatorMachine(RuleBasedStateMachine):
    conn: sa.Connection  # set by the test

    def __init__(self) -> None:
        super().__init__()
        tag = f"{next(_examples)}-{uuid.uuid4().hex[:8]}"
        self.topic = f"cm-{tag}"
        self.tid_names = [f"cm-{tag}-{i}" for i in range(TIDS)]
        topics.create_topic(self.conn, name=self.topic, partitions=PARTITIONS)
        self.model = Model()
        self.instances = [[InstanceM(self.tid_names[t]) for _ in range(INSTANCES_PER_TID)] for t in range(TIDS)]
        self.holder = [0] * TIDS  # per id, the instance that last received an identity
        self.known_pids: set[int] = set()
        self.values = itertools.count()

    # helpers

    def _store(self, call: Callable[[], Any]) -> Outcome:
        try:
            return ok(call())
        except errors.OncelogError as exc:
            return ("err", type(exc).__name__)

    def _expect(self, what: str, got: Outcome, expected: Outcome) -> None:
        event(f"{what}: {expected[1] if expected[0] == 'err' else 'ok'}")
        assert got == expected, f"{what}: store {got}, model {expected}"

    def _fresh(self, got: Outcome) -> Callable[[], int]:
        """The model's "a new producer id": the one the store returned, if it was never seen before."""

        def new_pid() -> int:
            if got[0] != "ok":
                return -1
            pid = int(got[1][0])
            if pid in self.known_pids:
                return -2
            self.known_pids.add(pid)
            return pid

        return new_pid

    def _value(self) -> bytes:
        return f"{self.topic}/{next(self.values)}".encode()

    def _init(self, t: int, i: int, *, kip360: bool, lose_reply: bool) -> None:
        inst = self.instances[t][i]
        pid, epoch = inst.ident if (kip360 and inst.ident) else (None, None)
        got = self._store(
            lambda: _ident_tuple(
                txn.init_producer_id(
                    self.conn,
                    transactional_id=inst.tid,
                    transaction_timeout_ms=TIMEOUT_MS,
                    producer_id=pid,
                    epoch=epoch,
                )
            )
        )
        expected = self.model.init(inst.tid, pid, epoch, self._fresh(got))
        self._expect("init" + (" kip360" if pid is not None else ""), got, expected)
        if got[0] == "ok":
            ident = got[1]
            assert ident[1] != TOP_EPOCH, "the epoch reserved for fencing was handed out"
            if not lose_reply:
                inst.ident = (ident[0], ident[1])
                inst.n = ident[2] + 1
                inst.recover = False
                self.holder[t] = i

    def _produce(self, inst: InstanceM, tid: str, n: int, partition: int, what: str) -> Outcome:
        assert inst.ident is not None
        pid, epoch = inst.ident
        value = self._value()
        seq = self.model.next_seq(pid, epoch, partition)
        got = self._store(
            lambda: (
                log.produce(
                    self.conn,
                    topic=self.topic,
                    partition=partition,
                    records=[RecordIn(value=value)],
                    producer_id=pid,
                    producer_epoch=epoch,
                    base_sequence=seq,
                    transactional_id=tid,
                    txn_number=n,
                ).base_offset
            )
        )
        self._expect(what, got, self.model.produce(tid, pid, epoch, n, partition, value))
        return got

    def _add(self, inst: InstanceM, n: int, parts: list[int], what: str) -> Outcome:
        assert inst.ident is not None
        pid, epoch = inst.ident
        got = self._store(
            lambda: txn.add_partitions_to_txn(
                self.conn,
                transactional_id=inst.tid,
                producer_id=pid,
                epoch=epoch,
                txn_number=n,
                partitions=[(self.topic, p) for p in parts],
            )
        )
        self._expect(what, got, self.model.add(inst.tid, pid, epoch, n, parts))
        return got

    def _end(self, inst: InstanceM, n: int, commit: bool, what: str) -> Outcome:
        assert inst.ident is not None
        pid, epoch = inst.ident
        got = self._store(
            lambda: txn.end_txn(
                self.conn, transactional_id=inst.tid, producer_id=pid, epoch=epoch, txn_number=n, commit=commit
            )
        )
        self._expect(f"{what} {'commit' if commit else 'abort'}", got, self.model.end(inst.tid, pid, epoch, n, commit))
        inst.last_end = (n, commit)
        if got[0] == "ok" and got[1] in ("committed", "aborted", "aborted_timed_out") and n == inst.n:
            inst.n += 1
        return got

    # operations: one rule, so that common client actions are drawn more often than rare ones

    @rule(
        op=st.sampled_from(OPERATIONS),
        t=st.integers(0, TIDS - 1),
        zombie=st.sampled_from([False] * 4 + [True]),
        partition=st.integers(0, PARTITIONS - 1),
        parts=st.lists(st.integers(0, PARTITIONS), min_size=1, max_size=3),  # partition PARTITIONS is unknown
        commit=st.booleans(),
    )
    def step(self, op: str, t: int, zombie: bool, partition: int, parts: list[int], commit: bool) -> None:
        # Usually the instance holding the id's newest identity; sometimes the other one, a zombie
        # still holding an older identity (if it ever had one).
        # An init drawn for the other instance is a takeover by it (a new instance, or an old one).
        i = self.holder[t]
        other = (i + 1) % INSTANCES_PER_TID
        if zombie and (self.instances[t][other].ident is not None or op.startswith("init")):
            i = other
        inst = self.instances[t][i]
        acting_holder = i == self.holder[t]
        tid = self.tid_names[t]
        got: Outcome | None = None
        if op in ("init_plain", "init_reply_lost"):
            self._init(t, i, kip360=False, lose_reply=op == "init_reply_lost")
        elif op in ("init_kip360", "kip360_reply_lost") or (inst.recover and acting_holder):
            self._init(t, i, kip360=True, lose_reply=op == "kip360_reply_lost")
        elif inst.ident is None and op not in ("time_passes", "expire_timeouts", "expire_idle", "operator_abort"):
            self._init(t, i, kip360=False, lose_reply=False)  # a new instance starts
        elif op.startswith("produce_") and op != "produce_plain":
            n = {"produce_previous": inst.n - 1, "produce_next": inst.n + 1}.get(op, inst.n)
            target = self.tid_names[(t + 1) % TIDS] if op == "produce_other_id" else tid
            got = self._produce(inst, target, n, partition, op.replace("_", " "))
        elif op == "produce_plain":
            got = self._produce_plain(inst, partition)
        elif op.startswith("add_"):
            n = {"add_previous": inst.n - 1, "add_next": inst.n + 1}.get(op, inst.n)
            got = self._add(inst, n, parts, op.replace("_", " "))
        elif op in ("commit_current", "abort_current"):
            got = self._end(inst, inst.n, op == "commit_current", "end current")
        elif op == "retry_end":
            n, was_commit = inst.last_end or (inst.n - 1, commit)
            got = self._end(inst, n, was_commit, "end retried")
        elif op == "end_previous":
            got = self._end(inst, inst.n - 1, commit, "end previous")
        elif op == "end_next":
            got = self._end(inst, inst.n + 1, commit, "end next")
        elif op == "time_passes":
            self._time_passes(tid)
        elif op in ("expire_timeouts", "expire_idle"):
            self._expire(idle=op == "expire_idle")
        elif op == "operator_abort":
            got = self._store(lambda: txn.abort_transaction(self.conn, transactional_id=tid))
            self._expect("operator abort", got, self.model.abort_transaction(tid))
            got = None  # not the instance's own call
        else:  # pragma: no cover
            raise AssertionError(op)
        if got is not None and got[0] == "err" and acting_holder and op != "produce_other_id":
            # The holder reacts as a client library would: a fatal error ends the instance (the
            # application starts a new one); an abortable one is followed by a KIP-360 re-init.
            if got[1] in (errors.ProducerFencedError.__name__, errors.InvalidProducerIdMappingError.__name__):
                # The fenced instance keeps its identity (it may come back as a zombie); a new
                # instance takes the other slot and initialises on its next operation.
                self.holder[t] = other
                self.instances[t][other] = InstanceM(tid)
            elif got[1] in (errors.InvalidProducerEpochError.__name__, errors.TransactionTimeoutError.__name__):
                inst.recover = True

    def _produce_plain(self, inst: InstanceM, partition: int) -> Outcome:
        """An idempotent write outside any transaction with the instance's producer id (rule 6)."""
        assert inst.ident is not None
        pid, epoch = inst.ident
        value = self._value()
        seq = self.model.next_seq(pid, epoch, partition)
        got = self._store(
            lambda: (
                log.produce(
                    self.conn,
                    topic=self.topic,
                    partition=partition,
                    records=[RecordIn(value=value)],
                    producer_id=pid,
                    producer_epoch=epoch,
                    base_sequence=seq,
                ).base_offset
            )
        )
        self._expect("produce plain", got, self.model.produce_plain(pid, epoch, partition, value))
        return got

    def _expire(self, idle: bool) -> None:
        """Maintenance at a future ``now`` (test setup standing in for time passing): an hour on, every
        open transaction is past its timeout; eight days on, every idle id is past its expiration."""
        now = self.conn.exec_driver_sql("SELECT clock_timestamp()").scalar_one()
        later = now + (timedelta(days=8) if idle else timedelta(hours=1))
        with server_time(self.conn, later):
            got = self._store(lambda: txn.expire_transactions(self.conn))
        self._expect(f"expire {'idle' if idle else 'timeouts'}", got, self.model.expire(idle))

    def _time_passes(self, tid: str) -> None:
        """Setup by SQL standing in for two hours: the open transaction of this id (if any) started
        two hours earlier, so it is past its timeout."""
        moved = self.conn.exec_driver_sql(
            "UPDATE transactions SET txn_started_at = txn_started_at - interval '2 hours' "
            "WHERE transactional_id = %(t)s AND state = 'Ongoing'",
            {"t": tid},
        ).rowcount
        m = self.model.tids.get(tid)
        assert moved == (1 if m is not None and m.state == "Ongoing" else 0)
        if m is not None and moved:
            m.timed_out = True
            m.moved_back += 1
        event(f"time passes: {'timed out' if moved else 'nothing open'}")

    # invariants

    @invariant()
    def coordinator_state_matches(self) -> None:
        rows = self.conn.exec_driver_sql(
            "SELECT transactional_id, state, producer_id, producer_epoch, txn_number, partitions, expired "
            "FROM transaction_status WHERE transactional_id = ANY(%(t)s) ORDER BY transactional_id",
            {"t": self.tid_names},
        ).all()
        got = {r[0]: (r[1], int(r[2]), int(r[3]), int(r[4]), list(r[5]), bool(r[6])) for r in rows}
        expected = {}
        for tid, t in self.model.tids.items():
            parts = [f"{self.topic}-{p}@{'-' if f is None else f}" for p, f in sorted(t.parts.items())]
            expected[tid] = (t.state, t.pid, self.model.producers[t.pid].epoch, t.txn, parts, t.timed_out)
        assert got == expected

    @invariant()
    def history_matches(self) -> None:
        rows = self.conn.exec_driver_sql(
            "SELECT transactional_id, from_state, to_state, producer_id, producer_epoch, txn_number "
            "FROM txn_history WHERE transactional_id = ANY(%(t)s) ORDER BY id",
            {"t": self.tid_names},
        ).all()
        got: dict[str, list[tuple[Any, ...]]] = {}
        for r in rows:
            got.setdefault(r[0], []).append(tuple(r[1:]))
        assert got == {tid: t.history for tid, t in self.model.tids.items()}

    @invariant()
    def log_matches(self) -> None:
        rows = self.conn.exec_driver_sql(
            'SELECT r.partition, r."offset", r.value, r.control_type, r.producer_id, r.producer_epoch, '
            "r.is_transactional, r.aborted FROM records r JOIN topics t USING (topic_id) WHERE t.name = %(t)s "
            'ORDER BY r.partition, r."offset"',
            {"t": self.topic},
        ).all()
        got = [tuple(r) for r in rows]
        expected = [
            (p, o, e.value, e.control, e.pid, e.epoch, e.control is not None or e.txn is not None, e.aborted)
            for p in range(PARTITIONS)
            for o, e in enumerate(self.model.logs[p])
        ]
        assert got == expected

    @invariant()
    def spans_match(self) -> None:
        """txn_spans (migration 0014): each committed transaction's first and last record per partition."""
        rows = self.conn.exec_driver_sql(
            "SELECT s.producer_id, s.txn_number, s.partition, s.first_offset, s.last_offset "
            "FROM txn_spans s JOIN topics t USING (topic_id) WHERE t.name = %(t)s",
            {"t": self.topic},
        ).all()
        got = {(r[0], r[1], r[2]): (r[3], r[4]) for r in rows}
        open_txns = {(tid, t.txn) for tid, t in self.model.tids.items() if t.state == "Ongoing"}
        expected: dict[tuple[int, int, int], tuple[int, int]] = {}
        for p in range(PARTITIONS):
            for o, e in enumerate(self.model.logs[p]):
                if e.txn is None or e.aborted or e.txn in open_txns:
                    continue
                first, last = expected.get((e.pid, e.txn[1], p), (o, o))
                expected[(e.pid, e.txn[1], p)] = (min(first, o), max(last, o))
        assert got == expected

    @invariant()
    def readers_match(self) -> None:
        positions = {(self.topic, p): 0 for p in range(PARTITIONS)}
        committed = log.fetch_many(self.conn, positions, max_records=10_000, read_committed=True)
        uncommitted = log.fetch_many(self.conn, positions, max_records=10_000, read_committed=False)
        view: dict[int, int] = dict(
            self.conn.exec_driver_sql(
                "SELECT partition, last_stable_offset FROM partition_offsets WHERE topic = %(t)s", {"t": self.topic}
            ).all()
        )
        for p in range(PARTITIONS):
            c, u = committed[(self.topic, p)], uncommitted[(self.topic, p)]
            assert c.last_stable_offset == u.last_stable_offset == view[p] == self.model.lso(p), p
            assert c.high_watermark == len(self.model.logs[p])
            assert [r.value for r in c.records] == self.model.read(p, committed=True), p
            assert [r.value for r in u.records] == self.model.read(p, committed=False), p

    def teardown(self) -> None:
        # Abort and expire whatever this example left, so that later examples' maintenance calls
        # (which act on the whole database) count only their own transactions.
        now = self.conn.exec_driver_sql("SELECT clock_timestamp()").scalar_one()
        with server_time(self.conn, now + timedelta(days=30)):
            txn.expire_transactions(self.conn)


def _ident_tuple(ident: txn.TransactionalIdentity) -> tuple[int, int, int]:
    return (ident.producer_id, ident.epoch, ident.txn_number)


def test_coordinator_matches_the_model(conn: sa.Connection) -> None:
    class Machine(CoordinatorMachine):
        pass

    Machine.conn = conn
    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )


def test_a_transaction_time_moved_back_is_the_oldest_one_expiry_aborts(
    conn: sa.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the machine above (CI, 2026-11-28): id 0 opens a transaction, then id 1 does and
    "time passes" moves id 1's start two hours back. The store aborts id 1's first (the oldest by
    its start); the model used to abort in the order the transactions opened."""

    class Machine(CoordinatorMachine):
        pass

    Machine.conn = conn
    monkeypatch.setattr(sys.modules[__name__], "event", lambda *_: None)  # outside hypothesis' run
    machine = Machine()
    try:
        steps = [(0, "produce_current"), (0, "produce_current"), (1, "produce_current"), (1, "produce_current")]
        for t, op in [*steps, (1, "time_passes"), (0, "expire_timeouts")]:
            machine.step(commit=False, op=op, partition=0, parts=[0], t=t, zombie=False)
            machine.log_matches()
            machine.coordinator_state_matches()
    finally:
        machine.teardown()
