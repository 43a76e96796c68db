DROP FUNCTION IF EXISTS produce_end_txn_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[], text, bigint);
