-- The log: InitProducerId (idempotent), Produce, ListOffsets, Fetch and the read_committed cut.
--
-- Lock order, everywhere (docs/design.md, "Locks and decisions"): the transactions row of a
-- transactional id, then the producers row, then partition rows in (topic_id, partition) order,
-- then the producer's sequence state. Every decision is taken under the lock of the row it
-- depends on; the functions' comments name the lock at each step.

CREATE OR REPLACE FUNCTION init_producer_id_v1(p_producer_id bigint DEFAULT NULL::bigint, p_epoch smallint DEFAULT NULL::smallint)
 RETURNS TABLE(producer_id bigint, producer_epoch smallint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v producers%ROWTYPE;
    v_caller oid := acl_caller_v1();
BEGIN
    IF (p_producer_id IS NULL) <> (p_epoch IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'give both the producer id and its epoch, or neither';
    END IF;
    IF p_producer_id IS NOT NULL THEN
        -- KIP-360 for an idempotent producer: bump the epoch of the id it holds. FOR UPDATE waits
        -- for appends in flight (they hold the row FOR SHARE) and fences later ones.
        -- Revision 0017: only the principal the id was issued to may name it. Another principal's
        -- id is treated as unknown (a fresh id below): no lock on it, no effect on it, and nothing
        -- about it in the answer. The owner filter is in the WHERE clause, so a row that is not
        -- the caller's is never locked (an idempotent id's owner never changes).
        SELECT * INTO v FROM producers p WHERE p.producer_id = p_producer_id AND p.owner = v_caller FOR UPDATE;
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
    INSERT INTO producers AS p (owner) VALUES (v_caller) RETURNING p.producer_id, p.epoch INTO v.producer_id, v.epoch;
    RETURN QUERY SELECT v.producer_id, v.epoch;
END
$fn$;
COMMENT ON FUNCTION init_producer_id_v1(p_producer_id bigint, p_epoch smallint) IS
  'InitProducerId without a transactional id: a new producer id at epoch 0, bound to the calling principal, or (KIP-360) given the current id and epoch of one of the caller''s own ids, the next epoch (a retried bump gets the same answer; an exhausted epoch a new id). Another principal''s id is treated as unknown: a new id.';

CREATE OR REPLACE FUNCTION produce_v2(p_topic text, p_partition integer, p_producer_id bigint, p_producer_epoch smallint, p_base_sequence integer, p_keys bytea[], p_values bytea[], p_headers jsonb[] DEFAULT NULL::jsonb[], p_timestamps timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], p_transactional_id text DEFAULT NULL::text, p_txn_number bigint DEFAULT NULL::bigint)
 RETURNS TABLE(base_offset bigint, last_offset bigint, log_append_time timestamp with time zone, duplicate boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
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
    IF v_txn THEN
        -- The partition joins the transaction under its lock (revision 0039: before, this came
        -- before the lock, which two appends sharing the transactions row could take in opposite
        -- orders with produce_batches_v1, which locks its partitions first: a deadlock).
        INSERT INTO txn_partitions (transactional_id, topic_id, partition)
        VALUES (p_transactional_id, v_topic_id, p_partition)
        ON CONFLICT DO NOTHING;
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
$fn$;
COMMENT ON FUNCTION produce_v2(p_topic text, p_partition integer, p_producer_id bigint, p_producer_epoch smallint, p_base_sequence integer, p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_transactional_id text, p_txn_number bigint) IS
  'Produce one batch to one partition: validates, detects a retried batch (returns its original offsets, duplicate = true), enforces epoch and sequence order and appends under the partition lock. With a transactional id and transaction number, the batch joins that transaction (opening it, and adding the partition, if needed). Producer id NULL writes without idempotence. A producer id is usable only by the principal it was issued to (OL203 otherwise), and one that serves a transactional id only in its transactions (OL302). Headers must be arrays of {"key", "value": base64 or null} objects (OL107); timestamps within [1970-01-01, now + the topic''s message_timestamp_after_max_ms] (OL109).';

CREATE OR REPLACE FUNCTION produce_end_txn_v1(p_topic text, p_partition integer, p_producer_id bigint, p_producer_epoch smallint, p_base_sequence integer, p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_transactional_id text, p_txn_number bigint)
 RETURNS TABLE(base_offset bigint, last_offset bigint, log_append_time timestamp with time zone, duplicate boolean, outcome text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    r record;
    t transactions%ROWTYPE;
    v_outcome text;
    v_last_seq integer;
BEGIN
    IF p_transactional_id IS NULL OR p_txn_number IS NULL OR p_producer_id IS NULL OR p_producer_epoch IS NULL
       OR p_base_sequence IS NULL OR p_base_sequence < 0 OR coalesce(cardinality(p_values), 0) = 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = 'produce_end_txn needs a transactional id, transaction number, producer id, epoch, '
                      'base sequence and at least one record';
    END IF;
    -- Access control (revision 0009, docs/acl.md): both calls below check again; this is for
    -- the retry answer, which reads the producer's state of this partition.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('transactional_id', ARRAY[p_transactional_id], 'write');
        PERFORM acl_require_v1('topic', ARRAY[p_topic], 'write');
    END IF;
    -- Lock 0, the transactions row, before deciding anything (revision 0017). A retry that
    -- overlaps the original call (the client's retry after a lost connection) waits here for it,
    -- then reads the row as the original left it: committed, so it is answered as a retry.
    -- Before 0017 it read the row unlocked, saw the transaction still open, went on to append and
    -- got INVALID_TXN_STATE for a transaction that had committed.
    PERFORM txn_gate_v1(p_transactional_id, false);
    SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR UPDATE;
    IF FOUND AND t.producer_id = p_producer_id AND t.txn_number = p_txn_number AND t.state = 'CompleteCommit' THEN
        -- A retry of a call that committed. end_txn_v1 re-checks the owner and the epoch under
        -- the same lock: 'already_committed', or the error a fenced caller gets.
        v_outcome := end_txn_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true);
        v_last_seq := ((p_base_sequence::bigint + cardinality(p_values) - 1) % 2147483648)::integer;
        RETURN QUERY
        SELECT s.first_offsets[i], s.last_offsets[i], s.timestamps[i], true, v_outcome
        FROM producer_partition_state s
        JOIN topics tp ON tp.topic_id = s.topic_id
        CROSS JOIN LATERAL generate_subscripts(s.first_sequences, 1) AS i
        WHERE s.producer_id = p_producer_id AND s.epoch = p_producer_epoch AND tp.name = p_topic
          AND s.partition = p_partition AND s.first_sequences[i] = p_base_sequence AND s.last_sequences[i] = v_last_seq;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'OL303',
                MESSAGE = format('transaction %s of %L is already committed, without this batch (sequence %s of %s-%s)',
                                 p_txn_number, p_transactional_id, p_base_sequence, p_topic, p_partition);
        END IF;
        RETURN;
    END IF;
    -- The documented lock order (docs/design.md), revision 0017: the transactions row (held), the
    -- producer row (txn_check_v1 checks the owner and the epoch first, so a fenced or foreign
    -- caller locks nothing more), then every partition EndTxn will write a marker to, this
    -- batch's included, in (topic_id, partition) order, before appending. Before 0017 the append
    -- locked its partition first and EndTxn then took the others in order: two commits whose
    -- last batches went to each other's partitions deadlocked.
    PERFORM txn_check_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true);
    PERFORM 1 FROM producers p WHERE p.producer_id = p_producer_id FOR SHARE;
    -- Rows are locked as the sorted scan returns them (the lock sits above the sort in the plan).
    PERFORM 1 FROM partitions pt
    WHERE (pt.topic_id, pt.partition) IN (
        SELECT x.topic_id, x.partition FROM txn_partitions x WHERE x.transactional_id = p_transactional_id
        UNION ALL
        SELECT tp.topic_id, p_partition FROM topics tp WHERE tp.name = p_topic)
    ORDER BY pt.topic_id, pt.partition
    FOR NO KEY UPDATE;
    -- The batch (it may open the transaction), then EndTxn; any error rolls both back.
    SELECT * INTO r FROM produce_v2(p_topic, p_partition, p_producer_id, p_producer_epoch, p_base_sequence,
                                    p_keys, p_values, p_headers, p_timestamps, p_transactional_id, p_txn_number);
    v_outcome := end_txn_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true);
    RETURN QUERY SELECT r.base_offset, r.last_offset, r.log_append_time, r.duplicate, v_outcome;
END
$fn$;
COMMENT ON FUNCTION produce_end_txn_v1(p_topic text, p_partition integer, p_producer_id bigint, p_producer_epoch smallint, p_base_sequence integer, p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_transactional_id text, p_txn_number bigint) IS
  'A transaction''s last batch (produce_v2) and its commit (end_txn_v1) in one database transaction: both or neither. Returns the batch''s offsets and EndTxn''s outcome (committed; already_committed for a retry of a call that committed, with the batch''s offsets; timed_out when the transaction had passed its timeout and was aborted instead). Errors as produce_v2 and end_txn_v1.';

CREATE OR REPLACE FUNCTION produce_end_txn_v2(p_transactional_id text, p_producer_id bigint, p_producer_epoch smallint, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_offset_topics text[], p_offset_partitions integer[], p_offsets bigint[], p_offset_metadata text[], OUT base_offsets bigint[], OUT last_offsets bigint[], OUT log_append_times timestamp with time zone[], OUT duplicates boolean[], OUT outcome text)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_batches integer := coalesce(cardinality(p_topics), 0);
    v_records integer := coalesce(cardinality(p_values), 0);
    v_total bigint;
    v_from integer := 1;
    v_to integer;
    v_last_seq integer;
    v_whole boolean;
    v_direct boolean := false;
    t transactions%ROWTYPE;
    r record;
    b integer;
