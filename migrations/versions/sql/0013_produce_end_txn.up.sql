CREATE FUNCTION produce_end_txn_v1(
    p_topic text, p_partition integer, p_producer_id bigint, p_producer_epoch smallint, p_base_sequence integer,
    p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamptz[],
    p_transactional_id text, p_txn_number bigint)
RETURNS TABLE (base_offset bigint, last_offset bigint, log_append_time timestamptz, duplicate boolean, outcome text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION produce_end_txn_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[],
                                       timestamptz[], text, bigint) IS
  'A transaction''s last batch (produce_v2) and its commit (end_txn_v1) in one database transaction: both or '
  'neither. Returns the batch''s offsets and EndTxn''s outcome (committed; already_committed for a retry of a call '
  'that committed, with the batch''s offsets; timed_out when the transaction had passed its timeout and was '
  'aborted instead). Errors as produce_v2 and end_txn_v1.';

REVOKE ALL ON FUNCTION produce_end_txn_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[], text, bigint) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION produce_end_txn_v1(text, integer, bigint, smallint, integer, bytea[], bytea[], jsonb[], timestamptz[], text, bigint) TO @schema@_client, @schema@_admin;
