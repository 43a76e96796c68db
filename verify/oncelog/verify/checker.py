"""The checker of ``oncelog verify``: judges a :class:`~oncelog.verify.history.History` against the log.

Ground truth is the ``final`` op's ``log``: what every topic finally holds. Each record of it has a
*status*:

* ``control``: a commit or abort marker.
* ``aborted``: a data record flagged aborted (the flag is what read_committed filters on).
* ``undecided``: a transactional data record not flagged aborted that has no control record of its
  producer after it in its partition (its transaction was still open when the log was read). This
  status is only used when every control record and every transactional record of the final log
  carries its ``producer_id``; otherwise no record is undecided.
* ``committed``: any other data record (non-transactional, or of a committed transaction).

The anomaly kinds, precisely (``rc`` stands for a read_committed read: a ``poll`` whose
``isolation`` is ``read_committed`` or unset, the Consumer's default, and the ``reads`` of a
``copy``, whose consumer reads committed data unless its ``isolation`` says otherwise):

``lost_write``
    An acknowledged write (a write of a ``send``, ``txn`` or ``copy`` ended ``ok``, or a ``send``'s
    write recorded with its offset whatever the op's outcome) whose payload is not a committed
    record of the write's partition; any write recorded with an offset (also in a ``txn`` or
    ``copy`` that failed or whose outcome is unknown) where the final log holds something else at
    that offset; or a record returned by a read (any isolation) at an offset where the final log
    holds another payload or nothing (what a reader saw has vanished).
``duplicate``
    A payload held by more than one committed record of the final log (for copies: an input
    record copied twice); or one rc reader process that was returned the same payload at two
    different positions.
``aborted_read``
    An rc read returned a record that is aborted in the final log, or that a ``txn``/``copy``
    ended ``fail`` (aborted) certainly wrote; or a record a ``txn``/``copy`` ended ``fail``
    certainly wrote is committed in the final log (the final read is a read_committed read too).
    An op *certainly wrote* a record when the record sits at the offset the op's write was
    acknowledged at, or holds a payload written by that op alone that is not a copy (a copier
    rewrites a copy after an abort, and an op killed mid-way records no writes).
``undecided_read``
    An rc read returned a record that a ``txn``/``copy`` certainly wrote although that operation
    was invoked only after the read had completed (history order is real-time order: its
    transaction cannot have been decided, nor even begun); or a record that is still
    ``undecided`` in the final log.
``partial_txn``
    A transaction (the committed records one ``txn``/``copy`` op certainly wrote, see below)
    of which an rc ``poll`` reader process was returned records on some partitions, while on
    another partition its polls passed over (``positions``) a record of it without returning any
    record of the transaction there.
``offset_gap``
    A ``poll`` reader (one process name) skipped an offset it may not skip: within one poll's
    ``[before, after)`` range, or between one poll's ``after`` and its next poll's ``before`` on a
    partition, an offset that was not returned and is not skippable. read_committed may skip
    control and aborted records only, read_uncommitted control records only; an offset absent
    from the final log is never skippable.
``non_monotonic``
    A ``poll`` reader's partition position moved backwards (a poll's ``after`` below its
    ``before``, or a ``before`` below the previous poll's ``after``), or it was returned an offset
    not above every offset it had been returned on that partition, or outside the poll's
    ``[before, after)``.
``order_violation``
    Two records of one producer process (payload ``"<process>:<counter>"``, counter an integer) in
    one partition whose offset order contradicts their counters (the order they were sent).
    Judged over every data record that landed (aborted and undecided too), first occurrence of a
    payload only; copies (``"copy:"`` payloads) are judged by ``copy_mismatch`` instead.
``copy_mismatch``
    A committed copy (``"copy:" + X``) whose input X is not a committed record of the final log;
    a committed copy whose input record lies at or above the group's final committed offset of
    its input partition (the output committed without its offset); or two committed copies in one
    output partition whose order contradicts their inputs' order in one input partition.
``offsets_without_output``
    An input partition (one a ``copy`` op read from or committed an offset for) whose committed
    offset (of a ``copy`` ended ``ok``, or the final ``offsets``) passed a committed input record
    that has no committed copy anywhere in the final log.
``malformed_history``
    What the checker cannot judge: no ``final`` op (then nothing else is checked), several of
    them, a completion without an invoke, a ``poll`` that returned a record of a partition missing
    from its ``positions``, a final log with two entries at one offset or a data entry without a
    payload, ``copy`` ops acknowledged while the final op carries no group offsets.

What the history must hold for these to be sound (the runner's side of the contract): unique
payloads; one producer instance per process name, whose counters follow the order of its sends
per partition; a ``poll`` process that only moves by polling (a seek, a re-assignment or a restart
takes a new process name); ``fail`` only for operations definitely not applied (a transaction
definitely aborted); one copier group per input topic; no retention during the run. Operations of
other functions (a nemesis' faults) are counted and otherwise ignored.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from oncelog.verify.history import History, LogEntry, Op, OpType, Read, Write, tp_key

__all__ = [
    "KINDS",
    "Anomaly",
    "RecordRef",
    "Verdict",
    "check",
    "render_verdict",
    "verdict_from_json",
    "verdict_to_json",
]

KINDS: tuple[str, ...] = (
    "lost_write",
    "duplicate",
    "aborted_read",
    "undecided_read",
    "partial_txn",
    "offset_gap",
    "non_monotonic",
    "order_violation",
    "copy_mismatch",
    "offsets_without_output",
    "malformed_history",
)
"""Every anomaly kind, in the order verdicts list them."""

COPY_PREFIX = "copy:"
CLIENT_FUNCTIONS = frozenset({"send", "txn", "copy", "poll"})
TRANSACTIONAL_FUNCTIONS = frozenset({"txn", "copy"})
WRITE_FUNCTIONS = frozenset({"send", "txn", "copy"})
MAX_REFS = 50
"""Records named per anomaly at most (the message says how many more there were)."""

COMMITTED = "committed"
ABORTED = "aborted"
UNDECIDED = "undecided"
CONTROL = "control"

_TP = tuple[str, int]
_Pos = tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class RecordRef:
    """One offending record or operation: any of payload, partition and offset, history index."""

    payload: str | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    op: int | None = None
    """Index in the history of the entry that shows it (a completion, else the invoke)."""

    def __str__(self) -> str:
        parts: list[str] = []
        if self.payload is not None:
            parts.append(repr(self.payload))
        if self.topic is not None:
            where = f"{self.topic}/{self.partition}"
            parts.append(f"at {where}@{self.offset}" if self.offset is not None else f"in {where}")
        if self.op is not None:
            parts.append(f"(op {self.op})")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One violation of the exactly-once promise (or a history that cannot be judged)."""

    kind: str
    """One of :data:`KINDS`."""
    message: str
    records: tuple[RecordRef, ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    """The checker's judgement: the anomalies found (none means valid) and counts of what was seen.

    ``summary`` keys: ``ops`` and ``ops.<f>.<type>`` (history entries), ``writes.attempted`` and
    ``writes.acked`` (distinct payloads), ``sends.acked|fail|info``, ``txns.committed|aborted|unknown``
    (``txn`` and ``copy`` ops by outcome; ``txns.unknown.landed|absent``), ``log.records`` (data
    records of the final log) and ``log.committed|aborted|undecided|control``, ``polls.ok``,
    ``reads.read_committed|read_uncommitted|copy`` (records returned), ``copies.committed``,
    ``anomalies``. Those are always present; ``summary`` is a :class:`~collections.Counter`, so
    any other key (an ``ops.<f>.<type>`` that never happened) reads as 0.
    """

    anomalies: tuple[Anomaly, ...]
    summary: Mapping[str, int]

    @property
    def ok(self) -> bool:
        """True when no anomaly was found."""
        return not self.anomalies

    def by_kind(self) -> dict[str, list[Anomaly]]:
        """The anomalies grouped by kind, kinds in :data:`KINDS` order (only those present)."""
        groups: dict[str, list[Anomaly]] = {}
        for anomaly in self.anomalies:
            groups.setdefault(anomaly.kind, []).append(anomaly)
        return {k: groups[k] for k in sorted(groups, key=_kind_rank)}


def _kind_rank(kind: str) -> int:
    return KINDS.index(kind) if kind in KINDS else len(KINDS)


# --- the operations of the history ------------------------------------------------------------


@dataclass(eq=False)  # identity: two outstanding invokes may hold equal values
class _Operation:
    """One client operation: its invoke and completion entries paired."""

    process: str
    f: str
    invoke: int | None
    done: int | None = None
    outcome: OpType = OpType.INFO
    txn: str | None = None
    writes: list[Write] = field(default_factory=list)
    reads: tuple[Read, ...] = ()
    offsets: Mapping[str, int] = field(default_factory=dict)
    positions: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    isolation: str | None = None

    @property
    def start(self) -> int:
        """History index of the invoke (of the completion, for an op recorded without one)."""
        return self.invoke if self.invoke is not None else self.done if self.done is not None else -1

    @property
    def index(self) -> int:
        """The index that names the op: its completion, else its invoke."""
        return self.done if self.done is not None else self.start

    @property
    def read_committed(self) -> bool:
        """Whether its reads are read_committed (the Consumer's default)."""
        return self.isolation != "read_uncommitted"

    def name(self) -> str:
        """How messages name it."""
        label = f"{self.f} op {self.index} of {self.process!r}"
        return f"{label} (txn {self.txn})" if self.txn else label

    def complete(self, op: Op) -> None:
        """Take the completion entry's outcome and values (writes merge, acknowledged offsets win)."""
        self.done = op.index
        self.outcome = op.type
        self.txn = self.txn or op.txn
        merged = {w.payload: w for w in self.writes}
        for w in op.writes:
            prior = merged.get(w.payload)
            merged[w.payload] = prior if prior is not None and prior.offset is not None and w.offset is None else w
        self.writes = list(merged.values())
        self.reads = op.reads or self.reads
        self.offsets = op.offsets or self.offsets
        self.positions = op.positions or self.positions
        self.isolation = op.isolation or self.isolation


def _new_operation(op: Op) -> _Operation:
    return _Operation(
        process=op.process,
        f=op.f,
        invoke=op.index if op.type is OpType.INVOKE else None,
        txn=op.txn,
        writes=list(op.writes),
        reads=op.reads,
        offsets=op.offsets,
        positions=op.positions,
        isolation=op.isolation,
    )


def _pair(history: Sequence[Op], anomalies: list[Anomaly]) -> list[_Operation]:
    """Pair each completion with its invoke. A process may have several operations outstanding
    (asynchronous sends), so a completion takes the outstanding invoke of its process and function
    with the same txn, else the same payloads, else overlapping ones, else the latest (a restarted
    process that kept its name abandons its earlier invokes, which stay unknown)."""
    operations: list[_Operation] = []
    outstanding: dict[tuple[str, str], list[_Operation]] = defaultdict(list)
    for op in history:
        if op.f not in CLIENT_FUNCTIONS:
            continue
        key = (op.process, op.f)
        if op.type is OpType.INVOKE:
            operation = _new_operation(op)
            outstanding[key].append(operation)
            operations.append(operation)
            continue
        candidates = outstanding[key]
        if not candidates:
            anomalies.append(
                Anomaly(
                    "malformed_history",
                    f"{op.type} of {op.f} by {op.process!r} at index {op.index} has no invoke",
                    (RecordRef(op=op.index),),
                )
            )
            continue
        chosen = _choose(candidates, op)
        candidates.remove(chosen)
        chosen.complete(op)
    return operations


def _choose(candidates: list[_Operation], op: Op) -> _Operation:
    if op.txn is not None:
        for c in candidates:
            if c.txn == op.txn:
                return c
    payloads = {w.payload for w in op.writes}
    if payloads:
        for c in candidates:
            if {w.payload for w in c.writes} == payloads:
                return c
        for c in candidates:
            if payloads & {w.payload for w in c.writes}:
                return c
    return candidates[-1]


# --- the final log --------------------------------------------------------------------------------


class _Log:
    """The final log indexed by position and by payload, with each record's status."""

    def __init__(self, entries: Iterable[LogEntry], anomalies: list[Anomaly], final_index: int) -> None:
        self.entries: dict[_Pos, LogEntry] = {}
        for e in entries:
            pos = (e.topic, e.partition, e.offset)
            if pos in self.entries:
                anomalies.append(
                    Anomaly(
                        "malformed_history",
                        f"the final log holds two entries at {e.topic}/{e.partition}@{e.offset}",
                        (RecordRef(e.payload, e.topic, e.partition, e.offset, final_index),),
                    )
                )
                continue
            if e.control is None and e.payload is None:
                anomalies.append(
                    Anomaly(
                        "malformed_history",
                        f"the final log's data entry at {e.topic}/{e.partition}@{e.offset} has no payload",
                        (RecordRef(None, e.topic, e.partition, e.offset, final_index),),
                    )
                )
                continue
            self.entries[pos] = e
        self.offsets: dict[_TP, list[int]] = defaultdict(list)
        for topic, partition, offset in sorted(self.entries):
            self.offsets[(topic, partition)].append(offset)
        self.status: dict[_Pos, str] = {}
        self._classify()
        self.by_payload: dict[str, list[_Pos]] = defaultdict(list)
        for pos in sorted(self.entries):
            e = self.entries[pos]
            if e.control is None and e.payload is not None:
                self.by_payload[e.payload].append(pos)

    def _classify(self) -> None:
        # Open transactions can be told only by their missing marker, which needs producer ids on
        # both sides; without them nothing is called undecided (no false positive on a runner
        # that leaves producer_id out).
        markers_known = any(e.control is not None for e in self.entries.values()) and all(
            e.producer_id is not None for e in self.entries.values() if e.control is not None or e.transactional
        )
        for (topic, partition), offsets in self.offsets.items():
            later_marker: set[int] = set()  # producers with a marker after the current offset
            for offset in reversed(offsets):
                pos = (topic, partition, offset)
                e = self.entries[pos]
                if e.control is not None:
                    self.status[pos] = CONTROL
                    if e.producer_id is not None:
                        later_marker.add(e.producer_id)
                elif e.aborted:
                    self.status[pos] = ABORTED
                elif e.transactional and markers_known and e.producer_id not in later_marker:
                    self.status[pos] = UNDECIDED
                else:
                    self.status[pos] = COMMITTED

    def committed(self, payload: str) -> list[_Pos]:
        """Positions of the committed records holding ``payload``."""
        return [p for p in self.by_payload.get(payload, ()) if self.status[p] == COMMITTED]

    def payload_at(self, pos: _Pos) -> str | None:
        """The payload of the data record at ``pos`` (None for a marker or nothing)."""
        e = self.entries.get(pos)
        return None if e is None else e.payload

    def skippable(self, pos: _Pos, read_committed: bool) -> bool:
        """Whether a reader may pass ``pos`` without returning it."""
        status = self.status.get(pos)
        return status == CONTROL or (read_committed and status == ABORTED)

    def unskippable(self, tp: _TP, span: tuple[int, int], read_committed: bool, returned: set[int]) -> list[int]:
        """Offsets in the ``[start, end)`` span neither returned nor skippable (absent ones included)."""
        start, end = span
        out: list[int] = []
        offsets = self.offsets.get(tp, [])
        expected = start
        for offset in offsets[bisect.bisect_left(offsets, start) : bisect.bisect_left(offsets, end)]:
            # Offsets missing from the final log are gaps too; list at most MAX_REFS + 1 of them.
            while expected < offset and len(out) <= MAX_REFS:
                out.append(expected)
                expected += 1
            expected = offset + 1
            if offset not in returned and not self.skippable((tp[0], tp[1], offset), read_committed):
                out.append(offset)
        while expected < end and len(out) <= MAX_REFS:
            out.append(expected)
            expected += 1
        return out


class _Coverage:
    """The ``[before, after)`` spans one reader's polls passed over on one partition, searchable by
    bisection (a long run has many polls and many transactions to look up)."""

    def __init__(self, spans: Iterable[tuple[int, int, int]]) -> None:
        self.spans = sorted(spans)  # (before, after, poll index)
        self.starts = [span[0] for span in self.spans]
        self.max_end = list(itertools.accumulate((span[1] for span in self.spans), max))

    def poll_covering(self, offset: int) -> int | None:
        """The index of a poll whose span holds ``offset``, if any."""
        i = bisect.bisect_right(self.starts, offset) - 1
        # Spans of a correct reader do not overlap; after a position moved back they may, so
        # walk back while an earlier span could still reach the offset.
        while i >= 0 and self.max_end[i] > offset:
            before, after, poll = self.spans[i]
            if before <= offset < after:
                return poll
            i -= 1
        return None


# --- the checker ------------------------------------------------------------------------------


def check(history: History | Iterable[Op]) -> Verdict:
    """Judge ``history`` (see the module docstring for each anomaly kind's exact rule).

    The entries' order is taken as real-time order (as :func:`~oncelog.verify.history.load_history`
    sorts them), and each entry is named by its position in it (its ``index`` is reset to that, so
    histories merged from several processes' files without re-indexing are judged the same).
    """
    ops = [op if op.index == i else replace(op, index=i) for i, op in enumerate(history)]
    anomalies: list[Anomaly] = []
    summary: Counter[str] = Counter()
    summary["ops"] = len(ops)
    for op in ops:
        summary[f"ops.{op.f}.{op.type}"] += 1
    finals = [op for op in ops if op.f == "final" and op.type is OpType.OK]
    if not finals:
        anomalies.append(Anomaly("malformed_history", "the history has no final op (ok): nothing to judge by"))
        return _verdict(anomalies, summary)
    if len(finals) > 1:
        anomalies.append(
            Anomaly(
                "malformed_history",
                f"the history has {len(finals)} final ops; the last one is the ground truth",
                tuple(RecordRef(op=op.index) for op in finals),
            )
        )
    final = finals[-1]
    operations = _pair(ops, anomalies)
    log = _Log(final.log, anomalies, final.index)
    _Checker(operations, log, final, anomalies, summary).run()
    return _verdict(anomalies, summary)


SUMMARY_KEYS = (
    "writes.attempted",
    "writes.acked",
    "sends.acked",
    "sends.fail",
    "sends.info",
    "txns.committed",
    "txns.aborted",
    "txns.unknown",
    "txns.unknown.landed",
    "txns.unknown.absent",
    "log.records",
    "log.committed",
    "log.aborted",
    "log.undecided",
    "log.control",
    "polls.ok",
    "reads.read_committed",
    "reads.read_uncommitted",
    "reads.copy",
    "copies.committed",
    "ops",
    "anomalies",
)
SUMMARY_ORDER = ("writes", "sends", "txns", "log", "polls", "reads", "copies", "ops", "anomalies")


def _summary_rank(key: str) -> tuple[int, str]:
    head = key.partition(".")[0]
    return (SUMMARY_ORDER.index(head) if head in SUMMARY_ORDER else len(SUMMARY_ORDER), key)


def _verdict(anomalies: list[Anomaly], summary: Counter[str]) -> Verdict:
    ordered = sorted(anomalies, key=lambda a: _kind_rank(a.kind))  # stable: discovery order within a kind
    summary["anomalies"] = len(ordered)
    for key in SUMMARY_KEYS:
        summary[key] += 0  # present even when zero
    return Verdict(tuple(ordered), Counter({k: summary[k] for k in sorted(summary, key=_summary_rank)}))


def _held(entry: LogEntry) -> str:
    return f"a {entry.control} marker" if entry.control else repr(entry.payload)


def _refs(refs: Iterable[RecordRef]) -> tuple[RecordRef, ...]:
    return tuple(refs)[:MAX_REFS]


def _split_key(key: str) -> _TP:
    topic, _, partition = key.rpartition("/")
    # A key that names no partition matches nothing (rather than stopping the whole check).
    return (topic, int(partition)) if partition.lstrip("-").isdigit() else (key, -1)


def _list(refs: Sequence[RecordRef], limit: int = 5) -> str:
    shown = ", ".join(str(r) for r in refs[:limit])
    return shown + (f" and {len(refs) - limit} more" if len(refs) > limit else "")


class _Checker:
    """One run of every rule over paired operations and the indexed final log."""

    def __init__(
        self,
        operations: list[_Operation],
        log: _Log,
        final: Op,
        anomalies: list[Anomaly],
        summary: Counter[str],
    ) -> None:
        self.operations = operations
        self.log = log
        self.final = final
        self.anomalies = anomalies
        self.summary = summary
        self.writers: dict[str, list[_Operation]] = defaultdict(list)
        for operation in operations:
            if operation.f in WRITE_FUNCTIONS:
                for w in operation.writes:
                    self.writers[w.payload].append(operation)
        # Acknowledged positions of transactional writes -> their op and payload.
        self.acknowledged: dict[_Pos, tuple[_Operation, str]] = {
            (w.topic, w.partition, w.offset): (operation, w.payload)
            for operation in operations
            if operation.f in TRANSACTIONAL_FUNCTIONS
            for w in operation.writes
            if w.offset is not None
        }
        self.polls = sorted((o for o in operations if o.f == "poll" and o.outcome is OpType.OK), key=lambda o: o.index)
        self.copies = [o for o in operations if o.f == "copy"]
        # Per (poll process, "topic/partition"): the last position after, the last offset returned,
        # each with the index of its poll.
        self.last_after: dict[tuple[str, str], tuple[int, int]] = {}
        self.last_read: dict[tuple[str, str], tuple[int, int]] = {}

    def add(self, kind: str, message: str, refs: Iterable[RecordRef] = ()) -> None:
        """Record one anomaly."""
        self.anomalies.append(Anomaly(kind, message, _refs(refs)))

    def ref(self, pos: _Pos, op: int | None = None, payload: str | None = None) -> RecordRef:
        """A reference to a position of the final log."""
        return RecordRef(payload if payload is not None else self.log.payload_at(pos), pos[0], pos[1], pos[2], op)

    def unique(self, payload: str) -> bool:
        """Whether ``payload`` can be followed to one writer: written by one recorded op, and not a
        copy (a copier rewrites a copy after an abort, and an op killed mid-way records no writes)."""
        return not payload.startswith(COPY_PREFIX) and len(self.writers.get(payload, ())) == 1

    def positions_of(self, operation: _Operation) -> list[_Pos]:
        """The final log's records that certainly are ``operation``'s writes (any status): at the
        offset it was acknowledged at, else by a :meth:`unique` payload in the write's partition."""
        out: list[_Pos] = []
        for w in operation.writes:
            if w.offset is not None:
                pos = (w.topic, w.partition, w.offset)
                if self.log.payload_at(pos) == w.payload:
                    out.append(pos)
            elif self.unique(w.payload):
                out += [p for p in self.log.by_payload.get(w.payload, ()) if (p[0], p[1]) == (w.topic, w.partition)]
        return out

    def committed_writes(self, operation: _Operation) -> list[_Pos]:
        """The committed records among :meth:`positions_of`."""
        return [p for p in self.positions_of(operation) if self.log.status[p] == COMMITTED]

    def owner(self, pos: _Pos, payload: str) -> _Operation | None:
        """The ``txn``/``copy`` op that certainly wrote ``payload`` at ``pos``, if the history says."""
        acknowledged = self.acknowledged.get(pos)
        if acknowledged is not None and acknowledged[1] == payload:
            return acknowledged[0]
        if self.unique(payload):
            (writer,) = self.writers[payload]
            if writer.f in TRANSACTIONAL_FUNCTIONS and any(
                (w.topic, w.partition) == (pos[0], pos[1]) for w in writer.writes if w.payload == payload
            ):
                return writer
        return None

    def run(self) -> None:
        """Every rule, then the summary counts."""
        self.lost_writes()
        self.vanished_reads()
        self.duplicates()
        self.rc_reads()
        self.failed_but_committed()
        self.readers()
        self.partial_txns()
        self.order()
        self.copy_rules()
        self.count()

    # lost_write ------------------------------------------------------------------------------

    def lost_writes(self) -> None:
        """Acknowledged writes must be committed in their partition, at their acknowledged offset."""
        for operation in self.operations:
            if operation.f not in WRITE_FUNCTIONS:
                continue
            for w in operation.writes:
                if operation.outcome is not OpType.OK and w.offset is None:
                    continue
                # A record acknowledged with an offset is in the log whatever became of its op; it
                # is committed too if it was not part of a transaction that may have aborted.
                must_commit = operation.outcome is OpType.OK or operation.f == "send"
                committed = [p for p in self.log.committed(w.payload) if (p[0], p[1]) == (w.topic, w.partition)]
                problems: list[str] = []
                refs = [RecordRef(w.payload, w.topic, w.partition, w.offset, operation.index)]
                if must_commit and not committed:
                    elsewhere = self.log.by_payload.get(w.payload, [])
                    if not elsewhere:
                        problems.append("is absent from the final log")
                    else:
                        states = ", ".join(f"{self.log.status[p]} at {p[0]}/{p[1]}@{p[2]}" for p in elsewhere)
                        problems.append(f"is not committed in {w.topic}/{w.partition} (final log: {states})")
                        refs += [self.ref(p) for p in elsewhere]
                if w.offset is not None:
                    pos = (w.topic, w.partition, w.offset)
                    there = self.log.entries.get(pos)
                    # (An absent payload with nothing at its offset needs no second clause.)
                    if there is not None and there.payload != w.payload:
                        problems.append(
                            f"was acknowledged at offset {w.offset}, where the final log holds {_held(there)}"
                        )
                        refs.append(self.ref(pos))
                    elif there is None and (committed or not must_commit):
                        problems.append(f"was acknowledged at offset {w.offset}, where the final log holds nothing")
                if problems:
                    where = f"{w.topic}/{w.partition}" + (f"@{w.offset}" if w.offset is not None else "")
                    self.add(
                        "lost_write",
                        f"acknowledged write {w.payload!r} ({where}) of {operation.name()} " + " and ".join(problems),
                        refs,
                    )

    def vanished_reads(self) -> None:
        """What a reader was returned must still be in the final log, at the same offset."""
        for operation in self.operations:
            if operation.f not in ("poll", "copy") or operation.done is None:
                continue
            for r in operation.reads:
                pos = (r.topic, r.partition, r.offset)
                there = self.log.entries.get(pos)
                if there is None or there.payload != r.payload:
                    held = "nothing" if there is None else _held(there)
                    self.add(
                        "lost_write",
                        f"{operation.name()} returned {r.payload!r} at {r.topic}/{r.partition}@{r.offset}, "
                        f"where the final log holds {held}",
                        [RecordRef(r.payload, r.topic, r.partition, r.offset, operation.index)],
                    )

    # duplicate -------------------------------------------------------------------------------

    def duplicates(self) -> None:
        """A payload committed twice in the final log, or returned twice to one read_committed reader."""
        twice: set[str] = set()
        for payload, positions in self.log.by_payload.items():
            committed = [p for p in positions if self.log.status[p] == COMMITTED]
            if len(committed) > 1:
                twice.add(payload)
                where = ", ".join(f"{p[0]}/{p[1]}@{p[2]}" for p in committed)
                self.add(
                    "duplicate",
                    f"{payload!r} is committed {len(committed)} times in the final log: {where}",
                    [self.ref(p) for p in committed],
                )
        seen: dict[tuple[str, str], dict[_Pos, int]] = defaultdict(dict)
        for poll in self.polls:
            if poll.read_committed:
                for r in poll.reads:
                    seen[(poll.process, r.payload)].setdefault((r.topic, r.partition, r.offset), poll.index)
        for (process, payload), where_seen in seen.items():
            if len(where_seen) > 1 and payload not in twice:
                refs = [RecordRef(payload, q[0], q[1], q[2], op) for q, op in where_seen.items()]
                self.add(
                    "duplicate",
                    f"reader {process!r} was returned {payload!r} at {len(where_seen)} positions: {_list(refs)}",
                    refs,
                )

    # aborted_read and undecided_read ---------------------------------------------------------

    def rc_reads(self) -> None:
        """Every read_committed read: never aborted data, never data not yet decided."""
        for operation in self.operations:
            if operation.f not in ("poll", "copy") or operation.done is None or not operation.read_committed:
                continue
            for r in operation.reads:
                pos = (r.topic, r.partition, r.offset)
                ref = RecordRef(r.payload, r.topic, r.partition, r.offset, operation.index)
                status = self.log.status.get(pos) if self.log.payload_at(pos) == r.payload else None
                owner = self.owner(pos, r.payload)
                failed = owner is not None and owner.outcome is OpType.FAIL
                reasons = []
                if status == ABORTED:
                    reasons.append("it is aborted in the final log")
                if owner is not None and failed:
                    reasons.append(f"{owner.name()} ended fail (aborted)")
                if reasons:
                    self.add(
                        "aborted_read",
                        f"read_committed {operation.name()} returned {r.payload!r} at "
                        f"{r.topic}/{r.partition}@{r.offset}, but " + " and ".join(reasons),
                        [ref, *([RecordRef(r.payload, op=owner.index)] if owner is not None and failed else [])],
                    )
                # History indexes are real-time order: a read that completed before the writing
                # transaction was even invoked cannot have seen it decided.
                early = owner is not None and owner.start > operation.index
                reasons = []
                if owner is not None and early:
                    reasons.append(f"{owner.name()} was invoked only at index {owner.start}, after the read")
                if status == UNDECIDED:
                    reasons.append("its transaction is still undecided in the final log")
                if reasons:
                    self.add(
                        "undecided_read",
                        f"read_committed {operation.name()} returned {r.payload!r} at "
                        f"{r.topic}/{r.partition}@{r.offset}, but " + " and ".join(reasons),
                        [ref, *([RecordRef(r.payload, op=owner.start)] if owner is not None and early else [])],
                    )

    def failed_but_committed(self) -> None:
        """A transaction that ended fail was aborted: none of its records may be committed."""
        for operation in self.operations:
            if operation.f not in TRANSACTIONAL_FUNCTIONS or operation.outcome is not OpType.FAIL:
                continue
            refs = [self.ref(p, operation.index) for p in self.committed_writes(operation)]
            if refs:
                self.add(
                    "aborted_read",
                    f"{operation.name()} ended fail (aborted), yet the final (read_committed) log holds "
                    f"{len(refs)} of its records as committed: {_list(refs)}",
                    refs,
                )

    # offset_gap and non_monotonic --------------------------------------------------------------

    def readers(self) -> None:
        """Each poll process's positions and returned offsets, partition by partition."""
        for poll in self.polls:
            by_tp: dict[str, list[Read]] = defaultdict(list)
            for r in poll.reads:
                by_tp[tp_key(r.topic, r.partition)].append(r)
            missing = [k for k in by_tp if k not in poll.positions]
            if missing:
                self.add(
                    "malformed_history",
                    f"{poll.name()} returned records of {', '.join(missing)} but has no positions for them",
                    [RecordRef(op=poll.index)],
                )
            for key in sorted(set(by_tp) | set(poll.positions)):
                self._reader_partition(poll, key, by_tp.get(key, []))

    def _reader_partition(self, poll: _Operation, key: str, reads: list[Read]) -> None:
        state = (poll.process, key)
        last_after, last_read = self.last_after, self.last_read
        bounds = poll.positions.get(key)
        for r in reads:
            ref = RecordRef(r.payload, r.topic, r.partition, r.offset, poll.index)
            previous = last_read.get(state)
            if previous is not None and r.offset <= previous[0]:
                self.add(
                    "non_monotonic",
                    f"reader {poll.process!r} was returned {key}@{r.offset} ({r.payload!r}) by poll {poll.index} "
                    f"after offset {previous[0]} (poll {previous[1]})",
                    [ref],
                )
            elif bounds is not None and not bounds[0] <= r.offset < bounds[1]:
                self.add(
                    "non_monotonic",
                    f"poll {poll.index} of {poll.process!r} returned {key}@{r.offset} ({r.payload!r}) outside "
                    f"its positions [{bounds[0]}, {bounds[1]})",
                    [ref],
                )
            last_read[state] = (max(r.offset, previous[0]) if previous else r.offset, poll.index)
        if bounds is None:
            return
        before, after = bounds
        tp = _split_key(key)
        if after < before:
            self.add(
                "non_monotonic",
                f"poll {poll.index} of {poll.process!r} moved its position on {key} back from {before} to {after}",
                [RecordRef(topic=tp[0], partition=tp[1], offset=after, op=poll.index)],
            )
        previous_after = last_after.get(state)
        if previous_after is not None:
            prev, prev_poll = previous_after
            if before < prev:
                self.add(
                    "non_monotonic",
                    f"reader {poll.process!r} moved its position on {key} back from {prev} (after poll {prev_poll}) "
                    f"to {before} (before poll {poll.index})",
                    [RecordRef(topic=tp[0], partition=tp[1], offset=before, op=poll.index)],
                )
            elif before > prev:
                self._gap(poll, tp, (prev, before), set(), f"between poll {prev_poll} and poll {poll.index}")
        self._gap(poll, tp, (before, after), {r.offset for r in reads}, f"within poll {poll.index}")
        last_after[state] = (max(before, after), poll.index)

    def _gap(self, poll: _Operation, tp: _TP, span: tuple[int, int], returned: set[int], when: str) -> None:
        rc = poll.read_committed
        skipped = self.log.unskippable(tp, span, rc, returned)
        if not skipped:
            return
        refs = [self.ref((tp[0], tp[1], o), poll.index) for o in skipped]
        isolation = "read_committed" if rc else "read_uncommitted"
        self.add(
            "offset_gap",
            f"{isolation} reader {poll.process!r} skipped {len(skipped)}{'+' if len(skipped) > MAX_REFS else ''} "
            f"offset(s) of {tp[0]}/{tp[1]} {when} that it may not skip: {_list(refs)}",
            refs,
        )

    # partial_txn -------------------------------------------------------------------------------

    def partial_txns(self) -> None:
        """A committed transaction seen by a read_committed reader on some partitions only, though
        the reader passed its records on the others."""
        spans: dict[tuple[str, _TP], list[tuple[int, int, int]]] = defaultdict(list)
        seen: dict[str, dict[str, tuple[_Pos, int]]] = defaultdict(dict)  # process -> payload -> (pos, poll)
        for poll in self.polls:
            if not poll.read_committed:
                continue
            for key, (before, after) in poll.positions.items():
                spans[(poll.process, _split_key(key))].append((before, after, poll.index))
            for r in poll.reads:
                seen[poll.process].setdefault(r.payload, ((r.topic, r.partition, r.offset), poll.index))
        coverage = {k: _Coverage(v) for k, v in spans.items()}
        for operation in self.operations:
            if operation.f not in TRANSACTIONAL_FUNCTIONS:
                continue
            records = self.committed_writes(operation)
            if len({(p[0], p[1]) for p in records}) < 2:
                continue  # on one partition, a skipped record is an offset_gap
            for process, returned in seen.items():
                hits = [
                    (p, returned[self.log.payload_at(p) or ""][1])
                    for p in records
                    if self.log.payload_at(p) in returned
                ]
                if not hits:
                    continue
                seen_tps = {(p[0], p[1]) for p, _ in hits}
                passed: list[tuple[_Pos, int]] = []
                for p in records:
                    if (p[0], p[1]) in seen_tps:
                        continue
                    covered = coverage.get((process, (p[0], p[1])))
                    by_poll = covered.poll_covering(p[2]) if covered is not None else None
                    if by_poll is not None:
                        passed.append((p, by_poll))
                if passed:
                    seen_refs = [self.ref(pos, op) for pos, op in hits]
                    passed_refs = [self.ref(pos, op) for pos, op in passed]
                    self.add(
                        "partial_txn",
                        f"read_committed reader {process!r} saw {operation.name()} on "
                        f"{', '.join(sorted(f'{t}/{q}' for t, q in seen_tps))} ({_list(seen_refs, 3)}) but its polls "
                        f"passed over records of it elsewhere without returning them: {_list(passed_refs, 3)}",
                        seen_refs + passed_refs,
                    )

    # order_violation ---------------------------------------------------------------------------

    def order(self) -> None:
        """Per partition, each producer process's records in the order of their counters."""
        for (topic, partition), offsets in sorted(self.log.offsets.items()):
            last: dict[str, tuple[int, int, str]] = {}  # process -> (counter, offset, payload)
            met: set[str] = set()
            for offset in offsets:
                payload = self.log.payload_at((topic, partition, offset))
                if payload is None or payload in met or payload.startswith(COPY_PREFIX):
                    continue
                met.add(payload)
                process, _, counter_text = payload.rpartition(":")
                if not process or not counter_text.isdigit():
                    continue
                counter = int(counter_text)
                previous = last.get(process)
                if previous is not None and counter < previous[0]:
                    self.add(
                        "order_violation",
                        f"producer {process!r} sent {previous[2]!r} after {payload!r}, but in {topic}/{partition} "
                        f"{previous[2]!r} is at offset {previous[1]}, before {payload!r} at offset {offset}",
                        [
                            RecordRef(previous[2], topic, partition, previous[1]),
                            RecordRef(payload, topic, partition, offset),
                        ],
                    )
                if previous is None or counter > previous[0]:
                    last[process] = (counter, offset, payload)

    # copy_mismatch and offsets_without_output ------------------------------------------------

    def copy_rules(self) -> None:
        """Copiers: each committed copy has a committed input below the committed offset, in input
        order; each committed input below a committed offset has a committed copy."""
        input_tps: set[_TP] = set()
        for operation in self.copies:
            input_tps |= {(r.topic, r.partition) for r in operation.reads}
            input_tps |= {_split_key(key) for key in operation.offsets}
        final_offsets = self.final.offsets
        offsets_known = bool(final_offsets) or not any(o.outcome is OpType.OK for o in self.copies)
        if not offsets_known:
            self.add(
                "malformed_history",
                "copy ops were acknowledged but the final op carries no group offsets",
                [RecordRef(op=self.final.index)],
            )
        # Committed copies, by the input position they copy.
        copies_of: dict[_TP, dict[_TP, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
        for (topic, partition), offsets in sorted(self.log.offsets.items()):
            for offset in offsets:
                pos = (topic, partition, offset)
                payload = self.log.payload_at(pos)
                if payload is None or not payload.startswith(COPY_PREFIX) or self.log.status[pos] != COMMITTED:
                    continue
                self.summary["copies.committed"] += 1
                source = payload[len(COPY_PREFIX) :]
                inputs = self.log.committed(source)
                if not inputs:
                    found = self.log.by_payload.get(source, [])
                    states = [f"{self.log.status[p]} at {p[0]}/{p[1]}@{p[2]}" for p in found]
                    self.add(
                        "copy_mismatch",
                        f"committed copy {payload!r} at {topic}/{partition}@{offset} has no committed input "
                        f"{source!r} ({', '.join(states) or 'absent from the final log'})",
                        [self.ref(pos), *(self.ref(p) for p in found)],
                    )
                    continue
                src = inputs[0]
                in_tp = (src[0], src[1])
                copies_of[in_tp][(topic, partition)].append((src[2], offset))
                committed_offset = final_offsets.get(tp_key(*in_tp), 0)
                if offsets_known and src[2] >= committed_offset:
                    self.add(
                        "copy_mismatch",
                        f"copy {payload!r} at {topic}/{partition}@{offset} is committed, but its input at "
                        f"{src[0]}/{src[1]}@{src[2]} is not below the group's final committed offset "
                        f"{committed_offset}: output committed without its offset",
                        [self.ref(pos), self.ref(src)],
                    )
        for in_tp, outputs in sorted(copies_of.items()):
            for out_tp, pairs in sorted(outputs.items()):
                for (in1, out1), (in2, out2) in itertools.pairwise(pairs):
                    if in2 < in1:
                        self.add(
                            "copy_mismatch",
                            f"copies in {out_tp[0]}/{out_tp[1]} are out of input order: offset {out1} copies "
                            f"{in_tp[0]}/{in_tp[1]}@{in1} but offset {out2} copies @{in2}",
                            [
                                self.ref((*out_tp, out1)),
                                self.ref((*out_tp, out2)),
                                self.ref((*in_tp, in1)),
                                self.ref((*in_tp, in2)),
                            ],
                        )
        self._offsets_without_output(input_tps)

    def _offsets_without_output(self, input_tps: set[_TP]) -> None:
        # Each committing op (ok copies in history order, then the final offsets) is blamed for
        # the missing copies it was the first to pass.
        committers: list[tuple[str, int, Mapping[str, int]]] = [
            (o.name(), o.index, o.offsets) for o in sorted(self.copies, key=lambda o: o.index) if o.outcome is OpType.OK
        ]
        committers.append(("the final group offsets", self.final.index, self.final.offsets))
        for tp in sorted(input_tps):
            key = tp_key(*tp)
            missing: dict[int, list[_Pos]] = defaultdict(list)
            names: dict[int, str] = {}
            passed = 0
            for name, index, offsets in committers:
                upto = offsets.get(key)
                if upto is None or upto <= passed:
                    continue
                offsets_here = self.log.offsets.get(tp, [])
                lo, hi = bisect.bisect_left(offsets_here, passed), bisect.bisect_left(offsets_here, upto)
                for offset in offsets_here[lo:hi]:
                    pos = (tp[0], tp[1], offset)
                    if self.log.status[pos] == COMMITTED:
                        payload = self.log.payload_at(pos)
                        if payload is not None and not self.log.committed(COPY_PREFIX + payload):
                            missing[index].append(pos)
                            names[index] = name
                passed = upto
            for index, positions in missing.items():
                refs = [self.ref(p, index) for p in positions]
                self.add(
                    "offsets_without_output",
                    f"{names[index]} committed offsets of {key} past {len(positions)} input record(s) "
                    f"with no committed copy: {_list(refs)}",
                    refs,
                )

    # summary -----------------------------------------------------------------------------------

    def count(self) -> None:
        """The counts of the summary table."""
        s = self.summary
        for status in self.log.status.values():
            s[f"log.{status}"] += 1
        s["log.records"] = sum(1 for st in self.log.status.values() if st != CONTROL)
        written: set[str] = set()
        acked: set[str] = set()
        for operation in self.operations:
            if operation.f in WRITE_FUNCTIONS:
                written |= {w.payload for w in operation.writes}
                if operation.outcome is OpType.OK:
                    acked |= {w.payload for w in operation.writes}
            if operation.f in TRANSACTIONAL_FUNCTIONS:
                word = {OpType.OK: "committed", OpType.FAIL: "aborted"}.get(operation.outcome, "unknown")
                s[f"txns.{word}"] += 1
                if word == "unknown":
                    landed = bool(self.committed_writes(operation))
                    s["txns.unknown.landed" if landed else "txns.unknown.absent"] += 1
            if operation.f == "send":
                s[f"sends.{'acked' if operation.outcome is OpType.OK else str(operation.outcome)}"] += 1
            if operation.outcome is OpType.OK and operation.f == "poll":
                s["polls.ok"] += 1
                s[f"reads.{'read_committed' if operation.read_committed else 'read_uncommitted'}"] += len(
                    operation.reads
                )
            if operation.done is not None and operation.f == "copy":
                s["reads.copy"] += len(operation.reads)
        s["writes.attempted"] = len(written)
        s["writes.acked"] = len(acked)


# --- output ---------------------------------------------------------------------------------------


def render_verdict(verdict: Verdict, console: Console, *, limit: int = 10) -> None:
    """Print the verdict line (VALID / INVALID), the summary table and the anomalies by kind, at
    most ``limit`` per kind (saying how many more there are)."""
    if verdict.ok:
        console.print("[bold green]VALID[/]: no anomaly found")
    else:
        counts = ", ".join(f"{kind} {len(items)}" for kind, items in verdict.by_kind().items())
        console.print(f"[bold red]INVALID[/]: {len(verdict.anomalies)} anomalies ({counts})")
    table = Table(title="Summary", show_header=True)
    table.add_column("what")
    table.add_column("count", justify="right")
    for key, value in verdict.summary.items():
        table.add_row(escape(key), str(value))
    console.print(table)
    for kind, items in verdict.by_kind().items():
        console.print(f"[bold]{escape(kind)}[/] ({len(items)})")
        for anomaly in items[:limit]:
            console.print(f"  - {escape(anomaly.message)}", soft_wrap=True)
        if len(items) > limit:
            console.print(f"  ... and {len(items) - limit} more {escape(kind)}")


def verdict_to_json(verdict: Verdict) -> dict[str, Any]:
    """The verdict as a JSON-ready dict: ``valid``, ``counts`` by kind, ``summary``, ``anomalies``."""
    return {
        "valid": verdict.ok,
        "counts": {kind: len(items) for kind, items in verdict.by_kind().items()},
        "summary": dict(verdict.summary),
        "anomalies": [
            {
                "kind": a.kind,
                "message": a.message,
                "records": [{k: v for k, v in _ref_dict(r).items() if v is not None} for r in a.records],
            }
            for a in verdict.anomalies
        ],
    }


def _ref_dict(ref: RecordRef) -> dict[str, Any]:
    return {"payload": ref.payload, "topic": ref.topic, "partition": ref.partition, "offset": ref.offset, "op": ref.op}


def verdict_from_json(data: Mapping[str, Any]) -> Verdict:
    """The inverse of :func:`verdict_to_json`."""
    return Verdict(
        anomalies=tuple(
            Anomaly(a["kind"], a["message"], tuple(RecordRef(**r) for r in a.get("records", ())))
            for a in data.get("anomalies", ())
        ),
        summary=Counter({str(k): int(v) for k, v in data.get("summary", {}).items()}),
    )
