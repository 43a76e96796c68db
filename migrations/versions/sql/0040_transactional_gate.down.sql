DROP FUNCTION txn_gate_v1(text, boolean);

CREATE OR REPLACE FUNCTION abort_transaction_v1(p_transactional_id text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION abort_transaction_v1(text) IS 'Operator abort of an open (hanging) transaction: fences its producer and aborts it, updating the coordinator state (Kafka''s tool only writes a marker).';

REVOKE ALL ON FUNCTION abort_transaction_v1(text) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION abort_transaction_v1(text) TO @schema@_admin;

CREATE OR REPLACE FUNCTION append_batches_v2(p_producer_id bigint, p_producer_epoch smallint, p_transactional_id text, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_commit boolean)
 RETURNS TABLE(base_offset bigint, last_offset bigint, log_append_time timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
-- transaction open through txn_check_v1, or with p_commit as below) and every partition of the
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
$function$;

COMMENT ON FUNCTION append_batches_v2(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], boolean) IS 'Internal: appends every batch of a request (batch b: p_counts[b] records of the concatenated arrays, at p_base_sequences[b]) in one statement per table when each is new, next in sequence, valid and alone in its partition, returning one row per batch in order; otherwise no row and no write (the caller then runs produce_v2 per batch). The caller holds the transactions row (the transaction open, except with p_commit) and every partition row, in the documented order. p_commit: the batches are the whole transaction, opened and committed in the caller''s database transaction (produce_end_txn_v2): each partition''s commit marker and the transaction''s spans are written too, and txn_partitions is left alone; the caller then completes the transaction (one update of its row, or txn_complete_v1 when it carries consumer offsets).';

REVOKE ALL ON FUNCTION append_batches_v2(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], boolean) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

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
    PERFORM txn_owner_check_v1(p_transactional_id, pr.owner);  -- before the epoch: see txn_check_v1
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

COMMENT ON FUNCTION end_txn_v1(text, bigint, smallint, bigint, boolean) IS 'EndTxn: commits or aborts transaction p_txn_number in one database transaction. Returns committed, aborted, already_committed / already_aborted (a retry), timed_out (the commit came too late; the transaction was aborted and the epoch bumped), or aborted_timed_out / already_aborted_timed_out (an abort of a transaction past its timeout: the epoch was bumped, re-initialise). Abort after commit, or a call naming another transaction: OL303.';

REVOKE ALL ON FUNCTION end_txn_v1(text, bigint, smallint, bigint, boolean) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION end_txn_v1(text, bigint, smallint, bigint, boolean) TO @schema@_client, @schema@_admin;

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
    v_caller oid := acl_caller_v1();
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
        INSERT INTO producers AS p (transactional_id, owner) VALUES (p_transactional_id, v_caller)
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
        -- Revision 0017: an identity held by an instance of another principal (which initialised
        -- it after this caller did, or before revision 0017 bound identities to principals) is
        -- fenced, as a stale identity is in Kafka, and the caller learns nothing of its epoch.
        -- Initialising without an identity takes the transactional id over (ACLs permitting).
        PERFORM txn_owner_check_v1(p_transactional_id, pr.owner);
        IF p_producer_id = t.prev_producer_id AND t.state <> 'Ongoing' AND EXISTS (
            SELECT 1 FROM producers old
            WHERE old.producer_id = p_producer_id AND old.transactional_id IS NULL AND old.last_epoch = p_epoch) THEN
            -- A retried bump that moved an exhausted epoch to a new producer id: the same answer.
            -- The retired id's last_epoch names the identity that asked for that move (revision
            -- 0017; it was its epoch before, which let any holder of the old id at that epoch,
            -- a zombie included, claim the new id).
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
        -- in this transaction) and remembered, so a retry of this call is recognised: its
        -- last_epoch names the identity that asked (none when the caller named none), and its
        -- epoch becomes the fencing epoch, which no instance holds, so nothing can write with it.
        v_prev := pr.producer_id;
        UPDATE producers p
        SET transactional_id = NULL, epoch = 32767,
            last_epoch = CASE WHEN p_producer_id IS NOT NULL AND p_producer_id = pr.producer_id THEN p_epoch END
        WHERE p.producer_id = pr.producer_id;
        INSERT INTO producers AS p (transactional_id, owner) VALUES (p_transactional_id, v_caller) RETURNING * INTO pr;
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
    IF pr.owner IS DISTINCT FROM v_caller THEN
        -- The new epoch belongs to the principal that asked for it (revision 0017).
        UPDATE producers p SET owner = v_caller WHERE p.producer_id = pr.producer_id RETURNING * INTO pr;
    END IF;
    -- One update for the state and the (possibly new) producer id: one journalled transition.
    UPDATE transactions x
    SET state = 'Empty', producer_id = pr.producer_id, prev_producer_id = v_prev, timeout_ms = p_timeout_ms
    WHERE x.transactional_id = p_transactional_id
    RETURNING * INTO t;
    RETURN QUERY SELECT pr.producer_id, pr.epoch, t.txn_number;
