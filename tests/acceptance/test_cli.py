"""The ``oncelog`` command as a user runs it: a subprocess, with its environment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from oncelog.cli.context import CliContext
from oncelog.embedded import EmbeddedPostgres
from oncelog.store import create_engine, migrate
from tests.support.spark_cluster import standalone_cluster


def oncelog(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ONCELOG_")}
    return subprocess.run(
        [sys.executable, "-m", "oncelog", *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=300,
        check=False,
    )


@pytest.fixture
def dev_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="oncelog-cli-")
    yield path
    EmbeddedPostgres(path).destroy()
    shutil.rmtree(path, ignore_errors=True)


def test_dev_db_commands(dev_dir: str) -> None:
    env = {"ONCELOG_DEV_DB_DIR": dev_dir}
    stopped = oncelog("dev-db", "status", env=env)
    assert stopped.returncode == 3 and "running:        no" in stopped.stdout
    # Without /usr/sbin on PATH (where runuser lives): under root the server's tools still run as
    # the postgres user, the process dropping its privileges itself.
    started = oncelog("dev-db", "start", env={**env, "PATH": "/usr/bin:/bin"})
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip()
    assert url.startswith("postgresql://postgres@127.0.0.1:")
    assert oncelog("dev-db", "url", env=env).stdout.strip() == url
    running = oncelog("dev-db", "status", env=env)
    assert running.returncode == 0 and "running:        yes" in running.stdout
    as_json = json.loads(oncelog("dev-db", "status", "--json", env=env).stdout)
    assert as_json == {"data_directory": dev_dir, "initialized": True, "running": True, "url": url}
    assert json.loads(oncelog("dev-db", "url", "--json", env=env).stdout) == {"url": url}
    assert oncelog("dev-db", "stop", env=env).stdout.strip() == "stopped"
    assert oncelog("dev-db", "stop", env=env).stdout.strip() == "not running"
    assert json.loads(oncelog("dev-db", "stop", "--json", env=env).stdout) == {"stopped": False}
    gone = oncelog("dev-db", "status", "--json", env=env)
    assert gone.returncode == 3 and json.loads(gone.stdout)["running"] is False
    assert "ONCELOG_DEV_DB_DIR" in oncelog("dev-db", "start", "--help").stdout


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_demo_on_the_embedded_default(dev_dir: str) -> None:
    """The README's main job: the exactly-once Spark pipeline on the embedded default, with aborted
    input transactions and an injected task failure, checked end to end."""
    env = {"ONCELOG_DEV_DB_DIR": dev_dir, "COLUMNS": "200"}
    result = oncelog("demo", "--transactions", "10", "--records-per-transaction", "40", "--abort-every", "3", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "exactly once:" in out
    for label, value in [
        ("in committed transactions", "280"),  # 7 of 10 transactions commit
        ("in aborted transactions (excluded)", "120"),
        ("committed output records", "280"),
        ("duplicates found", "0"),
        ("missing records", "0"),
        ("records copied by an immediate re-run", "0"),
    ]:
        line = next(line for line in out.splitlines() if label in line)
        assert line.split("│")[-2].strip() == value, line

    def number(label: str) -> int:
        line = next(line for line in out.splitlines() if label in line)
        return int(line.split("│")[-2].strip().replace(",", ""))

    # The proof: the failed attempt's copies are in the log, aborted; only read_uncommitted sees them.
    assert number("output read read_uncommitted") == 280 + number("duplicates in it") > 280
    assert "oncelog dev-db stop" in out and dev_dir in out
    refused = oncelog("demo", "--master", "local[2]", env=env)
    assert refused.returncode == 2 and "local[N,F]" in refused.stderr, refused.stderr
    as_json = oncelog(
        "demo", "--transactions", "3", "--records-per-transaction", "20", "--abort-every", "3", "--json", env=env
    )
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["exactly_once"] is True and doc["embedded_data_directory"] == dev_dir
    assert doc["output_read_committed"] == {"records": 40, "duplicates": 0}  # 2 of 3 transactions commit


def test_db_status_lists_the_tables(dev_dir: str) -> None:
    env = {"ONCELOG_DEV_DB_DIR": dev_dir, "COLUMNS": "200"}
    assert oncelog("db", "upgrade", env=env).returncode == 0
    result = oncelog("db", "status", env=env)
    assert result.returncode == 0, result.stderr
    assert f"at revision {migrate.head()}" in result.stdout
    for table in ("records", "producers", "transactions", "txn_history", "pending_offsets"):
        assert table in result.stdout
    doc = json.loads(oncelog("db", "status", "--json", env=env).stdout)
    assert doc["revision"] == doc["head"] == migrate.head() and doc["schema"] == "oncelog"
    assert "topics" in {t["table"] for t in doc["tables"]} and "password" not in doc["database"]


def test_db_commands_against_an_external_server(empty_db_url: str) -> None:
    """ONCELOG_DATABASE_URL: upgrade, current, check (clean, then drifted), downgrade."""
    env = {"ONCELOG_DATABASE_URL": empty_db_url}
    assert oncelog("db", "current", env=env).stdout.startswith("none")
    head = migrate.head()
    none = {"schema": "oncelog", "revision": None, "head": head}
    assert json.loads(oncelog("db", "current", "--json", env=env).stdout) == none
    check = oncelog("db", "check", env=env)
    assert check.returncode == 1 and "oncelog db upgrade" in check.stderr
    up = oncelog("db", "upgrade", env=env)
    assert up.returncode == 0, up.stderr
    assert oncelog("db", "current", env=env).stdout.strip() == f"{migrate.head()} (head)"
    assert oncelog("db", "check", env=env).returncode == 0
    assert json.loads(oncelog("db", "check", "--json", env=env).stdout) == {**none, "revision": head, "drift": False}

    engine = create_engine(empty_db_url)
    try:
        with engine.begin() as conn:  # a column no view or function depends on
            conn.execute(sa.text("ALTER TABLE settings DROP COLUMN max_batch_records"))
    finally:
        engine.dispose()
    drift = oncelog("db", "check", env=env)
    assert drift.returncode == 1
    assert "drifted" in drift.stderr and "max_batch_records" in drift.stderr

    down = oncelog("db", "downgrade", "base", "--json", env=env)
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout) == none
    assert oncelog("db", "current", env=env).stdout.startswith("none")
    assert json.loads(oncelog("db", "upgrade", "--json", env=env).stdout) == {**none, "revision": head}


def test_schema_option(empty_db_url: str) -> None:
    env = {"ONCELOG_DATABASE_URL": empty_db_url, "ONCELOG_SCHEMA": "analytics_log"}
    assert oncelog("db", "upgrade", env=env).returncode == 0
    assert oncelog("db", "check", env=env).returncode == 0
    bad = oncelog("--schema", "Robert'); DROP", "db", "upgrade", env=env)
    assert bad.returncode == 1 and "invalid schema name" in bad.stderr


def test_missing_server_binaries(dev_dir: str, tmp_path: Path) -> None:
    result = oncelog("dev-db", "start", env={"ONCELOG_DEV_DB_DIR": dev_dir, "ONCELOG_PG_BIN_DIR": str(tmp_path)})
    assert result.returncode == 1
    assert "apt-get install -y postgresql" in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_server_is_a_clear_error() -> None:
    result = oncelog("db", "current", env={"ONCELOG_DATABASE_URL": "postgresql://u:s3cret@127.0.0.1:1/x"})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "s3cret" not in result.stderr


def test_passwords_never_in_repr() -> None:
    ctx = CliContext(database_url="postgresql://app:hunter2@db:5432/x", schema="oncelog", dev_db_dir=None)
    assert "hunter2" not in repr(ctx)


JOB_MODULE = """
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType


