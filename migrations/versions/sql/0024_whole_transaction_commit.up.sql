DROP FUNCTION append_batches_v1(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[]);

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

REVOKE ALL ON FUNCTION append_batches_v2(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION outbox_flush_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    b record;
    v_topics text[];
    v_partitions integer[];
    v_counts integer[];
    v_keys bytea[];
    v_values bytea[];
    v_headers jsonb[];
    v_whole boolean;
    v_appended integer := 0;
    v_wake text;
BEGIN
    -- Deferred to the commit, once per staged row: the first appends every record the
    -- transaction staged, the others find nothing left.
    IF NOT EXISTS (SELECT 1 FROM outbox_records o WHERE o.xact_id = NEW.xact_id) THEN
        RETURN NULL;
    END IF;
    -- Every partition the transaction sent to, locked in (topic_id, partition) order, the
    -- documented lock order, and held through the commit that follows. Only those of topics the
    -- caller may still write (as produce_batches_v1): an ACL revoked since the send is refused
    -- below by produce_v2, and the caller never held a partition it has no right to.
    PERFORM 1 FROM partitions pt JOIN topics t ON t.topic_id = pt.topic_id
    WHERE (pt.topic_id, pt.partition) IN (SELECT o.topic_id, o.partition FROM outbox_records o WHERE o.xact_id = NEW.xact_id)
      AND acl_allowed_v1('topic', t.name, 'write')
    ORDER BY pt.topic_id, pt.partition
    FOR NO KEY UPDATE OF pt;
    -- One batch per partition, records in the order they were sent, appended all at once
    -- (append_batches_v2, revision 0023) when the transaction sent to several partitions and none
    -- holds more than max_batch_records. A single batch goes to produce_v2, which costs less.
    SELECT array_agg(t.name ORDER BY c.topic_id, c.partition), array_agg(c.partition ORDER BY c.topic_id, c.partition),
           array_agg(c.n ORDER BY c.topic_id, c.partition), bool_and(c.n <= s.max_batch_records)
    INTO v_topics, v_partitions, v_counts, v_whole
    FROM (SELECT o.topic_id, o.partition, count(*)::integer AS n FROM outbox_records o WHERE o.xact_id = NEW.xact_id
          GROUP BY o.topic_id, o.partition) c
    JOIN topics t ON t.topic_id = c.topic_id
    CROSS JOIN settings s;
    IF v_whole AND cardinality(v_topics) > 1 THEN
        SELECT array_agg(o.key ORDER BY o.topic_id, o.partition, o.seq), array_agg(o.value ORDER BY o.topic_id, o.partition, o.seq),
               CASE WHEN bool_or(o.headers IS NOT NULL) THEN array_agg(o.headers ORDER BY o.topic_id, o.partition, o.seq) END
        INTO v_keys, v_values, v_headers
        FROM outbox_records o WHERE o.xact_id = NEW.xact_id;
        SELECT count(*) INTO v_appended
        FROM append_batches_v2(NULL, NULL, NULL, NULL, v_topics, v_partitions, NULL, v_counts, v_keys, v_values,
                               v_headers, NULL, false);
    END IF;
    IF v_appended = 0 THEN
        -- One batch, larger than a batch, or not the common case: produce_v2, which also raises
        -- what a record staged earlier may now break (a topic's limits changed since the send).
        FOR b IN
            SELECT t.name, c.partition, array_agg(c.key ORDER BY c.seq) AS keys, array_agg(c.value ORDER BY c.seq) AS vals,
                   CASE WHEN bool_or(c.headers IS NOT NULL) THEN array_agg(c.headers ORDER BY c.seq) END AS hdrs
            FROM (SELECT o.*, (row_number() OVER (PARTITION BY o.topic_id, o.partition ORDER BY o.seq) - 1)
                              / (SELECT s.max_batch_records FROM settings s) AS chunk
                  FROM outbox_records o WHERE o.xact_id = NEW.xact_id) c
            JOIN topics t ON t.topic_id = c.topic_id
            GROUP BY c.topic_id, t.name, c.partition, c.chunk
            ORDER BY c.topic_id, c.partition, c.chunk
        LOOP
            PERFORM produce_v2(b.name, b.partition, NULL, NULL, NULL, b.keys, b.vals, b.hdrs);
        END LOOP;
    END IF;
    DELETE FROM outbox_records o WHERE o.xact_id = NEW.xact_id;
    -- Readers waiting on these partitions (registered in fetch_waiters; one registering now waits
    -- for the partition locks held here, so it sees these records) are woken by a NOTIFY, which
    -- PostgreSQL delivers when this transaction commits and drops if it rolls back. Only when a
    -- reader waits: a NOTIFY makes the commit queue for the server's notification lock. And only
    -- on a server that cannot PREPARE TRANSACTION: this runs at a PREPARE too, and PostgreSQL
    -- refuses to prepare a transaction that has notified. There the readers find these records
    -- by their own next look (fetch_max_backoff_ms at most).
    IF current_setting('max_prepared_transactions')::integer > 0 THEN
        RETURN NULL;
    END IF;
    SELECT string_agg(w.token, ',') INTO v_wake
    FROM (SELECT fetch_waiting_v1(q.topic, q.partition, true, true) AS token
          FROM unnest(v_topics, v_partitions) AS q(topic, partition)) w
    WHERE w.token IS NOT NULL;
    IF v_wake IS NOT NULL THEN
        PERFORM pg_notify(wake_channel_v1(), v_wake);
    END IF;
    RETURN NULL;
END
$function$;

COMMENT ON FUNCTION outbox_flush_v1() IS 'Internal (deferred constraint trigger on outbox_records): at the commit, appends the records the transaction staged with send_v1, every partition locked first in lock order (one set-based append, or produce_v2 per batch when a partition holds more than a batch), removes them from the stage, and wakes the readers waiting on those partitions (a NOTIFY delivered at the commit; not on a server that allows PREPARE TRANSACTION, which refuses to prepare a transaction that has notified).';

REVOKE ALL ON FUNCTION outbox_flush_v1() FROM PUBLIC;

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
        PERFORM txn_check_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true);
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

REVOKE ALL ON FUNCTION produce_batches_v1(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION produce_batches_v1(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[]) TO @schema@_client, @schema@_admin;

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

REVOKE ALL ON FUNCTION produce_end_txn_v2(text, bigint, smallint, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], text, text, text, integer, text[], integer[], bigint[], text[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION produce_end_txn_v2(text, bigint, smallint, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], text, text, text, integer, text[], integer[], bigint[], text[]) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION producer_window_push_v1(p_producer_id bigint, p_epoch smallint, p_topic_ids integer[], p_partitions integer[], p_first_sequences integer[], p_counts integer[], p_first_offsets bigint[], p_now timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION producer_window_push_v1(bigint, smallint, integer[], integer[], integer[], integer[], bigint[], timestamp with time zone) IS 'Internal: records appended batches in the producer''s five-batch sequence window of each partition (produce_v2, append_batches_v2).';

REVOKE ALL ON FUNCTION producer_window_push_v1(bigint, smallint, integer[], integer[], integer[], integer[], bigint[], timestamp with time zone) FROM PUBLIC;

CREATE OR REPLACE FUNCTION txn_complete_v1(p_transactional_id text, p_commit boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    t transactions%ROWTYPE;
    v_epoch smallint;
    tp record;
BEGIN
    SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id;
    IF t.state <> 'Ongoing' THEN
        RAISE EXCEPTION USING ERRCODE = 'OL303',
            MESSAGE = format('transaction of %L is %s, not Ongoing', p_transactional_id, t.state);
    END IF;
    SELECT p.epoch INTO v_epoch FROM producers p WHERE p.producer_id = t.producer_id;
    -- A transaction that wrote no record here needs no marker (an empty one, or one whose markers
    -- append_batches_v2 wrote with its records, revision 0024): skip the statements below.
    PERFORM 1 FROM txn_partitions x WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL LIMIT 1;
    IF FOUND THEN
        -- Every partition the transaction wrote to, in (topic_id, partition) order, the documented
        -- lock order (rows are locked as the sorted scan returns them). A partition the transaction
        -- never wrote to needs no marker. Each partition's marker goes at its next offset; the
        -- statements below are set-based (revision 0023: one statement per table, not one per
        -- partition), and all read that offset before the last one moves it.
        PERFORM 1 FROM partitions pt
        WHERE (pt.topic_id, pt.partition) IN (
            SELECT x.topic_id, x.partition FROM txn_partitions x
            WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL)
        ORDER BY pt.topic_id, pt.partition
        FOR NO KEY UPDATE;
        IF NOT p_commit THEN
            -- The producer has one open transaction, so its records from the first offset on are
            -- this transaction's. Only aborts rewrite rows; commits touch no data row. One partition
            -- at a time: each is a range scan of the records' primary key.
            FOR tp IN
                SELECT x.topic_id, x.partition, x.first_offset, pt.next_offset FROM txn_partitions x
                JOIN partitions pt ON pt.topic_id = x.topic_id AND pt.partition = x.partition
                WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL
                ORDER BY x.topic_id, x.partition
            LOOP
                UPDATE records r SET aborted = true
                WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition
                  AND r."offset" >= tp.first_offset AND r."offset" < tp.next_offset
                  AND r.producer_id = t.producer_id AND r.is_transactional AND r.control_type IS NULL;
            END LOOP;
        END IF;
        INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, is_transactional, control_type,
                             txn_number)
        SELECT x.topic_id, x.partition, pt.next_offset, t.producer_id, v_epoch, true,
               CASE WHEN p_commit THEN 'commit' ELSE 'abort' END, t.txn_number
        FROM txn_partitions x JOIN partitions pt ON pt.topic_id = x.topic_id AND pt.partition = x.partition
        WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL
        ORDER BY x.topic_id, x.partition;
        IF p_commit THEN
            -- The span read_committed fetches test transactions against (consistent_limits_v1).
            -- Its last record is the producer's last batch here: the producer's records from the
            -- first offset on are this transaction's (as for the abort above), and produce_v2
            -- keeps that batch in its sequence state. A state expired meanwhile is looked up (the
            -- CASE runs that scan only then).
            INSERT INTO txn_spans (producer_id, txn_number, topic_id, partition, first_offset, last_offset)
            SELECT t.producer_id, t.txn_number, x.topic_id, x.partition, x.first_offset,
                   CASE WHEN ps.last_offsets[cardinality(ps.last_offsets)] >= x.first_offset
                             AND ps.last_offsets[cardinality(ps.last_offsets)] < pt.next_offset
                        THEN ps.last_offsets[cardinality(ps.last_offsets)]
                        ELSE (SELECT max(r."offset") FROM records r
                              WHERE r.topic_id = x.topic_id AND r.partition = x.partition
                                AND r."offset" >= x.first_offset AND r."offset" < pt.next_offset
                                AND r.producer_id = t.producer_id AND r.is_transactional AND r.control_type IS NULL) END
            FROM txn_partitions x
            JOIN partitions pt ON pt.topic_id = x.topic_id AND pt.partition = x.partition
            LEFT JOIN producer_partition_state ps
                   ON ps.producer_id = t.producer_id AND ps.topic_id = x.topic_id AND ps.partition = x.partition
            WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL
            ORDER BY x.topic_id, x.partition;
        END IF;
        UPDATE partitions pt SET next_offset = pt.next_offset + 1
        FROM txn_partitions x
        WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL
          AND pt.topic_id = x.topic_id AND pt.partition = x.partition;
    END IF;
    IF p_commit THEN
        -- KIP-447: pending offsets become committed only if written after the committed ones.
        INSERT INTO committed_offsets AS c
            (group_id, topic_id, partition, committed_offset, metadata, commit_seq, producer_id, committed_at)
        SELECT po.group_id, po.topic_id, po.partition, po.committed_offset, po.metadata, po.commit_seq,
               po.producer_id, now()
        FROM pending_offsets po WHERE po.transactional_id = p_transactional_id
        -- Offset rows in key order (revision 0017), as every writer of committed_offsets takes
        -- them: two commits for the same group and partitions cannot deadlock on each other.
        ORDER BY po.group_id, po.topic_id, po.partition
        ON CONFLICT ON CONSTRAINT pk_committed_offsets DO UPDATE SET
            committed_offset = EXCLUDED.committed_offset, metadata = EXCLUDED.metadata,
            commit_seq = EXCLUDED.commit_seq, producer_id = EXCLUDED.producer_id,
            committed_at = EXCLUDED.committed_at
        WHERE c.commit_seq < EXCLUDED.commit_seq;
    END IF;
    DELETE FROM pending_offsets po WHERE po.transactional_id = p_transactional_id;
    DELETE FROM txn_partitions x WHERE x.transactional_id = p_transactional_id;
    -- Ongoing to Complete in one update (revision 0024): txn_transition_v1 journals it as Kafka's
    -- two steps, through PrepareCommit or PrepareAbort, which no other session could see anyway.
    UPDATE transactions x
    SET state = CASE WHEN p_commit THEN 'CompleteCommit' ELSE 'CompleteAbort' END, txn_started_at = NULL
    WHERE x.transactional_id = p_transactional_id;
END
$function$;

COMMENT ON FUNCTION txn_complete_v1(text, boolean) IS 'Internal: commits or aborts the Ongoing transaction (markers on every written partition, pending offsets applied or dropped, aborted records flagged) in the caller''s database transaction.';

REVOKE ALL ON FUNCTION txn_complete_v1(text, boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION txn_transition_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_epoch smallint;
    v_prepare text;
    v_whole boolean := false;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'Empty' THEN
            RAISE EXCEPTION USING ERRCODE = 'OL303',
                MESSAGE = format('transactional id %L must start in state Empty, not %s',
                                 NEW.transactional_id, NEW.state);
        END IF;
    ELSE
        -- A whole transaction opened and committed by one update (produce_end_txn_v2, revision
        -- 0024): the next number, the same producer, from a state a transaction may open from.
        v_whole := OLD.state IN ('Empty', 'CompleteCommit', 'CompleteAbort') AND NEW.state = 'CompleteCommit'
                   AND NEW.txn_number = OLD.txn_number + 1 AND NEW.producer_id = OLD.producer_id;
    END IF;
    IF TG_OP = 'UPDATE' AND NOT v_whole AND (OLD.state, NEW.state) NOT IN (
        ('Empty', 'Empty'), ('Empty', 'Ongoing'), ('Empty', 'Dead'),
        ('Ongoing', 'Ongoing'), ('Ongoing', 'PrepareCommit'), ('Ongoing', 'PrepareAbort'),
        ('Ongoing', 'CompleteCommit'), ('Ongoing', 'CompleteAbort'),
        ('PrepareCommit', 'CompleteCommit'), ('PrepareAbort', 'CompleteAbort'),
        ('CompleteCommit', 'Empty'), ('CompleteCommit', 'Ongoing'), ('CompleteCommit', 'Dead'),
        ('CompleteAbort', 'Empty'), ('CompleteAbort', 'Ongoing'), ('CompleteAbort', 'Dead'),
        ('Dead', 'Empty')
    ) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL303',
            MESSAGE = format('illegal transaction state transition %s -> %s for transactional id %L',
                             OLD.state, NEW.state, NEW.transactional_id);
    END IF;
    SELECT epoch INTO v_epoch FROM producers WHERE producer_id = NEW.producer_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL302',
            MESSAGE = format('producer id %s of transactional id %L does not exist',
                             NEW.producer_id, NEW.transactional_id);
    END IF;
    NEW.updated_at := now();
    IF v_whole THEN
        -- Journaled as the three steps it stands for.
        INSERT INTO txn_history (transactional_id, producer_id, producer_epoch, txn_number, from_state, to_state)
        VALUES (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number, OLD.state, 'Ongoing'),
               (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number, 'Ongoing', 'PrepareCommit'),
               (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number, 'PrepareCommit', 'CompleteCommit');
    ELSIF TG_OP = 'UPDATE' AND OLD.state = 'Ongoing' AND NEW.state IN ('CompleteCommit', 'CompleteAbort') THEN
        -- EndTxn's two steps in one update (txn_complete_v1, revision 0024), journaled as two: the
        -- Prepare state lived only inside this database transaction.
        v_prepare := CASE WHEN NEW.state = 'CompleteCommit' THEN 'PrepareCommit' ELSE 'PrepareAbort' END;
        INSERT INTO txn_history (transactional_id, producer_id, producer_epoch, txn_number, from_state, to_state)
        VALUES (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number, 'Ongoing', v_prepare),
               (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number, v_prepare, NEW.state);
    ELSE
        INSERT INTO txn_history (transactional_id, producer_id, producer_epoch, txn_number, from_state, to_state)
        VALUES (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number,
                CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END, NEW.state);
    END IF;
    RETURN NEW;
END
$function$;

COMMENT ON FUNCTION txn_transition_v1() IS 'Trigger: refuses illegal coordinator state transitions (SQLSTATE OL303) and appends every transition to txn_history. Two updates stand for several steps and are journaled as such: Ongoing to CompleteCommit or CompleteAbort (through PrepareCommit or PrepareAbort), and Empty, CompleteCommit or CompleteAbort to CompleteCommit with the next transaction number (a whole transaction opened and committed at once: through Ongoing and PrepareCommit).';
