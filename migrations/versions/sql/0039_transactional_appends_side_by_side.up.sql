CREATE OR REPLACE FUNCTION txn_check_v2(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_begin boolean, p_append boolean)
 RETURNS transactions
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
-- The transactions row's lock, the first of the documented order (docs/design.md). Every call
-- that changes the row (opens, completes, aborts or fences a transaction, bumps the epoch) holds
-- it FOR UPDATE. An append (p_append, revision 0039) changes nothing in it: to a transaction
-- already open it takes the row FOR SHARE, so that appends of one transaction to different
-- partitions run side by side (a commit, an abort, a bump and expiry still wait for every one of
-- them, and none of them can start while one of those holds the row). An append that may open
-- the transaction takes FOR UPDATE as before. Which lock to take is read first without one: a
-- transaction's number only grows, so a row seen open with this number is either still so under
-- the shared lock, or has moved on, and the checks below then refuse the append as they would
-- under FOR UPDATE. A caller that holds the row FOR SHARE never asks for FOR UPDATE on it
-- afterwards in the same database transaction: two such callers would deadlock.
DECLARE
    t transactions%ROWTYPE;
    pr producers%ROWTYPE;
    v_shared boolean := false;
BEGIN
    IF p_append THEN
        SELECT x.state = 'Ongoing' AND x.txn_number = p_txn_number INTO v_shared
        FROM transactions x WHERE x.transactional_id = p_transactional_id;
        v_shared := coalesce(v_shared, false);
    END IF;
    IF v_shared THEN
        SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR SHARE;
    ELSE
        SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR UPDATE;
    END IF;
    IF NOT FOUND OR t.state = 'Dead' OR t.producer_id IS DISTINCT FROM p_producer_id THEN
        RAISE EXCEPTION USING ERRCODE = 'OL302',
            MESSAGE = format('producer id %s does not serve transactional id %L (expired or replaced)',
                             p_producer_id, p_transactional_id);
    END IF;
    SELECT * INTO pr FROM producers p WHERE p.producer_id = t.producer_id;
    -- Revision 0017: the identity is its principal's. Checked before the epoch, so another
    -- principal learns nothing of it; the owner changes only under this row's lock (held here).
    PERFORM txn_owner_check_v1(p_transactional_id, pr.owner);
    IF p_epoch IS DISTINCT FROM pr.epoch THEN
        IF p_epoch = pr.last_epoch THEN
            RAISE EXCEPTION USING ERRCODE = 'OL202',
                MESSAGE = format('transactional id %L: epoch %s was bumped to %s (the transaction timed out); '
                                 'abort and re-initialise', p_transactional_id, p_epoch, pr.epoch);
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'OL301',
            MESSAGE = format('transactional id %L: epoch %s is fenced by epoch %s', p_transactional_id, p_epoch, pr.epoch);
    END IF;
    IF t.state IN ('PrepareCommit', 'PrepareAbort') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL305', MESSAGE = format('transaction of %L is completing', p_transactional_id);
    END IF;
    IF t.state = 'Ongoing' THEN
        IF t.txn_number <> p_txn_number THEN
            RAISE EXCEPTION USING ERRCODE = 'OL303',
                MESSAGE = format('transactional id %L: transaction %s is open, not %s', p_transactional_id, t.txn_number, p_txn_number);
        END IF;
        IF t.txn_started_at + make_interval(secs => t.timeout_ms / 1000.0) < clock_timestamp() THEN
            RAISE EXCEPTION USING ERRCODE = 'OL307',
                MESSAGE = format('transaction %s of %L exceeded its timeout of %s ms', t.txn_number, p_transactional_id, t.timeout_ms);
        END IF;
        RETURN t;
    END IF;
    -- Opening needs the row FOR UPDATE; under the shared lock it cannot be due (the row was seen
    -- open with this number, and numbers only grow), so a shared call never reaches the UPDATE.
    IF p_begin AND NOT v_shared AND t.txn_number = p_txn_number - 1 THEN
        UPDATE transactions x SET state = 'Ongoing', txn_number = p_txn_number, txn_started_at = now()
        WHERE x.transactional_id = p_transactional_id
        RETURNING * INTO t;
        RETURN t;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'OL303',
        MESSAGE = format('transactional id %L: transaction %s is not open (the last is %s, %s)',
                         p_transactional_id, p_txn_number, t.txn_number, t.state);
END
$function$;

