"""Login roles for tests that connect as each oncelog role (reader, client, admin) or as none."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator

import sqlalchemy as sa

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
