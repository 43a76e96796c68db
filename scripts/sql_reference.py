#!/usr/bin/env python3
"""Print the SQL reference skeleton of an oncelog schema, read from a migrated database.

Lists every function (signature, result, SECURITY DEFINER or not, volatility, who may EXECUTE it,
its COMMENT, and the SQLSTATEs it raises, directly or through the internal functions it calls),
every trigger, every view (its columns with their COMMENTs, who may SELECT it) and every table
(its COMMENT and grants), and the roles of the installation. Everything comes from the live
catalogue (pg_proc, pg_class, pg_description, the ACLs), so the output is what the migrations
really installed. ``docs/sql-reference.md`` is this output with hand-written explanations added:
its generated pieces sit between ``<!-- sql_reference:begin KEY -->`` and
``<!-- sql_reference:end KEY -->`` markers, and ``--update`` refreshes them in place, keeping the
hand-written text, and fails (exit 1) listing the functions and views the page does not document
yet or documents although they are gone.

    .venv/bin/python scripts/sql_reference.py --database-url "$(.venv/bin/oncelog dev-db url)" > /tmp/ref.md
    .venv/bin/python scripts/sql_reference.py --update docs/sql-reference.md   # after a migration

The URL defaults to ONCELOG_DATABASE_URL, the schema to ONCELOG_SCHEMA or ``oncelog``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from oncelog.errors import OncelogError, error_for_sqlstate
from oncelog.store.engine import database_url, validate_schema

_ERRCODE_RE = re.compile(r"ERRCODE\s*=\s*'([A-Za-z0-9_]+)'")
_VOLATILITY = {"i": "IMMUTABLE", "s": "STABLE", "v": "VOLATILE"}

_FUNCTIONS = """
SELECT p.oid, p.proname AS name,
       pg_get_function_identity_arguments(p.oid) AS identity_args,
       pg_get_function_arguments(p.oid) AS args,
       pg_get_function_result(p.oid) AS result,
       p.prosecdef AS security_definer, p.provolatile AS volatility, p.prosrc AS source,
       l.lanname AS language, pg_get_userbyid(p.proowner) AS owner,
       p.proacl IS NULL AS default_acl,
       coalesce((SELECT array_agg(CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END
                                  ORDER BY 1)
                 FROM aclexplode(p.proacl) a
                 WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner), '{}') AS grantees,
       obj_description(p.oid, 'pg_proc') AS comment,
       coalesce(p.proconfig, '{}') AS config
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE n.nspname = %(schema)s AND p.prokind = 'f'
ORDER BY p.proname, identity_args
"""

_TRIGGERS = """
SELECT t.tgname AS name, c.relname AS table_name, p.proname AS function,
       pg_get_triggerdef(t.oid) AS definition
FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_proc p ON p.oid = t.tgfoid
WHERE n.nspname = %(schema)s AND NOT t.tgisinternal
ORDER BY c.relname, t.tgname
"""

_RELATIONS = """
SELECT c.oid, c.relname AS name, c.relkind AS kind,
       obj_description(c.oid, 'pg_class') AS comment,
       coalesce((SELECT array_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END)
                 FROM aclexplode(c.relacl) a
                 WHERE a.privilege_type = 'SELECT' AND a.grantee <> c.relowner), '{}') AS readers,
       coalesce((SELECT array_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END)
                 FROM aclexplode(c.relacl) a
                 WHERE a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')
                   AND a.grantee <> c.relowner), '{}') AS writers
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'v')
ORDER BY c.relkind DESC, c.relname
"""

_COLUMNS = """
SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type,
       col_description(a.attrelid, a.attnum) AS comment
FROM pg_attribute a
WHERE a.attrelid = %(oid)s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_ROLES = """
SELECT r.rolname AS name, shobj_description(r.oid, 'pg_authid') AS comment, r.rolcanlogin AS login
FROM pg_roles r
WHERE r.rolname IN (%(schema)s || '_reader', %(schema)s || '_client', %(schema)s || '_admin')
ORDER BY r.rolname
"""


