"""The history checker of ``oncelog verify``, on hand-made histories and without a database.

Each anomaly kind has a history made by hand that contains it, and the test asserts the kind and
that the message names the offending record. Clean histories (aborted transactions seen only by
read_uncommitted, markers skipped, unknown outcomes that landed or not, copiers) must be VALID.
A property test simulates a tiny correct store (transactions, last stable offsets, all-or-none
reads across partitions, a KIP-447 copier) and asserts its histories are always valid, and that
one injected anomaly is always caught under the right kind.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from oncelog.verify.checker import (
    KINDS,
    Anomaly,
    RecordRef,
    Verdict,
    check,
    render_verdict,
    verdict_from_json,
    verdict_to_json,
)
from oncelog.verify.history import History, LogEntry, Op, OpType, Read, Write, load_history, tp_key

# --- building histories by hand ------------------------------------------------------------------


def _tp(where: str) -> tuple[str, int]:
    topic, _, partition = where.partition("/")
    return topic, int(partition)


def W(where: str, payload: str, offset: int | None = None) -> Write:
    """A write of ``payload`` to ``"topic/partition"``."""
    return Write(*_tp(where), payload, offset)


def R(where: str, offset: int, payload: str) -> Read:
    """A read of ``payload`` at ``"topic/partition"`` and ``offset``."""
    return Read(*_tp(where), offset, payload)


def D(where: str, offset: int, payload: str, *, pid: int | None = None, aborted: bool = False) -> LogEntry:
    """A data record of the final log (transactional when it has a producer id)."""
    return LogEntry(*_tp(where), offset, payload, None, pid is not None, aborted, pid)


def M(where: str, offset: int, pid: int, control: str = "commit") -> LogEntry:
    """A control record (marker) of the final log."""
    return LogEntry(*_tp(where), offset, None, control, True, False, pid)


class Hist:
    """A history under construction: entries get consecutive indexes and times."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, process: str, type_: str, f: str, **values: Any) -> Op:
        op = Op(index=len(self.ops), process=process, type=OpType(type_), f=f, time=len(self.ops), **values)
        self.ops.append(op)
        return op

    def send(
        self, process: str, where: str, payload: str, offset: int | None = None, outcome: str | None = "ok"
    ) -> None:
        """One send: invoke, then its completion (none for ``outcome=None``: a killed process)."""
        self.add(process, "invoke", "send", writes=(W(where, payload),))
        if outcome is not None:
            self.add(process, outcome, "send", writes=(W(where, payload, offset if outcome == "ok" else None),))

    def txn(self, process: str, name: str, writes: Sequence[Write], outcome: str | None = "ok") -> tuple[Op, Op | None]:
        """One transaction: invoke with its writes, then its completion (offsets on ok)."""
        invoke = self.add(process, "invoke", "txn", txn=name, writes=tuple(replace(w, offset=None) for w in writes))
        done = None
        if outcome is not None:
            done = self.add(process, outcome, "txn", txn=name, writes=tuple(writes))
        return invoke, done

    def poll(
        self,
        process: str,
        positions: dict[str, tuple[int, int]],
        reads: Sequence[Read] = (),
        isolation: str = "read_committed",
    ) -> Op:
        """One poll that ended ok."""
        self.add(process, "invoke", "poll", isolation=isolation)
        return self.add(process, "ok", "poll", isolation=isolation, positions=positions, reads=tuple(reads))

    def copy(
        self,
        process: str,
        name: str,
        reads: Sequence[Read],
        writes: Sequence[Write],
        offsets: dict[str, int],
        outcome: str = "ok",
    ) -> Op:
        """One consume-transform-produce transaction."""
        self.add(process, "invoke", "copy", txn=name)
        return self.add(process, outcome, "copy", txn=name, reads=tuple(reads), writes=tuple(writes), offsets=offsets)

    def final(self, log: Iterable[LogEntry], offsets: dict[str, int] | None = None) -> Op:
        """The runner's final read: the ground truth."""
        return self.add("runner", "ok", "final", log=tuple(log), offsets=offsets or {})

    def history(self) -> History:
        return History(self.ops)


def kinds(verdict: Verdict) -> set[str]:
    return {a.kind for a in verdict.anomalies}


def only(verdict: Verdict, kind: str) -> list[Anomaly]:
    """The anomalies of ``kind``; fails when there are none."""
    found = [a for a in verdict.anomalies if a.kind == kind]
    assert found, f"no {kind} in {verdict.anomalies}"
    return found


def assert_valid(verdict: Verdict) -> None:
    assert verdict.ok, "\n".join(f"{a.kind}: {a.message}" for a in verdict.anomalies)


# A clean base: an idempotent producer, a committed and an aborted transaction over two
# partitions, a read_committed and a read_uncommitted reader that skip what each may skip.
BASE_LOG = [
    D("t/0", 0, "p:0"),
    D("t/0", 1, "p:1"),
    D("t/0", 2, "x:0", pid=7),
    D("t/1", 0, "x:1", pid=7),
    M("t/0", 3, 7),
    M("t/1", 1, 7),
    D("t/0", 4, "x:2", pid=7, aborted=True),
    D("t/1", 2, "x:3", pid=7, aborted=True),
    M("t/0", 5, 7, "abort"),
    M("t/1", 3, 7, "abort"),
]


# A committed transaction of another producer on another partition: a log with markers (and their
# producer ids), so that a transaction without its marker reads as undecided.
OTHER_TXN = [D("u/0", 0, "z:0", pid=9), M("u/0", 1, 9)]


def base(final: bool = True) -> Hist:
    h = Hist()
    h.send("p", "t/0", "p:0", 0)
    h.send("p", "t/0", "p:1", 1)
    h.txn("x", "x#1", [W("t/0", "x:0", 2), W("t/1", "x:1", 0)])
    h.txn("x", "x#2", [W("t/0", "x:2"), W("t/1", "x:3")], outcome="fail")
    # read_committed: the first poll returns everything committed, the second skips the aborted
    # records and the markers (an empty fetch moves the position to the read limit).
    h.poll(
        "rc",
        {"t/0": (0, 3), "t/1": (0, 1)},
        [R("t/0", 0, "p:0"), R("t/0", 1, "p:1"), R("t/0", 2, "x:0"), R("t/1", 0, "x:1")],
    )
    h.poll("rc", {"t/0": (3, 6), "t/1": (1, 4)})
    # read_uncommitted sees the aborted records and skips only the markers.
    h.poll(
        "ru",
        {"t/0": (0, 5), "t/1": (0, 3)},
        [
            R("t/0", 0, "p:0"),
            R("t/0", 1, "p:1"),
            R("t/0", 2, "x:0"),
            R("t/0", 4, "x:2"),
            R("t/1", 0, "x:1"),
            R("t/1", 2, "x:3"),
        ],
        isolation="read_uncommitted",
    )
    if final:
        h.final(BASE_LOG)
    return h


# --- clean histories -----------------------------------------------------------------------------


