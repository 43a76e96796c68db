"""Committed transactions' spans per partition replace the per-record transaction index.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-21

A read_committed fetch returns a committed transaction on all of the requested partitions or on
none (consistent_limits_v1). Its probe asked "has this transaction a record at or past another
partition's read limit?" through a partial index on records (producer_id, txn_number): one index
entry per transactional record, written by every append. Measured with store calls alternated on
one connection (130-record batches, medians of 1200): that index was almost all of a transactional
append's extra cost over an idempotent one (+250-330 us of ~2.5-2.9 ms; +0-115 us without it).

The probe needs only each committed transaction's last data record per partition. EndTxn (commit)
now writes that, one row per partition, into txn_spans, read from the producer's sequence state
(its last batch there is this transaction's: a producer has one open transaction and its plain
writes beside it are refused), so appends write nothing more than an idempotent append does.
Retention drops the spans that end below a partition's log start; a deleted topic takes its own.
Rows are backfilled from the log for transactions committed before this revision.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The torn-transaction probe as 0003 wrote it: through the (producer_id, txn_number) index.
PROBE_0003 = """                WHERE EXISTS (
                    SELECT 1 FROM records x
                    JOIN unnest(p_topic_ids, p_partitions, v_limits) AS o(topic_id, partition, lim)
                      ON x.topic_id = o.topic_id AND x.partition = o.partition AND x."offset" >= o.lim
                    WHERE x.is_transactional AND x.producer_id = h.producer_id AND x.txn_number = h.txn_number
                      AND x.control_type IS NULL)"""

#: The same question answered by the transaction's spans (one primary-key lookup per partition).
PROBE_NOW = """                WHERE EXISTS (
                    SELECT 1 FROM txn_spans s
                    JOIN unnest(p_topic_ids, p_partitions, v_limits) AS o(topic_id, partition, lim)
                      ON s.topic_id = o.topic_id AND s.partition = o.partition AND s.last_offset >= o.lim
                    WHERE s.producer_id = h.producer_id AND s.txn_number = h.txn_number)"""

PROBE_COMMENT_0003 = """                -- ... that have a record at or past some requested partition's limit. The probe
                -- goes through the (producer_id, txn_number) index of transactional records.
"""

PROBE_COMMENT_NOW = """                -- ... that have a record at or past some requested partition's limit: their last
                -- record there, from the spans EndTxn wrote (revision 0014).
