CREATE UNLOGGED TABLE fetch_waiters (
	topic_id INTEGER NOT NULL,
	partition INTEGER NOT NULL,
	committed_until TIMESTAMP WITH TIME ZONE,
	uncommitted_until TIMESTAMP WITH TIME ZONE,
	CONSTRAINT pk_fetch_waiters PRIMARY KEY (topic_id, partition),
	CONSTRAINT fk_fetch_waiters_topic_id_partition_partitions FOREIGN KEY(topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);

COMMENT ON TABLE fetch_waiters IS 'Readers waiting for records (fetch_wait_v1): a write to a partition with a reader waiting answers its producer with the partition''s wake token, which it NOTIFYs outside the write''s transaction. Unlogged: emptied by a crash, which costs a waiting reader one poll interval.';

COMMENT ON COLUMN fetch_waiters.topic_id IS 'The topic.';

COMMENT ON COLUMN fetch_waiters.partition IS 'The partition someone waits on.';

COMMENT ON COLUMN fetch_waiters.committed_until IS 'Until when a read_committed reader waits for a commit here (NULL: none has).';

COMMENT ON COLUMN fetch_waiters.uncommitted_until IS 'Until when a read_uncommitted reader waits for an append here (NULL: none has).';

REVOKE ALL ON TABLE fetch_waiters FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;
GRANT SELECT ON TABLE fetch_waiters TO @schema@_admin;

CREATE OR REPLACE FUNCTION end_txn_v2(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_commit boolean, OUT outcome text, OUT wake text[])
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
BEGIN
    outcome := end_txn_v1(p_transactional_id, p_producer_id, p_epoch, p_txn_number, p_commit);
    IF outcome = 'committed' THEN
        wake := txn_waiters_v1(p_producer_id, p_txn_number);
    END IF;
END
$function$;

COMMENT ON FUNCTION end_txn_v2(text, bigint, smallint, bigint, boolean) IS 'end_txn_v1, and the tokens (topic_id:partition) of the partitions of a commit on which a read_committed reader waits: the caller wakes them, outside this transaction, with a NOTIFY on the schema''s channel (wake_channel_v1()).';

REVOKE ALL ON FUNCTION end_txn_v2(text, bigint, smallint, bigint, boolean) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION end_txn_v2(text, bigint, smallint, bigint, boolean) TO @schema@_client, @schema@_admin;

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

CREATE OR REPLACE FUNCTION fetch_waiting_v1(p_topic text, p_partition integer, p_committed boolean, p_uncommitted boolean)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_token text;
BEGIN
    SELECT t.topic_id || ':' || w.partition INTO v_token
    FROM fetch_waiters w JOIN topics t ON t.topic_id = w.topic_id
    WHERE t.name = p_topic AND w.partition = p_partition
      AND ((p_committed AND w.committed_until > server_now_v1())
           OR (p_uncommitted AND w.uncommitted_until > server_now_v1()));
    RETURN v_token;
END
$function$;

COMMENT ON FUNCTION fetch_waiting_v1(text, integer, boolean, boolean) IS 'Internal: the wake token (topic_id:partition) of a partition on which a read_committed (p_committed) or read_uncommitted (p_uncommitted) reader waits now; NULL if none does.';

REVOKE ALL ON FUNCTION fetch_waiting_v1(text, integer, boolean, boolean) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION produce_end_txn_v3(p_transactional_id text, p_producer_id bigint, p_producer_epoch smallint, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_offset_topics text[], p_offset_partitions integer[], p_offsets bigint[], p_offset_metadata text[], OUT base_offsets bigint[], OUT last_offsets bigint[], OUT log_append_times timestamp with time zone[], OUT duplicates boolean[], OUT outcome text, OUT wake text[])
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION produce_end_txn_v3(text, bigint, smallint, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], text, text, text, integer, text[], integer[], bigint[], text[]) IS 'produce_end_txn_v2, and the tokens (topic_id:partition) of the partitions of a commit on which a read_committed reader waits: the caller wakes them, outside this transaction, with a NOTIFY on the schema''s channel (wake_channel_v1()).';

REVOKE ALL ON FUNCTION produce_end_txn_v3(text, bigint, smallint, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], text, text, text, integer, text[], integer[], bigint[], text[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION produce_end_txn_v3(text, bigint, smallint, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], text, text, text, integer, text[], integer[], bigint[], text[]) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION txn_waiters_v1(p_producer_id bigint, p_txn_number bigint)
 RETURNS text[]
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_tokens text[];
BEGIN
    -- The partitions a committed transaction wrote to (its spans) on which a read_committed
    -- reader waits. Called right after the commit, under the partitions' locks it took.
    SELECT array_agg(s.topic_id || ':' || s.partition ORDER BY s.topic_id, s.partition) INTO v_tokens
    FROM txn_spans s
    JOIN fetch_waiters w ON w.topic_id = s.topic_id AND w.partition = s.partition
    WHERE s.producer_id = p_producer_id AND s.txn_number = p_txn_number AND w.committed_until > server_now_v1();
    RETURN v_tokens;
END
$function$;

COMMENT ON FUNCTION txn_waiters_v1(bigint, bigint) IS 'Internal: the wake tokens (topic_id:partition) of the partitions of a just committed transaction on which a read_committed reader waits.';

REVOKE ALL ON FUNCTION txn_waiters_v1(bigint, bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION wake_channel_v1()
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path FROM CURRENT
AS $function$
    -- One channel per oncelog schema (a database may hold several), named by the schema's oid: a
    -- channel is an identifier of at most 63 bytes, which a schema name alone can fill.
    SELECT 'oncelog_wake_' || n.oid FROM pg_namespace n WHERE n.nspname = current_schema()
$function$;

COMMENT ON FUNCTION wake_channel_v1() IS 'The LISTEN/NOTIFY channel on which this schema''s waiting readers are woken: a producer NOTIFYs it with the wake tokens (topic_id:partition, comma-separated) a write answered with.';

REVOKE ALL ON FUNCTION wake_channel_v1() FROM PUBLIC;

GRANT EXECUTE ON FUNCTION wake_channel_v1() TO @schema@_client, @schema@_admin;
