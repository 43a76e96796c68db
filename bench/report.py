"""The benchmark report: every figure of the benchmarks beside its raw-PostgreSQL baseline and the ratio,
plots, the machine and the run, and a headline table held against the issue's targets.

    .venv/bin/python -m bench.report --results bench/results --out docs/bench [--update-readme [README]]

Reads ``<results>/<name>.json`` for every benchmark of ``BENCHMARKS`` (what ``bench/run``
writes) and writes ``<out>/report.md`` with its PNG plots beside it (matplotlib, Agg, no display needed). A
benchmark without results is reported as such, never fatal: ``bench/run`` leaves ``<name>.failed`` (its exit
status and the end of its stderr) or ``<name>.skipped`` in place of the JSON. With ``--update-readme`` the
README's block between the ``bench:headline`` markers becomes the headline table, when every benchmark has results
and none comes from a ``--quick`` run (those numbers measure nothing, so they never reach the README).

The report is a pure function of the JSON: rendering the same results again writes the same files.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS: dict[str, str] = {
    "produce": "produce throughput and latency (bench/produce.py)",
    "transactions": "transactions, commit latency, reads (bench/transactions.py)",
    "pipeline": "consume-transform-produce, wake-up, NOTIFY (bench/pipeline.py)",
    "spark": "Spark reads and the exactly-once Spark pipeline (bench/spark.py)",
    "groups": "consumer groups through a rebalance (bench/groups.py)",
    "outbox": "records in the application's own transaction (bench/outbox.py)",
    "broker": "Kafka's own client through oncelog broker (bench/broker.py)",
    "replication": "synchronous replication to a quorum against the server alone (bench/replication.py)",
    "storage": "bytes per record and the cost of retention, scaled to 100M records (bench/storage.py)",
    "compaction": "compaction's rate, and producers writing beside it (bench/compaction.py)",
}
START_MARKER = "<!-- bench:headline:start -->"
END_MARKER = "<!-- bench:headline:end -->"

# The issue's targets. The benchmarks record theirs in their JSON headline (preferred when present);
# these are the fallbacks, for results written before a benchmark recorded its target.
PRODUCE_TARGET = 0.8  # the store call against the raw ceiling (#16; 0.5 against binary COPY before)
PRODUCER_TARGET = 0.8  # the tuned Producer against the store call (#16)
DEFAULTS_TARGET = 0.7  # Producer(url) with nothing set against the tuned Producer (#16)
PRODUCE_LATENCY_TARGET = 2.0  # Producer single-record p50, at most this many times a raw single-row write's (#16)
TXN_TARGET = 0.9
TXN100_TARGET = 0.8  # 100-record transactions on 4 partitions against the idempotent producer (#16)
COMMIT_TARGET = 2.0  # commit p50 of 10 records on 4 partitions, at most this many times a raw 10-row write's (#16)
READ_TARGET = 0.7  # store.log.fetch_many read_committed against a raw binary SELECT
CONSUMER_TARGET = 0.8  # Consumer.poll read_committed against a raw binary SELECT (#16; 0.7 before)
SPARK_TARGET = 0.8
WRITE_BACK_TARGET = 0.5  # Spark's write-back against a raw JVM JDBC write of the same rows (#16)
BROKER_TARGET = 0.7  # confluent-kafka's producer through oncelog broker against the store call (#19)

ORACLE = "raw PostgreSQL baseline (same run)"

# Titles of the rows the benchmarks measure, in the order the benchmarks report them.
READ_TITLES = {
    "raw": "raw SELECT, binary (baseline)",
    "raw_text": "raw SELECT, text format (diagnostic)",
    "fetch_v3": "fetch_v3 SQL function, rows as tuples (diagnostic)",
    "fetch_rc": "store.log.fetch_many, read_committed",
    "fetch_ru": "store.log.fetch_many, read_uncommitted",
    "consumer_rc": "Consumer.poll, read_committed",
    "consumer_ru": "Consumer.poll, read_uncommitted",
}
#: Commit-latency cases and the raw writes each is held against: an EndTxn alone is one round trip and
#: one commit (a single-row write); a commit that still writes 10 records is held against a 10-row write.
COMMIT_CASES = {
    "empty": ("commit_transaction, empty transaction (EndTxn only)", "raw_one"),
    "ten_flushed": ("commit_transaction, 10 records already flushed (EndTxn only)", "raw_one"),
    "ten_1p": ("commit_transaction, 10 records lingering, 1 partition", "raw_ten"),
    "ten_4p": ("commit_transaction, 10 records lingering, 4 partitions", "raw_ten"),
}
#: The raw writes of the commit latencies, by baseline: the INSERT, and (since #16) the binary COPY of the
#: same rows beside it; the faster by p50 is the baseline (older results hold the INSERT alone).
RAW_COMMIT = {
    "raw_one": {"raw_one": "single-row INSERT", "raw_one_copy": "single-row binary COPY"},
    "raw_ten": {"raw_ten": "10-row INSERT ... unnest", "raw_ten_copy": "10-row binary COPY"},
}
PRODUCE_LATENCY = {
    "producer": "Producer (linger_ms=0): send + wait for the future",
    "store": "store.log.produce, 1 record, autocommit",
}
#: The kinds of a produce case whose client cost is reported, and their short names.
CLIENT_COST_KINDS = {
    "raw_copy": "COPY",
    "raw_unnest": "unnest",
    "store": "store call",
    "producer": "Producer",
    "producer_defaults": "Producer(url)",
    "producer_aio": "oncelog.aio.Producer",
}
#: The raw single-row writes of the produce latency, by their JSON key (older results hold the INSERT alone).
PRODUCE_RAW_LATENCY = {"raw": "single-row INSERT", "raw_copy": "single-row binary COPY"}
NOTIFY_MODES = {
    "plain": "INSERT",
    "notify": "INSERT + NOTIFY, no listener",
    "notify_listened": "INSERT + NOTIFY, 1 listening session",
}

# Errors a result of an unexpected shape (an older benchmark, a hand-edited file) raises while rendered:
# the section says so, the rest of the report is still written.
SHAPE_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError)


# --- loading ------------------------------------------------------------------------------------


Status = Literal["ok", "failed", "skipped", "missing", "unreadable"]


@dataclass(frozen=True)
class Outcome:
    """What one benchmark left in the results folder: its JSON, or why there is none."""

    name: str
    status: Status
    result: dict[str, Any] | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.result is not None

    @property
    def quick(self) -> bool:
        return bool(self.ok and self.result and self.result.get("quick"))

    def why(self) -> str:
        """Why the benchmark has no figures, in a phrase (empty when it has them)."""
        if self.ok:
            return ""
        what = {
            "failed": "failed",
            "skipped": "was skipped",
            "missing": "has no results",
            "unreadable": "left unreadable results",
        }[self.status]
        return f"the {self.name} benchmark {what}" + (f" ({self.detail})" if self.detail else "")


def load_outcome(results: Path, name: str) -> Outcome:
    """Read ``<name>.json``; without it, the ``.failed`` or ``.skipped`` note ``bench/run`` leaves."""
    path = results / f"{name}.json"
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            return Outcome(name, "unreadable", detail=f"{path.name}: {exc}")
        if not isinstance(data, dict):
            return Outcome(name, "unreadable", detail=f"{path.name}: not a JSON object")
        return Outcome(name, "ok", data)
    failed = results / f"{name}.failed"
    if failed.exists():
        lines = [line.strip() for line in failed.read_text(errors="replace").splitlines() if line.strip()]
        # First line: "exit N" (bench/run); the last line of the stderr tail is usually the exception.
        detail = lines[0] if lines else "no details"
        if len(lines) > 1:
            detail += f": {lines[-1]}"
        return Outcome(name, "failed", detail=_clip(detail, 300))
    skipped = results / f"{name}.skipped"
    if skipped.exists():
        return Outcome(name, "skipped", detail=_clip(skipped.read_text(errors="replace").strip(), 300))
    return Outcome(name, "missing", detail=f"no {path.name} in {results}")


def load_outcomes(results: Path) -> dict[str, Outcome]:
    return {name: load_outcome(results, name) for name in BENCHMARKS}


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split()).replace("|", "/")  # one line, and no table-breaking pipes
    return text if len(text) <= n else text[: n - 3] + "..."


# --- numbers ------------------------------------------------------------------------------------


def compact(x: float) -> str:
    """A rate in three significant figures or so: 189k, 11.9k, 946, 1.23M."""
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e5:
        return f"{x / 1e3:.0f}k"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    if x >= 10:
        return f"{x:.0f}"
    return f"{x:.2g}"


def ms(x: float) -> str:
    """Milliseconds with precision that matches their size."""
    if abs(x) < 10:
        return f"{x:.2f}"
    if abs(x) < 100:
        return f"{x:.1f}"
    return f"{x:.0f}"


def times(value: float, baseline: float) -> str:
    """A latency against its baseline: how many times the baseline's time (lower is better)."""
    if baseline <= 0:
        return "-"
    r = value / baseline
    return f"{r:.1f}x" if r < 10 else f"{r:.0f}x"


def ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def verdict(value: float | None, target: float | None, missing: str = "", *, at_most: bool = False) -> str:
    """met / not met against a ``>=`` target (``at_most``: a ``<=`` one, for a latency as a multiple of its
    baseline); '' for a figure without a target; 'not measured' when missing."""
    if missing:
        return "not measured"
    if target is None:
        return ""  # a figure reported for what it is, held to no target
    if value is None:
        return "not measured"
    return "met" if (value <= target if at_most else value >= target) else "not met"


def _span(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    lo, hi = min(values), max(values)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}-{fmt(hi)}"


def _size(value_size: int) -> str:
    return "1KiB" if value_size == 1024 else f"{value_size}B"


def _when(result: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(result["when"]))
    except (KeyError, ValueError):
        return None


# --- headline -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Headline:
    """One row of the headline table: a figure, its baseline, the ratio, and the target it is held to."""

    what: str
    oncelog: str = ""
    baseline: str = ""
    ratio: str = ""
    target: float | None = None
    #: The figure held against the target (the lowest ratio when the row shows several).
    value: float | None = None
    #: Why the row has no figures (a benchmark failed, was skipped, or a reader made no progress).
    missing: str = ""
    #: A short name for the summary line.
    name: str = ""
    #: The row shows several cases' ratios and the target holds for the lowest.
    several: bool = False
    #: The target is a ceiling: a latency, at most ``target`` times its baseline's.
    at_most: bool = False
    #: The target is a figure in this unit (``ms``), not a multiple or ratio of a baseline.
    unit: str = ""

    @property
    def status(self) -> str:
        return verdict(self.value, self.target, self.missing, at_most=self.at_most)

    def shown(self) -> str:
        """The figure held to the target, as the summary writes it: 0.81, 4.0x for a latency, 3.2 ms."""
        if self.value is None:
            return "-"
        if self.unit:
            return f"{self.value:.3g} {self.unit}"
        return times(self.value, 1.0) if self.at_most else f"{self.value:.2f}"

    def goal(self) -> str:
        """The target as the table writes it: '>= 0.8', '<= 2x' for a latency, '<= 5 ms'."""
        if self.unit:
            return f"{'<=' if self.at_most else '>='} {self.target:g} {self.unit}"
        return f"<= {self.target:g}x" if self.at_most else f">= {self.target:g}"

    def target_cell(self) -> str:
        status = self.status
        if status == "not measured":
            return f"not measured: {self.missing}" if self.missing else "not measured"
        if self.target is None:
            return ""
        return f"{self.goal()}{' (lowest)' if self.several else ''}: **{status}**"


#: #16's targets for the pipeline: twice the consume-transform-produce rates of the last report before
#: it (docs/bench/report.md of 2026-11-21, commit f3069ea), by member count; a waiting consumer woken
#: within 5 ms (p50) with default settings.
PIPELINE_BEFORE_16 = {1: 15_643.0, 4: 21_032.0}
PIPELINE_TARGET = 2.0
WAKE_TARGET_MS = 5.0
#: The waiting consumers of bench/pipeline.py, by their key (older results: fetch_max_backoff_ms alone).
WAITER_TITLES = {
    "200": "Consumer, defaults (listens; polls 5..200 ms)",
    "200-polling": "Consumer, polling only, fetch_max_backoff_ms=200",
    "5-polling": "Consumer, polling only, fetch_max_backoff_ms=5",
}
WAITER_SHORT = {"200": "defaults", "200-polling": "polling 200 ms", "5-polling": "polling 5 ms"}