COMMENT ON FUNCTION txn_check_v2(text, bigint, smallint, bigint, boolean, boolean) IS 'Internal: locks and validates a transactional call (producer id, epoch, transaction number, timeout); opens transaction N after N-1 when asked. The transactions row is held FOR UPDATE, or FOR SHARE for an append (p_append) to a transaction already open, so that one transaction''s appends to different partitions run side by side.';

REVOKE ALL ON FUNCTION txn_check_v2(text, bigint, smallint, bigint, boolean, boolean) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION produce_batches_v1(p_producer_id bigint, p_producer_epoch smallint, p_transactional_id text, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[])
 RETURNS TABLE(base_offset bigint, last_offset bigint, log_append_time timestamp with time zone, duplicate boolean, error_code text, error_message text, wake text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_batches integer := coalesce(cardinality(p_topics), 0);
    v_records integer := coalesce(cardinality(p_values), 0);
    v_txn boolean := p_transactional_id IS NOT NULL;
    v_total bigint;
    v_from integer := 1;
    v_to integer;
    r record;
    v_appended boolean := false;
    b integer;
BEGIN
    -- Validation that needs no lock: a malformed request fails whole and holds no lock. At most
    -- 64 batches: each runs in a subtransaction below, and more than 64 subtransactions in one
    -- transaction overflow PostgreSQL's per-backend cache of them, which slows every snapshot.
    IF v_batches < 1 OR v_batches > 64 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('a produce request carries 1 to 64 batches, not %s', v_batches);
    END IF;
    IF v_batches = 1 THEN
        -- One batch (every single-record send): produce_v2 takes its own locks in the order, and
        -- its refusal is raised, which the caller reads as the batch's answer (nothing of a
        -- one-batch request lands either way). No locking pass, no subtransaction: both cost more
        -- than the append of one record.
        IF coalesce(cardinality(p_partitions), 0) <> 1 OR coalesce(cardinality(p_counts), 0) <> 1
           OR p_counts[1] IS DISTINCT FROM v_records
           OR (p_base_sequences IS NOT NULL AND cardinality(p_base_sequences) <> 1) THEN
            RAISE EXCEPTION USING ERRCODE = 'OL107',
                MESSAGE = 'every batch holds at least one record, and the counts add up to the keys, values, headers '
                          'and timestamps given';
        END IF;
        SELECT * INTO r FROM produce_v2(p_topics[1], p_partitions[1], p_producer_id, p_producer_epoch,
                                        p_base_sequences[1], p_keys, p_values, p_headers, p_timestamps,
                                        p_transactional_id, p_txn_number);
        RETURN QUERY SELECT r.base_offset, r.last_offset, r.log_append_time, r.duplicate, NULL::text, NULL::text,
                            CASE WHEN NOT r.duplicate THEN fetch_waiting_v1(p_topics[1], p_partitions[1], NOT v_txn, true) END;
        RETURN;
    END IF;
    IF coalesce(cardinality(p_partitions), 0) <> v_batches OR coalesce(cardinality(p_counts), 0) <> v_batches
       OR (p_base_sequences IS NOT NULL AND cardinality(p_base_sequences) <> v_batches) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = 'topics, partitions, base sequences and counts name the batches: they differ in length';
    END IF;
    SELECT sum(c) INTO v_total FROM unnest(p_counts) c;
    IF EXISTS (SELECT 1 FROM unnest(p_counts) c WHERE c IS NULL OR c < 1)
       OR coalesce(v_total, 0) <> v_records OR coalesce(cardinality(p_keys), 0) <> v_records
       OR (p_headers IS NOT NULL AND cardinality(p_headers) <> v_records)
       OR (p_timestamps IS NOT NULL AND cardinality(p_timestamps) <> v_records) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = 'every batch holds at least one record, and the counts add up to the keys, values, headers '
                      'and timestamps given';
    END IF;
    -- The documented lock order (docs/design.md), every lock before the first append: the
    -- transactions row (txn_check_v1 checks the producer id, epoch and transaction number under
    -- it, and opens the transaction), the producer row, then every partition of the request in
    -- (topic_id, partition) order; produce_v2 then takes each sequence state. Taking the
    -- partitions up front, sorted, is what lets one database transaction append to many of them
    -- without deadlocking against another request that names them in another order.
    IF v_txn THEN
        IF (SELECT acl_settings.enforce FROM acl_settings) THEN
            PERFORM acl_require_v1('transactional_id', ARRAY[p_transactional_id], 'write');
        END IF;
        -- An append: FOR SHARE when the transaction is open (txn_check_v2); nothing here or in
        -- append_batches_v2 and produce_v2 below updates the row.
        PERFORM txn_check_v2(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true, true);
    END IF;
    IF p_producer_id IS NOT NULL THEN
        -- The caller's own producer row only (revision 0017): another principal's is never locked.
        PERFORM 1 FROM producers p WHERE p.producer_id = p_producer_id AND p.owner = acl_caller_v1() FOR SHARE;
    END IF;
    -- Only partitions of topics the caller may write: a denied batch fails in produce_v2 below,
    -- and the caller never held a partition it has no right to.
    PERFORM 1 FROM partitions pt JOIN topics t ON t.topic_id = pt.topic_id
    WHERE (t.name, pt.partition) IN (SELECT q.topic, q.partition FROM unnest(p_topics, p_partitions) AS q(topic, partition))
      AND acl_allowed_v1('topic', t.name, 'write')
    ORDER BY pt.topic_id, pt.partition
    FOR NO KEY UPDATE OF pt;
    -- The set-based append takes the common case whole, all batches new, next in sequence and
    -- valid (revision 0023): no subtransaction, one statement per table.
    FOR r IN
        SELECT a.base_offset, a.last_offset, a.log_append_time, a.b
        FROM append_batches_v2(p_producer_id, p_producer_epoch, p_transactional_id, p_txn_number, p_topics,
                               p_partitions, p_base_sequences, p_counts, p_keys, p_values, p_headers,
                               p_timestamps, false) WITH ORDINALITY AS a(base_offset, last_offset, log_append_time, b)
        ORDER BY a.b
    LOOP
        base_offset := r.base_offset;
        last_offset := r.last_offset;
        log_append_time := r.log_append_time;
        duplicate := false;
        error_code := NULL;
        error_message := NULL;
        wake := fetch_waiting_v1(p_topics[r.b], p_partitions[r.b], NOT v_txn, true);
        RETURN NEXT;
        v_appended := true;
    END LOOP;
    IF v_appended THEN
        RETURN;
    END IF;
    -- Otherwise each batch in a subtransaction, so that one batch's refusal (an OL error: a sequence out of
    -- order, a record too large, an unknown partition) is that batch's answer, as in Kafka's
    -- ProduceResponse, and the others still land. Any other error (a lock or statement timeout,
    -- a lost connection) fails the whole request: its outcome is then unknown for every batch.
    FOR b IN 1 .. v_batches LOOP
        v_to := v_from + p_counts[b] - 1;
        BEGIN
            SELECT * INTO r FROM produce_v2(p_topics[b], p_partitions[b], p_producer_id, p_producer_epoch,
                                            p_base_sequences[b], p_keys[v_from:v_to], p_values[v_from:v_to],
                                            p_headers[v_from:v_to], p_timestamps[v_from:v_to],
                                            p_transactional_id, p_txn_number);
            base_offset := r.base_offset;
            last_offset := r.last_offset;
            log_append_time := r.log_append_time;
            duplicate := r.duplicate;
            error_code := NULL;
            error_message := NULL;
            -- Checked under the partition's lock (held since above): see fetch_wait_v1. A
            -- transaction's records wake read_uncommitted readers only; its commit wakes the others.
            wake := CASE WHEN NOT r.duplicate THEN fetch_waiting_v1(p_topics[b], p_partitions[b], NOT v_txn, true) END;
        EXCEPTION WHEN OTHERS THEN
            IF SQLSTATE NOT LIKE 'OL%' THEN
                RAISE;
            END IF;
            base_offset := NULL;
            last_offset := NULL;
            log_append_time := NULL;
            duplicate := NULL;
            error_code := SQLSTATE;
            error_message := SQLERRM;
            wake := NULL;
        END;
        RETURN NEXT;
        v_from := v_to + 1;
    END LOOP;
