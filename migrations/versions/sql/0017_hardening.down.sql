DROP FUNCTION expire_transactions_v2();

DROP FUNCTION expire_producers_v2();

DROP FUNCTION enforce_retention_v2(integer);

DROP FUNCTION expire_txn_history_v2(integer);

-- init_producer_id_v1(p_producer_id bigint, p_epoch smallint)
CREATE OR REPLACE FUNCTION init_producer_id_v1(p_producer_id bigint DEFAULT NULL::bigint, p_epoch smallint DEFAULT NULL::smallint)
 RETURNS TABLE(producer_id bigint, producer_epoch smallint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
$function$;
COMMENT ON FUNCTION init_producer_id_v1(p_producer_id bigint, p_epoch smallint) IS 'InitProducerId without a transactional id: a new producer id at epoch 0, or (KIP-360) given the current id and epoch, the next epoch (a retried bump gets the same answer; an exhausted epoch a new id).';

-- init_transactional_producer_id_v1(p_transactional_id text, p_timeout_ms integer, p_producer_id bigint, p_epoch smallint)
CREATE OR REPLACE FUNCTION init_transactional_producer_id_v1(p_transactional_id text, p_timeout_ms integer, p_producer_id bigint DEFAULT NULL::bigint, p_epoch smallint DEFAULT NULL::smallint)
 RETURNS TABLE(producer_id bigint, producer_epoch smallint, txn_number bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    t transactions%ROWTYPE;
    pr producers%ROWTYPE;
    v_pid bigint;
    v_prev bigint;
    v_fenced boolean := false;
    v_max bigint := (SELECT s.transaction_max_timeout_ms FROM settings s);
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('transactional_id', ARRAY[p_transactional_id], 'write');
    END IF;
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
$function$;
COMMENT ON FUNCTION init_transactional_producer_id_v1(p_transactional_id text, p_timeout_ms integer, p_producer_id bigint, p_epoch smallint) IS 'InitProducerId with a transactional id: one producer id per transactional id; each call bumps the epoch, fencing older instances and aborting their open transaction. KIP-360: with the current (id, epoch), a bump; a retried bump gets the same answer; anything else PRODUCER_FENCED (OL301). Epoch exhaustion or an expired id: a new producer id at epoch 0. Returns the transaction number reached.';

-- txn_fence_abort_v1(p_transactional_id text, p_recoverable boolean)
CREATE OR REPLACE FUNCTION txn_fence_abort_v1(p_transactional_id text, p_recoverable boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;
COMMENT ON FUNCTION txn_fence_abort_v1(p_transactional_id text, p_recoverable boolean) IS 'Internal: bumps the epoch of a transactional id (fencing its holder) and aborts its open transaction.';

-- txn_check_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_begin boolean)
CREATE OR REPLACE FUNCTION txn_check_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_begin boolean)
 RETURNS transactions
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;
COMMENT ON FUNCTION txn_check_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_begin boolean) IS 'Internal: locks and validates a transactional call (producer id, epoch, transaction number, timeout); opens transaction N after N-1 when asked.';

-- end_txn_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_commit boolean)
CREATE OR REPLACE FUNCTION end_txn_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_commit boolean)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    t transactions%ROWTYPE;
    pr producers%ROWTYPE;
    v_want text := CASE WHEN p_commit THEN 'CompleteCommit' ELSE 'CompleteAbort' END;
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('transactional_id', ARRAY[p_transactional_id], 'write');
    END IF;
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
$function$;
COMMENT ON FUNCTION end_txn_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_commit boolean) IS 'EndTxn: commits or aborts transaction p_txn_number in one database transaction. Returns committed, aborted, already_committed / already_aborted (a retry), timed_out (the commit came too late; the transaction was aborted and the epoch bumped), or aborted_timed_out / already_aborted_timed_out (an abort of a transaction past its timeout: the epoch was bumped, re-initialise). Abort after commit, or a call naming another transaction: OL303.';

