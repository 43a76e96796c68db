"""Fixtures of the database tests that connect as separate login roles.

``client`` and ``other`` are two client-role principals the ACLs allow everything. They need an
``acls_on`` fixture, which each module that uses them defines: it creates the module's topics and
switches ACL enforcement on.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.support.roles import Principal, client_principal


@pytest.fixture
def client(acls_on: None, engine: sa.Engine, db_url: str) -> Iterator[Principal]:
    """A client-role principal the ACLs allow everything."""
    yield from client_principal(engine, db_url)


@pytest.fixture
def other(acls_on: None, engine: sa.Engine, db_url: str) -> Iterator[Principal]:
    """A second such principal (another application, or an attacker)."""
    yield from client_principal(engine, db_url)
