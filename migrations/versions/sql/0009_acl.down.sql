DROP POLICY IF EXISTS txn_history_acl ON txn_history;
ALTER TABLE txn_history DISABLE ROW LEVEL SECURITY;

CREATE OR REPLACE VIEW partition_offsets AS
SELECT t.name AS topic, p.partition, p.log_start_offset, p.next_offset AS high_watermark,
       least(p.next_offset, o.first_open_offset) AS last_stable_offset,
       coalesce(o.open_transactions, 0) AS open_transactions, p.log_bytes, p.topic_id
FROM partitions p
JOIN topics t USING (topic_id)
LEFT JOIN LATERAL (
    SELECT min(x.first_offset) AS first_open_offset, count(*) AS open_transactions
    FROM txn_partitions x JOIN transactions tx USING (transactional_id)
    WHERE x.topic_id = p.topic_id AND x.partition = p.partition AND x.first_offset IS NOT NULL
      AND tx.state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort')
) o ON true;

ALTER VIEW partition_offsets RESET (security_barrier);

CREATE OR REPLACE VIEW committed_records AS
SELECT o.topic, r.partition, r."offset", r.key, r.value, r.headers, r."timestamp", r.producer_id
FROM records r
JOIN partition_offsets o ON o.topic_id = r.topic_id AND o.partition = r.partition
WHERE r.control_type IS NULL AND NOT r.aborted AND r."offset" < o.last_stable_offset
  AND r."offset" >= o.log_start_offset;

ALTER VIEW committed_records RESET (security_barrier);

CREATE OR REPLACE VIEW transaction_status AS
SELECT x.transactional_id, x.state, x.producer_id, p.epoch AS producer_epoch, x.txn_number, x.timeout_ms,
       x.txn_started_at, now() - x.txn_started_at AS age,
       coalesce(x.txn_started_at + make_interval(secs => x.timeout_ms / 1000.0) < now(), false) AS expired,
       coalesce((SELECT array_agg(format('%s-%s@%s', t.name, tp.partition, coalesce(tp.first_offset::text, '-'))
                                  ORDER BY t.name, tp.partition)
                 FROM txn_partitions tp JOIN topics t USING (topic_id)
                 WHERE tp.transactional_id = x.transactional_id), '{}') AS partitions,
       x.updated_at
FROM transactions x JOIN producers p ON p.producer_id = x.producer_id;

ALTER VIEW transaction_status RESET (security_barrier);

CREATE OR REPLACE VIEW group_status AS
SELECT g.group_id, g.state, g.generation, g.assignor, m.member_id, m.group_instance_id, m.client_id,
       m.subscription, m.last_heartbeat_at,
       m.last_heartbeat_at + make_interval(secs => m.session_timeout_ms / 1000.0) < now() AS expired,
       (SELECT array_agg(format('%s-%s', t.name, a.partition) ORDER BY t.name, a.partition)
        FROM member_assignments a JOIN topics t USING (topic_id)
        WHERE a.group_id = g.group_id AND a.member_id = m.member_id) AS assignment
FROM groups g LEFT JOIN group_members m USING (group_id);

ALTER VIEW group_status RESET (security_barrier);

CREATE OR REPLACE VIEW group_offsets AS
SELECT c.group_id, o.topic, c.partition, c.committed_offset, c.metadata, c.committed_at,
       o.high_watermark, o.last_stable_offset,
       greatest(o.high_watermark - c.committed_offset, 0) AS lag,
       greatest(o.last_stable_offset - c.committed_offset, 0) AS lag_committed,
       c.producer_id AS committed_by_producer_id
FROM committed_offsets c
JOIN partition_offsets o ON o.topic_id = c.topic_id AND o.partition = c.partition;

ALTER VIEW group_offsets RESET (security_barrier);

CREATE OR REPLACE VIEW pending_group_offsets AS
SELECT po.group_id, t.name AS topic, po.partition, po.committed_offset, po.transactional_id, po.producer_id,
       po.generation, po.member_id, tx.state AS transaction_state, tx.txn_started_at
