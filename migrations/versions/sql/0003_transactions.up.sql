ALTER TABLE records ADD COLUMN aborted BOOLEAN DEFAULT false NOT NULL;

COMMENT ON COLUMN records.aborted IS 'True for a data record of an aborted transaction (set by the abort); read_committed skips it.';

ALTER TABLE records ADD CONSTRAINT ck_records_aborted_is_transactional CHECK (NOT aborted OR is_transactional);

ALTER TABLE records ADD COLUMN txn_number BIGINT;

COMMENT ON COLUMN records.txn_number IS 'For a transactional record or marker, the number of its transaction: (producer_id, txn_number) names the transaction, so readers can return it on all partitions or none.';

ALTER TABLE records ADD CONSTRAINT ck_records_txn_number_iff_transactional CHECK ((txn_number IS NOT NULL) = is_transactional);

CREATE INDEX ix_records_producer_id_txn_number ON records (producer_id, txn_number) WHERE is_transactional;

ALTER TABLE transactions ADD COLUMN prev_producer_id BIGINT;

COMMENT ON COLUMN transactions.prev_producer_id IS 'The producer id this transactional id had before the current one (epoch exhaustion), so a retried InitProducerId is recognised (KIP-360).';

-- Completes the Ongoing transaction of p_transactional_id: markers, offsets, state. The caller
-- holds the transactions row FOR UPDATE (lock order: it comes first).
CREATE FUNCTION txn_complete_v1(p_transactional_id text, p_commit boolean) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    t transactions%ROWTYPE;
    v_epoch smallint;
    tp record;
    v_marker bigint;
BEGIN
    SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id;
    IF t.state <> 'Ongoing' THEN
        RAISE EXCEPTION USING ERRCODE = 'OL303',
            MESSAGE = format('transaction of %L is %s, not Ongoing', p_transactional_id, t.state);
    END IF;
    UPDATE transactions x SET state = CASE WHEN p_commit THEN 'PrepareCommit' ELSE 'PrepareAbort' END
    WHERE x.transactional_id = p_transactional_id;
    SELECT p.epoch INTO v_epoch FROM producers p WHERE p.producer_id = t.producer_id;
    -- Partitions in (topic_id, partition) order, the documented lock order. A partition the
    -- transaction never wrote to needs no marker.
    FOR tp IN
        SELECT x.topic_id, x.partition, x.first_offset FROM txn_partitions x
        WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL
        ORDER BY x.topic_id, x.partition
    LOOP
        SELECT pt.next_offset INTO v_marker FROM partitions pt
        WHERE pt.topic_id = tp.topic_id AND pt.partition = tp.partition
        FOR NO KEY UPDATE;
        IF NOT p_commit THEN
            -- The producer has one open transaction, so its records from the first offset on are
            -- this transaction's. Only aborts rewrite rows; commits touch no data row.
            UPDATE records r SET aborted = true
            WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition
              AND r."offset" >= tp.first_offset AND r."offset" < v_marker
              AND r.producer_id = t.producer_id AND r.is_transactional AND r.control_type IS NULL;
        END IF;
        INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, is_transactional, control_type,
                             txn_number)
        VALUES (tp.topic_id, tp.partition, v_marker, t.producer_id, v_epoch, true,
                CASE WHEN p_commit THEN 'commit' ELSE 'abort' END, t.txn_number);
        UPDATE partitions pt SET next_offset = v_marker + 1
        WHERE pt.topic_id = tp.topic_id AND pt.partition = tp.partition;
    END LOOP;
    IF p_commit THEN
        -- KIP-447: pending offsets become committed only if written after the committed ones.
        INSERT INTO committed_offsets AS c
            (group_id, topic_id, partition, committed_offset, metadata, commit_seq, producer_id, committed_at)
        SELECT po.group_id, po.topic_id, po.partition, po.committed_offset, po.metadata, po.commit_seq,
               po.producer_id, now()
        FROM pending_offsets po WHERE po.transactional_id = p_transactional_id
        ON CONFLICT ON CONSTRAINT pk_committed_offsets DO UPDATE SET
            committed_offset = EXCLUDED.committed_offset, metadata = EXCLUDED.metadata,
            commit_seq = EXCLUDED.commit_seq, producer_id = EXCLUDED.producer_id,
            committed_at = EXCLUDED.committed_at
        WHERE c.commit_seq < EXCLUDED.commit_seq;
    END IF;
    DELETE FROM pending_offsets po WHERE po.transactional_id = p_transactional_id;
    DELETE FROM txn_partitions x WHERE x.transactional_id = p_transactional_id;
    UPDATE transactions x
    SET state = CASE WHEN p_commit THEN 'CompleteCommit' ELSE 'CompleteAbort' END, txn_started_at = NULL
    WHERE x.transactional_id = p_transactional_id;