@dataclass
class Function:
    """One function of the schema, as the catalogue describes it."""

    name: str
    identity_args: str
    args: str
    result: str
    security_definer: bool
    volatility: str
    source: str
    language: str
    owner: str
    default_acl: bool
    grantees: list[str]
    comment: str | None
    config: list[str]
    calls: set[str] = field(default_factory=set)

    @property
    def own_codes(self) -> set[str]:
        """The SQLSTATEs raised by this function's own body."""
        return set(_ERRCODE_RE.findall(self.source))

    @property
    def is_trigger(self) -> bool:
        """Whether this is a trigger function (callable only as a trigger)."""
        return self.result == "trigger"

    @property
    def who(self) -> str:
        """Who may EXECUTE it, besides its owner."""
        if self.default_acl:
            return "PUBLIC (default privileges; a trigger function cannot be called directly)"
        return ", ".join(f"`{g}`" for g in self.grantees) if self.grantees else "nobody (owner only: internal)"


def _cell(text: str | None) -> str:
    """Text fit for one Markdown table cell."""
    return (text or "").replace("|", "\\|").replace("\n", " ").strip()


def _declared_errors() -> list[type[OncelogError]]:
    """The error classes that declare a SQLSTATE of their own (the codes the SQL functions raise)."""
    out: list[type[OncelogError]] = []
    todo: list[type[OncelogError]] = [OncelogError]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if "sqlstate" in cls.__dict__ and cls.sqlstate:
            out.append(cls)
    return out


def _code_label(code: str) -> str:
    cls = error_for_sqlstate(code)
    if cls is None:
        return f"`{code}`"
    kafka = f" {cls.kafka_name}" if cls.kafka_name else ""
    return f"`{code}`{kafka} ({cls.__name__})"


def _transitive_codes(fn: Function, by_name: dict[str, list[Function]], seen: set[str] | None = None) -> set[str]:
    """SQLSTATEs ``fn`` raises itself or through the schema's functions it calls."""
    seen = set() if seen is None else seen
    codes = set(fn.own_codes)
    for callee in sorted(fn.calls):
        if callee in seen:
            continue
        seen.add(callee)
        for other in by_name.get(callee, []):
            codes |= _transitive_codes(other, by_name, seen)
    return codes


def _find_calls(functions: Iterable[Function]) -> None:
    funcs = list(functions)
    names = {f.name for f in funcs}
    for f in funcs:
        for name in names - {f.name}:
            if re.search(rf"\b{re.escape(name)}\s*\(", f.source):
                f.calls.add(name)


def _function_block(f: Function, by_name: dict[str, list[Function]]) -> str:
    codes = sorted(_transitive_codes(f, by_name))
    via = sorted(c for c in f.calls if c in by_name)
    out = [
        "```sql",
        f"{f.name}({f.args})",
        f"RETURNS {f.result}",
        "```",
        "",
        f"- **what**: {_cell(f.comment) or '(no comment)'}",
        f"- **may execute**: {f.who}",
        f"- **runs as**: {'owner (SECURITY DEFINER)' if f.security_definer else 'caller'}, "
        f"{_VOLATILITY.get(f.volatility, f.volatility)}, {f.language}"
        + (f", `{'`, `'.join(f.config)}`" if f.config else ""),
    ]
    if via:
        out.append(f"- **calls**: {', '.join(f'`{c}`' for c in via)}")
    if codes:
        out.append(f"- **raises**: {', '.join(_code_label(c) for c in codes)}")
    return "\n".join(out)


