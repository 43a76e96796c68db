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
    PERFORM group_generation_required_v1(p_group_id, p_generation);
    PERFORM group_member_check_v1(p_group_id, p_member_id, p_group_instance_id, p_generation);
    PERFORM group_owns_partitions_v1(p_group_id, p_member_id, p_generation, p_topics, p_partitions);
    INSERT INTO pending_offsets AS po (group_id, topic_id, partition, producer_id, transactional_id, committed_offset,
                                       metadata, commit_seq, generation, member_id)
    SELECT p_group_id, t.topic_id, r.partition, p_producer_id, p_transactional_id, r.off, coalesce(r.md, ''),
           nextval('offset_commit_seq'), p_generation, p_member_id
    FROM unnest(p_topics, p_partitions, p_offsets, p_metadata) AS r(topic, partition, off, md)
    JOIN topics t ON t.name = r.topic
    ORDER BY t.topic_id, r.partition  -- key order (revision 0017)
    ON CONFLICT ON CONSTRAINT pk_pending_offsets DO UPDATE SET
        committed_offset = EXCLUDED.committed_offset, metadata = EXCLUDED.metadata, commit_seq = EXCLUDED.commit_seq,
        generation = EXCLUDED.generation, member_id = EXCLUDED.member_id, transactional_id = EXCLUDED.transactional_id;
END
$function$;

COMMENT ON FUNCTION txn_offset_commit_v1(text, bigint, smallint, bigint, text, text, text, integer, text[], integer[], bigint[], text[]) IS 'TxnOffsetCommit (KIP-447): consumer offsets pending in transaction p_txn_number, applied by its commit (only if later than the committed ones) and dropped by its abort. Checked like Kafka (member id, generation, instance id) and, beyond Kafka, against the member''s assignment in that generation.';

REVOKE ALL ON FUNCTION txn_offset_commit_v1(text, bigint, smallint, bigint, text, text, text, integer, text[], integer[], bigint[], text[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION txn_offset_commit_v1(text, bigint, smallint, bigint, text, text, text, integer, text[], integer[], bigint[], text[]) TO @schema@_client, @schema@_admin;
