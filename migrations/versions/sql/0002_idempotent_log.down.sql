DROP FUNCTION IF EXISTS init_producer_id_v1(bigint, smallint);

DROP FUNCTION IF EXISTS produce_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[]);

DROP FUNCTION IF EXISTS fetch_v1(text, integer, bigint, integer);

DROP FUNCTION IF EXISTS list_offsets_v1(text);

DROP FUNCTION IF EXISTS create_topic_v1(text, integer, jsonb);

DROP FUNCTION IF EXISTS delete_topic_v1(text);

DROP FUNCTION IF EXISTS create_partitions_v1(text, integer);

DROP FUNCTION IF EXISTS alter_topic_config_v1(text, jsonb);

DROP FUNCTION IF EXISTS topic_config_v1(jsonb);

DROP FUNCTION IF EXISTS expire_producers_v1(timestamptz);

DROP FUNCTION IF EXISTS enforce_retention_v1(integer, timestamptz);

ALTER TABLE partitions DROP CONSTRAINT ck_partitions_log_bytes_nonnegative;

ALTER TABLE partitions DROP COLUMN log_bytes;
