DROP FUNCTION end_txn_v2(text, bigint, smallint, bigint, boolean);

DROP FUNCTION fetch_wait_v1(text[], integer[], boolean, integer);

DROP FUNCTION fetch_waiting_v1(text, integer, boolean, boolean);

DROP FUNCTION produce_batches_v1(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[]);

DROP FUNCTION produce_end_txn_v3(text, bigint, smallint, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], text, text, text, integer, text[], integer[], bigint[], text[]);

DROP FUNCTION txn_waiters_v1(bigint, bigint);

DROP FUNCTION wake_channel_v1();
DROP TABLE fetch_waiters;
