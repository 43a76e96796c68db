ALTER TABLE settings ADD COLUMN txn_history_retention_ms BIGINT DEFAULT 604800000 NOT NULL;

COMMENT ON COLUMN settings.txn_history_retention_ms IS 'txn_history rows older than this are pruned by maintenance, except each transactional id''s newest CompleteCommit (default 7 days).';

ALTER TABLE settings ADD CONSTRAINT ck_settings_txn_history_retention_positive CHECK (txn_history_retention_ms > 0);

CREATE FUNCTION txn_history_guard_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- A custom setting, local to the pruning transaction: only expire_txn_history_v1 sets it. The
    -- owner could drop this trigger anyway; the guard stops mistakes, not the owner.
    IF TG_OP = 'DELETE' AND current_setting('oncelog.pruning_txn_history', true) = 'on' THEN
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
    PERFORM set_config('oncelog.pruning_txn_history', 'on', true);
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
    PERFORM set_config('oncelog.pruning_txn_history', 'off', true);
    RETURN v_n;
END
$fn$;
COMMENT ON FUNCTION expire_txn_history_v1(timestamptz, integer) IS
  'Maintenance: deletes up to p_batch txn_history rows older than settings.txn_history_retention_ms, keeping the '
  'newest CompleteCommit row of every transactional id. Returns the number deleted (call again until 0).';

COMMENT ON TABLE txn_history IS 'Append-only history of every transaction state transition and epoch change (written by a trigger on transactions; updates are refused, deletes too except maintenance pruning past settings.txn_history_retention_ms).';

REVOKE ALL ON FUNCTION txn_history_guard_v1() FROM PUBLIC;

REVOKE ALL ON FUNCTION expire_txn_history_v1(timestamptz, integer) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION expire_txn_history_v1(timestamptz, integer) TO @schema@_admin;
