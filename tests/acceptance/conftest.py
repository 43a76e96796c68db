"""Fixtures shared by the acceptance tests: the fault proxy between a client and its test's
database, and a SparkSession for the Spark tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.logcheck import host_port, sslmode_disable
from tests.support.proxy import FaultProxy


@pytest.fixture
def proxy(db_url: str) -> Iterator[FaultProxy]:
    """A fault proxy in front of this test's server."""
    host, port = host_port(db_url)
    with FaultProxy(host, port) as p:
        yield p


@pytest.fixture
def proxied_url(db_url: str, proxy: FaultProxy) -> str:
    """This test's database, reached through the proxy (plain text, so faults are precise)."""
    return proxy.url_for(sslmode_disable(db_url))


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local SparkSession per test module (``local[2,4]``: failed tasks are retried); starting
    one takes about 5 s."""
    import oncelog.spark  # noqa: PLC0415 - the optional spark extra, for the Spark tests only

    s = oncelog.spark.session(app_name="oncelog-test-spark")
    s.sparkContext.setLogLevel("OFF")  # injected and refused task failures would otherwise fill the log
    try:
        yield s
    finally:
        s.stop()
