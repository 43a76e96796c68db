DROP TRIGGER records_insert_check ON records;

CREATE OR REPLACE FUNCTION records_partition_check_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_missing text;
BEGIN
    SELECT format('(%s, %s)', n.topic_id, n.partition) INTO v_missing
    FROM (SELECT DISTINCT topic_id, partition FROM new_records) n
    WHERE NOT EXISTS (SELECT 1 FROM partitions p WHERE p.topic_id = n.topic_id AND p.partition = n.partition)
    LIMIT 1;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
            MESSAGE = format('records for partition %s, which does not exist', v_missing);
    END IF;
    RETURN NULL;
END
$function$;

COMMENT ON FUNCTION records_partition_check_v1() IS 'Trigger: every inserted record belongs to an existing partition (checked once per statement).';

REVOKE ALL ON FUNCTION records_partition_check_v1() FROM PUBLIC;

DROP FUNCTION cleanable_end_v1(integer, integer, bigint, bigint, bigint, timestamp with time zone);

DROP FUNCTION compact_v1(text, integer, boolean);

DROP FUNCTION compaction_status_v1(text);

DROP FUNCTION dirty_ratio_v1(bigint, bigint, bigint, bigint);

DROP FUNCTION ms_before_v1(timestamp with time zone, bigint);

DROP FUNCTION record_bytes_v1(bytea, bytea, jsonb);

DROP FUNCTION records_insert_check_v2();

CREATE OR REPLACE FUNCTION alter_topic_config_v1(p_name text, p_config jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_config jsonb := topic_config_v1(p_config);
BEGIN
    UPDATE topics SET
        max_message_bytes = CASE WHEN v_config ? 'max_message_bytes'
                                 THEN coalesce((v_config ->> 'max_message_bytes')::integer, 1048588)
                                 ELSE max_message_bytes END,
        retention_ms = CASE WHEN v_config ? 'retention_ms' THEN (v_config ->> 'retention_ms')::bigint
                            ELSE retention_ms END,
        retention_bytes = CASE WHEN v_config ? 'retention_bytes' THEN nullif((v_config ->> 'retention_bytes')::bigint, -1)
                               ELSE retention_bytes END,
        message_timestamp_after_max_ms = CASE WHEN v_config ? 'message_timestamp_after_max_ms'
                                              THEN coalesce((v_config ->> 'message_timestamp_after_max_ms')::bigint, 3600000)
                                              ELSE message_timestamp_after_max_ms END
    WHERE name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_name);
    END IF;
END
$function$;

COMMENT ON FUNCTION alter_topic_config_v1(text, jsonb) IS 'IncrementalAlterConfigs: sets the keys present in p_config (a JSON null resets a key to its default: retention_ms then follows settings.log_retention_ms; -1 is no limit for retention_ms and retention_bytes).';

REVOKE ALL ON FUNCTION alter_topic_config_v1(text, jsonb) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION alter_topic_config_v1(text, jsonb) TO @schema@_admin;

CREATE OR REPLACE FUNCTION create_topic_v1(p_name text, p_partitions integer, p_config jsonb DEFAULT '{}'::jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_config jsonb := topic_config_v1(p_config);
    v_topic_id integer;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9._-]{1,249}$' OR p_name IN ('.', '..') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL103',
            MESSAGE = format('invalid topic name %L: use letters, digits, ''.'', ''_'', ''-'' (1 to 249 characters)', p_name);
    END IF;
    IF p_partitions IS NULL OR p_partitions < 1 OR p_partitions > 100000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL104',
            MESSAGE = format('a topic needs 1 to 100000 partitions, not %s', p_partitions);
    END IF;
    INSERT INTO topics (name, max_message_bytes, retention_ms, retention_bytes, message_timestamp_after_max_ms)
    VALUES (p_name,
            coalesce((v_config ->> 'max_message_bytes')::integer, 1048588),
            (v_config ->> 'retention_ms')::bigint,  -- NULL: settings.log_retention_ms (revision 0025)
            nullif((v_config ->> 'retention_bytes')::bigint, -1),
            coalesce((v_config ->> 'message_timestamp_after_max_ms')::bigint, 3600000))
    ON CONFLICT (name) DO NOTHING
    RETURNING topic_id INTO v_topic_id;
    IF v_topic_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL102', MESSAGE = format('topic %L already exists', p_name);
    END IF;
    INSERT INTO partitions (topic_id, partition)
    SELECT v_topic_id, p FROM generate_series(0, p_partitions - 1) AS p;
    RETURN v_topic_id;
