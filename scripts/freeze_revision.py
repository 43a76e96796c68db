#!/usr/bin/env python3
"""Freeze what changed in ``store/sql`` into a new migration revision.

``store/sql`` holds the current text of every function, view, trigger, policy and grant. After
editing it, run this script: it builds two scratch databases on a PostgreSQL server, one at the
head revision (the migrations) and one at head with everything ``store/sql`` defines loaded in
place of the migrations' text, compares their catalogues, and writes

* ``migrations/versions/sql/<NNNN>_<name>.up.sql``: the changed, added and dropped functions,
  views, triggers and policies as ``store/sql`` defines them (with their comments and grants),
  and the changed grants on tables,
* ``migrations/versions/sql/<NNNN>_<name>.down.sql``: the same objects as the current head has
  them, so the downgrade restores them exactly,
* ``migrations/versions/<NNNN>_<name>.py``: the revision, applying those files
  (:mod:`oncelog.migrations.frozen`); write its docstring (what changed and why) before committing.

``tests/migration/test_sql_tree.py`` then checks that the new head equals ``store/sql``, and
``tests/migration/test_migrations.py`` that its downgrade restores the state before it. Tables are not its
business: change
``store/schema.py`` and write their DDL into the new revision's files by hand (alembic's
autogenerate shows it: ``oncelog db check`` reports the drift).

    .venv/bin/python scripts/freeze_revision.py fix_guard_message --database-url "$(.venv/bin/oncelog dev-db url)"

The URL defaults to ONCELOG_DATABASE_URL; its role needs CREATEDB. Nothing is written when
``store/sql`` and head agree.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from oncelog.store import cluster, migrate, sqltree
from oncelog.store.engine import create_engine, database_url

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ROOT / "migrations" / "versions"
SCHEMA = "oncelog"
ROLES = ("reader", "client", "admin")


@contextmanager
def _scratch(server: str) -> Iterator[str]:
    name = f"oncelog_freeze_{uuid.uuid4().hex[:10]}"
    cluster.create_database(server, name)
    try:
        yield database_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        cluster.drop_database(server, name)


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg", "postgresql")


def _migrate(url: str, revision: str = "head") -> None:
    engine = create_engine(url)
    try:
        migrate.upgrade(engine, revision=revision)
    finally:
        engine.dispose()


def _load_tree(url: str) -> None:
    """Replace every function, view, trigger, policy and grant of a head database by store/sql."""
    with psycopg.connect(_libpq(url), options=f"-c search_path={SCHEMA},pg_temp") as conn:
        for (name,) in conn.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = %s::regnamespace AND c.relkind = 'v'", (SCHEMA,)
        ).fetchall():
            conn.execute(sql.SQL("DROP VIEW IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        for (signature,) in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = %s::regnamespace", (SCHEMA,)
        ).fetchall():
            conn.execute(f"DROP FUNCTION IF EXISTS {signature} CASCADE")
        roles = ", ".join(f"{SCHEMA}_{kind}" for kind in ROLES)
        for (table,) in conn.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = %s::regnamespace AND c.relkind = 'r'", (SCHEMA,)
        ).fetchall():
            conn.execute(sql.SQL("REVOKE ALL ON {} FROM ").format(sql.Identifier(table)) + sql.SQL(roles))
        for name in sqltree.FILES:
            conn.execute(sqltree.text(name))


def _functions(url: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(_libpq(url)) as conn:
        rows = conn.execute(
            "SELECT p.proname || '(' || oidvectortypes(p.proargtypes) || ')', pg_get_functiondef(p.oid), "
            "obj_description(p.oid, 'pg_proc'), p.proacl::text[], pg_get_function_identity_arguments(p.oid) "
            "FROM pg_proc p WHERE p.pronamespace = %s::regnamespace",
            (SCHEMA,),
        ).fetchall()
    return {r[0]: {"def": r[1], "comment": r[2], "acl": r[3]} for r in rows}


_PRIVILEGES = {"r": "SELECT", "a": "INSERT", "w": "UPDATE", "d": "DELETE", "D": "TRUNCATE", "x": "REFERENCES",
               "t": "TRIGGER", "m": "MAINTAIN"}
_POLICY_COMMANDS = {"r": "SELECT", "a": "INSERT", "w": "UPDATE", "d": "DELETE", "*": "ALL"}


def _others(url: str) -> dict[str, dict[str, tuple[Any, ...]]]:
    """Views (in creation order), triggers, policies and table grants, by kind then name, each as
    the statements' parts. Read with the schema on the search path, so that nothing is qualified
    with its name."""
    with psycopg.connect(_libpq(url), options=f"-c search_path={SCHEMA},pg_temp") as conn:
        ns = (SCHEMA,)
        views = conn.execute(
            "SELECT c.relname, pg_get_viewdef(c.oid), c.reloptions, obj_description(c.oid, 'pg_class'), "
            "c.relacl::text[], c.relowner::regrole::text, "
            "ARRAY(SELECT ARRAY[quote_ident(a.attname), col_description(c.oid, a.attnum)] FROM pg_attribute a "
            "      WHERE a.attrelid = c.oid AND a.attnum > 0 AND col_description(c.oid, a.attnum) IS NOT NULL "
            "      ORDER BY a.attnum) "
            "FROM pg_class c WHERE c.relnamespace = %s::regnamespace AND c.relkind = 'v' ORDER BY c.oid",
            ns,
        ).fetchall()
        triggers = conn.execute(
            "SELECT t.tgname, c.relname, pg_get_triggerdef(t.oid), obj_description(t.oid, 'pg_trigger') "
            "FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE c.relnamespace = %s::regnamespace AND NOT t.tgisinternal ORDER BY 1",
            ns,
        ).fetchall()
        policies = conn.execute(
            "SELECT p.polname, c.relname, p.polpermissive, p.polcmd::text, "
            "ARRAY(SELECT CASE r WHEN 0 THEN 'public' ELSE r::regrole::text END FROM unnest(p.polroles) r), "
            "pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid), "
            "obj_description(p.oid, 'pg_policy') "
            "FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE c.relnamespace = %s::regnamespace "
            "ORDER BY 1",
            ns,
        ).fetchall()
        tables = conn.execute(
            "SELECT c.relname, c.relacl::text[], c.relowner::regrole::text FROM pg_class c "
            "WHERE c.relnamespace = %s::regnamespace AND c.relkind = 'r' ORDER BY 1",
            ns,
        ).fetchall()
    return {
        "views": {r[0]: tuple(r[1:]) for r in views},
        "triggers": {r[0]: tuple(r[1:]) for r in triggers},
        "policies": {r[0]: tuple(r[1:]) for r in policies},
        "table grants": {r[0]: tuple(r[1:]) for r in tables},
    }


def _literal(text: str | None) -> str:
    return "NULL" if text is None else "'" + text.replace("'", "''") + "'"


def _roles(text: str) -> str:
    """The schema's roles as the frozen files name them."""
    return re.sub(rf"\b{SCHEMA}_({'|'.join(ROLES)})\b", r"@schema@_\1", text)