#: The raw writes of the produce ceiling, by their JSON key, as the tables name them (older results hold
#: binary COPY alone, as "raw").
RAW_SHORT = {"raw_copy": "COPY", "raw_unnest": "unnest"}


def raw_copy(case: dict[str, Any]) -> dict[str, Any]:
    """A produce case's binary COPY run (older results call it "raw")."""
    copy: dict[str, Any] = case["raw_copy"] if "raw_copy" in case else case["raw"]
    return copy


def ceiling(case: dict[str, Any]) -> tuple[float, str]:
    """A produce case's raw ceiling (records/s) and the raw write that set it: the faster of binary COPY and
    INSERT ... unnest in each run; binary COPY alone in results from before the unnest baseline."""
    ceil = case.get("ceiling")
    if ceil is None:
        return raw_copy(case)["records_per_s"], "raw_copy"
    return ceil["records_per_s"], ceil["faster"]


def _has_unnest(cases: Sequence[dict[str, Any]]) -> bool:
    return all("raw_unnest" in c for c in cases)


def produce_headlines(res: dict[str, Any]) -> list[Headline]:
    cases = [c for c in res["cases"] if c["batch"] == 1000]
    target = (res.get("headline") or {}).get("target", PRODUCE_TARGET)
    rows: list[Headline] = []
    if cases:
        names = ", ".join(f"{_size(c['value_size'])}/{c['partitions']}p" for c in cases)
        ceilings = [ceiling(c) for c in cases]
        if _has_unnest(cases):
            rows.append(
                Headline(
                    f"raw write ceiling, 1000-record batches: binary COPY and INSERT ... unnest, {names}",
                    "",
                    "COPY "
                    + ", ".join(compact(raw_copy(c)["records_per_s"]) for c in cases)
                    + "; unnest "
                    + ", ".join(compact(c["raw_unnest"]["records_per_s"]) for c in cases)
                    + "; the faster: "
                    + ", ".join(RAW_SHORT[faster] for _, faster in ceilings),
                    "unnest / COPY " + ", ".join(ratio(c["ceiling"]["ratio_unnest_copy"]) for c in cases),
                    name="the raw ceiling",
                )
            )
        else:
            rows.append(
                Headline(
                    f"raw write ceiling, 1000-record batches, {names}",
                    "",
                    "binary COPY " + ", ".join(compact(rate) for rate, _ in ceilings),
                    "",
                    missing="INSERT ... unnest not measured (results from before it): the ceiling is binary COPY",
                )
            )
        rows += [
            Headline(
                f"idempotent produce, 1000-record batches (store call) vs the raw ceiling: {names}",
                ", ".join(compact(c["store"]["records_per_s"]) for c in cases) + " records/s",
                "ceiling " + ", ".join(f"{compact(rate)} {RAW_SHORT[faster]}" for rate, faster in ceilings),
                ", ".join(ratio(c["ratio_store"]) for c in cases),
                target,
                min(c["ratio_store"] for c in cases),
                name="idempotent produce (store call) at 1000-record batches",
                several=len(cases) > 1,
            ),
            *producer_headlines(res, cases, names),
        ]
    else:
        rows.append(Headline("idempotent produce, 1000-record batches", missing="no 1000-record case in the results"))
    lat = res.get("latency")
    if lat:
        p = lat["producer"]
        base_name, r = fastest(lat, PRODUCE_RAW_LATENCY)
        rows.append(
            Headline(
                "single-record produce latency p50 / p99 (Producer, linger 0)",
                f"{ms(p['p50_ms'])} / {ms(p['p99_ms'])} ms",
                f"{ms(r['p50_ms'])} / {ms(r['p99_ms'])} ms ({base_name})",
                f"{times(p['p50_ms'], r['p50_ms'])} / {times(p['p99_ms'], r['p99_ms'])}",
                _goal(res, "latency_p50", PRODUCE_LATENCY_TARGET),
                round(p["p50_ms"] / r["p50_ms"], 2),
                name="single-record produce latency p50",
                at_most=True,
            )
        )
    return rows


def _goal(res: dict[str, Any], key: str, default: float) -> float:
    """The target ``key`` as the benchmark recorded it in its headline, else ``default`` (older results)."""
    recorded = _dict(_dict(_dict(res.get("headline")).get("targets")).get(key))
    goal = recorded.get("target", default)
    return float(goal)


def _cost(cases: Sequence[dict[str, Any]], kind: str, figure: str, fmt: Callable[[float], str]) -> str:
    return _span([c[kind][figure] for c in cases], fmt)


def producer_headlines(res: dict[str, Any], cases: Sequence[dict[str, Any]], names: str) -> list[Headline]:
    """The Producer at 1000-record batches: against the store call, with nothing set, and its client cost."""
    if not all("ratio_producer_store" in c for c in cases):
        # Results from before #16: the Producer against the ceiling, held to nothing.
        return [
            Headline(
                "same through the Producer API",
                _span([c["producer"]["records_per_s"] for c in cases], compact) + " records/s",
                "ceiling (as above)",
                _span([c["ratio_producer"] for c in cases], ratio),
                name="the Producer API",
            )
        ]
    rows = [
        Headline(
            f"Producer (tuned: full 1000-record batches) vs the store call: {names}",
            ", ".join(compact(c["producer"]["records_per_s"]) for c in cases) + " records/s",
            "store call " + ", ".join(compact(c["store"]["records_per_s"]) for c in cases),
            ", ".join(ratio(c["ratio_producer_store"]) for c in cases),
            _goal(res, "producer_vs_store", PRODUCER_TARGET),
            min(c["ratio_producer_store"] for c in cases),
            name="the Producer against the store call",
            several=len(cases) > 1,
        )
    ]
    if all("ratio_defaults_tuned" in c for c in cases):
        rows.append(
            Headline(
                f"Producer(url), nothing set, vs the tuned Producer: {names}",
                ", ".join(compact(c["producer_defaults"]["records_per_s"]) for c in cases) + " records/s",
                "tuned " + ", ".join(compact(c["producer"]["records_per_s"]) for c in cases),
                ", ".join(ratio(c["ratio_defaults_tuned"]) for c in cases)
                + " (of the store call: "
                + ", ".join(ratio(c["ratio_defaults_store"]) for c in cases)
                + ")",
                _goal(res, "defaults_vs_tuned", DEFAULTS_TARGET),
                min(c["ratio_defaults_tuned"] for c in cases),
                name="the Producer's defaults against the tuned Producer",
                several=len(cases) > 1,
            )
        )
    if all("ratio_aio_producer" in c for c in cases):
        rows.append(
            Headline(
                f"oncelog.aio.Producer (tuned, from one coroutine) vs the Producer: {names}",
                ", ".join(compact(c["producer_aio"]["records_per_s"]) for c in cases) + " records/s",
                "Producer " + ", ".join(compact(c["producer"]["records_per_s"]) for c in cases),
                ", ".join(ratio(c["ratio_aio_producer"]) for c in cases),
                name="the asyncio Producer against the Producer",
                several=len(cases) > 1,
            )
        )
    if all("client_cpu_us_per_record" in c["producer"] for c in cases):
        cpu = "client_cpu_us_per_record"
        allocs = "gc_allocations_per_record"
        rows.append(
            Headline(
                "Producer client CPU / GC-tracked allocations per record (tuned, 1000-record batches)",
                f"{_cost(cases, 'producer', cpu, _us)} us / {_cost(cases, 'producer', allocs, _allocs)}",
                f"store call {_cost(cases, 'store', cpu, _us)} us / {_cost(cases, 'store', allocs, _allocs)}",
                "CPU " + _span([c["producer"][cpu] / c["store"][cpu] for c in cases], lambda x: f"{x:.1f}x"),
                name="the Producer's client cost",
            )
        )
    return rows


def _us(x: float) -> str:
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def _allocs(x: float) -> str:
    return f"{x:.2f}"


def transactions_headlines(res: dict[str, Any]) -> list[Headline]:
    h = res.get("headline") or {}
    rows: list[Headline] = []
    cases = sorted((c for c in res["throughput"] if c["txn_size"] == 1000), key=lambda c: c["partitions"])
    if cases:
        rows.append(
            Headline(
                "transactions of 1000 records vs the idempotent producer, "
                + " / ".join(str(c["partitions"]) for c in cases)
                + " partition(s)",
                " / ".join(compact(c["transactional"]["records_per_s"]) for c in cases) + " records/s",
                "idempotent " + " / ".join(compact(c["idempotent"]["records_per_s"]) for c in cases),
                " / ".join(ratio(c["ratio"]) for c in cases),
                h.get("txn_target", TXN_TARGET),
                min(c["ratio"] for c in cases),
                name="transactional throughput at 1000 records per transaction",
                several=len(cases) > 1,
            )
        )
    for c in res["throughput"]:
        if (c["partitions"], c["txn_size"]) == (4, 100):
            rows.append(
                Headline(
                    "transactions of 100 records on 4 partitions vs the idempotent producer",
                    f"{compact(c['transactional']['records_per_s'])} records/s",
                    f"idempotent {compact(c['idempotent']['records_per_s'])}",
                    ratio(c["ratio"]),
                    _goal(res, "txn100_4p", TXN100_TARGET),
                    c["ratio"],
                    name="transactions of 100 records on 4 partitions",
                )
            )
    lat = res.get("commit_latency") or {}
    if "ten_4p" in lat and "raw_ten" in lat:
        c = lat["ten_4p"]
        base_name, r = fastest(lat, RAW_COMMIT["raw_ten"])
        rows.append(
            Headline(
                "commit latency p50 / p99, a 10-record transaction on 4 partitions (commit_transaction)",
                f"{ms(c['p50_ms'])} / {ms(c['p99_ms'])} ms",
                f"{ms(r['p50_ms'])} / {ms(r['p99_ms'])} ms ({base_name})",
                f"{times(c['p50_ms'], r['p50_ms'])} / {times(c['p99_ms'], r['p99_ms'])}",
                _goal(res, "commit_ten_4p", COMMIT_TARGET),
                round(c["p50_ms"] / r["p50_ms"], 2),
                name="commit latency p50 of 10 records on 4 partitions",
                at_most=True,
            )
        )
    readers = res["reads"]["readers"]
    raw = readers.get("raw") or {}
    targets = {
        "fetch_rc": h.get("read_target", READ_TARGET),
        "consumer_rc": _goal(res, "consumer_rc", CONSUMER_TARGET),
    }
    for key, title in (("fetch_rc", "store.log.fetch_many"), ("consumer_rc", "Consumer.poll")):
        what = f"read_committed reads ({title}) vs raw binary SELECT"
        r = readers.get(key)
        if r is None:
            continue
        if "error" in r or "error" in raw:
            error = r.get("error") or f"the raw reader: {raw.get('error')}"
            rows.append(Headline(what, target=targets[key], missing=_clip(f"no progress: {error}", 160), name=what))
            continue
        rows.append(
            Headline(
                what,
                f"{compact(r['records_per_s'])} records/s",
                f"{compact(raw['records_per_s'])} records/s",
                ratio(r["ratio"]),
                targets[key],
                r["ratio"],
                name=f"read_committed reads through {title}",
            )
        )
    return rows


