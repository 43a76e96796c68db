-- Records in the caller's own database transaction (the transactional outbox). send_v1 checks a
-- record at once and stages it in outbox_records; a deferred constraint trigger appends the
-- transaction's staged records at its commit, through produce_v2, partition by partition in
-- (topic_id, partition) order. So the partition's row lock is taken at commit, not at send: a
-- slow application transaction never holds a partition up, offsets follow commit order, and a
-- rolled-back transaction (or savepoint) leaves nothing, not even a used offset.

CREATE OR REPLACE FUNCTION murmur2_v1(p_data bytea)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE STRICT PARALLEL SAFE
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    -- Kafka's Utils.murmur2 (seed 0x9747b28c), in 32-bit unsigned arithmetic held in bigints:
    -- a product of two 32-bit values fits in a bigint, and each step masks back to 32 bits.
    c_m constant bigint := 1540483477;  -- 0x5bd1e995
    c_mask constant bigint := 4294967295;
    v_len integer := octet_length(p_data);
    v_h bigint := (2538058380 # v_len::bigint) & 4294967295;  -- seed ^ length
    v_k bigint;
    v_i integer;
    v_tail integer := v_len & ~3;
BEGIN
    FOR v_i IN 0 .. v_len / 4 - 1 LOOP
        v_k := get_byte(p_data, 4 * v_i)::bigint
             | (get_byte(p_data, 4 * v_i + 1)::bigint << 8)
             | (get_byte(p_data, 4 * v_i + 2)::bigint << 16)
             | (get_byte(p_data, 4 * v_i + 3)::bigint << 24);
        v_k := (v_k * c_m) & c_mask;
        v_k := v_k # (v_k >> 24);
        v_k := (v_k * c_m) & c_mask;
        v_h := (v_h * c_m) & c_mask;
        v_h := v_h # v_k;
    END LOOP;
    IF v_len % 4 = 3 THEN
        v_h := v_h # (get_byte(p_data, v_tail + 2)::bigint << 16);
    END IF;
    IF v_len % 4 >= 2 THEN
        v_h := v_h # (get_byte(p_data, v_tail + 1)::bigint << 8);
    END IF;
    IF v_len % 4 >= 1 THEN
        v_h := v_h # get_byte(p_data, v_tail)::bigint;
        v_h := (v_h * c_m) & c_mask;
    END IF;
    v_h := v_h # (v_h >> 13);
    v_h := (v_h * c_m) & c_mask;
    v_h := v_h # (v_h >> 15);
    -- Kafka's toPositive: the low 31 bits.
    RETURN (v_h & 2147483647)::integer;
END
$fn$;
COMMENT ON FUNCTION murmur2_v1(p_data bytea) IS
  'Internal: Kafka''s murmur2 of p_data, made positive (Utils.toPositive): a key''s partition is this modulo the partition count, as with Kafka''s Java client and the Producer.';

CREATE OR REPLACE FUNCTION send_v1(p_topic text, p_value bytea, p_key bytea DEFAULT NULL, p_headers jsonb DEFAULT NULL, p_partition integer DEFAULT NULL)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    t topics%ROWTYPE;
    v_partitions integer;
    v_partition integer;
    v_size bigint;
BEGIN
    -- Access control (revision 0009, docs/acl.md), before anything is staged. The append at
    -- commit (produce_v2) checks again, as the same principal.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', ARRAY[p_topic], 'write');
    END IF;
    SELECT * INTO t FROM topics x WHERE x.name = p_topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_topic);
    END IF;
    IF p_key IS NULL AND t.cleanup_policy <> 'delete' THEN
        -- Said at the send, rather than by the insert trigger at the application's commit
        -- (revision 0034).
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = format('topic %L is compacted (cleanup_policy %s): every record needs a key', p_topic,
                             t.cleanup_policy);
    END IF;
    SELECT count(*) INTO v_partitions FROM partitions pt WHERE pt.topic_id = t.topic_id;
    IF p_partition IS NOT NULL THEN
        IF p_partition < 0 OR p_partition >= v_partitions THEN
            RAISE EXCEPTION USING ERRCODE = 'OL101',
                MESSAGE = format('unknown partition %s of topic %L (it has %s)', p_partition, p_topic, v_partitions);
        END IF;
        v_partition := p_partition;
    ELSIF p_key IS NOT NULL THEN
        v_partition := murmur2_v1(p_key) % v_partitions;
    ELSE
        -- No key: one partition per topic and transaction, as Kafka's sticky partitioner keeps a
        -- batch together.
        v_partition := (hashtext(pg_current_xact_id()::text || ':' || t.topic_id) & 2147483647) % v_partitions;
    END IF;
    v_size := coalesce(octet_length(p_key), 0) + coalesce(octet_length(p_value), 0)
              + coalesce(octet_length(p_headers::text), 0);
    IF v_size > t.max_message_bytes THEN
        RAISE EXCEPTION USING ERRCODE = 'OL105',
            MESSAGE = format('a record of %s bytes exceeds max_message_bytes %s of topic %L', v_size, t.max_message_bytes,
                             p_topic);
    END IF;
    IF p_headers IS NOT NULL AND NOT headers_valid_v1(p_headers) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = 'headers must be a JSON array of {"key": text, "value": base64 text or null} objects';
    END IF;
    INSERT INTO outbox_records (topic_id, partition, key, value, headers)
    VALUES (t.topic_id, v_partition, p_key, p_value, p_headers);
    RETURN v_partition;
