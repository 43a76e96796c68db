DROP TRIGGER outbox_records_flush ON outbox_records;

DROP FUNCTION murmur2_v1(bytea);

DROP FUNCTION outbox_flush_v1();

DROP FUNCTION send(text, bytea, bytea, jsonb, integer);

DROP FUNCTION send_v1(text, bytea, bytea, jsonb, integer);

-- The table changes, written by hand (above: frozen from store/sql by scripts/freeze_revision.py).
DROP TABLE outbox_records;
