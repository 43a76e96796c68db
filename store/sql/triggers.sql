-- Triggers guard what privileges cannot (docs/security.md), and the one row-level policy.
CREATE CONSTRAINT TRIGGER outbox_records_flush AFTER INSERT ON outbox_records DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox_flush_v1();
CREATE TRIGGER partitions_delete_records AFTER DELETE ON partitions REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION partitions_delete_records_v1();
CREATE TRIGGER records_insert_check AFTER INSERT ON records REFERENCING NEW TABLE AS new_records FOR EACH STATEMENT EXECUTE FUNCTION records_insert_check_v2();
CREATE TRIGGER transactions_transition BEFORE INSERT OR UPDATE OF state, producer_id, txn_number ON transactions FOR EACH ROW EXECUTE FUNCTION txn_transition_v1();
CREATE TRIGGER txn_history_append_only BEFORE DELETE OR UPDATE ON txn_history FOR EACH ROW EXECUTE FUNCTION txn_history_guard_v1();
ALTER TABLE txn_history ENABLE ROW LEVEL SECURITY;
CREATE POLICY txn_history_acl ON txn_history FOR SELECT
    USING ((SELECT NOT acl_settings.enforce FROM acl_settings)
           OR acl_allowed_v1('transactional_id', transactional_id, 'describe'));
COMMENT ON POLICY txn_history_acl ON txn_history IS
  'With ACL enforcement on, roles other than the owner see the history of the transactional ids they may describe.';