BEGIN
    -- Validation that needs no lock: a bad request never holds one.
    IF p_transactional_id IS NULL OR p_txn_number IS NULL OR p_producer_id IS NULL OR p_producer_epoch IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = 'produce_end_txn needs a transactional id, transaction number, producer id and epoch';
    END IF;
    IF coalesce(cardinality(p_partitions), 0) <> v_batches OR coalesce(cardinality(p_base_sequences), 0) <> v_batches
       OR coalesce(cardinality(p_counts), 0) <> v_batches THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = 'topics, partitions, base sequences and counts name the batches: they differ in length';
    END IF;
    SELECT sum(c) INTO v_total FROM unnest(p_counts) c;
    IF EXISTS (SELECT 1 FROM unnest(p_counts) c WHERE c IS NULL OR c < 1)
       OR EXISTS (SELECT 1 FROM unnest(p_base_sequences) q WHERE q IS NULL OR q < 0)
       OR coalesce(v_total, 0) <> v_records OR coalesce(cardinality(p_keys), 0) <> v_records
       OR (p_headers IS NOT NULL AND cardinality(p_headers) <> v_records)
       OR (p_timestamps IS NOT NULL AND cardinality(p_timestamps) <> v_records) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = 'every batch holds at least one record and a base sequence >= 0, and its counts add up to '
                      'the keys, values, headers and timestamps given';
    END IF;
    IF p_group_id IS NULL AND coalesce(cardinality(p_offset_topics), 0) + coalesce(cardinality(p_offsets), 0) > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107', MESSAGE = 'consumer offsets need a group id';
    END IF;
    -- Access control (revision 0009, docs/acl.md). The calls below check again; this is for the
    -- retry answer, which reads the producer's state of these partitions.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('transactional_id', ARRAY[p_transactional_id], 'write');
        PERFORM acl_require_v1('topic', p_topics, 'write');
        IF p_group_id IS NOT NULL THEN
            PERFORM acl_require_v1('group', ARRAY[p_group_id], 'read');
            PERFORM acl_require_v1('topic', p_offset_topics, 'read');
        END IF;
    END IF;
    -- Lock 0, the transactions row, before deciding anything: a retry that overlaps the original
    -- call waits here for it, then reads the row as the original left it.
    PERFORM txn_gate_v1(p_transactional_id, false);
    SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR UPDATE;
    IF FOUND AND t.producer_id = p_producer_id AND t.txn_number = p_txn_number AND t.state = 'CompleteCommit' THEN
        -- A retry of a call that committed. end_txn_v1 re-checks the owner and the epoch under the
        -- same lock ('already_committed', or the error a fenced caller gets); each batch is then
        -- answered from the producer's sequence state, as produce_v2 answers a duplicate.
        outcome := end_txn_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true);
        FOR b IN 1 .. v_batches LOOP
            v_last_seq := ((p_base_sequences[b]::bigint + p_counts[b] - 1) % 2147483648)::integer;
            SELECT s.first_offsets[i] AS f, s.last_offsets[i] AS l, s.timestamps[i] AS ts INTO r
            FROM producer_partition_state s
            JOIN topics tp ON tp.topic_id = s.topic_id
            CROSS JOIN LATERAL generate_subscripts(s.first_sequences, 1) AS i
            WHERE s.producer_id = p_producer_id AND s.epoch = p_producer_epoch AND tp.name = p_topics[b]
              AND s.partition = p_partitions[b] AND s.first_sequences[i] = p_base_sequences[b]
              AND s.last_sequences[i] = v_last_seq;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'OL303',
                    MESSAGE = format('transaction %s of %L is already committed, without this batch (sequence %s of %s-%s)',
                                     p_txn_number, p_transactional_id, p_base_sequences[b], p_topics[b], p_partitions[b]);
            END IF;
            base_offsets := base_offsets || r.f;
            last_offsets := last_offsets || r.l;
            log_append_times := log_append_times || r.ts;
            duplicates := duplicates || true;
        END LOOP;
        RETURN;
    END IF;
    -- The whole transaction is in this call when the store has not seen it yet: the last one is
    -- complete (or none was) and this is the next. It opens and commits in this database
    -- transaction, so no other session can see it open (revision 0024).
    v_whole := t.transactional_id IS NOT NULL AND t.producer_id = p_producer_id AND t.txn_number = p_txn_number - 1
               AND t.state IN ('Empty', 'CompleteCommit', 'CompleteAbort') AND v_batches > 0;
    -- The documented lock order (docs/design.md): the transactions row (held; txn_check_v1
    -- checks the owner and the epoch first, so a fenced or foreign caller locks nothing more),
    -- the group's row (txn_offset_commit_v1, which checks the member, its generation and its
    -- partitions under it), the producer row, then every partition the commit writes to (the
    -- transaction's and these batches') in (topic_id, partition) order.
    IF v_whole AND p_group_id IS NULL THEN
        -- Without offsets nothing needs the transaction open before its records are in: it is
        -- opened and completed by one update of its row after the append (the journal still
        -- shows every step, txn_transition_v1). The owner and the epoch are checked first, as
        -- txn_check_v1 checks them, under the producer row's lock (the next in the order; the
        -- owner in the WHERE clause, so another principal's row is never locked). For anything
        -- else txn_check_v1 runs below and decides.
        SELECT p.epoch = p_producer_epoch INTO v_direct
        FROM producers p WHERE p.producer_id = p_producer_id AND p.owner = acl_caller_v1() FOR SHARE;
        v_direct := coalesce(v_direct, false);
    END IF;
    IF NOT v_direct THEN
        PERFORM txn_check_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true);
        IF p_group_id IS NOT NULL THEN
            PERFORM txn_offset_commit_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, p_group_id,
                                         p_member_id, p_group_instance_id, p_generation, p_offset_topics,
                                         p_offset_partitions, p_offsets, p_offset_metadata);
        END IF;
        PERFORM 1 FROM producers p WHERE p.producer_id = p_producer_id FOR SHARE;
    END IF;
    -- Rows are locked as the sorted scan returns them (the lock sits above the sort in the plan).
    PERFORM 1 FROM partitions pt
    WHERE (pt.topic_id, pt.partition) IN (
        SELECT x.topic_id, x.partition FROM txn_partitions x WHERE x.transactional_id = p_transactional_id
        UNION ALL
        SELECT tp.topic_id, q.partition FROM unnest(p_topics, p_partitions) AS q(topic, partition)
        JOIN topics tp ON tp.name = q.topic)
    ORDER BY pt.topic_id, pt.partition
    FOR NO KEY UPDATE;
    -- The batches in the order given (a partition's batches follow one another in sequence), then
    -- EndTxn; any error rolls all of it back, the offsets included. The set-based append takes
    -- the common case of many batches whole (revision 0023); otherwise it writes nothing and
    -- produce_v2 decides each batch. One batch of a transaction sent earlier goes to produce_v2
    -- straight away: its simpler statements cost less than the set-based ones for a single batch.
    -- A whole transaction goes to the set-based append with its commit (revision 0024): the
    -- markers and spans are written with the records, so completing it writes no record.
    IF v_batches > 1 OR (v_whole AND v_batches > 0) THEN
        SELECT array_agg(a.base_offset ORDER BY a.b), array_agg(a.last_offset ORDER BY a.b),
               array_agg(a.log_append_time ORDER BY a.b)
        INTO base_offsets, last_offsets, log_append_times
        FROM append_batches_v2(p_producer_id, p_producer_epoch, p_transactional_id, p_txn_number, p_topics,
                               p_partitions, p_base_sequences, p_counts, p_keys, p_values, p_headers,
                               p_timestamps, v_whole) WITH ORDINALITY AS a(base_offset, last_offset, log_append_time, b);
    END IF;
    IF base_offsets IS NOT NULL THEN
        duplicates := array_fill(false, ARRAY[v_batches]);
        IF v_direct THEN
            -- Empty or complete to CompleteCommit with the next number: opened and committed.
            UPDATE transactions x SET state = 'CompleteCommit', txn_number = p_txn_number
            WHERE x.transactional_id = p_transactional_id;
            outcome := 'committed';
            RETURN;
        ELSIF v_whole THEN
            -- end_txn_v1's checks passed in txn_check_v1 under the lock still held, and the
            -- transaction opened in this database transaction (its timeout cannot have passed for
            -- anyone): only the completion is left, the pending offsets included.
            PERFORM txn_complete_v1(p_transactional_id, true);
            outcome := 'committed';
            RETURN;
        END IF;
        v_batches := 0;
    ELSIF v_direct THEN
        -- Not the common case: the batches go to produce_v2 in a transaction opened as usual.
        PERFORM txn_check_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true);
    END IF;
    FOR b IN 1 .. v_batches LOOP
        v_to := v_from + p_counts[b] - 1;
        SELECT * INTO r FROM produce_v2(p_topics[b], p_partitions[b], p_producer_id, p_producer_epoch,
                                        p_base_sequences[b], p_keys[v_from:v_to], p_values[v_from:v_to],
                                        p_headers[v_from:v_to], p_timestamps[v_from:v_to],
                                        p_transactional_id, p_txn_number);
        base_offsets := base_offsets || r.base_offset;
        last_offsets := last_offsets || r.last_offset;
        log_append_times := log_append_times || r.log_append_time;
        duplicates := duplicates || r.duplicate;
        v_from := v_to + 1;
    END LOOP;
    outcome := end_txn_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true);
END
$fn$;
COMMENT ON FUNCTION produce_end_txn_v2(p_transactional_id text, p_producer_id bigint, p_producer_epoch smallint, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_offset_topics text[], p_offset_partitions integer[], p_offsets bigint[], p_offset_metadata text[]) IS
  'A transaction''s commit in one database transaction and one round trip: its last batches for any number of partitions (produce_v2 each: batch b is p_counts[b] records of the concatenated keys/values/headers/timestamps, at p_base_sequences[b]), its consumer offsets (txn_offset_commit_v1, when p_group_id is given) and EndTxn (end_txn_v1): all or nothing. Returns each batch''s offsets and EndTxn''s outcome (committed; already_committed for a retry of a call that committed, with the batches'' original offsets and duplicates all true; timed_out when the transaction had passed its timeout and was aborted instead). Errors as produce_v2, txn_offset_commit_v1 and end_txn_v1.';

CREATE OR REPLACE FUNCTION headers_valid_v1(p_headers jsonb)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $fn$
    -- The one shape readers decode (oncelog.store.records.decode_headers): an array of objects
    -- with exactly "key" (a string) and "value" (standard base64 with padding, or null). The CASE
    -- keeps jsonb_object_keys away from elements that are not objects (it raises on them).
    SELECT p_headers IS NULL OR (jsonb_typeof(p_headers) = 'array' AND NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(p_headers) AS e(h)
        WHERE CASE WHEN jsonb_typeof(e.h) <> 'object' THEN true
                   ELSE NOT (e.h ?& ARRAY['key', 'value'])
                        OR (SELECT count(*) FROM jsonb_object_keys(e.h)) <> 2
                        OR jsonb_typeof(e.h -> 'key') <> 'string'
                        OR jsonb_typeof(e.h -> 'value') NOT IN ('string', 'null')
                        OR (jsonb_typeof(e.h -> 'value') = 'string'
                            AND (e.h ->> 'value') !~ '^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$')
              END))
