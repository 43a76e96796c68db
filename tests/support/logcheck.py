"""Read a partition's whole log directly (no proxy, no producer) to check what really landed.

Shared by the adversarial producer tests: every check goes through the store's own fetch, on a
connection of its own, so it sees exactly what a consumer would see.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from oncelog.store import create_engine, log
from oncelog.store.records import FetchedRecord


def sslmode_disable(url: str) -> str:
    """``url`` with ``sslmode=disable`` (the fault proxy needs a plain-text protocol stream)."""
    return make_url(url).update_query_dict({"sslmode": "disable"}).render_as_string(hide_password=False)


def host_port(url: str) -> tuple[str, int]:
    """Host and port of a PostgreSQL URL (the proxy's upstream)."""
    parsed = make_url(url)
    assert parsed.host and parsed.port, f"need a TCP URL with host and port, not {parsed!r}"
    return parsed.host, int(parsed.port)


def read_partition(url: str, topic: str, partition: int, *, page: int = 1000) -> list[FetchedRecord]:
    """Every record of ``topic``/``partition`` from offset 0 to the high watermark.

    Fails (AssertionError) if the log start is not 0 or the pages do not join up densely: a test
    using this helper never deletes records, so any hole is a lost or misplaced write.
    """
    engine = create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            bounds = {p.partition: p for p in log.list_offsets(conn, topic=topic)}[partition]
            assert bounds.log_start_offset == 0, f"log start moved to {bounds.log_start_offset}"
            out: list[FetchedRecord] = []
            while len(out) < bounds.high_watermark:
                result = log.fetch(conn, topic=topic, partition=partition, offset=len(out), max_records=page)
                assert result.records, f"fetch at {len(out)} returned nothing below {bounds.high_watermark}"
                for r in result.records:
                    assert r.offset == len(out), f"{topic}-{partition}: expected offset {len(out)}, got {r.offset}"
                    out.append(r)
            return out
    finally:
        engine.dispose()


def values(records: list[FetchedRecord]) -> list[bytes | None]:
    """The values of ``records``, in offset order."""
    return [r.value for r in records]


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.01) -> None:
    """Poll ``predicate`` until it holds; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