def test_clean_history_is_valid_and_counted() -> None:
    verdict = check(base().history())
    assert_valid(verdict)
    s = verdict.summary
    assert s["writes.acked"] == 4
    assert s["writes.attempted"] == 6
    assert s["txns.committed"] == 1
    assert s["txns.aborted"] == 1
    assert s["log.control"] == 4
    assert s["log.aborted"] == 2
    assert s["log.committed"] == 4
    assert s["log.records"] == 6
    assert s["reads.read_committed"] == 4
    assert s["reads.read_uncommitted"] == 6
    assert s["ops.send.ok"] == 2
    assert s["ops.final.ok"] == 1
    assert s["anomalies"] == 0
    assert s["log.undecided"] == 0 and "log.undecided" in s  # the standard counts are always there
    assert s["ops.copy.ok"] == 0  # any other reads as zero


def test_history_from_json_lines_gives_the_same_verdict() -> None:
    h = base()
    h.poll("rc", {"t/0": (6, 7)}, [R("t/0", 6, "p:2")])  # a record missing from the log: one anomaly
    buffer = io.StringIO()
    for op in h.ops:
        buffer.write(json.dumps(op.to_json()) + "\n")
    direct = check(h.history())
    loaded = check(load_history(buffer.getvalue().splitlines()))
    assert not direct.ok
    assert verdict_to_json(loaded) == verdict_to_json(direct)


def test_unknown_outcomes_that_landed_or_not_are_valid() -> None:
    h = Hist()
    h.txn("x", "x#1", [W("t/0", "x:0"), W("t/1", "x:1")], outcome="info")  # committed after all
    h.txn("x", "x#2", [W("t/0", "x:2"), W("t/1", "x:3")], outcome="info")  # aborted
    h.txn("y", "y#1", [W("t/0", "y:0")], outcome=None)  # killed: never completed
    h.send("p", "t/0", "p:0", outcome="info")  # landed
    h.send("p", "t/0", "p:1", outcome="info")  # lost in flight: fine, it was never acknowledged
    h.send("p", "t/0", "p:2", outcome=None)  # killed
    h.poll(
        "rc",
        {"t/0": (0, 6), "t/1": (0, 1)},
        [R("t/0", 0, "x:0"), R("t/0", 5, "p:0"), R("t/1", 0, "x:1")],
    )
    h.final(
        [
            D("t/0", 0, "x:0", pid=7),
            D("t/1", 0, "x:1", pid=7),
            M("t/0", 1, 7),
            M("t/1", 1, 7),
            D("t/0", 2, "x:2", pid=7, aborted=True),
            D("t/1", 2, "x:3", pid=7, aborted=True),
            M("t/0", 3, 7, "abort"),
            M("t/1", 3, 7, "abort"),
            D("t/0", 4, "y:0", pid=8, aborted=True),  # y#1 was written, then aborted by its timeout
            D("t/0", 5, "p:0"),
            M("t/0", 6, 8, "abort"),
        ]
    )
    verdict = check(h.history())
    assert_valid(verdict)
    assert verdict.summary["txns.unknown"] == 3
    assert verdict.summary["txns.unknown.landed"] == 1
    assert verdict.summary["txns.unknown.absent"] == 2


def test_open_transaction_at_the_end_is_valid_when_nobody_read_it_committed() -> None:
    h = Hist()
    h.txn("x", "x#1", [W("t/0", "x:0")], outcome=None)
    h.send("p", "t/0", "p:0", 1)
    # read_committed stops at the last stable offset (0); read_uncommitted reads through.
    h.poll("rc", {"t/0": (0, 0)})
    h.poll("ru", {"t/0": (0, 2)}, [R("t/0", 0, "x:0"), R("t/0", 1, "p:0")], isolation="read_uncommitted")
    h.final([D("t/0", 0, "x:0", pid=7), D("t/0", 1, "p:0"), *OTHER_TXN])
    verdict = check(h.history())
    assert_valid(verdict)
    assert verdict.summary["log.undecided"] == 1


def test_without_producer_ids_no_record_is_undecided() -> None:
    h = Hist()
    h.txn("x", "x#1", [W("t/0", "x:0", 0)])
    h.final([LogEntry("t", 0, 0, "x:0", None, True), LogEntry("t", 0, 1, None, "commit", True)])
    verdict = check(h.history())
    assert_valid(verdict)
    assert verdict.summary["log.committed"] == 1


def test_asynchronous_sends_and_nemesis_ops_are_paired_and_ignored() -> None:
    h = Hist()
    h.add("nemesis", "invoke", "kill")
    h.add("p", "invoke", "send", writes=(W("t/0", "p:0"),))
    h.add("p", "invoke", "send", writes=(W("t/1", "p:1"),))
    h.add("p", "ok", "send", writes=(W("t/1", "p:1", 0),))  # completions in another order
    h.add("p", "ok", "send", writes=(W("t/0", "p:0", 0),))
    h.add("nemesis", "info", "kill")
    h.final([D("t/0", 0, "p:0"), D("t/1", 0, "p:1")])
    verdict = check(h.history())
    assert_valid(verdict)
    assert verdict.summary["ops.kill.info"] == 1
    assert verdict.summary["writes.acked"] == 2


def copier_history(*, drop_copy: int | None = None, offsets: dict[str, int] | None = None) -> Hist:
    """Input t/0 (an aborted transaction in the middle), copied to c/0 by two copy transactions,
    the first of which was aborted and redone (so its payloads are written twice)."""
    h = Hist()
    h.send("p", "t/0", "p:0", 0)
    h.txn("x", "x#1", [W("t/0", "x:0")], outcome="fail")
    h.send("p", "t/0", "p:1", 3)
    h.send("p", "t/0", "p:2", 4)
    reads = [R("t/0", 0, "p:0"), R("t/0", 3, "p:1")]
    h.copy("cp", "cp#1", reads, [W("c/0", "copy:p:0"), W("c/0", "copy:p:1")], {"t/0": 4}, outcome="fail")
    h.copy("cp", "cp#2", reads, [W("c/0", "copy:p:0", 3), W("c/0", "copy:p:1", 4)], {"t/0": 4})
    h.copy("cp", "cp#3", [R("t/0", 4, "p:2")], [W("c/0", "copy:p:2", 6)], {"t/0": 5})
    log = [
        D("t/0", 0, "p:0"),
        D("t/0", 1, "x:0", pid=7, aborted=True),
        M("t/0", 2, 7, "abort"),
        D("t/0", 3, "p:1"),
        D("t/0", 4, "p:2"),
        D("c/0", 0, "copy:p:0", pid=9, aborted=True),
        D("c/0", 1, "copy:p:1", pid=9, aborted=True),
        M("c/0", 2, 9, "abort"),
        D("c/0", 3, "copy:p:0", pid=9),
        D("c/0", 4, "copy:p:1", pid=9),
        M("c/0", 5, 9),
        D("c/0", 6, "copy:p:2", pid=9),
        M("c/0", 7, 9),
    ]
    if drop_copy is not None:
        log = [e for e in log if not (e.topic == "c" and e.offset == drop_copy)]
    h.final(log, {"t/0": 5} if offsets is None else offsets)
    return h


def test_copier_history_is_valid() -> None:
    verdict = check(copier_history().history())
    assert_valid(verdict)
    assert verdict.summary["copies.committed"] == 3
    assert verdict.summary["reads.copy"] == 5