def _error_table(functions: list[Function], by_name: dict[str, list[Function]]) -> str:
    """Every OL code the Python errors declare, with the public functions that raise it."""
    raised_by: dict[str, set[str]] = {}
    for f in functions:
        if f.grantees and not f.is_trigger:
            for code in _transitive_codes(f, by_name):
                raised_by.setdefault(code, set()).add(f.name)
    rows = [
        "| SQLSTATE | Kafka error | Python class | flag | meaning | raised by (public functions, directly or through "
        "internal ones) |",
        "|---|---|---|---|---|---|",
    ]
    for cls in sorted(_declared_errors(), key=lambda c: str(c.sqlstate)):
        code = str(cls.sqlstate)
        flag = "retriable" if cls.retriable else "abortable" if cls.abortable else "fatal" if cls.fatal else "-"
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        fns = ", ".join(f"`{n}`" for n in sorted(raised_by.get(code, ()))) or "no SQL function"
        rows.append(f"| `{code}` | {cls.kafka_name or ''} | `{cls.__name__}` | {flag} | {_cell(doc)} | {fns} |")
    return "\n".join(rows)


def sections(conn: psycopg.Connection[dict[str, Any]], schema: str) -> dict[str, str]:
    """The generated pieces of the reference, by key: ``revision``, ``roles``, ``errors``,
    ``function:<name>``, ``triggers``, ``view:<name>``, ``tables``."""
    params = {"schema": schema}
    functions = [Function(**{k: v for k, v in row.items() if k != "oid"}) for row in conn.execute(_FUNCTIONS, params)]
    if not functions:
        raise SystemExit(f"no functions in schema {schema!r}: is it migrated (oncelog db upgrade)?")
    _find_calls(functions)
    by_name: dict[str, list[Function]] = {}
    for f in functions:
        by_name.setdefault(f.name, []).append(f)
    out: dict[str, str] = {}
    revision = conn.execute(f"SELECT version_num FROM {schema}.alembic_version").fetchone()
    out["revision"] = str(revision["version_num"]) if revision else "none"
    roles = ["| role | login | comment |", "|---|---|---|"]
    for r in conn.execute(_ROLES, params):
        roles.append(f"| `{r['name']}` | {'yes' if r['login'] else 'no'} | {_cell(r['comment'])} |")
    out["roles"] = "\n".join(roles)
    out["errors"] = _error_table(functions, by_name)
    for f in functions:
        out[f"function:{f.name}"] = _function_block(f, by_name)
    triggers = ["| table | trigger | function | definition |", "|---|---|---|---|"]
    for t in conn.execute(_TRIGGERS, params):
        triggers.append(
            f"| `{t['table_name']}` | `{t['name']}` | `{t['function']}` | `{_cell(str(t['definition']))}` |"
        )
    out["triggers"] = "\n".join(triggers)
    relations = list(conn.execute(_RELATIONS, params))
    for v in (r for r in relations if r["kind"] == "v"):
        readers = ", ".join(f"`{g}`" for g in sorted(v["readers"])) or "owner only"
        lines = [
            _cell(v["comment"]) or "(no comment)",
            "",
            f"May SELECT: {readers}.",
            "",
            "| column | type | meaning |",
            "|---|---|---|",
        ]
        for c in conn.execute(_COLUMNS, {"oid": v["oid"]}):
            lines.append(f"| `{c['name']}` | {c['type']} | {_cell(c['comment'])} |")
        out[f"view:{v['name']}"] = "\n".join(lines)
    tables = ["| table | may SELECT | may write | comment |", "|---|---|---|---|"]
    for t in (r for r in relations if r["kind"] == "r"):
        readers = ", ".join(f"`{g}`" for g in sorted(t["readers"])) or "owner only"
        writers = ", ".join(f"`{g}`" for g in sorted(t["writers"])) or "owner only"
        tables.append(f"| `{t['name']}` | {readers} | {writers} | {_cell(t['comment'])} |")
    out["tables"] = "\n".join(tables)
    # Grouping, for render(): which functions are protocol, internal or trigger functions.
    out["_groups"] = "\n".join(
        f"{'trigger' if f.is_trigger else 'public' if f.grantees else 'internal'} {f.name}" for f in functions
    )
    return out


