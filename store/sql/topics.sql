-- Topics and partitions: CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs,
-- and the triggers' functions that keep records and partitions consistent.

CREATE OR REPLACE FUNCTION create_topic_v1(p_name text, p_partitions integer, p_config jsonb DEFAULT '{}'::jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
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
    INSERT INTO topics (name, max_message_bytes, retention_ms, retention_bytes, message_timestamp_after_max_ms,
                        cleanup_policy, min_compaction_lag_ms, max_compaction_lag_ms, delete_retention_ms,
                        min_cleanable_dirty_ratio)
    VALUES (p_name,
            coalesce((v_config ->> 'max_message_bytes')::integer, 1048588),
            (v_config ->> 'retention_ms')::bigint,  -- NULL: settings.log_retention_ms (revision 0025)
            nullif((v_config ->> 'retention_bytes')::bigint, -1),
            coalesce((v_config ->> 'message_timestamp_after_max_ms')::bigint, 3600000),
            -- Kafka's defaults for the compaction settings (revision 0033).
            coalesce(v_config ->> 'cleanup_policy', 'delete'),
            coalesce((v_config ->> 'min_compaction_lag_ms')::bigint, 0),
            (v_config ->> 'max_compaction_lag_ms')::bigint,  -- NULL: no limit
            coalesce((v_config ->> 'delete_retention_ms')::bigint, 86400000),
            coalesce((v_config ->> 'min_cleanable_dirty_ratio')::float8, 0.5))
    ON CONFLICT (name) DO NOTHING
    RETURNING topic_id INTO v_topic_id;
    IF v_topic_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL102', MESSAGE = format('topic %L already exists', p_name);
    END IF;
    INSERT INTO partitions (topic_id, partition)
    SELECT v_topic_id, p FROM generate_series(0, p_partitions - 1) AS p;
    RETURN v_topic_id;
END
$fn$;
COMMENT ON FUNCTION create_topic_v1(p_name text, p_partitions integer, p_config jsonb) IS
  'CreateTopics: a topic with p_partitions partitions and a config object; OL102 if it exists, OL103/OL104/OL001 on bad input.';

CREATE OR REPLACE FUNCTION delete_topic_v1(p_name text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- The cascade removes partitions, records, sequence state and offsets of the topic.
    DELETE FROM topics WHERE name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_name);
    END IF;
END
$fn$;
COMMENT ON FUNCTION delete_topic_v1(p_name text) IS
  'DeleteTopics: removes the topic with its partitions and records.';

CREATE OR REPLACE FUNCTION create_partitions_v1(p_name text, p_total integer)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_topic_id integer;
    v_count integer;
BEGIN
    -- The topic row is locked so two concurrent increases cannot both insert the same partitions.
    SELECT topic_id INTO v_topic_id FROM topics WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_name);
    END IF;
    SELECT count(*) INTO v_count FROM partitions WHERE topic_id = v_topic_id;
    IF p_total IS NULL OR p_total <= v_count OR p_total > 100000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL104',
            MESSAGE = format('topic %L has %s partitions; the new total must be larger (and at most 100000), not %s',
                             p_name, v_count, p_total);
    END IF;
    INSERT INTO partitions (topic_id, partition)
    SELECT v_topic_id, p FROM generate_series(v_count, p_total - 1) AS p;
END
$fn$;
COMMENT ON FUNCTION create_partitions_v1(p_name text, p_total integer) IS
  'CreatePartitions: raises the partition count of a topic to p_total (it can only grow).';