def test_copies_rewritten_by_unrecorded_retries_are_valid() -> None:
    # cp#1 ended fail (its copy aborted); cp#2 was killed (no completion, so no recorded writes)
    # after committing the same copy payload; a zombie's cp#3, invoked after a reader had seen
    # that copy, wrote it once more and was aborted. Nothing here is an anomaly.
    h = Hist()
    h.send("p", "t/0", "p:0", 0)
    h.copy("cp", "cp#1", [R("t/0", 0, "p:0")], [W("c/0", "copy:p:0")], {"t/0": 1}, outcome="fail")
    h.add("cp", "invoke", "copy", txn="cp#2")
    h.poll("rc", {"c/0": (0, 4)}, [R("c/0", 2, "copy:p:0")])
    h.copy("zombie", "cp#3", [R("t/0", 0, "p:0")], [W("c/0", "copy:p:0")], {"t/0": 1}, outcome="fail")
    h.final(
        [
            D("t/0", 0, "p:0"),
            D("c/0", 0, "copy:p:0", pid=9, aborted=True),
            M("c/0", 1, 9, "abort"),
            D("c/0", 2, "copy:p:0", pid=9),
            M("c/0", 3, 9),
            D("c/0", 4, "copy:p:0", pid=9, aborted=True),
            M("c/0", 5, 9, "abort"),
        ],
        {"t/0": 1},
    )
    verdict = check(h.history())
    assert_valid(verdict)
    assert verdict.summary["txns.unknown"] == 1 and verdict.summary["txns.aborted"] == 2


def test_entries_are_named_by_their_position() -> None:
    # Two processes' own histories concatenated (each indexed from 0) are judged in list order.
    h = base()
    mixed = [replace(op, index=0) for op in h.ops]
    assert verdict_to_json(check(History(mixed))) == verdict_to_json(check(h.history()))
    h.ops.insert(0, h.ops[-1])  # a second final op, first in the list: the last one is the truth
    verdict = check(History([replace(op, index=7) for op in h.ops]))
    assert [a.kind for a in verdict.anomalies] == ["malformed_history"]
    assert verdict.anomalies[0].records == (RecordRef(op=0), RecordRef(op=len(h.ops) - 1))


# --- each anomaly, caught --------------------------------------------------------------------------


def test_no_final_op_is_malformed() -> None:
    verdict = check(base(final=False).history())
    assert [a.kind for a in verdict.anomalies] == ["malformed_history"]
    assert "no final op" in verdict.anomalies[0].message
    assert not verdict.ok


def test_completion_without_invoke_is_malformed() -> None:
    h = Hist()
    h.add("p", "ok", "send", writes=(W("t/0", "p:0", 0),))
    h.final([D("t/0", 0, "p:0")])
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "malformed_history"
    assert "has no invoke" in anomaly.message
    assert anomaly.records == (RecordRef(op=0),)


def test_two_entries_at_one_offset_and_missing_positions_are_malformed() -> None:
    h = Hist()
    h.send("p", "t/0", "p:0", 0)
    h.poll("rc", {}, [R("t/0", 0, "p:0")])
    h.final([D("t/0", 0, "p:0"), D("t/0", 0, "p:0")])
    messages = [a.message for a in only(check(h.history()), "malformed_history")]
    assert any("two entries at t/0@0" in m for m in messages)
    assert any("no positions" in m and "t/0" in m for m in messages)


def test_data_entry_without_payload_is_malformed() -> None:
    h = Hist()
    h.final([LogEntry("t", 0, 0, None)])
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "malformed_history" and "t/0@0 has no payload" in anomaly.message


def test_acked_copies_without_final_offsets_are_malformed() -> None:
    verdict = check(copier_history(offsets={}).history())
    assert any("no group offsets" in a.message for a in only(verdict, "malformed_history"))


def test_lost_write_absent_from_the_final_log() -> None:
    h = base(final=False)
    h.send("p", "t/1", "p:9", 4)
    h.final(BASE_LOG)
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "lost_write"
    assert "'p:9'" in anomaly.message and "absent" in anomaly.message
    assert anomaly.records[0] == RecordRef("p:9", "t", 1, 4, len(h.ops) - 2)


def test_lost_write_acknowledged_at_another_offset() -> None:
    h = Hist()
    h.send("p", "t/0", "p:0", 0)
    h.send("p", "t/0", "p:1", 0)  # acknowledged at offset 0 too
    h.final([D("t/0", 0, "p:0"), D("t/0", 1, "p:1")])
    (anomaly,) = only(check(h.history()), "lost_write")
    assert "'p:1'" in anomaly.message and "offset 0" in anomaly.message and "'p:0'" in anomaly.message


def test_lost_write_acknowledged_records_of_ops_that_did_not_end_ok() -> None:
    h = Hist()
    # A send of two records: one acknowledged, one timed out (unknown); the acknowledged one is lost.
    h.add("p", "invoke", "send", writes=(W("t/0", "p:0"), W("t/0", "p:1")))
    h.add("p", "info", "send", writes=(W("t/0", "p:0", 0), W("t/0", "p:1")))
    # An aborted transaction's record acknowledged at an offset that holds something else.
    h.txn("x", "x#1", [W("t/1", "x:0", 0), W("t/1", "x:1", 1)], outcome="fail")
    h.final([D("t/1", 0, "x:0", pid=7, aborted=True), D("t/1", 1, "y:0"), M("t/1", 2, 7, "abort")])
    anomalies = check(h.history()).anomalies
    assert [a.kind for a in anomalies] == ["lost_write", "lost_write"]
    assert "'p:0' (t/0@0)" in anomalies[0].message and "absent" in anomalies[0].message
    assert "'x:1' (t/1@1)" in anomalies[1].message and "holds 'y:0'" in anomalies[1].message


def test_lost_write_committed_transaction_aborted_in_the_log() -> None:
    h = Hist()
    h.txn("x", "x#1", [W("t/0", "x:0", 0), W("t/1", "x:1", 0)])
    h.final([D("t/0", 0, "x:0", pid=7), D("t/1", 0, "x:1", pid=7, aborted=True), M("t/0", 1, 7), M("t/1", 1, 7)])
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "lost_write"
    assert "'x:1'" in anomaly.message and "x#1" in anomaly.message and "aborted" in anomaly.message


def test_lost_write_committed_transaction_still_open_in_the_log() -> None:
    h = Hist()
    h.txn("x", "x#1", [W("t/0", "x:0", 0)])
    h.txn("x", "x#2", [W("t/1", "x:1", 0)])
    h.final([D("t/0", 0, "x:0", pid=7), D("t/1", 0, "x:1", pid=7), M("t/1", 1, 7)])  # no marker on t/0
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "lost_write"
    assert "'x:0'" in anomaly.message and "undecided" in anomaly.message


def test_lost_write_a_record_a_reader_saw_has_vanished() -> None:
    h = base(final=False)
    h.final([e for e in BASE_LOG if e.payload != "p:1"] + [D("t/0", 1, "p:other")])
    verdict = check(h.history())
    messages = [a.message for a in only(verdict, "lost_write")]
    assert any("returned 'p:1' at t/0@1" in m and "'p:other'" in m for m in messages)  # by both readers
    assert any("acknowledged write 'p:1'" in m for m in messages)


