"""Shared fixtures: a real PostgreSQL for every test that needs one.

One throwaway cluster per test session (fsync off), unless ``ONCELOG_DATABASE_URL`` names a
server to use instead (it needs the CREATEDB privilege). The migrations build a template database
once; each test gets a fresh database cloned from it, so tests are isolated and cheap.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from oncelog.embedded import EmbeddedPostgres
from oncelog.store import cluster, create_engine, migrate
from oncelog.store.engine import database_url


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """URL of the PostgreSQL server the tests run against (its ``postgres`` database)."""
    external = os.environ.get("ONCELOG_DATABASE_URL")
    if external:
        yield database_url(external).set(database="postgres").render_as_string(hide_password=False)
        return
    # Not under pytest's tmp folder: under root that folder is closed to the postgres user.
    server = EmbeddedPostgres(tempfile.mkdtemp(prefix="oncelog-test-"), durable=False, database="postgres")
    url = server.start()
    try:
        yield url
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def template_db(server_url: str) -> Iterator[str]:
    """Name of a database migrated to head, cloned by :func:`db_url` for each test."""
    name = _unique("oncelog_tpl")
    cluster.create_database(server_url, name)
    engine = create_engine(_with_db(server_url, name))
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()  # a template must have no open connections to be copied
    yield name
    cluster.drop_database(server_url, name)


def _with_db(url: str, name: str) -> str:
    return database_url(url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture
def db_url(server_url: str, template_db: str) -> Iterator[str]:
    """URL of a fresh database at migration head, private to this test."""
    name = _unique("oncelog_t")
    cluster.create_database(server_url, name, template=template_db)
    yield _with_db(server_url, name)
    cluster.drop_database(server_url, name)


@pytest.fixture
def empty_db_url(server_url: str) -> Iterator[str]:
    """URL of a fresh, empty database (no migrations applied), private to this test."""
    name = _unique("oncelog_e")
    cluster.create_database(server_url, name)
    yield _with_db(server_url, name)
    cluster.drop_database(server_url, name)


@pytest.fixture
def conn(engine: sa.Engine) -> Iterator[sa.Connection]:
    """An autocommit connection to this test's database (each store call is its own transaction,
    as every oncelog client does it). A test module that needs a topic first overrides it with a
    fixture of the same name that takes this one."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        yield c


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    """An engine on this test's migrated database."""
    eng = create_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture
def durable_server() -> Iterator[EmbeddedPostgres]:
    """A private, durable cluster of this test's own, migrated: it can be stopped and started
    again (a crash or a fast shutdown) without touching the session's server."""
    path = tempfile.mkdtemp(prefix="oncelog-durable-")
    srv = EmbeddedPostgres(path, durable=True)
    url = srv.start()
    eng = create_engine(url)
    migrate.upgrade(eng)
    eng.dispose()
    yield srv
    srv.destroy()
    shutil.rmtree(path, ignore_errors=True)