def pipeline_headlines(res: dict[str, Any]) -> list[Headline]:
    rows: list[Headline] = []
    cases = sorted(res["throughput"], key=lambda c: c["members"])
    ok = [c for c in cases if "error" not in c]
    stalled = [c for c in cases if "error" in c]
    for c in ok:
        before = PIPELINE_BEFORE_16.get(c["members"])
        rows.append(
            Headline(
                f"consume-transform-produce, {c['members']} member(s), against its rate before #16",
                f"{compact(c['records_per_s'])} records/s",
                f"{compact(before)} records/s (docs/bench/report.md of 2026-11-21)" if before else "",
                f"{c['records_per_s'] / before:.2f}" if before else "",
                target=PIPELINE_TARGET if before else None,
                value=c["records_per_s"] / before if before else None,
                name=f"consume-transform-produce, {c['members']} member(s)",
            )
        )
    for c in stalled:
        rows.append(
            Headline(
                f"consume-transform-produce, {c['members']} member(s)",
                missing=_clip(f"stalled: {c['error']}", 160),
            )
        )
    for r in res.get("latency") or []:
        if r["members"] != 1:
            continue  # the README's row; the report's latency section has every member count
        what = "produce-to-output-visible latency p50 / p99, 1 member"
        if "error" in r:
            rows.append(Headline(what, missing=_clip(f"stalled: {r['error']}", 160)))
        else:
            rows.append(Headline(what, f"{ms(r['p50_ms'])} / {ms(r['p99_ms'])} ms", name="end-to-end latency"))
    wake = res.get("wakeup") or {}
    waiters, notify = wake.get("waiters") or {}, wake.get("notify")
    if waiters and notify:
        default = waiters.get("200") or next(iter(waiters.values()))
        rows.append(
            Headline(
                "wake-up of a waiting read_committed consumer p50 / p99 (default settings)",
                f"{ms(default['p50_ms'])} / {ms(default['p99_ms'])} ms",
                f"{ms(notify['p50_ms'])} / {ms(notify['p99_ms'])} ms (LISTEN/NOTIFY)",
                f"{times(default['p50_ms'], notify['p50_ms'])} / {times(default['p99_ms'], notify['p99_ms'])}",
                target=WAKE_TARGET_MS,
                value=default["p50_ms"],
                at_most=True,
                unit="ms",
                name="wake-up latency",
            )
        )
    cost = wake.get("cost")
    if cost:
        rows.append(
            Headline(
                f"commit rate of {cost['producers']} producers while a consumer waits, wake-ups on / off",
                f"{compact(cost['commits_per_s_on'])} commits/s",
                f"{compact(cost['commits_per_s_off'])} commits/s (off)",
                f"{cost['ratio']:.2f}",
                target=cost["target"],
                value=cost["ratio"],
                name="the wake-ups' cost",
            )
        )
    return rows


def spark_headlines(res: dict[str, Any]) -> list[Headline]:
    return [
        Headline(
            f"Spark: committed view vs raw JDBC read of the log table, {compact(res['records'])} records",
            f"{compact(res['committed_rows_per_s'])} rows/s",
            f"{compact(res['raw_rows_per_s'])} rows/s",
            ratio(res["ratio"]),
            res.get("ratio_target", SPARK_TARGET),
            res["ratio"],
            name="Spark reads through the committed view",
        ),
        Headline(
            "Spark exactly-once pipeline, end to end",
            f"{compact(res['pipeline_records_per_s'])} records/s",
            name="the Spark pipeline",
        ),
        *write_back_headlines(res),
    ]


def write_back_headlines(res: dict[str, Any]) -> list[Headline]:
    """The Spark write-back against a raw JVM JDBC write of the same rows, when the results hold it (#16)."""
    wb = res.get("write_back")
    if wb is None:
        return []  # results from before the write-back was measured
    target = float(wb.get("target", WRITE_BACK_TARGET))
    if "error" in wb:
        what = "Spark write-back vs raw JVM JDBC write"
        return [Headline(what, target=target, missing=_clip(f"failed: {wb['error']}", 160), name=what)]
    return [
        Headline(
            f"Spark write-back vs raw JVM JDBC write, {compact(wb['records'])} records",
            f"{compact(wb['oncelog_rows_per_s'])} rows/s",
            f"{compact(wb['raw_jdbc_rows_per_s'])} rows/s (JDBC)",
            ratio(wb["ratio"]),
            target,
            wb["ratio"],
            name="Spark write-back against a raw JDBC write",
        )
    ]


def groups_headlines(res: dict[str, Any]) -> list[Headline]:
    """The largest group's rebalance: records/s through it against before, and how long it took."""
    m = max(res["cases"], key=lambda c: c["members"])["median"]
    n = m["members"]
    return [
        Headline(
            f"consumer group of {n} + 1 joining: records/s from the join until stable, against before",
            f"{compact(m['through_records_per_s'])} records/s",
            f"{compact(m['steady_records_per_s'])} records/s (before)",
            f"{m['through_ratio']:.2f}" if m["through_ratio"] is not None else "",
            name="records through a rebalance",
        ),
        Headline(
            f"consumer group of {n} + 1 joining: join to stable; longest time nothing consumed",
            f"{m['join_to_stable_ms']:,.0f} ms; {m['stop_the_world_ms']:,.0f} ms",
            f"{m['steady_gap_ms']:,.0f} ms (longest, steady)",
            name="a rebalance's pause",
        ),
    ]