END
$fn$;
COMMENT ON FUNCTION txn_complete_v1(text, boolean) IS
  'Internal: commits or aborts the Ongoing transaction (markers on every written partition, pending offsets '
  'applied or dropped, aborted records flagged) in the caller''s database transaction.';

-- Fences the current epoch of p_transactional_id (epoch + 1) and aborts its open transaction.
-- p_recoverable: the holder of the fenced epoch may re-initialise (KIP-360, a timeout); otherwise
-- it is a zombie and gets PRODUCER_FENCED (a new instance, an operator's abort).
CREATE FUNCTION txn_fence_abort_v1(p_transactional_id text, p_recoverable boolean) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    pr producers%ROWTYPE;
    v_pid bigint;
BEGIN
    SELECT p.* INTO pr FROM producers p JOIN transactions t ON t.producer_id = p.producer_id
    WHERE t.transactional_id = p_transactional_id;
    IF pr.epoch < 32767 THEN
        -- 32767 itself is Kafka's fencing epoch: reachable by a fence, never handed to a producer.
        UPDATE producers p
        SET epoch = pr.epoch + 1, last_epoch = CASE WHEN p_recoverable THEN pr.epoch END, last_used_at = now()
        WHERE p.producer_id = pr.producer_id;
        PERFORM txn_complete_v1(p_transactional_id, false);
    ELSE
        -- No epoch left to fence with: abort, then retire the producer id itself (its holder then
        -- gets INVALID_PRODUCER_ID_MAPPING). One update for state and id: one journalled transition.
        PERFORM txn_complete_v1(p_transactional_id, false);
        UPDATE producers p SET transactional_id = NULL WHERE p.producer_id = pr.producer_id;
        INSERT INTO producers AS p (transactional_id) VALUES (p_transactional_id) RETURNING p.producer_id INTO v_pid;
        UPDATE transactions x SET state = 'Empty', producer_id = v_pid, prev_producer_id = pr.producer_id
        WHERE x.transactional_id = p_transactional_id;
    END IF;
END
$fn$;
COMMENT ON FUNCTION txn_fence_abort_v1(text, boolean) IS
  'Internal: bumps the epoch of a transactional id (fencing its holder) and aborts its open transaction.';

-- The checks every transactional call makes, under the transactions row lock (taken here,
-- FOR UPDATE, first in the lock order). With p_begin, a call naming transaction N on an id
-- that completed N-1 opens N. Returns the row.
CREATE FUNCTION txn_check_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint,
                             p_txn_number bigint, p_begin boolean)
RETURNS transactions
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    t transactions%ROWTYPE;
    pr producers%ROWTYPE;