@F.udf(returnType=BinaryType())
def shout(value):
    return bytes(value).upper() + b"!"


def clean(df):
    return df.select(shout(df.value).alias("value"), df.key)
"""


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_spark_run_imports_the_job_from_the_working_directory(db_url: str, tmp_path: Path) -> None:
    """The installed ``oncelog`` script (not ``python -m``, which puts the working directory on the
    path itself) runs a job module that sits in the working directory, with --conf and --json;
    a second run with nothing to read starts no Spark."""
    import oncelog  # noqa: PLC0415

    with oncelog.Admin(db_url) as admin:
        admin.create_topic("in", partitions=2)
        admin.create_topic("out", partitions=2)
    with oncelog.Producer(db_url, transactional_id="cli-spark-in") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(30):
            producer.send("in", f"v{i}".encode(), key=f"k{i}".encode())
        producer.commit_transaction()
    (tmp_path / "jobmod.py").write_text(JOB_MODULE)
    script = Path(sys.executable).parent / "oncelog"
    base = {k: v for k, v in os.environ.items() if not k.startswith("ONCELOG_")}
    env = {**base, "ONCELOG_DATABASE_URL": db_url, "PYTHONPATH": ""}
    args = [str(script), "spark", "run", "jobmod:clean", "--input", "in", "--output", "out", "--group", "g"]

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        command = [*args, *extra]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500, check=False)

    bad = run("--conf", "spark.sql.shuffle.partitions")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr, bad.stderr
    # A transform that fails: one line naming the error, no traceback (--debug shows it).
    (tmp_path / "badjob.py").write_text("def clean(df):\n    raise ValueError('no column named wrong')\n")
    broken = subprocess.run(
        [str(script), "spark", "run", "badjob:clean", "--input", "in", "--output", "out", "--group", "g"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500, check=False,
    )  # fmt: skip
    assert broken.returncode == 1, broken.stderr
    assert broken.stderr.strip().splitlines()[-1].startswith("error: ValueError: no column named wrong")
    assert "Traceback" not in broken.stderr, broken.stderr
    first = run("--conf", "spark.sql.shuffle.partitions=2", "--json", "--job-id", "7")
    assert first.returncode == 0, first.stdout + first.stderr
    doc = json.loads(first.stdout)
    assert (doc["input_offsets"], doc["output_records"], doc["spark_started"]) == (32, 30, True)  # and 2 markers
    assert (doc["job_id"], doc["already_committed"]) == (7, False)
    with oncelog.Consumer(db_url, isolation_level="read_committed") as consumer:
        consumer.assign([oncelog.TopicPartition("out", 0), oncelog.TopicPartition("out", 1)])
        got = []
        for _ in range(20):
            got += [r.value for r in consumer.poll(1.0)]
            if len(got) >= 30:
                break
    assert sorted(got) == sorted(f"V{i}!".encode() for i in range(30))
    # Run 7 again (a scheduler's retry) after more input came: it committed, so nothing is done.
    with oncelog.Producer(db_url) as producer:
        producer.send("in", b"late", key=b"k0").result(30)
    retry = run("--json", "--job-id", "7")
    assert retry.returncode == 0, retry.stderr
    doc = json.loads(retry.stdout)
    assert (doc["already_committed"], doc["spark_started"], doc["output_records"]) == (True, False, 0)
    assert "committed before" in run("--job-id", "7").stdout
    assert run("--job-id", "-1").returncode == 2
    later = run("--json", "--job-id", "8")  # the next run takes up the late record
    assert later.returncode == 0, later.stderr
    assert (json.loads(later.stdout)["output_records"], json.loads(later.stdout)["job_id"]) == (1, 8)
    again = run("--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["spark_started"] is False and json.loads(again.stdout)["output_records"] == 0
    text = run()
    assert text.returncode == 0 and "nothing to read" in text.stdout and "Spark not started" in text.stdout


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_spark_run_on_a_standalone_cluster_of_two_workers(db_url: str, tmp_path: Path) -> None:
    """``oncelog spark run --master spark://...`` on a standalone master and two worker processes
    started from the pyspark wheel: the JDBC driver reaches the executors through spark.jars, the
    job module (a UDF) through the run's shipping, oncelog through the same interpreter path;
    executors run on both workers, and every input record lands once."""
    import oncelog  # noqa: PLC0415

    with oncelog.Admin(db_url) as admin:
        admin.create_topic("in", partitions=4)
        admin.create_topic("out", partitions=2)
    with oncelog.Producer(db_url) as producer:
        for i in range(200):
            producer.send("in", f"v{i}".encode(), key=f"k{i}".encode())
    (tmp_path / "jobmod.py").write_text(JOB_MODULE)
    base = {k: v for k, v in os.environ.items() if not k.startswith("ONCELOG_")}
    env = {**base, "ONCELOG_DATABASE_URL": db_url, "PYTHONPATH": "", "SPARK_LOCAL_IP": "127.0.0.1"}
    script = Path(sys.executable).parent / "oncelog"
    cluster_dir = tmp_path / "cluster"
    cluster_dir.mkdir()
    with standalone_cluster(cluster_dir, workers=2) as cluster:
        args = [str(script), "spark", "run", "jobmod:clean", "--input", "in", "--output", "out", "--group", "g"]
        args += ["--master", cluster.master, "--max-records-per-task", "50", "--json"]
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["output_records"] == 200
        ran_on = [w for w in cluster.work_dirs if any(w.glob("app-*/*/stderr"))]
        assert len(ran_on) == 2, [sorted(str(p) for p in w.rglob("*")) for w in cluster.work_dirs]
        again = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500, check=False)
        assert again.returncode == 0 and json.loads(again.stdout)["output_records"] == 0, again.stderr
    with oncelog.Consumer(db_url, isolation_level="read_committed") as consumer:
        consumer.assign([oncelog.TopicPartition("out", 0), oncelog.TopicPartition("out", 1)])
        got: list[bytes] = []
        for _ in range(40):
            got += [r.value or b"" for r in consumer.poll(1.0)]
            if len(got) >= 200:
                break
    assert sorted(got) == sorted(f"V{i}!".encode() for i in range(200))