$fn$;
COMMENT ON FUNCTION headers_valid_v1(p_headers jsonb) IS
  'Internal: whether a record''s headers have the stored shape [{"key": text, "value": base64 or null}, ...].';

CREATE OR REPLACE FUNCTION list_offsets_v1(p_topic text)
 RETURNS TABLE(partition integer, log_start_offset bigint, high_watermark bigint)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', ARRAY[p_topic], 'describe');
    END IF;
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
COMMENT ON FUNCTION list_offsets_v1(p_topic text) IS
  'ListOffsets: log start offset and high watermark of each partition of a topic.';

CREATE OR REPLACE FUNCTION unknown_partition_v1(p_topics text[], p_partitions integer[])
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_missing text;
BEGIN
    SELECT format('%s-%s', q.topic, q.partition) INTO v_missing
    FROM unnest(p_topics, p_partitions) AS q(topic, partition)
    WHERE NOT EXISTS (SELECT 1 FROM partitions pt JOIN topics t USING (topic_id)
                      WHERE t.name = q.topic AND pt.partition = q.partition)
    LIMIT 1;
    RETURN v_missing;
END
$fn$;
COMMENT ON FUNCTION unknown_partition_v1(p_topics text[], p_partitions integer[]) IS
  'Internal: the first of these partitions (topic-partition) that does not exist, else NULL.';

