DROP VIEW IF EXISTS pending_group_offsets;

DROP VIEW IF EXISTS group_offsets;

DROP VIEW IF EXISTS group_status;

DROP FUNCTION IF EXISTS txn_offset_commit_v1(text, bigint, smallint, bigint, text, text, text, integer, text[], integer[], bigint[], text[]);

DROP FUNCTION IF EXISTS offset_fetch_v1(text, text[], integer[], boolean);

DROP FUNCTION IF EXISTS offset_commit_v1(text, text, text, integer, text[], integer[], bigint[], text[]);

DROP FUNCTION IF EXISTS leave_group_v1(text, text);

DROP FUNCTION IF EXISTS heartbeat_v1(text, text, text);

DROP FUNCTION IF EXISTS join_group_v1(text, text, text, text, text[], integer, text);

DROP FUNCTION IF EXISTS group_owns_partitions_v1(text, text, integer, text[], integer[]);

DROP FUNCTION IF EXISTS offset_commit_args_v1(text[], integer[], bigint[], text[]);

DROP FUNCTION IF EXISTS group_member_check_v1(text, text, text, integer);

DROP FUNCTION IF EXISTS group_rebalance_v1(text);

DROP FUNCTION IF EXISTS group_expire_members_v1(text);

DROP FUNCTION IF EXISTS group_lock_v1(text, boolean);