def render(conn: psycopg.Connection[dict[str, Any]], schema: str) -> str:
    """The whole generated reference of ``schema`` as one Markdown page."""
    parts = sections(conn, schema)
    kinds: dict[str, list[str]] = {}
    for line in parts["_groups"].splitlines():
        kind, name = line.split(" ", 1)
        kinds.setdefault(kind, []).append(name)
    out = [
        f"<!-- generated by scripts/sql_reference.py from schema {schema} at revision {parts['revision']} -->",
        "",
        f"# SQL objects of schema `{schema}`",
        "",
        "## Roles",
        "",
        parts["roles"],
        "",
        "## Error codes",
        "",
        parts["errors"],
    ]
    titles = {
        "public": "Protocol and administration functions",
        "internal": "Internal functions (granted to nobody)",
        "trigger": "Trigger functions",
    }
    for kind, title in titles.items():
        out += ["", f"## {title}", ""]
        for name in kinds.get(kind, []):
            out += [f"### `{name}`", "", parts[f"function:{name}"], ""]
    out += ["## Triggers", "", parts["triggers"], "", "## Views", ""]
    for key in (k for k in parts if k.startswith("view:")):
        out += [f"### `{key.split(':', 1)[1]}`", "", parts[key], ""]
    out += ["## Tables", "", parts["tables"], ""]
    return "\n".join(out)


_MARKED = re.compile(r"<!-- sql_reference:begin (\S+) -->(.*?)<!-- sql_reference:end \1 -->", re.S)


def update(text: str, parts: dict[str, str]) -> tuple[str, list[str]]:
    """Refresh every generated piece of a hand-edited page (between ``<!-- sql_reference:begin KEY -->``
    and ``<!-- sql_reference:end KEY -->``), keeping the hand-written text around them. Returns
    the new text and the problems: pieces whose object no longer exists, and functions and views
    the page does not document yet."""
    problems: list[str] = []
    seen: set[str] = set()

    def fill(m: re.Match[str]) -> str:
        key, old = m.group(1), m.group(2)
        seen.add(key)
        if key not in parts:
            problems.append(f"{key}: in the page but no longer in the schema")
            return m.group(0)
        body = parts[key] if not old.startswith("\n") else f"\n{parts[key]}\n"
        return f"<!-- sql_reference:begin {key} -->{body}<!-- sql_reference:end {key} -->"

    new = _MARKED.sub(fill, text)
    for key in parts:
        if key.startswith(("function:", "view:")) and key not in seen:
            problems.append(f"{key}: in the schema but not documented in the page")
    return new, problems


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, read the catalogue, print (or update) Markdown."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("ONCELOG_DATABASE_URL"), help="postgresql://...")
    parser.add_argument("--schema", default=os.environ.get("ONCELOG_SCHEMA", "oncelog"))
    parser.add_argument("-o", "--output", help="write the generated page here instead of stdout")
    parser.add_argument(
        "--update",
        metavar="PAGE",
        help="refresh the generated pieces of a hand-edited page (docs/sql-reference.md) in place; "
        "exit 1 if it documents objects that are gone or misses new ones",
    )
    args = parser.parse_args(argv)
    if not args.database_url:
        parser.error("give --database-url or set ONCELOG_DATABASE_URL (e.g. from `oncelog dev-db url`)")
    schema = validate_schema(args.schema)
    url = database_url(args.database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, row_factory=psycopg.rows.dict_row) as conn:
        if args.update:
            with open(args.update, encoding="utf-8") as fh:
                text, problems = update(fh.read(), sections(conn, schema))
            with open(args.update, "w", encoding="utf-8") as fh:
                fh.write(text)
            for problem in problems:
                print(f"{args.update}: {problem}", file=sys.stderr)
            return 1 if problems else 0
        text = render(conn, schema)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
