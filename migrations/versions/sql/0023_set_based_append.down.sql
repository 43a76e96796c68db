DROP FUNCTION append_batches_v1(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[]);

DROP FUNCTION list_offsets_for_times_v1(text[], integer[], timestamp with time zone[], boolean);

DROP FUNCTION producer_window_push_v1(bigint, smallint, integer[], integer[], integer[], integer[], bigint[], timestamp with time zone);

DROP FUNCTION unknown_partition_v1(text[], integer[]);

CREATE OR REPLACE FUNCTION fetch_wait_v1(p_topics text[], p_partitions integer[], p_read_committed boolean, p_wait_ms integer)
 RETURNS TABLE(channel text, topic text, topic_id integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_channel text := wake_channel_v1();
    v_until timestamptz;
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
    INSERT INTO fetch_waiters AS w (topic_id, partition, committed_until, uncommitted_until)
    SELECT DISTINCT t.topic_id, q.partition,
           CASE WHEN p_read_committed THEN v_until END, CASE WHEN NOT p_read_committed THEN v_until END
    FROM unnest(p_topics, p_partitions) AS q(topic, partition)
    JOIN topics t ON t.name = q.topic
    JOIN partitions pt ON pt.topic_id = t.topic_id AND pt.partition = q.partition
    ORDER BY 1, 2
    ON CONFLICT ON CONSTRAINT pk_fetch_waiters DO UPDATE SET
        committed_until = greatest(w.committed_until, EXCLUDED.committed_until),
        uncommitted_until = greatest(w.uncommitted_until, EXCLUDED.uncommitted_until);
    -- An append checks for waiters under its partition's lock (produce_batches_v1, the commits).
    -- Wait here until the appends holding these partitions now have finished: they committed
    -- before the caller's next fetch (which then sees them), and every later one sees this
    -- registration and wakes the caller. FOR SHARE is the row lock that conflicts with an
    -- append's; it is taken in the lock order and released at once (the subtransaction rolls
    -- back), so no reader holds up a writer beyond that.
    BEGIN
        PERFORM 1 FROM partitions pt JOIN topics t ON t.topic_id = pt.topic_id
        WHERE (t.name, pt.partition) IN (SELECT q.topic, q.partition FROM unnest(p_topics, p_partitions) AS q(topic, partition))
        ORDER BY pt.topic_id, pt.partition
        FOR SHARE OF pt;
        RAISE EXCEPTION USING ERRCODE = 'OLW00', MESSAGE = 'release the locks';
    EXCEPTION WHEN SQLSTATE 'OLW00' THEN
        NULL;
    END;
    EXECUTE format('LISTEN %I', v_channel);
    RETURN QUERY SELECT v_channel, t.name, t.topic_id FROM topics t WHERE t.name = ANY(p_topics) ORDER BY t.topic_id;
END
$function$;

COMMENT ON FUNCTION fetch_wait_v1(text[], integer[], boolean, integer) IS 'A reader about to wait for records on these partitions (read_committed: for commits; otherwise for appends): registers the wait for p_wait_ms (up to 5 minutes), waits for the appends in flight on them to finish, and LISTENs on the schema''s channel, returned with the topics'' ids. A write that lands on a waited-on partition answers its producer with the partition''s wake token (topic_id:partition), which the producer NOTIFYs on the channel, outside the write''s transaction. The caller then fetches once more before it waits: what committed before the registration is seen by that fetch, what commits after it wakes the caller.';

REVOKE ALL ON FUNCTION fetch_wait_v1(text[], integer[], boolean, integer) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION fetch_wait_v1(text[], integer[], boolean, integer) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION outbox_flush_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    b record;
BEGIN
    -- Deferred to the commit, once per staged row: the first appends every record the
    -- transaction staged, the others find nothing left.
    IF NOT EXISTS (SELECT 1 FROM outbox_records o WHERE o.xact_id = NEW.xact_id) THEN
        RETURN NULL;
    END IF;
    -- Partitions in (topic_id, partition) order, the documented lock order; records in the
    -- order they were sent, in batches of at most max_batch_records.
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
    DELETE FROM outbox_records o WHERE o.xact_id = NEW.xact_id;
    RETURN NULL;
END
$function$;

COMMENT ON FUNCTION outbox_flush_v1() IS 'Internal (deferred constraint trigger on outbox_records): at the commit, appends the records the transaction staged with send_v1, partition by partition in lock order (produce_v2), and removes them from the stage.';

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
    -- Each batch in a subtransaction, so that one batch's refusal (an OL error: a sequence out of
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
    -- The documented lock order (docs/design.md): the transactions row (held; txn_check_v1
    -- checks the owner and the epoch first, so a fenced or foreign caller locks nothing more),
    -- the group's row (txn_offset_commit_v1, which checks the member, its generation and its
    -- partitions under it), the producer row, then every partition the commit writes to (the
    -- transaction's and these batches') in (topic_id, partition) order.
    PERFORM txn_check_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, true);
    IF p_group_id IS NOT NULL THEN
        PERFORM txn_offset_commit_v1(p_transactional_id, p_producer_id, p_producer_epoch, p_txn_number, p_group_id,
                                     p_member_id, p_group_instance_id, p_generation, p_offset_topics,
                                     p_offset_partitions, p_offsets, p_offset_metadata);
    END IF;
    PERFORM 1 FROM producers p WHERE p.producer_id = p_producer_id FOR SHARE;
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
    -- EndTxn; any error rolls all of it back, the offsets included.
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

CREATE OR REPLACE FUNCTION read_limits_v1(p_topics text[], p_partitions integer[], p_starts bigint[], p_limits bigint[])
 RETURNS TABLE(topic text, partition integer, read_limit bigint)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
    SELECT format('%s-%s', x.name, x.part) INTO v_missing
    FROM unnest(p_topics, p_partitions) AS x(name, part)
    WHERE NOT EXISTS (SELECT 1 FROM partitions pt JOIN topics t USING (topic_id)
                      WHERE t.name = x.name AND pt.partition = x.part)
    LIMIT 1;
    IF FOUND THEN
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
$function$;

COMMENT ON FUNCTION read_limits_v1(text[], integer[], bigint[], bigint[]) IS 'For ranges [start, limit) of partitions, limits are last stable offsets or below: the limits under which every committed transaction in them is read on all of these partitions or on none (planned reads, e.g. Spark). Needs topic READ when ACLs are enforced.';

REVOKE ALL ON FUNCTION read_limits_v1(text[], integer[], bigint[], bigint[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION read_limits_v1(text[], integer[], bigint[], bigint[]) TO @schema@_reader, @schema@_client, @schema@_admin;

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
    UPDATE transactions x
    SET state = CASE WHEN p_commit THEN 'CompleteCommit' ELSE 'CompleteAbort' END, txn_started_at = NULL
    WHERE x.transactional_id = p_transactional_id;
END
$function$;

COMMENT ON FUNCTION txn_complete_v1(text, boolean) IS 'Internal: commits or aborts the Ongoing transaction (markers on every written partition, pending offsets applied or dropped, aborted records flagged) in the caller''s database transaction.';

REVOKE ALL ON FUNCTION txn_complete_v1(text, boolean) FROM PUBLIC;
