CREATE OR REPLACE FUNCTION group_standalone_commit_v1(p_group_id text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
BEGIN
    -- A consumer that is no member (it assigns itself its partitions) commits only while the
    -- group has no members: nothing fences such a commit, so a member's partitions must not be
    -- open to it (Kafka's rule). Locks (and creates, as Kafka does) the group row; members past
    -- their session timeout are removed first, so a crashed consumer does not block it.
    PERFORM group_lock_v1(p_group_id, true);
    PERFORM group_expire_members_v1(p_group_id);
    IF EXISTS (SELECT 1 FROM group_members x WHERE x.group_id = p_group_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL402',
            MESSAGE = format('group %L has members: commit as one of them', p_group_id);
    END IF;
END
$function$;

COMMENT ON FUNCTION group_standalone_commit_v1(text) IS 'Internal: locks (and creates) the group row for a standalone consumer''s commit; UNKNOWN_MEMBER_ID (OL402) while the group has members after the expired ones are removed.';

REVOKE ALL ON FUNCTION group_standalone_commit_v1(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION offset_partitions_known_v1(p_topics text[], p_partitions integer[])
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_bad text;
BEGIN
    SELECT format('%s-%s', r.topic, r.partition) INTO v_bad
    FROM unnest(p_topics, p_partitions) AS r(topic, partition)
    WHERE NOT EXISTS (SELECT 1 FROM partitions pt JOIN topics t USING (topic_id)
                      WHERE t.name = r.topic AND pt.partition = r.partition)
    LIMIT 1;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown partition %s', v_bad);
    END IF;
END
$function$;

COMMENT ON FUNCTION offset_partitions_known_v1(text[], integer[]) IS 'Internal: UNKNOWN_TOPIC_OR_PARTITION (OL101) for an offset commit naming a partition that does not exist.';

REVOKE ALL ON FUNCTION offset_partitions_known_v1(text[], integer[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION offset_commit_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('group', ARRAY[p_group_id], 'read');
        PERFORM acl_require_v1('topic', p_topics, 'read');
    END IF;
    PERFORM offset_commit_args_v1(p_topics, p_partitions, p_offsets, p_metadata);
    IF p_member_id IS NULL THEN
        PERFORM group_standalone_commit_v1(p_group_id);
    ELSE
        PERFORM group_lock_v1(p_group_id, false);
        PERFORM group_generation_required_v1(p_group_id, p_generation);
        PERFORM group_member_check_v1(p_group_id, p_member_id, p_group_instance_id, p_generation);
        PERFORM group_owns_partitions_v1(p_group_id, p_member_id, p_generation, p_topics, p_partitions);
    END IF;
    PERFORM offset_partitions_known_v1(p_topics, p_partitions);
    INSERT INTO committed_offsets AS c (group_id, topic_id, partition, committed_offset, metadata, commit_seq, producer_id, committed_at)
    SELECT p_group_id, t.topic_id, r.partition, r.off, coalesce(r.md, ''), nextval('offset_commit_seq'), NULL, now()
    FROM unnest(p_topics, p_partitions, p_offsets, p_metadata) AS r(topic, partition, off, md)
    JOIN topics t ON t.name = r.topic
    ORDER BY t.topic_id, r.partition  -- key order, as txn_complete_v1 (revision 0017)
    ON CONFLICT ON CONSTRAINT pk_committed_offsets DO UPDATE SET
        committed_offset = EXCLUDED.committed_offset, metadata = EXCLUDED.metadata, commit_seq = EXCLUDED.commit_seq,
        producer_id = NULL, committed_at = EXCLUDED.committed_at;
END
$function$;

COMMENT ON FUNCTION offset_commit_v1(text, text, text, integer, text[], integer[], bigint[], text[]) IS 'OffsetCommit: checked against member id, instance id and generation, and (beyond Kafka) against the member''s assignment. Without a member id, a standalone commit to a group with no members.';

REVOKE ALL ON FUNCTION offset_commit_v1(text, text, text, integer, text[], integer[], bigint[], text[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION offset_commit_v1(text, text, text, integer, text[], integer[], bigint[], text[]) TO @schema@_client, @schema@_admin;

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
    IF coalesce(p_member_id, '') = '' THEN
        -- A standalone consumer (no membership: Kafka's empty member id and generation -1, a
        -- consumer that assigns itself its partitions) commits in a transaction as it commits
        -- alone: only while the group has no members, which nothing then fences (Kafka's rule;
        -- an unknown group is created, as Kafka's coordinator does). A member's offsets need
        -- the member checks below, which keep a member that lost its partitions from committing.
        PERFORM group_standalone_commit_v1(p_group_id);
        PERFORM offset_partitions_known_v1(p_topics, p_partitions);
    ELSE
        PERFORM group_lock_v1(p_group_id, false);
        PERFORM group_expire_members_v1(p_group_id);
        PERFORM group_generation_required_v1(p_group_id, p_generation);
        PERFORM group_member_check_v1(p_group_id, p_member_id, p_group_instance_id, p_generation);
        PERFORM group_owns_partitions_v1(p_group_id, p_member_id, p_generation, p_topics, p_partitions);
    END IF;
    INSERT INTO pending_offsets AS po (group_id, topic_id, partition, producer_id, transactional_id, committed_offset,
                                       metadata, commit_seq, generation, member_id)
    SELECT p_group_id, t.topic_id, r.partition, p_producer_id, p_transactional_id, r.off, coalesce(r.md, ''),
           nextval('offset_commit_seq'), CASE WHEN coalesce(p_member_id, '') = '' THEN -1 ELSE p_generation END,
           coalesce(p_member_id, '')
    FROM unnest(p_topics, p_partitions, p_offsets, p_metadata) AS r(topic, partition, off, md)
    JOIN topics t ON t.name = r.topic
    ORDER BY t.topic_id, r.partition  -- key order (revision 0017)
    ON CONFLICT ON CONSTRAINT pk_pending_offsets DO UPDATE SET
        committed_offset = EXCLUDED.committed_offset, metadata = EXCLUDED.metadata, commit_seq = EXCLUDED.commit_seq,
        generation = EXCLUDED.generation, member_id = EXCLUDED.member_id, transactional_id = EXCLUDED.transactional_id;
END
$function$;

COMMENT ON FUNCTION txn_offset_commit_v1(text, bigint, smallint, bigint, text, text, text, integer, text[], integer[], bigint[], text[]) IS 'TxnOffsetCommit (KIP-447): consumer offsets pending in transaction p_txn_number, applied by its commit (only if later than the committed ones) and dropped by its abort. Checked like Kafka (member id, generation, instance id) and, beyond Kafka, against the member''s assignment in that generation. Without a member id (NULL or empty), a standalone consumer''s offsets, while the group has no members (else UNKNOWN_MEMBER_ID, OL402).';

REVOKE ALL ON FUNCTION txn_offset_commit_v1(text, bigint, smallint, bigint, text, text, text, integer, text[], integer[], bigint[], text[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION txn_offset_commit_v1(text, bigint, smallint, bigint, text, text, text, integer, text[], integer[], bigint[], text[]) TO @schema@_client, @schema@_admin;