-- txn_complete_v1(p_transactional_id text, p_commit boolean)
CREATE OR REPLACE FUNCTION txn_complete_v1(p_transactional_id text, p_commit boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    t transactions%ROWTYPE;
    v_epoch smallint;
    tp record;
    v_marker bigint;
    v_last bigint;
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
        IF p_commit THEN
            -- The span read_committed fetches test transactions against (consistent_limits_v1).
            -- Its last record is the producer's last batch here: the producer's records from the
            -- first offset on are this transaction's (as for the abort above), and produce_v2
            -- keeps that batch in its sequence state. A state expired meanwhile is looked up.
            SELECT ps.last_offsets[cardinality(ps.last_offsets)] INTO v_last FROM producer_partition_state ps
            WHERE ps.producer_id = t.producer_id AND ps.topic_id = tp.topic_id AND ps.partition = tp.partition;
            IF v_last IS NULL OR v_last < tp.first_offset OR v_last >= v_marker THEN
                SELECT max(r."offset") INTO v_last FROM records r
                WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition
                  AND r."offset" >= tp.first_offset AND r."offset" < v_marker
                  AND r.producer_id = t.producer_id AND r.is_transactional AND r.control_type IS NULL;
            END IF;
            INSERT INTO txn_spans (producer_id, txn_number, topic_id, partition, first_offset, last_offset)
            VALUES (t.producer_id, t.txn_number, tp.topic_id, tp.partition, tp.first_offset, v_last);
        END IF;
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
$function$;
COMMENT ON FUNCTION txn_complete_v1(p_transactional_id text, p_commit boolean) IS 'Internal: commits or aborts the Ongoing transaction (markers on every written partition, pending offsets applied or dropped, aborted records flagged) in the caller''s database transaction.';

-- produce_v2(p_topic text, p_partition integer, p_producer_id bigint, p_producer_epoch smallint, p_base_sequence integer, p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_transactional_id text, p_txn_number bigint)
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
$function$;
COMMENT ON FUNCTION produce_v2(p_topic text, p_partition integer, p_producer_id bigint, p_producer_epoch smallint, p_base_sequence integer, p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_transactional_id text, p_txn_number bigint) IS 'Produce one batch to one partition: validates, detects a retried batch (returns its original offsets, duplicate = true), enforces epoch and sequence order and appends under the partition lock. With a transactional id and transaction number, the batch joins that transaction (opening it, and adding the partition, if needed). Producer id NULL writes without idempotence.';

-- produce_end_txn_v1(p_topic text, p_partition integer, p_producer_id bigint, p_producer_epoch smallint, p_base_sequence integer, p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_transactional_id text, p_txn_number bigint)
CREATE OR REPLACE FUNCTION produce_end_txn_v1(p_topic text, p_partition integer, p_producer_id bigint, p_producer_epoch smallint, p_base_sequence integer, p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_transactional_id text, p_txn_number bigint)
 RETURNS TABLE(base_offset bigint, last_offset bigint, log_append_time timestamp with time zone, duplicate boolean, outcome text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    r record;
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
    IF EXISTS (SELECT 1 FROM transactions t
               WHERE t.transactional_id = p_transactional_id AND t.producer_id = p_producer_id
                 AND t.txn_number = p_txn_number AND t.state = 'CompleteCommit') THEN
        -- A retry of a call that committed. end_txn_v1 takes the transactions row's lock and
        -- re-checks the epoch: 'already_committed', or the error a fenced caller gets.
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
    -- The batch first (it may open the transaction), then EndTxn: both take the transactions row
    -- first (lock 0), so the lock order is theirs. Any error rolls both back.
    SELECT * INTO r FROM produce_v2(p_topic, p_partition, p_producer_id, p_producer_epoch, p_base_sequence,
                                    p_keys, p_values, p_headers, p_timestamps, p_transactional_id, p_txn_number);
    v_outcome := end_txn_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true);
    RETURN QUERY SELECT r.base_offset, r.last_offset, r.log_append_time, r.duplicate, v_outcome;
END
$function$;
COMMENT ON FUNCTION produce_end_txn_v1(p_topic text, p_partition integer, p_producer_id bigint, p_producer_epoch smallint, p_base_sequence integer, p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_transactional_id text, p_txn_number bigint) IS 'A transaction''s last batch (produce_v2) and its commit (end_txn_v1) in one database transaction: both or neither. Returns the batch''s offsets and EndTxn''s outcome (committed; already_committed for a retry of a call that committed, with the batch''s offsets; timed_out when the transaction had passed its timeout and was aborted instead). Errors as produce_v2 and end_txn_v1.';

-- offset_commit_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
CREATE OR REPLACE FUNCTION offset_commit_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    g groups%ROWTYPE;
    v_bad text;
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('group', ARRAY[p_group_id], 'read');
        PERFORM acl_require_v1('topic', p_topics, 'read');
    END IF;
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
$function$;
COMMENT ON FUNCTION offset_commit_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[]) IS 'OffsetCommit: checked against member id, instance id and generation, and (beyond Kafka) against the member''s assignment. Without a member id, a standalone commit to a group with no members.';