BEGIN
    SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR UPDATE;
    IF NOT FOUND OR t.state = 'Dead' OR t.producer_id IS DISTINCT FROM p_producer_id THEN
        RAISE EXCEPTION USING ERRCODE = 'OL302',
            MESSAGE = format('producer id %s does not serve transactional id %L (expired or replaced)',
                             p_producer_id, p_transactional_id);
    END IF;
    SELECT * INTO pr FROM producers p WHERE p.producer_id = t.producer_id;
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
    IF p_begin AND t.txn_number = p_txn_number - 1 THEN
        UPDATE transactions x SET state = 'Ongoing', txn_number = p_txn_number, txn_started_at = now()
        WHERE x.transactional_id = p_transactional_id
        RETURNING * INTO t;
        RETURN t;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'OL303',
        MESSAGE = format('transactional id %L: transaction %s is not open (the last is %s, %s)',
                         p_transactional_id, p_txn_number, t.txn_number, t.state);
END
$fn$;
COMMENT ON FUNCTION txn_check_v1(text, bigint, smallint, bigint, boolean) IS
  'Internal: locks and validates a transactional call (producer id, epoch, transaction number, timeout); '
  'opens transaction N after N-1 when asked.';

CREATE FUNCTION init_transactional_producer_id_v1(
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
COMMENT ON FUNCTION init_transactional_producer_id_v1(text, integer, bigint, smallint) IS
  'InitProducerId with a transactional id: one producer id per transactional id; each call bumps the epoch, '
  'fencing older instances and aborting their open transaction. KIP-360: with the current (id, epoch), a bump; '
  'a retried bump gets the same answer; anything else PRODUCER_FENCED (OL301). Epoch exhaustion or an '
  'expired id: a new producer id at epoch 0. Returns the transaction number reached.';

CREATE FUNCTION add_partitions_to_txn_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint,
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
COMMENT ON FUNCTION add_partitions_to_txn_v1(text, bigint, smallint, bigint, text[], integer[]) IS
  'AddPartitionsToTxn: adds partitions to transaction p_txn_number, opening it if the previous one completed. '
  'produce_v2 adds a partition implicitly on its first write (as Kafka''s transaction version 2 does).';

CREATE FUNCTION produce_v2(
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
COMMENT ON FUNCTION produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[], text, bigint) IS
  'Produce one batch to one partition: validates, detects a retried batch (returns its original offsets, '
  'duplicate = true), enforces epoch and sequence order and appends under the partition lock. With a '
  'transactional id and transaction number, the batch joins that transaction (opening it, and adding the '
  'partition, if needed). Producer id NULL writes without idempotence.';

CREATE FUNCTION end_txn_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint,
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
COMMENT ON FUNCTION end_txn_v1(text, bigint, smallint, bigint, boolean) IS
  'EndTxn: commits or aborts transaction p_txn_number in one database transaction. Returns committed, aborted, '
  'already_committed / already_aborted (a retry), timed_out (the commit came too late; the transaction was '
  'aborted and the epoch bumped), or aborted_timed_out / already_aborted_timed_out (an abort of a transaction '
  'past its timeout: the epoch was bumped, re-initialise). Abort after commit, or a call naming another '
  'transaction: OL303.';

CREATE FUNCTION abort_transaction_v1(p_transactional_id text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    t transactions%ROWTYPE;
BEGIN
    SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL308', MESSAGE = format('no transactional id %L', p_transactional_id);
    END IF;
    IF t.state <> 'Ongoing' THEN
        RAISE EXCEPTION USING ERRCODE = 'OL303',
            MESSAGE = format('transaction of %L is %s: nothing to abort', p_transactional_id, t.state);
    END IF;
    -- Unlike Kafka's tool, this goes through the coordinator state: the holder is fenced (not
    -- recoverable: an operator aborts a transaction whose producer is gone or misbehaving).
    PERFORM txn_fence_abort_v1(p_transactional_id, false);
END
$fn$;
COMMENT ON FUNCTION abort_transaction_v1(text) IS
  'Operator abort of an open (hanging) transaction: fences its producer and aborts it, updating the '
  'coordinator state (Kafka''s tool only writes a marker).';

CREATE FUNCTION expire_transactions_v1(p_now timestamptz DEFAULT clock_timestamp()) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_id text;
    v_n integer := 0;
    v_idle bigint := (SELECT s.transactional_id_expiration_ms FROM settings s);
BEGIN
    -- At most ONE abort per call (the caller loops, one database transaction each): aborting two
    -- here would hold the first one's partition locks while taking the second's, out of the
    -- (topic_id, partition) lock order. SKIP LOCKED: a transaction being committed or appended to
    -- right now is not waited for.
    SELECT x.transactional_id INTO v_id FROM transactions x
    WHERE x.state = 'Ongoing' AND x.txn_started_at + make_interval(secs => x.timeout_ms / 1000.0) < p_now
    ORDER BY x.txn_started_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF v_id IS NOT NULL THEN
        PERFORM txn_fence_abort_v1(v_id, true);
        v_n := 1;
    END IF;
    -- Rule 21: transactional ids idle in Empty/Complete* past the expiration become Dead.
    UPDATE transactions x SET state = 'Dead'
    WHERE x.transactional_id IN (
        SELECT y.transactional_id FROM transactions y
        WHERE y.state IN ('Empty', 'CompleteCommit', 'CompleteAbort')
          AND y.updated_at < p_now - make_interval(secs => v_idle / 1000.0)
        FOR UPDATE SKIP LOCKED);
    RETURN v_n;
END
$fn$;
COMMENT ON FUNCTION expire_transactions_v1(timestamptz) IS
  'Maintenance (also called by readers that meet an expired transaction): fences and aborts the oldest '
  'transaction open past its timeout (one per call, to keep the lock order: call again until 0), and moves '
  'transactional ids idle past transactional_id_expiration_ms to Dead. Returns the number aborted (0 or 1).';

-- Read limits under which every committed transaction is readable on all of the given partitions
-- or on none. A committed transaction can sit below one partition's last stable offset and above
-- another's (held back there by another open transaction, or by a record cap): its records are then
-- withheld everywhere, by pulling each partition's limit back to its first record, until nothing
-- changes (a cut can expose another such transaction). STABLE: it sees its caller's snapshot.
CREATE FUNCTION consistent_limits_v1(p_topic_ids integer[], p_partitions integer[], p_starts bigint[],
                                     p_limits bigint[], p_scan_ends bigint[])
RETURNS bigint[]
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $fn$
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
                -- ... that have a record at or past some requested partition's limit. The probe
                -- goes through the (producer_id, txn_number) index of transactional records.
                SELECT h.producer_id, h.txn_number FROM here h
                WHERE EXISTS (
                    SELECT 1 FROM records x
                    JOIN unnest(p_topic_ids, p_partitions, v_limits) AS o(topic_id, partition, lim)
                      ON x.topic_id = o.topic_id AND x.partition = o.partition AND x."offset" >= o.lim
                    WHERE x.is_transactional AND x.producer_id = h.producer_id AND x.txn_number = h.txn_number
                      AND x.control_type IS NULL)
            )
            SELECT min(r."offset") INTO v_cut FROM records r JOIN torn USING (producer_id, txn_number)
            WHERE r.topic_id = p_topic_ids[i] AND r.partition = p_partitions[i] AND r.is_transactional
              AND r."offset" >= p_starts[i] AND r."offset" < v_limits[i];
            IF v_cut IS NOT NULL AND v_cut < v_limits[i] THEN
                v_limits[i] := v_cut;
                v_changed := true;
            END IF;
        END LOOP;
    END LOOP;
    RETURN v_limits;