END
$function$;

COMMENT ON FUNCTION produce_batches_v1(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[]) IS 'Produce up to 64 batches, to any partitions, in one database transaction (Kafka''s ProduceRequest): batch b is p_counts[b] records of the concatenated keys/values/headers/timestamps, at p_base_sequences[b], each appended as produce_v2 does. One row per batch, in order: its offsets (duplicate for a retry of an appended batch), or error_code/error_message when the store refused that batch (an OL code; nothing of it was appended, the others were), and wake, when a reader waits on its partition, the token that wakes it (topic_id:partition: NOTIFY the schema''s channel, wake_channel_v1(), with it). A malformed request, or any error that is not a refusal, fails the whole call.';

REVOKE ALL ON FUNCTION produce_batches_v1(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[]) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION produce_batches_v1(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[]) TO @schema@_client, @schema@_admin;

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
    -- Records without headers (the common case) are sized without building an array of NULLs
    -- to pair with them: this pass is a tenth of the cost of appending a large batch.
    IF p_headers IS NULL THEN
        SELECT max(sz), sum(sz) INTO i, v_bytes FROM (
            SELECT coalesce(octet_length(k), 0) + coalesce(octet_length(v), 0) AS sz FROM unnest(p_keys, p_values) AS r(k, v)
        ) sizes;
    ELSE
        SELECT max(sz), sum(sz) INTO i, v_bytes FROM (
            SELECT coalesce(octet_length(k), 0) + coalesce(octet_length(v), 0) + coalesce(octet_length(h::text), 0) AS sz
            FROM unnest(p_keys, p_values, p_headers) AS r(k, v, h)
        ) sizes;
    END IF;
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
        -- Lock 0: the transactions row (txn_check_v2: FOR SHARE when the transaction is open, so
        -- its appends to other partitions run beside this one; FOR UPDATE when this append opens
        -- it): checks the producer id, epoch, transaction number and timeout, and opens
        -- transaction N after N-1. An epoch bump or a commit takes the row FOR UPDATE, so none
        -- can interleave with this append.
        PERFORM txn_check_v2(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true, true);
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

    IF p_headers IS NULL AND p_timestamps IS NULL THEN
        -- The common case (no headers, the append time), without arrays of NULLs to unnest.
        INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, sequence, is_transactional,
                             key, value, "timestamp", txn_number)
        SELECT v_topic_id, p_partition, v_next + r.o - 1, p_producer_id, p_producer_epoch,
               CASE WHEN p_producer_id IS NOT NULL
                    THEN ((p_base_sequence::bigint + r.o - 1) % 2147483648)::integer END,
               v_txn, r.k, r.v, v_now, CASE WHEN v_txn THEN p_txn_number END
        FROM unnest(p_keys, p_values) WITH ORDINALITY AS r(k, v, o);
    ELSE
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
    END IF;
    UPDATE partitions pt SET next_offset = v_next + v_n, log_bytes = pt.log_bytes + v_bytes
    WHERE pt.topic_id = v_topic_id AND pt.partition = p_partition;
    IF v_txn THEN
        -- The transaction's first offset here holds the partition's last stable offset back.
        UPDATE txn_partitions x SET first_offset = v_next
        WHERE x.transactional_id = p_transactional_id AND x.topic_id = v_topic_id AND x.partition = p_partition
          AND x.first_offset IS NULL;
    END IF;

    IF p_producer_id IS NOT NULL THEN
        PERFORM producer_window_push_v1(p_producer_id, p_producer_epoch, ARRAY[v_topic_id], ARRAY[p_partition],
                                        ARRAY[p_base_sequence], ARRAY[v_n], ARRAY[v_next], v_now);
    END IF;
    RETURN QUERY SELECT v_next, v_next + v_n - 1, v_now, false;