FROM pending_offsets po
JOIN topics t USING (topic_id)
JOIN transactions tx USING (transactional_id);

ALTER VIEW pending_group_offsets RESET (security_barrier);

CREATE OR REPLACE FUNCTION fetch_v1(p_topic text, p_partition integer, p_offset bigint, p_max_records integer DEFAULT 500)
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

CREATE OR REPLACE FUNCTION list_offsets_v1(p_topic text)
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

CREATE OR REPLACE FUNCTION produce_v2(
    p_topic text,
    p_partition integer,
    p_producer_id bigint,
    p_producer_epoch smallint,
    p_base_sequence integer,
    p_keys bytea[],
    p_values bytea[],
    p_headers jsonb[] DEFAULT NULL,
    p_timestamps timestamptz[] DEFAULT NULL,
    p_transactional_id text DEFAULT NULL,
    p_txn_number bigint DEFAULT NULL
)
RETURNS TABLE (base_offset bigint, last_offset bigint, log_append_time timestamptz, duplicate boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_n integer := cardinality(p_values);
    v_txn boolean := p_transactional_id IS NOT NULL;
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
    ELSIF p_producer_epoch IS NULL OR p_base_sequence IS NULL OR p_base_sequence < 0 OR p_producer_epoch < 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = format('an idempotent batch needs an epoch and a base sequence >= 0 (got epoch %s, sequence %s)',
                             p_producer_epoch, p_base_sequence);
    END IF;
    IF v_txn AND p_txn_number IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107', MESSAGE = 'a transactional batch names its transaction number';
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
        IF NOT v_txn AND EXISTS (
            SELECT 1 FROM transactions t JOIN txn_partitions x USING (transactional_id)
            WHERE t.producer_id = p_producer_id AND t.state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort')
              AND x.topic_id = v_topic_id AND x.partition = p_partition) THEN
            -- Kafka's rule: no plain write beside the producer's own open transaction.
            RAISE EXCEPTION USING ERRCODE = 'OL303',
                MESSAGE = format('producer %s has a transaction open on %s-%s: a non-transactional write is refused',
                                 p_producer_id, p_topic, p_partition);
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
$fn$;

CREATE OR REPLACE FUNCTION init_transactional_producer_id_v1(
    p_transactional_id text, p_timeout_ms integer, p_producer_id bigint DEFAULT NULL, p_epoch smallint DEFAULT NULL)
RETURNS TABLE (producer_id bigint, producer_epoch smallint, txn_number bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    t transactions%ROWTYPE;
    pr producers%ROWTYPE;
    v_pid bigint;
    v_prev bigint;
    v_fenced boolean := false;
    v_max bigint := (SELECT s.transaction_max_timeout_ms FROM settings s);
BEGIN
    IF p_transactional_id IS NULL OR length(p_transactional_id) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'a transactional id is 1 to 255 characters';
    END IF;
    IF p_timeout_ms IS NULL OR p_timeout_ms <= 0 OR p_timeout_ms > v_max THEN
        RAISE EXCEPTION USING ERRCODE = 'OL304',
            MESSAGE = format('transaction timeout %s ms is outside (0, %s]', p_timeout_ms, v_max);
    END IF;
    IF (p_producer_id IS NULL) <> (p_epoch IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'give both the producer id and its epoch, or neither';
    END IF;
    LOOP
        SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR UPDATE;
        EXIT WHEN FOUND;
        -- First use of this transactional id. Two first initialisations race on the unique
        -- transactional id: the loser inserts nothing and loops to lock the winner's row.
        INSERT INTO producers AS p (transactional_id) VALUES (p_transactional_id)
        ON CONFLICT (transactional_id) DO NOTHING
        RETURNING p.producer_id INTO v_pid;
        IF v_pid IS NOT NULL THEN
            INSERT INTO transactions (transactional_id, producer_id, timeout_ms)
            VALUES (p_transactional_id, v_pid, p_timeout_ms);
            RETURN QUERY SELECT v_pid, 0::smallint, 0::bigint;
            RETURN;
        END IF;
        PERFORM pg_sleep(0.001);
    END LOOP;

    IF t.state IN ('PrepareCommit', 'PrepareAbort') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL305', MESSAGE = format('transaction of %L is completing', p_transactional_id);
    END IF;
    SELECT * INTO pr FROM producers p WHERE p.producer_id = t.producer_id FOR UPDATE;
    v_prev := t.prev_producer_id;

    IF p_producer_id IS NOT NULL AND t.state <> 'Dead' THEN
        -- KIP-360: the caller names the identity it holds.
        IF p_producer_id = t.prev_producer_id AND t.state <> 'Ongoing' AND EXISTS (
            SELECT 1 FROM producers old WHERE old.producer_id = p_producer_id AND old.epoch = p_epoch AND p_epoch >= 32766) THEN
            -- A retried bump that moved an exhausted epoch to a new producer id: the same answer.
            UPDATE transactions x SET timeout_ms = p_timeout_ms WHERE x.transactional_id = p_transactional_id;
            RETURN QUERY SELECT pr.producer_id, pr.epoch, t.txn_number;
            RETURN;
        END IF;
        IF p_producer_id <> t.producer_id THEN
            RAISE EXCEPTION USING ERRCODE = 'OL301',
                MESSAGE = format('transactional id %L is now served by another producer id', p_transactional_id);
        END IF;
        IF p_epoch = pr.last_epoch AND p_epoch <> pr.epoch THEN
            -- A retried bump, or the holder of an epoch fenced by a timeout: the current identity,
            -- unless another instance has started a transaction with it meanwhile.
            IF t.state = 'Ongoing' THEN
                RAISE EXCEPTION USING ERRCODE = 'OL301',
                    MESSAGE = format('transactional id %L: epoch %s is in use by another instance', p_transactional_id, pr.epoch);
            END IF;
            IF pr.epoch < 32766 THEN
                UPDATE transactions x SET timeout_ms = p_timeout_ms WHERE x.transactional_id = p_transactional_id;
                RETURN QUERY SELECT pr.producer_id, pr.epoch, t.txn_number;
                RETURN;
            END IF;
            -- The current epoch is exhausted (or the fencing epoch): a new producer id below.
        ELSIF p_epoch <> pr.epoch THEN
            RAISE EXCEPTION USING ERRCODE = 'OL301',
                MESSAGE = format('transactional id %L: epoch %s is fenced by epoch %s', p_transactional_id, p_epoch, pr.epoch);
        END IF;
    END IF;

    -- Bump. An open transaction of the old epoch is aborted first, with a fencing epoch: once this
    -- commits, no call of the old epoch can land (they all check the epoch under the row lock).
    IF t.state = 'Ongoing' THEN
        PERFORM txn_fence_abort_v1(p_transactional_id, false);
        SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id;
        SELECT * INTO pr FROM producers p WHERE p.producer_id = t.producer_id;
        v_prev := t.prev_producer_id;
        v_fenced := true;
    END IF;
    IF t.state = 'Dead' OR pr.epoch >= 32766 THEN
        -- An expired transactional id, or an exhausted epoch (32767 is never handed out): a new
        -- producer id at epoch 0. The old id is retired (the deferred key lets both rows change
        -- in this transaction) and remembered, so a retry of this call is recognised.
        v_prev := pr.producer_id;
        UPDATE producers p SET transactional_id = NULL WHERE p.producer_id = pr.producer_id;
        INSERT INTO producers AS p (transactional_id) VALUES (p_transactional_id) RETURNING * INTO pr;
    ELSIF v_fenced THEN
        -- The fence's epoch is this instance's; a retry of this call with the caller's old
        -- identity is recognised through last_epoch.
        IF p_producer_id IS NOT NULL THEN
            UPDATE producers p SET last_epoch = p_epoch WHERE p.producer_id = pr.producer_id;
        END IF;
    ELSE
        UPDATE producers p
        SET epoch = pr.epoch + 1, last_epoch = CASE WHEN p_producer_id IS NOT NULL THEN pr.epoch END, last_used_at = now()
        WHERE p.producer_id = pr.producer_id
        RETURNING * INTO pr;
    END IF;
    -- One update for the state and the (possibly new) producer id: one journalled transition.
    UPDATE transactions x
    SET state = 'Empty', producer_id = pr.producer_id, prev_producer_id = v_prev, timeout_ms = p_timeout_ms
    WHERE x.transactional_id = p_transactional_id
    RETURNING * INTO t;
    RETURN QUERY SELECT pr.producer_id, pr.epoch, t.txn_number;
END
$fn$;

CREATE OR REPLACE FUNCTION add_partitions_to_txn_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint,
                                         p_txn_number bigint, p_topics text[], p_partitions integer[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_missing text;
BEGIN
    IF cardinality(p_topics) IS DISTINCT FROM cardinality(p_partitions) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'topics and partitions differ in length';
    END IF;
    PERFORM txn_check_v1(p_transactional_id, p_producer_id, p_epoch, p_txn_number, true);
    SELECT format('%s-%s', r.topic, r.partition) INTO v_missing
    FROM unnest(p_topics, p_partitions) AS r(topic, partition)
    WHERE NOT EXISTS (SELECT 1 FROM partitions pt JOIN topics tp USING (topic_id)
                      WHERE tp.name = r.topic AND pt.partition = r.partition)
    LIMIT 1;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown partition %s', v_missing);
    END IF;
    INSERT INTO txn_partitions (transactional_id, topic_id, partition)
    SELECT p_transactional_id, tp.topic_id, r.partition
    FROM unnest(p_topics, p_partitions) AS r(topic, partition) JOIN topics tp ON tp.name = r.topic
    ORDER BY tp.topic_id, r.partition
    ON CONFLICT DO NOTHING;
END
$fn$;

CREATE OR REPLACE FUNCTION end_txn_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint,
                           p_txn_number bigint, p_commit boolean)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    t transactions%ROWTYPE;
    pr producers%ROWTYPE;
    v_want text := CASE WHEN p_commit THEN 'CompleteCommit' ELSE 'CompleteAbort' END;
BEGIN
    IF p_commit IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'commit or abort?';
    END IF;
    SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR UPDATE;
    IF NOT FOUND OR t.state = 'Dead' OR t.producer_id IS DISTINCT FROM p_producer_id THEN
        RAISE EXCEPTION USING ERRCODE = 'OL302',
            MESSAGE = format('producer id %s does not serve transactional id %L', p_producer_id, p_transactional_id);
    END IF;
    SELECT * INTO pr FROM producers p WHERE p.producer_id = t.producer_id;
    IF p_epoch IS DISTINCT FROM pr.epoch THEN
        IF p_epoch = pr.last_epoch AND NOT p_commit AND t.state = 'CompleteAbort' AND t.txn_number = p_txn_number THEN
            -- Aborted by its timeout (a reader or maintenance got there first): the holder's abort
            -- is satisfied, and it must re-initialise (KIP-360) to get the new epoch.
            RETURN 'already_aborted_timed_out';
        ELSIF p_epoch = pr.last_epoch THEN
            RAISE EXCEPTION USING ERRCODE = 'OL202',
                MESSAGE = format('transactional id %L: epoch %s was bumped to %s (the transaction timed out)',
                                 p_transactional_id, p_epoch, pr.epoch);
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'OL301',
            MESSAGE = format('transactional id %L: epoch %s is fenced by epoch %s', p_transactional_id, p_epoch, pr.epoch);
    END IF;
    IF t.state IN ('PrepareCommit', 'PrepareAbort') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL305', MESSAGE = format('transaction of %L is completing', p_transactional_id);
    END IF;
    IF t.txn_number = p_txn_number AND t.state = 'Ongoing' THEN
        IF t.txn_started_at + make_interval(secs => t.timeout_ms / 1000.0) < clock_timestamp() THEN
            -- Timed out: fence and abort (recoverable: the holder may re-initialise, KIP-360).
            PERFORM txn_fence_abort_v1(p_transactional_id, true);
            RETURN CASE WHEN p_commit THEN 'timed_out' ELSE 'aborted_timed_out' END;
        END IF;
        PERFORM txn_complete_v1(p_transactional_id, p_commit);
        RETURN CASE WHEN p_commit THEN 'committed' ELSE 'aborted' END;
    END IF;
    IF t.txn_number = p_txn_number - 1 AND t.state IN ('Empty', 'CompleteCommit', 'CompleteAbort') THEN
        -- Transaction N never reached the store (nothing was sent, or nothing got through). It
        -- is opened and completed empty, so its number is used up: a delayed write of N that
        -- arrives later finds N complete and cannot open it.
        UPDATE transactions x SET state = 'Ongoing', txn_number = p_txn_number, txn_started_at = now()
        WHERE x.transactional_id = p_transactional_id;
        PERFORM txn_complete_v1(p_transactional_id, p_commit);
        RETURN CASE WHEN p_commit THEN 'committed' ELSE 'aborted' END;
    END IF;
    IF t.txn_number = p_txn_number AND t.state = v_want THEN
        -- A retry after a lost reply: already done, no second effect.
        RETURN CASE WHEN p_commit THEN 'already_committed' ELSE 'already_aborted' END;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'OL303',
        MESSAGE = format('cannot %s transaction %s of %L: the last is %s, %s',
                         CASE WHEN p_commit THEN 'commit' ELSE 'abort' END, p_txn_number, p_transactional_id,
                         t.txn_number, t.state);
END
$fn$;

CREATE OR REPLACE FUNCTION join_group_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_client_id text,
                              p_topics text[], p_session_timeout_ms integer, p_assignor text)
RETURNS TABLE (member_id text, generation integer, topics text[], partitions integer[])
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    g groups%ROWTYPE;
    m group_members%ROWTYPE;
    v_member text;
    v_changed boolean := false;
BEGIN
    IF p_session_timeout_ms IS NULL OR p_session_timeout_ms NOT BETWEEN 100 AND 1800000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001',
            MESSAGE = format('session timeout %s ms is outside [100, 1800000]', p_session_timeout_ms);
    END IF;
    IF p_assignor NOT IN ('range', 'roundrobin') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001', MESSAGE = format('unknown assignor %L (range, roundrobin)', p_assignor);
    END IF;
    IF p_topics IS NULL OR cardinality(p_topics) = 0 OR EXISTS (
        SELECT 1 FROM unnest(p_topics) n WHERE NOT EXISTS (SELECT 1 FROM topics t WHERE t.name = n)) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = 'subscribe to one or more existing topics';
    END IF;
    g := group_lock_v1(p_group_id, true);
    IF g.assignor <> p_assignor AND EXISTS (SELECT 1 FROM group_members x WHERE x.group_id = p_group_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001',
            MESSAGE = format('group %L uses the %s assignor, not %s', p_group_id, g.assignor, p_assignor);
    END IF;
    UPDATE groups x SET assignor = p_assignor WHERE x.group_id = p_group_id;
    v_changed := group_expire_members_v1(p_group_id);

    IF p_member_id IS NOT NULL THEN
        SELECT * INTO m FROM group_members x WHERE x.group_id = p_group_id AND x.member_id = p_member_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'OL402',
                MESSAGE = format('%L is not a member of group %L: join without a member id', p_member_id, p_group_id);
        END IF;
        v_member := p_member_id;
        IF m.subscription IS DISTINCT FROM p_topics OR m.session_timeout_ms <> p_session_timeout_ms THEN
            UPDATE group_members x SET subscription = p_topics, session_timeout_ms = p_session_timeout_ms
            WHERE x.group_id = p_group_id AND x.member_id = v_member;
            v_changed := true;
        END IF;
    ELSIF p_group_instance_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM group_members x WHERE x.group_id = p_group_id AND x.group_instance_id = p_group_instance_id) THEN
        -- Static membership: a restarted instance takes its place back under a new member id,
        -- which fences the old one (FENCED_INSTANCE_ID); no rebalance unless it subscribes
        -- differently.
        v_member := coalesce(p_client_id, 'member') || '-' || gen_random_uuid();
        SELECT * INTO m FROM group_members x WHERE x.group_id = p_group_id AND x.group_instance_id = p_group_instance_id;
        UPDATE group_members x SET member_id = v_member, client_id = p_client_id, last_heartbeat_at = clock_timestamp()
        WHERE x.group_id = p_group_id AND x.member_id = m.member_id;
        IF m.subscription IS DISTINCT FROM p_topics OR m.session_timeout_ms <> p_session_timeout_ms THEN
            UPDATE group_members x SET subscription = p_topics, session_timeout_ms = p_session_timeout_ms
            WHERE x.group_id = p_group_id AND x.member_id = v_member;
            v_changed := true;
        END IF;
    ELSE
        v_member := coalesce(p_client_id, 'member') || '-' || gen_random_uuid();
        INSERT INTO group_members (group_id, member_id, group_instance_id, client_id, subscription,
                                   session_timeout_ms, joined_generation, last_heartbeat_at)
        VALUES (p_group_id, v_member, p_group_instance_id, p_client_id, p_topics, p_session_timeout_ms,
                g.generation + 1, clock_timestamp());
        v_changed := true;
    END IF;
    UPDATE group_members x SET last_heartbeat_at = clock_timestamp() WHERE x.group_id = p_group_id AND x.member_id = v_member;
    IF v_changed THEN
        PERFORM group_rebalance_v1(p_group_id);
    END IF;
    RETURN QUERY
    SELECT v_member, gr.generation,
           coalesce(array_agg(t.name ORDER BY t.name, a.partition) FILTER (WHERE a.member_id IS NOT NULL), '{}'),
           coalesce(array_agg(a.partition ORDER BY t.name, a.partition) FILTER (WHERE a.member_id IS NOT NULL), '{}')
    FROM groups gr
    LEFT JOIN member_assignments a ON a.group_id = gr.group_id AND a.member_id = v_member
    LEFT JOIN topics t ON t.topic_id = a.topic_id
    WHERE gr.group_id = p_group_id
    GROUP BY gr.generation;
END
$fn$;

CREATE OR REPLACE FUNCTION heartbeat_v1(p_group_id text, p_member_id text, p_group_instance_id text)
RETURNS TABLE (generation integer, topics text[], partitions integer[])
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
BEGIN
    PERFORM group_lock_v1(p_group_id, false);
    PERFORM group_expire_members_v1(p_group_id);
    PERFORM group_member_check_v1(p_group_id, p_member_id, p_group_instance_id, NULL);
    UPDATE group_members x SET last_heartbeat_at = clock_timestamp()
    WHERE x.group_id = p_group_id AND x.member_id = p_member_id;
    RETURN QUERY
    SELECT gr.generation,
           coalesce(array_agg(t.name ORDER BY t.name, a.partition) FILTER (WHERE a.member_id IS NOT NULL), '{}'),
           coalesce(array_agg(a.partition ORDER BY t.name, a.partition) FILTER (WHERE a.member_id IS NOT NULL), '{}')
    FROM groups gr
    LEFT JOIN member_assignments a ON a.group_id = gr.group_id AND a.member_id = p_member_id
    LEFT JOIN topics t ON t.topic_id = a.topic_id
    WHERE gr.group_id = p_group_id
    GROUP BY gr.generation;
END
$fn$;

CREATE OR REPLACE FUNCTION leave_group_v1(p_group_id text, p_member_id text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
BEGIN
    PERFORM group_lock_v1(p_group_id, false);
    DELETE FROM group_members x WHERE x.group_id = p_group_id AND x.member_id = p_member_id;
    IF FOUND THEN
        PERFORM group_rebalance_v1(p_group_id);
    END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION offset_commit_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer,
                                 p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    g groups%ROWTYPE;
    v_bad text;
BEGIN
    PERFORM offset_commit_args_v1(p_topics, p_partitions, p_offsets, p_metadata);
    g := group_lock_v1(p_group_id, p_member_id IS NULL);
    IF p_member_id IS NULL THEN
        -- A standalone consumer (no membership) may commit only while the group has no members.
        IF EXISTS (SELECT 1 FROM group_members x WHERE x.group_id = p_group_id) THEN
            RAISE EXCEPTION USING ERRCODE = 'OL402',
                MESSAGE = format('group %L has members: commit as one of them', p_group_id);
        END IF;
    ELSE
        PERFORM group_member_check_v1(p_group_id, p_member_id, p_group_instance_id, p_generation);
        PERFORM group_owns_partitions_v1(p_group_id, p_member_id, p_generation, p_topics, p_partitions);
    END IF;
    SELECT format('%s-%s', r.topic, r.partition) INTO v_bad
    FROM unnest(p_topics, p_partitions) AS r(topic, partition)
    WHERE NOT EXISTS (SELECT 1 FROM partitions pt JOIN topics t USING (topic_id) WHERE t.name = r.topic AND pt.partition = r.partition)
    LIMIT 1;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown partition %s', v_bad);
    END IF;
    INSERT INTO committed_offsets AS c (group_id, topic_id, partition, committed_offset, metadata, commit_seq, producer_id, committed_at)
    SELECT p_group_id, t.topic_id, r.partition, r.off, coalesce(r.md, ''), nextval('offset_commit_seq'), NULL, now()
    FROM unnest(p_topics, p_partitions, p_offsets, p_metadata) AS r(topic, partition, off, md)
    JOIN topics t ON t.name = r.topic
    ON CONFLICT ON CONSTRAINT pk_committed_offsets DO UPDATE SET
        committed_offset = EXCLUDED.committed_offset, metadata = EXCLUDED.metadata, commit_seq = EXCLUDED.commit_seq,
        producer_id = NULL, committed_at = EXCLUDED.committed_at;
END
$fn$;

CREATE OR REPLACE FUNCTION offset_fetch_v1(p_group_id text, p_topics text[], p_partitions integer[], p_require_stable boolean)
RETURNS TABLE (topic text, partition integer, committed_offset bigint, metadata text, error text,
               expired_transaction boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
BEGIN
    IF cardinality(p_topics) IS DISTINCT FROM cardinality(p_partitions) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'topics and partitions differ in length';
    END IF;
    RETURN QUERY
    SELECT r.topic, r.partition, c.committed_offset, c.metadata,
           CASE WHEN t.topic_id IS NULL OR NOT EXISTS (SELECT 1 FROM partitions pt WHERE pt.topic_id = t.topic_id AND pt.partition = r.partition)
                THEN 'unknown_topic_or_partition'
                WHEN p_require_stable AND pend.n > 0 THEN 'unstable_offset_commit' END,
           coalesce(pend.expired, false)
    FROM unnest(p_topics, p_partitions) AS r(topic, partition)
    LEFT JOIN topics t ON t.name = r.topic
    LEFT JOIN committed_offsets c ON c.group_id = p_group_id AND c.topic_id = t.topic_id AND c.partition = r.partition
    LEFT JOIN LATERAL (
        SELECT count(*) AS n,
               bool_or(tx.txn_started_at + make_interval(secs => tx.timeout_ms / 1000.0) < clock_timestamp()) AS expired
        FROM pending_offsets po JOIN transactions tx USING (transactional_id)
        WHERE po.group_id = p_group_id AND po.topic_id = t.topic_id AND po.partition = r.partition
    ) pend ON true;
END
$fn$;

CREATE OR REPLACE FUNCTION txn_offset_commit_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint,
                                     p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer,
                                     p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
BEGIN
    PERFORM offset_commit_args_v1(p_topics, p_partitions, p_offsets, p_metadata);
    -- Lock order: the transactions row first (opening transaction N if N-1 completed), then the group.
    PERFORM txn_check_v1(p_transactional_id, p_producer_id, p_epoch, p_txn_number, true);
    PERFORM group_lock_v1(p_group_id, false);
    PERFORM group_expire_members_v1(p_group_id);
    PERFORM group_member_check_v1(p_group_id, p_member_id, p_group_instance_id, p_generation);
    PERFORM group_owns_partitions_v1(p_group_id, p_member_id, p_generation, p_topics, p_partitions);
    INSERT INTO pending_offsets AS po (group_id, topic_id, partition, producer_id, transactional_id, committed_offset,
                                       metadata, commit_seq, generation, member_id)
    SELECT p_group_id, t.topic_id, r.partition, p_producer_id, p_transactional_id, r.off, coalesce(r.md, ''),
           nextval('offset_commit_seq'), p_generation, p_member_id
    FROM unnest(p_topics, p_partitions, p_offsets, p_metadata) AS r(topic, partition, off, md)
    JOIN topics t ON t.name = r.topic
    ON CONFLICT ON CONSTRAINT pk_pending_offsets DO UPDATE SET
        committed_offset = EXCLUDED.committed_offset, metadata = EXCLUDED.metadata, commit_seq = EXCLUDED.commit_seq,
        generation = EXCLUDED.generation, member_id = EXCLUDED.member_id, transactional_id = EXCLUDED.transactional_id;
END
$fn$;

CREATE OR REPLACE FUNCTION fetch_v3(p_topics text[], p_partitions integer[], p_offsets bigint[], p_max_records integer,
                         p_read_committed boolean)
RETURNS TABLE (
    idx integer, "offset" bigint, key bytea, value bytea, headers jsonb, "timestamp" timestamptz,
    producer_id bigint, producer_epoch smallint, sequence integer, bounds bigint[], error text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    b record;
BEGIN
    -- plpgsql rather than one SQL statement: a UNION ALL over a lateral join, sorted, measured at
    -- 0.6 of this loop's speed (the per-partition queries get custom plans on the exact range).
    FOR b IN SELECT * FROM fetch_bounds_v1(p_topics, p_partitions, p_offsets, p_max_records, p_read_committed)
             ORDER BY 1 LOOP
        RETURN QUERY SELECT b.idx, NULL::bigint, NULL::bytea, NULL::bytea, NULL::jsonb, NULL::timestamptz,
            NULL::bigint, NULL::smallint, NULL::integer,
            ARRAY[b.log_start_offset, b.high_watermark, b.last_stable_offset, b.read_limit, b.expired_open::integer],
            b.error;
        IF b.error IS NOT NULL THEN
            CONTINUE;
        END IF;
        -- Control records are never returned; read_committed also skips aborted records.
        RETURN QUERY
        SELECT b.idx, x."offset", x.key, x.value, x.headers, x."timestamp", x.producer_id, x.producer_epoch,
               x.sequence, NULL::bigint[], NULL::text
        FROM records x
        WHERE x.topic_id = b.topic_id AND x.partition = p_partitions[b.idx]
          AND x."offset" >= p_offsets[b.idx] AND x."offset" < b.read_limit AND x.control_type IS NULL
          AND NOT (p_read_committed AND x.aborted)
        ORDER BY x."offset"
        LIMIT p_max_records;
    END LOOP;
END
$fn$;

DROP FUNCTION IF EXISTS acl_allowed_v1(text, text, text);

DROP FUNCTION IF EXISTS create_acl_v1(text, text, text, text, text);

DROP FUNCTION IF EXISTS delete_acls_v1(text, text, text, text, text);

DROP FUNCTION IF EXISTS describe_acls_v1(text, text, text, text, text);

DROP FUNCTION IF EXISTS set_acl_enforcement_v1(boolean);

DROP FUNCTION IF EXISTS acl_validate_v1(text, text, text, text, text);

DROP FUNCTION IF EXISTS acl_require_v1(text, text[], text);

DROP FUNCTION IF EXISTS acl_match_v1(oid, text, text, text);

DROP FUNCTION IF EXISTS acl_bypass_v1(oid);

DROP FUNCTION IF EXISTS acl_caller_v1();

DROP TABLE acl_settings;

DROP TABLE acls;
