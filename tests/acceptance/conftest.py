"""Fixtures shared by the acceptance tests that put the fault proxy between a client and its
test's database."""

from __future__ import annotations

from collections.abc import Iterator

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