CREATE OR REPLACE FUNCTION alter_topic_config_v1(p_name text, p_config jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_config jsonb := topic_config_v1(p_config);
    v_topic_id integer;
    v_policy text;
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
                                              ELSE message_timestamp_after_max_ms END,
        cleanup_policy = CASE WHEN v_config ? 'cleanup_policy' THEN coalesce(v_config ->> 'cleanup_policy', 'delete')
                              ELSE cleanup_policy END,
        min_compaction_lag_ms = CASE WHEN v_config ? 'min_compaction_lag_ms'
                                     THEN coalesce((v_config ->> 'min_compaction_lag_ms')::bigint, 0)
                                     ELSE min_compaction_lag_ms END,
        max_compaction_lag_ms = CASE WHEN v_config ? 'max_compaction_lag_ms'
                                     THEN (v_config ->> 'max_compaction_lag_ms')::bigint
                                     ELSE max_compaction_lag_ms END,
        delete_retention_ms = CASE WHEN v_config ? 'delete_retention_ms'
                                   THEN coalesce((v_config ->> 'delete_retention_ms')::bigint, 86400000)
                                   ELSE delete_retention_ms END,
        min_cleanable_dirty_ratio = CASE WHEN v_config ? 'min_cleanable_dirty_ratio'
                                         THEN coalesce((v_config ->> 'min_cleanable_dirty_ratio')::float8, 0.5)
                                         ELSE min_cleanable_dirty_ratio END
    WHERE name = p_name
    RETURNING topic_id, cleanup_policy INTO v_topic_id, v_policy;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_name);
    END IF;
    IF v_policy <> 'delete' THEN
        -- The topic's partitions, in order, as appends lock them: this waits for the appends in
        -- flight, so that every record acknowledged after this call returns passed the insert
        -- trigger's check for keys, and every keyless one lies at an earlier offset (compaction
        -- removes those, as Kafka's cleaner does). Revision 0034: an append whose check ran
        -- before the change could commit after it.
        PERFORM 1 FROM partitions pt WHERE pt.topic_id = v_topic_id ORDER BY pt.partition FOR NO KEY UPDATE;
    END IF;
END
$fn$;
COMMENT ON FUNCTION alter_topic_config_v1(p_name text, p_config jsonb) IS
  'IncrementalAlterConfigs: sets the keys present in p_config (a JSON null resets a key to its default: retention_ms then follows settings.log_retention_ms; -1 is no limit for retention_ms and retention_bytes).';

