"""The nemesis of ``oncelog verify``: which faults, when, for how long.

:class:`Nemesis` runs a seeded plan (:func:`plan_faults`): which faults, when, for how long. Each
fault is healed when its window ends, and everything is healed when the nemesis stops. The fault
kinds are :class:`Fault`; their exact effect is documented there. Network faults go through the
fault-injecting proxy, :mod:`oncelog.verify.proxy`.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol
from urllib.parse import urlsplit

from oncelog.verify.proxy import FAULT_CUT_AFTER_REPLY, FAULT_CUT_BEFORE_REQUEST, FaultProxy

__all__ = [
    "BROKER_FAULTS",
    "CLUSTER_FAULTS",
    "NETWORK_FAULTS",
    "PROCESS_FAULTS",
    "SERVER_FAULTS",
    "BrokerProcesses",
    "ClientProcesses",
    "FailoverCluster",
    "Fault",
    "FaultEvent",
    "FaultWindow",
    "HangTransaction",
    "ManagedServer",
    "Nemesis",
    "plan_faults",
]

_LOG = logging.getLogger(__name__)


class Fault(StrEnum):
    """A kind of fault (the names ``oncelog verify --fault`` takes), and exactly what it does."""

    KILL = "kill"
    """SIGKILL one client process, chosen by the plan among those running; a new incarnation of it
    (a new process name, the same transactional id and group instance id) starts when the window
    ends. Its unfinished operation never completes (the checker reads that as unknown)."""
    PAUSE = "pause"
    """SIGSTOP one client process for the window, then SIGCONT: a zombie that wakes up late."""
    CUT_BEFORE = "cut-before"
    """Reset a client's connection as its next request leaves (the proxy drops the request, so the
    server never sees it); armed again as soon as it fired, until the window ends."""
    CUT_AFTER = "cut-after"
    """Let the next request through in full, withhold the server's whole reply until its
    ReadyForQuery (the server has finished, and committed in autocommit), drop it and reset the
    connection; armed again as soon as it fired, until the window ends."""
    STALL = "stall"
    """Hold every byte in both directions, on every connection, for the window."""
    RESTART_CRASH = "restart-crash"
    """Stop the managed PostgreSQL server with an immediate shutdown (no checkpoint: it runs crash
    recovery at the next start) and start it again when the window ends."""
    RESTART_FAST = "restart-fast"
    """Stop the managed server with a fast shutdown (open transactions rolled back, clients
    disconnected, a checkpoint) and start it again when the window ends."""
    FAILOVER = "failover"
    """Stop the primary of a dev cluster sending WAL for half a second (its standbys fall behind;
    with synchronous replication its commits wait), then kill it (its keeper and server at once,
    frozen then SIGKILL), wait until a standby is promoted, point the proxy at the new primary,
    and bring the old one back (it rejoins as a standby) when the window ends. Only on a cluster
    the runner manages (``oncelog verify --dev-cluster``)."""
    HANGING_TXN = "hanging-txn"
    """A transactional producer with a short transaction timeout writes and flushes, then goes
    silent past its timeout (readers meeting it must abort it), and only then tries to commit."""
    BROKER_KILL = "broker-kill"
    """SIGKILL the run's ``oncelog broker`` (``oncelog verify --via broker``) and start it again on
    the same port when the window ends: the Kafka clients lose every connection and request in
    flight, reconnect, and retry by their own rules."""


#: Faults that stop the server: only where the runner manages it (the embedded server).
SERVER_FAULTS: frozenset[Fault] = frozenset({Fault.RESTART_CRASH, Fault.RESTART_FAST})
#: Faults that need a cluster with failover (``oncelog dev-cluster``) the runner manages.
CLUSTER_FAULTS: frozenset[Fault] = frozenset({Fault.FAILOVER})
#: Faults injected by the proxy.
NETWORK_FAULTS: frozenset[Fault] = frozenset({Fault.CUT_BEFORE, Fault.CUT_AFTER, Fault.STALL})
#: Faults on client processes.
PROCESS_FAULTS: frozenset[Fault] = frozenset({Fault.KILL, Fault.PAUSE})
#: Faults on the broker of a run whose clients speak Kafka (``--via broker``).
BROKER_FAULTS: frozenset[Fault] = frozenset({Fault.BROKER_KILL})

#: How long a window of each fault lasts, in seconds (drawn uniformly). Short enough for a run of
#: a few seconds to hold many windows; pauses stay below the session and transaction timeouts of
#: the workloads, so they test late wake-ups rather than expiry (hanging-txn tests expiry); the
#: longest server outages outlast the workloads' delivery timeout (unknown outcomes).
_DURATIONS: Mapping[Fault, tuple[float, float]] = {
    Fault.KILL: (0.3, 1.2),
    Fault.PAUSE: (0.5, 2.0),
    Fault.CUT_BEFORE: (0.4, 1.2),
    Fault.CUT_AFTER: (0.4, 1.2),
    Fault.STALL: (0.3, 1.5),
    Fault.RESTART_CRASH: (0.2, 4.0),
    Fault.RESTART_FAST: (0.2, 4.0),
    Fault.HANGING_TXN: (0.5, 1.5),
    # After the promotion (itself about 13 s on a dev cluster): the cluster runs one node short.
    Fault.FAILOVER: (0.5, 3.0),
    Fault.BROKER_KILL: (0.3, 1.5),
}
#: How long the primary stops replicating before the failover fault kills it, in seconds.
_FAILOVER_LAG = 0.5
#: Quiet time between two windows, in seconds.
_GAP = (0.2, 0.8)
#: The pause before a one-shot proxy fault is armed again after it fired, in seconds.
_REARM = (0.02, 0.2)
#: How long a cut window waits for its first cut past its planned end, in seconds.
_FIRST_CUT_WAIT_S = 10.0


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """One planned fault: ``fault`` starts ``at`` seconds after the nemesis starts and is healed
    ``duration`` seconds later. ``pick`` chooses its target among the candidates of that moment
    (modulo their number), so the plan is fixed by the seed alone."""

    fault: Fault
    at: float
    duration: float
    pick: int


def plan_faults(faults: Iterable[Fault], *, duration: float, seed: int, warmup: float = 1.0) -> list[FaultWindow]:
    """The windows of a run: after ``warmup`` seconds, rounds of every fault in a seeded order,
    one window at a time, while the ``duration`` lasts. The first round is always complete, so a
    short run still has every fault once (and may last longer than ``duration``)."""
    kinds = sorted(set(faults))
    rng = random.Random(seed)  # noqa: S311 - a seeded, reproducible plan, not a secret
    windows: list[FaultWindow] = []
    t = warmup
    first_round = True
    while kinds and (first_round or t < duration):
        order = list(kinds)
        rng.shuffle(order)
        for fault in order:
            if not first_round and t >= duration:
                break
            length = rng.uniform(*_DURATIONS[fault])
            windows.append(FaultWindow(fault, round(t, 3), round(length, 3), rng.randrange(1 << 30)))
            t += length + rng.uniform(*_GAP)
        first_round = False
    return windows


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """What one window did. ``fired`` counts the times the fault took effect (0: there was
    nothing to hit, e.g. no client running); ``started``/``ended`` are ``time.monotonic_ns()``,
    the clock of the history."""

    fault: Fault
    started: int
    ended: int
    fired: int
    detail: str


class ClientProcesses(Protocol):
    """The client processes the nemesis may kill and pause (real OS processes)."""

    def running(self) -> list[str]:
        """Names of the client processes running now (not killed, not paused), in a stable order."""
        ...

    def kill(self, name: str) -> bool:
        """SIGKILL ``name``; it stays down until :meth:`heal`. False if it was not running."""
        ...

    def pause(self, name: str) -> bool:
        """SIGSTOP ``name`` until :meth:`heal`. False if it was not running."""
        ...

    def heal(self) -> list[str]:
        """SIGCONT every paused process and start a new incarnation of every killed one; returns
        what was done, one line each."""
        ...


class BrokerProcesses(Protocol):
    """The broker the Kafka clients of a ``--via broker`` run speak to
    (:class:`oncelog.verify.broker.BrokerProcess`)."""

    def kill(self) -> bool:
        """SIGKILL the broker; False if it was not running."""
        ...

    def start(self) -> str:
        """Start the broker unless it runs (on its port of before); its address."""
        ...


class ManagedServer(Protocol):
    """A PostgreSQL server the nemesis may stop and start (:class:`oncelog.embedded.EmbeddedPostgres`)."""

    def stop(self, mode: str = "fast") -> bool:
        """Stop the server (``fast`` or ``immediate``); False if it was not running."""
        ...

    def start(self) -> str:
        """Start the server unless it runs; its URL."""
        ...


class FailoverCluster(Protocol):
    """Servers with automatic failover the nemesis may crash the primary of
    (:class:`oncelog.dev_cluster.DevCluster`)."""

    def primary_url(self, database: str | None = None) -> str:
        """The URL of the node that is primary now."""
        ...

    def fail_over(self, timeout: float = ..., *, lag: float = ...) -> str:
        """Crash the primary, its standbys ``lag`` seconds behind, and wait until a standby is
        promoted; the new primary's name."""
        ...

    def start(self) -> str:
        """Bring every node back (a crashed primary rejoins as a standby); the cluster's URL."""
        ...


