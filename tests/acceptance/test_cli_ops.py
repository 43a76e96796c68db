"""The operator's commands end to end: the real CLI (click's runner over ``oncelog.cli.cli``, and a
subprocess for follow mode) against the real PostgreSQL, every --json answer checked against the
database, and every refused input leaving the database as it was."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from oncelog import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition, errors
from oncelog.cli import cli
from oncelog.store.records import decode_headers
from tests.support.roles import login_roles

#: The runner's environment: nothing inherited that would change what the commands do.
ENV: dict[str, str | None] = {"ONCELOG_SCHEMA": None, "ONCELOG_DEV_DB_DIR": None, "NO_COLOR": None, "COLUMNS": "200"}


def run(db_url: str, *args: str, input: str | bytes | None = None) -> Result:
    return CliRunner().invoke(cli, ["--database-url", db_url, *args], input=input, env=ENV, catch_exceptions=False)


def ok(db_url: str, *args: str, input: str | bytes | None = None) -> str:
    result = run(db_url, *args, input=input)
    assert result.exit_code == 0, (args, result.output)
    assert "\x1b[" not in result.stdout  # colours only on a terminal
    return result.stdout


def js(db_url: str, *args: str, input: str | bytes | None = None) -> Any:
    """A command's --json answer: exactly one JSON document on stdout."""
    return json.loads(ok(db_url, *args, "--json", input=input))


def fails(db_url: str, *args: str, match: str, input: str | bytes | None = None) -> None:
    """The command fails with one clear line on stderr and exit status 1."""
    result = run(db_url, *args, input=input)
    assert result.exit_code == 1, (args, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert match in lines[0], lines[0]
    assert result.stdout == ""


def rows(engine: sa.Engine, sql: str, **params: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(sql), params).all())


def log_records(engine: sa.Engine, topic: str) -> list[Any]:
    """The data records of ``topic`` as stored (no markers), in (partition, offset) order."""
    return rows(
        engine,
        'SELECT r.partition, r."offset", r.key, r.value, r.headers, r.is_transactional, r.aborted '
        "FROM records r JOIN topics t USING (topic_id) WHERE t.name = :t AND r.control_type IS NULL "
        'ORDER BY r.partition, r."offset"',
        t=topic,
    )


def committed_offsets(engine: sa.Engine, group: str) -> dict[tuple[str, int], int]:
    found = rows(
        engine,
        "SELECT t.name, c.partition, c.committed_offset FROM committed_offsets c JOIN topics t USING (topic_id) "
        "WHERE c.group_id = :g",
        g=group,
    )
    return {(r[0], r[1]): r[2] for r in found}


@pytest.fixture
def admin(db_url: str) -> Iterator[Admin]:
    with Admin(db_url) as a:
        yield a


# --- topics ----------------------------------------------------------------------------------------


