DROP TRIGGER outbox_records_flush ON outbox_records;

DROP FUNCTION capture_headers_v1(text, text);

DROP FUNCTION capture_list_v1();

DROP FUNCTION capture_row_v1();

DROP FUNCTION capture_table_v1(regclass, text);

DROP FUNCTION capture_trigger_name_v1();

DROP FUNCTION capture_truncate_v1();

DROP FUNCTION murmur2_v1(bytea);

DROP FUNCTION outbox_flush_v1();

DROP FUNCTION send(text, bytea, bytea, jsonb, integer);

DROP FUNCTION send_v1(text, bytea, bytea, jsonb, integer);

DROP FUNCTION uncapture_table_v1(regclass);

-- The table changes, written by hand (above: frozen from store/sql by scripts/freeze_revision.py).
DROP TABLE outbox_records;
