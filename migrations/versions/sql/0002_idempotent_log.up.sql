ALTER TABLE partitions ADD COLUMN log_bytes BIGINT DEFAULT 0 NOT NULL;

COMMENT ON COLUMN partitions.log_bytes IS 'Bytes of keys, values and headers from the log start to the log end; drives size retention.';

ALTER TABLE partitions ADD CONSTRAINT ck_partitions_log_bytes_nonnegative CHECK (log_bytes >= 0);

-- Validates a topic configuration given as JSON; returns it with the keys normalised.
-- A JSON null means "no limit" for retention and "the default" for max_message_bytes.
CREATE FUNCTION topic_config_v1(p_config jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $fn$
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
        IF k NOT IN ('max_message_bytes', 'retention_ms', 'retention_bytes') THEN
            RAISE EXCEPTION USING ERRCODE = 'OL001',
                MESSAGE = format('unknown topic config %L (known: max_message_bytes, retention_ms, retention_bytes)', k);
        END IF;
        IF jsonb_typeof(v) = 'null' THEN
            CONTINUE;
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
$fn$;
COMMENT ON FUNCTION topic_config_v1(jsonb) IS
  'Validates a topic configuration object (max_message_bytes, retention_ms, retention_bytes); raises OL001.';

CREATE FUNCTION create_topic_v1(p_name text, p_partitions integer, p_config jsonb DEFAULT '{}')
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
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
    INSERT INTO topics (name, max_message_bytes, retention_ms, retention_bytes)
    VALUES (p_name,
            coalesce((v_config ->> 'max_message_bytes')::integer, 1048588),
            (v_config ->> 'retention_ms')::bigint,
            (v_config ->> 'retention_bytes')::bigint)
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
COMMENT ON FUNCTION create_topic_v1(text, integer, jsonb) IS
  'CreateTopics: a topic with p_partitions partitions and a config object; OL102 if it exists, OL103/OL104/OL001 on bad input.';

CREATE FUNCTION delete_topic_v1(p_name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
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
COMMENT ON FUNCTION delete_topic_v1(text) IS 'DeleteTopics: removes the topic with its partitions and records.';

CREATE FUNCTION create_partitions_v1(p_name text, p_total integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
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
COMMENT ON FUNCTION create_partitions_v1(text, integer) IS
  'CreatePartitions: raises the partition count of a topic to p_total (it can only grow).';

CREATE FUNCTION alter_topic_config_v1(p_name text, p_config jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_config jsonb := topic_config_v1(p_config);
BEGIN
    UPDATE topics SET
        max_message_bytes = CASE WHEN v_config ? 'max_message_bytes'
                                 THEN coalesce((v_config ->> 'max_message_bytes')::integer, 1048588)
                                 ELSE max_message_bytes END,
        retention_ms = CASE WHEN v_config ? 'retention_ms' THEN (v_config ->> 'retention_ms')::bigint
                            ELSE retention_ms END,
        retention_bytes = CASE WHEN v_config ? 'retention_bytes' THEN (v_config ->> 'retention_bytes')::bigint
                               ELSE retention_bytes END
    WHERE name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_name);
    END IF;
END
$fn$;
COMMENT ON FUNCTION alter_topic_config_v1(text, jsonb) IS
  'IncrementalAlterConfigs: sets the keys present in p_config (a JSON null resets to default / no limit).';

CREATE FUNCTION init_producer_id_v1(p_producer_id bigint DEFAULT NULL, p_epoch smallint DEFAULT NULL)
RETURNS TABLE (producer_id bigint, producer_epoch smallint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v producers%ROWTYPE;
BEGIN
    IF (p_producer_id IS NULL) <> (p_epoch IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'give both the producer id and its epoch, or neither';
    END IF;
    IF p_producer_id IS NOT NULL THEN
        -- KIP-360 for an idempotent producer: bump the epoch of the id it holds. FOR UPDATE waits
        -- for appends in flight (they hold the row FOR SHARE) and fences later ones.
        SELECT * INTO v FROM producers p WHERE p.producer_id = p_producer_id FOR UPDATE;
        IF FOUND THEN
            IF v.transactional_id IS NOT NULL THEN
                RAISE EXCEPTION USING ERRCODE = 'OL302',
                    MESSAGE = format('producer id %s belongs to a transactional id', p_producer_id);
            END IF;
            IF p_epoch = v.epoch THEN
                IF v.epoch < 32766 THEN
                    UPDATE producers p SET epoch = v.epoch + 1, last_epoch = v.epoch, last_used_at = now()
                    WHERE p.producer_id = p_producer_id;
                    RETURN QUERY SELECT p_producer_id, (v.epoch + 1)::smallint;
                    RETURN;
                END IF;
                -- Epoch exhausted: a new producer id at epoch 0 (below).
            ELSIF p_epoch = v.last_epoch THEN
                -- A retry of a bump that already happened: the same answer again.
                RETURN QUERY SELECT v.producer_id, v.epoch;
                RETURN;
            ELSE
                RAISE EXCEPTION USING ERRCODE = 'OL202',
                    MESSAGE = format('producer id %s is at epoch %s, not %s', p_producer_id, v.epoch, p_epoch);
            END IF;
        END IF;
        -- Unknown (expired) or exhausted: fall through to a fresh producer id.
    END IF;
    INSERT INTO producers AS p DEFAULT VALUES RETURNING p.producer_id, p.epoch INTO v.producer_id, v.epoch;
    RETURN QUERY SELECT v.producer_id, v.epoch;
END
$fn$;
COMMENT ON FUNCTION init_producer_id_v1(bigint, smallint) IS
  'InitProducerId without a transactional id: a new producer id at epoch 0, or (KIP-360) given the current '
  'id and epoch, the next epoch (a retried bump gets the same answer; an exhausted epoch a new id).';


CREATE FUNCTION produce_v1(
    p_topic text,
    p_partition integer,
    p_producer_id bigint,
    p_producer_epoch smallint,
    p_base_sequence integer,
    p_keys bytea[],
    p_values bytea[],
    p_headers jsonb[] DEFAULT NULL,
    p_timestamps timestamptz[] DEFAULT NULL
)
RETURNS TABLE (base_offset bigint, last_offset bigint, log_append_time timestamptz, duplicate boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_n integer := cardinality(p_values);
    v_topic_id integer;
    v_max_bytes integer;
    v_epoch smallint;
    v_next bigint;
    v_last_seq integer;
    v_expected integer;
    v_bytes bigint;
    v_now timestamptz := now();
    s producer_partition_state%ROWTYPE;
    i integer;
BEGIN
    -- Validation that needs no lock comes first, so a bad request never holds the append lock.
    IF v_n IS NULL OR v_n = 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107', MESSAGE = 'a batch must hold at least one record';
    END IF;
    IF cardinality(p_keys) IS DISTINCT FROM v_n
       OR (p_headers IS NOT NULL AND cardinality(p_headers) <> v_n)
       OR (p_timestamps IS NOT NULL AND cardinality(p_timestamps) <> v_n) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107', MESSAGE = 'keys, values, headers and timestamps differ in length';
    END IF;
    IF v_n > (SELECT max_batch_records FROM settings) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL106',
            MESSAGE = format('a batch may hold at most %s records, not %s', (SELECT max_batch_records FROM settings), v_n);
    END IF;
    IF p_producer_id IS NULL THEN
        IF p_producer_epoch IS NOT NULL OR p_base_sequence IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'OL107', MESSAGE = 'an epoch or sequence needs a producer id';
        END IF;
    ELSIF p_producer_epoch IS NULL OR p_base_sequence IS NULL OR p_base_sequence < 0 OR p_producer_epoch < 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = format('an idempotent batch needs an epoch and a base sequence >= 0 (got epoch %s, sequence %s)',
                             p_producer_epoch, p_base_sequence);
    END IF;
    SELECT t.topic_id, t.max_message_bytes INTO v_topic_id, v_max_bytes FROM topics t WHERE t.name = p_topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_topic);
    END IF;
    SELECT max(sz), sum(sz) INTO i, v_bytes FROM (
        SELECT coalesce(octet_length(k), 0) + coalesce(octet_length(v), 0) + coalesce(octet_length(h::text), 0) AS sz
        FROM unnest(p_keys, p_values, coalesce(p_headers, array_fill(NULL::jsonb, ARRAY[v_n]))) AS r(k, v, h)
    ) sizes;
    IF i > v_max_bytes THEN
        RAISE EXCEPTION USING ERRCODE = 'OL105',
            MESSAGE = format('a record of %s bytes exceeds max_message_bytes %s of topic %L', i, v_max_bytes, p_topic);
    END IF;
    IF p_headers IS NOT NULL AND EXISTS (
        SELECT 1 FROM unnest(p_headers) h WHERE h IS NOT NULL AND jsonb_typeof(h) <> 'array') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107', MESSAGE = 'headers must be JSON arrays';
    END IF;

    IF p_producer_id IS NOT NULL THEN
        -- Lock 1: the producer row, shared. An epoch bump takes it FOR UPDATE, so it waits for this
        -- append to commit, and this append cannot land after a bump has committed.
        SELECT p.epoch INTO v_epoch FROM producers p WHERE p.producer_id = p_producer_id FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'OL203',
                MESSAGE = format('unknown producer id %s (never issued, or expired): call InitProducerId', p_producer_id);
        END IF;
        IF p_producer_epoch < v_epoch THEN
            RAISE EXCEPTION USING ERRCODE = 'OL202',
                MESSAGE = format('producer %s: epoch %s is older than the current epoch %s', p_producer_id, p_producer_epoch, v_epoch);
        ELSIF p_producer_epoch > v_epoch THEN
            RAISE EXCEPTION USING ERRCODE = 'OL202',
                MESSAGE = format('producer %s: epoch %s was never issued (current %s)', p_producer_id, p_producer_epoch, v_epoch);
        END IF;
    END IF;

    -- Lock 2: the partition row, held to commit. Offsets are dense and taken under this lock, so
    -- commit order equals offset order: a reader never sees offset N+1 before offset N.
    SELECT pt.next_offset INTO v_next FROM partitions pt
    WHERE pt.topic_id = v_topic_id AND pt.partition = p_partition
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101',
            MESSAGE = format('unknown partition %s of topic %L', p_partition, p_topic);
    END IF;

    IF p_producer_id IS NOT NULL THEN
        -- Kafka's lastSeq: sequences are 31-bit and wrap from 2147483647 to 0.
        v_last_seq := ((p_base_sequence::bigint + v_n - 1) % 2147483648)::integer;
        -- Lock 3: this producer's sequence state in this partition (expiry deletes it FOR UPDATE).
        SELECT * INTO s FROM producer_partition_state ps
        WHERE ps.producer_id = p_producer_id AND ps.topic_id = v_topic_id AND ps.partition = p_partition
        FOR UPDATE;
        IF FOUND AND s.epoch = p_producer_epoch THEN
            -- Rule 1: a batch equal to one of the last five is a retry: nothing is appended.
            FOR i IN 1 .. cardinality(s.first_sequences) LOOP
                IF s.first_sequences[i] = p_base_sequence AND s.last_sequences[i] = v_last_seq THEN
                    RETURN QUERY SELECT s.first_offsets[i], s.last_offsets[i], s.timestamps[i], true;
                    RETURN;
                END IF;
            END LOOP;
            -- Rule 3: otherwise it must follow the last batch.
            v_expected := CASE WHEN s.last_sequences[cardinality(s.last_sequences)] = 2147483647 THEN 0
                               ELSE s.last_sequences[cardinality(s.last_sequences)] + 1 END;
            IF p_base_sequence <> v_expected THEN
                RAISE EXCEPTION USING ERRCODE = 'OL201',
                    MESSAGE = format('producer %s epoch %s partition %s-%s: expected sequence %s, got %s',
                                     p_producer_id, p_producer_epoch, p_topic, p_partition, v_expected, p_base_sequence);
            END IF;
        ELSIF p_base_sequence <> 0 THEN
            -- Rules 4 and 5: a new epoch, or a producer with no state here, starts at 0.
            RAISE EXCEPTION USING ERRCODE = 'OL201',
                MESSAGE = format('producer %s epoch %s partition %s-%s: a new producer or epoch starts at sequence 0, not %s',
                                 p_producer_id, p_producer_epoch, p_topic, p_partition, p_base_sequence);
        END IF;
    END IF;

    INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, sequence, key, value, headers, "timestamp")
    SELECT v_topic_id, p_partition, v_next + r.o - 1, p_producer_id, p_producer_epoch,
           CASE WHEN p_producer_id IS NOT NULL
                THEN ((p_base_sequence::bigint + r.o - 1) % 2147483648)::integer END,
           r.k, r.v, r.h, coalesce(r.ts, v_now)
    FROM unnest(p_keys, p_values,
                coalesce(p_headers, array_fill(NULL::jsonb, ARRAY[v_n])),
                coalesce(p_timestamps, array_fill(NULL::timestamptz, ARRAY[v_n])))
         WITH ORDINALITY AS r(k, v, h, ts, o);
    UPDATE partitions pt SET next_offset = v_next + v_n, log_bytes = pt.log_bytes + v_bytes
    WHERE pt.topic_id = v_topic_id AND pt.partition = p_partition;

    IF p_producer_id IS NOT NULL THEN
        -- Keep the last five batches of this epoch; a new epoch starts a new window.
        INSERT INTO producer_partition_state AS ps
            (producer_id, topic_id, partition, epoch, first_sequences, last_sequences,
             first_offsets, last_offsets, timestamps, updated_at)
        VALUES (p_producer_id, v_topic_id, p_partition, p_producer_epoch, ARRAY[p_base_sequence], ARRAY[v_last_seq],
                ARRAY[v_next], ARRAY[v_next + v_n - 1], ARRAY[v_now], v_now)
        ON CONFLICT ON CONSTRAINT pk_producer_partition_state DO UPDATE SET
            epoch = EXCLUDED.epoch,
            first_sequences = CASE WHEN ps.epoch = EXCLUDED.epoch THEN ps.first_sequences[greatest(1, cardinality(ps.first_sequences) - 3):] ELSE '{}' END || EXCLUDED.first_sequences,
            last_sequences = CASE WHEN ps.epoch = EXCLUDED.epoch THEN ps.last_sequences[greatest(1, cardinality(ps.last_sequences) - 3):] ELSE '{}' END || EXCLUDED.last_sequences,
            first_offsets = CASE WHEN ps.epoch = EXCLUDED.epoch THEN ps.first_offsets[greatest(1, cardinality(ps.first_offsets) - 3):] ELSE '{}' END || EXCLUDED.first_offsets,
            last_offsets = CASE WHEN ps.epoch = EXCLUDED.epoch THEN ps.last_offsets[greatest(1, cardinality(ps.last_offsets) - 3):] ELSE '{}' END || EXCLUDED.last_offsets,
            timestamps = CASE WHEN ps.epoch = EXCLUDED.epoch THEN ps.timestamps[greatest(1, cardinality(ps.timestamps) - 3):] ELSE '{}' END || EXCLUDED.timestamps,
            updated_at = EXCLUDED.updated_at;
    END IF;
    RETURN QUERY SELECT v_next, v_next + v_n - 1, v_now, false;
END
$fn$;
COMMENT ON FUNCTION produce_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[]) IS
  'Produce one batch to one partition: validates, detects a retried batch (returns its original offsets, '
  'duplicate = true), enforces epoch and sequence order, and appends under the partition lock. '
  'Producer id NULL writes without idempotence.';


CREATE FUNCTION fetch_v1(p_topic text, p_partition integer, p_offset bigint, p_max_records integer DEFAULT 500)
RETURNS TABLE (
    "offset" bigint, key bytea, value bytea, headers jsonb, "timestamp" timestamptz,
    producer_id bigint, producer_epoch smallint, sequence integer, high_watermark bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_topic_id integer;
    v_start bigint;
    v_end bigint;
BEGIN
    SELECT pt.topic_id, pt.log_start_offset, pt.next_offset INTO v_topic_id, v_start, v_end
    FROM partitions pt JOIN topics t USING (topic_id)
    WHERE t.name = p_topic AND pt.partition = p_partition;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101',
            MESSAGE = format('unknown partition %s of topic %L', p_partition, p_topic);
    END IF;
    IF p_offset IS NULL OR p_offset < v_start OR p_offset > v_end THEN
        RAISE EXCEPTION USING ERRCODE = 'OL108',
            MESSAGE = format('offset %s is outside %s-%s: the log holds [%s, %s)', p_offset, p_topic, p_partition, v_start, v_end);
    END IF;
    IF p_max_records IS NULL OR p_max_records < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'max records must be at least 1';
    END IF;
    -- Control records are never returned; offsets skip them, as in Kafka.
    RETURN QUERY
    SELECT r."offset", r.key, r.value, r.headers, r."timestamp", r.producer_id, r.producer_epoch, r.sequence, v_end
    FROM records r
    WHERE r.topic_id = v_topic_id AND r.partition = p_partition
      AND r."offset" >= p_offset AND r."offset" < v_end AND r.control_type IS NULL
    ORDER BY r."offset"
    LIMIT p_max_records;
END
$fn$;
COMMENT ON FUNCTION fetch_v1(text, integer, bigint, integer) IS
  'Fetch (read_uncommitted): up to p_max_records data records from p_offset below the high watermark; '
  'OL108 if the offset is outside the log. Each row repeats the high watermark.';

CREATE FUNCTION list_offsets_v1(p_topic text)
RETURNS TABLE (partition integer, log_start_offset bigint, high_watermark bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
BEGIN
    RETURN QUERY
    SELECT pt.partition, pt.log_start_offset, pt.next_offset
    FROM partitions pt JOIN topics t USING (topic_id)
    WHERE t.name = p_topic
    ORDER BY pt.partition;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_topic);
    END IF;
END
$fn$;
COMMENT ON FUNCTION list_offsets_v1(text) IS 'ListOffsets: log start offset and high watermark of each partition of a topic.';

CREATE FUNCTION expire_producers_v1(p_now timestamptz DEFAULT now()) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_cutoff timestamptz := p_now - make_interval(secs => (SELECT producer_id_expiration_ms FROM settings) / 1000.0);
    v_states integer;
BEGIN
    -- Sequence state idle past the expiration goes (SKIP LOCKED: never wait behind an append).
    WITH gone AS (
        DELETE FROM producer_partition_state ps
        WHERE (ps.producer_id, ps.topic_id, ps.partition) IN (
            SELECT x.producer_id, x.topic_id, x.partition FROM producer_partition_state x
            WHERE x.updated_at < v_cutoff FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*) INTO v_states FROM gone;
    -- Idempotent producer ids idle past it, with no state left anywhere, are forgotten.
    DELETE FROM producers p
    WHERE p.transactional_id IS NULL AND p.last_used_at < v_cutoff
      AND NOT EXISTS (SELECT 1 FROM producer_partition_state x WHERE x.producer_id = p.producer_id)
      AND NOT EXISTS (SELECT 1 FROM transactions t WHERE t.producer_id = p.producer_id)
      AND p.producer_id IN (SELECT y.producer_id FROM producers y WHERE y.last_used_at < v_cutoff FOR UPDATE SKIP LOCKED);
    RETURN v_states;
END
$fn$;
COMMENT ON FUNCTION expire_producers_v1(timestamptz) IS
  'Maintenance: removes producer sequence state idle longer than settings.producer_id_expiration_ms, then '
  'idempotent producer ids with no state left; returns the number of sequence-state rows removed.';

CREATE FUNCTION enforce_retention_v1(p_batch integer DEFAULT 10000, p_now timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    pt record;
    v_start bigint;
    v_upto bigint;
    v_first bigint;
    v_deleted bigint := 0;
    v_n bigint;
    v_now_ms numeric := extract(epoch FROM p_now) * 1000;
BEGIN
    IF p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'batch must be at least 1';
    END IF;
    -- Every partition: one with no retention may still hold rows below its log start (left by
    -- an earlier pass before retention was turned off); the min() probe is one index lookup.
    FOR pt IN
        SELECT p.topic_id, p.partition, p.log_start_offset, p.next_offset, p.log_bytes, t.retention_ms, t.retention_bytes
        FROM partitions p JOIN topics t USING (topic_id)
        ORDER BY p.topic_id, p.partition
    LOOP
        v_start := pt.log_start_offset;
        -- A retention longer than the time since 1970 cannot apply (and would overflow).
        IF pt.retention_ms IS NOT NULL AND pt.retention_ms < v_now_ms THEN
            -- The log start moves past the oldest records, up to the first one still young enough.
            SELECT coalesce(min(r."offset"), pt.next_offset) INTO v_upto FROM (
                SELECT r."offset" FROM records r
                WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition AND r."offset" >= v_start
                  AND r."timestamp" >= p_now - make_interval(secs => pt.retention_ms / 1000.0)
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
    END LOOP;
    RETURN v_deleted;
END
$fn$;
COMMENT ON FUNCTION enforce_retention_v1(integer, timestamptz) IS
  'Maintenance: advances each partition''s log start by its topic''s retention (time and size) and deletes at '
  'most p_batch records per partition below it; returns the number deleted (call again until 0).';

REVOKE ALL ON FUNCTION init_producer_id_v1(bigint, smallint) FROM PUBLIC;

REVOKE ALL ON FUNCTION produce_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION fetch_v1(text, integer, bigint, integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION list_offsets_v1(text) FROM PUBLIC;

REVOKE ALL ON FUNCTION create_topic_v1(text, integer, jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION delete_topic_v1(text) FROM PUBLIC;

REVOKE ALL ON FUNCTION create_partitions_v1(text, integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION alter_topic_config_v1(text, jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION topic_config_v1(jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION expire_producers_v1(timestamptz) FROM PUBLIC;

REVOKE ALL ON FUNCTION enforce_retention_v1(integer, timestamptz) FROM PUBLIC;