CREATE OR REPLACE FUNCTION topic_config_v1(p_config jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    k text;
    v jsonb;
    v_out jsonb;
BEGIN
    IF p_config IS NULL THEN
        RETURN '{}'::jsonb;
    END IF;
    IF jsonb_typeof(p_config) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001', MESSAGE = 'topic config must be a JSON object';
    END IF;
    v_out := p_config;
    FOR k, v IN SELECT * FROM jsonb_each(p_config) LOOP
        IF k NOT IN ('max_message_bytes', 'retention_ms', 'retention_bytes', 'message_timestamp_after_max_ms',
                     'cleanup_policy', 'min_compaction_lag_ms', 'max_compaction_lag_ms', 'delete_retention_ms',
                     'min_cleanable_dirty_ratio') THEN
            RAISE EXCEPTION USING ERRCODE = 'OL001',
                MESSAGE = format('unknown topic config %L (known: max_message_bytes, retention_ms, retention_bytes, '
                                 'message_timestamp_after_max_ms, cleanup_policy, min_compaction_lag_ms, '
                                 'max_compaction_lag_ms, delete_retention_ms, min_cleanable_dirty_ratio)', k);
        END IF;
        IF jsonb_typeof(v) = 'null' OR (k IN ('retention_ms', 'retention_bytes') AND v::text = '-1') THEN
            CONTINUE;  -- the default; for retention, -1 is Kafka's "no limit" (revision 0025)
        END IF;
        IF k = 'cleanup_policy' THEN
            -- Kafka's list of policies, in either order, stored in one spelling (revision 0033).
            IF jsonb_typeof(v) <> 'string'
               OR replace(v #>> '{}', ' ', '') NOT IN ('delete', 'compact', 'compact,delete', 'delete,compact') THEN
                RAISE EXCEPTION USING ERRCODE = 'OL001',
                    MESSAGE = format('topic config cleanup_policy must be delete, compact or compact,delete, not %s', v);
            END IF;
            v_out := jsonb_set(v_out, '{cleanup_policy}',
                               to_jsonb(CASE replace(v #>> '{}', ' ', '') WHEN 'delete,compact' THEN 'compact,delete'
                                             ELSE replace(v #>> '{}', ' ', '') END));
        ELSIF k = 'min_cleanable_dirty_ratio' THEN
            -- (A number below 1e-300 other than 0 does not fit a double precision.)
            IF jsonb_typeof(v) <> 'number' OR v::numeric < 0 OR v::numeric > 1
               OR (v::numeric > 0 AND v::numeric < 1e-300) THEN
                RAISE EXCEPTION USING ERRCODE = 'OL001',
                    MESSAGE = format('topic config min_cleanable_dirty_ratio must be a number from 0 to 1, not %s', v);
            END IF;
        ELSIF jsonb_typeof(v) <> 'number' OR v::text !~ '^[0-9]+$'
              OR (v::numeric = 0 AND k NOT IN ('min_compaction_lag_ms', 'delete_retention_ms'))
              OR (k = 'max_message_bytes' AND v::numeric > 2147483647)
              OR v::numeric > 9223372036854775807 THEN
            RAISE EXCEPTION USING ERRCODE = 'OL001',
                MESSAGE = format('topic config %s must be a %s integer, not %s', k,
                                 CASE WHEN k IN ('min_compaction_lag_ms', 'delete_retention_ms') THEN 'non-negative'
                                      ELSE 'positive' END, v);
        END IF;
    END LOOP;
    RETURN v_out;
END
$fn$;
COMMENT ON FUNCTION topic_config_v1(p_config jsonb) IS
  'Validates a topic configuration object and returns it with cleanup_policy in its one spelling: max_message_bytes, retention_ms, retention_bytes, message_timestamp_after_max_ms and max_compaction_lag_ms positive integers (-1 too for the two retention keys); min_compaction_lag_ms and delete_retention_ms non-negative integers; cleanup_policy delete, compact or compact,delete; min_cleanable_dirty_ratio from 0 to 1; null is the default. Raises OL001.';

CREATE OR REPLACE FUNCTION records_insert_check_v2()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_missing text;
    v_topic text;
BEGIN
    SELECT format('(%s, %s)', n.topic_id, n.partition) INTO v_missing
    FROM (SELECT DISTINCT topic_id, partition FROM new_records) n
    WHERE NOT EXISTS (SELECT 1 FROM partitions p WHERE p.topic_id = n.topic_id AND p.partition = n.partition)
    LIMIT 1;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
            MESSAGE = format('records for partition %s, which does not exist', v_missing);
    END IF;
    -- A compacted topic keeps the latest record per key, so a record without one is refused, as
    -- Kafka's broker refuses it. Here, in the one place every write path's rows pass (produce,
    -- the outbox, appends of whole transactions), and only when some topic is compacted: the
    -- probe of the small topics table is all other writes pay.
    IF EXISTS (SELECT 1 FROM topics t WHERE t.cleanup_policy <> 'delete') THEN
        SELECT t.name INTO v_topic FROM topics t
        WHERE t.cleanup_policy <> 'delete'
          AND t.topic_id IN (SELECT n.topic_id FROM new_records n WHERE n.key IS NULL AND n.control_type IS NULL)
        LIMIT 1;
        IF v_topic IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'OL107',
                MESSAGE = format('topic %L is compacted (cleanup_policy %s): every record needs a key', v_topic,
                                 (SELECT t.cleanup_policy FROM topics t WHERE t.name = v_topic));
        END IF;
    END IF;
    RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION records_insert_check_v2() IS
  'Trigger (once per statement): every inserted record belongs to an existing partition, and a data record for a compacted topic has a key (OL107).';

CREATE OR REPLACE FUNCTION partitions_delete_records_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    DELETE FROM records r USING gone g WHERE r.topic_id = g.topic_id AND r.partition = g.partition;
    RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION partitions_delete_records_v1() IS
  'Trigger: deleting partitions deletes their records (once per statement).';

CREATE OR REPLACE FUNCTION delete_records_v1(p_topic text, p_partitions integer[], p_offsets bigint[])
 RETURNS TABLE(partition integer, low_watermark bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
#variable_conflict use_column
DECLARE
    v_topic_id integer;
    v_bad record;
BEGIN
    IF p_partitions IS NULL OR p_offsets IS NULL OR cardinality(p_partitions) = 0
       OR cardinality(p_partitions) <> cardinality(p_offsets) OR cardinality(p_partitions) > 100000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = 'partitions and offsets must be non-empty arrays of equal length (at most 100000)';
    END IF;
    SELECT r.p INTO v_bad FROM unnest(p_partitions) AS r(p) GROUP BY r.p HAVING count(*) > 1 OR r.p IS NULL
    ORDER BY r.p LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('partition %s is named twice, or is NULL', coalesce(v_bad.p::text, 'NULL'));
    END IF;
    SELECT t.topic_id INTO v_topic_id FROM topics t WHERE t.name = p_topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_topic);
    END IF;
    -- The partition rows, in key order (the lock order), FOR NO KEY UPDATE as appends take them:
    -- the high watermark checked below cannot move until this commits, and a reader that sees
    -- the new log start sees it for every partition of the call at once.
    PERFORM 1 FROM partitions pt
    WHERE pt.topic_id = v_topic_id AND pt.partition = ANY (p_partitions)
    ORDER BY pt.partition
    FOR NO KEY UPDATE;
    SELECT r.p INTO v_bad FROM unnest(p_partitions) AS r(p)
    WHERE NOT EXISTS (SELECT 1 FROM partitions pt WHERE pt.topic_id = v_topic_id AND pt.partition = r.p)
    ORDER BY r.p LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown partition %s of topic %L', v_bad.p, p_topic);
    END IF;
    -- Kafka's rule: an offset up to the high watermark, or -1 for the high watermark. One below
    -- the log start deletes nothing and answers the log start.
    SELECT r.p, r.o, pt.next_offset AS hi INTO v_bad
    FROM unnest(p_partitions, p_offsets) AS r(p, o)
    JOIN partitions pt ON pt.topic_id = v_topic_id AND pt.partition = r.p
    WHERE r.o IS NULL OR r.o < -1 OR r.o > pt.next_offset
    ORDER BY r.p LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL108',
            MESSAGE = format('offset %s is beyond %s-%s: records can be deleted up to the high watermark %s (or -1 for it)',
                             coalesce(v_bad.o::text, 'NULL'), p_topic, v_bad.p, v_bad.hi);
    END IF;
    -- The log start moves; the records below it leave the log at once (every reader starts at
    -- the log start) and are removed by maintenance (enforce_retention_v2), in batches.
    UPDATE partitions pt
    SET log_start_offset = m.target,
        log_bytes = greatest(pt.log_bytes - coalesce((
            SELECT sum(coalesce(octet_length(rec.key), 0) + coalesce(octet_length(rec.value), 0)
                       + coalesce(octet_length(rec.headers::text), 0))
            FROM records rec
            WHERE rec.topic_id = pt.topic_id AND rec.partition = pt.partition
              AND rec."offset" >= pt.log_start_offset AND rec."offset" < m.target), 0), 0)
    FROM (SELECT r.p, CASE WHEN r.o = -1 THEN x.next_offset ELSE r.o END AS target
          FROM unnest(p_partitions, p_offsets) AS r(p, o)
          JOIN partitions x ON x.topic_id = v_topic_id AND x.partition = r.p) m
    WHERE pt.topic_id = v_topic_id AND pt.partition = m.p AND m.target > pt.log_start_offset;
    RETURN QUERY
    SELECT pt.partition, pt.log_start_offset FROM partitions pt
    WHERE pt.topic_id = v_topic_id AND pt.partition = ANY (p_partitions)
    ORDER BY pt.partition;
END
$fn$;
COMMENT ON FUNCTION delete_records_v1(p_topic text, p_partitions integer[], p_offsets bigint[]) IS
  'DeleteRecords: moves each named partition''s log start up to its offset (-1: the high watermark; beyond it OL108, unknown partitions OL101); an offset below the log start changes nothing. Returns each partition''s log start (Kafka''s low watermark). Maintenance removes the records below it.';
