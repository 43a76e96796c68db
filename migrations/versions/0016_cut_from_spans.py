"""The all-or-none cut reads where a transaction starts from its span, not from the log.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-21

When an open transaction holds some requested partition back, a read_committed fetch checks the
committed transactions it would return (consistent_limits_v1) and pulls a partition's limit back to
the first record of any that it could return only in part. That first record was found by joining
the partition's whole readable range (from the read's position to its limit) with those
transactions: with nothing torn the plan still read every record in the range. Measured on the
read bench's log (4 partitions of ~50,000 records, one open transaction on partition 0, reading
4 x 125 records from offset 1000): 35 ms per fetch, of which ~20 ms in that join per partition
checked, against ~1.7 ms without the open transaction.

A committed transaction's span (txn_spans, revision 0014) holds its first record per partition:
that is where it starts here unless it began below the read's position (an earlier read returned
its first part), and then its first record from the position on is found by an index scan that
stops at it (the transaction has a record among those this read would return). Same limits, and
the fetch no longer depends on how long the partition is.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The cut as 0003 wrote it: the torn transactions joined with every record of the range.
CUT_0003 = """            SELECT min(r."offset") INTO v_cut FROM records r JOIN torn USING (producer_id, txn_number)
            WHERE r.topic_id = p_topic_ids[i] AND r.partition = p_partitions[i] AND r.is_transactional
              AND r."offset" >= p_starts[i] AND r."offset" < v_limits[i];"""

CUT_NOW = """            -- Where each starts here: its span's first record or, when it began below this read's
            -- start, its first record from the start on (one is among the records this read would
            -- return, so the index scan stops within them). Revision 0016: joining the torn
            -- transactions with the records of the whole range read every record up to the limit.
            SELECT min(CASE WHEN s.first_offset >= p_starts[i] THEN s.first_offset ELSE (
                       SELECT r."offset" FROM records r
                       WHERE r.topic_id = p_topic_ids[i] AND r.partition = p_partitions[i]
                         AND r."offset" >= p_starts[i] AND r.is_transactional
                         AND r.producer_id = t.producer_id AND r.txn_number = t.txn_number
                       ORDER BY r."offset" LIMIT 1) END) INTO v_cut
            FROM torn t JOIN txn_spans s
              ON s.producer_id = t.producer_id AND s.txn_number = t.txn_number
             AND s.topic_id = p_topic_ids[i] AND s.partition = p_partitions[i];"""


def _revision(name: str) -> ModuleType:
    return importlib.import_module(f"oncelog.migrations.versions.{name}")


def _as_of_0014() -> str:
    return str(_revision("0014_txn_spans").consistent_limits_as_of_0014())


def _now() -> str:
    text = _as_of_0014()
    if text.count(CUT_0003) != 1:
        raise RuntimeError("consistent_limits_v1 of revision 0014 is not the text this migration rewrites")
    return text.replace(CUT_0003, CUT_NOW)


def upgrade(schema: str) -> None:
    """Replace consistent_limits_v1's body (same signature: grants and comment stay)."""
    op.execute(_now())


def downgrade(schema: str) -> None:
    """Restore the body of revision 0014."""
    op.execute(_as_of_0014())