def test_duplicate_committed_twice_in_the_log() -> None:
    h = base(final=False)
    h.final([*BASE_LOG, D("t/1", 4, "p:1")])
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "duplicate"
    assert "'p:1' is committed 2 times" in anomaly.message and "t/0@1" in anomaly.message
    assert "t/1@4" in anomaly.message
    assert {(r.topic, r.partition, r.offset) for r in anomaly.records} == {("t", 0, 1), ("t", 1, 4)}


def test_duplicate_aborted_copy_beside_committed_one_is_not_a_duplicate() -> None:
    # The copier history holds copy:p:0 aborted and committed: one committed copy, no duplicate.
    assert "duplicate" not in kinds(check(copier_history().history()))


def test_duplicate_returned_twice_to_one_reader() -> None:
    h = Hist()
    h.send("p", "t/0", "p:0", 0)
    h.poll("rc", {"t/0": (0, 1), "t/1": (0, 1)}, [R("t/0", 0, "p:0"), R("t/1", 0, "p:0")])
    h.final([D("t/0", 0, "p:0"), D("t/1", 0, "p:0", pid=3, aborted=True), M("t/1", 1, 3, "abort")])
    verdict = check(h.history())
    (dup,) = only(verdict, "duplicate")
    assert "reader 'rc' was returned 'p:0' at 2 positions" in dup.message
    assert "aborted_read" in kinds(verdict)


def test_aborted_read_of_an_aborted_record() -> None:
    h = base(final=False)
    h.poll("rc2", {"t/0": (4, 5)}, [R("t/0", 4, "x:2")])
    h.final(BASE_LOG)
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "aborted_read"
    assert "'x:2'" in anomaly.message and "t/0@4" in anomaly.message and "aborted in the final log" in anomaly.message
    assert "x#2" in anomaly.message and "ended fail" in anomaly.message


def test_aborted_read_by_a_copier() -> None:
    h = copier_history()
    final = h.ops.pop()  # a copy that read the aborted record goes before the final op
    h.copy("cp", "cp#4", [R("t/0", 1, "x:0")], [], {"t/0": 5})
    h.ops.append(replace(final, index=len(h.ops), time=len(h.ops)))
    anomaly = only(check(h.history()), "aborted_read")[0]
    assert "copy op" in anomaly.message and "'x:0'" in anomaly.message


def test_aborted_read_failed_transaction_committed_in_the_log() -> None:
    h = Hist()
    h.txn("x", "x#1", [W("t/0", "x:0")], outcome="fail")
    h.poll("rc", {"t/0": (0, 1)}, [R("t/0", 0, "x:0")])
    h.final([D("t/0", 0, "x:0", pid=7), M("t/0", 1, 7)])
    messages = [a.message for a in only(check(h.history()), "aborted_read")]
    assert any("ended fail (aborted), yet the final" in m and "'x:0'" in m for m in messages)
    assert any("returned 'x:0'" in m and "x#1" in m and "ended fail" in m for m in messages)


def test_read_uncommitted_may_read_aborted_records() -> None:
    h = base(final=False)
    h.poll("ru2", {"t/0": (4, 5)}, [R("t/0", 4, "x:2")], isolation="read_uncommitted")
    h.final(BASE_LOG)
    assert_valid(check(h.history()))


def test_undecided_read_before_the_transaction_began() -> None:
    h = Hist()
    h.poll("rc", {"t/0": (0, 1)}, [R("t/0", 0, "x:0")])  # completes before x#1 is invoked
    h.txn("x", "x#1", [W("t/0", "x:0", 0)])
    h.final([D("t/0", 0, "x:0", pid=7), M("t/0", 1, 7)])
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "undecided_read"
    assert "'x:0'" in anomaly.message and "invoked only at index 2" in anomaly.message
    assert anomaly.records[0] == RecordRef("x:0", "t", 0, 0, 1)


def test_undecided_read_of_a_transaction_still_open_in_the_log() -> None:
    h = Hist()
    h.txn("x", "x#1", [W("t/0", "x:0")], outcome=None)
    h.poll("rc", {"t/0": (0, 1)}, [R("t/0", 0, "x:0")])
    h.final([D("t/0", 0, "x:0", pid=7), *OTHER_TXN])
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "undecided_read"
    assert "still undecided" in anomaly.message and "'x:0'" in anomaly.message


def test_partial_txn_seen_on_one_partition_passed_over_on_the_other() -> None:
    h = base(final=False)
    # A second read_committed reader: its poll returned x:0 (t/0) and passed t/1@0 without x:1.
    h.poll("rc2", {"t/0": (2, 3), "t/1": (0, 1)}, [R("t/0", 2, "x:0")])
    h.final(BASE_LOG)
    verdict = check(h.history())
    (anomaly,) = only(verdict, "partial_txn")
    assert "'rc2'" in anomaly.message and "x#1" in anomaly.message
    assert "'x:1' at t/1@0" in anomaly.message
    assert RecordRef("x:1", "t", 1, 0, len(h.ops) - 2) in anomaly.records
    assert kinds(verdict) == {"partial_txn", "offset_gap"}


def test_partial_txn_not_reported_when_the_reader_never_reached_the_other_partition() -> None:
    h = base(final=False)
    h.poll("rc2", {"t/0": (2, 3), "t/1": (0, 0)}, [R("t/0", 2, "x:0")])  # held at t/1@0: a record cap
    h.final(BASE_LOG)
    assert_valid(check(h.history()))


def test_offset_gap_within_a_poll() -> None:
    h = base(final=False)
    h.poll("rc2", {"t/0": (0, 3)}, [R("t/0", 0, "p:0"), R("t/0", 2, "x:0")])
    h.final(BASE_LOG)
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "offset_gap"
    assert "'rc2'" in anomaly.message and "'p:1' at t/0@1" in anomaly.message
    assert anomaly.records == (RecordRef("p:1", "t", 0, 1, len(h.ops) - 2),)


def test_offset_gap_between_polls() -> None:
    h = base(final=False)
    h.poll("rc2", {"t/0": (0, 1)}, [R("t/0", 0, "p:0")])
    h.poll("rc2", {"t/0": (2, 3)}, [R("t/0", 2, "x:0")])
    h.final(BASE_LOG)
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "offset_gap"
    assert "between poll" in anomaly.message and "t/0@1" in anomaly.message


def test_offset_gap_read_uncommitted_may_not_skip_aborted_records() -> None:
    h = base(final=False)
    h.poll("ru2", {"t/1": (1, 3)}, [], isolation="read_uncommitted")
    h.final(BASE_LOG)
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "offset_gap"
    assert "read_uncommitted" in anomaly.message and "'x:3' at t/1@2" in anomaly.message


def test_offset_gap_over_offsets_missing_from_the_log() -> None:
    h = base(final=False)
    h.poll("rc2", {"t/0": (5, 9)})
    h.final(BASE_LOG)
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "offset_gap"
    assert "t/0@6" in anomaly.message and len(anomaly.records) == 3