def groups_section(res: dict[str, Any]) -> list[str]:
    s = res["settings"]
    lines = [
        f"A member joins a group of N consuming a {s['partitions']}-partition topic written at {s['rate']:,} "
        f"records/s (Consumer defaults; median of {s['repeat']} run(s) by join-to-stable time). Stable: every "
        "partition owned by its target member. Nothing consumed: the longest time in which no member's poll "
        f"returned records, from the join until {s['after_s']:g} s after stable, beside the same in the steady "
        "seconds before (the members' normal gap). Handover: a moved partition's old owner's last poll with "
        "records to its new owner's first.",
        "",
        "| members before | join to stable (ms) | records/s before | records/s join to stable | ratio "
        "| nothing consumed (ms) | the same, steady (ms) | handovers | handover p50 / max (ms) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for case in res["cases"]:
        m = case["median"]
        ratio_cell = "" if m["through_ratio"] is None else f"{m['through_ratio']:.2f}"
        lines.append(
            f"| {m['members']} | {m['join_to_stable_ms']:,.0f} | {m['steady_records_per_s']:,.0f} "
            f"| {m['through_records_per_s']:,.0f} | {ratio_cell} | {m['stop_the_world_ms']:,.0f} "
            f"| {m['steady_gap_ms']:,.0f} | {m['handovers']} | {m['handover_p50_ms']} / {m['handover_max_ms']} |"
        )
    return [*lines, ""]


def outbox_headlines(res: dict[str, Any]) -> list[Headline]:
    """oncelog.send in an application transaction against the same transaction without it."""
    rows = []
    for c in res["cases"]:
        rows.append(
            Headline(
                f"outbox (a business row + oncelog.send), {c['threads']} thread(s), against the business row alone",
                f"{compact(c['send_per_s'])} txn/s",
                f"{compact(c['business_only_per_s'])} txn/s",
                f"{c['ratio_to_business_only']:.2f}",
                name=f"the outbox with {c['threads']} thread(s)",
            )
        )
    return rows


def outbox_section(res: dict[str, Any]) -> list[str]:
    s = res["settings"]
    lines = [
        "Application transactions committed per second, each one business row (an INSERT) and: a record sent "
        f"with oncelog.send ({s['value_bytes']}-byte value, a key, {s['partitions']} partitions; appended at the "
        "commit); nothing else (baseline); or the same key and value INSERTed into a plain outbox table "
        f"(baseline). {s['seconds']:g} s per case, paired and repeated {s['repeat']} time(s), medians:",
        "",
        "| threads | oncelog.send txn/s | business row only txn/s | ratio | raw outbox table txn/s | ratio |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for c in res["cases"]:
        lines.append(
            f"| {c['threads']} | {c['send_per_s']:,.0f} | {c['business_only_per_s']:,.0f} "
            f"| {c['ratio_to_business_only']:.2f} | {c['raw_outbox_per_s']:,.0f} | {c['ratio_to_raw_outbox']:.2f} |"
        )
    return [*lines, ""]


#: The commit-latency cases of bench/replication.py, by their JSON key.
REPLICATION_TITLES = {
    "raw_insert": "raw single-row INSERT, autocommit",
    "send": "Producer, one record acknowledged (linger_ms=0)",
    "txn_commit": "commit_transaction, 10 records on 4 partitions",
}


def replication_headlines(res: dict[str, Any]) -> list[Headline]:
    """Writers with synchronous replication to a quorum (ANY 1) against the same primary alone."""
    t = res["throughput"]
    commit = res["latency"]["txn_commit"]
    return [
        Headline(
            "synchronous replication (ANY 1 of 2 standbys): idempotent produce vs the server alone",
            f"{compact(t['quorum_per_s'])} rec/s",
            f"{compact(t['alone_per_s'])} rec/s",
            f"{t['ratio']:.2f}",
            name="produce with replication",
        ),
        Headline(
            "synchronous replication: commit of a 10-record transaction, p50, vs the server alone",
            f"{ms(commit['quorum']['p50_ms'])} ms",
            f"{ms(commit['alone']['p50_ms'])} ms",
            times(commit["quorum"]["p50_ms"], commit["alone"]["p50_ms"]),
            name="commit with replication",
        ),
    ]


def replication_section(res: dict[str, Any]) -> list[str]:
    s = res["settings"]
    standbys = ", ".join(f"{x['name']} ({x['sync_state']})" for x in res["server"].get("standbys", [])) or "none"
    t = res["throughput"]
    lines = [
        "A dev cluster on this machine (pg_auto_failover: a primary and two standbys, "
        f"`synchronous_standby_names = {res['server']['settings']['synchronous_standby_names']}`; standbys: "
        f"{standbys}). Every figure twice on the same primary: **quorum**, the sessions' "
        "`synchronous_commit = on` (a commit waits for one standby's flush: nothing acknowledged is lost to a "
        "failover), and **alone**, `synchronous_commit = local` (a commit waits for the primary's flush, as on a "
        "single server; the baseline). Loopback replication shares this machine's disk and cores; across machines "
        "add the network's round trip to every commit.",
        "",
        f"Idempotent Producer, {s['records']:,} records of {s['value_bytes']} B to {s['partitions']} partitions "
        f"(1000-record batches), paired runs in alternating order, repeated {s['repeat']} time(s), medians:",
        "",
        "| quorum rec/s | alone rec/s | ratio |",
        "|---:|---:|---:|",
        f"| {t['quorum_per_s']:,.0f} | {t['alone_per_s']:,.0f} | {t['ratio']:.2f} |",
        "",
        f"Commit latency, {s['samples']} samples per case and mode, the modes taking turns sample by sample:",
        "",
        "| case | quorum p50 ms | quorum p99 ms | alone p50 ms | alone p99 ms | p50 ratio | p99 ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, title in REPLICATION_TITLES.items():
        c = res["latency"].get(key)
        if c is None:
            continue
        q, a = c["quorum"], c["alone"]
        lines.append(
            f"| {title} | {ms(q['p50_ms'])} | {ms(q['p99_ms'])} | {ms(a['p50_ms'])} | {ms(a['p99_ms'])} "
            f"| {c['ratio_p50']:.2f} | {c['ratio_p99']:.2f} |"
        )
    return [*lines, ""]


def storage_headlines(res: dict[str, Any]) -> list[Headline]:
    """oncelog's retention (DELETE passes, VACUUM) against a raw DELETE of the same rows."""
    rows = []
    for c in res["cases"]:
        rows.append(
            Headline(
                f"retention of {_size(c['value_bytes'])} records (DeleteRecords, retention passes, VACUUM) vs a raw "
                "DELETE and VACUUM of the same rows",
                f"{compact(c['retention_records_per_s'])} records/s",
                f"{compact(c['raw_delete_records_per_s'])} records/s",
                f"{c['ratio_retention_to_raw_delete']:.2f}",
                name=f"retention, {_size(c['value_bytes'])} values",
            )
        )
    return rows


def storage_section(res: dict[str, Any]) -> list[str]:
    s = res["settings"]
    scale = f"{s['scale_to'] / 1e6:,.0f}M"
    lines = [
        f"The `records` table on a {s['partitions']}-partition topic written by the store call ({s['batch']}-record "
        "batches, 12-byte keys): bytes per record are the growth of the heap, its TOAST table and its indexes over "
        "the second half of the records. Retention then drops the older half of every partition: DeleteRecords "
        f"moves the log starts, `enforce_retention` passes ({s['retention_batch']:,} records per partition per "
        "call) delete the rows, VACUUM makes the space reusable. Baselines on copies of the same rows: a plain "
        "table's DELETE and VACUUM, and a table partitioned by offset range whose two lower partitions are dropped. "
        f"Medians of {s['repeat']} run(s); the {scale} columns scale the per-record figures linearly.",
        "",
        f"| values | records | heap B/record | indexes B/record | TOAST B/record | total B/record | table at {scale} |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in res["cases"]:
        lines.append(
            f"| {_size(c['value_bytes'])} | {c['records']:,} | {c['heap_per_record']:.0f} "
            f"| {c['indexes_per_record']:.0f} | {c['toast_per_record']:.0f} | {c['bytes_per_record']:.0f} "
            f"| {c['scaled']['table_gib']:,.1f} GiB |"
        )
    lines += [
        "",
        f"| values | deleted | retention records/s | raw DELETE records/s | ratio (with VACUUM) | WAL B/record "
        f"| dropping 2 partitions | retention of {scale} | raw DELETE of {scale} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in res["cases"]:
        m = c["median"]
        lines.append(
            f"| {_size(c['value_bytes'])} | {m['deleted']:,.0f} | {c['retention_records_per_s']:,.0f} "
            f"| {c['raw_delete_records_per_s']:,.0f} | {c['ratio_retention_to_raw_delete']:.2f} "
            f"| {c['retention_wal_per_record']:.0f} | {ms(c['drop_s'] * 1000)} ms "
            f"| {c['scaled']['retention_hours']:.2f} h | {c['scaled']['raw_delete_hours']:.2f} h |"
        )
    hot = res.get("hot_path")
    if hot is not None:
        lines += [
            "",
            "What partitioning `records` so that retention could drop segments would cost every call: the same rows "
            f"({_size(hot['value_bytes'])} values) in a plain table and in one partitioned by "
            f'`RANGE (topic_id, partition, "offset")` into {hot["partitions"]} topic partitions x '
            f"{hot['segments_per_partition']} segments of {hot['segment_offsets']:,} offsets ({hot['leaf_tables']:,} "
            "tables), the same PL/pgSQL append and fetch on each, paired, medians.",
            "",
            "| call | plain ms | partitioned ms | partitioned / plain |",
            "|---|---:|---:|---:|",
            *(
                f"| {r['measure']} | {r['plain_ms']:.3f} | {r['partitioned_ms']:.3f} | {r['ratio']:.2f} |"
                for r in hot["rows"]
            ),
            "",
            "The lock each segment operation takes on the partitioned table: "
            + "; ".join(f"{op}: {mode}" for op, mode in hot["locks"].items())
            + ".",
        ]
    return [*lines, ""]


def compaction_headlines(res: dict[str, Any]) -> list[Headline]:
    """Compaction against a raw DELETE of the same superseded rows; producers beside it against alone."""
    t, p = res["throughput"], res["produce"]
    return [
        Headline(
            "compaction of a keyed topic (forced passes) vs a raw DELETE of the same superseded rows",
            f"{compact(t['examined_per_s'])} records examined/s",
            f"{compact(t['raw_deleted_per_s'])} rows deleted/s",
            f"{t['ratio_to_raw_delete']:.2f}",
            name="compaction",
        ),
        Headline(
            "idempotent produce into partitions being compacted vs into the same partitions alone",
            f"{compact(p['beside_per_s'])} rec/s",
            f"{compact(p['alone_per_s'])} rec/s",
            f"{p['ratio']:.2f}",
            name="produce beside compaction",
        ),
    ]


def compaction_section(res: dict[str, Any]) -> list[str]:
    s, t, p = res["settings"], res["throughput"], res["produce"]
    return [
        f"A {s['partitions']}-partition compacted topic written by the store call ({s['batch']}-record batches, "
        f"{s['value_bytes']}-byte values, {s['keys_per_partition']:,} keys per partition, so all but each key's "
        f"last record is superseded). Compaction: `Admin.compact(force=True)`, passes of {s['pass_offsets']:,} "
        "offsets, each its own transaction; the baseline is one DELETE of the same superseded rows from a plain "
        "copy (same columns and primary key). Producers: the same appends to a topic alone, to one a loop "
        f"compacts without pause (passes of {s['loop_pass_offsets']:,} offsets), and to one while the loop "
        f"compacts another topic (its CPU without its locks), in rotating order, medians of {s['repeat']} round(s).",
        "",
        "| records | compaction: examined/s | removed/s | raw DELETE: rows/s | ratio |",
        "|---:|---:|---:|---:|---:|",
        f"| {t['records']:,} | {t['examined_per_s']:,.0f} | {t['removed_per_s']:,.0f} "
        f"| {t['raw_deleted_per_s']:,.0f} | {t['ratio_to_raw_delete']:.2f} |",
        "",
        "| appended | alone rec/s | into partitions being compacted rec/s | ratio | while another topic is "
        "compacted rec/s | ratio | passes meanwhile (same, other) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {p['records']:,} | {p['alone_per_s']:,.0f} | {p['beside_per_s']:,.0f} | {p['ratio']:.2f} "
        f"| {p['elsewhere_per_s']:,.0f} | {p['ratio_elsewhere']:.2f} "
        f"| {p['median']['beside_passes']:,.0f}, {p['median']['elsewhere_passes']:,.0f} |",
        "",
    ]


def broker_headlines(res: dict[str, Any]) -> list[Headline]:
    """librdkafka's producer through the broker against the store call; its consumer against Consumer.poll."""
    cases = res["cases"]
    sizes = ", ".join(_size(c["value_bytes"]) for c in cases)
    rows = []
    for kind, label in (("idempotent", "idempotent"), ("transactional", "transactional, 1000-record transactions")):
        ratios = [c[f"ratio_{kind}_to_store"] for c in cases]
        rows.append(
            Headline(
                f"confluent-kafka producer through oncelog broker, {label}, against the store call: {sizes}",
                ", ".join(f"{compact(c[f'broker_{kind}_per_s'])}" for c in cases) + " records/s",
                "store call " + ", ".join(compact(c["store_per_s"]) for c in cases),
                ", ".join(f"{r:.2f}" for r in ratios),
                target=BROKER_TARGET,
                value=min(ratios),
                name=f"the broker's {kind} producer against the store call",
                several=len(cases) > 1,
            )
        )
    if all("producer_transactional_per_s" in c for c in cases):
        rows.append(
            Headline(
                "confluent-kafka transactional producer through oncelog broker against oncelog's transactional "
                f"Producer, 1000-record transactions: {sizes}",
                ", ".join(compact(c["broker_transactional_per_s"]) for c in cases) + " records/s",
                "oncelog Producer " + ", ".join(compact(c["producer_transactional_per_s"]) for c in cases),
                ", ".join(f"{c['ratio_transactional_to_producer_transactional']:.2f}" for c in cases),
                name="the broker's transactional producer against oncelog's",
            )
        )
    rows.append(
        Headline(
            f"confluent-kafka read_committed consumer through oncelog broker against Consumer.poll: {sizes}",
            ", ".join(compact(c["consume_broker_per_s"]) for c in cases) + " records/s",
            "Consumer.poll " + ", ".join(compact(c["consume_poll_per_s"]) for c in cases),
            ", ".join(f"{c['ratio_consume_to_poll']:.2f}" for c in cases),
            name="the broker's consumer against Consumer.poll",
        )
    )
    return rows


def broker_section(res: dict[str, Any]) -> list[str]:
    s = res["settings"]
    # Results from before the broker ran in a process of its own say nothing of where it ran.
    where = (
        "`oncelog broker` in a process of its own" if s.get("broker") == "process" else "a broker in the same process"
    )
    lines = [
        f"The same records to a fresh {s['partitions']}-partition topic per kind: the store call "
        f"(store.log.produce_batches, one {s['batch']}-record batch per partition per call, idempotent; the "
        f"baseline), confluent-kafka's producer (librdkafka {s['librdkafka']}, linger.ms=5) through {where}"
        ", idempotent and with 1000-record transactions, and oncelog's Producer (defaults), idempotent and in "
        "the same transactions (the transactional run's second baseline); librdkafka's "
        "producers timed once they have their producer id. Then the idempotent run's records read back, "
        "read_committed, by confluent-kafka's consumer through the broker and by Consumer.poll (baseline), "
        f"each timed from its first delivery. Records/s, medians of {s['repeat']} run(s); ratios: medians of "
        "the per-run ratios:",
        "",
        "| value | records | store call | broker, idempotent | ratio | oncelog Producer | ratio "
        "| broker, transactional | ratio to the store call | oncelog Producer, transactional | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in res["cases"]:
        # Results from before the transactional Producer was measured beside the broker lack it.
        own = c.get("producer_transactional_per_s")
        lines.append(
            f"| {_size(c['value_bytes'])} | {c['records']:,} | {c['store_per_s']:,.0f} "
            f"| {c['broker_idempotent_per_s']:,.0f} | {c['ratio_idempotent_to_store']:.2f} "
            f"| {c['producer_per_s']:,.0f} | {c['ratio_producer_to_store']:.2f} "
            f"| {c['broker_transactional_per_s']:,.0f} | {c['ratio_transactional_to_store']:.2f} "
            + (
                "| - | - |"
                if own is None
                else f"| {own:,.0f} | {c['ratio_transactional_to_producer_transactional']:.2f} |"
            )
        )
    lines += [
        "",
        "| value | records | Consumer.poll | broker consumer | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for c in res["cases"]:
        lines.append(
            f"| {_size(c['value_bytes'])} | {c['records']:,} | {c['consume_poll_per_s']:,.0f} "
            f"| {c['consume_broker_per_s']:,.0f} | {c['ratio_consume_to_poll']:.2f} |"
        )
    return [*lines, ""]


HEADLINES: dict[str, Callable[[dict[str, Any]], list[Headline]]] = {
    "produce": produce_headlines,
    "transactions": transactions_headlines,
    "pipeline": pipeline_headlines,
    "spark": spark_headlines,
    "groups": groups_headlines,
    "outbox": outbox_headlines,
    "broker": broker_headlines,
    "replication": replication_headlines,
    "storage": storage_headlines,
    "compaction": compaction_headlines,
}
#: What each benchmark's headline rows stand for, for the one row a benchmark without results gets.
HEADLINE_PLACEHOLDERS = {
    "produce": f"the raw ceiling; idempotent produce, 1000-record batches (target >= {PRODUCE_TARGET:g}); the "
    f"Producer against the store call (>= {PRODUCER_TARGET:g}) and with nothing set (>= {DEFAULTS_TARGET:g}); "
    f"produce latency (<= {PRODUCE_LATENCY_TARGET:g}x)",
    "transactions": f"transactions of 1000 records (target >= {TXN_TARGET:g}) and of 100 records on 4 partitions "
    f"(>= {TXN100_TARGET:g}), commit latency (<= {COMMIT_TARGET:g}x), read_committed reads (store.log.fetch_many "
    f">= {READ_TARGET:g}, Consumer.poll >= {CONSUMER_TARGET:g})",
    "pipeline": "consume-transform-produce rates and latency",
    "spark": f"Spark: committed view vs raw JDBC (target >= {SPARK_TARGET:g}), Spark pipeline, Spark write-back "
    f"vs raw JDBC (>= {WRITE_BACK_TARGET:g})",
    "groups": "a consumer group through a rebalance: records/s against before, join to stable",
    "outbox": "outbox writes (a business row + oncelog.send) against the business row alone",
    "broker": f"confluent-kafka through oncelog broker against the store call (target >= {BROKER_TARGET:g}) and "
    "its consumer against Consumer.poll",
    "replication": "produce throughput and commit latency with synchronous replication against the server alone",
    "storage": "retention against a raw DELETE of the same rows; bytes per record",
    "compaction": "compaction against a raw DELETE of the superseded rows; produce beside compaction",
}


def headlines(outcomes: dict[str, Outcome]) -> list[Headline]:
    """Every benchmark's headline rows; one 'not measured' row for a benchmark without usable results."""
    rows: list[Headline] = []
    for name, outcome in outcomes.items():
        if not outcome.ok or outcome.result is None:
            rows.append(Headline(HEADLINE_PLACEHOLDERS[name], missing=outcome.why()))
            continue
        try:
            rows += HEADLINES[name](outcome.result)
        except SHAPE_ERRORS as exc:
            rows.append(
                Headline(HEADLINE_PLACEHOLDERS[name], missing=f"unexpected {name}.json ({type(exc).__name__}: {exc})")
            )
    return rows


def headline_table(rows: Sequence[Headline]) -> list[str]:
    lines = [
        f"| what | oncelog | {ORACLE} | ratio | target |",
        "|---|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(f"| {r.what} | {r.oncelog} | {r.baseline} | {r.ratio} | {r.target_cell()} |")
    return lines


def headline_summary(rows: Sequence[Headline]) -> str:
    """One sentence: which targets are met, which are not, what could not be measured."""
    met = [r for r in rows if r.target is not None and r.status == "met"]
    unmet = [r for r in rows if r.target is not None and r.status == "not met"]
    unmeasured = [r for r in rows if r.status == "not measured"]
    parts = []
    if met:
        parts.append("Targets met: " + "; ".join(f"{r.name or r.what} ({r.shown()})" for r in met) + ".")
    if unmet:
        parts.append(
            "Not met: " + "; ".join(f"{r.name or r.what} ({r.shown()}, target {r.goal()})" for r in unmet) + "."
        )
    if unmeasured:
        parts.append("Not measured: " + "; ".join(r.what for r in unmeasured) + ".")
    return " ".join(parts) or "No targets were measured."


# --- the run and the machine --------------------------------------------------------------------


def _server(res: dict[str, Any]) -> dict[str, Any] | None:
    """The PostgreSQL a result was measured on (spark.json keeps it under "postgres", "server" is its target)."""
    server = res.get("server")
    if isinstance(server, dict):
        return server
    postgres = res.get("postgres")
    if isinstance(postgres, dict):
        return {**postgres, "target": server if isinstance(server, str) else None}
    return None


def _dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (a field of an unexpected shape reads as absent)."""
    return value if isinstance(value, dict) else {}


def _first(outcomes: dict[str, Outcome], pick: Callable[[dict[str, Any]], Any]) -> Any:
    for outcome in outcomes.values():
        if outcome.ok and outcome.result is not None:
            value = pick(outcome.result)
            if value:
                return value
    return None


def _git(res: dict[str, Any]) -> str | None:
    git = _dict(res.get("oncelog")).get("git")
    return str(git) if git else None


def run_span(outcomes: dict[str, Outcome]) -> str:
    whens = sorted(w for o in outcomes.values() if o.ok and o.result and (w := _when(o.result)) is not None)
    if not whens:
        return "unknown date"
    first, last = whens[0], whens[-1]
    if first.date() == last.date():
        return (
            f"{first:%Y-%m-%d}, {first:%H:%M} to {last:%H:%M} UTC" if first != last else f"{first:%Y-%m-%d %H:%M} UTC"
        )
    return f"{first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC"


def consistency_notes(outcomes: dict[str, Outcome]) -> list[str]:
    """Where the results disagree about what was measured: they then come from different runs."""
    probes: dict[str, Callable[[dict[str, Any]], Any]] = {
        "commit": _git,
        "PostgreSQL version": lambda r: (_server(r) or {}).get("version"),
        "server": lambda r: (_server(r) or {}).get("target"),
        "CPU count": lambda r: _dict(r.get("machine")).get("nproc"),
        "--quick": lambda r: bool(r.get("quick")),
    }
    notes = []
    for what, probe in probes.items():
        seen: dict[str, Any] = {}
        for name, outcome in outcomes.items():
            if outcome.ok and outcome.result is not None:
                value = probe(outcome.result)
                if value is not None:
                    seen[name] = value
        if len(set(map(str, seen.values()))) > 1:
            notes.append(
                f"The results differ in {what} ("
                + "; ".join(f"{name}: {value}" for name, value in seen.items())
                + "): they come from different runs."
            )
    return notes


def machine_lines(outcomes: dict[str, Outcome]) -> list[str]:
    m = _dict(_first(outcomes, lambda r: _dict(r.get("machine"))))
    s = _dict(_first(outcomes, _server))
    head = _first(outcomes, lambda r: _dict(r.get("oncelog")).get("migration_head"))
    settings = _dict(s.get("settings"))
    usable = m.get("nproc_usable")
    cpus = f"{m.get('nproc', '?')} CPUs" + (f" ({usable} usable)" if usable and usable != m.get("nproc") else "")
    return [
        f"- run: {run_span(outcomes)}; oncelog commit {_first(outcomes, _git) or 'unknown'}, "
        f"migrations at {head or 'unknown'}",
        f"- machine: {cpus}, {m.get('cpu') or 'CPU model unknown'}, {m.get('memory_gib', '?')} GiB RAM, "
        f"{m.get('platform', 'OS unknown')}",
        f"- Python {m.get('python', '?')}, psycopg {m.get('psycopg', '?')}, SQLAlchemy {m.get('sqlalchemy', '?')}",
        f"- PostgreSQL {s.get('version', 'unknown')}"
        + (": " + ", ".join(f"{k}={v}" for k, v in settings.items()) if settings else ""),
        f"- server: {s.get('target') or 'unknown'}",
    ]


def machine_summary(outcomes: dict[str, Outcome]) -> str:
    """The machine in a heading: CPUs, memory, OS, PostgreSQL and its durability, date and commit."""
    m = _dict(_first(outcomes, lambda r: _dict(r.get("machine"))))
    s = _dict(_first(outcomes, _server))
    settings = _dict(s.get("settings"))
    version = str(s.get("version", "?")).split(" ")[0]
    durability = ", ".join(f"{k}={settings[k]}" for k in ("fsync", "synchronous_commit") if k in settings)
    whens = sorted(w for o in outcomes.values() if o.ok and o.result and (w := _when(o.result)) is not None)
    git = _first(outcomes, _git) or "unknown"
    return (
        f"{m.get('nproc', '?')} CPUs ({m.get('cpu') or '?'}), {m.get('memory_gib', '?')} GiB, "
        f"{m.get('platform', '?')}; PostgreSQL {version}"
        + (f", {durability}" if durability else "")
        + (f"; {whens[-1]:%Y-%m-%d}" if whens else "")
        + f", commit {git}"
    )


def status_table(outcomes: dict[str, Outcome]) -> list[str]:
    lines = [
        "| benchmark | status | finished | commit | seconds | load average, start / end |",
        "|---|---|---|---|---:|---|",
    ]
    for name, o in outcomes.items():
        if not o.ok or o.result is None:
            lines.append(f"| {BENCHMARKS[name]} | **{o.status}**: {o.detail} | | | | |")
            continue
        r, m = o.result, _dict(o.result.get("machine"))
        when = _when(r)
        start, end = m.get("loadavg_start"), m.get("loadavg_end")
        load = f"{start[0]} / {end[0]}" if isinstance(start, list) and isinstance(end, list) and start and end else ""
        status = "ok, --quick" if r.get("quick") else "ok"
        lines.append(
            f"| {BENCHMARKS[name]} | {status} | {f'{when:%Y-%m-%d %H:%M} UTC' if when else ''} "
            f"| {_git(r) or ''} | {r.get('seconds', '')} | {load} |"
        )
    return lines


# --- the sections -------------------------------------------------------------------------------


def _guard(title: str, render: Callable[[], list[str]]) -> list[str]:
    try:
        return render()
    except SHAPE_ERRORS as exc:
        return [f"_Could not render {title} from the results ({type(exc).__name__}: {exc})._", ""]


def produce_throughput_section(res: dict[str, Any]) -> list[str]:
    cases = res["cases"]
    unnest = _has_unnest(cases)
    lines = [
        "| case | store.log.produce records/s | Producer records/s | raw binary COPY records/s "
        + ("| raw INSERT ... unnest records/s | ceiling records/s (the faster) | unnest / COPY " if unnest else "")
        + "| ratio store / ceiling | ratio Producer / ceiling |",
        "|---|---:|---:|---:|" + ("---:|---:|---:|" if unnest else "") + "---:|---:|",
    ]
    for c in cases:
        rate, faster = ceiling(c)
        raw_cells = (
            f"| {c['raw_unnest']['records_per_s']:,.0f} | {rate:,.0f} ({RAW_SHORT[faster]}) "
            f"| {ratio(c['ceiling']['ratio_unnest_copy'])} "
            if unnest
            else ""
        )
        lines.append(
            f"| {c['label']} | {c['store']['records_per_s']:,.0f} | {c['producer']['records_per_s']:,.0f} "
            f"| {raw_copy(c)['records_per_s']:,.0f} {raw_cells}| {ratio(c['ratio_store'])} "
            f"| {ratio(c['ratio_producer'])} |"
        )
    if unnest:
        raw_note = (
            "raw: the same rows in a plain table with the same columns and primary key, one commit per batch, "
            "written by binary COPY and by INSERT ... SELECT FROM unnest of binary array parameters (psycopg 3 "
            "`%b`); the ceiling of a run is the faster of the two in that run, and every ratio is against it. "
        )
    else:
        raw_note = (
            "raw: the same rows written with binary COPY into a plain table with the same columns and primary key, "
            "one commit per batch (these results predate the INSERT ... unnest baseline: the ceiling is COPY). "
        )
    lines += [
        "",
        raw_note + "Ratios: the median of the per-run ratios (every kind measured back to back, "
        f"{res.get('repeat', '?')} run(s)).",
        "",
    ]
    return lines


def producer_section(res: dict[str, Any]) -> list[str]:
    """The Producer against the store call and with nothing set, and every kind's client cost per record."""
    cases = res["cases"]
    lines: list[str] = []
    paired = [c for c in cases if "ratio_producer_store" in c]
    if paired:
        lines += [
            "The Producer against the store call (tuned: `max_batch_records` = the batch size, a long linger, so "
            "batches leave full), and `Producer(url)` with nothing set sending the same records to the same "
            "partitions (1000-record batches only):",
            "",
            "| case | Producer records/s | store call records/s (baseline) | ratio Producer / store "
            "| Producer(url) defaults records/s | ratio defaults / tuned | ratio defaults / store |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for c in paired:
            d = c.get("producer_defaults")
            defaults = (
                f"| {d['records_per_s']:,.0f} | {ratio(c['ratio_defaults_tuned'])} "
                f"| {ratio(c['ratio_defaults_store'])} |"
                if d
                else "| | | |"
            )
            lines.append(
                f"| {c['label']} | {c['producer']['records_per_s']:,.0f} | {c['store']['records_per_s']:,.0f} "
                f"| {ratio(c['ratio_producer_store'])} {defaults}"
            )
        lines.append("")
    costed = [c for c in cases if "client_cpu_us_per_record" in c["producer"]]
    if costed:
        kinds = [k for k in CLIENT_COST_KINDS if any(k in c for c in costed)]
        lines += [
            "Client cost per record, each kind over its timed span (the median over the runs):",
            "",
            "| case | client CPU us/record: " + " / ".join(CLIENT_COST_KINDS[k] for k in kinds) + " "
            "| GC-tracked allocations/record: " + " / ".join(CLIENT_COST_KINDS[k] for k in kinds) + " "
            "| Producer CPU / store CPU | Producer time in GC s |",
            "|---|---:|---:|---:|---:|",
        ]
        for c in costed:
            cpu = " / ".join(_us(c[k]["client_cpu_us_per_record"]) if k in c else "-" for k in kinds)
            allocs = " / ".join(_allocs(c[k]["gc_allocations_per_record"]) if k in c else "-" for k in kinds)
            lines.append(
                f"| {c['label']} | {cpu} | {allocs} "
                f"| {times(c['producer']['client_cpu_us_per_record'], c['store']['client_cpu_us_per_record'])} "
                f"| {c['producer']['gc_seconds']:.3f} |"
            )
        threshold = (res.get("gc_threshold") or ["the gen0 threshold"])[0]
        lines += [
            "",
            "Client CPU: `time.process_time()` over the timed span (every thread of the benchmark's process: the "
            "caller's, the Producer's sender thread, psycopg and libpq), divided by the records. GC-tracked "
            f"allocations: the automatic garbage collections in that span (counted by a `gc.callbacks` hook, every "
            f"generation) times the gen0 threshold ({threshold}), divided by the records. CPython starts an "
            "automatic collection when the GC-tracked objects (containers: class instances, tuples, lists, dicts) "
            "allocated minus those freed since the last collection exceed that threshold, so this counts the "
            "containers still alive at the next collection, to within one threshold: the garbage the collector "
            "traces. Temporaries freed by reference counting before then, and untracked objects (bytes, str, int), "
            "are not counted. The benchmark drops the futures send() returns, as a caller that does not need them "
            "does.",
            "",
        ]
    return lines


def fastest(lat: dict[str, Any], names: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """The latency baseline: of the raw writes ``names`` the results hold, the one with the lowest p50 (its name,
    its percentiles). Older results hold the first alone."""
    held = [key for key in names if key in lat]
    key = min(held, key=lambda k: lat[k]["p50_ms"])
    return names[key], lat[key]


def produce_latency_section(res: dict[str, Any]) -> list[str]:
    lat = res["latency"]
    base_name, raw = fastest(lat, PRODUCE_RAW_LATENCY)
    lines = [
        "Single-record produce, one record in flight (100 B values, 1 partition); the baseline is the faster (by "
        "p50) of the raw single-row writes, each in autocommit:",
        "",
        "| path | samples | p50 ms | p99 ms | max ms | baseline | baseline p50 / p99 ms | p50 vs baseline "
        "| p99 vs baseline |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    rows = [(title, lat[key]) for key, title in PRODUCE_LATENCY.items()]
    rows += [(f"raw: {name}, autocommit", lat[key]) for key, name in PRODUCE_RAW_LATENCY.items() if key in lat]
    for title, r in rows:
        lines.append(
            f"| {title} | {r['samples']} | {ms(r['p50_ms'])} | {ms(r['p99_ms'])} | {ms(r['max_ms'])} "
            f"| {base_name} | {ms(raw['p50_ms'])} / {ms(raw['p99_ms'])} | {times(r['p50_ms'], raw['p50_ms'])} "
            f"| {times(r['p99_ms'], raw['p99_ms'])} |"
        )
    lines.append("")
    return lines


def txn_throughput_section(res: dict[str, Any]) -> list[str]:
    lines = [
        "| partitions | records per transaction | transactions/s | records/s | idempotent records/s (baseline) "
        "| ratio txn / idempotent | idempotent, flush every N: records/s | ratio txn / flushed "
        "| commit_transaction avg ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in res["throughput"]:
        t = c["transactional"]
        lines.append(
            f"| {c['partitions']} | {c['txn_size']:,} | {t['transactions_per_s']:,.1f} | {t['records_per_s']:,.0f} "
            f"| {c['idempotent']['records_per_s']:,.0f} | {ratio(c['ratio'])} "
            f"| {c['idempotent_flushed']['records_per_s']:,.0f} | {ratio(c['ratio_flushed'])} "
            f"| {t['commit_ms_avg']:.2f} |"
        )
    pc = res.get("producer_config") or {}
    lines += [
        "",
        "The baseline is the idempotent Producer with the same settings"
        + (f" (linger_ms={pc['linger_ms']}, batch_size={pc['batch_size']})" if pc else "")
        + ", free-running, measured right beside each transactional run (order alternating between runs); "
        "'flush every N' flushes where the transactions commit, so its ratio is the price of "
        "the transaction protocol alone (EndTxn, markers, coordinator checks).",
        "",
    ]
    return lines


def commit_latency_section(res: dict[str, Any]) -> list[str]:
    lat = res["commit_latency"]
    lines = [
        "Commit latency, one transaction in flight, the cases interleaved sample by sample:",
        "",
        "| what is timed | samples | p50 ms | p99 ms | max ms | baseline | baseline p50 / p99 ms "
        "| p50 vs baseline | p99 vs baseline |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    rows = [(title, key, base_key) for key, (title, base_key) in COMMIT_CASES.items()]
    rows += [(f"raw: {name}", key, base_key) for base_key, raws in RAW_COMMIT.items() for key, name in raws.items()]
    for title, key, base_key in rows:
        if key not in lat:
            continue
        r = lat[key]
        base_name, b = fastest(lat, RAW_COMMIT[base_key])
        lines.append(
            f"| {title} | {r['samples']} | {ms(r['p50_ms'])} | {ms(r['p99_ms'])} | {ms(r['max_ms'])} "
            f"| {base_name} | {ms(b['p50_ms'])} / {ms(b['p99_ms'])} "
            f"| {times(r['p50_ms'], b['p50_ms'])} | {times(r['p99_ms'], b['p99_ms'])} |"
        )
    lines += [
        "",
        "Baselines: raw writes in autocommit, one commit each: a single-row write for an EndTxn alone, a 10-row "
        "write for a commit that still writes its 10 records; each the faster by p50 of an INSERT (one round "
        "trip; 10 rows: INSERT ... SELECT FROM unnest of binary arrays) and a binary COPY of the same rows, "
        "where the results hold both.",
        "",
    ]
    return lines


def pipeline_latency_section(res: dict[str, Any]) -> list[str]:
    lines = [
        "Consume-transform-produce, end to end (producer send to visible on the output, read_committed):",
        "",
        "| members | rate records/s | samples | p50 ms | p99 ms | max ms |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["latency"]:
        if "error" in r:
            lines.append(f"| {r['members']} | {r.get('rate_per_s', '')} | - | stalled: {_clip(r['error'], 200)} | | |")
            continue
        lines.append(
            f"| {r['members']} | {r['rate_per_s']} | {r['samples']} | {ms(r['p50_ms'])} | {ms(r['p99_ms'])} "
            f"| {ms(r['max_ms'])} |"
        )
    wake = res["wakeup"]
    notify = wake["notify"]
    lines += [
        "",
        "Wake-up of a waiting read_committed consumer (visible to it - commit_transaction returned) against raw "
        "LISTEN/NOTIFY (a listener woken by a committed INSERT + NOTIFY):",
        "",
        "| waiting reader | samples | p50 ms | p99 ms | max ms | LISTEN/NOTIFY p50 / p99 ms (baseline) "
        "| p50 vs baseline | p99 vs baseline |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for waiter, r in wake["waiters"].items():
        title = WAITER_TITLES.get(waiter, f"Consumer, fetch_max_backoff_ms={waiter}")
        lines.append(
            f"| {title} | {r['samples']} | {ms(r['p50_ms'])} | {ms(r['p99_ms'])} "
            f"| {ms(r['max_ms'])} | {ms(notify['p50_ms'])} / {ms(notify['p99_ms'])} "
            f"| {times(r['p50_ms'], notify['p50_ms'])} | {times(r['p99_ms'], notify['p99_ms'])} |"
        )
    lines.append("")
    if notify["p50_ms"] <= 0:
        lines += [
            "Both are timed from the moment the writer's commit call returned. A raw NOTIFY can reach its listener "
            "before the writer has read the reply to its commit, so the baseline's p50 is at or below zero here and "
            "no ratio is given for it.",
            "",
        ]
    cost = wake.get("cost")
    if cost:
        lines += [
            f"What waking readers costs producers: {cost['producers']} transactional producer processes commit "
            "one-record transactions, each to its own partition, while a read_committed consumer waits on all of "
            "them; the "
            "wake-ups on (the producers NOTIFY, the consumer listens) against off (the consumer polls), paired runs "
            f"of {cost['seconds']:g} s:",
            "",
            "| wake-ups | commits/s | ratio (on / off) | target |",
            "|---|---:|---:|---|",
            f"| off | {cost['commits_per_s_off']:,.0f} | | |",
            f"| on | {cost['commits_per_s_on']:,.0f} | {cost['ratio']:.2f} | >= {cost['target']:g}: "
            f"**{verdict(cost['ratio'], cost['target'])}** |",
            "",
        ]
    return lines


def reads_section(res: dict[str, Any]) -> list[str]:
    rd = res["reads"]
    readers = rd["readers"]
    raw = readers["raw"]
    lines = [
        f"{rd['records']:,} committed records in {rd['partitions']} partitions ({rd['txn_records']}-record "
        f"transactions, so the log holds commit markers), up to {rd['batch']} records per round trip. Each "
        "reader ran in lockstep with a raw binary SELECT reader of its own, one round trip each in turn, each "
        "call timed alone (the host's drift falls on both); the ratio is the median over repeats of the "
        "reader's records/s over its raw twin's, and the raw row is raw against raw (the noise left):",
        "",
        "| reader | records read | records/s | raw binary SELECT records/s (baseline) | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, r in readers.items():
        title = READ_TITLES.get(key, key)
        if "error" in r:
            lines.append(f"| {title} | - | no progress: {_clip(r['error'], 200)} | | |")
            continue
        baseline = "" if "error" in raw else f"{raw['records_per_s']:,.0f}"
        lines.append(f"| {title} | {r['records']:,} | {r['records_per_s']:,.0f} | {baseline} | {ratio(r['ratio'])} |")
    lines.append("")
    return lines


def spark_reads_section(res: dict[str, Any]) -> list[str]:
    target = res.get("ratio_target", SPARK_TARGET)
    return [
        f"Spark (local mode), {res['records']:,} records of 100 B in {res['partitions']} partitions, "
        f"{res['tasks']} tasks, the same task split for both reads:",
        "",
        "| read | rows/s | raw JDBC rows/s (baseline) | ratio | target |",
        "|---|---:|---:|---:|---|",
        f"| raw JDBC read of the records table (the baseline) | {res['raw_rows_per_s']:,.0f} | | 1.00 | |",
        f"| oncelog.spark.read_committed (committed_records view) | {res['committed_rows_per_s']:,.0f} "
        f"| {res['raw_rows_per_s']:,.0f} | {ratio(res['ratio'])} "
        f"| >= {target:g}: **{verdict(res['ratio'], target)}** |",
        "",
        *(
            [
                f"Medians of {len(res['read_pair_ratios'])} pairs in alternating order; the per-pair ratios: "
                + ", ".join(f"{x:.2f}" for x in res["read_pair_ratios"])
                + ".",
                "",
            ]
            if res.get("read_pair_ratios")
            else []
        ),
    ]


def pipeline_rates_section(res: dict[str, Any]) -> list[str]:
    lines = [
        "Consume-transform-produce (examples/consume_transform_produce.run, 4 partitions; records/s from the "
        "moment the whole input became visible until the group's committed offsets passed it):",
        "",
        "| members | input records | seconds | records/s | transactions (aborted) | records per transaction |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for c in res["throughput"]:
        if "error" in c:
            lines.append(f"| {c['members']} | {c['records']:,} | - | stalled: {_clip(c['error'], 200)} | | |")
            continue
        lines.append(
            f"| {c['members']} | {c['records']:,} | {c['seconds']:.2f} | {c['records_per_s']:,.0f} "
            f"| {c['transactions']:,} ({c['aborted_transactions']}) | {c['records_per_txn']} |"
        )
    lines += [
        "",
        "The cost of NOTIFY in every commit (the Consumer polls instead): single-row INSERT commits/s, raw "
        "psycopg, autocommit:",
        "",
        "| threads | statement | commits/s | INSERT alone commits/s (baseline) | ratio |",
        "|---:|---|---:|---:|---:|",
    ]
    plain = {c["threads"]: c for c in res["notify_throughput"] if c["mode"] == "plain"}
    for c in res["notify_throughput"]:
        base = plain.get(c["threads"])
        lines.append(
            f"| {c['threads']} | {NOTIFY_MODES.get(c['mode'], c['mode'])} | {c['commits_per_s']:,.0f} "
            f"| {base['commits_per_s']:,.0f} | {ratio(c['ratio'])} |"
            if base
            else f"| {c['threads']} | {NOTIFY_MODES.get(c['mode'], c['mode'])} | {c['commits_per_s']:,.0f} | | |"
        )
    lines.append("")
    return lines


def write_back_section(res: dict[str, Any]) -> list[str]:
    """The Spark write-back beside the raw JDBC write, and where its time went."""
    wb = res.get("write_back")
    if wb is None:
        return ["_Spark write-back: not in these results (measured since #16)._", ""]
    target = float(wb.get("target", WRITE_BACK_TARGET))
    if "error" in wb:
        return [f"_Spark write-back: failed: {_clip(str(wb['error']), 300)}._", ""]
    lines = [
        f"Spark write-back of {wb['records']:,} records against a raw JVM JDBC write of the same rows (same run):",
        "",
        "| write | rows/s | raw JDBC rows/s (baseline) | ratio | target |",
        "|---|---:|---:|---:|---|",
        f"| raw JVM JDBC write (the baseline) | {wb['raw_jdbc_rows_per_s']:,.0f} | | 1.00 | |",
        f"| oncelog write-back | {wb['oncelog_rows_per_s']:,.0f} | {wb['raw_jdbc_rows_per_s']:,.0f} "
        f"| {ratio(wb['ratio'])} | >= {target:g}: **{verdict(wb['ratio'], target)}** |",
        "",
    ]
    phases = _dict(wb.get("phases_s"))
    if phases:
        total = sum(float(v) for v in phases.values())
        lines += [
            "Where the write-back's time went:",
            "",
            "| phase | seconds | share |",
            "|---|---:|---:|",
            *(
                f"| {_clip(str(name), 80)} | {float(sec):.2f} | {float(sec) / total:.0%} |"
                if total > 0
                else f"| {_clip(str(name), 80)} | {float(sec):.2f} | |"
                for name, sec in phases.items()
            ),
            "",
        ]
    return lines


def spark_pipeline_section(res: dict[str, Any]) -> list[str]:
    return [
        f"Spark exactly-once pipeline (read committed input over JDBC, transform, write the output with the input "
        f"offsets in one transaction): {res['pipeline_records']:,} records at "
        f"{res['pipeline_records_per_s']:,.0f} records/s end to end.",
        "",
    ]


# --- plots --------------------------------------------------------------------------------------

BASELINE_COLOR = "0.45"
ONCELOG_COLOR = "C0"
API_COLOR = "C1"


def _figure(panels: int, *, cols: int, width: float, height: float) -> tuple[Figure, list[Axes]]:
    """A figure drawn by Agg directly: no pyplot, so no global state and no display backend is ever chosen."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 (optional: the bench extra)
    from matplotlib.figure import Figure  # noqa: PLC0415

    rows = math.ceil(panels / cols)
    cols = min(cols, panels)
    # At least 9 inches wide, so that the title above the panels fits even with one panel.
    fig = Figure(figsize=(max(9.0, width * cols), height * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(rows, cols, squeeze=False).ravel())
    for extra in axes[panels:]:
        extra.set_visible(False)
    return fig, axes[:panels]


def _save(fig: Figure, path: Path) -> None:
    # No "Software" entry (the matplotlib version): re-rendering the same results writes the same bytes.
    fig.savefig(path, dpi=100, metadata={"Software": None})


def _rate_axis(axis: Any) -> None:
    """Rates as 250k, 1.00M rather than 250000 or an offset of 1e6."""
    from matplotlib.ticker import FuncFormatter  # noqa: PLC0415 (optional: the bench extra)

    axis.set_major_formatter(FuncFormatter(lambda v, _pos: compact(v) if v > 0 else "0"))


def _legend(ax: Axes, **kwargs: Any) -> None:
    # matplotlib warns about a legend without labelled artists; an empty panel simply has none.
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def _result(outcomes: dict[str, Outcome], name: str) -> dict[str, Any] | None:
    outcome = outcomes[name]
    return outcome.result if outcome.ok else None


def plot_produce(outcomes: dict[str, Outcome], path: Path) -> bool:
    res = _result(outcomes, "produce")
    if res is None:
        return False
    _save(produce_figure(res), path)
    return True


def produce_figure(res: dict[str, Any]) -> Figure:
    """Produce throughput against batch size, a panel per value size and partition count: both raw writes,
    the store call, the Producer and Producer(url)."""
    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for c in res["cases"]:
        groups.setdefault((c["value_size"], c["partitions"]), []).append(c)
    fig, axes = _figure(len(groups), cols=2, width=5.2, height=3.8)
    for ax, ((size, parts), cases) in zip(axes, groups.items(), strict=True):
        cases.sort(key=lambda c: c["batch"])
        x = [c["batch"] for c in cases]
        store = [c["store"]["records_per_s"] for c in cases]
        ax.plot(x, [raw_copy(c)["records_per_s"] for c in cases], "s--", color=BASELINE_COLOR, label="raw binary COPY")
        if _has_unnest(cases):
            unnest = [c["raw_unnest"]["records_per_s"] for c in cases]
            ax.plot(x, unnest, "D:", color=BASELINE_COLOR, label="raw INSERT ... unnest")
        ax.plot(x, store, "o-", color=ONCELOG_COLOR, label="store.log.produce")
        ax.plot(x, [c["producer"]["records_per_s"] for c in cases], "^-", color=API_COLOR, label="Producer")
        defaults = [(c["batch"], c["producer_defaults"]["records_per_s"]) for c in cases if "producer_defaults" in c]
        if defaults:
            ax.plot(*zip(*defaults, strict=True), "v", color=API_COLOR, fillstyle="none", label="Producer(url)")
        for xi, yi, c in zip(x, store, cases, strict=True):
            ax.annotate(f"{c['ratio_store']:.2f}", (xi, yi), textcoords="offset points", xytext=(4, 5), fontsize=8)
        ax.set(xscale="log", yscale="log", xlabel="records per batch", ylabel="records/s")
        ax.set_xticks(x, [str(v) for v in x])
        ax.set_title(f"{_size(size)} values, {parts} partition(s)", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        _legend(ax, fontsize=8)
    fig.suptitle(
        "Idempotent produce: throughput against batch size (grey: the raw writes; "
        "labels: ratio store / the faster raw write)"
    )
    return fig


def plot_transactions(outcomes: dict[str, Outcome], path: Path) -> bool:
    res = _result(outcomes, "transactions")
    if res is None:
        return False
    groups: dict[int, list[dict[str, Any]]] = {}
    for c in res["throughput"]:
        groups.setdefault(c["partitions"], []).append(c)
    fig, axes = _figure(len(groups), cols=2, width=5.2, height=3.8)
    for ax, (parts, cases) in zip(axes, groups.items(), strict=True):
        cases.sort(key=lambda c: c["txn_size"])
        x = [c["txn_size"] for c in cases]
        txn = [c["transactional"]["records_per_s"] for c in cases]
        ax.axhline(
            cases[0]["idempotent"]["records_per_s"], color=BASELINE_COLOR, ls="--", label="idempotent (free-running)"
        )
        ax.plot(
            x,
            [c["idempotent_flushed"]["records_per_s"] for c in cases],
            "s:",
            color=BASELINE_COLOR,
            label="idempotent, flush every N",
        )
        ax.plot(x, txn, "o-", color=ONCELOG_COLOR, label="transactional")
        for xi, yi, c in zip(x, txn, cases, strict=True):
            ax.annotate(f"{c['ratio']:.2f}", (xi, yi), textcoords="offset points", xytext=(4, -12), fontsize=8)
        ax.set(xscale="log", yscale="log", xlabel="records per transaction (N)", ylabel="records/s")
        ax.set_xticks(x, [str(v) for v in x])
        ax.set_title(f"{parts} partition(s)", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        _legend(ax, fontsize=8)
    fig.suptitle("Transactions: throughput against transaction size (labels: ratio to the idempotent producer)")
    _save(fig, path)
    return True


LatencyPanel = tuple[str, list[tuple[str, dict[str, Any], bool]]]


def _latency_panels(outcomes: dict[str, Outcome]) -> list[LatencyPanel]:
    """(title, [(label, percentiles, is_baseline)]) for every latency the results hold."""
    panels: list[LatencyPanel] = []
    produce, txn, pipe = (_result(outcomes, n) for n in ("produce", "transactions", "pipeline"))
    if produce and produce.get("latency"):
        lat = produce["latency"]
        panels.append(
            (
                "produce, 1 record",
                [
                    ("Producer", lat["producer"], False),
                    ("store call", lat["store"], False),
                    ("raw INSERT", lat["raw"], True),
                    *([("raw COPY", lat["raw_copy"], True)] if "raw_copy" in lat else []),
                ],
            )
        )
    if txn and txn.get("commit_latency"):
        lat = txn["commit_latency"]
        labels = {"empty": "empty", "ten_flushed": "10 flushed", "ten_1p": "10, 1p", "ten_4p": "10, 4p"}
        bars = [(label, lat[k], False) for k, label in labels.items() if k in lat]
        bars += [
            (name.replace("single-row", "1-row").replace(" ... unnest", ""), lat[k], True)
            for raws in RAW_COMMIT.values()
            for k, name in raws.items()
            if k in lat
        ]
        panels.append(("commit_transaction", bars))
    if pipe:
        bars = [(f"end to end, {r['members']}m", r, False) for r in pipe.get("latency") or [] if "error" not in r]
        wake = pipe.get("wakeup") or {}
        bars += [
            (f"wake-up, {WAITER_SHORT.get(b, b + ' ms')}", r, False) for b, r in (wake.get("waiters") or {}).items()
        ]
        if wake.get("notify"):
            bars.append(("LISTEN/NOTIFY", wake["notify"], True))
        if bars:
            panels.append(("pipeline", bars))
    return panels


def plot_latency(outcomes: dict[str, Outcome], path: Path) -> bool:
    panels = _latency_panels(outcomes)
    if not panels:
        return False
    fig, axes = _figure(len(panels), cols=3, width=4.6, height=4.0)
    for ax, (title, bars) in zip(axes, panels, strict=True):
        x = range(len(bars))
        p50 = [b[1]["p50_ms"] for b in bars]
        p99 = [b[1]["p99_ms"] for b in bars]
        colors = [BASELINE_COLOR if b[2] else ONCELOG_COLOR for b in bars]
        drawn = ax.bar([i - 0.2 for i in x], p50, width=0.4, color=colors)
        ax.bar_label(drawn, labels=[ms(v) for v in p50], fontsize=7, padding=1)
        drawn = ax.bar([i + 0.2 for i in x], p99, width=0.4, color=colors, alpha=0.5, hatch="//")
        ax.bar_label(drawn, labels=[ms(v) for v in p99], fontsize=7, padding=1)
        # Linear unless the values span orders of magnitude (LISTEN/NOTIFY beside an end-to-end pipeline);
        # a wake-up can beat the commit's reply (a negative time), and a log scale has no room for that.
        everything = p50 + p99
        if min(everything) > 0 and max(everything) / min(everything) > 50:
            ax.set_yscale("log")
        ax.set_xticks(list(x), [b[0] for b in bars], rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("ms")
        ax.set_title(f"{title} (left p50, right p99)", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Latency percentiles: p50 (solid) and p99 (hatched), grey: the raw PostgreSQL baseline")
    _save(fig, path)
    return True


def plot_reads(outcomes: dict[str, Outcome], path: Path) -> bool:
    panels: list[tuple[str, list[tuple[str, float, float | None, bool]]]] = []
    txn, spark = outcomes["transactions"], outcomes["spark"]
    if txn.ok and txn.result:
        readers = txn.result["reads"]["readers"]
        bars = [
            (
                READ_TITLES.get(k, k).replace(" (baseline)", "").replace(" (diagnostic)", ""),
                r["records_per_s"],
                None if k == "raw" else r["ratio"],
                k == "raw",
            )
            for k, r in readers.items()
            if "error" not in r
        ]
        panels.append(("read_committed and read_uncommitted reads, records/s", bars))
    if spark.ok and spark.result:
        r = spark.result
        panels.append(
            (
                "Spark reads, rows/s",
                [
                    ("raw JDBC read", r["raw_rows_per_s"], None, True),
                    ("committed view", r["committed_rows_per_s"], r["ratio"], False),
                ],
            )
        )
    if not panels:
        return False
    fig, axes = _figure(len(panels), cols=1, width=8.5, height=3.4)
    for ax, (title, bars) in zip(axes, panels, strict=True):
        y = list(range(len(bars)))[::-1]
        ax.barh(y, [b[1] for b in bars], color=[BASELINE_COLOR if b[3] else ONCELOG_COLOR for b in bars])
        for yi, (_, value, of_raw, _base) in zip(y, bars, strict=True):
            ax.annotate(
                f"{compact(value)}" + (f"  ({of_raw:.2f} of raw)" if of_raw is not None else "  (baseline)"),
                (value, yi),
                textcoords="offset points",
                xytext=(3, -3),
                fontsize=8,
            )
        ax.set_yticks(y, [b[0] for b in bars], fontsize=8)
        ax.set_xlim(0, max((b[1] for b in bars), default=1) * 1.35)
        _rate_axis(ax.xaxis)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle("Read rates against the raw PostgreSQL baseline (grey)")
    _save(fig, path)
    return True


RatePanel = tuple[str, list[tuple[str, float, bool]]]


def _pipeline_panels(outcomes: dict[str, Outcome]) -> list[RatePanel]:
    """(title, [(label, rate, is_baseline)]) for every pipeline rate the results hold."""
    panels: list[RatePanel] = []
    pipe, spark = outcomes["pipeline"], outcomes["spark"]
    rates: list[tuple[str, float, bool]] = []
    if pipe.ok and pipe.result:
        rates += [
            (f"consume-transform-produce, {c['members']} member(s)", c["records_per_s"], False)
            for c in pipe.result["throughput"]
            if "error" not in c
        ]
    if spark.ok and spark.result:
        rates.append(("Spark exactly-once pipeline", spark.result["pipeline_records_per_s"], False))
    if rates:
        panels.append(("exactly-once pipelines, records/s", rates))
    write_back = _dict(spark.result.get("write_back")) if spark.ok and spark.result else {}
    if write_back and "error" not in write_back:
        panels.append(
            (
                "Spark write-back, rows/s (grey: raw JVM JDBC write)",
                [
                    ("raw JDBC write", write_back["raw_jdbc_rows_per_s"], True),
                    ("oncelog write-back", write_back["oncelog_rows_per_s"], False),
                ],
            )
        )
    if pipe.ok and pipe.result and pipe.result.get("notify_throughput"):
        panels.append(
            (
                "single-row INSERT commits/s, with NOTIFY (grey: INSERT alone)",
                [
                    (
                        f"{NOTIFY_MODES.get(c['mode'], c['mode'])}, {c['threads']} thread(s)",
                        c["commits_per_s"],
                        c["mode"] == "plain",
                    )
                    for c in pipe.result["notify_throughput"]
                ],
            )
        )
    return panels


def plot_pipeline(outcomes: dict[str, Outcome], path: Path) -> bool:
    panels = _pipeline_panels(outcomes)
    if not panels:
        return False
    fig, axes = _figure(len(panels), cols=1, width=8.5, height=3.2)
    for ax, (title, bars) in zip(axes, panels, strict=True):
        y = list(range(len(bars)))[::-1]
        ax.barh(y, [b[1] for b in bars], color=[BASELINE_COLOR if b[2] else ONCELOG_COLOR for b in bars])
        for yi, (_, value, _base) in zip(y, bars, strict=True):
            ax.annotate(compact(value), (value, yi), textcoords="offset points", xytext=(3, -3), fontsize=8)
        ax.set_yticks(y, [b[0] for b in bars], fontsize=8)
        ax.set_xlim(0, max((b[1] for b in bars), default=1) * 1.2)
        _rate_axis(ax.xaxis)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle("Pipeline rates")
    _save(fig, path)
    return True


PLOTTERS: dict[str, Callable[[dict[str, Outcome], Path], bool]] = {
    "produce_throughput.png": plot_produce,
    "txn_throughput.png": plot_transactions,
    "latency.png": plot_latency,
    "read_rates.png": plot_reads,
    "pipeline_rates.png": plot_pipeline,
}


def draw_plots(outcomes: dict[str, Outcome], out: Path, *, plots: bool = True) -> tuple[dict[str, str], list[str]]:
    """Every plot the results allow: {file name: file name} for those drawn, and notes for those not drawn."""
    drawn: dict[str, str] = {}
    notes: list[str] = []
    for name in PLOTTERS:
        # A plot the results no longer allow must not linger beside the new report.
        (out / name).unlink(missing_ok=True)
    if not plots:
        return drawn, ["plots skipped (--no-plots)"]
    try:
        import matplotlib  # noqa: PLC0415, F401 (optional: the bench extra)
    except ImportError:
        return drawn, ["plots skipped: matplotlib is not installed (pip install -e '.[bench]')"]
    for name, plot in PLOTTERS.items():
        try:
            if plot(outcomes, out / name):
                drawn[name] = name
        except Exception as exc:  # a plot, whatever goes wrong in it, must never cost the report
            notes.append(f"{name} not drawn ({type(exc).__name__}: {exc})")
    return drawn, notes


# --- the report ---------------------------------------------------------------------------------


def _image(drawn: dict[str, str], name: str, alt: str) -> list[str]:
    return [f"![{alt}]({name})", ""] if name in drawn else []


def render(outcomes: dict[str, Outcome], drawn: dict[str, str], plot_notes: Sequence[str] = ()) -> str:
    """The report's markdown (the plots, already drawn, are referenced by file name)."""
    quick = any(o.quick for o in outcomes.values())
    rows = headlines(outcomes)
    lines = ["# oncelog benchmark report", ""]
    if quick:
        lines += [
            "> **--quick run**: tiny record counts that check the benchmarks work; the numbers measure nothing.",
            "",
        ]
    lines += [
        "Every figure beside its raw-PostgreSQL baseline measured in the same run on the same server, and the ratio "
        "(oncelog / baseline: for throughput higher is better, 1.00 is the baseline's speed; latencies are given "
        "as multiples of the baseline's time, lower is better). `bench/run` runs every benchmark and rewrites "
        "this report.",
        "",
        *_guard("the machine", partial(machine_lines, outcomes)),
        "",
        *_guard("the benchmarks' status", partial(status_table, outcomes)),
        "",
    ]
    for note in consistency_notes(outcomes):
        lines += [f"_{note}_", ""]
    lines += ["## Headline", "", *headline_table(rows), "", headline_summary(rows), ""]

    produce, txn, pipe, spark, groups, outbox, broker, replication, storage, compaction = (
        outcomes[n] for n in BENCHMARKS
    )
    sections: list[tuple[str, list[tuple[Outcome, str, Callable[[dict[str, Any]], list[str]]]], str, str]] = [
        (
            "Throughput against batch size",
            [
                (produce, "produce throughput", produce_throughput_section),
                (produce, "the Producer's throughput and client cost", producer_section),
            ],
            "produce_throughput.png",
            "produce throughput against batch size, with the raw baselines (binary COPY, INSERT ... unnest)",
        ),
        (
            "Throughput against transaction size",
            [(txn, "transactional throughput", txn_throughput_section)],
            "txn_throughput.png",
            "transactional throughput against transaction size, with the idempotent baseline",
        ),
        (
            "Latency percentiles",
            [
                (produce, "produce latency", produce_latency_section),
                (txn, "commit latency", commit_latency_section),
                (pipe, "pipeline latency", pipeline_latency_section),
            ],
            "latency.png",
            "latency percentiles against the raw baselines",
        ),
        (
            "Read rates",
            [(txn, "reads", reads_section), (spark, "Spark reads", spark_reads_section)],
            "read_rates.png",
            "read rates against raw SELECT and raw JDBC",
        ),
        (
            "Pipeline rates",
            [
                (pipe, "pipeline rates", pipeline_rates_section),
                (spark, "the Spark pipeline", spark_pipeline_section),
                (spark, "the Spark write-back", write_back_section),
            ],
            "pipeline_rates.png",
            "pipeline rates, the Spark write-back and the cost of NOTIFY",
        ),
        ("Consumer groups through a rebalance", [(groups, "the rebalance", groups_section)], "", ""),
        ("Records in the application's own transaction", [(outbox, "the outbox", outbox_section)], "", ""),
        ("Kafka's own clients through oncelog broker", [(broker, "the broker", broker_section)], "", ""),
        ("Synchronous replication", [(replication, "replication", replication_section)], "", ""),
        ("Storage and retention", [(storage, "storage", storage_section)], "", ""),
        ("Compaction", [(compaction, "compaction", compaction_section)], "", ""),
    ]
    for title, parts, image, alt in sections:
        lines += [f"## {title}", "", *_image(drawn, image, alt)]
        for outcome, what, section in parts:
            if not outcome.ok or outcome.result is None:
                lines += [f"_{what[0].upper()}{what[1:]}: not measured; {outcome.why()}._", ""]
                continue
            lines += _guard(what, partial(section, outcome.result))
    if plot_notes:
        lines += ["## Plots not drawn", "", *(f"- {note}" for note in plot_notes), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def readme_block(outcomes: dict[str, Outcome], report_link: str) -> str:
    """The README's headline block (the text between the markers): the machine, the table, the summary."""
    rows = headlines(outcomes)
    return "\n".join(
        [
            f"## Measured ({machine_summary(outcomes)})",
            "",
            *headline_table(rows),
            "",
            headline_summary(rows),
            "",
            "Each ratio pairs oncelog with its baseline measured back to back in the same run (the machine's load "
            "drifts); the raw write ceiling is the faster, in each run, of binary COPY and INSERT ... SELECT FROM "
            "unnest of binary arrays, the same rows in a plain table. Every figure beside its baseline, with plots "
            f"and the machine: [{report_link}]({report_link}); "
            "`bench/run` runs every benchmark on one server and rewrites both.",
        ]
    )


class MarkerError(ValueError):
    """The README does not hold exactly one bench:headline start marker followed by one end marker."""


def replace_block(text: str, block: str) -> str:
    """``text`` with everything between the markers replaced by ``block``; the markers and the rest stay as they
    are, byte for byte, so replacing twice with the same block changes nothing."""
    start, end = text.find(START_MARKER), text.find(END_MARKER)
    if text.count(START_MARKER) != 1 or text.count(END_MARKER) != 1 or end < start:
        raise MarkerError(f"{MarkerError.__doc__} ({START_MARKER} ... {END_MARKER})")
    return text[: start + len(START_MARKER)] + "\n" + block.strip("\n") + "\n" + text[end:]


def update_readme(path: Path, block: str) -> bool:
    """Put ``block`` between the README's markers; True when the file changed.

    Others edit the README too: it is read right before the write, and written through a temporary file
    and a rename, so a reader never sees half a README and an edit is lost only if it lands in between."""
    text = path.read_text()
    new = replace_block(text, block)
    if new == text:
        return False
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(new)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def build(results: Path, out: Path, *, plots: bool = True) -> tuple[dict[str, Outcome], Path]:
    """Read the results, draw the plots (unless ``plots`` is false) and write ``report.md`` into ``out``."""
    outcomes = load_outcomes(results)
    out.mkdir(parents=True, exist_ok=True)
    drawn, notes = draw_plots(outcomes, out, plots=plots)
    report = out / "report.md"
    report.write_text(render(outcomes, drawn, notes))
    return outcomes, report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results", help="the benchmarks' JSON")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench", help="where report.md and PNGs go")
    parser.add_argument(
        "--update-readme",
        nargs="?",
        type=Path,
        const=ROOT / "README.md",
        metavar="README",
        help="replace the block between the bench:headline markers of README (default: the repository's) "
        "with the headline table; only from a complete run of every benchmark, never from --quick results",
    )
    parser.add_argument("--no-plots", action="store_true", help="the markdown only (no matplotlib needed)")
    args = parser.parse_args(argv)
    outcomes, report = build(args.results, args.out, plots=not args.no_plots)
    rows = headlines(outcomes)
    sys.stdout.write("\n".join(["", *headline_table(rows), "", headline_summary(rows), ""]) + "\n")
    print(f"report: {report}", file=sys.stderr)
    for o in outcomes.values():
        if not o.ok:
            print(f"note: {o.why()}", file=sys.stderr)
    if args.update_readme is not None:
        readme: Path = args.update_readme
        # The README shows one complete, real run: never quick numbers, never a mix of new figures and
        # holes (the report in --out still says what is missing and why).
        if any(o.quick for o in outcomes.values()):
            print(f"{readme} left as it is: --quick results measure nothing", file=sys.stderr)
            return 0
        incomplete = [o.why() for o in outcomes.values() if not o.ok]
        if incomplete:
            print(
                f"{readme} left as it is, its headline comes from complete runs only: {'; '.join(incomplete)}",
                file=sys.stderr,
            )
            return 0
        link = Path(os.path.relpath(report.resolve(), readme.resolve().parent)).as_posix()
        try:
            changed = update_readme(readme, readme_block(outcomes, link))
        except (OSError, MarkerError) as exc:
            print(f"{readme} not updated: {exc}", file=sys.stderr)
            return 1
        print(f"{readme}: headline {'updated' if changed else 'unchanged'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