def _grants(kind: str, name: str, acl: list[str] | None, owner: str) -> list[str]:
    """REVOKE everything from the roles and PUBLIC, then GRANT what ``acl`` holds (the owner keeps
    its implicit rights, so its own entry is left out)."""
    grantees = ", ".join(["PUBLIC", *(f"@schema@_{role}" for role in ROLES)])
    out = [f"REVOKE ALL ON {kind} {name} FROM {grantees};"]
    for item in acl or []:
        grantee, _, rights = item.partition("=")
        if grantee == owner:
            continue
        privileges = [_PRIVILEGES[c] for c in rights.split("/")[0] if c in _PRIVILEGES]
        if privileges:
            out.append(f"GRANT {', '.join(privileges)} ON {kind} {name} TO {_roles(grantee) or 'PUBLIC'};")
    return out


def _view(name: str, parts: tuple[Any, ...]) -> list[str]:
    definition, options, comment, acl, owner, column_comments = parts
    with_options = f" WITH ({', '.join(options)})" if options else ""
    return [
        _roles(f"CREATE VIEW {name}{with_options} AS\n{definition.rstrip().rstrip(';')};"),
        f"COMMENT ON VIEW {name} IS {_literal(comment)};",
        *(f"COMMENT ON COLUMN {name}.{column} IS {_literal(text)};" for column, text in column_comments),
        *_grants("TABLE", name, acl, owner),
    ]


