"""Retention for the transaction journal's history.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-21

txn_history gains about three rows per transaction (Ongoing, Prepare*, Complete*) and was
append-only with no way to shrink: at 100 transactions per second, 26 million rows a day. Now the
maintenance loop prunes rows older than ``settings.txn_history_retention_ms`` (default 7 days, as
transactional.id.expiration.ms), except the newest CompleteCommit row of each transactional id, so
"has this transactional id ever committed?" (how a re-run Spark job learns it already finished)
keeps its answer for ever. Nothing else may delete history: the guard trigger lets a DELETE through
only inside expire_txn_history_v1 (which marks its own transaction), and still refuses every UPDATE.

Installs:
  expire_txn_history_v1  maintenance: prune history past the retention, in batches
  txn_history_guard_v1   trigger: UPDATE refused; DELETE only from expire_txn_history_v1
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_COMMENT = (
    "Append-only history of every transaction state transition and epoch change (written by a trigger on "
    "transactions; updates and deletes are refused)."
)
NEW_COMMENT = (
    "Append-only history of every transaction state transition and epoch change (written by a trigger on "
    "transactions; updates are refused, deletes too except maintenance pruning past "
    "settings.txn_history_retention_ms)."
)

#: The transaction-local flag expire_txn_history_v1 sets so that the guard lets its DELETE through.
PRUNE_FLAG = "oncelog.pruning_txn_history"

CREATE_SQL = rf"""
CREATE FUNCTION txn_history_guard_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- A custom setting, local to the pruning transaction: only expire_txn_history_v1 sets it. The
    -- owner could drop this trigger anyway; the guard stops mistakes, not the owner.
    IF TG_OP = 'DELETE' AND current_setting('{PRUNE_FLAG}', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'OL000',
        MESSAGE = format('%s is append-only: %s is refused (history is pruned by expire_txn_history_v1)',
                         TG_TABLE_NAME, TG_OP);
END
$fn$;
COMMENT ON FUNCTION txn_history_guard_v1() IS
  'Trigger: txn_history is append-only; UPDATE is refused, DELETE is let through only for expire_txn_history_v1.';

DROP TRIGGER txn_history_append_only ON txn_history;
CREATE TRIGGER txn_history_append_only
BEFORE UPDATE OR DELETE ON txn_history
FOR EACH ROW EXECUTE FUNCTION txn_history_guard_v1();

CREATE FUNCTION expire_txn_history_v1(p_now timestamptz DEFAULT clock_timestamp(), p_batch integer DEFAULT 10000)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_before timestamptz;
    v_n integer;
BEGIN
    IF p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'batch must be at least 1';
    END IF;
    v_before := p_now - make_interval(secs => (SELECT s.txn_history_retention_ms FROM settings s) / 1000.0);
    PERFORM set_config('{PRUNE_FLAG}', 'on', true);
    -- Oldest first, at most p_batch rows per call (the caller loops, one transaction each), so a
    -- large backlog never holds locks or bloats one transaction. Rows are immutable and only this
    -- function deletes them, so no lock order is involved.
    DELETE FROM txn_history h
    WHERE h.id IN (
        SELECT x.id FROM txn_history x
        WHERE x.at < v_before
          AND NOT (x.to_state = 'CompleteCommit' AND x.id = (
                SELECT max(y.id) FROM txn_history y
                WHERE y.transactional_id = x.transactional_id AND y.to_state = 'CompleteCommit'))
        ORDER BY x.id
        LIMIT p_batch);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    PERFORM set_config('{PRUNE_FLAG}', 'off', true);
    RETURN v_n;
END
$fn$;
COMMENT ON FUNCTION expire_txn_history_v1(timestamptz, integer) IS
  'Maintenance: deletes up to p_batch txn_history rows older than settings.txn_history_retention_ms, keeping the '
  'newest CompleteCommit row of every transactional id. Returns the number deleted (call again until 0).';
"""

DROP_SQL = """
DROP FUNCTION IF EXISTS expire_txn_history_v1(timestamptz, integer);
DROP TRIGGER IF EXISTS txn_history_append_only ON txn_history;
CREATE TRIGGER txn_history_append_only
BEFORE UPDATE OR DELETE ON txn_history
FOR EACH ROW EXECUTE FUNCTION refuse_change_v1();
DROP FUNCTION IF EXISTS txn_history_guard_v1();
"""


def upgrade(schema: str) -> None:
    """Add the retention setting, the guard trigger and the pruning function."""
    op.add_column(
        "settings",
        sa.Column(
            "txn_history_retention_ms",
            sa.BigInteger(),
            server_default=sa.text("604800000"),
            nullable=False,
            comment="txn_history rows older than this are pruned by maintenance, except each transactional id's "
            "newest CompleteCommit (default 7 days).",
        ),
    )
    op.create_check_constraint(
        op.f("ck_settings_txn_history_retention_positive"), "settings", "txn_history_retention_ms > 0"
    )
    op.execute(CREATE_SQL)
    op.create_table_comment("txn_history", NEW_COMMENT, existing_comment=OLD_COMMENT)
    op.execute("REVOKE ALL ON FUNCTION txn_history_guard_v1() FROM PUBLIC")
    op.execute("REVOKE ALL ON FUNCTION expire_txn_history_v1(timestamptz, integer) FROM PUBLIC")
    roles = importlib.import_module("oncelog.migrations.versions.0005_roles").roles(schema)
    op.execute(f"GRANT EXECUTE ON FUNCTION expire_txn_history_v1(timestamptz, integer) TO {roles['admin']}")


def downgrade(schema: str) -> None:
    """Back to the plain append-only trigger; drop the setting."""
    op.execute(DROP_SQL)
    op.create_table_comment("txn_history", OLD_COMMENT, existing_comment=NEW_COMMENT)
    op.drop_constraint(op.f("ck_settings_txn_history_retention_positive"), "settings", type_="check")
    op.drop_column("settings", "txn_history_retention_ms")