-- txn_offset_commit_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
CREATE OR REPLACE FUNCTION txn_offset_commit_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('transactional_id', ARRAY[p_transactional_id], 'write');
        PERFORM acl_require_v1('group', ARRAY[p_group_id], 'read');
        PERFORM acl_require_v1('topic', p_topics, 'read');
    END IF;
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
$function$;
COMMENT ON FUNCTION txn_offset_commit_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[]) IS 'TxnOffsetCommit (KIP-447): consumer offsets pending in transaction p_txn_number, applied by its commit (only if later than the committed ones) and dropped by its abort. Checked like Kafka (member id, generation, instance id) and, beyond Kafka, against the member''s assignment in that generation.';

-- topic_config_v1(p_config jsonb)
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
$function$;
COMMENT ON FUNCTION topic_config_v1(p_config jsonb) IS 'Validates a topic configuration object (max_message_bytes, retention_ms, retention_bytes); raises OL001.';

-- create_topic_v1(p_name text, p_partitions integer, p_config jsonb)
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
$function$;
COMMENT ON FUNCTION create_topic_v1(p_name text, p_partitions integer, p_config jsonb) IS 'CreateTopics: a topic with p_partitions partitions and a config object; OL102 if it exists, OL103/OL104/OL001 on bad input.';

-- alter_topic_config_v1(p_name text, p_config jsonb)
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
        retention_bytes = CASE WHEN v_config ? 'retention_bytes' THEN (v_config ->> 'retention_bytes')::bigint
                               ELSE retention_bytes END
    WHERE name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_name);
    END IF;
END
$function$;
COMMENT ON FUNCTION alter_topic_config_v1(p_name text, p_config jsonb) IS 'IncrementalAlterConfigs: sets the keys present in p_config (a JSON null resets to default / no limit).';

-- expire_transactions_v1(p_now timestamp with time zone)
CREATE OR REPLACE FUNCTION expire_transactions_v1(p_now timestamp with time zone DEFAULT clock_timestamp())
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
$function$;
COMMENT ON FUNCTION expire_transactions_v1(p_now timestamp with time zone) IS 'Maintenance (also called by readers that meet an expired transaction): fences and aborts the oldest transaction open past its timeout (one per call, to keep the lock order: call again until 0), and moves transactional ids idle past transactional_id_expiration_ms to Dead. Returns the number aborted (0 or 1).';

-- expire_producers_v1(p_now timestamp with time zone)
CREATE OR REPLACE FUNCTION expire_producers_v1(p_now timestamp with time zone DEFAULT now())
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
$function$;
COMMENT ON FUNCTION expire_producers_v1(p_now timestamp with time zone) IS 'Maintenance: removes producer sequence state idle longer than settings.producer_id_expiration_ms, then idempotent producer ids with no state left; returns the number of sequence-state rows removed.';

-- enforce_retention_v1(p_batch integer, p_now timestamp with time zone)
CREATE OR REPLACE FUNCTION enforce_retention_v1(p_batch integer DEFAULT 10000, p_now timestamp with time zone DEFAULT now())
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
        -- A committed transaction's span that ends below the log start can no longer be read
        -- in part (revision 0014).
        DELETE FROM txn_spans s
        WHERE s.topic_id = pt.topic_id AND s.partition = pt.partition AND s.last_offset < v_start;
    END LOOP;
    RETURN v_deleted;