def test_topics_create_list_describe_alter_delete(db_url: str, engine: sa.Engine) -> None:
    created = js(db_url, "topics", "create", "orders", "-p", "3", "-c", "retention.ms=60000")
    assert created["created"] is True
    assert created["topic"]["config"] == {
        "max_message_bytes": 1048588,
        "retention_ms": 60000,
        "retention_bytes": None,
        "message_timestamp_after_max_ms": 3_600_000,
        "cleanup_policy": "delete",
        "min_compaction_lag_ms": 0,
        "max_compaction_lag_ms": None,
        "delete_retention_ms": 86_400_000,
        "min_cleanable_dirty_ratio": 0.5,
    }
    assert rows(engine, "SELECT retention_ms FROM topics WHERE name = 'orders'") == [(60000,)]
    assert js(db_url, "topics", "create", "orders", "--if-not-exists")["created"] is False
    ok(db_url, "topics", "create", "audit")

    with Producer(db_url) as producer:
        for i in range(5):
            producer.send("orders", b"v%d" % i, partition=i % 2)
        producer.flush()
    listed = js(db_url, "topics", "list")
    db = rows(
        engine,
        "SELECT topic, count(*), sum(high_watermark - log_start_offset), sum(log_bytes) FROM partition_offsets "
        "GROUP BY topic ORDER BY topic",
    )
    assert [(t["name"], t["partitions"], t["offsets"], t["log_bytes"]) for t in listed] == [tuple(r) for r in db]
    assert [t["offsets"] for t in listed] == [0, 5]
    assert "orders" in ok(db_url, "topics", "list")

    described = js(db_url, "topics", "describe", "orders")
    offsets = rows(
        engine,
        "SELECT partition, log_start_offset, high_watermark, last_stable_offset FROM partition_offsets "
        "WHERE topic = 'orders' ORDER BY partition",
    )
    assert [
        (p["partition"], p["log_start_offset"], p["high_watermark"], p["last_stable_offset"])
        for p in described["partitions"]
    ] == [tuple(r) for r in offsets]
    assert [p["high_watermark"] for p in described["partitions"]] == [3, 2, 0]

    altered = js(
        db_url,
        "topics",
        "alter",
        "orders",
        "-p",
        "4",
        "-c",
        "max_message_bytes=2000",
        "--delete-config",
        "retention.ms",
    )
    assert len(altered["partitions"]) == 4
    assert rows(engine, "SELECT max_message_bytes, retention_ms FROM topics WHERE name = 'orders'") == [(2000, None)]

    # Refused: nothing changes, not even the settings given beside the bad partition count.
    fails(db_url, "topics", "alter", "orders", "-p", "2", "-c", "retention_ms=5", match="can only grow")
    fails(db_url, "topics", "alter", "orders", "-c", "colour=blue", match="unknown topic config 'colour'")
    fails(db_url, "topics", "alter", "orders", "-c", "retention_ms=soon", match="must be an integer")
    assert rows(
        engine,
        "SELECT count(*), max(t.retention_ms) FROM partitions JOIN topics t USING (topic_id) WHERE t.name = 'orders'",
    ) == [(4, None)]
    fails(db_url, "topics", "create", "orders", match="already exists")
    fails(db_url, "topics", "create", "bad/name", match="invalid topic name")
    fails(db_url, "topics", "describe", "nope", match="unknown topic 'nope'")
    fails(db_url, "topics", "delete", "nope", "--yes", match="unknown topic 'nope'")

    unconfirmed = run(db_url, "topics", "delete", "audit", input="n\n")
    assert unconfirmed.exit_code == 1 and "delete topic audit" in unconfirmed.stderr
    assert rows(engine, "SELECT count(*) FROM topics WHERE name = 'audit'") == [(1,)]
    assert js(db_url, "topics", "delete", "audit", "--yes") == {"deleted": "audit"}
    assert rows(engine, "SELECT name FROM topics ORDER BY name") == [("orders",)]


def test_a_compacted_topic_from_the_command_line(db_url: str, engine: sa.Engine) -> None:
    """Created with Kafka's names, refused a keyless line before anything is sent, compacted on
    demand, and described with its clean section."""
    created = js(
        db_url, "topics", "create", "prices", "-c", "cleanup.policy=compact", "-c", "min.cleanable.dirty.ratio=0.2"
    )
    assert (created["topic"]["config"]["cleanup_policy"], created["topic"]["config"]["min_cleanable_dirty_ratio"]) == (
        "compact",
        0.2,
    )
    fails(db_url, "produce", "prices", input="1\n", match="every record needs a key")
    assert rows(engine, "SELECT count(*) FROM records") == [(0,)]
    ok(db_url, "produce", "prices", "--key-separator", ":", input="a:1\nb:1\na:2\na:3\n")
    done = js(db_url, "topics", "compact", "prices")
    assert (done["removed"], done["examined"], done["partitions"]) == (2, 4, [0])
    described = js(db_url, "topics", "describe", "prices")
    assert (described["partitions"][0]["clean_offset"], described["partitions"][0]["removed_records"]) == (4, 2)
    shown = ok(db_url, "topics", "describe", "prices")
    assert "clean to" in shown and "dirty ratio" in shown
    assert "compacted 0 partition(s)" in ok(db_url, "topics", "compact", "prices")
    fails(db_url, "topics", "alter", "prices", "-c", "cleanup.policy=shred", match="cleanup_policy must be")
    fails(db_url, "topics", "alter", "prices", "-c", "min.cleanable.dirty.ratio=most", match="must be a number")
    assert "each key's latest record is kept" in ok(
        db_url, "topics", "create", "plain", "-c", "cleanup.policy=compact,delete"
    )
    ok(db_url, "topics", "alter", "plain", "-c", "cleanup.policy=delete")
    fails(db_url, "topics", "compact", "plain", match="not compacted")


# --- produce -------------------------------------------------------------------------------------


