DROP FUNCTION IF EXISTS expire_txn_history_v1(timestamptz, integer);
DROP TRIGGER IF EXISTS txn_history_append_only ON txn_history;
CREATE TRIGGER txn_history_append_only
BEFORE UPDATE OR DELETE ON txn_history
FOR EACH ROW EXECUTE FUNCTION refuse_change_v1();
DROP FUNCTION IF EXISTS txn_history_guard_v1();

COMMENT ON TABLE txn_history IS 'Append-only history of every transaction state transition and epoch change (written by a trigger on transactions; updates and deletes are refused).';

ALTER TABLE settings DROP CONSTRAINT ck_settings_txn_history_retention_positive;

ALTER TABLE settings DROP COLUMN txn_history_retention_ms;