END
$function$;
COMMENT ON FUNCTION enforce_retention_v1(p_batch integer, p_now timestamp with time zone) IS 'Maintenance: advances each partition''s log start by its topic''s retention (time and size) and deletes at most p_batch records per partition below it; returns the number deleted (call again until 0).';

-- expire_txn_history_v1(p_now timestamp with time zone, p_batch integer)
CREATE OR REPLACE FUNCTION expire_txn_history_v1(p_now timestamp with time zone DEFAULT clock_timestamp(), p_batch integer DEFAULT 10000)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_before timestamptz;
    v_n integer;
BEGIN
    IF p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'batch must be at least 1';
    END IF;
    v_before := p_now - make_interval(secs => (SELECT s.txn_history_retention_ms FROM settings s) / 1000.0);
    PERFORM set_config('oncelog.pruning_txn_history', 'on', true);
    -- Oldest first, at most p_batch rows per call (the caller loops, one transaction each), so a
    -- large backlog never holds locks or bloats one transaction. Rows are immutable and only this
    -- function deletes them, so no lock order is involved.
    DELETE FROM txn_history h
    WHERE h.id IN (
        SELECT x.id FROM txn_history x
        WHERE x.at < v_before
          AND NOT (x.to_state = 'CompleteCommit' AND x.id = (
                SELECT max(y.id) FROM txn_history y
                WHERE y.transactional_id = x.transactional_id AND y.to_state = 'CompleteCommit'))
        ORDER BY x.id
        LIMIT p_batch);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    PERFORM set_config('oncelog.pruning_txn_history', 'off', true);
    RETURN v_n;
END
$function$;
COMMENT ON FUNCTION expire_txn_history_v1(p_now timestamp with time zone, p_batch integer) IS 'Maintenance: deletes up to p_batch txn_history rows older than settings.txn_history_retention_ms, keeping the newest CompleteCommit row of every transactional id. Returns the number deleted (call again until 0).';

