"""A private PostgreSQL cluster that starts itself (the embedded default).

When no ``ONCELOG_DATABASE_URL`` is given, the CLI and the test suite run a cluster of their own
from the PostgreSQL server binaries found on the machine: ``initdb`` and ``pg_ctl`` into a data
directory of ours, listening on 127.0.0.1 only (no Unix socket), on a free port: the superuser
connects without a password (trust, on the loopback only), every other role with its password.
A running cluster is reused.

PostgreSQL refuses to run as root, so under root every server binary runs as the ``postgres``
user (the process drops its privileges itself: no ``runuser`` needed) and that user owns the data
directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oncelog.errors import EmbeddedServerError, ServerBinariesNotFoundError
from oncelog.store.cluster import create_database

#: The superuser initdb creates; it alone connects without a password, on 127.0.0.1 only.
SUPERUSER = "postgres"
#: The user that runs the server when we are root.
SERVER_OS_USER = "postgres"
DEFAULT_DATABASE = "oncelog"

INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found.\n"
    "Install them:   sudo apt-get install -y postgresql      (Debian/Ubuntu)\n"
    "or run a server: docker compose up -d postgres\n"
    "                 export ONCELOG_DATABASE_URL=postgresql://oncelog:oncelog@127.0.0.1:5432/oncelog"
)


def default_data_dir(xdg_data_home: str | None = None, name: str = "dev-db") -> Path:
    """Where the embedded cluster (``name`` dev-db; the dev cluster's is dev-cluster) lives unless
    told otherwise.

    Under root, a folder the ``postgres`` user can reach (root's home is closed to it);
    otherwise the user's XDG data folder: ``xdg_data_home`` (the entry points pass
    ``$XDG_DATA_HOME``), else ``~/.local/share``.
    """
    if os.geteuid() == 0:
        return Path("/var/lib/oncelog") / name
    base = xdg_data_home or str(Path.home() / ".local" / "share")
    return Path(base) / "oncelog" / name


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", path)) or (0,)


def find_server_binaries(bin_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``.

    Looks in ``bin_dir`` if given, then Debian's ``/usr/lib/postgresql/<newest>/bin``, then
    ``pg_config --bindir``, then ``PATH``. Raises ServerBinariesNotFoundError with install hints.
    """

    def complete(d: Path) -> bool:
        return all((d / exe).is_file() and os.access(d / exe, os.X_OK) for exe in ("initdb", "pg_ctl", "postgres"))

    candidates: list[Path] = []
    if bin_dir is not None:
        candidates.append(Path(bin_dir))
    else:
        candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)]
        pg_config = shutil.which("pg_config")
        if pg_config:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True)
                candidates.append(Path(out.stdout.strip()))
        initdb = shutil.which("initdb")
        if initdb:
            candidates.append(Path(initdb).resolve().parent)
    for d in candidates:
        if complete(d):
            return d
    raise ServerBinariesNotFoundError(INSTALL_HINT)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ServerStatus:
    """What ``dev-db status`` reports."""

    running: bool
    initialized: bool
    data_dir: Path
    port: int | None
    url: str | None


