"""Login roles for tests that connect as each oncelog role (reader, client, admin) or as none."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import sqlalchemy as sa

from oncelog.store import create_engine
from oncelog.store.engine import database_url

#: "nobody" is a login role with no oncelog role at all.
KINDS = ("reader", "client", "admin", "nobody")


@contextlib.contextmanager
def login_roles(engine: sa.Engine, db_url: str, kinds: Iterable[str] = KINDS) -> Iterator[dict[str, str]]:
    """Create one login role per kind (a member of ``oncelog_<kind>``, except "nobody"); yield
    their SQLAlchemy URLs to ``db_url``'s database; drop them afterwards. Roles are cluster-wide,
    hence the random names."""
    suffix = uuid.uuid4().hex[:8]
    password = f"pw-{suffix}"
    names = {kind: f"t_{kind}_{suffix}" for kind in kinds}
    with engine.begin() as conn:
        for kind, name in names.items():
            member = "" if kind == "nobody" else f" IN ROLE oncelog_{kind}"
            conn.exec_driver_sql(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'{member}")
    base = database_url(db_url)
    try:
        yield {
            kind: base.set(username=name, password=password).render_as_string(hide_password=False)
            for kind, name in names.items()
        }
    finally:
        with engine.begin() as conn:
            for name in names.values():
                conn.exec_driver_sql(f"DROP ROLE {name}")


@dataclass
class Principal:
    """One login role holding only the client role, its URL and an autocommit engine."""

    name: str
    url: str
    engine: sa.Engine

    def call(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """``fn(conn, **kwargs)`` on a connection of this principal."""
        with self.engine.connect() as conn:
            return fn(conn, **kwargs)

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of ``statement`` run as this principal (psycopg, autocommit, schema oncelog)."""
        libpq = self.url.replace("postgresql+psycopg", "postgresql")
        with psycopg.connect(libpq, autocommit=True, options="-c search_path=oncelog") as conn:
            return conn.execute(statement, params).fetchall()


def enforce_acls(engine: sa.Engine, topics: dict[str, int]) -> None:
    """Create ``topics`` (name: partitions), then switch ACL enforcement on: the body of a test
    module's ``acls_on`` fixture (tests/integration/conftest.py)."""
    with engine.begin() as conn:
        for name, partitions in topics.items():
            conn.exec_driver_sql("SELECT create_topic_v1(%(name)s, %(n)s)", {"name": name, "n": partitions})
        conn.exec_driver_sql("SELECT set_acl_enforcement_v1(true)")


#: ACL entries (resource type, name, operation) that allow everything.
ALLOW_ALL = (("topic", "*", "all"), ("transactional_id", "*", "all"), ("group", "*", "all"))


def client_principal(
    engine: sa.Engine, db_url: str, acls: Iterable[tuple[str, str, str]] = ALLOW_ALL
) -> Iterator[Principal]:
    """A new client-role principal that the ACLs allow exactly ``acls`` (resource type, literal
    name or ``*``, operation; by default everything), for a fixture to yield from."""
    with login_roles(engine, db_url, ("client",)) as urls:
        url = urls["client"]
        name = sa.make_url(url).username or ""
        with engine.begin() as conn:
            for resource, resource_name, operation in acls:
                conn.exec_driver_sql(
                    "SELECT create_acl_v1(%(role)s, %(type)s, %(name)s, 'literal', %(op)s)",
                    {"role": name, "type": resource, "name": resource_name, "op": operation},
                )
        eng = create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            yield Principal(name, url, eng)
        finally:
            eng.dispose()
