"""The current text of every SQL object oncelog installs beside its tables, read from ``store/sql``.

The tables are the models of :mod:`oncelog.store.schema`; everything else that the migrations
install (the protocol functions and their internal helpers, the reader views, triggers, the
row-level policy, comments and grants) is written out in plain SQL files under ``store/sql``,
grouped by concern, in the order they load. ``tests/migration/test_sql_tree.py`` proves that a database
migrated to head holds exactly what these files install, so they are the readable definition of
the protocol's rules: read them (or load them with psql) instead of replaying migrations.

The files name the default schema's roles (``oncelog_reader``, ``oncelog_client``,
``oncelog_admin``) and expect ``search_path`` to be the schema, as the migrations set it.
"""

from __future__ import annotations

from importlib import resources

#: The files in load order: functions by concern, then the views (which call acl_allowed_v1 and
#: read one another), the triggers and policy (which name their functions), and the grants.
FILES = (
    "topics",
    "log",
    "transactions",
    "groups",
    "outbox",
    "acl",
    "maintenance",
    "compaction",
    "views",
    "triggers",
    "grants",
)


def text(name: str) -> str:
    """The SQL of ``store/sql/<name>.sql``."""
    if name not in FILES:
        raise ValueError(f"no SQL file {name!r} (known: {', '.join(FILES)})")
    return resources.files("oncelog.store").joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")
