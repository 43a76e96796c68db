"""Read-only questions about the installed schema, for operators and the demo."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from oncelog.store.schema import metadata


@dataclass(frozen=True)
class TableStatus:
    """One oncelog table: its name, row count and comment."""

    name: str
    rows: int
    comment: str


def table_status(conn: sa.Connection) -> list[TableStatus]:
    """Row count and comment of every oncelog table, in dependency order."""
    out = []
    for table in metadata.sorted_tables:
        rows = conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
        out.append(TableStatus(table.name, int(rows), table.comment or ""))
    return out
