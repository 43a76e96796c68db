CREATE OR REPLACE FUNCTION offset_delete_v1(p_group_id text, p_topics text[], p_partitions integer[])
 RETURNS TABLE(topic text, partition integer, error text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
#variable_conflict use_column
DECLARE
    v_subscribed text[];
BEGIN
    IF p_topics IS NULL OR p_partitions IS NULL OR cardinality(p_topics) <> cardinality(p_partitions)
       OR cardinality(p_topics) > 10000 OR array_position(p_topics, NULL) IS NOT NULL
       OR array_position(p_partitions, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = 'topics and partitions must be arrays of one length (at most 10000), without nulls';
    END IF;
    -- The group row first (group_lock_v1: OL409 for an unknown group), as every call that
    -- changes the group's members or offsets takes it, so no member joins or commits between
    -- the check below and the deletion.
    PERFORM group_lock_v1(p_group_id, false);
    -- Kafka's rule (GroupCoordinator's handleDeleteOffsets): a live member's subscription keeps
    -- its topics' offsets, which it would commit again or resume from. Members past their session
    -- timeout are removed first, as before any operator's change to a group.
    PERFORM group_expire_members_v1(p_group_id);
    SELECT coalesce(array_agg(DISTINCT s.t), '{}') INTO v_subscribed
    FROM group_members m CROSS JOIN LATERAL unnest(m.subscription) AS s(t)
    WHERE m.group_id = p_group_id;
    RETURN QUERY
    WITH req AS (
        SELECT DISTINCT r.t, r.p, pt.topic_id, pt.partition IS NOT NULL AS known
        FROM unnest(p_topics, p_partitions) AS r(t, p)
        LEFT JOIN topics t ON t.name = r.t
        LEFT JOIN partitions pt ON pt.topic_id = t.topic_id AND pt.partition = r.p
    ), doomed AS (
        -- Locked in key order, as every writer of offset rows (revision 0017).
        SELECT c.topic_id, c.partition FROM committed_offsets c
        JOIN req ON req.topic_id = c.topic_id AND req.p = c.partition
        WHERE c.group_id = p_group_id AND req.known AND req.t <> ALL (v_subscribed)
        ORDER BY c.topic_id, c.partition
        FOR UPDATE OF c
    ), deleted AS (
        -- Runs whole whether or not the answer below reads it (a data-modifying WITH).
        DELETE FROM committed_offsets c USING doomed d
        WHERE c.group_id = p_group_id AND c.topic_id = d.topic_id AND c.partition = d.partition
    )
    SELECT req.t, req.p,
           CASE WHEN NOT req.known THEN 'unknown_topic_or_partition'
                WHEN req.t = ANY (v_subscribed) THEN 'group_subscribed_to_topic' END
    FROM req
    ORDER BY req.t, req.p;
END
$function$;

COMMENT ON FUNCTION offset_delete_v1(text, text[], integer[]) IS 'OffsetDelete (Kafka''s deleteConsumerGroupOffsets): removes the group''s committed offsets of the partitions named, except those of topics a live member subscribes to (error group_subscribed_to_topic) and unknown partitions (error unknown_topic_or_partition); one row per partition named, error NULL when its offset is gone (or there was none). An unknown group is OL409. Offsets pending in an open transaction stay pending.';

REVOKE ALL ON FUNCTION offset_delete_v1(text, text[], integer[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION offset_delete_v1(text, text[], integer[]) TO @schema@_admin;