class EmbeddedPostgres:
    """A private PostgreSQL cluster in ``data_dir``.

    ``durable=False`` turns off fsync, synchronous commit and full-page writes: safe and fast for
    throwaway test clusters, never for data you keep. ``max_prepared_transactions`` above 0 allows
    two-phase commit (PREPARE TRANSACTION), which PostgreSQL leaves off by default; it takes effect
    at the next start.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        bin_dir: str | os.PathLike[str] | None = None,
        database: str = DEFAULT_DATABASE,
        durable: bool = True,
        max_prepared_transactions: int = 0,
    ) -> None:
        if not 0 <= max_prepared_transactions <= 10_000:
            raise ValueError(f"max_prepared_transactions must be in [0, 10000], not {max_prepared_transactions}")
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self._bin_dir = bin_dir
        self.database = database
        self.durable = durable
        self.max_prepared_transactions = max_prepared_transactions

    # --- paths -----------------------------------------------------------------------------

    @property
    def pgdata(self) -> Path:
        """The PostgreSQL data directory inside ``data_dir``."""
        return self.data_dir / "pgdata"

    @property
    def log_file(self) -> Path:
        """The server's log."""
        return self.data_dir / "postgres.log"

    @property
    def _state_file(self) -> Path:
        return self.data_dir / "oncelog-dev-db.json"

    # --- public operations -----------------------------------------------------------------

    def url(self, database: str | None = None) -> str:
        """The URL of the cluster (it must have been started once, so the port is known)."""
        port = self._saved_port()
        if port is None:
            raise EmbeddedServerError(f"the embedded server in {self.data_dir} was never started")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{database or self.database}"

    def status(self) -> ServerStatus:
        """Whether the cluster is initialized and running, and where it listens."""
        initialized = (self.pgdata / "PG_VERSION").is_file()
        running = initialized and self._pg_ctl_status()
        port = self._saved_port()
        return ServerStatus(
            running=running,
            initialized=initialized,
            data_dir=self.data_dir,
            port=port,
            url=self.url() if port is not None else None,
        )

    def start(self) -> str:
        """Initialise (first time) and start the cluster unless it runs; return its URL.

        Idempotent and safe to call from several processes at once (a file lock serialises them).
        """
        bindir = find_server_binaries(self._bin_dir)
        self._prepare_dir()
        with self._lock():
            if not (self.pgdata / "PG_VERSION").is_file():
                self._initdb(bindir)
            if not self._pg_ctl_status(bindir):
                self._start_server(bindir)
            url = self.url()
        create_database(url, self.database, exist_ok=True)
        return url

    def stop(self, mode: str = "fast") -> bool:
        """Stop the cluster (``fast`` or ``immediate``); False if it was not running."""
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"unknown shutdown mode {mode!r}")
        if not (self.pgdata / "PG_VERSION").is_file():
            return False
        bindir = find_server_binaries(self._bin_dir)
        with self._lock():
            if not self._pg_ctl_status(bindir):
                return False
            self._run([str(bindir / "pg_ctl"), "stop", "-D", str(self.pgdata), "-m", mode, "-w", "-t", "60"])
            return True

    def destroy(self) -> None:
        """Stop the cluster (immediately) and delete its data directory."""
        with contextlib.suppress(EmbeddedServerError, ServerBinariesNotFoundError):
            self.stop("immediate")
        shutil.rmtree(self.data_dir, ignore_errors=True)

    # --- internals ---------------------------------------------------------------------------

    def _prepare_dir(self) -> None:
        prepare_data_dir(self.data_dir)

    def _run(self, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_server_tool(argv, cwd=self.data_dir, check=check, log_file=self.log_file)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        with dir_lock(self.data_dir):
            yield

    def _initdb(self, bindir: Path) -> None:
        if self.pgdata.exists():
            # A half-made cluster from an interrupted initdb: start over.
            shutil.rmtree(self.pgdata)
        argv = [str(bindir / "initdb"), "-D", str(self.pgdata), "-U", SUPERUSER, "--auth=trust"]
        argv += ["--encoding=UTF8", "--locale=C"]
        if not self.durable:
            argv.append("--no-sync")
        self._run(argv)
        include_settings(self.pgdata)

    def _write_conf(self, port: int) -> None:
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(port),
            "unix_socket_directories": "''",
            "max_connections": "200",
            "shared_buffers": "'256MB'",
            "max_prepared_transactions": str(self.max_prepared_transactions),
            "logging_collector": "off",
        }
        if not self.durable:
            settings.update({"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"})
        write_settings(self.pgdata, settings, "written by oncelog on every start")
        # The loopback only (the server listens nowhere else): the superuser without a password,
        # every other role with its password, so that a role's password means something here too
        # (oncelog broker's SASL/PLAIN logs Kafka clients in as roles).
        hba = self.pgdata / "pg_hba.conf"
        hba.write_text(
            "# oncelog embedded server, written on every start: TCP on the loopback only\n"
            f"host all {SUPERUSER} 127.0.0.1/32 trust\n"
            "host all all 127.0.0.1/32 scram-sha-256\n"
        )
        give_to_server_user(hba)

    def _start_server(self, bindir: Path) -> None:
        # A saved port is reused so the URL stays stable across restarts; if something else took
        # it meanwhile, pick another.
        port = self._saved_port()
        last_error: EmbeddedServerError | None = None
        for attempt in range(3):
            if port is None or attempt > 0 or not _port_free(port):
                port = free_port()
            self._write_conf(port)
            try:
                self._run(
                    [
                        str(bindir / "pg_ctl"),
                        "start",
                        "-D",
                        str(self.pgdata),
                        "-l",
                        str(self.log_file),
                        "-w",
                        "-t",
                        "60",
                    ]
                )
            except EmbeddedServerError as exc:
                last_error = exc
                continue
            self._save_port(port)
            return
        raise last_error or EmbeddedServerError("no port to start the embedded server on")

    def _pg_ctl_status(self, bindir: Path | None = None) -> bool:
        if not (self.pgdata / "PG_VERSION").is_file():
            return False
        bindir = bindir or find_server_binaries(self._bin_dir)
        proc = self._run([str(bindir / "pg_ctl"), "status", "-D", str(self.pgdata)], check=False)
        return proc.returncode == 0

    def _saved_port(self) -> int | None:
        try:
            return int(json.loads(self._state_file.read_text())["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _save_port(self, port: int) -> None:
        tmp = self._state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"port": port}))
        tmp.replace(self._state_file)