END
$function$;

COMMENT ON FUNCTION create_topic_v1(text, integer, jsonb) IS 'CreateTopics: a topic with p_partitions partitions and a config object; OL102 if it exists, OL103/OL104/OL001 on bad input.';

REVOKE ALL ON FUNCTION create_topic_v1(text, integer, jsonb) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION create_topic_v1(text, integer, jsonb) TO @schema@_admin;

CREATE OR REPLACE FUNCTION enforce_retention_v2(p_batch integer DEFAULT 10000)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    -- The time is the server's (revision 0017): v1 took it from its caller, so any client could
    -- pass 'infinity' and abort every open transaction.
    v_now timestamptz := server_now_v1();
    pt record;
    v_start bigint;
    v_upto bigint;
    v_first bigint;
    v_deleted bigint := 0;
    v_n bigint;
    v_now_ms numeric := extract(epoch FROM v_now) * 1000;
BEGIN
    IF p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'batch must be at least 1';
    END IF;
    -- Every partition: one with no retention may still hold rows below its log start (left by
    -- an earlier pass before retention was turned off); the min() probe is one index lookup. A
    -- topic without a retention of its own follows settings.log_retention_ms; -1 keeps its
    -- records for ever (revision 0025, Kafka's log.retention.ms and its -1).
    FOR pt IN
        SELECT p.topic_id, p.partition, p.log_start_offset, p.next_offset, p.log_bytes,
               CASE WHEN t.retention_ms = -1 THEN NULL ELSE coalesce(t.retention_ms, s.log_retention_ms) END AS retention_ms,
               t.retention_bytes
        FROM partitions p JOIN topics t USING (topic_id) CROSS JOIN settings s
        ORDER BY p.topic_id, p.partition
    LOOP
        v_start := pt.log_start_offset;
        -- A retention longer than the time since 1970 cannot apply (and would overflow).
        IF pt.retention_ms IS NOT NULL AND pt.retention_ms < v_now_ms THEN
            -- The log start moves past the oldest records, up to the first one still young enough.
            SELECT coalesce(min(r."offset"), pt.next_offset) INTO v_upto FROM (
                SELECT r."offset" FROM records r
                WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition AND r."offset" >= v_start
                  AND r."timestamp" >= v_now - make_interval(secs => pt.retention_ms / 1000.0)
                ORDER BY r."offset" LIMIT 1) r;
            v_start := greatest(v_start, v_upto);
        END IF;
        IF pt.retention_bytes IS NOT NULL AND pt.log_bytes > pt.retention_bytes THEN
            -- log_bytes counts the live log (from the log start), so drop the shortest prefix
            -- that brings it within the limit.
            SELECT coalesce(min(c."offset") + 1, v_start) INTO v_upto FROM (
                SELECT r."offset", sum(coalesce(octet_length(r.key), 0) + coalesce(octet_length(r.value), 0)
                                       + coalesce(octet_length(r.headers::text), 0)) OVER (ORDER BY r."offset") AS cum
                FROM records r
                WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition AND r."offset" >= pt.log_start_offset
            ) c WHERE c.cum >= pt.log_bytes - pt.retention_bytes;
            v_start := greatest(v_start, v_upto);
        END IF;
        v_start := least(v_start, pt.next_offset);
        IF v_start > pt.log_start_offset THEN
            -- A short update of the partition row: readers stop returning what is below it at
            -- once, and the live byte count drops by what left the log.
            UPDATE partitions p
            SET log_start_offset = v_start,
                log_bytes = greatest(p.log_bytes - coalesce((
                    SELECT sum(coalesce(octet_length(r.key), 0) + coalesce(octet_length(r.value), 0)
                               + coalesce(octet_length(r.headers::text), 0))
                    FROM records r
                    WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition
                      AND r."offset" >= pt.log_start_offset AND r."offset" < v_start), 0), 0)
            WHERE p.topic_id = pt.topic_id AND p.partition = pt.partition;
        END IF;
        -- Delete at most p_batch records below the log start, oldest first; the caller repeats
        -- in new transactions until nothing is left, so appends never wait for a long delete.
        SELECT min(r."offset") INTO v_first FROM records r
        WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition;
        IF v_first IS NOT NULL AND v_first < v_start THEN
            DELETE FROM records r
            WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition
              AND r."offset" >= v_first AND r."offset" < least(v_start, v_first + p_batch);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_deleted := v_deleted + v_n;
        END IF;
        -- A committed transaction's span that ends below the log start can no longer be read
        -- in part (revision 0014).
        DELETE FROM txn_spans s
        WHERE s.topic_id = pt.topic_id AND s.partition = pt.partition AND s.last_offset < v_start;
    END LOOP;
    RETURN v_deleted;
END
$function$;

COMMENT ON FUNCTION enforce_retention_v2(integer) IS 'Maintenance, at the server''s time (server_now_v1): advances each partition''s log start by its topic''s retention (time: its retention_ms, else settings.log_retention_ms, none for -1; size: retention_bytes) and deletes at most p_batch records per partition below it; returns the number deleted (call again until 0).';

REVOKE ALL ON FUNCTION enforce_retention_v2(integer) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION enforce_retention_v2(integer) TO @schema@_admin;

CREATE OR REPLACE FUNCTION topic_config_v1(p_config jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $function$
DECLARE
    k text;
    v jsonb;
BEGIN
    IF p_config IS NULL THEN
        RETURN '{}'::jsonb;
    END IF;
    IF jsonb_typeof(p_config) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001', MESSAGE = 'topic config must be a JSON object';
    END IF;
    FOR k, v IN SELECT * FROM jsonb_each(p_config) LOOP
        IF k NOT IN ('max_message_bytes', 'retention_ms', 'retention_bytes', 'message_timestamp_after_max_ms') THEN
            RAISE EXCEPTION USING ERRCODE = 'OL001',
                MESSAGE = format('unknown topic config %L (known: max_message_bytes, retention_ms, retention_bytes, '
                                 'message_timestamp_after_max_ms)', k);
        END IF;
        IF jsonb_typeof(v) = 'null' OR (k IN ('retention_ms', 'retention_bytes') AND v::text = '-1') THEN
            CONTINUE;  -- the default; for retention, -1 is Kafka's "no limit" (revision 0025)
        END IF;
        IF jsonb_typeof(v) <> 'number' OR v::text !~ '^[0-9]+$' OR v::numeric <= 0
           OR (k = 'max_message_bytes' AND v::numeric > 2147483647)
           OR v::numeric > 9223372036854775807 THEN
            RAISE EXCEPTION USING ERRCODE = 'OL001',
                MESSAGE = format('topic config %s must be a positive integer, not %s', k, v);
        END IF;
    END LOOP;
    RETURN p_config;
END
$function$;

COMMENT ON FUNCTION topic_config_v1(jsonb) IS 'Validates a topic configuration object (max_message_bytes, retention_ms, retention_bytes, message_timestamp_after_max_ms: positive integers or null; -1 too for the two retention keys); raises OL001.';

REVOKE ALL ON FUNCTION topic_config_v1(jsonb) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION topic_config_v1(jsonb) TO @schema@_admin;

CREATE TRIGGER records_partition_check AFTER INSERT ON records REFERENCING NEW TABLE AS new_records FOR EACH STATEMENT EXECUTE FUNCTION records_partition_check_v1();

COMMENT ON TRIGGER records_partition_check ON records IS NULL;

-- Tables (by hand), after the functions that use them are restored.
DROP TABLE cleaner_state;

ALTER TABLE topics DROP CONSTRAINT ck_topics_compaction_settings_valid;

ALTER TABLE topics DROP CONSTRAINT ck_topics_cleanup_policy_valid;

ALTER TABLE topics DROP COLUMN min_cleanable_dirty_ratio;

ALTER TABLE topics DROP COLUMN delete_retention_ms;

ALTER TABLE topics DROP COLUMN max_compaction_lag_ms;

ALTER TABLE topics DROP COLUMN min_compaction_lag_ms;

ALTER TABLE topics DROP COLUMN cleanup_policy;
