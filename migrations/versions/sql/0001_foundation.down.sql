DROP TRIGGER IF EXISTS txn_history_append_only ON txn_history;
DROP TRIGGER IF EXISTS transactions_transition ON transactions;
DROP FUNCTION IF EXISTS refuse_change_v1();
DROP FUNCTION IF EXISTS txn_transition_v1();
DROP SEQUENCE IF EXISTS offset_commit_seq;

DROP INDEX ix_txn_partitions_topic_id_partition;

DROP TABLE txn_partitions;

DROP TABLE records;

DROP TABLE producer_partition_state;

DROP INDEX ix_pending_offsets_transactional_id;

DROP TABLE pending_offsets;

DROP INDEX ix_member_assignments_group_id_member_id;

DROP TABLE member_assignments;

DROP TABLE committed_offsets;

DROP TABLE transactions;

DROP TABLE partitions;

DROP TABLE group_members;

DROP INDEX ix_txn_history_transactional_id_id;

DROP TABLE txn_history;

DROP TABLE topics;

DROP TABLE settings;

DROP TABLE producers;

DROP TABLE groups;