def test_skipping_markers_between_polls_is_not_a_gap() -> None:
    h = base(final=False)
    h.poll("rc2", {"t/0": (0, 3)}, [R("t/0", 0, "p:0"), R("t/0", 1, "p:1"), R("t/0", 2, "x:0")])
    h.add("rc2", "invoke", "poll")
    h.add("rc2", "info", "poll")  # a poll cut off after an empty fetch moved past markers
    h.poll("rc2", {"t/0": (6, 6)})
    h.final(BASE_LOG)
    assert_valid(check(h.history()))


def test_non_monotonic_within_a_poll() -> None:
    h = base(final=False)
    h.poll("rc2", {"t/0": (0, 2)}, [R("t/0", 1, "p:1"), R("t/0", 0, "p:0")])
    h.final(BASE_LOG)
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "non_monotonic"
    assert "t/0@0" in anomaly.message and "'p:0'" in anomaly.message


def test_non_monotonic_position_moved_back_between_polls() -> None:
    h = base(final=False)
    h.poll("rc", {"t/0": (2, 3)}, [R("t/0", 2, "x:0")])  # 'rc' was at 6 on t/0
    h.final(BASE_LOG)
    messages = [a.message for a in only(check(h.history()), "non_monotonic")]
    assert any("moved its position on t/0 back from 6" in m for m in messages)
    assert any("t/0@2" in m and "'x:0'" in m for m in messages)


def test_non_monotonic_read_outside_the_positions_and_position_backwards() -> None:
    h = base(final=False)
    h.poll("rc2", {"t/0": (0, 1)}, [R("t/0", 0, "p:0"), R("t/0", 1, "p:1")])
    h.poll("rc3", {"t/0": (3, 2)})
    h.final(BASE_LOG)
    messages = [a.message for a in only(check(h.history()), "non_monotonic")]
    assert any("outside its positions [0, 1)" in m and "t/0@1" in m for m in messages)
    assert any("back from 3 to 2" in m for m in messages)


def test_order_violation_per_producer_and_partition() -> None:
    h = Hist()
    h.send("p", "t/0", "p:1", 0)
    h.send("q", "t/0", "q:0", 1)
    h.send("p", "t/0", "p:0", 2)  # sent... acknowledged after p:1 yet counted before it
    h.send("q", "t/1", "q:2", 0)
    h.send("q", "t/1", "q:1", 1)
    h.final([D("t/0", 0, "p:1"), D("t/0", 1, "q:0"), D("t/0", 2, "p:0"), D("t/1", 0, "q:2"), D("t/1", 1, "q:1")])
    anomalies = only(check(h.history()), "order_violation")
    assert len(anomalies) == 2
    assert "'p:1'" in anomalies[0].message and "'p:0'" in anomalies[0].message
    assert anomalies[0].records == (RecordRef("p:1", "t", 0, 0), RecordRef("p:0", "t", 0, 2))
    assert "producer 'q'" in anomalies[1].message and "t/1" in anomalies[1].message


def test_order_of_different_producers_and_of_copies_is_free() -> None:
    h = Hist()
    h.send("p", "t/0", "p:0", 1)
    h.send("q", "t/0", "q:5", 0)
    h.final([D("t/0", 0, "q:5"), D("t/0", 1, "p:0")])
    assert_valid(check(h.history()))


def test_copy_mismatch_copy_of_no_input() -> None:
    h = copier_history()
    final = h.ops[-1]
    h.ops[-1] = replace(final, log=(*final.log, D("c/0", 8, "copy:p:7", pid=9), M("c/0", 9, 9)))
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "copy_mismatch"
    assert "'copy:p:7'" in anomaly.message and "c/0@8" in anomaly.message and "absent" in anomaly.message


def test_copy_mismatch_copy_of_an_aborted_input() -> None:
    h = copier_history()
    final = h.ops[-1]
    h.ops[-1] = replace(final, log=(*final.log, D("c/0", 8, "copy:x:0", pid=9), M("c/0", 9, 9)))
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "copy_mismatch"
    assert "'copy:x:0'" in anomaly.message and "aborted at t/0@1" in anomaly.message


def test_copy_mismatch_output_committed_past_the_committed_offset() -> None:
    verdict = check(copier_history(offsets={"t/0": 4}).history())
    (anomaly,) = only(verdict, "copy_mismatch")
    assert "'copy:p:2'" in anomaly.message and "t/0@4" in anomaly.message and "offset 4" in anomaly.message


def test_copy_mismatch_copies_out_of_input_order() -> None:
    h = copier_history()
    final = h.ops[-1]
    swapped = {3: "copy:p:1", 4: "copy:p:0"}
    log = tuple(
        replace(e, payload=swapped[e.offset]) if e.topic == "c" and e.offset in swapped else e for e in final.log
    )
    h.ops[-1] = replace(final, log=log)
    (anomaly,) = only(check(h.history()), "copy_mismatch")
    assert "out of input order" in anomaly.message and "t/0@3" in anomaly.message and "@0" in anomaly.message


def test_offsets_without_output() -> None:
    verdict = check(copier_history(drop_copy=6).history())
    assert kinds(verdict) == {"offsets_without_output", "lost_write"}  # cp#3 acknowledged copy:p:2 too
    (anomaly,) = only(verdict, "offsets_without_output")
    assert "cp#3" in anomaly.message and "'p:2' at t/0@4" in anomaly.message
    assert anomaly.records == (RecordRef("p:2", "t", 0, 4, 13),)


def test_offsets_without_output_by_the_final_offsets() -> None:
    h = copier_history(offsets={"t/0": 6})
    final = h.ops[-1]
    h.ops[-1] = replace(final, log=(*final.log, D("t/0", 5, "p:3")))
    (anomaly,) = check(h.history()).anomalies
    assert anomaly.kind == "offsets_without_output"
    assert "final group offsets" in anomaly.message and "'p:3' at t/0@5" in anomaly.message


# --- output --------------------------------------------------------------------------------------


def _render(verdict: Verdict, **kwargs: Any) -> str:
    console = Console(record=True, width=200, file=io.StringIO(), color_system=None)
    render_verdict(verdict, console, **kwargs)
    return console.export_text()


def test_render_valid() -> None:
    text = _render(check(base().history()))
    assert text.startswith("VALID")
    assert "INVALID" not in text
    assert "writes.acked" in text and "txns.committed" in text


def test_render_invalid_groups_by_kind_and_caps_the_listing() -> None:
    h = base(final=False)
    for i in range(5):
        h.send("p", "t/1", f"p:{10 + i}", 10 + i)
    h.poll("rc2", {"t/0": (4, 5)}, [R("t/0", 4, "x:2")])
    h.final(BASE_LOG)
    text = _render(check(h.history()), limit=3)
    assert text.startswith("INVALID: 6 anomalies (lost_write 5, aborted_read 1)")
    assert "lost_write (5)" in text and "aborted_read (1)" in text
    assert "'p:10'" in text and "'p:12'" in text and "'p:13'" not in text
    assert "... and 2 more lost_write" in text
    assert text.index("lost_write (5)") < text.index("aborted_read (1)")  # KINDS order


def test_render_escapes_markup_in_payloads() -> None:
    h = Hist()
    h.send("p", "t/0", "[bold]p[/bold]:0", 0)
    h.final([])
    assert "'[bold]p[/bold]:0'" in _render(check(h.history()))