END
$function$;

COMMENT ON FUNCTION produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamp with time zone[], text, bigint) IS 'Produce one batch to one partition: validates, detects a retried batch (returns its original offsets, duplicate = true), enforces epoch and sequence order and appends under the partition lock. With a transactional id and transaction number, the batch joins that transaction (opening it, and adding the partition, if needed). Producer id NULL writes without idempotence. A producer id is usable only by the principal it was issued to (OL203 otherwise), and one that serves a transactional id only in its transactions (OL302). Headers must be arrays of {"key", "value": base64 or null} objects (OL107); timestamps within [1970-01-01, now + the topic''s message_timestamp_after_max_ms] (OL109).';

REVOKE ALL ON FUNCTION produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamp with time zone[], text, bigint) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamp with time zone[], text, bigint) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION txn_check_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_begin boolean)
 RETURNS transactions
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
BEGIN
    RETURN txn_check_v2(p_transactional_id, p_producer_id, p_epoch, p_txn_number, p_begin, false);
END
$function$;

COMMENT ON FUNCTION txn_check_v1(text, bigint, smallint, bigint, boolean) IS 'Internal: txn_check_v2 with the transactions row always FOR UPDATE.';

REVOKE ALL ON FUNCTION txn_check_v1(text, bigint, smallint, bigint, boolean) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;
