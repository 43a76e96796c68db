DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '@schema@_reader') THEN CREATE ROLE @schema@_reader NOLOGIN; END IF; END $$;

DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '@schema@_client') THEN CREATE ROLE @schema@_client NOLOGIN; END IF; END $$;

DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '@schema@_admin') THEN CREATE ROLE @schema@_admin NOLOGIN; END IF; END $$;

REVOKE ALL ON SCHEMA @schema@ FROM PUBLIC;

GRANT USAGE ON SCHEMA @schema@ TO @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON committed_records, partition_offsets, transaction_status, group_status, group_offsets, pending_group_offsets TO @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON topics, partitions, settings, txn_history TO @schema@_client;

GRANT SELECT ON ALL TABLES IN SCHEMA @schema@ TO @schema@_admin;

GRANT EXECUTE ON FUNCTION init_producer_id_v1(bigint, smallint) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[], text, bigint) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION fetch_v1(text, integer, bigint, integer) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION fetch_v2(text[], integer[], bigint[], integer, boolean) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION list_offsets_v1(text) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION init_transactional_producer_id_v1(text, integer, bigint, smallint) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION add_partitions_to_txn_v1(text, bigint, smallint, bigint, text[], integer[]) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION end_txn_v1(text, bigint, smallint, bigint, boolean) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION expire_transactions_v1(timestamptz) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION join_group_v1(text, text, text, text, text[], integer, text) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION heartbeat_v1(text, text, text) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION leave_group_v1(text, text) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION offset_commit_v1(text, text, text, integer, text[], integer[], bigint[], text[]) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION offset_fetch_v1(text, text[], integer[], boolean) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION txn_offset_commit_v1(text, bigint, smallint, bigint, text, text, text, integer, text[], integer[], bigint[], text[]) TO @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION create_topic_v1(text, integer, jsonb) TO @schema@_admin;

GRANT EXECUTE ON FUNCTION delete_topic_v1(text) TO @schema@_admin;

GRANT EXECUTE ON FUNCTION create_partitions_v1(text, integer) TO @schema@_admin;

GRANT EXECUTE ON FUNCTION alter_topic_config_v1(text, jsonb) TO @schema@_admin;

GRANT EXECUTE ON FUNCTION topic_config_v1(jsonb) TO @schema@_admin;

GRANT EXECUTE ON FUNCTION abort_transaction_v1(text) TO @schema@_admin;

GRANT EXECUTE ON FUNCTION expire_producers_v1(timestamptz) TO @schema@_admin;

GRANT EXECUTE ON FUNCTION enforce_retention_v1(integer, timestamptz) TO @schema@_admin;

COMMENT ON ROLE @schema@_reader IS 'oncelog reader role of schema @schema@ (grant it to login roles)';

COMMENT ON ROLE @schema@_client IS 'oncelog client role of schema @schema@ (grant it to login roles)';

COMMENT ON ROLE @schema@_admin IS 'oncelog admin role of schema @schema@ (grant it to login roles)';
