DROP FUNCTION end_txn_v2(text, bigint, smallint, bigint, boolean);

DROP FUNCTION fetch_wait_v1(text[], integer[], boolean, integer);

DROP FUNCTION fetch_waiting_v1(text, integer, boolean, boolean);

DROP FUNCTION produce_batches_v1(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[]);

DROP FUNCTION produce_end_txn_v3(text, bigint, smallint, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], text, text, text, integer, text[], integer[], bigint[], text[]);

DROP FUNCTION txn_waiters_v1(bigint, bigint);

DROP FUNCTION wake_channel_v1();

CREATE OR REPLACE FUNCTION consistent_limits_v1(p_topic_ids integer[], p_partitions integer[], p_starts bigint[], p_limits bigint[], p_scan_ends bigint[])
 RETURNS bigint[]
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_limits bigint[] := p_limits;
    v_changed boolean := true;
    v_cut bigint;
    i integer;
BEGIN
    WHILE v_changed LOOP
        v_changed := false;
        FOR i IN 1 .. coalesce(cardinality(p_topic_ids), 0) LOOP
            WITH here AS MATERIALIZED (
                -- Committed transactions among the records this read would return here (bounded
                -- by the scan end, the reader's record cap).
                SELECT DISTINCT r.producer_id, r.txn_number FROM records r
                WHERE r.topic_id = p_topic_ids[i] AND r.partition = p_partitions[i]
                  AND r."offset" >= p_starts[i] AND r."offset" < least(v_limits[i], p_scan_ends[i])
                  AND r.is_transactional AND r.control_type IS NULL AND NOT r.aborted
            ), torn AS (
                -- ... that have a record at or past some requested partition's limit: their last
                -- record there, from the spans EndTxn wrote (revision 0014).
                SELECT h.producer_id, h.txn_number FROM here h
                WHERE EXISTS (
                    SELECT 1 FROM txn_spans s
                    JOIN unnest(p_topic_ids, p_partitions, v_limits) AS o(topic_id, partition, lim)
                      ON s.topic_id = o.topic_id AND s.partition = o.partition AND s.last_offset >= o.lim
                    WHERE s.producer_id = h.producer_id AND s.txn_number = h.txn_number)
            )
            -- Where each starts here: its span's first record or, when it began below this read's
            -- start, its first record from the start on (one is among the records this read would
            -- return, so the index scan stops within them). Revision 0016: joining the torn
            -- transactions with the records of the whole range read every record up to the limit.
            SELECT min(CASE WHEN s.first_offset >= p_starts[i] THEN s.first_offset ELSE (
                       SELECT r."offset" FROM records r
                       WHERE r.topic_id = p_topic_ids[i] AND r.partition = p_partitions[i]
                         AND r."offset" >= p_starts[i] AND r.is_transactional
                         AND r.producer_id = t.producer_id AND r.txn_number = t.txn_number
                       ORDER BY r."offset" LIMIT 1) END) INTO v_cut
            FROM torn t JOIN txn_spans s
              ON s.producer_id = t.producer_id AND s.txn_number = t.txn_number
             AND s.topic_id = p_topic_ids[i] AND s.partition = p_partitions[i];
            IF v_cut IS NOT NULL AND v_cut < v_limits[i] THEN
                v_limits[i] := v_cut;
                v_changed := true;
            END IF;
        END LOOP;
    END LOOP;
    RETURN v_limits;
END
$function$;

COMMENT ON FUNCTION consistent_limits_v1(integer[], integer[], bigint[], bigint[], bigint[]) IS 'Read limits (at most p_limits, the last stable offsets) under which every committed transaction found in [start, scan end) is readable on all of the given partitions or on none.';

REVOKE ALL ON FUNCTION consistent_limits_v1(integer[], integer[], bigint[], bigint[], bigint[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION produce_v2(p_topic text, p_partition integer, p_producer_id bigint, p_producer_epoch smallint, p_base_sequence integer, p_keys bytea[], p_values bytea[], p_headers jsonb[] DEFAULT NULL::jsonb[], p_timestamps timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], p_transactional_id text DEFAULT NULL::text, p_txn_number bigint DEFAULT NULL::bigint)
 RETURNS TABLE(base_offset bigint, last_offset bigint, log_append_time timestamp with time zone, duplicate boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_n integer := cardinality(p_values);
    v_txn boolean := p_transactional_id IS NOT NULL;
    v_topic_id integer;
    v_max_bytes integer;
    v_after_max bigint;
    v_bad_ts timestamptz;
    v_producer_tid text;
    v_epoch smallint;
    v_next bigint;
    v_last_seq integer;
    v_expected integer;
    v_bytes bigint;
    v_now timestamptz := now();
    s producer_partition_state%ROWTYPE;
    i integer;
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('transactional_id', ARRAY[p_transactional_id], 'write');
        PERFORM acl_require_v1('topic', ARRAY[p_topic], 'write');
    END IF;
    -- Validation that needs no lock comes first, so a bad request never holds a lock.
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
        IF p_producer_epoch IS NOT NULL OR p_base_sequence IS NOT NULL OR v_txn THEN
            RAISE EXCEPTION USING ERRCODE = 'OL107', MESSAGE = 'an epoch, sequence or transaction needs a producer id';
        END IF;
    ELSIF p_producer_epoch IS NULL OR p_base_sequence IS NULL OR p_base_sequence < 0 OR p_producer_epoch < 0
          OR p_producer_epoch >= 32767 THEN
        -- 32767 is the fencing epoch (revision 0017): no instance is ever handed it.
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = format('an idempotent batch needs an epoch in [0, 32766] and a base sequence >= 0 '
                             '(got epoch %s, sequence %s)', p_producer_epoch, p_base_sequence);
    END IF;
    IF v_txn AND p_txn_number IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107', MESSAGE = 'a transactional batch names its transaction number';
    END IF;
    SELECT t.topic_id, t.max_message_bytes, t.message_timestamp_after_max_ms INTO v_topic_id, v_max_bytes, v_after_max
    FROM topics t WHERE t.name = p_topic;
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
    -- Revision 0017: everything a reader decodes is checked here, so no stored record can stop a
    -- reader: headers have the one documented shape, timestamps are finite and within the
    -- topic's bound into the future (Kafka's message.timestamp.after.max.ms, KIP-937), which
    -- also keeps one far-future record from holding time-based retention back for good.
    IF p_headers IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_headers) h WHERE NOT headers_valid_v1(h)) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = 'headers must be JSON arrays of {"key": text, "value": base64 text or null} objects';
    END IF;
    IF p_timestamps IS NOT NULL THEN
        SELECT ts INTO v_bad_ts FROM unnest(p_timestamps) ts
        WHERE ts IS NOT NULL AND CASE WHEN NOT isfinite(ts) OR ts < '1970-01-01 00:00:00+00' OR ts >= '10000-01-01 00:00:00+00'
                                      THEN true
                                      ELSE extract(epoch FROM ts - v_now) * 1000 > v_after_max END
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'OL109',
                MESSAGE = format('timestamp %s is outside [1970-01-01, now + %s ms] (message_timestamp_after_max_ms of topic %L)',
                                 v_bad_ts, v_after_max, p_topic);
        END IF;
    END IF;

    IF v_txn THEN
        -- Lock 0: the transactions row (FOR UPDATE, in txn_check_v1): checks the producer id,
        -- epoch, transaction number and timeout, and opens transaction N after N-1. An epoch bump
        -- or a commit takes the same lock, so none can interleave with this append.
        PERFORM txn_check_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true);
        IF NOT EXISTS (SELECT 1 FROM partitions pt WHERE pt.topic_id = v_topic_id AND pt.partition = p_partition) THEN
            RAISE EXCEPTION USING ERRCODE = 'OL101',
                MESSAGE = format('unknown partition %s of topic %L', p_partition, p_topic);
        END IF;
        INSERT INTO txn_partitions (transactional_id, topic_id, partition)
        VALUES (p_transactional_id, v_topic_id, p_partition)
        ON CONFLICT DO NOTHING;
    END IF;

    IF p_producer_id IS NOT NULL THEN
        -- Lock 1: the producer row, shared. An epoch bump takes it FOR UPDATE, so it waits for this
        -- append to commit, and this append cannot land after a bump has committed.
        -- Revision 0017: a producer id is usable only by the principal it was issued to. The owner
        -- filter is in the WHERE clause, so another principal's row is never locked, and the
        -- caller is told nothing of it (not its epoch, not its sequences: those messages below
        -- reach the owner only). An idempotent id's owner never changes; a transactional id's
        -- changes only under its transactions row's lock, held here since lock 0.
        SELECT p.epoch, p.transactional_id INTO v_epoch, v_producer_tid FROM producers p
        WHERE p.producer_id = p_producer_id AND p.owner = acl_caller_v1()
        FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'OL203',
                MESSAGE = format('unknown producer id %s (never issued to this principal, or expired): call InitProducerId',
                                 p_producer_id);
        END IF;
        IF NOT v_txn AND v_producer_tid IS NOT NULL THEN
            -- Revision 0017: a transactional id's producer writes in its transactions only (Kafka's
            -- transactional producer has no other path). This also keeps a plain batch out of the
            -- producer's open transaction (rule 6) whatever the timing: no transaction, no race.
            RAISE EXCEPTION USING ERRCODE = 'OL302',
                MESSAGE = format('producer id %s belongs to a transactional id: write in its transactions', p_producer_id);
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

    INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, sequence, is_transactional,
                         key, value, headers, "timestamp", txn_number)
    SELECT v_topic_id, p_partition, v_next + r.o - 1, p_producer_id, p_producer_epoch,
           CASE WHEN p_producer_id IS NOT NULL
                THEN ((p_base_sequence::bigint + r.o - 1) % 2147483648)::integer END,
           v_txn, r.k, r.v, r.h, coalesce(r.ts, v_now), CASE WHEN v_txn THEN p_txn_number END
    FROM unnest(p_keys, p_values,
                coalesce(p_headers, array_fill(NULL::jsonb, ARRAY[v_n])),
                coalesce(p_timestamps, array_fill(NULL::timestamptz, ARRAY[v_n])))
         WITH ORDINALITY AS r(k, v, h, ts, o);
    UPDATE partitions pt SET next_offset = v_next + v_n, log_bytes = pt.log_bytes + v_bytes
    WHERE pt.topic_id = v_topic_id AND pt.partition = p_partition;
    IF v_txn THEN
        -- The transaction's first offset here holds the partition's last stable offset back.
        UPDATE txn_partitions x SET first_offset = v_next
        WHERE x.transactional_id = p_transactional_id AND x.topic_id = v_topic_id AND x.partition = p_partition
          AND x.first_offset IS NULL;
    END IF;

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
$function$;

COMMENT ON FUNCTION produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamp with time zone[], text, bigint) IS 'Produce one batch to one partition: validates, detects a retried batch (returns its original offsets, duplicate = true), enforces epoch and sequence order and appends under the partition lock. With a transactional id and transaction number, the batch joins that transaction (opening it, and adding the partition, if needed). Producer id NULL writes without idempotence. A producer id is usable only by the principal it was issued to (OL203 otherwise), and one that serves a transactional id only in its transactions (OL302). Headers must be arrays of {"key", "value": base64 or null} objects (OL107); timestamps within [1970-01-01, now + the topic''s message_timestamp_after_max_ms] (OL109).';

REVOKE ALL ON FUNCTION produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamp with time zone[], text, bigint) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamp with time zone[], text, bigint) TO @schema@_client, @schema@_admin;
DROP TABLE fetch_waiters;