END
$fn$;
COMMENT ON FUNCTION send_v1(p_topic text, p_value bytea, p_key bytea, p_headers jsonb, p_partition integer) IS
  'A record in the caller''s own transaction (the transactional outbox): checked now (OL101 unknown topic or partition, OL105 too large, OL107 bad headers, ACL write on the topic), appended at the caller''s commit, and never if it rolls back. Partition: p_partition, else murmur2 of the key (as Kafka''s client), else one per topic and transaction. Returns the partition.';

CREATE OR REPLACE FUNCTION send(topic text, value bytea, key bytea DEFAULT NULL, headers jsonb DEFAULT NULL, "partition" integer DEFAULT NULL)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    RETURN send_v1(topic, value, key, headers, "partition");
END
$fn$;
COMMENT ON FUNCTION send(topic text, value bytea, key bytea, headers jsonb, "partition" integer) IS
  'send_v1 under a stable name, for psql, triggers and JDBC: SELECT oncelog.send(''orders'', ''{"id": 1}''::bytea, key => ''42''::bytea).';

CREATE OR REPLACE FUNCTION outbox_flush_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    b record;
    v_topics text[];
    v_partitions integer[];
    v_counts integer[];
    v_keys bytea[];
    v_values bytea[];
    v_headers jsonb[];
    v_whole boolean;
    v_appended integer := 0;
