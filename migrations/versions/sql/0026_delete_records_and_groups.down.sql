DROP FUNCTION delete_group_v1(text);

DROP FUNCTION delete_records_v1(text, integer[], bigint[]);

DROP FUNCTION group_require_no_members_v1(text, text);

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
        ORDER BY req.topic_id, req.p  -- offset rows in key order, as every writer (revision 0017)
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

COMMENT ON FUNCTION reset_group_offsets_v1(text, text[], integer[], bigint[]) IS 'Operator: sets the committed offsets of a consumer group with no live members (else NON_EMPTY_GROUP, OL410), each within [log start offset, high watermark] of its partition (else OL108; unknown partitions OL101). Creates an unknown group. Returns each partition''s previous offset (NULL if none) and new offset.';

REVOKE ALL ON FUNCTION reset_group_offsets_v1(text, text[], integer[], bigint[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION reset_group_offsets_v1(text, text[], integer[], bigint[]) TO @schema@_admin;
