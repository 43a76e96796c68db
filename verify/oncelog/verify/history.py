"""The history of a verification run: every operation a client invoked and how it ended.

This is the contract between the workloads (which record) and the checker (which judges). It
follows Jepsen's model: a client process appends an ``invoke`` entry before it calls the store and
exactly one completion after: ``ok`` (the store acknowledged), ``fail`` (the store definitely did
not apply it) or ``info`` (the outcome is unknown: a cut connection, a timeout, a killed process;
a process killed mid-operation never writes its completion, which the checker reads as ``info``).

Every payload written in a run is unique (``"<process>:<counter>"``; a copier's output is
``"copy:" + input payload``), so the checker can follow each one from send to log to reader.

Values by function (``Op.f``):

``send``
    An idempotent (non-transactional) produce. ``writes``: the records; on ``ok`` each carries
    the offset the store acknowledged.
``txn``
    One transaction of a transactional producer: ``txn`` names it (``"<transactional id>#<n>"``),
    ``writes`` are its records (offsets filled on ``ok`` where acknowledged); ``ok`` means the
    commit was acknowledged, ``fail`` that it was aborted (by the client, or refused definitely),
    ``info`` that the outcome is unknown.
``copy``
    One consume-transform-produce transaction of a copier in a consumer group: ``reads`` are the
    input records consumed, ``writes`` their copies, ``offsets`` the group offsets committed in the
    transaction (next offset to read per input partition). Completion as for ``txn``.
``poll``
    One poll of a consumer, all partitions read in one database snapshot. ``isolation`` is
    ``read_committed`` or ``read_uncommitted``; ``positions`` maps each partition read to its
    ``(position before, position after)``; ``reads`` are the records returned. Only ``ok`` polls
    carry reads.
``final``
    Written once by the runner after all faults healed and every client stopped: ``log`` is the
    whole content of every topic of the run, read directly (data records with their offsets,
    transactional flag and whether they were aborted; control records too), and ``offsets`` the
    group offsets finally committed. The checker's ground truth.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "History",
    "LogEntry",
    "Op",
    "OpType",
    "Read",
    "Write",
    "load_history",
    "tp_key",
]


class OpType(StrEnum):
    """How an entry of the history ends an operation (or begins one)."""

    INVOKE = "invoke"
    OK = "ok"
    FAIL = "fail"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Write:
    """A record a client asked to write; ``offset`` is set once the store acknowledged it."""

    topic: str
    partition: int
    payload: str
    offset: int | None = None


@dataclass(frozen=True, slots=True)
class Read:
    """A record a consumer returned (or a copier consumed)."""

    topic: str
    partition: int
    offset: int
    payload: str


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One offset of a partition as it finally stands (``final`` op): data or control record."""

    topic: str
    partition: int
    offset: int
    payload: str | None
    """The value of a data record; None for a control record."""
    control: str | None = None
    """``"commit"`` or ``"abort"`` for a control record, else None."""
    transactional: bool = False
    aborted: bool = False
    """A data record of an aborted transaction."""
    producer_id: int | None = None


@dataclass(frozen=True, slots=True)
class Op:
    """One entry of the history. ``index`` is its position; ``time`` is ``time.monotonic_ns()``."""

    index: int
    process: str
    type: OpType
    f: str
    time: int
    txn: str | None = None
    writes: tuple[Write, ...] = ()
    reads: tuple[Read, ...] = ()
    offsets: Mapping[str, int] = field(default_factory=dict)
    """``"topic/partition"`` -> offset: group offsets committed (``copy``, ``final``)."""
    positions: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """``"topic/partition"`` -> (position before, position after) of a ``poll``."""
    isolation: str | None = None
    log: tuple[LogEntry, ...] = ()
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (one line of the history file)."""
        out = asdict(self)
        out["type"] = str(self.type)
        out["positions"] = {k: list(v) for k, v in self.positions.items()}
        return {k: v for k, v in out.items() if v not in (None, (), [], {})} | {"index": self.index}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Op:
        """The inverse of :meth:`to_json`."""
        return cls(
            index=int(data["index"]),
            process=str(data["process"]),
            type=OpType(data["type"]),
            f=str(data["f"]),
            time=int(data["time"]),
            txn=data.get("txn"),
            writes=tuple(Write(**w) for w in data.get("writes", ())),
            reads=tuple(Read(**r) for r in data.get("reads", ())),
            offsets=dict(data.get("offsets", {})),
            positions={k: (int(v[0]), int(v[1])) for k, v in data.get("positions", {}).items()},
            isolation=data.get("isolation"),
            log=tuple(LogEntry(**e) for e in data.get("log", ())),
            error=data.get("error"),
        )


def tp_key(topic: str, partition: int) -> str:
    """The key of ``Op.offsets`` and ``Op.positions`` for a partition."""
    return f"{topic}/{partition}"


class History:
    """An append-only, thread-safe-by-convention list of operations, optionally mirrored to a file.

    Each process (thread or child process) should own one History (or a child writes JSON lines to
    its own file that the runner merges by ``time``): appends are cheap and never reordered.
    """

    def __init__(self, ops: Iterable[Op] = (), sink: TextIO | None = None) -> None:
        self._ops: list[Op] = list(ops)
        self._sink = sink

    def __iter__(self) -> Iterator[Op]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def __getitem__(self, index: int) -> Op:
        return self._ops[index]

    def append(self, process: str, type: OpType, f: str, **values: Any) -> Op:
        """Record one entry now and return it."""
        op = Op(index=len(self._ops), process=process, type=type, f=f, time=time.monotonic_ns(), **values)
        self._ops.append(op)
        if self._sink is not None:
            self._sink.write(json.dumps(op.to_json()) + "\n")
            self._sink.flush()
        return op

    def dump(self, path: Path) -> None:
        """Write the whole history as JSON lines."""
        with path.open("w", encoding="utf-8") as out:
            for op in self._ops:
                out.write(json.dumps(op.to_json()) + "\n")


def load_history(lines: Iterable[str]) -> History:
    """Read JSON lines (possibly from several processes' files, concatenated): entries are sorted
    by ``time`` and re-indexed, so the result is one history in real-time order. A truncated last
    line (a process killed while writing) is skipped."""
    ops: list[Op] = []
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        try:
            ops.append(Op.from_json(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    ops.sort(key=lambda op: (op.time, op.process, op.index))
    return History(replace(op, index=i) for i, op in enumerate(ops))