BEGIN
    -- Deferred to the commit, once per staged row: the first appends every record the
    -- transaction staged, the others find nothing left.
    IF NOT EXISTS (SELECT 1 FROM outbox_records o WHERE o.xact_id = NEW.xact_id) THEN
        RETURN NULL;
    END IF;
    -- Every partition the transaction sent to, locked in (topic_id, partition) order, the
    -- documented lock order, and held through the commit that follows. Only those of topics the
    -- caller may still write (as produce_batches_v1): an ACL revoked since the send is refused
    -- below by produce_v2, and the caller never held a partition it has no right to.
    PERFORM 1 FROM partitions pt JOIN topics t ON t.topic_id = pt.topic_id
    WHERE (pt.topic_id, pt.partition) IN (SELECT o.topic_id, o.partition FROM outbox_records o WHERE o.xact_id = NEW.xact_id)
      AND acl_allowed_v1('topic', t.name, 'write')
    ORDER BY pt.topic_id, pt.partition
    FOR NO KEY UPDATE OF pt;
    -- One batch per partition, records in the order they were sent, appended all at once
    -- (append_batches_v2, revision 0023) when the transaction sent to several partitions and none
    -- holds more than max_batch_records. A single batch goes to produce_v2, which costs less.
    SELECT array_agg(t.name ORDER BY c.topic_id, c.partition), array_agg(c.partition ORDER BY c.topic_id, c.partition),
           array_agg(c.n ORDER BY c.topic_id, c.partition), bool_and(c.n <= s.max_batch_records)
    INTO v_topics, v_partitions, v_counts, v_whole
    FROM (SELECT o.topic_id, o.partition, count(*)::integer AS n FROM outbox_records o WHERE o.xact_id = NEW.xact_id
          GROUP BY o.topic_id, o.partition) c
    JOIN topics t ON t.topic_id = c.topic_id
    CROSS JOIN settings s;
    IF v_whole AND cardinality(v_topics) > 1 THEN
        SELECT array_agg(o.key ORDER BY o.topic_id, o.partition, o.seq), array_agg(o.value ORDER BY o.topic_id, o.partition, o.seq),
               CASE WHEN bool_or(o.headers IS NOT NULL) THEN array_agg(o.headers ORDER BY o.topic_id, o.partition, o.seq) END
        INTO v_keys, v_values, v_headers
        FROM outbox_records o WHERE o.xact_id = NEW.xact_id;
        SELECT count(*) INTO v_appended
        FROM append_batches_v2(NULL, NULL, NULL, NULL, v_topics, v_partitions, NULL, v_counts, v_keys, v_values,
                               v_headers, NULL, false);
    END IF;
    IF v_appended = 0 THEN
        -- One batch, larger than a batch, or not the common case: produce_v2, which also raises
        -- what a record staged earlier may now break (a topic's limits changed since the send).
        FOR b IN
            SELECT t.name, c.partition, array_agg(c.key ORDER BY c.seq) AS keys, array_agg(c.value ORDER BY c.seq) AS vals,
                   CASE WHEN bool_or(c.headers IS NOT NULL) THEN array_agg(c.headers ORDER BY c.seq) END AS hdrs
            FROM (SELECT o.*, (row_number() OVER (PARTITION BY o.topic_id, o.partition ORDER BY o.seq) - 1)
                              / (SELECT s.max_batch_records FROM settings s) AS chunk
                  FROM outbox_records o WHERE o.xact_id = NEW.xact_id) c
            JOIN topics t ON t.topic_id = c.topic_id
            GROUP BY c.topic_id, t.name, c.partition, c.chunk
            ORDER BY c.topic_id, c.partition, c.chunk
        LOOP
            PERFORM produce_v2(b.name, b.partition, NULL, NULL, NULL, b.keys, b.vals, b.hdrs);
        END LOOP;
    END IF;
    DELETE FROM outbox_records o WHERE o.xact_id = NEW.xact_id;
    -- Readers waiting on these partitions (registered in fetch_waiters; one registering now waits
    -- for the partition locks held here, so it sees these records) are woken by a NOTIFY at the
    -- commit (wake_notify_v1: nothing on a server that allows PREPARE TRANSACTION, as this runs at
    -- a PREPARE too).
    PERFORM wake_notify_v1(ARRAY(SELECT fetch_waiting_v1(q.topic, q.partition, true, true)
                                 FROM unnest(v_topics, v_partitions) AS q(topic, partition)));
    RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION outbox_flush_v1() IS
  'Internal (deferred constraint trigger on outbox_records): at the commit, appends the records the transaction staged with send_v1, every partition locked first in lock order (one set-based append, or produce_v2 per batch when a partition holds more than a batch), removes them from the stage, and wakes the readers waiting on those partitions (a NOTIFY delivered at the commit; not on a server that allows PREPARE TRANSACTION, which refuses to prepare a transaction that has notified).';

-- Table capture: every row change of a captured table, as a record in the same transaction
-- (through send_v1, so appended at its commit and gone with its rollback).

CREATE OR REPLACE FUNCTION capture_row_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_topic text := TG_ARGV[0];
    v_table text := format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);
    v_pk text[];
    v_old_key jsonb;
    v_new_key jsonb;
BEGIN
    -- The primary key's columns, looked up at each change: a table whose key changed since the
    -- capture was added is captured by its new key; one that lost its key is refused.
    SELECT array_agg(a.attname::text ORDER BY k.n) INTO v_pk
    FROM pg_index i
    CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
    WHERE i.indrelid = TG_RELID AND i.indisprimary;
    IF v_pk IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('captured table %s has no primary key any more: add one, or remove its capture', v_table);
    END IF;
    IF TG_OP <> 'INSERT' THEN
        SELECT jsonb_object_agg(c, to_jsonb(OLD) -> c) INTO v_old_key FROM unnest(v_pk) c;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        SELECT jsonb_object_agg(c, to_jsonb(NEW) -> c) INTO v_new_key FROM unnest(v_pk) c;
    END IF;
    -- A deletion is a tombstone under the row's key; an update that changes the key is a
    -- deletion of the old key and an insertion of the new one (as Debezium does).
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND v_old_key <> v_new_key) THEN
        PERFORM send_v1(v_topic, NULL, convert_to(v_old_key::text, 'UTF8'), capture_headers_v1('delete', v_table));
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM send_v1(v_topic, convert_to(to_jsonb(NEW)::text, 'UTF8'), convert_to(v_new_key::text, 'UTF8'),
                        capture_headers_v1(CASE WHEN TG_OP = 'UPDATE' AND v_old_key = v_new_key THEN 'update'
                                                ELSE 'insert' END, v_table));
    END IF;
    RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION capture_row_v1() IS
  'Trigger of a captured table (capture_table_v1; TG_ARGV[0] the topic): each row change as a record in the same transaction, key the primary key as JSON, value the row after the change as JSON (a tombstone for a deletion), headers op (insert, update, delete) and table.';