-- reset_group_offsets_v1(p_group_id text, p_topics text[], p_partitions integer[], p_offsets bigint[])
CREATE OR REPLACE FUNCTION reset_group_offsets_v1(p_group_id text, p_topics text[], p_partitions integer[], p_offsets bigint[])
 RETURNS TABLE(topic text, partition integer, previous_offset bigint, new_offset bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
#variable_conflict use_column
DECLARE
    v_members integer;
    v_bad record;
BEGIN
    IF p_topics IS NULL OR p_partitions IS NULL OR p_offsets IS NULL OR cardinality(p_topics) = 0
       OR cardinality(p_topics) <> cardinality(p_partitions) OR cardinality(p_topics) <> cardinality(p_offsets) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = 'topics, partitions and offsets must be non-empty arrays of equal length';
    END IF;
    SELECT r.t, r.p INTO v_bad FROM unnest(p_topics, p_partitions) AS r(t, p) GROUP BY r.t, r.p HAVING count(*) > 1
    ORDER BY r.t, r.p
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = format('partition %s-%s is named twice', v_bad.t, v_bad.p);
    END IF;
    -- Validates the group id (OL401) and creates an unknown group, as Kafka's tool does.
    PERFORM group_lock_v1(p_group_id, true);
    -- Members silent past their session timeout are gone (a crashed consumer does not block a reset).
    PERFORM group_expire_members_v1(p_group_id);
    SELECT count(*) INTO v_members FROM group_members x WHERE x.group_id = p_group_id;
    IF v_members > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL410',
            MESSAGE = format('group %L has %s live member(s): offsets can be reset only while it has none '
                             '(stop its consumers, or wait for their session timeout)', p_group_id, v_members);
    END IF;
    SELECT r.t, r.p INTO v_bad FROM unnest(p_topics, p_partitions) AS r(t, p)
    WHERE NOT EXISTS (SELECT 1 FROM partitions pt JOIN topics t USING (topic_id) WHERE t.name = r.t AND pt.partition = r.p)
    ORDER BY r.t, r.p
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown partition %s-%s', v_bad.t, v_bad.p);
    END IF;
    SELECT r.t, r.p, r.o, pt.log_start_offset AS lo, pt.next_offset AS hi INTO v_bad
    FROM unnest(p_topics, p_partitions, p_offsets) AS r(t, p, o)
    JOIN topics t ON t.name = r.t
    JOIN partitions pt ON pt.topic_id = t.topic_id AND pt.partition = r.p
    WHERE r.o IS NULL OR r.o < pt.log_start_offset OR r.o > pt.next_offset
    ORDER BY r.t, r.p
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL108',
            MESSAGE = format('offset %s is outside %s-%s: it must be within [%s, %s] (log start offset, high watermark)',
                             coalesce(v_bad.o::text, 'NULL'), v_bad.t, v_bad.p, v_bad.lo, v_bad.hi);
    END IF;
    -- A fresh commit_seq: offsets pending in a transaction that is still open were written
    -- earlier, so its commit will not apply them over the reset (Kafka's rule 23).
    RETURN QUERY
    WITH req AS (
        SELECT r.t, r.p, r.o, t.topic_id FROM unnest(p_topics, p_partitions, p_offsets) AS r(t, p, o)
        JOIN topics t ON t.name = r.t
    ), old AS (
        SELECT c.topic_id, c.partition, c.committed_offset FROM committed_offsets c
        WHERE c.group_id = p_group_id
    ), written AS (
        INSERT INTO committed_offsets AS c (group_id, topic_id, partition, committed_offset, metadata, commit_seq,
                                            producer_id, committed_at)
        SELECT p_group_id, req.topic_id, req.p, req.o, '', nextval('offset_commit_seq'), NULL, now() FROM req
        ON CONFLICT ON CONSTRAINT pk_committed_offsets DO UPDATE SET
            committed_offset = EXCLUDED.committed_offset, metadata = EXCLUDED.metadata,
            commit_seq = EXCLUDED.commit_seq, producer_id = NULL, committed_at = EXCLUDED.committed_at
        RETURNING c.topic_id, c.partition
    )
    SELECT req.t, req.p, old.committed_offset, req.o
    FROM req
    JOIN written w ON w.topic_id = req.topic_id AND w.partition = req.p
    LEFT JOIN old ON old.topic_id = req.topic_id AND old.partition = req.p
    ORDER BY req.t, req.p;
END
$function$;
COMMENT ON FUNCTION reset_group_offsets_v1(p_group_id text, p_topics text[], p_partitions integer[], p_offsets bigint[]) IS 'Operator: sets the committed offsets of a consumer group with no live members (else NON_EMPTY_GROUP, OL410), each within [log start offset, high watermark] of its partition (else OL108; unknown partitions OL101). Creates an unknown group. Returns each partition''s previous offset (NULL if none) and new offset.';

REVOKE ALL ON FUNCTION expire_transactions_v1(timestamptz) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION expire_transactions_v1(timestamptz) TO @schema@_client, @schema@_admin;

REVOKE ALL ON FUNCTION expire_producers_v1(timestamptz) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION expire_producers_v1(timestamptz) TO @schema@_admin;

REVOKE ALL ON FUNCTION enforce_retention_v1(integer, timestamptz) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION enforce_retention_v1(integer, timestamptz) TO @schema@_admin;

REVOKE ALL ON FUNCTION expire_txn_history_v1(timestamptz, integer) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION expire_txn_history_v1(timestamptz, integer) TO @schema@_admin;

DROP FUNCTION server_now_v1();

DROP FUNCTION headers_valid_v1(jsonb);

DROP FUNCTION txn_owner_check_v1(text, oid);

DROP FUNCTION group_generation_required_v1(text, integer);

DROP TABLE clock;

ALTER TABLE topics DROP COLUMN message_timestamp_after_max_ms;

ALTER TABLE producers DROP COLUMN owner;