"""

DECLARE_0003 = "    tp record;\n    v_marker bigint;\n"
DECLARE_NOW = "    tp record;\n    v_marker bigint;\n    v_last bigint;\n"

#: In txn_complete_v1's loop over the transaction's partitions, right after the marker is written.
MARKER_0003 = """        UPDATE partitions pt SET next_offset = v_marker + 1
        WHERE pt.topic_id = tp.topic_id AND pt.partition = tp.partition;
    END LOOP;"""

MARKER_NOW = """        UPDATE partitions pt SET next_offset = v_marker + 1
        WHERE pt.topic_id = tp.topic_id AND pt.partition = tp.partition;
        IF p_commit THEN
            -- The span read_committed fetches test transactions against (consistent_limits_v1).
            -- Its last record is the producer's last batch here: the producer's records from the
            -- first offset on are this transaction's (as for the abort above), and produce_v2
            -- keeps that batch in its sequence state. A state expired meanwhile is looked up.
            SELECT ps.last_offsets[cardinality(ps.last_offsets)] INTO v_last FROM producer_partition_state ps
            WHERE ps.producer_id = t.producer_id AND ps.topic_id = tp.topic_id AND ps.partition = tp.partition;
            IF v_last IS NULL OR v_last < tp.first_offset OR v_last >= v_marker THEN
                SELECT max(r."offset") INTO v_last FROM records r
                WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition
                  AND r."offset" >= tp.first_offset AND r."offset" < v_marker
                  AND r.producer_id = t.producer_id AND r.is_transactional AND r.control_type IS NULL;
            END IF;
            INSERT INTO txn_spans (producer_id, txn_number, topic_id, partition, first_offset, last_offset)
            VALUES (t.producer_id, t.txn_number, tp.topic_id, tp.partition, tp.first_offset, v_last);
        END IF;
    END LOOP;"""

#: In enforce_retention_v1, after a partition's records below its log start were deleted.
RETENTION_0002 = """            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_deleted := v_deleted + v_n;
        END IF;
    END LOOP;"""

RETENTION_NOW = """            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_deleted := v_deleted + v_n;
        END IF;
        -- A committed transaction's span that ends below the log start can no longer be read
        -- in part (revision 0014).
        DELETE FROM txn_spans s
        WHERE s.topic_id = pt.topic_id AND s.partition = pt.partition AND s.last_offset < v_start;
    END LOOP;"""

#: Spans of the transactions committed before this revision, from their records (an open
#: transaction gets its spans when it commits).
BACKFILL = """
INSERT INTO txn_spans (producer_id, txn_number, topic_id, partition, first_offset, last_offset)
SELECT r.producer_id, r.txn_number, r.topic_id, r.partition, min(r."offset"), max(r."offset")
FROM records r
WHERE r.is_transactional AND r.control_type IS NULL AND NOT r.aborted
  AND NOT EXISTS (
      SELECT 1 FROM transactions t
      WHERE t.producer_id = r.producer_id AND t.txn_number = r.txn_number
        AND t.state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort'))
GROUP BY r.producer_id, r.txn_number, r.topic_id, r.partition
"""


def _revision(name: str) -> ModuleType:
    return importlib.import_module(f"oncelog.migrations.versions.{name}")


def _function(module: str, name: str, edits: list[tuple[str, str]]) -> str:
    """``name`` as revision ``module`` installed it (as CREATE OR REPLACE, keeping grants and
    comment), with each (old, new) edit applied; an old text must occur exactly once."""
    text: str = _revision("0009_acl").original_function(module, name)
    for old, new in edits:
        if text.count(old) != 1:
            raise RuntimeError(f"{name} of revision {module} is not the text this migration rewrites")
        text = text.replace(old, new)
    return text


def _functions(*, now: bool) -> list[str]:
    """The three rewritten functions: as this revision makes them, or as they were."""

    def pick(edits: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return edits if now else []

    return [
        _function(
            "0003_transactions",
            "consistent_limits_v1",
            pick([(PROBE_0003, PROBE_NOW), (PROBE_COMMENT_0003, PROBE_COMMENT_NOW)]),
        ),
        _function(
            "0003_transactions", "txn_complete_v1", pick([(DECLARE_0003, DECLARE_NOW), (MARKER_0003, MARKER_NOW)])
        ),
        _function("0002_idempotent_log", "enforce_retention_v1", pick([(RETENTION_0002, RETENTION_NOW)])),
    ]


def consistent_limits_as_of_0014() -> str:
    """consistent_limits_v1 as this revision makes it (as CREATE OR REPLACE)."""
    return _functions(now=True)[0]


def upgrade(schema: str) -> None:
    """Create txn_spans, fill it, switch the probe and EndTxn to it, drop the per-record index."""
    op.create_table(
        "txn_spans",
        sa.Column("producer_id", sa.BigInteger(), nullable=False, comment="The transaction's producer id."),
        sa.Column(
            "txn_number",
            sa.BigInteger(),
            nullable=False,
            comment="The transaction's number: (producer_id, txn_number) names it, as on its records.",
        ),
        sa.Column("topic_id", sa.Integer(), nullable=False, comment="The topic."),
        sa.Column("partition", sa.Integer(), nullable=False, comment="A partition the transaction wrote to."),
        sa.Column(
            "first_offset", sa.BigInteger(), nullable=False, comment="Offset of its first record in this partition."
        ),
        sa.Column(
            "last_offset",
            sa.BigInteger(),
            nullable=False,
            comment="Offset of its last data record in this partition (its commit marker follows).",
        ),
        sa.CheckConstraint(
            "first_offset >= 0 AND last_offset >= first_offset", name=op.f("ck_txn_spans_offsets_ordered")
        ),
        sa.ForeignKeyConstraint(
            ["topic_id", "partition"],
            ["partitions.topic_id", "partitions.partition"],
            name=op.f("fk_txn_spans_topic_id_partition_partitions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("producer_id", "txn_number", "topic_id", "partition", name=op.f("pk_txn_spans")),
        comment="Where each committed transaction lies in each partition it wrote to (written by EndTxn): "
        "read_committed fetches withhold a transaction that a read would return only in part.",
    )
    op.create_index(
        op.f("ix_txn_spans_topic_id_partition_last_offset"), "txn_spans", ["topic_id", "partition", "last_offset"]
    )
    op.execute(BACKFILL)
    for sql in _functions(now=True):
        op.execute(sql)
    op.drop_index(op.f("ix_records_producer_id_txn_number"), table_name="records")
    roles = _revision("0005_roles").roles(schema)
    op.execute(f"GRANT SELECT ON txn_spans TO {roles['admin']}")


def downgrade(schema: str) -> None:
    """Restore the index and the functions as they were, then drop txn_spans."""
    op.create_index(
        op.f("ix_records_producer_id_txn_number"),
        "records",
        ["producer_id", "txn_number"],
        postgresql_where=sa.text("is_transactional"),
    )
    for sql in _functions(now=False):
        op.execute(sql)
    op.drop_index(op.f("ix_txn_spans_topic_id_partition_last_offset"), table_name="txn_spans")
    op.drop_table("txn_spans")