def test_verdict_json_round_trip() -> None:
    h = base(final=False)
    h.send("p", "t/1", "p:9", 4)
    h.poll("rc2", {"t/0": (4, 5)}, [R("t/0", 4, "x:2")])
    h.final(BASE_LOG)
    verdict = check(h.history())
    data = json.loads(json.dumps(verdict_to_json(verdict)))
    assert data["valid"] is False
    assert data["counts"] == {"lost_write": 1, "aborted_read": 1}
    assert data["anomalies"][0]["records"][0] == {"payload": "p:9", "topic": "t", "partition": 1, "offset": 4, "op": 15}
    assert verdict_from_json(data) == verdict
    assert verdict_to_json(check(base().history()))["valid"] is True


def test_kinds_are_the_documented_strings() -> None:
    assert KINDS == (
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


# --- a tiny correct store, simulated -------------------------------------------------------------

IN_TPS = [("t", 0), ("t", 1)]
OUT_TPS = [("c", 0), ("c", 1)]
PIDS = {"x1": 101, "x2": 102, "cp": 200}


@dataclass
class SimTxn:
    name: str
    process: str
    f: str
    key: tuple[int, int]
    writes: list[Write] = field(default_factory=list)
    reads: tuple[Read, ...] = ()
    offsets: dict[str, int] = field(default_factory=dict)


class Sim:
    """A correct store, as the design describes it: dense offsets, markers at commit and abort,
    read_committed stopping at the last stable offset and pulled back so that a committed
    transaction is returned on all polled partitions or none, a KIP-447 copier; and the history
    its clients record."""

    def __init__(self) -> None:
        self.h = Hist()
        self.log: dict[tuple[str, int], list[LogEntry]] = {tp: [] for tp in IN_TPS + OUT_TPS}
        self.txn_of: dict[tuple[str, int, int], tuple[int, int]] = {}  # data record -> (pid, number)
        self.open: dict[str, SimTxn] = {}
        self.counters: Counter[str] = Counter()
        self.numbers: Counter[int] = Counter()
        self.positions: dict[str, dict[tuple[str, int], int]] = {
            "rc": dict.fromkeys(IN_TPS + OUT_TPS, 0),
            "ru": dict.fromkeys(IN_TPS + OUT_TPS, 0),
        }
        self.group: dict[tuple[str, int], int] = dict.fromkeys(IN_TPS, 0)

    def payload(self, process: str) -> str:
        self.counters[process] += 1
        return f"{process}:{self.counters[process] - 1}"

    def append(self, tp: tuple[str, int], payload: str | None, key: tuple[int, int] | None = None) -> int:
        offset = len(self.log[tp])
        pid = key[0] if key else None
        self.log[tp].append(LogEntry(tp[0], tp[1], offset, payload, None, key is not None, False, pid))
        if key is not None:
            self.txn_of[(tp[0], tp[1], offset)] = key
        return offset

    def send(self, process: str, partition: int, outcome: str) -> None:
        payload = self.payload(process)
        where = f"t/{partition}"
        offset = self.append(("t", partition), payload) if outcome in ("ok", "info_landed", "none_landed") else None
        completion = {"ok": "ok", "fail": "fail", "none_landed": None}.get(outcome, "info")
        self.h.send(process, where, payload, offset, completion)

    def begin(self, process: str, partitions: Sequence[int], per_partition: int) -> None:
        if process in self.open:
            return
        pid = PIDS[process]
        self.numbers[pid] += 1
        txn = SimTxn(f"{process}#{self.numbers[pid]}", process, "txn", (pid, self.numbers[pid]))
        for partition in partitions:
            for _ in range(per_partition):
                payload = self.payload(process)
                offset = self.append(("t", partition), payload, txn.key)
                txn.writes.append(Write("t", partition, payload, offset))
        self.h.add(process, "invoke", "txn", txn=txn.name, writes=tuple(replace(w, offset=None) for w in txn.writes))
        self.open[process] = txn

    def decide(self, txn: SimTxn, commit: bool) -> None:
        """The coordinator's commit or abort: markers everywhere, aborted flags on an abort."""
        touched = sorted({(w.topic, w.partition) for w in txn.writes})
        if not commit:
            for pos, key in self.txn_of.items():
                if key == txn.key:
                    tp = (pos[0], pos[1])
                    self.log[tp][pos[2]] = replace(self.log[tp][pos[2]], aborted=True)
        for tp in touched:
            offset = len(self.log[tp])
            self.log[tp].append(
                LogEntry(tp[0], tp[1], offset, None, "commit" if commit else "abort", True, False, txn.key[0])
            )

    def end(self, process: str, outcome: str) -> None:
        txn = self.open.pop(process, None)
        if txn is None:
            return
        decision, _, report = outcome.partition("-")
        self.decide(txn, decision == "commit")
        self.complete(txn, report)

    def complete(self, txn: SimTxn, report: str) -> None:
        if report == "none":
            return  # the client was killed after the decision
        writes = tuple(txn.writes) if report == "ok" else tuple(replace(w, offset=None) for w in txn.writes)
        extra: dict[str, Any] = {"reads": txn.reads, "offsets": txn.offsets} if txn.f == "copy" else {}
        self.h.add(txn.process, report, txn.f, txn=txn.name, writes=writes, **extra)

    def visible(self, tp: tuple[str, int], offset: int, rc: bool) -> bool:
        e = self.log[tp][offset]
        return e.control is None and not (rc and e.aborted)

    def fetch(
        self, positions: dict[tuple[str, int], int], rc: bool, cap: int
    ) -> dict[tuple[str, int], tuple[list[Read], int]]:
        """fetch_v3 (Consumer.poll): one snapshot over many partitions."""
        open_keys = {t.key for t in self.open.values()}
        limits: dict[tuple[str, int], int] = {}
        for tp in positions:
            end = len(self.log[tp])
            lso = min((o for o in range(end) if self.txn_of.get((*tp, o)) in open_keys), default=end)
            limits[tp] = lso if rc else end
        if rc:
            scan_end: dict[tuple[str, int], int] = {}
            for tp, pos in positions.items():
                shown = [o for o in range(pos, limits[tp]) if self.visible(tp, o, rc)]
                scan_end[tp] = shown[cap - 1] + 1 if len(shown) >= cap else limits[tp]
            changed = True
            while changed:  # consistent_limits_v1
                changed = False
                for tp, pos in positions.items():
                    here = {
                        self.txn_of[(*tp, o)]
                        for o in range(pos, min(limits[tp], scan_end[tp]))
                        if (*tp, o) in self.txn_of and self.visible(tp, o, rc)
                    }
                    torn = {
                        k
                        for k in here
                        if any(
                            self.txn_of.get((*tp2, o2)) == k
                            for tp2 in positions
                            for o2 in range(limits[tp2], len(self.log[tp2]))
                        )
                    }
                    cut = min((o for o in range(pos, limits[tp]) if self.txn_of.get((*tp, o)) in torn), default=None)
                    if cut is not None and cut < limits[tp]:
                        limits[tp] = cut
                        changed = True
        out: dict[tuple[str, int], tuple[list[Read], int]] = {}
        for tp, pos in positions.items():
            shown = [o for o in range(pos, limits[tp]) if self.visible(tp, o, rc)][:cap]
            out[tp] = ([Read(tp[0], tp[1], o, self.log[tp][o].payload or "") for o in shown], limits[tp])
        return out

    @staticmethod
    def advance(positions: dict[tuple[str, int], int], result: dict[tuple[str, int], tuple[list[Read], int]]) -> None:
        """The Consumer's position update after a fetch."""
        for tp, (reads, limit) in result.items():
            positions[tp] = reads[-1].offset + 1 if reads else max(positions[tp], limit)

    def poll(self, reader: str, cap: int) -> None:
        positions = self.positions[reader]
        before = dict(positions)
        rc = reader == "rc"
        result = self.fetch(positions, rc, cap)
        self.advance(positions, result)
        reads = [r for tp in positions for r in result[tp][0]]
        self.h.poll(
            reader,
            {tp_key(*tp): (before[tp], positions[tp]) for tp in positions},
            reads,
            isolation="read_committed" if rc else "read_uncommitted",
        )

    def copy(self, outcome: str, cap: int) -> None:
        """One copy transaction of a copier that (re)starts from the group's committed offsets."""
        positions = dict(self.group)
        result = self.fetch(positions, True, cap)
        self.advance(positions, result)
        reads = tuple(r for tp in IN_TPS for r in result[tp][0])
        if not reads:
            return
        pid = PIDS["cp"]
        self.numbers[pid] += 1
        txn = SimTxn(f"cp#{self.numbers[pid]}", "cp", "copy", (pid, self.numbers[pid]), reads=reads)
        txn.offsets = {tp_key(*tp): positions[tp] for tp in IN_TPS}
        self.h.add("cp", "invoke", "copy", txn=txn.name)
        for r in reads:
            offset = self.append(("c", r.partition), "copy:" + r.payload, txn.key)
            txn.writes.append(Write("c", r.partition, "copy:" + r.payload, offset))
        decision, _, report = outcome.partition("-")
        self.decide(txn, decision == "commit")
        if decision == "commit":
            self.group = positions
        self.complete(txn, report)

    def finish(self) -> list[Op]:
        log = [e for tp in IN_TPS + OUT_TPS for e in self.log[tp]]
        self.h.final(log, {tp_key(*tp): o for tp, o in self.group.items() if o})
        return self.h.ops


OUTCOMES = ["commit-ok", "commit-info", "commit-none", "abort-fail", "abort-info", "abort-none"]
steps = st.one_of(
    st.tuples(
        st.just("send"),
        st.sampled_from(["p1", "p2"]),
        st.integers(0, 1),
        st.sampled_from(["ok", "info_landed", "info_lost", "fail", "none_landed"]),
    ),
    st.tuples(
        st.just("begin"), st.sampled_from(["x1", "x2"]), st.sampled_from([(0,), (1,), (0, 1)]), st.integers(1, 2)
    ),
    st.tuples(st.just("end"), st.sampled_from(["x1", "x2"]), st.sampled_from(OUTCOMES)),
    st.tuples(st.just("poll"), st.sampled_from(["rc", "ru"]), st.integers(1, 3)),
    st.tuples(st.just("copy"), st.sampled_from(OUTCOMES), st.integers(1, 3)),
)


def simulate(plan: Sequence[tuple[Any, ...]]) -> list[Op]:
    """A run: a fixed prologue (so every injection has a target), the plan, final polls."""
    sim = Sim()
    sim.send("p1", 0, "ok")
    sim.send("p1", 0, "ok")
    sim.send("p1", 1, "ok")
    sim.begin("x1", (0, 1), 1)
    sim.end("x1", "commit-ok")
    sim.begin("x2", (0, 1), 1)
    sim.end("x2", "abort-fail")
    sim.poll("rc", 10)
    sim.poll("ru", 10)
    sim.copy("commit-ok", 10)
    sim.poll("rc", 10)
    for step in plan:
        match step:
            case ("send", process, partition, outcome):
                sim.send(process, partition, outcome)
            case ("begin", process, partitions, n):
                sim.begin(process, partitions, n)
            case ("end", process, outcome):
                sim.end(process, outcome)
            case ("poll", reader, cap):
                sim.poll(reader, cap)
            case ("copy", outcome, cap):
                sim.copy(outcome, cap)
    sim.poll("rc", 100)
    sim.poll("ru", 100)
    return sim.finish()


def test_simulated_store_sanity() -> None:
    """The simulator is what the property tests rest on: check a run of it by hand."""
    ops = simulate([("begin", "x1", (0, 1), 1), ("send", "p2", 0, "ok"), ("poll", "rc", 5), ("end", "x1", "commit-ok")])
    final = ops[-1]
    payloads = [(e.topic, e.partition, e.offset, e.payload, e.control, e.aborted) for e in final.log if e.topic == "t"]
    assert payloads[:6] == [
        ("t", 0, 0, "p1:0", None, False),
        ("t", 0, 1, "p1:1", None, False),
        ("t", 0, 2, "x1:0", None, False),
        ("t", 0, 3, None, "commit", False),
        ("t", 0, 4, "x2:0", None, True),
        ("t", 0, 5, None, "abort", False),
    ]
    polls = [op for op in ops if op.f == "poll" and op.type is OpType.OK and op.process == "rc"]
    # The poll during the open x1#2 stopped at its first offset on t/0 (the last stable offset),
    # and did not return p2:0, which lies above it.
    during = polls[2]
    assert during.positions["t/0"][1] == 6
    assert "p2:0" not in {r.payload for r in during.reads}
    assert "p2:0" in {r.payload for r in polls[3].reads}
    assert final.offsets == {"t/0": 3, "t/1": 2}
    assert_valid(check(History(ops)))


def test_simulated_torn_transaction_is_withheld_everywhere() -> None:
    # x1 holds t/0 open; x2 then commits on t/0 and t/1: read_committed must not show x2 on t/1.
    ops = simulate(
        [("begin", "x1", (0,), 1), ("begin", "x2", (0, 1), 1), ("end", "x2", "commit-ok"), ("poll", "rc", 5)]
    )
    during = [op for op in ops if op.f == "poll" and op.process == "rc" and op.type is OpType.OK][2]
    assert not any(r.payload.startswith("x2:") for r in during.reads)
    assert_valid(check(History(ops)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, max_size=25))
def test_property_correct_store_is_always_valid(plan: list[tuple[Any, ...]]) -> None:
    assert_valid(check(History(simulate(plan))))


# --- injections: one anomaly into a correct history ----------------------------------------------


def _final(ops: list[Op]) -> Op:
    return ops[-1]


def _set_log(ops: list[Op], log: Iterable[LogEntry]) -> list[Op]:
    return [*ops[:-1], replace(ops[-1], log=tuple(log))]


def _acked_positions(ops: list[Op], f: Iterable[str] = ("send", "txn", "copy")) -> list[tuple[str, int, int]]:
    return [
        (w.topic, w.partition, w.offset)
        for op in ops
        if op.type is OpType.OK and op.f in f
        for w in op.writes
        if w.offset is not None
    ]


def _rc_polls(ops: list[Op]) -> list[Op]:
    return [
        op for op in ops if op.f == "poll" and op.type is OpType.OK and op.isolation == "read_committed" and op.reads
    ]


def inject_drop_acked(ops: list[Op], data: st.DataObject) -> list[Op]:
    pos = data.draw(st.sampled_from(_acked_positions(ops)))
    return _set_log(ops, [e for e in _final(ops).log if (e.topic, e.partition, e.offset) != pos])


def inject_duplicate(ops: list[Op], data: st.DataObject) -> list[Op]:
    pos = data.draw(st.sampled_from(_acked_positions(ops)))
    log = list(_final(ops).log)
    (entry,) = [e for e in log if (e.topic, e.partition, e.offset) == pos]
    end = max(e.offset for e in log if (e.topic, e.partition) == pos[:2]) + 1
    return _set_log(ops, [*log, replace(entry, offset=end, transactional=False, producer_id=None)])


def inject_flip_aborted(ops: list[Op], data: st.DataObject) -> list[Op]:
    read = data.draw(st.sampled_from([r for op in _rc_polls(ops) for r in op.reads]))
    return _set_log(
        ops,
        [
            replace(e, aborted=True)
            if (e.topic, e.partition, e.offset) == (read.topic, read.partition, read.offset)
            else e
            for e in _final(ops).log
        ],
    )


def inject_show_aborted(ops: list[Op], data: st.DataObject) -> list[Op]:
    aborted = data.draw(st.sampled_from([e for e in _final(ops).log if e.aborted]))
    poll = data.draw(st.sampled_from(_rc_polls(ops)))
    read = Read(aborted.topic, aborted.partition, aborted.offset, aborted.payload or "")
    out = list(ops)
    out[poll.index] = replace(poll, reads=(*poll.reads, read))
    return out


def inject_skip_read(ops: list[Op], data: st.DataObject) -> list[Op]:
    polls = [op for op in ops if op.f == "poll" and op.type is OpType.OK and op.reads]
    poll = data.draw(st.sampled_from(polls))
    drop = data.draw(st.integers(0, len(poll.reads) - 1))
    out = list(ops)
    out[poll.index] = replace(poll, reads=poll.reads[:drop] + poll.reads[drop + 1 :])
    return out


def inject_reorder_reads(ops: list[Op], data: st.DataObject) -> list[Op]:
    candidates = [
        (op, i)
        for op in ops
        if op.f == "poll" and op.type is OpType.OK
        for i in range(len(op.reads) - 1)
        if (op.reads[i].topic, op.reads[i].partition) == (op.reads[i + 1].topic, op.reads[i + 1].partition)
    ]
    poll, i = data.draw(st.sampled_from(candidates))
    reads = list(poll.reads)
    reads[i], reads[i + 1] = reads[i + 1], reads[i]
    out = list(ops)
    out[poll.index] = replace(poll, reads=tuple(reads))
    return out


def inject_swap_in_log(ops: list[Op], data: st.DataObject) -> list[Op]:
    # p1:0 and p1:1 are both in t/0 (the prologue): swap them and any later pair of one producer.
    log = list(_final(ops).log)
    pairs = [
        (i, j)
        for i, a in enumerate(log)
        for j, b in enumerate(log)
        if i < j
        and a.payload
        and b.payload
        and not a.payload.startswith("copy:")
        and (a.topic, a.partition) == (b.topic, b.partition)
        and a.payload.rpartition(":")[0] == b.payload.rpartition(":")[0]
    ]
    i, j = data.draw(st.sampled_from(pairs))
    log[i], log[j] = replace(log[i], payload=log[j].payload), replace(log[j], payload=log[i].payload)
    return _set_log(ops, log)


def inject_drop_copy(ops: list[Op], data: st.DataObject) -> list[Op]:
    pos = data.draw(st.sampled_from(_acked_positions(ops, ("copy",))))
    return _set_log(ops, [e for e in _final(ops).log if (e.topic, e.partition, e.offset) != pos])


def inject_phantom_copy(ops: list[Op], data: st.DataObject) -> list[Op]:
    pos = data.draw(st.sampled_from(_acked_positions(ops, ("copy",))))
    return _set_log(
        ops,
        [
            replace(e, payload="copy:nobody:0") if (e.topic, e.partition, e.offset) == pos else e
            for e in _final(ops).log
        ],
    )


def inject_fail_committed(ops: list[Op], data: st.DataObject) -> list[Op]:
    op = data.draw(st.sampled_from([o for o in ops if o.f == "txn" and o.type is OpType.OK]))
    out = list(ops)
    out[op.index] = replace(op, type=OpType.FAIL)
    return out


def inject_future_read(ops: list[Op], data: st.DataObject) -> list[Op]:
    # A poll at the very start returns a record of a transaction invoked later.
    acked = [(w, op) for op in ops if op.f == "txn" and op.type is OpType.OK for w in op.writes]
    w, _ = data.draw(st.sampled_from(acked))
    assert w.offset is not None
    early = [
        Op(0, "early", OpType.INVOKE, "poll", 0, isolation="read_committed"),
        Op(
            1,
            "early",
            OpType.OK,
            "poll",
            0,
            isolation="read_committed",
            positions={tp_key(w.topic, w.partition): (w.offset, w.offset + 1)},
            reads=(Read(w.topic, w.partition, w.offset, w.payload),),
        ),
    ]
    return [*early, *(replace(op, index=op.index + 2) for op in ops)]


def inject_torn_read(ops: list[Op], data: st.DataObject) -> list[Op]:
    # The prologue's first read_committed poll returned x1#1 on t/0 and t/1: hide the t/1 half.
    poll = _rc_polls(ops)[0]
    out = list(ops)
    out[poll.index] = replace(poll, reads=tuple(r for r in poll.reads if r.payload != "x1:1"))
    return out


INJECTIONS = {
    "drop_acked": (inject_drop_acked, "lost_write"),
    "duplicate": (inject_duplicate, "duplicate"),
    "flip_aborted": (inject_flip_aborted, "aborted_read"),
    "show_aborted": (inject_show_aborted, "aborted_read"),
    "skip_read": (inject_skip_read, "offset_gap"),
    "reorder_reads": (inject_reorder_reads, "non_monotonic"),
    "swap_in_log": (inject_swap_in_log, "order_violation"),
    "drop_copy": (inject_drop_copy, "offsets_without_output"),
    "phantom_copy": (inject_phantom_copy, "copy_mismatch"),
    "fail_committed": (inject_fail_committed, "aborted_read"),
    "future_read": (inject_future_read, "undecided_read"),
    "torn_read": (inject_torn_read, "partial_txn"),
}


@pytest.mark.parametrize("name", sorted(INJECTIONS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(steps, max_size=15), data=st.data())
def test_property_injected_anomaly_is_caught(name: str, plan: list[tuple[Any, ...]], data: st.DataObject) -> None:
    inject, kind = INJECTIONS[name]
    ops = simulate(plan)
    assert_valid(check(History(ops)))
    verdict = check(History(inject(ops, data)))
    assert kind in kinds(verdict), f"{name}: expected {kind}, got {verdict.anomalies}"
    assert not verdict.ok