CREATE OR REPLACE FUNCTION capture_headers_v1(p_op text, p_table text)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $fn$
    SELECT jsonb_build_array(
        jsonb_build_object('key', 'op', 'value', encode(convert_to(p_op, 'UTF8'), 'base64')),
        jsonb_build_object('key', 'table', 'value', encode(convert_to(p_table, 'UTF8'), 'base64')))
$fn$;
COMMENT ON FUNCTION capture_headers_v1(p_op text, p_table text) IS
  'Internal: the headers of a captured change (op, table), in produce_v2''s form.';

CREATE OR REPLACE FUNCTION capture_truncate_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'OL000',
        MESSAGE = format('table %I.%I is captured to topic %L: TRUNCATE would change it unseen; delete its rows, or remove its capture first',
                         TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]);
END
$fn$;
COMMENT ON FUNCTION capture_truncate_v1() IS
  'Trigger of a captured table: refuses TRUNCATE, which row triggers would not see.';

CREATE OR REPLACE FUNCTION capture_trigger_name_v1()
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
    -- Per oncelog schema, so two installations in one database can capture the same table.
    SELECT current_schema() || '_capture'
$fn$;
COMMENT ON FUNCTION capture_trigger_name_v1() IS
  'Internal: the name of the capture triggers this schema installs (<schema>_capture, <schema>_capture_truncate).';

CREATE OR REPLACE FUNCTION capture_table_v1(p_table regclass, p_topic text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_name text := capture_trigger_name_v1();
    v_topic text;
BEGIN
    -- Not SECURITY DEFINER: creating the triggers needs the caller's own TRIGGER privilege on
    -- the table (its owner has it).
    IF p_table IS NULL OR NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = p_table AND c.relkind IN ('r', 'p')) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = format('%s is not a table', p_table);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM topics t WHERE t.name = p_topic) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_topic);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = p_table AND i.indisprimary) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('table %s has no primary key: a captured row''s key is its primary key', p_table);
    END IF;
    SELECT c.topic INTO v_topic FROM capture_list_v1() c WHERE c.table_oid = p_table;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('table %s is captured to topic %L already: remove that capture first', p_table, v_topic);
    END IF;
    EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION %I.capture_row_v1(%L)',
                   v_name, p_table, current_schema(), p_topic);
    EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION %I.capture_truncate_v1(%L)',
                   v_name || '_truncate', p_table, current_schema(), p_topic);
END
$fn$;
COMMENT ON FUNCTION capture_table_v1(p_table regclass, p_topic text) IS
  'Capture a table: every INSERT, UPDATE and DELETE of its rows becomes a record of p_topic in the same transaction (capture_row_v1); TRUNCATE is refused. The caller needs the TRIGGER privilege on the table (its owner has it); the table needs a primary key (the records'' key).';

CREATE OR REPLACE FUNCTION uncapture_table_v1(p_table regclass)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_name text := capture_trigger_name_v1();
BEGIN
    IF NOT EXISTS (SELECT 1 FROM capture_list_v1() c WHERE c.table_oid = p_table) THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP TRIGGER %I ON %s', v_name, p_table);
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', v_name || '_truncate', p_table);
    RETURN true;
END
$fn$;
COMMENT ON FUNCTION uncapture_table_v1(p_table regclass) IS
  'Stop capturing a table (drops its capture triggers); false if it was not captured.';

CREATE OR REPLACE FUNCTION capture_list_v1()
 RETURNS TABLE(table_oid oid, table_name text, topic text)
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- The capture triggers themselves are the record of what is captured: nothing to keep in
    -- step when a table is renamed or dropped.
    RETURN QUERY
    SELECT tg.tgrelid, tg.tgrelid::regclass::text, split_part(encode(tg.tgargs, 'escape'), '\000', 1)
    FROM pg_trigger tg
    WHERE tg.tgname = capture_trigger_name_v1() AND tg.tgfoid = 'capture_row_v1'::regproc
    ORDER BY 2;
END
$fn$;
COMMENT ON FUNCTION capture_list_v1() IS
  'The captured tables of this schema and their topics.';