def test_produce_lines_from_stdin_with_keys_and_headers(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    admin.create_topic("t", partitions=3)
    answer = js(
        db_url,
        "produce",
        "t",
        "--key-separator",
        ":",
        "-H",
        "source=cli",
        "-H",
        "n=1",
        input="k1:first\nk2:second\nk1:third\n",
    )
    stored = log_records(engine, "t")
    assert answer["records"] == 3 and answer["transactional_id"] is None
    assert sum(p["records"] for p in answer["partitions"]) == 3
    for p in answer["partitions"]:
        offsets = [r.offset for r in stored if r.partition == p["partition"]]
        assert (p["first_offset"], p["last_offset"]) == (min(offsets), max(offsets))
    by_key: dict[bytes, list[bytes]] = {}
    for r in stored:
        by_key.setdefault(r.key, []).append(r.value)
        assert decode_headers(r.headers) == (("source", b"cli"), ("n", b"1"))
        assert not r.is_transactional
    assert by_key == {b"k1": [b"first", b"third"], b"k2": [b"second"]}
    # The same key lands on the same partition (murmur2, as Kafka's client).
    assert len({r.partition for r in stored if r.key == b"k1"}) == 1

    plain = ok(db_url, "produce", "t", "--partition", "2", input="a\n\nb")  # an empty line is an empty value
    assert plain.startswith("produced 3 records to t")
    assert [r.value for r in log_records(engine, "t") if r.partition == 2][-3:] == [b"a", b"", b"b"]


def test_produce_json_file_in_a_transaction(db_url: str, admin: Admin, engine: sa.Engine, tmp_path: Path) -> None:
    admin.create_topic("t", partitions=2)
    lines = [
        {"key": "a", "value": "plain", "headers": {"h": "1"}},
        {"key": None, "value": {"base64": base64.b64encode(b"\xff\x00bin").decode()}, "partition": 1},
        {"value": None, "key": "tomb", "headers": [["x", "1"], ["x", None]], "timestamp": 1_700_000_000_000},
        {"value": "dated", "timestamp": "2024-01-02T03:04:05+00:00", "partition": 0},
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    answer = js(db_url, "produce", "t", "--file", str(source), "--format", "json", "--transactional-id", "loader")
    assert answer["records"] == 4 and answer["transactional_id"] == "loader"

    stored = log_records(engine, "t")
    assert len(stored) == 4 and all(r.is_transactional and not r.aborted for r in stored)
    values = {r.value for r in stored}
    assert values == {b"plain", b"\xff\x00bin", None, b"dated"}
    tomb = next(r for r in stored if r.key == b"tomb")
    assert decode_headers(tomb.headers) == (("x", b"1"), ("x", None))
    assert rows(engine, "SELECT state FROM transaction_status WHERE transactional_id = 'loader'") == [
        ("CompleteCommit",)
    ]
    stamps = rows(engine, "SELECT value, \"timestamp\" FROM records WHERE value = 'dated' OR key = 'tomb'")
    assert set(stamps) == {
        (b"dated", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        (None, datetime.fromtimestamp(1_700_000_000, tz=UTC)),
    }
    # What consume --json prints, produce --format json takes back: a copy has the same records.
    admin.create_topic("copy", partitions=2)
    dumped = ok(db_url, "consume", "t", "--from-beginning", "--json")
    js(db_url, "produce", "copy", "--format", "json", input=dumped)
    assert [(r.partition, r.key, r.value, r.headers) for r in log_records(engine, "copy")] == [
        (r.partition, r.key, r.value, r.headers) for r in stored
    ]
    text = ok(db_url, "produce", "t", "--file", str(source), "--format", "json")
    assert text.startswith("produced 4 records to t")


@pytest.mark.parametrize(
    ("args", "data", "match"),
    [
        (["--format", "json"], '{"value": "ok"}\n{"value": "ok"}\n{"value": oops}\n', "line 3: invalid JSON"),
        (["--format", "json"], '{"value": "ok"}\n[1, 2]\n', "line 2: expected a JSON object"),
        (["--format", "json"], '{"value": "ok", "colour": "red"}\n', "unknown field 'colour'"),
        (["--format", "json"], '{"value": 5}\n', 'value must be a string, null or {"base64"'),
        (["--format", "json"], '{"value": {"base64": "!!"}}\n', "value: invalid base64"),
        (["--format", "json"], '{"value": "x", "partition": 7}\n', "partition 7 of topic 't' does not exist"),
        (["--format", "json"], '{"value": "x", "timestamp": "yesterday"}\n', "not ISO 8601"),
        (["--key-separator", ":"], "k:v\nno separator here\n", "line 2: no key separator ':'"),
        (["--partition", "5"], "v\n", "partition 5 of topic 't' does not exist"),
        ([], "x" * 3000 + "\n", "exceeds max_message_bytes 2000"),
        (["-H", "novalue"], "v\n", "expected a header KEY=VALUE"),
    ],
)
def test_bad_input_writes_nothing(
    db_url: str, admin: Admin, engine: sa.Engine, args: list[str], data: str, match: str
) -> None:
    admin.create_topic("t", partitions=2, config={"max_message_bytes": 2000})
    fails(db_url, "produce", "t", *args, match=match, input=data)
    fails(db_url, "produce", "t", *args, "--transactional-id", "tx", match=match, input=data)
    assert rows(engine, "SELECT count(*) FROM records") == [(0,)]
    assert rows(engine, "SELECT count(*) FROM transactions") == [(0,)]


def test_produce_to_an_unknown_topic_or_a_missing_file(db_url: str, engine: sa.Engine, tmp_path: Path) -> None:
    fails(db_url, "produce", "nope", match="unknown topic 'nope'", input="v\n")
    missing = run(db_url, "produce", "nope", "--file", str(tmp_path / "missing.txt"))
    assert missing.exit_code == 2 and "does not exist" in missing.stderr  # a usage error, from click
    assert rows(engine, "SELECT count(*) FROM records") == [(0,)]


# --- consume -------------------------------------------------------------------------------------


def _three_transactions(db_url: str) -> None:
    """On topic t (2 partitions): a plain record, a committed transaction, an aborted one, then an
    open one on partition 0 (left open: the caller closes the returned producer)."""
    with Producer(db_url) as plain:
        plain.send("t", b"plain", partition=1).result(timeout=30)
    with Producer(db_url, transactional_id="good") as producer:
        producer.init_transactions()
        with producer.transaction():
            producer.send("t", b"committed-0", partition=0)
            producer.send("t", b"committed-1", partition=1)
    with Producer(db_url, transactional_id="bad") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", b"aborted-0", partition=0)
        producer.send("t", b"aborted-1", partition=1)
        producer.flush()
        producer.abort_transaction()


def test_consume_isolation_levels(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    admin.create_topic("t", partitions=2)
    _three_transactions(db_url)
    with Producer(db_url, transactional_id="open") as open_txn:
        open_txn.init_transactions()
        open_txn.begin_transaction()
        open_txn.send("t", b"undecided", partition=1).result(timeout=30)

        out = ok(db_url, "consume", "t", "--from-beginning", "--json")
        committed = sorted((json.loads(line) for line in out.splitlines()), key=lambda r: (r["partition"], r["offset"]))
        view = rows(engine, 'SELECT partition, "offset", value FROM committed_records ORDER BY partition, "offset"')
        assert [(r["partition"], r["offset"], r["value"].encode()) for r in committed] == [tuple(r) for r in view]
        assert sorted(r["value"] for r in committed) == ["committed-0", "committed-1", "plain"]

        dirty = ok(db_url, "consume", "t", "--from-beginning", "--isolation-level", "read_uncommitted", "--json")
        values = sorted(json.loads(line)["value"] for line in dirty.splitlines())
        assert values == ["aborted-0", "aborted-1", "committed-0", "committed-1", "plain", "undecided"]

        # The other output formats show the same records.
        plain = ok(db_url, "consume", "t", "--from-beginning", "--partition", "0")
        assert plain.splitlines() == ["committed-0"]
        table = ok(db_url, "consume", "t", "--from-beginning", "--format", "table")
        assert "committed-1" in table and "aborted" not in table
        open_txn.abort_transaction()


def test_consume_from_an_offset_and_limits(db_url: str, admin: Admin) -> None:
    admin.create_topic("t", partitions=2)
    with Producer(db_url) as producer:
        for i in range(4):
            producer.send("t", f"v{i}".encode(), key=f"k{i}".encode(), partition=0, headers=[("i", b"%d" % i)])
        producer.flush()
    from_two = [
        json.loads(line)
        for line in ok(db_url, "consume", "t", "--partition", "0", "--offset", "2", "--json").splitlines()
    ]
    assert [(r["partition"], r["offset"], r["key"], r["value"], r["headers"]) for r in from_two] == [
        (0, 2, "k2", "v2", [["i", "2"]]),
        (0, 3, "k3", "v3", [["i", "3"]]),
    ]
    kv = ok(db_url, "consume", "t", "--from-beginning", "--format", "kv", "--max-messages", "2")
    assert kv.splitlines() == ["k0\tv0", "k1\tv1"]
    assert ok(db_url, "consume", "t") == ""  # from the end, without --follow: nothing new
    fails(db_url, "consume", "t", "--offset", "9", match="offset 9 is outside t-0: the log holds [0, 4]")
    fails(db_url, "consume", "t", "--partition", "5", match="unknown partition t-5")
    fails(db_url, "consume", "nope", match="unknown topic 'nope'")
    usage = run(db_url, "consume", "t", "--group", "g", "--offset", "1")
    assert usage.exit_code == 2


def test_consume_as_a_group_commits_what_it_printed(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    admin.create_topic("t", partitions=2)
    _three_transactions(db_url)
    out = ok(db_url, "consume", "t", "--group", "readers", "--from-beginning", "--json")
    assert sorted(json.loads(line)["value"] for line in out.splitlines()) == ["committed-0", "committed-1", "plain"]
    # Committed at the end of each partition (past the abort markers too).
    ends = dict(rows(engine, "SELECT partition, high_watermark FROM partition_offsets WHERE topic = 't'"))
    assert committed_offsets(engine, "readers") == {("t", p): hw for p, hw in ends.items()}
    assert ok(db_url, "consume", "t", "--group", "readers", "--json") == ""  # nothing left to read
    assert rows(engine, "SELECT count(*) FROM group_members") == [(0,)]  # it left the group

    with Producer(db_url) as producer:
        for i in range(3):
            producer.send("t", b"new%d" % i, partition=0)
        producer.flush()
    capped = ok(db_url, "consume", "t", "--group", "readers", "--max-messages", "2")
    assert capped.splitlines() == ["new0", "new1"]
    lag = js(db_url, "groups", "lag", "readers")
    assert lag["total_lag"] == 1
    assert ok(db_url, "consume", "t", "--group", "readers").splitlines() == ["new2"]


def test_consume_follow_until_interrupted(db_url: str, admin: Admin) -> None:
    admin.create_topic("t")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCELOG_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "oncelog", "--database-url", db_url, "consume", "t", "--from-beginning", "-f", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        with Producer(db_url) as producer:
            producer.send("t", b"one").result(timeout=30)
            assert json.loads(proc.stdout.readline())["value"] == "one"
            producer.send("t", b"two").result(timeout=30)
            assert json.loads(proc.stdout.readline())["value"] == "two"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err


# --- transactions and producers ------------------------------------------------------------------


def test_txns_list_describe_find_hanging_and_abort(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    admin.create_topic("t", partitions=2)
    _three_transactions(db_url)
    with Producer(db_url, transactional_id="stuck") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", b"stuck", partition=1).result(timeout=30)

        listed = js(db_url, "txns", "list")
        db = rows(engine, "SELECT transactional_id, state, producer_id, txn_number FROM transaction_status ORDER BY 1")
        assert [(t["transactional_id"], t["state"], t["producer_id"], t["txn_number"]) for t in listed] == [
            tuple(r) for r in db
        ]
        assert [t["state"] for t in listed] == ["CompleteAbort", "CompleteCommit", "Ongoing"]
        assert [t["transactional_id"] for t in js(db_url, "txns", "list", "--state", "Ongoing")] == ["stuck"]
        text = ok(db_url, "txns", "list")
        assert "stuck" in text and "CompleteCommit" in text

        stuck = js(db_url, "txns", "describe", "stuck")
        assert stuck["state"] == "Ongoing" and stuck["partitions"] == ["t-1@5"]
        assert "t-1@5" in ok(db_url, "txns", "describe", "stuck")
        assert js(db_url, "txns", "find-hanging") == []  # open for less than 15 minutes
        assert [t["transactional_id"] for t in js(db_url, "txns", "find-hanging", "--older-than", "0")] == ["stuck"]

        aborted = js(db_url, "txns", "abort", "stuck")
        assert aborted["state"] == "CompleteAbort"
        assert rows(engine, "SELECT state FROM transactions WHERE transactional_id = 'stuck'") == [("CompleteAbort",)]
        assert [r.aborted for r in log_records(engine, "t") if r.value == b"stuck"] == [True]
        with pytest.raises(errors.ProducerFencedError):
            producer.commit_transaction()
    fails(db_url, "txns", "abort", "stuck", match="nothing to abort")
    fails(db_url, "txns", "describe", "nobody", match="no transactional id 'nobody'")
    assert run(db_url, "txns", "list", "--state", "Sleeping").exit_code == 2


def test_producers_describe(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    admin.create_topic("t", partitions=2)
    with Producer(db_url) as plain:
        for i in range(3):
            plain.send("t", b"%d" % i, partition=0).result(timeout=30)
    with Producer(db_url, transactional_id="tx") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", b"open", partition=1).result(timeout=30)
        found = js(db_url, "producers", "describe", "t")
        state = rows(
            engine,
            "SELECT s.partition, s.producer_id, s.epoch, s.last_sequences[cardinality(s.last_sequences)], "
            "s.last_offsets[cardinality(s.last_offsets)] FROM producer_partition_state s ORDER BY 1, 2",
        )
        assert [
            (p["partition"], p["producer_id"], p["producer_epoch"], p["last_sequence"], p["last_offset"]) for p in found
        ] == [tuple(r) for r in state]
        assert [(p["transactional_id"], p["current_txn_start_offset"]) for p in found] == [(None, None), ("tx", 0)]
        assert [p["partition"] for p in js(db_url, "producers", "describe", "t", "--partition", "1")] == [1]
        assert "producers of t" in ok(db_url, "producers", "describe", "t")
        producer.abort_transaction()
    fails(db_url, "producers", "describe", "nope", match="unknown topic 'nope'")


# --- groups --------------------------------------------------------------------------------------


def _member(db_url: str, group: str) -> Consumer:
    consumer = Consumer(
        db_url,
        group_id=group,
        client_id="app",
        enable_auto_commit=False,
        session_timeout_ms=30_000,
        heartbeat_interval_ms=500,
    )
    consumer.subscribe(["t"])
    return consumer


def test_groups_list_describe_lag_and_reset(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    admin.create_topic("t", partitions=2)
    with Producer(db_url) as producer:
        for i in range(10):
            producer.send("t", b"%d" % i, partition=i % 2)
        producer.flush()
    member = _member(db_url, "app")
    try:
        consumed = 0
        while consumed < 10:
            consumed += len(member.poll(timeout=1))
        member.commit({TopicPartition("t", 0): 3, TopicPartition("t", 1): 4})

        [listed] = js(db_url, "groups", "list")
        assert (listed["group_id"], listed["state"], listed["members"]) == ("app", "Stable", 1)
        described = js(db_url, "groups", "describe", "app")
        [m] = described["members"]
        assert m["client_id"] == "app" and m["subscription"] == ["t"]
        assert m["assignment"] == [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]
        assert m["target"] == m["assignment"]
        assert "app" in ok(db_url, "groups", "describe", "app")
        lag = js(db_url, "groups", "lag", "app")
        view = rows(
            engine, "SELECT partition, committed_offset, lag FROM group_offsets WHERE group_id = 'app' ORDER BY 1"
        )
        assert [(p["partition"], p["committed_offset"], p["lag"]) for p in lag["partitions"]] == [
            tuple(r) for r in view
        ]
        assert lag["total_lag"] == 3 and all(p["member_id"] == m["member_id"] for p in lag["partitions"])

        # A live member: refused, dry run or not, and nothing changes.
        for extra in ([], ["--execute"]):
            fails(
                db_url,
                "groups",
                "reset-offsets",
                "app",
                "--topic",
                "t",
                "--to-earliest",
                *extra,
                match="group 'app' has 1 live member(s)",
            )
        assert committed_offsets(engine, "app") == {("t", 0): 3, ("t", 1): 4}
    finally:
        member.close()  # leaves the group

    dry = js(db_url, "groups", "reset-offsets", "app", "--topic", "t", "--to-earliest")
    assert dry == {
        "group": "app",
        "executed": False,
        "offsets": [
            {"topic": "t", "partition": 0, "previous_offset": 3, "new_offset": 0},
            {"topic": "t", "partition": 1, "previous_offset": 4, "new_offset": 0},
        ],
    }
    assert committed_offsets(engine, "app") == {("t", 0): 3, ("t", 1): 4}
    assert "dry run" in ok(db_url, "groups", "reset-offsets", "app", "--all-topics", "--to-latest")
    assert committed_offsets(engine, "app") == {("t", 0): 3, ("t", 1): 4}

    done = js(db_url, "groups", "reset-offsets", "app", "--topic", "t:1", "--to-offset", "2", "--execute")
    assert done["executed"] and done["offsets"] == [
        {"topic": "t", "partition": 1, "previous_offset": 4, "new_offset": 2}
    ]
    assert committed_offsets(engine, "app") == {("t", 0): 3, ("t", 1): 2}
    js(db_url, "groups", "reset-offsets", "app", "--all-topics", "--shift-by", "-10", "--execute")  # clamped
    assert committed_offsets(engine, "app") == {("t", 0): 0, ("t", 1): 0}
    js(db_url, "groups", "reset-offsets", "app", "--topic", "t", "--shift-by", "3", "--execute")
    assert committed_offsets(engine, "app") == {("t", 0): 3, ("t", 1): 3}
    js(db_url, "groups", "reset-offsets", "app", "--topic", "t", "--to-latest", "--execute")
    assert committed_offsets(engine, "app") == {("t", 0): 5, ("t", 1): 5}
    # A new group id is created by its first reset, as with Kafka's tool.
    js(db_url, "groups", "reset-offsets", "fresh", "--topic", "t:0", "--to-earliest", "--execute")
    assert committed_offsets(engine, "fresh") == {("t", 0): 0}

    # Kafka's --delete-offsets: the partitions named lose their committed offsets.
    gone = js(db_url, "groups", "delete-offsets", "fresh", "--topic", "t:0")
    assert gone == {"group": "fresh", "offsets": [{"topic": "t", "partition": 0, "deleted": True, "error": None}]}
    assert committed_offsets(engine, "fresh") == {}
    fails(db_url, "groups", "delete-offsets", "never-was", "--topic", "t", match="no group 'never-was'")

    # Refused inputs change nothing.
    before = committed_offsets(engine, "app")
    fails(
        db_url,
        "groups",
        "reset-offsets",
        "app",
        "--topic",
        "t",
        "--to-offset",
        "6",
        "--execute",
        match="offset 6 is outside t-0: it must be within [0, 5]",
    )
    fails(
        db_url,
        "groups",
        "reset-offsets",
        "app",
        "--topic",
        "nope",
        "--to-earliest",
        "--execute",
        match="unknown topic 'nope'",
    )
    fails(
        db_url,
        "groups",
        "reset-offsets",
        "app",
        "--topic",
        "t:7",
        "--to-earliest",
        "--execute",
        match="unknown partition t-7",
    )
    fails(
        db_url,
        "groups",
        "reset-offsets",
        "fresh",
        "--topic",
        "t:1",
        "--shift-by",
        "1",
        "--execute",
        match="no committed offset on t-1",
    )
    fails(db_url, "groups", "reset-offsets", "ghost", "--all-topics", "--to-earliest", match="no group 'ghost'")
    assert committed_offsets(engine, "app") == before
    assert rows(engine, "SELECT count(*) FROM groups WHERE group_id = 'ghost'") == [(0,)]
    for usage in (
        ["--topic", "t"],  # no target
        ["--topic", "t", "--to-earliest", "--to-latest"],
        ["--to-earliest"],  # no scope
        ["--topic", "t", "--to-datetime", "last tuesday"],
    ):
        assert run(db_url, "groups", "reset-offsets", "app", *usage).exit_code == 2
    fails(db_url, "groups", "describe", "ghost", match="no group 'ghost'")
    fails(db_url, "groups", "lag", "ghost", match="no group 'ghost'")


def test_reset_to_a_point_in_time(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    admin.create_topic("t")
    base = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    with Producer(db_url) as producer:
        for minutes in (0, 10, 20, 30):
            producer.send("t", b"at+%d" % minutes, timestamp=base + timedelta(minutes=minutes))
        producer.flush()
    js(
        db_url,
        "groups",
        "reset-offsets",
        "g",
        "--topic",
        "t",
        "--to-datetime",
        "2025-06-01T12:15:00+00:00",
        "--execute",
    )
    assert committed_offsets(engine, "g") == {("t", 0): 2}
    js(
        db_url,
        "groups",
        "reset-offsets",
        "g",
        "--topic",
        "t",
        "--to-datetime",
        "2030-01-01T00:00:00+00:00",
        "--execute",
    )
    assert committed_offsets(engine, "g") == {("t", 0): 4}  # after every record: the high watermark


# --- the reset function's privileges -------------------------------------------------------------


@pytest.fixture
def logins(db_url: str, engine: sa.Engine) -> Iterator[dict[str, str]]:
    """A login role for each oncelog role, as URLs."""
    with login_roles(engine, db_url, ("reader", "client", "admin")) as urls:
        with engine.begin() as conn:
            conn.exec_driver_sql("SELECT create_topic_v1('t', 1)")
        yield urls


@pytest.mark.parametrize("role", ["reader", "client"])
def test_only_the_admin_role_resets_offsets(logins: dict[str, str], engine: sa.Engine, role: str) -> None:
    libpq = logins[role].replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(libpq, autocommit=True, options="-c search_path=oncelog") as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT * FROM reset_group_offsets_v1('g', '{t}', '{0}', '{0}')")
        assert info.value.sqlstate == "42501"  # insufficient_privilege
    fails(
        logins[role],
        "groups",
        "reset-offsets",
        "g",
        "--topic",
        "t",
        "--to-earliest",
        "--execute",
        match="permission denied",
    )
    with Admin(logins["admin"]) as admin:
        [done] = admin.reset_group_offsets("g", {TopicPartition("t", 0): 0}, dry_run=False)
    assert done.new_offset == 0
    assert committed_offsets(engine, "g") == {("t", 0): 0}


def test_delete_records_and_groups_from_the_command_line(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    admin.create_topic("t", partitions=2)
    with Producer(db_url) as producer:
        for i in range(5):
            producer.send("t", b"v%d" % i, partition=i % 2)
    done = js(db_url, "topics", "delete-records", "t", "--before", "0:2", "--before", "1:-1", "-y")
    assert done == {"topic": "t", "low_watermarks": {"0": 2, "1": 2}}
    fails(db_url, "topics", "delete-records", "t", "--before", "0:9", "-y", match="high watermark 3")
    usage = run(db_url, "topics", "delete-records", "t", "--before", "zero", "-y")
    assert usage.exit_code == 2 and "'zero' is not PARTITION:OFFSET" in usage.output  # click's usage error
    fails(db_url, "topics", "delete-records", "nope", "--before", "0:1", "-y", match="unknown topic 'nope'")
    assert {(o.partition, o.log_start_offset) for o in admin.list_offsets("t")} == {(0, 2), (1, 2)}
    # Without -y it asks, and a no changes nothing.
    assert "Aborted" in run(db_url, "topics", "delete-records", "t", "--before", "0:3", input="n\n").output
    assert {(o.partition, o.log_start_offset) for o in admin.list_offsets("t")} == {(0, 2), (1, 2)}

    with Consumer(db_url, group_id="g", enable_auto_commit=False) as consumer:
        consumer.assign([TopicPartition("t", 0)])
        consumer.commit({TopicPartition("t", 0): OffsetAndMetadata(3)})
    assert committed_offsets(engine, "g") == {("t", 0): 3}
    assert js(db_url, "groups", "delete", "g", "-y") == {"deleted": "g"}
    assert committed_offsets(engine, "g") == {}
    fails(db_url, "groups", "delete", "g", "-y", match="no group 'g'")


def test_capture_add_list_remove(db_url: str, admin: Admin, engine: sa.Engine) -> None:
    admin.create_topic("changes", partitions=1)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE public.cli_items (id integer PRIMARY KEY, v text)")
        conn.exec_driver_sql("CREATE TABLE public.cli_loose (v text)")
    assert js(db_url, "capture", "add", "public.cli_items", "--topic", "changes") == {
        "table": "public.cli_items",
        "topic": "changes",
    }
    assert js(db_url, "capture", "list") == [{"table": "public.cli_items", "topic": "changes"}]
    fails(db_url, "capture", "add", "public.cli_loose", "--topic", "changes", match="no primary key")
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO public.cli_items VALUES (1, 'x')")
    assert [
        r[0] for r in rows(engine, "SELECT key FROM records r JOIN topics t USING (topic_id) WHERE t.name = 'changes'")
    ] == [b'{"id": 1}']
    assert "stopped capturing public.cli_items" in ok(db_url, "capture", "remove", "public.cli_items")
    assert js(db_url, "capture", "list") == []


def test_produce_streams_its_input_in_bounded_memory(db_url: str, tmp_path: Path) -> None:
    """200,000 lines (the input that took 535 MB when it was read whole): checked in a first
    pass and sent in a second, nothing per record kept, so the Python heap's peak stays far
    below what holding the records would take; stdin is copied aside to be read twice."""
    ok(db_url, "topics", "create", "big", "-p", "2")
    lines = 200_000
    source = tmp_path / "big.txt"
    source.write_bytes(b"".join(b"%d\tline %06d\n" % (i % 100, i) for i in range(lines)))
    tracemalloc.start()
    try:
        answer = js(db_url, "produce", "big", "--file", str(source), "--key-separator", "\\t")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer["records"] == lines
    # Holding them (an object, a list and two bytes per record, plus a future each) peaked at 89 MiB
    # of Python heap here; streaming holds what the producer has queued (under 1 MiB measured).
    assert peak < 16 * 1024 * 1024, f"peak {peak / 2**20:.0f} MiB"
    piped = js(db_url, "produce", "big", input=b"".join(b"piped %d\n" % i for i in range(1000)))
    assert piped["records"] == 1000
    # A bad line anywhere still writes nothing, from stdin too (it is read twice).
    ok(db_url, "topics", "create", "strict", "-p", "1")
    fails(db_url, "produce", "strict", "--key-separator", "\\t", match="stdin line 3", input="a\tb\nc\td\nno tab\n")
    with Admin(db_url) as admin:
        assert [p.high_watermark for p in admin.list_offsets("strict")] == [0]
