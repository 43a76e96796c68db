"""Multi-host database URLs (issue #20): libpq's ``postgresql://u@h1:p1,h2:p2/db`` and the
``?host=`` form, with ``target_session_attrs``, in every entry point: the Producer, Consumer,
Admin and CLI connect to the first host that answers (libpq's rule, with a real server behind
the second address and nothing behind the first), and Spark's JDBC URL names the same hosts in
pgjdbc's form. Bad host lists are configuration errors that never show the password."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from oncelog import Admin, Consumer, Producer, TopicPartition, aio, errors
from oncelog.cli import cli
from oncelog.spark import jdbc_target
from oncelog.store.engine import database_url, redact, url_hosts


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def multi_host_urls(db_url: str) -> Iterator[list[str]]:
    """The test database's URL in libpq's two multi-host forms, a dead address first."""
    real = sa.make_url(db_url)
    dead = _closed_port()
    auth = real.username or ""
    if real.password:
        auth += f":{real.password}"
    yield [
        f"postgresql://{auth}@127.0.0.1:{dead},{real.host}:{real.port}/{real.database}",
        f"postgresql://{auth}@/{real.database}?host=127.0.0.1:{dead}&host={real.host}:{real.port}"
        "&target_session_attrs=read-write",
    ]


def test_every_client_connects_through_a_multi_host_url(db_url: str, multi_host_urls: list[str]) -> None:
    with Admin(db_url) as admin:
        admin.create_topic("hosts", partitions=1)
    for i, url in enumerate(multi_host_urls):
        with Admin(url) as admin:
            assert admin.list_topics() == {"hosts": 1}
        with Producer(url) as producer:
            producer.send("hosts", b"via %d" % i, partition=0).result(30)
        with Consumer(url, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("hosts", 0)])
            seen: list[bytes | None] = []
            for _ in range(50):
                seen += [r.value for r in consumer.poll(0.2)]
                if len(seen) == i + 1:
                    break
        assert seen == [b"via %d" % k for k in range(i + 1)]
        listed = CliRunner().invoke(cli, ["--database-url", url, "topics", "list", "--json"], catch_exceptions=False)
        assert listed.exit_code == 0 and '"hosts"' in listed.stdout, listed.output


def test_the_hosts_parse_into_libpqs_order(multi_host_urls: list[str]) -> None:
    for url in multi_host_urls:
        hosts = url_hosts(database_url(url))
        assert len(hosts) == 2 and hosts[0][0] == "127.0.0.1"
    assert url_hosts(database_url("postgresql://u@[::1]:5433,db.example/x")) == [("::1", 5433), ("db.example", None)]
    assert url_hosts(database_url("postgresql://u@db.example:6543/x")) == [("db.example", 6543)]


@pytest.mark.parametrize(
    "url",
    ["postgresql://u:s3cret@h1:99999,h2/db", "postgresql://u:s3cret@h1:x,h2/db", "postgresql://u:s3cret@h1,,h2/db"],
)
def test_a_bad_host_list_is_a_configuration_error_without_the_password(url: str) -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        Admin(url)
    assert "s3cret" not in str(caught.value) and "host" in str(caught.value)
    assert "s3cret" not in redact(url)


def test_spark_gets_the_same_hosts_in_pgjdbc_form() -> None:
    target = jdbc_target("postgresql://alice:pw@db1:5432,db2:5433/logs?target_session_attrs=read-write")
    assert target.url == "jdbc:postgresql://db1:5432,db2:5433/logs?targetServerType=primary"
    assert target.properties["password"] == "pw"
    query_form = jdbc_target("postgresql://alice@/logs?host=db1:5432&host=db2&target_session_attrs=prefer-standby")
    assert query_form.url == "jdbc:postgresql://db1:5432,db2:5432/logs?targetServerType=preferSecondary"
    assert jdbc_target("postgresql://alice@[::1]:5432,db2/logs").url == "jdbc:postgresql://[::1]:5432,db2:5432/logs"
    with pytest.raises(errors.ConfigurationError, match="target_session_attrs"):
        jdbc_target("postgresql://alice@db1,db2/logs?target_session_attrs=whatever")


def test_the_asyncio_clients_connect_through_a_multi_host_url(db_url: str, multi_host_urls: list[str]) -> None:
    with Admin(db_url) as admin:
        admin.create_topic("aio-hosts", partitions=1)

    async def main() -> list[int]:
        offsets = []
        for url in multi_host_urls:
            async with aio.Producer(url) as producer:
                sent = await producer.send("aio-hosts", b"x", partition=0)
                offsets.append((await sent).offset)
        return offsets

    assert asyncio.run(main()) == [0, 1]
