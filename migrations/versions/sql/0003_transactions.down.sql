DROP VIEW IF EXISTS transaction_status;

DROP VIEW IF EXISTS committed_records;

DROP VIEW IF EXISTS partition_offsets;

DROP FUNCTION IF EXISTS txn_complete_v1(text, boolean);

DROP FUNCTION IF EXISTS consistent_limits_v1(integer[], integer[], bigint[], bigint[], bigint[]);

DROP FUNCTION IF EXISTS txn_fence_abort_v1(text, boolean);

DROP FUNCTION IF EXISTS txn_check_v1(text, bigint, smallint, bigint, boolean);

DROP FUNCTION IF EXISTS init_transactional_producer_id_v1(text, integer, bigint, smallint);

DROP FUNCTION IF EXISTS add_partitions_to_txn_v1(text, bigint, smallint, bigint, text[], integer[]);

DROP FUNCTION IF EXISTS produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[], text, bigint);

DROP FUNCTION IF EXISTS end_txn_v1(text, bigint, smallint, bigint, boolean);

DROP FUNCTION IF EXISTS abort_transaction_v1(text);

DROP FUNCTION IF EXISTS expire_transactions_v1(timestamptz);

DROP FUNCTION IF EXISTS fetch_v2(text[], integer[], bigint[], integer, boolean);

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

REVOKE ALL ON FUNCTION produce_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[]) FROM PUBLIC;

ALTER TABLE transactions DROP COLUMN prev_producer_id;

DROP INDEX ix_records_producer_id_txn_number;

ALTER TABLE records DROP CONSTRAINT ck_records_txn_number_iff_transactional;

ALTER TABLE records DROP COLUMN txn_number;

ALTER TABLE records DROP CONSTRAINT ck_records_aborted_is_transactional;

ALTER TABLE records DROP COLUMN aborted;
