"""Time travel for the maintenance functions, as only the schema owner can do it.

No protocol function takes the time from its caller (revision 0017): they read server_now_v1(),
the server's clock, or ``clock.frozen_at`` while it is set. The tests connect as the owner and set it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime

import sqlalchemy as sa


@contextlib.contextmanager
def server_time(conn: sa.Connection, when: datetime) -> Iterator[None]:
    """Within the block, the maintenance functions' clock reads ``when`` (stopped there)."""
    conn.exec_driver_sql("UPDATE clock SET frozen_at = %(when)s", {"when": when})
    try:
        yield
    finally:
        conn.exec_driver_sql("UPDATE clock SET frozen_at = NULL")