def _trigger(name: str, parts: tuple[Any, ...]) -> list[str]:
    table, definition, comment = parts
    # pg_get_triggerdef names the table with its schema whatever the search path.
    definition = definition.replace(f" ON {SCHEMA}.{table} ", f" ON {table} ", 1)
    return [_roles(definition) + ";", f"COMMENT ON TRIGGER {name} ON {table} IS {_literal(comment)};"]


def _policy(name: str, parts: tuple[Any, ...]) -> list[str]:
    table, permissive, command, roles, qual, check, comment = parts
    text = f"CREATE POLICY {name} ON {table} AS {'PERMISSIVE' if permissive else 'RESTRICTIVE'}"
    text += f" FOR {_POLICY_COMMANDS[command]} TO {', '.join(roles)}"
    text += f" USING ({qual})" if qual is not None else ""
    text += f" WITH CHECK ({check})" if check is not None else ""
    return [_roles(text) + ";", f"COMMENT ON POLICY {name} ON {table} IS {_literal(comment)};"]


def diff_others(
    head: dict[str, dict[str, tuple[Any, ...]]], tree: dict[str, dict[str, tuple[Any, ...]]]
) -> tuple[list[str], list[str], list[str]]:
    """(statements before the functions', statements after them, for the upgrade) for the views,
    triggers, policies and table grants that differ, and their names. Call it twice (swapped) for
    the downgrade. Views read one another: when any differs, all are dropped and re-created in
    the order they were created. Triggers and policies name functions, so they are dropped before
    the functions change and created after."""
    before: list[str] = []
    after: list[str] = []
    names: list[str] = []
    if head["views"] != tree["views"]:
        names += [f"view {n}" for n in sorted(head["views"].keys() ^ tree["views"].keys())]
        names += [f"view {n}" for n in sorted(head["views"].keys() & tree["views"].keys())
                  if head["views"][n] != tree["views"][n]]
        before += [f"DROP VIEW IF EXISTS {n} CASCADE;" for n in reversed(head["views"])]
        for name, parts in tree["views"].items():
            after += _view(name, parts)
    for kind, drop, create in (
        ("triggers", "TRIGGER", _trigger),
        ("policies", "POLICY", _policy),
    ):
        old, new = head[kind], tree[kind]
        for name in sorted(old.keys() | new.keys()):
            if old.get(name) == new.get(name):
                continue
            names.append(f"{kind[:-1] if kind == 'triggers' else 'policy'} {name}")
            if name in old:
                before.append(f"DROP {drop} {name} ON {old[name][0]};")
            if name in new:
                after += create(name, new[name])
    for name in sorted(head["table grants"].keys() & tree["table grants"].keys()):
        if head["table grants"][name] != tree["table grants"][name]:
            names.append(f"grants on {name}")
            acl, owner = tree["table grants"][name]
            after += _grants("TABLE", name, acl, owner)
    return before, after, names


def _neutral(text: str) -> str:
    """A definition as the frozen files write it: no schema name, the schema's roles as @schema@_."""
    head, sep, body = text.partition("AS $function$")
    head = head.replace(f"FUNCTION {SCHEMA}.", "FUNCTION ").replace(f"RETURNS {SCHEMA}.", "RETURNS ")
    head = head.replace(f"SETOF {SCHEMA}.", "SETOF ")
    head = head.replace(f"SET search_path TO '{SCHEMA}', 'pg_temp'", "SET search_path FROM CURRENT")
    return _roles(head + sep + body.rstrip() + ";")