#: Leaves a transaction open past its timeout, holding it ``extra`` seconds longer, then ends it;
#: returns a description when the store timed the transaction out (the fault fired), else None.
HangTransaction = Callable[[float, threading.Event], str | None]


class Nemesis:
    """Runs a plan of fault windows against the proxy, the client processes and the server.

    Windows run one after another, each healed when it ends (a window that overran its plan, a
    slow server start, delays the next one rather than overlapping it); :meth:`heal` (also called
    when :meth:`run` returns, however it returns) undoes everything still in effect. ``events``
    lists what each window did.
    """

    def __init__(
        self,
        plan: Sequence[FaultWindow],
        *,
        proxy: FaultProxy,
        clients: ClientProcesses,
        server: ManagedServer | None = None,
        cluster: FailoverCluster | None = None,
        hang: HangTransaction | None = None,
        broker: BrokerProcesses | None = None,
        on_start: Callable[[FaultWindow], None] | None = None,
        on_end: Callable[[FaultEvent], None] | None = None,
    ) -> None:
        """``on_start`` and ``on_end`` are called (on the thread of :meth:`run`) as each window
        starts and ends, e.g. to record the faults in the history."""
        needs_server = {w.fault for w in plan} & SERVER_FAULTS
        if needs_server and server is None:
            raise ValueError(f"faults {sorted(needs_server)} need a server the nemesis manages")
        if {w.fault for w in plan} & CLUSTER_FAULTS and cluster is None:
            raise ValueError("the failover fault needs a cluster the nemesis manages")
        if any(w.fault is Fault.HANGING_TXN for w in plan) and hang is None:
            raise ValueError("the hanging-txn fault needs a hanging transaction to run")
        if {w.fault for w in plan} & BROKER_FAULTS and broker is None:
            raise ValueError("the broker-kill fault needs the run's broker (--via broker)")
        self._plan = list(plan)
        self._proxy = proxy
        self._clients = clients
        self._server = server
        self._cluster = cluster
        self._cluster_degraded = False
        self._hang = hang
        self._broker = broker
        self._broker_down = False
        self._server_down = False
        self._on_start = on_start
        self._on_end = on_end
        self.events: list[FaultEvent] = []

    def run(self, stop: threading.Event) -> list[FaultEvent]:
        """Play the plan from now until its end (or until ``stop`` is set), then heal."""
        started = time.monotonic()
        try:
            for window in self._plan:
                if stop.wait(max(0.0, started + window.at - time.monotonic())):
                    break
                if self._on_start is not None:
                    self._on_start(window)
                begin = time.monotonic_ns()
                try:
                    fired, detail = self._inject(window, stop)
                finally:
                    self._heal_window(window.fault)
                event = FaultEvent(window.fault, begin, time.monotonic_ns(), fired, detail)
                _LOG.info("nemesis: %s fired %d: %s", window.fault, fired, detail)
                self.events.append(event)
                if self._on_end is not None:
                    self._on_end(event)
        finally:
            self.heal()
        return self.events

    def heal(self) -> list[str]:
        """End every fault still in effect: proxy faults disarmed and stalls ended, paused
        processes continued, killed ones restarted, the server started. Returns what was done."""
        done: list[str] = []
        self._proxy.disarm()
        self._proxy.resume()
        self._proxy.block_new_connections(False)
        done += self._clients.heal()
        if self._server is not None and self._server_down:
            self._start_server()
            done.append("server started")
        if self._cluster is not None and self._cluster_degraded:
            self._restore_cluster()
            done.append("cluster restored")
        if self._broker_down:
            self._start_broker()
            done.append("broker started")
        return done

    def summary(self) -> dict[str, dict[str, int]]:
        """Per fault kind: windows planned, windows played, and times it fired."""
        out: dict[str, dict[str, int]] = {}
        for w in self._plan:
            out.setdefault(str(w.fault), {"planned": 0, "windows": 0, "fired": 0})["planned"] += 1
        for e in self.events:
            entry = out.setdefault(str(e.fault), {"planned": 0, "windows": 0, "fired": 0})
            entry["windows"] += 1
            entry["fired"] += e.fired
        return out

    # --- one window ------------------------------------------------------------------------

    def _inject(self, window: FaultWindow, stop: threading.Event) -> tuple[int, str]:
        fault = window.fault
        if fault in PROCESS_FAULTS:
            candidates = self._clients.running()
            if not candidates:
                return 0, "no client process running"
            target = candidates[window.pick % len(candidates)]
            hit = self._clients.kill(target) if fault is Fault.KILL else self._clients.pause(target)
            stop.wait(window.duration)
            return int(hit), f"{'killed' if fault is Fault.KILL else 'paused'} {target} for {window.duration:.2f}s"
        if fault is Fault.CUT_BEFORE or fault is Fault.CUT_AFTER:
            return self._cuts(window, stop)
        if fault is Fault.STALL:
            held = self._proxy.stats.chunks_stalled
            self._proxy.stall(window.duration)
            stop.wait(window.duration)
            self._proxy.resume()
            held = self._proxy.stats.chunks_stalled - held
            return int(held > 0), f"stalled all traffic for {window.duration:.2f}s ({held} chunks held)"
        if fault in SERVER_FAULTS:
            assert self._server is not None  # checked in __init__
            mode = "immediate" if fault is Fault.RESTART_CRASH else "fast"
            self._server_down = True
            stopped = self._server.stop(mode)
            stop.wait(window.duration)
            self._start_server()
            return int(stopped), f"{mode} shutdown, down for {window.duration:.2f}s, started again"
        if fault is Fault.FAILOVER:
            return self._fail_over(window, stop)
        if fault in BROKER_FAULTS:
            assert self._broker is not None  # checked in __init__
            self._broker_down = True
            killed = self._broker.kill()
            stop.wait(window.duration)
            self._start_broker()
            return int(killed), f"killed the broker, down for {window.duration:.2f}s, started again"
        assert fault is Fault.HANGING_TXN and self._hang is not None  # checked in __init__
        outcome = self._hang(window.duration, stop)
        return (1, outcome) if outcome else (0, "the transaction did not time out")

    def _cuts(self, window: FaultWindow, stop: threading.Event) -> tuple[int, str]:
        """Arm the one-shot cut again each time it fired, until the window ends. A window in
        which nothing passed through the proxy (its clients were reconnecting after a broker
        kill, say) stays open until the first cut, ``_FIRST_CUT_WAIT_S`` at most."""
        rng = random.Random(window.pick)  # noqa: S311 - reproducible, not a secret
        key = FAULT_CUT_BEFORE_REQUEST if window.fault is Fault.CUT_BEFORE else FAULT_CUT_AFTER_REPLY
        first = self._proxy.stats.faults_fired.get(key, 0)
        began = time.monotonic()
        end = began + window.duration
        latest = max(end, began + _FIRST_CUT_WAIT_S)

        def cut_yet() -> bool:
            return self._proxy.stats.faults_fired.get(key, 0) > first

        def open_now() -> bool:
            now = time.monotonic()
            return now < end or (now < latest and not cut_yet())

        while open_now() and not stop.is_set():
            fired = self._proxy.stats.faults_fired.get(key, 0)
            if window.fault is Fault.CUT_BEFORE:
                self._proxy.cut_before_next_request()
            else:
                self._proxy.cut_after_next_reply(precise=True)
            while open_now() and self._proxy.stats.faults_fired.get(key, 0) == fired:
                if stop.wait(0.01):
                    break
            stop.wait(min(rng.uniform(*_REARM), max(0.0, end - time.monotonic())))
        self._proxy.disarm()
        # A precise cut claimed just before the disarm still completes: let its reply come back.
        stop.wait(0.05)
        total = self._proxy.stats.faults_fired.get(key, 0) - first
        return total, f"{total} connections cut ({key}) in {time.monotonic() - began:.2f}s"

    def _fail_over(self, window: FaultWindow, stop: threading.Event) -> tuple[int, str]:
        assert self._cluster is not None  # checked in __init__
        began = time.monotonic()
        self._cluster_degraded = True
        new = self._cluster.fail_over(lag=_FAILOVER_LAG)
        promoted = time.monotonic() - began
        # New connections reach the new primary; the proxy's connections to the old one are gone.
        self._point_proxy(self._cluster.primary_url())
        stop.wait(window.duration)
        self._restore_cluster()
        return 1, f"killed the primary; {new} promoted after {promoted:.1f}s; the old primary rejoined"

    def _restore_cluster(self) -> None:
        assert self._cluster is not None
        self._cluster.start()
        self._cluster_degraded = False
        self._point_proxy(self._cluster.primary_url())

    def _point_proxy(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.hostname and parts.port and (parts.hostname, parts.port) != self._proxy.upstream:
            self._proxy.set_upstream(parts.hostname, parts.port)

    def _heal_window(self, fault: Fault) -> None:
        if fault in NETWORK_FAULTS:
            self._proxy.disarm()
            self._proxy.resume()
        elif fault in PROCESS_FAULTS:
            self._clients.heal()
        elif fault in SERVER_FAULTS and self._server_down:
            self._start_server()
        elif fault in CLUSTER_FAULTS and self._cluster_degraded:
            self._restore_cluster()
        elif fault in BROKER_FAULTS and self._broker_down:
            self._start_broker()

    def _start_broker(self) -> None:
        assert self._broker is not None
        self._broker.start()
        self._broker_down = False

    def _start_server(self) -> None:
        assert self._server is not None
        url = self._server.start()
        self._server_down = False
        # The embedded server keeps its port across restarts unless another process took it.
        self._point_proxy(url)