# --- running the server's tools as the server's user (also oncelog.dev_cluster's) ----------------


def server_user() -> pwd.struct_passwd | None:
    """The user the server's tools run as: ``postgres`` under root (PostgreSQL refuses root),
    None (ourselves) otherwise."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_OS_USER)
    except KeyError:
        raise EmbeddedServerError(
            "running as root, and PostgreSQL refuses to run as root; there is no "
            f"'{SERVER_OS_USER}' user to run it as (Debian's postgresql package creates it: "
            "sudo apt-get install -y postgresql), or run oncelog as a normal user"
        ) from None


def give_to_server_user(*paths: Path) -> None:
    """Make the server's user own ``paths`` (files we wrote into its data directory)."""
    user = server_user()
    if user is not None:
        for path in paths:
            os.chown(path, user.pw_uid, user.pw_gid)


def include_settings(pgdata: Path) -> None:
    """Have the server in ``pgdata`` read oncelog's settings (:func:`write_settings`) last, so that
    they win over what its tools wrote before them."""
    with open(pgdata / "postgresql.conf", "a") as conf:
        conf.write("\ninclude_if_exists = 'oncelog.conf'\n")


def write_settings(pgdata: Path, settings: Mapping[str, str], header: str) -> None:
    """Write oncelog's server settings (``name = value``, values as postgresql.conf takes them)."""
    conf = pgdata / "oncelog.conf"
    conf.write_text(f"# {header}\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
    give_to_server_user(conf)


def prepare_data_dir(data_dir: Path, hint: str = "oncelog --dev-db-dir, or ONCELOG_DEV_DB_DIR") -> None:
    """Create ``data_dir`` for the server's user, which must be able to reach it; ``hint`` says
    how to choose another."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    user = server_user()
    if user is not None:
        os.chown(data_dir, user.pw_uid, user.pw_gid)
        # Every folder above the data directory must be enterable by the server's user.
        for parent in data_dir.resolve().parents:
            if not os.stat(parent).st_mode & 0o001:
                raise EmbeddedServerError(
                    f"the '{SERVER_OS_USER}' user cannot enter {parent}; choose a data directory outside it ({hint})"
                )


def server_tool_kwargs() -> dict[str, Any]:
    """subprocess arguments that run a server tool as the server's user: Python drops the
    privileges itself (no runuser or su, which need not be on PATH), with that user's groups only."""
    user = server_user()
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def run_server_tool(
    argv: list[str],
    *,
    cwd: Path,
    check: bool = True,
    log_file: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as the server's user; with ``check``, a failure raises EmbeddedServerError
    with its output (and the end of ``log_file``)."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",  # a tool's output is for reading, whatever its bytes
            timeout=timeout,
            cwd=str(cwd),
            check=False,
            env=env,
            **server_tool_kwargs(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmbeddedServerError(f"{Path(argv[0]).name} failed: {exc}") from exc
    if check and proc.returncode != 0:
        raise EmbeddedServerError(
            f"{' '.join(Path(a).name if i == 0 else a for i, a in enumerate(argv))} exited with "
            f"{proc.returncode}:\n{proc.stdout}{proc.stderr}{log_tail(log_file)}"
        )
    return proc


def log_tail(log_file: Path | None, lines: int = 20) -> str:
    """The last ``lines`` of a server's log, for an error message ('' if there is none)."""
    if log_file is None:
        return ""
    try:
        text = log_file.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return "\nserver log (" + str(log_file) + "):\n" + "\n".join(text)


@contextlib.contextmanager
def dir_lock(data_dir: Path) -> Iterator[None]:
    """Serialise processes that start or stop the server in ``data_dir``."""
    with open(data_dir / ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