CREATE OR REPLACE FUNCTION readable_end_v1(p_topic_id integer, p_partition integer, p_next_offset bigint, p_read_committed boolean)
 RETURNS bigint
 LANGUAGE sql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
    -- The high watermark, or for read_committed the last stable offset: the first offset of the
    -- oldest open transaction that wrote to the partition, if below it.
    SELECT CASE WHEN p_read_committed
                THEN least(p_next_offset, (
                    SELECT min(xp.first_offset) FROM txn_partitions xp
                    JOIN transactions tx ON tx.transactional_id = xp.transactional_id
                    WHERE xp.topic_id = p_topic_id AND xp.partition = p_partition
                      AND xp.first_offset IS NOT NULL
                      AND tx.state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort')))
                ELSE p_next_offset END
$fn$;
COMMENT ON FUNCTION readable_end_v1(p_topic_id integer, p_partition integer, p_next_offset bigint, p_read_committed boolean) IS
  'Internal: where a reader of the isolation level stops in a partition whose next offset is p_next_offset: the high watermark, or for read_committed the last stable offset.';

CREATE OR REPLACE FUNCTION list_offsets_for_times_v1(p_topics text[], p_partitions integer[], p_timestamps timestamp with time zone[], p_read_committed boolean)
 RETURNS TABLE(idx integer, "offset" bigint, "timestamp" timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_n integer := coalesce(cardinality(p_topics), 0);
    v_bad text;
    i integer;
BEGIN
    IF v_n <> coalesce(cardinality(p_partitions), 0) OR v_n <> coalesce(cardinality(p_timestamps), 0) OR v_n > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = 'name 0 to 10000 partitions, each with a timestamp, as arrays of one length';
    END IF;
    IF p_read_committed IS NULL OR EXISTS (SELECT 1 FROM unnest(p_timestamps) ts WHERE ts IS NULL OR NOT isfinite(ts)) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = 'every partition needs a finite timestamp, and the isolation level must be named';
    END IF;
    -- Access control (revision 0009, docs/acl.md): ListOffsets needs DESCRIBE, as in Kafka.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', p_topics, 'describe');
    END IF;
    v_bad := unknown_partition_v1(p_topics, p_partitions);
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic or partition %s', v_bad);
    END IF;
    -- Per partition, the first data record from the log start whose timestamp is at or after the
    -- one asked for, below the high watermark, or for read_committed below the last stable offset
    -- and not aborted (a read_committed consumer could not read one past it). Timestamps need not
    -- grow with offsets, so this scans the partition in offset order to the answer: its cost is
    -- the records before it. No lock: the bounds are read first, and what lies below them is
    -- decided (see fetch_v3). No record: offset and timestamp NULL, as Kafka answers null.
    FOR i IN 1 .. v_n LOOP
        RETURN QUERY
        SELECT i, x."offset", x."timestamp"
        FROM partitions pt
        JOIN topics t ON t.topic_id = pt.topic_id
        LEFT JOIN LATERAL (
            SELECT r."offset", r."timestamp" FROM records r
            WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition
              AND r."offset" >= pt.log_start_offset
              AND r."offset" < readable_end_v1(pt.topic_id, pt.partition, pt.next_offset, p_read_committed)
              AND r.control_type IS NULL AND NOT (p_read_committed AND r.aborted)
              AND r."timestamp" >= p_timestamps[i]
            ORDER BY r."offset"
            LIMIT 1
        ) x ON true
        WHERE t.name = p_topics[i] AND pt.partition = p_partitions[i];
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION list_offsets_for_times_v1(p_topics text[], p_partitions integer[], p_timestamps timestamp with time zone[], p_read_committed boolean) IS
  'ListOffsets by timestamp (Kafka''s offsetsForTimes): per partition asked (idx, in order), the offset and timestamp of the first record from the log start whose timestamp is at or after the one given, below the high watermark, or for read_committed below the last stable offset and not aborted; NULL when there is none. Needs DESCRIBE on the topics. OL101 names an unknown topic or partition.';

CREATE OR REPLACE FUNCTION list_offsets_max_timestamp_v1(p_topics text[], p_partitions integer[], p_read_committed boolean)
 RETURNS TABLE(idx integer, "offset" bigint, "timestamp" timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_n integer := coalesce(cardinality(p_topics), 0);
    v_bad text;
    i integer;
BEGIN
    IF v_n <> coalesce(cardinality(p_partitions), 0) OR v_n > 10000 OR p_read_committed IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = 'name 0 to 10000 partitions as arrays of one length, and the isolation level';
    END IF;
    -- Access control (revision 0009, docs/acl.md): ListOffsets needs DESCRIBE, as in Kafka.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', p_topics, 'describe');
    END IF;
    v_bad := unknown_partition_v1(p_topics, p_partitions);
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic or partition %s', v_bad);
    END IF;
    -- Per partition, the data record with the largest timestamp (the first of equals, as Kafka's
    -- segments keep the offset of their largest timestamp so far) among those a reader of the
    -- isolation level could read: below the high watermark, or below the last stable offset and
    -- not aborted. Kafka answers "none" when that record lies past the last stable offset; this
    -- answers the largest below it, which a read_committed consumer can seek to. Nothing indexes
    -- timestamps, so this reads the whole partition. No lock, as list_offsets_for_times_v1.
    FOR i IN 1 .. v_n LOOP
        RETURN QUERY
        SELECT i, x."offset", x."timestamp"
        FROM partitions pt
        JOIN topics t ON t.topic_id = pt.topic_id
        LEFT JOIN LATERAL (
            SELECT r."offset", r."timestamp" FROM records r
            WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition
              AND r."offset" >= pt.log_start_offset
              AND r."offset" < readable_end_v1(pt.topic_id, pt.partition, pt.next_offset, p_read_committed)
              AND r.control_type IS NULL AND NOT (p_read_committed AND r.aborted)
            ORDER BY r."timestamp" DESC, r."offset"
            LIMIT 1
        ) x ON true
        WHERE t.name = p_topics[i] AND pt.partition = p_partitions[i];
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION list_offsets_max_timestamp_v1(p_topics text[], p_partitions integer[], p_read_committed boolean) IS
  'ListOffsets for the largest timestamp (Kafka''s MAX_TIMESTAMP, -3, KIP-734): per partition asked (idx, in order), the offset and timestamp of the data record with the largest timestamp (the first of equals) below the high watermark, or for read_committed below the last stable offset and not aborted; NULL when there is none. Needs DESCRIBE on the topics. OL101 names an unknown topic or partition.';

CREATE OR REPLACE FUNCTION fetch_v3(p_topics text[], p_partitions integer[], p_offsets bigint[], p_max_records integer, p_read_committed boolean)
 RETURNS TABLE(idx integer, "offset" bigint, key bytea, value bytea, headers jsonb, "timestamp" timestamp with time zone, producer_id bigint, producer_epoch smallint, sequence integer, bounds bigint[], error text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    i integer;
    v_topic_ids integer[];
    v_starts bigint[];
    v_ends bigint[];
    v_lsos bigint[];
    v_limits bigint[];
    v_expired boolean[];
    v_errors text[];
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', p_topics, 'read');
    END IF;
    -- Into arrays of this function's own: fields of a record variable measured ~30 us slower here.
    SELECT * INTO v_topic_ids, v_starts, v_ends, v_lsos, v_limits, v_expired, v_errors
    FROM fetch_bounds_v2(p_topics, p_partitions, p_offsets, p_max_records, p_read_committed);
    -- A loop of per-partition queries: one statement (a lateral join of each partition's row and
    -- records) measured no faster from a client.
    FOR i IN 1 .. coalesce(cardinality(p_topics), 0) LOOP
        RETURN QUERY SELECT i, NULL::bigint, NULL::bytea, NULL::bytea, NULL::jsonb, NULL::timestamptz,
            NULL::bigint, NULL::smallint, NULL::integer,
            ARRAY[v_starts[i], v_ends[i], v_lsos[i], v_limits[i], v_expired[i]::integer], v_errors[i];
        IF v_errors[i] IS NOT NULL THEN
            CONTINUE;
        END IF;
        -- Control records are never returned; read_committed also skips aborted records.
        RETURN QUERY
        SELECT i, x."offset", x.key, x.value, x.headers, x."timestamp", x.producer_id, x.producer_epoch,
               x.sequence, NULL::bigint[], NULL::text
        FROM records x
        WHERE x.topic_id = v_topic_ids[i] AND x.partition = p_partitions[i]
          AND x."offset" >= p_offsets[i] AND x."offset" < v_limits[i] AND x.control_type IS NULL
          AND NOT (p_read_committed AND x.aborted)
        ORDER BY x."offset"
        LIMIT p_max_records;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION fetch_v3(p_topics text[], p_partitions integer[], p_offsets bigint[], p_max_records integer, p_read_committed boolean) IS
  'Fetch many partitions in one snapshot. Per requested partition (idx = its 1-based position in the request) first a row with offset NULL and bounds = {log start, high watermark, last stable offset, the limit this read stopped at, 1 if an expired transaction holds it back} or an error (unknown_topic_or_partition, offset_out_of_range), then up to p_max_records records in offset order. read_committed stops at the last stable offset, skips aborted records, and returns a committed transaction on all the requested partitions or on none. Control records never appear.';

CREATE OR REPLACE FUNCTION fetch_bounds_v2(p_topics text[], p_partitions integer[], p_offsets bigint[], p_max_records integer, p_read_committed boolean, OUT topic_ids integer[], OUT log_start_offsets bigint[], OUT high_watermarks bigint[], OUT last_stable_offsets bigint[], OUT read_limits bigint[], OUT expired_open boolean[], OUT errors text[])
 RETURNS record
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
AS $fn$
DECLARE
    n integer := coalesce(cardinality(p_topics), 0);
    i integer;
    v_torn_possible boolean := false;
    v_scan_ends bigint[];
    v_cap bigint;
    ok_ids integer[];
    ok_parts integer[];
    ok_starts bigint[];
    ok_limits bigint[];
    ok_scan_ends bigint[];
    ok_index integer[];
    cut bigint[];
BEGIN
    IF cardinality(p_topics) IS DISTINCT FROM cardinality(p_partitions)
       OR cardinality(p_topics) IS DISTINCT FROM cardinality(p_offsets) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'topics, partitions and offsets differ in length';
    END IF;
    IF p_max_records IS NULL OR p_max_records < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'max records must be at least 1';
    END IF;
    -- Every partition in one statement: a statement per partition cost more in overhead than in
    -- lookups. Last stable offset: the first offset of the oldest open transaction, else the end
    -- (least() skips the NULL of a partition without one).
    SELECT array_agg(pt.topic_id ORDER BY q.i),
           array_agg(pt.log_start_offset ORDER BY q.i),
           array_agg(pt.next_offset ORDER BY q.i),
           array_agg(least(o.first_open, pt.next_offset) ORDER BY q.i),
           array_agg(CASE WHEN pt.topic_id IS NULL OR q.off IS NULL OR q.off < pt.log_start_offset
                               OR q.off > pt.next_offset THEN NULL
                          WHEN p_read_committed THEN least(o.first_open, pt.next_offset)
                          ELSE pt.next_offset END ORDER BY q.i),
           array_agg(coalesce(o.expired, false) ORDER BY q.i),
           array_agg(CASE WHEN pt.topic_id IS NULL THEN 'unknown_topic_or_partition'
                          WHEN q.off IS NULL OR q.off < pt.log_start_offset OR q.off > pt.next_offset
                          THEN 'offset_out_of_range' END ORDER BY q.i)
    INTO topic_ids, log_start_offsets, high_watermarks, last_stable_offsets, read_limits, expired_open, errors
    FROM unnest(p_topics, p_partitions, p_offsets) WITH ORDINALITY AS q(name, part, off, i)
    -- Lateral, with LIMIT 1 (name and partition are unique) so that it stays a subquery: as a
    -- plain join the kept plan hashed every partition of every topic (0.5 ms with 600).
    LEFT JOIN LATERAL (
        SELECT p.topic_id, p.log_start_offset, p.next_offset FROM topics t JOIN partitions p USING (topic_id)
        WHERE t.name = q.name AND p.partition = q.part
        LIMIT 1) pt ON true
    LEFT JOIN LATERAL (
        SELECT min(x.first_offset) AS first_open,
               bool_or(tx.txn_started_at + make_interval(secs => tx.timeout_ms / 1000.0) < clock_timestamp())
                   AS expired
        FROM txn_partitions x JOIN transactions tx USING (transactional_id)
        WHERE x.topic_id = pt.topic_id AND x.partition = q.part AND x.first_offset IS NOT NULL
          AND tx.state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort')) o ON true;
    FOR i IN 1 .. n LOOP
        -- An open transaction holds this partition back: a committed transaction read elsewhere
        -- may be above its last stable offset here.
        IF p_read_committed AND errors[i] IS NULL AND last_stable_offsets[i] < high_watermarks[i] THEN
            v_torn_possible := true;
        END IF;
    END LOOP;
    -- A committed transaction is returned on all of the requested partitions or on none. Only
    -- possible to break when some limit falls short of its partition's end.
    IF v_torn_possible THEN
        -- The record cap bounds which transactions this read can return (the scan end): only
        -- needed for the check below, so found only when it runs (it costs a second index scan).
        v_scan_ends := read_limits;
        FOR i IN 1 .. n LOOP
            IF errors[i] IS NULL THEN
                v_cap := NULL;
                SELECT r."offset" + 1 INTO v_cap FROM records r
                WHERE r.topic_id = topic_ids[i] AND r.partition = p_partitions[i]
                  AND r."offset" >= p_offsets[i] AND r."offset" < read_limits[i]
                  AND r.control_type IS NULL AND NOT r.aborted
                ORDER BY r."offset" OFFSET p_max_records - 1 LIMIT 1;
                v_scan_ends[i] := coalesce(v_cap, read_limits[i]);
            END IF;
        END LOOP;
        SELECT array_agg(topic_ids[j] ORDER BY j), array_agg(p_partitions[j] ORDER BY j),
               array_agg(p_offsets[j] ORDER BY j), array_agg(read_limits[j] ORDER BY j),
               array_agg(v_scan_ends[j] ORDER BY j), array_agg(j ORDER BY j)
        INTO ok_ids, ok_parts, ok_starts, ok_limits, ok_scan_ends, ok_index
        FROM generate_series(1, n) AS j WHERE errors[j] IS NULL;
        cut := consistent_limits_v1(ok_ids, ok_parts, ok_starts, ok_limits, ok_scan_ends);
        FOR i IN 1 .. coalesce(cardinality(ok_index), 0) LOOP
            read_limits[ok_index[i]] := cut[i];
        END LOOP;
    END IF;
END
$fn$;
COMMENT ON FUNCTION fetch_bounds_v2(p_topics text[], p_partitions integer[], p_offsets bigint[], p_max_records integer, p_read_committed boolean, OUT topic_ids integer[], OUT log_start_offsets bigint[], OUT high_watermarks bigint[], OUT last_stable_offsets bigint[], OUT read_limits bigint[], OUT expired_open boolean[], OUT errors text[]) IS
  'Internal (phase 1 of fetch_v3): one row of arrays, element i for requested partition i: its topic id, log start offset, high watermark, last stable offset, the limit this read stops at, whether an expired transaction holds it back, and its error (unknown_topic_or_partition, offset_out_of_range) if any.';

CREATE OR REPLACE FUNCTION consistent_limits_v1(p_topic_ids integer[], p_partitions integer[], p_starts bigint[], p_limits bigint[], p_scan_ends bigint[])
 RETURNS bigint[]
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_limits bigint[] := p_limits;
    v_changed boolean := true;
    v_cut bigint;
    i integer;
BEGIN
    -- Only a partition read short of its high watermark can leave a committed transaction torn:
    -- every record, and so every span's last record, lies below its partition's high watermark.
    -- With no such partition nothing is cut, and the records of the ranges need not be read (a
    -- whole topic's, for a Spark job's plan, where no transaction is open).
    IF NOT EXISTS (
        SELECT 1 FROM unnest(p_topic_ids, p_partitions, p_limits) AS o(topic_id, partition, lim)
        JOIN partitions pt ON pt.topic_id = o.topic_id AND pt.partition = o.partition
        WHERE o.lim < pt.next_offset) THEN
        RETURN p_limits;
    END IF;
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
$fn$;
COMMENT ON FUNCTION consistent_limits_v1(p_topic_ids integer[], p_partitions integer[], p_starts bigint[], p_limits bigint[], p_scan_ends bigint[]) IS
  'Read limits (at most p_limits, the last stable offsets) under which every committed transaction found in [start, scan end) is readable on all of the given partitions or on none.';

CREATE OR REPLACE FUNCTION fetch_v2(p_topics text[], p_partitions integer[], p_offsets bigint[], p_max_records integer, p_read_committed boolean)
 RETURNS TABLE(kind text, topic text, partition integer, "offset" bigint, key bytea, value bytea, headers jsonb, "timestamp" timestamp with time zone, producer_id bigint, producer_epoch smallint, sequence integer, log_start_offset bigint, high_watermark bigint, last_stable_offset bigint, read_limit bigint, expired_open boolean, error text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
    SELECT CASE WHEN f."offset" IS NULL THEN 'partition' ELSE 'record' END, p_topics[f.idx], p_partitions[f.idx],
           coalesce(f."offset", p_offsets[f.idx]), f.key, f.value, f.headers, f."timestamp", f.producer_id,
           f.producer_epoch, f.sequence, f.bounds[1], f.bounds[2], f.bounds[3], f.bounds[4],
           CASE WHEN f."offset" IS NULL THEN f.bounds[5] = 1 END, f.error
    FROM fetch_v3(p_topics, p_partitions, p_offsets, p_max_records, p_read_committed) f
    ORDER BY f.idx, f."offset" NULLS FIRST
$fn$;
COMMENT ON FUNCTION fetch_v2(p_topics text[], p_partitions integer[], p_offsets bigint[], p_max_records integer, p_read_committed boolean) IS
  'Fetch many partitions in one snapshot: per partition a ''partition'' row (log start, high watermark, last stable offset, the limit this read stopped at, whether an expired transaction holds it, or an error) then up to p_max_records records. read_committed stops at the last stable offset, skips aborted records, and returns a committed transaction on all the requested partitions or on none. Control records never appear.';

CREATE OR REPLACE FUNCTION fetch_v1(p_topic text, p_partition integer, p_offset bigint, p_max_records integer DEFAULT 500)
 RETURNS TABLE("offset" bigint, key bytea, value bytea, headers jsonb, "timestamp" timestamp with time zone, producer_id bigint, producer_epoch smallint, sequence integer, high_watermark bigint)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_topic_id integer;
    v_start bigint;
    v_end bigint;
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', ARRAY[p_topic], 'read');
    END IF;
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
COMMENT ON FUNCTION fetch_v1(p_topic text, p_partition integer, p_offset bigint, p_max_records integer) IS
  'Fetch (read_uncommitted): up to p_max_records data records from p_offset below the high watermark; OL108 if the offset is outside the log. Each row repeats the high watermark.';

CREATE OR REPLACE FUNCTION read_limits_v1(p_topics text[], p_partitions integer[], p_starts bigint[], p_limits bigint[])
 RETURNS TABLE(topic text, partition integer, read_limit bigint)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_ids integer[];
    v_missing text;
BEGIN
    IF cardinality(p_topics) IS DISTINCT FROM cardinality(p_partitions)
       OR cardinality(p_topics) IS DISTINCT FROM cardinality(p_starts)
       OR cardinality(p_topics) IS DISTINCT FROM cardinality(p_limits) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'topics, partitions, starts and limits differ in length';
    END IF;
    -- Access control (docs/acl.md), as in the protocol functions: one lookup while it is off.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', p_topics, 'read');
    END IF;
    SELECT x.name INTO v_missing
    FROM unnest(p_topics, p_starts, p_limits) AS x(name, start, lim)
    WHERE x.start IS NULL OR x.lim IS NULL OR x.start < 0 OR x.lim < x.start
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('a range of topic %L is not 0 <= start <= limit', v_missing);
    END IF;
    v_missing := unknown_partition_v1(p_topics, p_partitions);
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown partition %s', v_missing);
    END IF;
    SELECT array_agg(t.topic_id ORDER BY x.i) INTO v_ids
    FROM unnest(p_topics) WITH ORDINALITY AS x(name, i) JOIN topics t ON t.name = x.name;
    -- The limits are caps here (each range ends at its limit), hence limits passed as scan ends too.
    RETURN QUERY
    SELECT x.name, x.part, x.lim
    FROM unnest(p_topics, p_partitions,
                consistent_limits_v1(v_ids, p_partitions, p_starts, p_limits, p_limits)) AS x(name, part, lim);
END
$fn$;
COMMENT ON FUNCTION read_limits_v1(p_topics text[], p_partitions integer[], p_starts bigint[], p_limits bigint[]) IS
  'For ranges [start, limit) of partitions, limits are last stable offsets or below: the limits under which every committed transaction in them is read on all of these partitions or on none (planned reads, e.g. Spark). Needs topic READ when ACLs are enforced.';

CREATE OR REPLACE FUNCTION produce_batches_v1(p_producer_id bigint, p_producer_epoch smallint, p_transactional_id text, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[])
 RETURNS TABLE(base_offset bigint, last_offset bigint, log_append_time timestamp with time zone, duplicate boolean, error_code text, error_message text, wake text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
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
    -- transactions row (txn_check_v2 checks the producer id, epoch and transaction number under
    -- it, and opens the transaction; FOR SHARE once it is open, revision 0039), the producer row, then every partition of the request in
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
$fn$;
COMMENT ON FUNCTION produce_batches_v1(p_producer_id bigint, p_producer_epoch smallint, p_transactional_id text, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[]) IS
  'Produce up to 64 batches, to any partitions, in one database transaction (Kafka''s ProduceRequest): batch b is p_counts[b] records of the concatenated keys/values/headers/timestamps, at p_base_sequences[b], each appended as produce_v2 does. One row per batch, in order: its offsets (duplicate for a retry of an appended batch), or error_code/error_message when the store refused that batch (an OL code; nothing of it was appended, the others were), and wake, when a reader waits on its partition, the token that wakes it (topic_id:partition: NOTIFY the schema''s channel, wake_channel_v1(), with it). A malformed request, or any error that is not a refusal, fails the whole call.';

CREATE OR REPLACE FUNCTION producer_window_push_v1(p_producer_id bigint, p_epoch smallint, p_topic_ids integer[], p_partitions integer[], p_first_sequences integer[], p_counts integer[], p_first_offsets bigint[], p_now timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- The producer's sequence window in each partition: the last five batches of this epoch (a
    -- retry of any of them is a duplicate, rule 1); a new epoch starts a new window. Batch b
    -- appended p_counts[b] records at p_first_offsets[b] from sequence p_first_sequences[b], in
    -- partitions the caller holds, each named once. Rows in key order, as the lock order takes them.
    INSERT INTO producer_partition_state AS ps
        (producer_id, topic_id, partition, epoch, first_sequences, last_sequences,
         first_offsets, last_offsets, timestamps, updated_at)
    SELECT p_producer_id, q.topic_id, q.partition, p_epoch, ARRAY[q.seq],
           ARRAY[((q.seq::bigint + q.cnt - 1) % 2147483648)::integer], ARRAY[q.first], ARRAY[q.first + q.cnt - 1],
           ARRAY[p_now], p_now
    FROM unnest(p_topic_ids, p_partitions, p_first_sequences, p_counts, p_first_offsets) AS q(topic_id, partition, seq, cnt, first)
    ORDER BY q.topic_id, q.partition
    ON CONFLICT ON CONSTRAINT pk_producer_partition_state DO UPDATE SET
        epoch = EXCLUDED.epoch,
        first_sequences = CASE WHEN ps.epoch = EXCLUDED.epoch THEN ps.first_sequences[greatest(1, cardinality(ps.first_sequences) - 3):] ELSE '{}' END || EXCLUDED.first_sequences,
        last_sequences = CASE WHEN ps.epoch = EXCLUDED.epoch THEN ps.last_sequences[greatest(1, cardinality(ps.last_sequences) - 3):] ELSE '{}' END || EXCLUDED.last_sequences,
        first_offsets = CASE WHEN ps.epoch = EXCLUDED.epoch THEN ps.first_offsets[greatest(1, cardinality(ps.first_offsets) - 3):] ELSE '{}' END || EXCLUDED.first_offsets,
        last_offsets = CASE WHEN ps.epoch = EXCLUDED.epoch THEN ps.last_offsets[greatest(1, cardinality(ps.last_offsets) - 3):] ELSE '{}' END || EXCLUDED.last_offsets,
        timestamps = CASE WHEN ps.epoch = EXCLUDED.epoch THEN ps.timestamps[greatest(1, cardinality(ps.timestamps) - 3):] ELSE '{}' END || EXCLUDED.timestamps,
        updated_at = EXCLUDED.updated_at;
END
$fn$;
COMMENT ON FUNCTION producer_window_push_v1(p_producer_id bigint, p_epoch smallint, p_topic_ids integer[], p_partitions integer[], p_first_sequences integer[], p_counts integer[], p_first_offsets bigint[], p_now timestamp with time zone) IS
  'Internal: records appended batches in the producer''s five-batch sequence window of each partition (produce_v2, append_batches_v2).';

CREATE OR REPLACE FUNCTION append_batches_v2(p_producer_id bigint, p_producer_epoch smallint, p_transactional_id text, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_commit boolean)
 RETURNS TABLE(base_offset bigint, last_offset bigint, log_append_time timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
AS $fn$
-- The set-based append (revision 0023): every batch of a request in one statement per table, where
-- produce_v2 spends about fifteen statements on each batch. It takes the common case only: each
-- batch new and next in sequence, valid, and alone in its partition in this request. For anything
-- else it returns no row and appends nothing, and the caller runs the batches through produce_v2,
-- whose answers (a duplicate's offsets, a refusal's error) are the protocol's. So this function
-- decides only "append" or "not mine": no error of its own, and no rule written here a second time
-- except the checks that pick the common case.
--
-- Generic plans: PostgreSQL would otherwise re-plan these statements on every call (their custom
-- plans look cheaper, as they know the arrays' lengths), which cost a third of the function's time
-- in a 10-record commit; the plans do not depend on the lengths.
--
-- The caller holds, in the documented order, the transactions row (transactional requests: the
-- transaction open through txn_check_v2, held FOR SHARE once open, or with p_commit as below) and every partition of the
-- batches FOR NO KEY UPDATE, and has checked the request's shape: as many partitions, base
-- sequences and counts as topics, counts >= 1 that add up to the keys, values, headers and
-- timestamps given.
--
-- p_commit (revision 0024): these batches are the whole transaction, which the caller opens and
-- commits in its own database transaction (produce_end_txn_v2: with consumer offsets txn_check_v1
-- opened it and txn_complete_v1 completes it; without, the caller checked the owner and the epoch
-- under the producer row's lock, and moves the transactions row to CompleteCommit afterwards).
-- Each partition's commit marker goes into the same INSERT as the records, right after its batch,
-- the partition's offset moves once, and the transaction's spans are written here; the partitions
-- never join txn_partitions, as no other session can see the transaction open.
DECLARE
    v_txn boolean := p_transactional_id IS NOT NULL;
    v_commit boolean := coalesce(p_commit, false);
    v_n integer := cardinality(p_topics);
    v_now timestamptz := now();
    v_topic_ids integer[];
    v_next bigint[];
    v_starts bigint[];
    v_bytes bigint[];
    v_max_bytes integer[];
    v_after_max bigint[];
    v_ok boolean;
    v_epoch smallint;
    v_producer_tid text;
BEGIN
    IF (SELECT acl_settings.enforce FROM acl_settings)
       AND EXISTS (SELECT 1 FROM unnest(p_topics) q(topic) WHERE NOT acl_allowed_v1('topic', q.topic, 'write')) THEN
        RETURN;
    END IF;
    IF p_producer_id IS NULL THEN
        IF p_producer_epoch IS NOT NULL OR p_base_sequences IS NOT NULL OR v_txn THEN
            RETURN;
        END IF;
    ELSE
        IF p_producer_epoch IS NULL OR p_producer_epoch < 0 OR p_producer_epoch >= 32767 OR p_base_sequences IS NULL
           OR EXISTS (SELECT 1 FROM unnest(p_base_sequences) q WHERE q IS NULL OR q < 0) THEN
            RETURN;
        END IF;
        -- The caller's own producer row (owner in the WHERE clause), shared as in produce_v2.
        SELECT p.epoch, p.transactional_id INTO v_epoch, v_producer_tid FROM producers p
        WHERE p.producer_id = p_producer_id AND p.owner = acl_caller_v1()
        FOR SHARE;
        IF NOT FOUND OR v_epoch <> p_producer_epoch OR (NOT v_txn AND v_producer_tid IS NOT NULL) THEN
            RETURN;
        END IF;
    END IF;
    IF (v_txn AND p_txn_number IS NULL) OR (v_commit AND NOT v_txn) THEN
        RETURN;
    END IF;
    -- Each batch: its topic and partition exist, it is the only batch of its partition here, and
    -- it holds at most max_batch_records. The partition rows are the caller's, locked.
    SELECT bool_and(pt.partition IS NOT NULL AND q.cnt <= s.max_batch_records)
           AND count(DISTINCT (q.topic, q.partition)) = v_n,
           array_agg(t.topic_id ORDER BY q.b), array_agg(pt.next_offset ORDER BY q.b),
           array_agg(q.start ORDER BY q.b), array_agg(t.max_message_bytes ORDER BY q.b),
           array_agg(t.message_timestamp_after_max_ms ORDER BY q.b)
    INTO v_ok, v_topic_ids, v_next, v_starts, v_max_bytes, v_after_max
    FROM (SELECT u.*, sum(u.cnt) OVER (ORDER BY u.b) - u.cnt + 1 AS start
          FROM unnest(p_topics, p_partitions, p_counts) WITH ORDINALITY AS u(topic, partition, cnt, b)) q
    CROSS JOIN settings s
    LEFT JOIN topics t ON t.name = q.topic
    LEFT JOIN partitions pt ON pt.topic_id = t.topic_id AND pt.partition = q.partition;
    IF NOT coalesce(v_ok, false) THEN
        RETURN;
    END IF;
    -- A record without a key for a compacted topic is refused by the insert trigger, which would
    -- fail every batch of the request; produce_v2 refuses it for its own batch only (revision
    -- 0034). The probe of the topics table is all other requests pay.
    IF EXISTS (SELECT 1 FROM topics t WHERE t.topic_id = ANY (v_topic_ids) AND t.cleanup_policy <> 'delete')
       AND EXISTS (SELECT 1 FROM unnest(p_keys) WITH ORDINALITY AS r(k, o)
                   JOIN topics t ON t.topic_id = v_topic_ids[width_bucket(r.o, v_starts)]
                   WHERE r.k IS NULL AND t.cleanup_policy <> 'delete') THEN
        RETURN;
    END IF;
    -- Each record: no larger than its topic's max_message_bytes; headers of the one shape readers
    -- decode; timestamps within [1970, now + the topic's message_timestamp_after_max_ms] (the
    -- checks of produce_v2). Record o belongs to batch width_bucket(o, v_starts): a binary search
    -- of the batches' first ordinals. Bytes are summed per batch for the partitions' log_bytes.
    IF p_headers IS NULL AND p_timestamps IS NULL THEN
        SELECT bool_and(z.largest <= v_max_bytes[z.b]), array_agg(z.bytes ORDER BY z.b) INTO v_ok, v_bytes
        FROM (SELECT width_bucket(r.o, v_starts) AS b,
                     max(coalesce(octet_length(r.k), 0) + coalesce(octet_length(r.v), 0)) AS largest,
                     sum(coalesce(octet_length(r.k), 0) + coalesce(octet_length(r.v), 0)) AS bytes
              FROM unnest(p_keys, p_values) WITH ORDINALITY AS r(k, v, o) GROUP BY 1) z;
    ELSE
        SELECT bool_and(z.largest <= v_max_bytes[z.b] AND z.valid), array_agg(z.bytes ORDER BY z.b) INTO v_ok, v_bytes
        FROM (SELECT y.b, max(y.sz) AS largest, sum(y.sz) AS bytes,
                     bool_and(coalesce(headers_valid_v1(y.h), true)
                              AND (y.ts IS NULL OR (isfinite(y.ts) AND y.ts >= '1970-01-01 00:00:00+00'
                                                    AND y.ts < '10000-01-01 00:00:00+00'
                                                    AND extract(epoch FROM y.ts - v_now) * 1000 <= v_after_max[y.b]))) AS valid
              FROM (SELECT width_bucket(r.o, v_starts) AS b, r.h, r.ts,
                           coalesce(octet_length(r.k), 0) + coalesce(octet_length(r.v), 0)
                           + coalesce(octet_length(r.h::text), 0) AS sz
                    FROM unnest(p_keys, p_values,
                                coalesce(p_headers, array_fill(NULL::jsonb, ARRAY[cardinality(p_values)])),
                                coalesce(p_timestamps, array_fill(NULL::timestamptz, ARRAY[cardinality(p_values)])))
                         WITH ORDINALITY AS r(k, v, h, ts, o)) y
              GROUP BY y.b) z;
    END IF;
    IF NOT coalesce(v_ok, false) THEN
        RETURN;
    END IF;
    IF p_producer_id IS NOT NULL THEN
        -- The producer's sequence state of these partitions, locked in (topic_id, partition) order
        -- (the last lock of the order; expiry deletes these rows FOR UPDATE). Each batch must
        -- follow the last one of its epoch (or start at 0 in a new epoch, or with no state here),
        -- and be none of the five remembered: a retry is produce_v2's to answer.
        WITH q AS (
            SELECT u.topic_id, u.partition, u.seq
            FROM unnest(v_topic_ids, p_partitions, p_base_sequences) AS u(topic_id, partition, seq)
        ), locked AS (
            SELECT ps.topic_id, ps.partition, ps.epoch, ps.first_sequences,
                   ps.last_sequences[cardinality(ps.last_sequences)] AS last_seq
            FROM producer_partition_state ps
            WHERE ps.producer_id = p_producer_id AND (ps.topic_id, ps.partition) IN (SELECT q.topic_id, q.partition FROM q)
            ORDER BY ps.topic_id, ps.partition
            FOR UPDATE
        )
        SELECT bool_and(CASE WHEN l.epoch = p_producer_epoch
                             THEN q.seq = CASE WHEN l.last_seq = 2147483647 THEN 0 ELSE l.last_seq + 1 END
                                  AND q.seq <> ALL (l.first_sequences)
                             ELSE q.seq = 0 END)
        INTO v_ok
        FROM q LEFT JOIN locked l ON l.topic_id = q.topic_id AND l.partition = q.partition;
        IF NOT coalesce(v_ok, false) THEN
            RETURN;
        END IF;
    END IF;

    -- Every batch's records in one INSERT: batch b's record o at offset next[b] + (o - start[b]);
    -- with p_commit, batch b's commit marker at next[b] + count[b] in the same statement (the
    -- statement-level checks on records run once, not twice).
    IF p_headers IS NULL AND p_timestamps IS NULL THEN
        INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, sequence, is_transactional,
                             control_type, key, value, "timestamp", txn_number)
        SELECT v_topic_ids[r.b], p_partitions[r.b], v_next[r.b] + r.o - v_starts[r.b], p_producer_id, p_producer_epoch,
               CASE WHEN p_producer_id IS NOT NULL
                    THEN ((p_base_sequences[r.b]::bigint + r.o - v_starts[r.b]) % 2147483648)::integer END,
               v_txn, NULL, r.k, r.v, v_now, CASE WHEN v_txn THEN p_txn_number END
        FROM (SELECT u.k, u.v, u.o, width_bucket(u.o, v_starts) AS b
              FROM unnest(p_keys, p_values) WITH ORDINALITY AS u(k, v, o)) r
        UNION ALL
        SELECT v_topic_ids[m.b], p_partitions[m.b], v_next[m.b] + p_counts[m.b], p_producer_id, p_producer_epoch, NULL,
               true, 'commit', NULL, NULL, v_now, p_txn_number
        FROM generate_subscripts(p_topics, 1) AS m(b) WHERE v_commit;
    ELSE
        INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, sequence, is_transactional,
                             control_type, key, value, headers, "timestamp", txn_number)
        SELECT v_topic_ids[r.b], p_partitions[r.b], v_next[r.b] + r.o - v_starts[r.b], p_producer_id, p_producer_epoch,
               CASE WHEN p_producer_id IS NOT NULL
                    THEN ((p_base_sequences[r.b]::bigint + r.o - v_starts[r.b]) % 2147483648)::integer END,
               v_txn, NULL, r.k, r.v, r.h, coalesce(r.ts, v_now), CASE WHEN v_txn THEN p_txn_number END
        FROM (SELECT u.k, u.v, u.h, u.ts, u.o, width_bucket(u.o, v_starts) AS b
              FROM unnest(p_keys, p_values,
                          coalesce(p_headers, array_fill(NULL::jsonb, ARRAY[cardinality(p_values)])),
                          coalesce(p_timestamps, array_fill(NULL::timestamptz, ARRAY[cardinality(p_values)])))
                   WITH ORDINALITY AS u(k, v, h, ts, o)) r
        UNION ALL
        SELECT v_topic_ids[m.b], p_partitions[m.b], v_next[m.b] + p_counts[m.b], p_producer_id, p_producer_epoch, NULL,
               true, 'commit', NULL, NULL, NULL, v_now, p_txn_number
        FROM generate_subscripts(p_topics, 1) AS m(b) WHERE v_commit;
    END IF;
    UPDATE partitions pt SET next_offset = q.next + q.cnt + CASE WHEN v_commit THEN 1 ELSE 0 END,
                             log_bytes = pt.log_bytes + q.bytes
    FROM unnest(v_topic_ids, p_partitions, v_next, p_counts, v_bytes) AS q(topic_id, partition, next, cnt, bytes)
    WHERE pt.topic_id = q.topic_id AND pt.partition = q.partition;
    IF v_commit THEN
        -- The spans read_committed fetches test transactions against (consistent_limits_v1), as
        -- txn_complete_v1 writes them: each batch is the whole transaction in its partition.
        INSERT INTO txn_spans (producer_id, txn_number, topic_id, partition, first_offset, last_offset)
        SELECT p_producer_id, p_txn_number, q.topic_id, q.partition, q.next, q.next + q.cnt - 1
        FROM unnest(v_topic_ids, p_partitions, v_next, p_counts) AS q(topic_id, partition, next, cnt)
        ORDER BY q.topic_id, q.partition;
    ELSIF v_txn THEN
        -- The partitions join the transaction; a transaction's first offset in a partition holds
        -- the partition's last stable offset back.
        INSERT INTO txn_partitions AS x (transactional_id, topic_id, partition, first_offset)
        SELECT p_transactional_id, q.topic_id, q.partition, q.next
        FROM unnest(v_topic_ids, p_partitions, v_next) AS q(topic_id, partition, next)
        ORDER BY q.topic_id, q.partition
        ON CONFLICT ON CONSTRAINT pk_txn_partitions DO UPDATE SET first_offset = EXCLUDED.first_offset
        WHERE x.first_offset IS NULL;
    END IF;
    IF p_producer_id IS NOT NULL THEN
        PERFORM producer_window_push_v1(p_producer_id, p_producer_epoch, v_topic_ids, p_partitions, p_base_sequences,
                                        p_counts, v_next, v_now);
    END IF;
    RETURN QUERY SELECT q.next, q.next + q.cnt - 1, v_now
    FROM unnest(v_next, p_counts) WITH ORDINALITY AS q(next, cnt, b) ORDER BY q.b;
END
$fn$;
COMMENT ON FUNCTION append_batches_v2(p_producer_id bigint, p_producer_epoch smallint, p_transactional_id text, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_commit boolean) IS
  'Internal: appends every batch of a request (batch b: p_counts[b] records of the concatenated arrays, at p_base_sequences[b]) in one statement per table when each is new, next in sequence, valid and alone in its partition, returning one row per batch in order; otherwise no row and no write (the caller then runs produce_v2 per batch). The caller holds the transactions row (the transaction open, except with p_commit) and every partition row, in the documented order. p_commit: the batches are the whole transaction, opened and committed in the caller''s database transaction (produce_end_txn_v2): each partition''s commit marker and the transaction''s spans are written too, and txn_partitions is left alone; the caller then completes the transaction (one update of its row, or txn_complete_v1 when it carries consumer offsets).';

CREATE OR REPLACE FUNCTION produce_end_txn_v3(p_transactional_id text, p_producer_id bigint, p_producer_epoch smallint, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_offset_topics text[], p_offset_partitions integer[], p_offsets bigint[], p_offset_metadata text[], OUT base_offsets bigint[], OUT last_offsets bigint[], OUT log_append_times timestamp with time zone[], OUT duplicates boolean[], OUT outcome text, OUT wake text[])
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    SELECT * INTO base_offsets, last_offsets, log_append_times, duplicates, outcome
    FROM produce_end_txn_v2(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, p_topics, p_partitions,
                            p_base_sequences, p_counts, p_keys, p_values, p_headers, p_timestamps, p_group_id,
                            p_member_id, p_group_instance_id, p_generation, p_offset_topics, p_offset_partitions,
                            p_offsets, p_offset_metadata);
    IF outcome = 'committed' THEN
        wake := txn_waiters_v1(p_producer_id, p_txn_number);
    END IF;
END
$fn$;
COMMENT ON FUNCTION produce_end_txn_v3(p_transactional_id text, p_producer_id bigint, p_producer_epoch smallint, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_offset_topics text[], p_offset_partitions integer[], p_offsets bigint[], p_offset_metadata text[]) IS
  'produce_end_txn_v2, and the tokens (topic_id:partition) of the partitions of a commit on which a read_committed reader waits: the caller wakes them, outside this transaction, with a NOTIFY on the schema''s channel (wake_channel_v1()).';

CREATE OR REPLACE FUNCTION wake_channel_v1()
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- One channel per oncelog schema (a database may hold several), named by the schema's oid: a
    -- channel is an identifier of at most 63 bytes, which a schema name alone can fill.
    -- plpgsql, not sql (revision 0042): PostgreSQL 15 plans a non-inlined SQL function's query
    -- again in every transaction (30 us here), and every wake-up and registration asks.
    RETURN 'oncelog_wake_' || current_schema()::regnamespace::oid;
END
$fn$;
COMMENT ON FUNCTION wake_channel_v1() IS
  'The LISTEN/NOTIFY channel on which this schema''s waiting readers are woken: a producer NOTIFYs it with the wake tokens (topic_id:partition, comma-separated) a write answered with.';

CREATE OR REPLACE FUNCTION wake_notify_v1(p_tokens text[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_payload text;
BEGIN
    -- Wakes from inside the caller's transaction the readers of ``p_tokens``, for a write with no
    -- producer to send the NOTIFY after it (a record sent in the application's own transaction,
    -- revision 0023; an abort by a fence or a timeout, 0041). PostgreSQL delivers the NOTIFY at
    -- the commit and drops it with a rollback; the commit then waits for the server's
    -- notification lock, so only writes that found a reader waiting call this. Nothing on a
    -- server that can PREPARE TRANSACTION, which refuses to prepare a transaction that has
    -- notified: there the readers find the records by their own next look.
    IF current_setting('max_prepared_transactions')::integer > 0 THEN
        RETURN;
    END IF;
    FOR v_payload IN SELECT wake_payloads_v1(p_tokens) LOOP
        PERFORM pg_notify(wake_channel_v1(), v_payload);
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION wake_notify_v1(p_tokens text[]) IS
  'Internal: wakes the readers of these wake tokens with a NOTIFY delivered at the caller''s commit (the outbox''s flush, a fence''s abort); nothing on a server that allows PREPARE TRANSACTION.';

CREATE OR REPLACE FUNCTION wake_payloads_v1(p_tokens text[])
 RETURNS SETOF text
 LANGUAGE sql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $fn$
    -- Each token once, in payloads of 350 tokens at most: a token is at most 21 bytes
    -- (topic_id:partition, each at most 2147483647), so a payload stays under PostgreSQL's 8000.
    SELECT string_agg(c.token, ',' ORDER BY c.n)
    FROM (SELECT d.token, d.n, (d.n - 1) / 350 AS chunk
          FROM (SELECT u.token, row_number() OVER (ORDER BY u.token) AS n
                FROM (SELECT DISTINCT token FROM unnest(p_tokens) AS t(token) WHERE token IS NOT NULL) u) d) c
    GROUP BY c.chunk
    ORDER BY c.chunk
$fn$;
COMMENT ON FUNCTION wake_payloads_v1(p_tokens text[]) IS
  'Internal: the NOTIFY payloads that carry these wake tokens (each once, comma-separated, 350 to a payload).';

CREATE OR REPLACE FUNCTION wake_readers_v1(p_tokens text[])
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_n integer := coalesce(cardinality(p_tokens), 0);
    v_topic_ids integer[];
    v_partitions integer[];
    v_payload text;
    v_sent integer := 0;
BEGIN
    IF v_n > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('wake the readers of 0 to 10000 partitions at once, not %s', v_n);
    ELSIF v_n = 0 THEN
        RETURN 0;
    END IF;
    -- A malformed token parses to NULL (CASE: no cast runs on what the pattern refused). Only
    -- the canonical form, as writes answer it: readers match the NOTIFY's text, so '01:0' would
    -- end partition 1:0's registrations and wake nobody.
    SELECT array_agg(CASE WHEN u.token ~ '^(0|[1-9][0-9]{0,9}):(0|[1-9][0-9]{0,9})$'
                               AND split_part(u.token, ':', 1)::bigint <= 2147483647
                               AND split_part(u.token, ':', 2)::bigint <= 2147483647
                          THEN split_part(u.token, ':', 1)::integer END),
           array_agg(CASE WHEN u.token ~ '^(0|[1-9][0-9]{0,9}):(0|[1-9][0-9]{0,9})$'
                               AND split_part(u.token, ':', 2)::bigint <= 2147483647
                          THEN split_part(u.token, ':', 2)::integer END)
      INTO v_topic_ids, v_partitions
    FROM unnest(p_tokens) AS u(token);
    IF array_position(v_topic_ids, NULL) IS NOT NULL OR array_position(v_partitions, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = format(
            'a wake token is topic_id:partition, as a write answered it, not %s',
            coalesce(quote_literal(p_tokens[coalesce(array_position(v_topic_ids, NULL), array_position(v_partitions, NULL))]), 'NULL'));
    END IF;
    -- One-shot registrations (fetch_wait_v2) end here, in the transaction that NOTIFYs: every
    -- reader that made one hears this NOTIFY (it LISTENs since its registration committed), and
    -- registers again before it waits again; until then writers stop naming the partition, so a
    -- busy partition costs one NOTIFY per wait of its readers, not one per write. A row a reader
    -- is registering on right now is left alone (SKIP LOCKED: a wake-up never waits on a
    -- reader): its registration then holds for the next write, and the reader's fetch after it
    -- sees the write this wakes for. Lasting registrations (fetch_wait_v1) are not touched.
    UPDATE fetch_waiters w SET committed_once_until = NULL, uncommitted_once_until = NULL
    FROM (SELECT f.topic_id, f.partition
          FROM fetch_waiters f
          JOIN unnest(v_topic_ids, v_partitions) AS u(topic_id, partition)
            ON f.topic_id = u.topic_id AND f.partition = u.partition
          WHERE f.committed_once_until IS NOT NULL OR f.uncommitted_once_until IS NOT NULL
          ORDER BY f.topic_id, f.partition
          FOR UPDATE OF f SKIP LOCKED) d
    WHERE w.topic_id = d.topic_id AND w.partition = d.partition;
    IF v_n = 1 THEN  -- the common case, without the payloads' aggregate (any array bounds)
        PERFORM pg_notify(wake_channel_v1(), u.token) FROM unnest(p_tokens) AS u(token);
        RETURN 1;
    END IF;
    FOR v_payload IN SELECT wake_payloads_v1(p_tokens) LOOP
        PERFORM pg_notify(wake_channel_v1(), v_payload);
        v_sent := v_sent + 1;
    END LOOP;
    RETURN v_sent;
END
$fn$;
COMMENT ON FUNCTION wake_readers_v1(p_tokens text[]) IS
  'Wakes the readers waiting on the partitions of these wake tokens (topic_id:partition, as a write answered them): NOTIFYs the schema''s channel (wake_channel_v1()) with them, and ends the one-shot registrations (fetch_wait_v2) they answered, so later writes do not name those partitions until their readers register again. Call it after the write committed, in a transaction of its own: the NOTIFY is delivered at its commit. Answers the NOTIFYs sent (350 tokens to a payload). Tokens in their canonical form only, at most 10000. Any client may wake any partition''s readers: each reader woken fetches, and registers again if it then finds nothing.';

CREATE OR REPLACE FUNCTION fetch_waiting_v1(p_topic text, p_partition integer, p_committed boolean, p_uncommitted boolean)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_token text;
BEGIN
    SELECT t.topic_id || ':' || w.partition INTO v_token
    FROM fetch_waiters w JOIN topics t ON t.topic_id = w.topic_id
    WHERE t.name = p_topic AND w.partition = p_partition
      AND ((p_committed AND greatest(w.committed_until, w.committed_once_until) > server_now_v1())
           OR (p_uncommitted AND greatest(w.uncommitted_until, w.uncommitted_once_until) > server_now_v1()));
    RETURN v_token;
END
$fn$;
COMMENT ON FUNCTION fetch_waiting_v1(p_topic text, p_partition integer, p_committed boolean, p_uncommitted boolean) IS
  'Internal: the wake token (topic_id:partition) of a partition on which a read_committed (p_committed) or read_uncommitted (p_uncommitted) reader waits now; NULL if none does.';

CREATE OR REPLACE FUNCTION txn_waiters_v1(p_producer_id bigint, p_txn_number bigint)
 RETURNS text[]
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_tokens text[];
BEGIN
    -- The partitions a committed transaction wrote to (its spans) on which a read_committed
    -- reader waits. Called right after the commit, under the partitions' locks it took.
    SELECT array_agg(s.topic_id || ':' || s.partition ORDER BY s.topic_id, s.partition) INTO v_tokens
    FROM txn_spans s
    JOIN fetch_waiters w ON w.topic_id = s.topic_id AND w.partition = s.partition
    WHERE s.producer_id = p_producer_id AND s.txn_number = p_txn_number
      AND greatest(w.committed_until, w.committed_once_until) > server_now_v1();
    RETURN v_tokens;
END
$fn$;
COMMENT ON FUNCTION txn_waiters_v1(p_producer_id bigint, p_txn_number bigint) IS
  'Internal: the wake tokens (topic_id:partition) of the partitions of a just committed transaction on which a read_committed reader waits.';

CREATE OR REPLACE FUNCTION txn_abort_waiters_v1(p_producer_id bigint, p_txn_number bigint)
 RETURNS text[]
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_tokens text[];
BEGIN
    -- The partitions a just aborted transaction wrote to on which a read_committed reader waits.
    -- The abort makes none of its own records readable, but its open transaction held each of
    -- those partitions' last stable offset back: records committed behind it (other producers'
    -- transactions, idempotent appends) become readable with the abort, as with a commit.
    -- Called right after the abort, under the partition locks it took, so the abort's marker is
    -- each such partition's last record (next_offset - 1). The producer's sequence states name
    -- every partition it appended to (an index range of the primary key), and only those with
    -- a reader waiting are looked at further, each by primary key.
    SELECT array_agg(ps.topic_id || ':' || ps.partition ORDER BY ps.topic_id, ps.partition) INTO v_tokens
    FROM producer_partition_state ps
    JOIN fetch_waiters w ON w.topic_id = ps.topic_id AND w.partition = ps.partition
    JOIN partitions pt ON pt.topic_id = ps.topic_id AND pt.partition = ps.partition
    JOIN records r ON r.topic_id = pt.topic_id AND r.partition = pt.partition AND r."offset" = pt.next_offset - 1
    WHERE ps.producer_id = p_producer_id AND greatest(w.committed_until, w.committed_once_until) > server_now_v1()
      AND r.control_type = 'abort' AND r.producer_id = p_producer_id AND r.txn_number = p_txn_number;
    RETURN v_tokens;
END
$fn$;
COMMENT ON FUNCTION txn_abort_waiters_v1(p_producer_id bigint, p_txn_number bigint) IS
  'Internal: the wake tokens (topic_id:partition) of the partitions of a just aborted transaction on which a read_committed reader waits (the abort moved their last stable offsets on).';

CREATE OR REPLACE FUNCTION fetch_wait_register_v1(p_topics text[], p_partitions integer[], p_read_committed boolean, p_wait_ms integer, p_once boolean)
 RETURNS TABLE(channel text, topic text, topic_id integer)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_channel text := wake_channel_v1();
    v_until timestamptz;
    v_lock_timeout text;
BEGIN
    IF coalesce(cardinality(p_topics), 0) <> coalesce(cardinality(p_partitions), 0)
       OR coalesce(cardinality(p_topics), 0) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'name 0 to 10000 partitions, as topics and partitions of one length';
    END IF;
    IF p_read_committed IS NULL OR p_wait_ms IS NULL OR p_wait_ms < 0 OR p_wait_ms > 300000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('a wait names its isolation and lasts 0 to 300000 ms, not %s', p_wait_ms);
    END IF;
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', p_topics, 'read');
    END IF;
    -- This transaction writes only the unlogged waiters and takes row locks: nothing a crash
    -- must keep, so its commit does not wait for a WAL flush (until the end of this transaction).
    PERFORM set_config('synchronous_commit', 'off', true);
    v_until := server_now_v1() + make_interval(secs => p_wait_ms / 1000.0);
    -- A lasting registration (p_once false, fetch_wait_v1) holds until its time is up; a
    -- one-shot one (fetch_wait_v2) also ends with the first wake-up sent for it (wake_readers_v1).
    -- The upsert waits for a row another session holds: a reader registering (milliseconds), or
    -- anyone who keeps a transaction open after wake_readers_v1 or this function, which any
    -- client may do. Bounded as the wait below (revision 0042): past it nothing is registered,
    -- the answer has no rows, and the reader finds the records by its own looks.
    v_lock_timeout := current_setting('lock_timeout');
    BEGIN
        PERFORM set_config('lock_timeout', '250ms', true);
        INSERT INTO fetch_waiters AS w
            (topic_id, partition, committed_until, uncommitted_until, committed_once_until, uncommitted_once_until)
        SELECT DISTINCT t.topic_id, q.partition,
               CASE WHEN p_read_committed AND NOT p_once THEN v_until END,
               CASE WHEN NOT p_read_committed AND NOT p_once THEN v_until END,
               CASE WHEN p_read_committed AND p_once THEN v_until END,
               CASE WHEN NOT p_read_committed AND p_once THEN v_until END
        FROM unnest(p_topics, p_partitions) AS q(topic, partition)
        JOIN topics t ON t.name = q.topic
        JOIN partitions pt ON pt.topic_id = t.topic_id AND pt.partition = q.partition
        ORDER BY 1, 2
        ON CONFLICT ON CONSTRAINT pk_fetch_waiters DO UPDATE SET
            committed_until = greatest(w.committed_until, EXCLUDED.committed_until),
            uncommitted_until = greatest(w.uncommitted_until, EXCLUDED.uncommitted_until),
            committed_once_until = greatest(w.committed_once_until, EXCLUDED.committed_once_until),
            uncommitted_once_until = greatest(w.uncommitted_once_until, EXCLUDED.uncommitted_once_until);
        PERFORM set_config('lock_timeout', v_lock_timeout, true);
    EXCEPTION WHEN lock_not_available THEN
        RETURN;  -- the subtransaction's rollback restores lock_timeout
    END;
    -- An append checks for waiters under its partition's lock (produce_batches_v1, the commits).
    -- Wait here until the appends holding these partitions now have finished: they committed
    -- before the caller's next fetch (which then sees them), and every later one sees this
    -- registration and wakes the caller. FOR SHARE is the row lock that conflicts with an
    -- append's; it is taken in the lock order and released at once (the subtransaction rolls
    -- back), so no reader holds up a writer beyond that. The wait is bounded (revision 0023):
    -- an append holds a partition for milliseconds, but a prepared transaction (PREPARE
    -- TRANSACTION after oncelog.send) holds it until it is resolved, and a reader must not hang
    -- on it. Past the bound the reader registers all the same and, for the appends it did not
    -- wait out, relies on its own next look, as for the window described in docs/design.md.
    BEGIN
        PERFORM set_config('lock_timeout', '250ms', true);  -- undone with the subtransaction
        PERFORM 1 FROM partitions pt JOIN topics t ON t.topic_id = pt.topic_id
        WHERE (t.name, pt.partition) IN (SELECT q.topic, q.partition FROM unnest(p_topics, p_partitions) AS q(topic, partition))
        ORDER BY pt.topic_id, pt.partition
        FOR SHARE OF pt;
        RAISE EXCEPTION USING ERRCODE = 'OLW00', MESSAGE = 'release the locks';
    EXCEPTION WHEN SQLSTATE 'OLW00' OR lock_not_available THEN
        NULL;
    END;
    EXECUTE format('LISTEN %I', v_channel);
    RETURN QUERY SELECT v_channel, t.name, t.topic_id FROM topics t WHERE t.name = ANY(p_topics) ORDER BY t.topic_id;
END
$fn$;
COMMENT ON FUNCTION fetch_wait_register_v1(p_topics text[], p_partitions integer[], p_read_committed boolean, p_wait_ms integer, p_once boolean) IS
  'Internal: registers a reader''s wait (fetch_wait_v1 lasting, fetch_wait_v2 one-shot), waits for the appends in flight on the partitions, LISTENs, and answers the channel and the topics'' ids; no rows when a session held the registration rows past 250 ms (nothing registered).';

CREATE OR REPLACE FUNCTION fetch_wait_v1(p_topics text[], p_partitions integer[], p_read_committed boolean, p_wait_ms integer)
 RETURNS TABLE(channel text, topic text, topic_id integer)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
    SELECT * FROM fetch_wait_register_v1(p_topics, p_partitions, p_read_committed, p_wait_ms, false)
$fn$;
COMMENT ON FUNCTION fetch_wait_v1(p_topics text[], p_partitions integer[], p_read_committed boolean, p_wait_ms integer) IS
  'A reader about to wait for records on these partitions (read_committed: for commits; otherwise for appends): registers the wait for p_wait_ms (up to 5 minutes), waits for the appends in flight on them to finish, and LISTENs on the schema''s channel, returned with the topics'' ids. A write that lands on a waited-on partition answers its producer with the partition''s wake token (topic_id:partition), which the producer NOTIFYs on the channel, outside the write''s transaction. The caller then fetches once more before it waits: what committed before the registration is seen by that fetch, what commits after it wakes the caller.';

CREATE OR REPLACE FUNCTION fetch_wait_v2(p_topics text[], p_partitions integer[], p_read_committed boolean, p_wait_ms integer)
 RETURNS TABLE(channel text, topic text, topic_id integer)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
    SELECT * FROM fetch_wait_register_v1(p_topics, p_partitions, p_read_committed, p_wait_ms, true)
$fn$;
COMMENT ON FUNCTION fetch_wait_v2(p_topics text[], p_partitions integer[], p_read_committed boolean, p_wait_ms integer) IS
  'fetch_wait_v1, for one wait: the registration ends with the first wake-up sent for it (wake_readers_v1) or after p_wait_ms, whichever comes first, so writers stop naming the partitions once their readers have been woken. A reader registers again before it waits again. Writes answer with the partition''s wake token while it holds, as for fetch_wait_v1.';
