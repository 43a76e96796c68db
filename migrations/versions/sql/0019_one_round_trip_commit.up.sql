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