def _install(signature: str, fn: dict[str, Any]) -> list[str]:
    out = [_neutral(fn["def"])]
    literal = "NULL" if fn["comment"] is None else "'" + fn["comment"].replace("'", "''") + "'"
    out.append(f"COMMENT ON FUNCTION {signature} IS {literal};")
    if fn["acl"] is not None:
        # From the roles too: a downgrade must take back what the upgrade granted them.
        grantees = ", ".join(["PUBLIC", *(f"@schema@_{role}" for role in ROLES)])
        out.append(f"REVOKE ALL ON FUNCTION {signature} FROM {grantees};")
        grantees = [a.split("=")[0] for a in fn["acl"] if a.split("=")[0] not in ("", "postgres")]
        grantees = [_roles(g) for g in grantees]
        if grantees:
            out.append(f"GRANT EXECUTE ON FUNCTION {signature} TO {', '.join(grantees)};")
    return out


def diff(head: dict[str, dict[str, Any]], tree: dict[str, dict[str, Any]]) -> tuple[list[str], list[str], list[str]]:
    """(up statements, down statements, names of the objects that differ)."""
    up: list[str] = []
    down: list[str] = []
    names: list[str] = []
    for signature in sorted(head.keys() - tree.keys()):
        names.append(f"-{signature}")
        up.append(f"DROP FUNCTION {signature};")
        down += _install(signature, head[signature])
    for signature in sorted(tree.keys() - head.keys()):
        names.append(f"+{signature}")
        up += _install(signature, tree[signature])
        down.append(f"DROP FUNCTION {signature};")
    for signature in sorted(tree.keys() & head.keys()):
        if tree[signature] != head[signature]:
            names.append(signature)
            up += _install(signature, tree[signature])
            down += _install(signature, head[signature])
    return up, down, names


REVISION_TEMPLATE = '''"""{title}

Revision ID: {revision}
Revises: {down_revision}
Create Date: {date}

Changed (frozen from store/sql by scripts/freeze_revision.py): {changed}.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.migrations import frozen

revision: str = "{revision}"
down_revision: str | None = "{down_revision}"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(schema: str) -> None:
    """Install the definitions store/sql has now."""
    frozen.apply("{stem}", "up", schema)


def downgrade(schema: str) -> None:
    """Restore the definitions of revision {down_revision}."""
    frozen.apply("{stem}", "down", schema)
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the new revision's name, e.g. fix_guard_message")
    parser.add_argument("--title", default=None, help="the docstring's first line")
    parser.add_argument("--database-url", default=os.environ.get("ONCELOG_DATABASE_URL"))
    args = parser.parse_args(argv)
    if not args.database_url:
        parser.error("give --database-url or set ONCELOG_DATABASE_URL")
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,40}", args.name):
        parser.error("the name is lower-case letters, digits and _")
    server = database_url(args.database_url).set(database="postgres").render_as_string(hide_password=False)
    head = migrate.head()
    revision = f"{int(head) + 1:04d}"
    stem = f"{revision}_{args.name}"
    with _scratch(server) as at_head, _scratch(server) as as_tree:
        _migrate(at_head)
        _migrate(as_tree)
        _load_tree(as_tree)
        up, down, names = diff(_functions(at_head), _functions(as_tree))
        others_head, others_tree = _others(at_head), _others(as_tree)
    up_before, up_after, other_names = diff_others(others_head, others_tree)
    down_before, down_after, _ = diff_others(others_tree, others_head)
    up = up_before + up + up_after
    down = down_before + down + down_after
    names += other_names
    if not names:
        print("store/sql and the head revision agree: nothing to freeze")
        return 0
    (VERSIONS / "sql" / f"{stem}.up.sql").write_text("\n\n".join(up) + "\n", encoding="utf-8")
    (VERSIONS / "sql" / f"{stem}.down.sql").write_text("\n\n".join(down) + "\n", encoding="utf-8")
    (VERSIONS / f"{stem}.py").write_text(
        REVISION_TEMPLATE.format(
            title=args.title or f"{args.name.replace('_', ' ').capitalize()}.",
            revision=revision,
            down_revision=head,
            date=date.today().isoformat(),
            changed=", ".join(names),
            stem=stem,
        ),
        encoding="utf-8",
    )
    print(f"wrote revision {stem}: {', '.join(names)}")
    print("install it (scripts/setup.sh re-links new files), then check: pytest tests/migration/test_sql_tree.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
