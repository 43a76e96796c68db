"""A three-node PostgreSQL cluster with automatic failover, on the loopback (``oncelog dev-cluster``).

One primary and two standbys, each committing transaction waiting for ``ANY 1`` of the standbys
(``synchronous_standby_names = 'ANY 1 (...)'``, ``synchronous_commit = on``): a commit the primary
acknowledged is on a second node's disk, so killing the primary loses nothing acknowledged, and
with three nodes the cluster keeps committing while any one of them is down (with two, commits
hang until the standby returns).

pg_auto_failover manages it (Debian's ``postgresql-<major>-auto-failover`` and
``pg-auto-failover-cli``): a monitor node watches the three, promotes the standby with the most
WAL when the primary stops answering, and has the old primary rejoin as a standby (pg_rewind)
when it comes back. It sets the ``ANY 1`` quorum itself from ``number_sync_standbys``. Patroni
(with etcd) is the other manager Debian packages, but Debian's Patroni 3.0 names synchronous
standbys in priority order only (quorum commit came with Patroni 4.0), and needs etcd besides.

Each node is one ``pg_autoctl run`` process (its keeper), which supervises that node's
PostgreSQL; :meth:`DevCluster.kill` crashes a node as a power cut would: the keeper and every
process of its server frozen, then killed. The URL names the three
nodes with ``target_session_attrs=read-write``, so libpq (and pgjdbc, through oncelog's Spark
pipeline) connects to whichever is primary now.

Failure detection is shortened for one machine: the monitor declares a node unhealthy after about
4 s and waits 6 s for an unreachable primary to demote itself, which its keeper does after 3 s
without the monitor (pg_auto_failover's rule: the demote timeout exceeds the keeper's network
partition timeout, so two primaries never accept writes at once). A failover takes about 10 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from oncelog.embedded import (
    DEFAULT_DATABASE,
    SUPERUSER,
    default_data_dir,
    dir_lock,
    find_server_binaries,
    free_port,
    give_to_server_user,
    include_settings,
    prepare_data_dir,
    run_server_tool,
    server_tool_kwargs,
    write_settings,
)
from oncelog.errors import EmbeddedServerError, ServerBinariesNotFoundError

NODES = ("node1", "node2", "node3")
MONITOR = "monitor"

AUTOCTL_HINT = (
    "pg_autoctl (pg_auto_failover) was not found; oncelog dev-cluster needs it.\n"
    "Install it:   sudo apt-get install -y pg-auto-failover-cli postgresql-<major>-auto-failover\n"
    "(the PostgreSQL major version of the server binaries; scripts/setup.sh dev installs both)"
)

#: The monitor's failure detection, shortened for a cluster on one machine (see the module's text).
_MONITOR_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "4000",
    "pgautofailover.primary_demote_timeout": "6000",
}
#: Each keeper's: a primary cut off from the monitor demotes itself after 3 s, before the
#: monitor promotes another (primary_demote_timeout, 6 s).
_KEEPER_SETTINGS = {"timeout.network_partition_timeout": "3"}

#: Every node's pg_hba.conf, written on the first node before the standbys copy it: the loopback
#: only, pg_auto_failover's own roles and the superuser without a password (as the embedded
#: server's superuser; the keeper also connects as it over the Unix socket), every other role
#: with its password.
_HBA = (
    "# oncelog dev-cluster: the loopback only\n"
    f"local all {SUPERUSER} trust\n"
    f"host all {SUPERUSER} 127.0.0.1/32 trust\n"
    "host replication pgautofailover_replicator 127.0.0.1/32 trust\n"
    "host all pgautofailover_replicator 127.0.0.1/32 trust\n"
    "host all pgautofailover_monitor 127.0.0.1/32 trust\n"
    "host all all 127.0.0.1/32 scram-sha-256\n"
)

#: How long start() waits for the cluster to settle, and a node for its keeper to stop.
_SETTLE_S = 180.0
_STOP_S = 60.0


def default_cluster_dir(xdg_data_home: str | None = None) -> Path:
    """Where the dev cluster lives unless told otherwise (beside the embedded server's folder)."""
    return default_data_dir(xdg_data_home, "dev-cluster")


def find_autoctl() -> Path:
    """pg_auto_failover's ``pg_autoctl``; ServerBinariesNotFoundError with install hints."""
    found = shutil.which("pg_autoctl")
    if found is None:
        raise ServerBinariesNotFoundError(AUTOCTL_HINT)
    return Path(found)


@dataclass(frozen=True)
class NodeState:
    """One node as the monitor sees it."""

    name: str
    port: int
    #: The state the node last reported (primary, secondary, catchingup, draining, ...).
    reported: str
    #: The state the monitor assigned it.
    assigned: str
    healthy: bool

    @property
    def settled(self) -> bool:
        """In the state the monitor wants it in."""
        return self.reported == self.assigned


@dataclass(frozen=True)
class ClusterStatus:
    """What ``dev-cluster status`` reports."""

    data_dir: Path
    initialized: bool
    #: Names of the nodes (and the monitor) whose keeper runs.
    running: tuple[str, ...]
    nodes: tuple[NodeState, ...]
    url: str | None

    @property
    def primary(self) -> str | None:
        """The node that is primary and meant to be, if one is."""
        return next((n.name for n in self.nodes if n.settled and n.reported == "primary"), None)

    @property
    def healthy(self) -> bool:
        """A primary and two standbys in sync, every keeper running."""
        return (
            len(self.running) == len(NODES) + 1
            and self.primary is not None
            and sum(n.settled and n.reported == "secondary" for n in self.nodes) == len(NODES) - 1
            and all(n.healthy for n in self.nodes)
        )


class DevCluster:
    """A pg_auto_failover cluster of three PostgreSQL nodes and a monitor in ``data_dir``."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        bin_dir: str | os.PathLike[str] | None = None,
        database: str = DEFAULT_DATABASE,
    ) -> None:
        self.data_dir = Path(data_dir) if data_dir is not None else default_cluster_dir()
        self._bin_dir = bin_dir
        self.database = database

    # --- public operations -----------------------------------------------------------------

    def url(self, database: str | None = None) -> str:
        """A URL naming the three nodes that connects to whichever is primary."""
        ports = self._ports()
        if ports is None:
            raise EmbeddedServerError(f"the dev cluster in {self.data_dir} was never started")
        hosts = ",".join(f"127.0.0.1:{ports[n]}" for n in NODES)
        return f"postgresql://{SUPERUSER}@{hosts}/{database or self.database}?target_session_attrs=read-write"

    def node_url(self, name: str, database: str | None = None) -> str:
        """The URL of one node, whatever its role."""
        ports = self._ports()
        if ports is None or name not in ports:
            raise EmbeddedServerError(f"no node {name!r} in the dev cluster in {self.data_dir}")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{ports[name]}/{database or self.database}"

    def start(self) -> str:
        """Create the cluster (the first time) and start every keeper that is not running; wait
        until there is a primary with two standbys in sync; return the URL.

        Idempotent and safe to call from several processes at once (a file lock serialises them).
        A crashed node (:meth:`kill`) is started again and rejoins as a standby."""
        autoctl = find_autoctl()
        bindir = find_server_binaries(self._bin_dir)
        prepare_data_dir(self.data_dir, "oncelog dev-cluster --dir, or ONCELOG_DEV_CLUSTER_DIR")
        with dir_lock(self.data_dir):
            state = self._state()
            if "ports" not in state:
                state["ports"] = {name: free_port() for name in (MONITOR, *NODES)}
                state["created"] = []
                self._save_state(state)
            created: list[str] = state["created"]
            if MONITOR not in created:
                self._create_monitor(autoctl, bindir, state["ports"][MONITOR])
                created.append(MONITOR)
                self._save_state(state)
            self._run_keeper(autoctl, MONITOR)
            self._wait(lambda: self._show_state(autoctl) is not None, "the monitor to start")
            for name in NODES:
                if name not in created:
                    self._create_node(autoctl, bindir, name, state["ports"][name], first=not set(created) - {MONITOR})
                    created.append(name)
                    self._save_state(state)
                self._run_keeper(autoctl, name)
            self._wait(lambda: self.status().healthy, "a primary and two standbys in sync")
            # Each commit waits for one of the two standbys: pg_auto_failover's default for a
            # formation of three, which the monitor keeps; checked, since everything rests on it.
            # (0 after set_synchronous(False), which says so in the state file.)
            quorum = self._autoctl(
                autoctl, "get", "formation", "number-sync-standbys", "--pgdata", self._pgdata(MONITOR)
            ).stdout.strip()
            wanted = "1" if state.get("synchronous", True) else "0"
            if quorum != wanted:
                raise EmbeddedServerError(f"the monitor's number-sync-standbys is {quorum!r}, not {wanted}")
        return self.url()

    def stop(self, mode: str = "fast") -> bool:
        """Stop every keeper (and so every server), the nodes before the monitor; False if none
        was running."""
        if mode not in ("fast", "immediate"):
            raise ValueError(f"unknown shutdown mode {mode!r}")
        if not (self.data_dir / MONITOR).is_dir():
            return False
        autoctl = find_autoctl()
        stopped = False
        with dir_lock(self.data_dir):
            for name in (*NODES, MONITOR):
                pid = self._keeper_pid(autoctl, name)
                if pid is None:
                    continue
                self._autoctl(autoctl, "stop", "--pgdata", self._pgdata(name), f"--{mode}")
                # Until the process is gone, not until `pg_autoctl status` says it stopped (its
                # server stops first): a keeper started meanwhile would find the pid file taken.
                self._wait(partial(_gone, pid), f"{name} to stop", _STOP_S)
                stopped = True
        return stopped

    def status(self) -> ClusterStatus:
        """Which keepers run, and every node's state as the monitor reports it."""
        state = self._state()
        initialized = MONITOR in state.get("created", [])
        if not initialized:
            return ClusterStatus(self.data_dir, False, (), (), None)
        autoctl = find_autoctl()
        running = tuple(n for n in (MONITOR, *NODES) if self._keeper_pid(autoctl, n) is not None)
        nodes: tuple[NodeState, ...] = ()
        if MONITOR in running:
            nodes = self._node_states(autoctl)
        return ClusterStatus(self.data_dir, True, running, nodes, self.url())

    def kill(self, name: str) -> None:
        """Crash node ``name`` as a power cut would: its keeper and every process of its
        PostgreSQL, frozen, then killed. :meth:`start` brings it back."""
        if name not in NODES:
            raise ValueError(f"unknown node {name!r} (one of {', '.join(NODES)})")
        pid = self._keeper_pid(find_autoctl(), name)
        if pid is None:
            raise EmbeddedServerError(f"{name} of the dev cluster in {self.data_dir} is not running")
        if os.getpgid(pid) != pid:
            raise EmbeddedServerError(f"{name}'s keeper (pid {pid}) does not lead its own process group")
        # Frozen first, then killed, as a machine that vanishes stops everything at once. The
        # server's backends are not in the keeper's process group (PostgreSQL makes each its own
        # session leader): killed after their postmaster, a backend waiting for the standby gives
        # up (PostgreSQL does when the postmaster dies) and its commit becomes visible, for an
        # instant, to the backends still running, though no standby has it.
        os.killpg(pid, signal.SIGSTOP)  # the keeper and the postmaster: no more forks
        processes = [pid, *_descendants(pid)]
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process, signal.SIGSTOP)
        os.killpg(pid, signal.SIGKILL)
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process, signal.SIGKILL)

    def set_synchronous(self, synchronous: bool, timeout: float = _SETTLE_S) -> None:
        """Commits wait for one standby (True, as created) or for none (False: asynchronous
        replication, for a control run that must lose acknowledged writes at a failover)."""
        autoctl = find_autoctl()
        value = "true" if synchronous else "false"
        # The monitor refuses fewer standbys in the quorum than number_sync_standbys asks for:
        # lowered before they leave it, raised after they are back.
        # Each change has the primary apply it first (state apply_settings), and the monitor
        # takes the next one only once it is settled again.
        formation = ("set", "formation", "number-sync-standbys", "1" if synchronous else "0", "--pgdata")
        changes = [("set", "node", "replication-quorum", value, "--pgdata", self._pgdata(name)) for name in NODES]
        if synchronous:
            changes.append((*formation, self._pgdata(NODES[0])))
        else:
            changes.insert(0, (*formation, self._pgdata(NODES[0])))
        with dir_lock(self.data_dir):
            for change in changes:
                self.wait_until(lambda status: status.healthy, "the cluster to settle", timeout)
                self._autoctl(autoctl, *change)
            state = self._state()
            state["synchronous"] = synchronous
            self._save_state(state)

        def applied() -> bool:
            names = self._sync_standby_names(autoctl)
            return names is not None and names.startswith("ANY 1") == synchronous

        self._wait(applied, f"synchronous replication {'on' if synchronous else 'off'}", timeout)
        self.wait_until(lambda status: status.healthy, "a primary and two standbys", timeout)

    def _sync_standby_names(self, autoctl: Path) -> str | None:
        proc = self._autoctl(autoctl, "show", "settings", "--pgdata", self._pgdata(MONITOR), "--json", check=False)
        try:
            settings = json.loads(proc.stdout)
        except ValueError:
            return None
        for row in settings.get("primary", []) if isinstance(settings, dict) else []:
            if isinstance(row, dict) and row.get("setting") == "synchronous_standby_names":
                return str(row.get("value", "")).strip("'")
        return None

    def primary_url(self, database: str | None = None) -> str:
        """The URL of the node that is primary now (one host: for a proxy placed before it)."""
        primary = self.status().primary
        if primary is None:
            raise EmbeddedServerError(f"the dev cluster in {self.data_dir} has no primary now")
        return self.node_url(primary, database)

    def fail_over(self, timeout: float = _SETTLE_S, *, lag: float = 0.0) -> str:
        """Crash the primary (:meth:`kill`) and wait until a standby is promoted; return the new
        primary's name. The old one stays down until :meth:`start`.

        ``lag``: seconds for which the primary stops sending WAL before it dies (its WAL senders
        frozen), so that the standbys are behind: with synchronous replication its commits wait
        meanwhile and none is acknowledged; with asynchronous replication they are acknowledged
        and lost."""
        old = self.status().primary
        if old is None:
            raise EmbeddedServerError(f"the dev cluster in {self.data_dir} has no primary to fail over from")
        if lag > 0:
            pid = self._keeper_pid(find_autoctl(), old)
            for sender in _descendants(pid, wal_senders=True) if pid is not None else []:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(sender, signal.SIGSTOP)
            time.sleep(lag)
        self.kill(old)
        self.wait_until(lambda status: status.primary not in (None, old), "a standby to be promoted", timeout)
        new = self.status().primary
        if new is None:  # it failed again since
            raise EmbeddedServerError(f"the dev cluster in {self.data_dir} lost its new primary")
        return new

    def wait_until(self, predicate: Callable[[ClusterStatus], bool], what: str, timeout: float = _SETTLE_S) -> None:
        """Wait until ``predicate(self.status())``; EmbeddedServerError after ``timeout`` seconds."""
        self._wait(lambda: predicate(self.status()), what, timeout)

    def destroy(self) -> None:
        """Stop the cluster (immediately) and delete its folder."""
        with contextlib.suppress(EmbeddedServerError, ServerBinariesNotFoundError):
            self.stop("immediate")
        shutil.rmtree(self.data_dir, ignore_errors=True)

    # --- internals ---------------------------------------------------------------------------

    def _pgdata(self, name: str) -> str:
        return str(self.data_dir / name)

    def _log(self, name: str) -> Path:
        return self.data_dir / f"{name}.log"

    def _env(self) -> dict[str, str]:
        # pg_autoctl keeps its configuration and state under the XDG folders: ours, so that a
        # cluster is only its folder. (Its pid files go to /tmp/pg_autoctl/<data folder>.)
        bindir = find_server_binaries(self._bin_dir)
        env = {
            "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.data_dir),
            "LANG": "C.UTF-8",
        }
        for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "share"), ("XDG_RUNTIME_DIR", "run")):
            env[var] = str(self.data_dir / sub)
        return env

    def _autoctl(self, autoctl: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_server_tool([str(autoctl), *args], cwd=self.data_dir, check=check, env=self._env())

    def _create_monitor(self, autoctl: Path, bindir: Path, port: int) -> None:
        self._fresh(MONITOR)
        self._autoctl(
            autoctl, "create", "monitor", "--pgdata", self._pgdata(MONITOR), "--pgport", str(port),
            "--pgctl", str(bindir / "pg_ctl"), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl",
        )  # fmt: skip
        write_settings(self.data_dir / MONITOR, _MONITOR_SETTINGS, "written by oncelog dev-cluster")
        include_settings(self.data_dir / MONITOR)

    def _create_node(self, autoctl: Path, bindir: Path, name: str, port: int, *, first: bool) -> None:
        self._fresh(name)
        self._autoctl(
            autoctl, "create", "postgres", "--pgdata", self._pgdata(name), "--pgport", str(port),
            "--pgctl", str(bindir / "pg_ctl"), "--pghost", "127.0.0.1", "--listen", "127.0.0.1",
            "--hostname", "127.0.0.1", "--name", name, "--dbname", self.database,
            "--skip-pg-hba", "--no-ssl", "--monitor", self._monitor_uri(),
        )  # fmt: skip
        for key, value in _KEEPER_SETTINGS.items():
            self._autoctl(autoctl, "config", "set", "--pgdata", self._pgdata(name), key, value)
        if first:
            # The standbys copy the primary's data folder, this file with it.
            hba = self.data_dir / name / "pg_hba.conf"
            hba.write_text(_HBA)
            give_to_server_user(hba)

    def _fresh(self, name: str) -> None:
        # What an interrupted creation left is started over; a node the monitor registered
        # before the interruption would be refused a second time: destroy is the way out then.
        path = self.data_dir / name
        if path.exists():
            shutil.rmtree(path)

    def _monitor_uri(self) -> str:
        ports = self._ports()
        if ports is None:
            raise EmbeddedServerError(f"the dev cluster in {self.data_dir} has no ports saved")
        return f"postgres://autoctl_node@127.0.0.1:{ports[MONITOR]}/pg_auto_failover?sslmode=disable"

    def _run_keeper(self, autoctl: Path, name: str) -> None:
        if self._keeper_pid(autoctl, name) is not None:
            return
        setsid = shutil.which("setsid") or "setsid"
        with open(self._log(name), "ab") as log:
            # setsid --fork: the keeper leads a process group of its own (kill() takes the node
            # down whole) and is not our child, so it outlives this process unwaited.
            subprocess.run(
                [setsid, "--fork", str(autoctl), "run", "--pgdata", self._pgdata(name)],
                cwd=self.data_dir,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=_STOP_S,
                **server_tool_kwargs(),
            )
        self._wait(lambda: self._keeper_pid(autoctl, name) is not None, f"{name}'s keeper to start", _STOP_S)

    def _keeper_pid(self, autoctl: Path, name: str) -> int | None:
        if not (self.data_dir / name / "PG_VERSION").is_file():
            return None
        proc = self._autoctl(autoctl, "status", "--pgdata", self._pgdata(name), "--json", check=False)
        if proc.returncode != 0:
            return None
        try:
            keeper = json.loads(proc.stdout)["pg_autoctl"]
            return int(keeper["pid"]) if keeper.get("status") == "running" else None
        except (ValueError, KeyError, TypeError):
            return None

    def _show_state(self, autoctl: Path) -> list[dict[str, Any]] | None:
        proc = self._autoctl(autoctl, "show", "state", "--pgdata", self._pgdata(MONITOR), "--json", check=False)
        if proc.returncode != 0:
            return None
        try:
            rows = json.loads(proc.stdout or "[]")
        except ValueError:
            return None
        return rows if isinstance(rows, list) else None

    def _node_states(self, autoctl: Path) -> tuple[NodeState, ...]:
        return tuple(
            NodeState(
                name=str(row["nodename"]),
                port=int(row["nodeport"]),
                reported=str(row["current_group_state"]),
                assigned=str(row["assigned_group_state"]),
                healthy=int(row.get("health", 0)) == 1,
            )
            for row in self._show_state(autoctl) or []
        )

    def _wait(self, done: Callable[[], bool], what: str, timeout: float = _SETTLE_S) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                logs = "; ".join(str(self._log(n)) for n in (MONITOR, *NODES))
                raise EmbeddedServerError(f"gave up after {timeout:.0f} s waiting for {what} (logs: {logs})")
            time.sleep(0.5)

    def _ports(self) -> dict[str, int] | None:
        ports = self._state().get("ports")
        return {str(k): int(v) for k, v in ports.items()} if isinstance(ports, dict) else None

    @property
    def _state_file(self) -> Path:
        return self.data_dir / "oncelog-dev-cluster.json"

    def _state(self) -> dict[str, Any]:
        try:
            state = json.loads(self._state_file.read_text())
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) else {}

    def _save_state(self, state: dict[str, Any]) -> None:
        tmp = self._state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self._state_file)


def _stat(pid: int | str) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state first, then the parent)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()


def _descendants(pid: int, *, wal_senders: bool = False) -> list[int]:
    """The processes below ``pid`` (its children, theirs, ...); only the WAL senders with
    ``wal_senders``."""
    children: dict[int, list[int]] = {}
    senders = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int(_stat(entry.name)[1])
            sender = wal_senders and b"walsender" in (entry / "cmdline").read_bytes()
        except OSError:  # it exited meanwhile
            continue
        children.setdefault(parent, []).append(int(entry.name))
        if sender:
            senders.add(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return [p for p in found if p in senders] if wal_senders else found


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie that no one reaped counts: a keeper is not
    our child, and a container's first process may never reap it)."""
    try:
        return _stat(pid)[0] in ("Z", "X")
    except OSError:
        return True
