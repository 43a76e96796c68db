"""Passwords never leak: not in a client's repr, a CLI line, an error message, nor the command
line of a child process (readable by every local user through ``ps``).

The test cluster trusts local connections, so a URL with any password still connects: every
form of URL here is also used for real. Assertions never print the text they search (a failing
assertion would otherwise show the password in the test output): see :func:`assert_hidden`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from oncelog import Admin, Consumer, Producer, errors
from oncelog.cli.context import CliContext
from oncelog.store.engine import MASK, database_url, redact
from oncelog.verify.runner import RunConfig
from oncelog.verify.workloads import ClientPool, ClientSpec, Role
from tests.support.logcheck import wait_until

SECRET = "pw-4f1e-do-not-show"


def assert_hidden(text: str, where: str) -> None:
    """Fail (without showing ``text``) if the password is in it."""
    if SECRET in text:
        pytest.fail(f"the password appears in {where}", pytrace=False)


def url_forms(db_url: str) -> dict[str, str]:
    """``db_url`` with the password in each place a PostgreSQL URL can carry one."""
    base = make_url(db_url)
    plain = base.render_as_string(hide_password=False)
    sep = "&" if "?" in plain else "?"
    return {
        "userinfo": base.set(password=SECRET).render_as_string(hide_password=False),
        "query": f"{plain}{sep}password={SECRET}",
        "query-encoded-key": f"{plain}{sep}pass%77ord={SECRET}",
        "both": base.set(password=SECRET).render_as_string(hide_password=False) + f"{sep}password={SECRET}",
    }


# --- the masking helper, without a database -----------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"postgresql://app:{SECRET}@db:5432/x", "postgresql://app:***@db:5432/x"),
        (
            f"postgresql://app@db/x?password={SECRET}&sslmode=disable",
            "postgresql://app@db/x?password=***&sslmode=disable",
        ),
        (f"postgresql://app@db/x?sslpassword={SECRET}", "postgresql://app@db/x?sslpassword=***"),
        (f"postgresql://app@db/x?PASSWORD={SECRET}", "postgresql://app@db/x?PASSWORD=***"),
        (f"host=db user=app password={SECRET} dbname=x", "host=db user=app password=*** dbname=x"),
        (f"host=db password = '{SECRET} x' dbname=x", "host=db password = *** dbname=x"),
        (f"postgresql://app:p@{SECRET}@db/x", "postgresql://app:***@db/x"),  # an unencoded '@'
        (f"postgresql://app:{SECRET}@[::1/x?password={SECRET}", "postgresql://app:***@[::1/x?password=***"),
        ("postgresql://app@db/x?application_name=a%40b", "postgresql://app@db/x?application_name=a%40b"),
        (
            f"postgresql://app@/x?host=a&host=b&password={SECRET}&password=2",
            "postgresql://app@/x?host=a&host=b&password=***&password=***",
        ),
    ],
)
def test_redact_masks_every_form(url: str, shown: str) -> None:
    masked = redact(url)
    assert_hidden(masked, "redact()")
    assert masked == shown


def test_redact_masks_a_parsed_url_too() -> None:
    parsed = make_url(f"postgresql://app:{SECRET}@db/x?password={SECRET}")
    assert redact(parsed) == "postgresql://app:***@db/x?password=***"


def test_redact_and_database_url_take_anything() -> None:
    assert redact(None) == "<not a database URL: NoneType>"
    with pytest.raises(errors.ConfigurationError, match="must be a str"):
        database_url(None)  # type: ignore[arg-type]
    assert MASK == "***"


@pytest.mark.parametrize(
    "url",
    [
        f"host=db user=app password={SECRET} dbname=x",  # libpq keyword/value: not accepted
        f"postgresql://app:{SECRET}@[::1/x",  # an unclosed IPv6 bracket
        f"postgresql://app@db:notaport/x?password={SECRET}",
        f"postgresql://app:{SECRET}@db:99999/x",
        f"postgresql://app:p@{SECRET}@db/x",
        f"mysql://app:{SECRET}@db/x",
    ],
)
def test_a_refused_url_is_named_masked_in_the_error(url: str) -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        database_url(url)
    message = str(caught.value)
    assert_hidden(message, "the error message")
    # The whole traceback too: no chained parser error quoting the URL.
    assert_hidden("".join(traceback.format_exception(caught.value)), "the traceback")
    if "mysql" not in url:
        assert "invalid database URL" in message and (MASK in message or "notaport" in message)


def test_the_verify_dataclasses_hide_the_url(tmp_path: Path) -> None:
    url = f"postgresql://app:{SECRET}@db/x?password={SECRET}"
    assert_hidden(repr(RunConfig(database_url=url, output=tmp_path)), "repr(RunConfig)")
    spec = ClientSpec(
        role=Role.CONSUMER, name="rc1", identity="rc1", incarnation=1, url=url, schema="oncelog",
        history=str(tmp_path / "h"), seed=1, partitions=1,
    )  # fmt: skip
    assert_hidden(repr(spec), "repr(ClientSpec)")
    assert_hidden(repr(CliContext(database_url=url, schema="oncelog", dev_db_dir=None)), "repr(CliContext)")


# --- clients and the CLI on a real server -------------------------------------------------------


def test_every_client_repr_hides_the_password_in_every_form(db_url: str) -> None:
    for form, url in url_forms(db_url).items():
        for cls in (Admin, Consumer, Producer):
            with cls(url) as client:
                assert_hidden(repr(client), f"repr({cls.__name__}) of the {form} form")
                assert MASK in repr(client), form
        with Admin(url) as admin:
            assert admin.list_topics() == {}  # the masked URL is only shown: the real one connects


def _oncelog(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCELOG_")}
    env |= {"ONCELOG_DATABASE_URL": url, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "oncelog", *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_db_status_shows_the_url_masked(db_url: str) -> None:
    for form, url in url_forms(db_url).items():
        result = _oncelog("db", "status", url=url)
        assert_hidden(result.stdout + result.stderr, f"`oncelog db status` with the {form} form")
        assert result.returncode == 0, form
        assert f"{MASK}@" in result.stdout or f"password={MASK}" in result.stdout, form


def test_a_malformed_url_is_one_clean_cli_line() -> None:
    for url in (f"postgresql://app:{SECRET}@[::1/db", "postgresql://[::1/db", f"host=db password={SECRET}"):
        result = _oncelog("db", "status", url=url)
        assert_hidden(result.stdout + result.stderr, "the CLI's error")
        assert result.returncode == 1
        assert "Traceback" not in result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: invalid database URL"), lines


def test_verify_clients_get_the_url_on_stdin_not_argv(db_url: str, tmp_path: Path) -> None:
    """A real client process of ``oncelog verify``: its command line (as ``ps`` reads it from
    /proc) holds no password, and it still connects and records its first operation."""
    url = url_forms(db_url)["both"]
    with Admin(url) as admin:
        admin.create_topic("t", partitions=1)
    spec = ClientSpec(
        role=Role.CONSUMER, name="rc1", identity="rc1", incarnation=1, url=url, schema="oncelog",
        history=str(tmp_path / "unused.jsonl"), seed=1, partitions=1, read_topics=("t",), think_s=0.05,
    )  # fmt: skip
    (tmp_path / "h").mkdir()
    (tmp_path / "logs").mkdir()
    pool = ClientPool([spec], histories=tmp_path / "h", logs=tmp_path / "logs")
    pool.start()
    try:
        procs = [c.proc for c in pool._clients.values()]
        assert len(procs) == 1
        proc_cmdline = Path(f"/proc/{procs[0].pid}/cmdline")
        # Between fork and exec the child's cmdline is still the parent's: wait for the exec.
        wait_until(lambda: proc_cmdline.read_bytes().endswith(b"rc1\0"), 30, "the client to exec")
        cmdline = proc_cmdline.read_bytes().decode(errors="replace")
        assert_hidden(cmdline, "the client's command line")
        assert cmdline.split("\0")[-2:] == ["rc1", ""]  # the name only, for ps
        assert pool.wait_started(60), (tmp_path / "logs" / "rc1.log").read_text()[-2000:]
    finally:
        forced = pool.stop(30)
    assert forced == []
    assert pool.crashes == []
    log = (tmp_path / "logs" / "rc1.log").read_text()
    assert_hidden(log, "the client's log")


def test_a_client_refuses_a_spec_for_another_name(tmp_path: Path) -> None:
    spec = ClientSpec(
        role=Role.CONSUMER, name="rc1", identity="rc1", incarnation=1, url="postgresql://u@127.0.0.1:1/x",
        schema="oncelog", history=str(tmp_path / "h.jsonl"), seed=1, partitions=1,
    )  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "oncelog.verify.workloads", "rc2"],
        input=spec.to_json(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2 and "'rc1', not 'rc2'" in result.stderr