END
$fn$;
COMMENT ON FUNCTION consistent_limits_v1(integer[], integer[], bigint[], bigint[], bigint[]) IS
  'Read limits (at most p_limits, the last stable offsets) under which every committed transaction found in '
  '[start, scan end) is readable on all of the given partitions or on none.';

-- Reads many partitions in ONE snapshot (a STABLE function sees the snapshot of its calling
-- statement), so a transaction that spans them is seen on all or on none. For each requested
-- partition one 'partition' row (offsets, or an error) comes first, then its records.
CREATE FUNCTION fetch_v2(p_topics text[], p_partitions integer[], p_offsets bigint[], p_max_records integer,
                         p_read_committed boolean)
RETURNS TABLE (
    kind text, topic text, partition integer, "offset" bigint, key bytea, value bytea, headers jsonb,
    "timestamp" timestamptz, producer_id bigint, producer_epoch smallint, sequence integer,
    log_start_offset bigint, high_watermark bigint, last_stable_offset bigint, read_limit bigint,
    expired_open boolean, error text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    n integer := coalesce(cardinality(p_topics), 0);
    i integer;
    v_topic_ids integer[] := array_fill(NULL::integer, ARRAY[n]);
    v_starts bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_ends bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_lsos bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_limits bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_scan_ends bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_expired boolean[] := array_fill(false, ARRAY[n]);
    v_errors text[] := array_fill(NULL::text, ARRAY[n]);
    v_cap bigint;
    v_tid integer;
    v_start bigint;
    v_end bigint;
    v_lso bigint;
    v_exp boolean;
    v_torn_possible boolean := false;
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
    -- Phase 1: each partition's bounds, and the limit this read stops at.
    FOR i IN 1 .. n LOOP
        v_tid := NULL;
        SELECT pt.topic_id, pt.log_start_offset, pt.next_offset INTO v_tid, v_start, v_end
        FROM partitions pt JOIN topics t USING (topic_id)
        WHERE t.name = p_topics[i] AND pt.partition = p_partitions[i];
        IF v_tid IS NULL THEN
            v_errors[i] := 'unknown_topic_or_partition';
            CONTINUE;
        END IF;
        v_topic_ids[i] := v_tid;
        v_starts[i] := v_start;
        v_ends[i] := v_end;
        -- Last stable offset: the first offset of the oldest open transaction, else the end.
        SELECT least(coalesce(min(x.first_offset), v_ends[i]), v_ends[i]),
               coalesce(bool_or(tx.txn_started_at + make_interval(secs => tx.timeout_ms / 1000.0) < clock_timestamp()), false)
        INTO v_lso, v_exp
        FROM txn_partitions x JOIN transactions tx USING (transactional_id)
        WHERE x.topic_id = v_tid AND x.partition = p_partitions[i] AND x.first_offset IS NOT NULL
          AND tx.state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort');
        v_lsos[i] := v_lso;
        v_expired[i] := v_exp;
        IF p_offsets[i] IS NULL OR p_offsets[i] < v_starts[i] OR p_offsets[i] > v_ends[i] THEN
            v_errors[i] := 'offset_out_of_range';
            CONTINUE;
        END IF;
        v_limits[i] := CASE WHEN p_read_committed THEN v_lsos[i] ELSE v_ends[i] END;
        v_scan_ends[i] := v_limits[i];
        IF p_read_committed AND v_lsos[i] < v_ends[i] THEN
            -- An open transaction holds this partition back: a committed transaction read
            -- elsewhere may be above its last stable offset here. The check below looks only at
            -- the transactions of the records this read can return (up to the record cap).
            v_torn_possible := true;
        END IF;
        IF p_read_committed THEN
            v_cap := NULL;
            SELECT r."offset" + 1 INTO v_cap FROM records r
            WHERE r.topic_id = v_topic_ids[i] AND r.partition = p_partitions[i]
              AND r."offset" >= p_offsets[i] AND r."offset" < v_limits[i]
              AND r.control_type IS NULL AND NOT r.aborted
            ORDER BY r."offset" OFFSET p_max_records - 1 LIMIT 1;
            v_scan_ends[i] := coalesce(v_cap, v_limits[i]);
        END IF;
    END LOOP;
    -- A committed transaction is returned on all of the requested partitions or on none. Only
    -- possible to break when some limit falls short of its partition's end.
    IF p_read_committed AND v_torn_possible THEN
        SELECT array_agg(v_topic_ids[j] ORDER BY j), array_agg(p_partitions[j] ORDER BY j),
               array_agg(p_offsets[j] ORDER BY j), array_agg(v_limits[j] ORDER BY j),
               array_agg(v_scan_ends[j] ORDER BY j), array_agg(j ORDER BY j)
        INTO ok_ids, ok_parts, ok_starts, ok_limits, ok_scan_ends, ok_index
        FROM generate_series(1, n) AS j WHERE v_errors[j] IS NULL;
        cut := consistent_limits_v1(ok_ids, ok_parts, ok_starts, ok_limits, ok_scan_ends);
        FOR i IN 1 .. coalesce(cardinality(ok_index), 0) LOOP
            v_limits[ok_index[i]] := cut[i];
        END LOOP;
    END IF;
    -- Phase 2: a 'partition' row for each, then its records below the limit.
    FOR i IN 1 .. n LOOP
        RETURN QUERY SELECT 'partition', p_topics[i], p_partitions[i], p_offsets[i], NULL::bytea, NULL::bytea,
            NULL::jsonb, NULL::timestamptz, NULL::bigint, NULL::smallint, NULL::integer, v_starts[i], v_ends[i],
            v_lsos[i], v_limits[i], v_expired[i], v_errors[i];
        IF v_errors[i] IS NOT NULL THEN
            CONTINUE;
        END IF;
        -- Control records are never returned; read_committed also skips aborted records.
        RETURN QUERY
        SELECT 'record', p_topics[i], p_partitions[i], r."offset", r.key, r.value, r.headers, r."timestamp",
               r.producer_id, r.producer_epoch, r.sequence, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
               NULL::boolean, NULL::text
        FROM records r
        WHERE r.topic_id = v_topic_ids[i] AND r.partition = p_partitions[i]
          AND r."offset" >= p_offsets[i] AND r."offset" < v_limits[i] AND r.control_type IS NULL
          AND NOT (p_read_committed AND r.aborted)
        ORDER BY r."offset"
        LIMIT p_max_records;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION fetch_v2(text[], integer[], bigint[], integer, boolean) IS
  'Fetch many partitions in one snapshot: per partition a ''partition'' row (log start, high watermark, last '
  'stable offset, the limit this read stopped at, whether an expired transaction holds it, or an error) then up to '
  'p_max_records records. read_committed stops at the last stable offset, skips aborted records, and returns a '
  'committed transaction on all the requested partitions or on none. Control records never appear.';

CREATE VIEW partition_offsets AS
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
COMMENT ON VIEW partition_offsets IS
  'Per partition: log start offset, high watermark, last stable offset (read_committed readers stop there) and '
  'how many open transactions have written to it.';
COMMENT ON COLUMN partition_offsets.topic IS 'The topic name.';
COMMENT ON COLUMN partition_offsets.partition IS 'The partition number.';
COMMENT ON COLUMN partition_offsets.log_start_offset IS 'The first offset still in the log.';
COMMENT ON COLUMN partition_offsets.high_watermark IS 'The offset the next record will get (read_uncommitted readers stop here).';
COMMENT ON COLUMN partition_offsets.last_stable_offset IS 'The first offset of the oldest open transaction, else the high watermark.';
COMMENT ON COLUMN partition_offsets.open_transactions IS 'Open transactions that have written to this partition.';
COMMENT ON COLUMN partition_offsets.log_bytes IS 'Bytes of keys, values and headers in the log.';
COMMENT ON COLUMN partition_offsets.topic_id IS 'The topic''s id (for joins).';

CREATE VIEW committed_records AS
SELECT o.topic, r.partition, r."offset", r.key, r.value, r.headers, r."timestamp", r.producer_id
FROM records r
JOIN partition_offsets o ON o.topic_id = r.topic_id AND o.partition = r.partition
WHERE r.control_type IS NULL AND NOT r.aborted AND r."offset" < o.last_stable_offset
  AND r."offset" >= o.log_start_offset;
COMMENT ON VIEW committed_records IS
  'read_committed: data records below each partition''s last stable offset that are not from an aborted '
  'transaction; never control records. Records here are decided and do not change (until retention).';
COMMENT ON COLUMN committed_records.topic IS 'The topic name.';
COMMENT ON COLUMN committed_records.partition IS 'The partition number.';
COMMENT ON COLUMN committed_records."offset" IS 'The record''s offset.';
COMMENT ON COLUMN committed_records.key IS 'The record key.';
COMMENT ON COLUMN committed_records.value IS 'The record value.';
COMMENT ON COLUMN committed_records.headers IS 'Headers as a JSON array of {"key", "value": base64}.';
COMMENT ON COLUMN committed_records."timestamp" IS 'The record timestamp.';
COMMENT ON COLUMN committed_records.producer_id IS 'The producer that wrote it.';

CREATE VIEW transaction_status AS
SELECT x.transactional_id, x.state, x.producer_id, p.epoch AS producer_epoch, x.txn_number, x.timeout_ms,
       x.txn_started_at, now() - x.txn_started_at AS age,
       coalesce(x.txn_started_at + make_interval(secs => x.timeout_ms / 1000.0) < now(), false) AS expired,
       coalesce((SELECT array_agg(format('%s-%s@%s', t.name, tp.partition, coalesce(tp.first_offset::text, '-'))
                                  ORDER BY t.name, tp.partition)
                 FROM txn_partitions tp JOIN topics t USING (topic_id)
                 WHERE tp.transactional_id = x.transactional_id), '{}') AS partitions,
       x.updated_at
FROM transactions x JOIN producers p ON p.producer_id = x.producer_id;
COMMENT ON VIEW transaction_status IS
  'The coordinator state of every transactional id: state, producer id and epoch, the open transaction''s age, '
  'whether it exceeded its timeout, and its partitions (topic-partition@first offset).';
COMMENT ON COLUMN transaction_status.transactional_id IS 'The transactional id.';
COMMENT ON COLUMN transaction_status.state IS 'Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort or Dead.';
COMMENT ON COLUMN transaction_status.producer_id IS 'The producer id serving it.';
COMMENT ON COLUMN transaction_status.producer_epoch IS 'The current epoch (older epochs are fenced).';
COMMENT ON COLUMN transaction_status.txn_number IS 'The number of the last transaction opened.';
COMMENT ON COLUMN transaction_status.timeout_ms IS 'The transaction timeout.';
COMMENT ON COLUMN transaction_status.txn_started_at IS 'When the open transaction started.';
COMMENT ON COLUMN transaction_status.age IS 'How long the open transaction has been open.';
COMMENT ON COLUMN transaction_status.expired IS 'Open past its timeout (the next reader or maintenance aborts it).';
COMMENT ON COLUMN transaction_status.partitions IS 'Partitions of the open transaction, as topic-partition@first offset.';
COMMENT ON COLUMN transaction_status.updated_at IS 'When the state last changed.';

DROP FUNCTION produce_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[]);

REVOKE ALL ON FUNCTION txn_complete_v1(text, boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION consistent_limits_v1(integer[], integer[], bigint[], bigint[], bigint[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION txn_fence_abort_v1(text, boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION txn_check_v1(text, bigint, smallint, bigint, boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION init_transactional_producer_id_v1(text, integer, bigint, smallint) FROM PUBLIC;

REVOKE ALL ON FUNCTION add_partitions_to_txn_v1(text, bigint, smallint, bigint, text[], integer[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION produce_v2(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[], text, bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION end_txn_v1(text, bigint, smallint, bigint, boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION abort_transaction_v1(text) FROM PUBLIC;

REVOKE ALL ON FUNCTION expire_transactions_v1(timestamptz) FROM PUBLIC;

REVOKE ALL ON FUNCTION fetch_v2(text[], integer[], bigint[], integer, boolean) FROM PUBLIC;