END
$function$;

COMMENT ON FUNCTION init_transactional_producer_id_v1(text, integer, bigint, smallint) IS 'InitProducerId with a transactional id: one producer id per transactional id; each call bumps the epoch, fencing older instances and aborting their open transaction. KIP-360: with the current (id, epoch), a bump; a retried bump gets the same answer; anything else PRODUCER_FENCED (OL301), as is an identity another principal has initialised since. Epoch exhaustion or an expired id: a new producer id at epoch 0. The identity returned is bound to the calling principal. Returns the transaction number reached.';

REVOKE ALL ON FUNCTION init_transactional_producer_id_v1(text, integer, bigint, smallint) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION init_transactional_producer_id_v1(text, integer, bigint, smallint) TO @schema@_client, @schema@_admin;

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

CREATE OR REPLACE FUNCTION produce_end_txn_v1(p_topic text, p_partition integer, p_producer_id bigint, p_producer_epoch smallint, p_base_sequence integer, p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_transactional_id text, p_txn_number bigint)
 RETURNS TABLE(base_offset bigint, last_offset bigint, log_append_time timestamp with time zone, duplicate boolean, outcome text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION produce_end_txn_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamp with time zone[], text, bigint) IS 'A transaction''s last batch (produce_v2) and its commit (end_txn_v1) in one database transaction: both or neither. Returns the batch''s offsets and EndTxn''s outcome (committed; already_committed for a retry of a call that committed, with the batch''s offsets; timed_out when the transaction had passed its timeout and was aborted instead). Errors as produce_v2 and end_txn_v1.';

REVOKE ALL ON FUNCTION produce_end_txn_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamp with time zone[], text, bigint) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION produce_end_txn_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamp with time zone[], text, bigint) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION produce_end_txn_v2(p_transactional_id text, p_producer_id bigint, p_producer_epoch smallint, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_offset_topics text[], p_offset_partitions integer[], p_offsets bigint[], p_offset_metadata text[], OUT base_offsets bigint[], OUT last_offsets bigint[], OUT log_append_times timestamp with time zone[], OUT duplicates boolean[], OUT outcome text)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION produce_end_txn_v2(text, bigint, smallint, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], text, text, text, integer, text[], integer[], bigint[], text[]) IS 'A transaction''s commit in one database transaction and one round trip: its last batches for any number of partitions (produce_v2 each: batch b is p_counts[b] records of the concatenated keys/values/headers/timestamps, at p_base_sequences[b]), its consumer offsets (txn_offset_commit_v1, when p_group_id is given) and EndTxn (end_txn_v1): all or nothing. Returns each batch''s offsets and EndTxn''s outcome (committed; already_committed for a retry of a call that committed, with the batches'' original offsets and duplicates all true; timed_out when the transaction had passed its timeout and was aborted instead). Errors as produce_v2, txn_offset_commit_v1 and end_txn_v1.';

REVOKE ALL ON FUNCTION produce_end_txn_v2(text, bigint, smallint, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], text, text, text, integer, text[], integer[], bigint[], text[]) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION produce_end_txn_v2(text, bigint, smallint, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], text, text, text, integer, text[], integer[], bigint[], text[]) TO @schema@_client, @schema@_admin;

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
