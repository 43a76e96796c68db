CREATE OR REPLACE FUNCTION delete_group_v1(p_group_id text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_pending text;
BEGIN
    IF p_group_id IS NULL OR length(p_group_id) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL401', MESSAGE = 'a group id is 1 to 255 characters';
    END IF;
    -- The groups row FOR UPDATE, where other group calls take it FOR NO KEY UPDATE
    -- (group_lock_v1): the row is about to go, and every call that could add a member or an
    -- offset to the group waits for this one, then finds no group (or makes a new one).
    PERFORM 1 FROM groups x WHERE x.group_id = p_group_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL409', MESSAGE = format('no group %L', p_group_id);
    END IF;
    PERFORM group_require_no_members_v1(p_group_id, 'a group can be deleted');
    -- Offsets an open transaction holds for the group would be lost with it, though its commit
    -- promises them (KIP-447): the transaction ends first.
    SELECT min(x.transactional_id) INTO v_pending FROM pending_offsets x WHERE x.group_id = p_group_id;
    IF v_pending IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL410',
            MESSAGE = format('group %L has offsets pending in the open transaction of %L: it can be deleted once '
                             'that transaction ends', p_group_id, v_pending);
    END IF;
    -- Its committed offsets and assignments go with it (ON DELETE CASCADE).
    DELETE FROM groups x WHERE x.group_id = p_group_id;
END
$function$;

COMMENT ON FUNCTION delete_group_v1(text) IS 'DeleteGroups: deletes a consumer group with no live members and no offsets pending in an open transaction (else NON_EMPTY_GROUP, OL410; an unknown group OL409), with its committed offsets.';

REVOKE ALL ON FUNCTION delete_group_v1(text) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION delete_group_v1(text) TO @schema@_admin;

CREATE OR REPLACE FUNCTION delete_records_v1(p_topic text, p_partitions integer[], p_offsets bigint[])
 RETURNS TABLE(partition integer, low_watermark bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
#variable_conflict use_column
DECLARE
    v_topic_id integer;
    v_bad record;
BEGIN
    IF p_partitions IS NULL OR p_offsets IS NULL OR cardinality(p_partitions) = 0
       OR cardinality(p_partitions) <> cardinality(p_offsets) OR cardinality(p_partitions) > 100000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = 'partitions and offsets must be non-empty arrays of equal length (at most 100000)';
    END IF;
    SELECT r.p INTO v_bad FROM unnest(p_partitions) AS r(p) GROUP BY r.p HAVING count(*) > 1 OR r.p IS NULL
    ORDER BY r.p LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('partition %s is named twice, or is NULL', coalesce(v_bad.p::text, 'NULL'));
    END IF;
    SELECT t.topic_id INTO v_topic_id FROM topics t WHERE t.name = p_topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_topic);
    END IF;
    -- The partition rows, in key order (the lock order), FOR NO KEY UPDATE as appends take them:
    -- the high watermark checked below cannot move until this commits, and a reader that sees
    -- the new log start sees it for every partition of the call at once.
    PERFORM 1 FROM partitions pt
    WHERE pt.topic_id = v_topic_id AND pt.partition = ANY (p_partitions)
    ORDER BY pt.partition
    FOR NO KEY UPDATE;
    SELECT r.p INTO v_bad FROM unnest(p_partitions) AS r(p)
    WHERE NOT EXISTS (SELECT 1 FROM partitions pt WHERE pt.topic_id = v_topic_id AND pt.partition = r.p)
    ORDER BY r.p LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown partition %s of topic %L', v_bad.p, p_topic);
    END IF;
    -- Kafka's rule: an offset up to the high watermark, or -1 for the high watermark. One below
    -- the log start deletes nothing and answers the log start.
    SELECT r.p, r.o, pt.next_offset AS hi INTO v_bad
    FROM unnest(p_partitions, p_offsets) AS r(p, o)
    JOIN partitions pt ON pt.topic_id = v_topic_id AND pt.partition = r.p
    WHERE r.o IS NULL OR r.o < -1 OR r.o > pt.next_offset
    ORDER BY r.p LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL108',
            MESSAGE = format('offset %s is beyond %s-%s: records can be deleted up to the high watermark %s (or -1 for it)',
                             coalesce(v_bad.o::text, 'NULL'), p_topic, v_bad.p, v_bad.hi);
    END IF;
    -- The log start moves; the records below it leave the log at once (every reader starts at
    -- the log start) and are removed by maintenance (enforce_retention_v2), in batches.
    UPDATE partitions pt
    SET log_start_offset = m.target,
        log_bytes = greatest(pt.log_bytes - coalesce((
            SELECT sum(coalesce(octet_length(rec.key), 0) + coalesce(octet_length(rec.value), 0)
                       + coalesce(octet_length(rec.headers::text), 0))
            FROM records rec
            WHERE rec.topic_id = pt.topic_id AND rec.partition = pt.partition
              AND rec."offset" >= pt.log_start_offset AND rec."offset" < m.target), 0), 0)
    FROM (SELECT r.p, CASE WHEN r.o = -1 THEN x.next_offset ELSE r.o END AS target
          FROM unnest(p_partitions, p_offsets) AS r(p, o)
          JOIN partitions x ON x.topic_id = v_topic_id AND x.partition = r.p) m
    WHERE pt.topic_id = v_topic_id AND pt.partition = m.p AND m.target > pt.log_start_offset;
    RETURN QUERY
    SELECT pt.partition, pt.log_start_offset FROM partitions pt
    WHERE pt.topic_id = v_topic_id AND pt.partition = ANY (p_partitions)
    ORDER BY pt.partition;
END
$function$;

COMMENT ON FUNCTION delete_records_v1(text, integer[], bigint[]) IS 'DeleteRecords: moves each named partition''s log start up to its offset (-1: the high watermark; beyond it OL108, unknown partitions OL101); an offset below the log start changes nothing. Returns each partition''s log start (Kafka''s low watermark). Maintenance removes the records below it.';

REVOKE ALL ON FUNCTION delete_records_v1(text, integer[], bigint[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION delete_records_v1(text, integer[], bigint[]) TO @schema@_admin;

CREATE OR REPLACE FUNCTION group_require_no_members_v1(p_group_id text, p_action text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_members integer;
BEGIN
    -- An operator's change to a group (offset reset, deletion) while a consumer runs would be
    -- overwritten by its next commit, or pull the group from under it. Members silent past their
    -- session timeout are removed first: a crashed consumer does not block the operator.
    PERFORM group_expire_members_v1(p_group_id);
    SELECT count(*) INTO v_members FROM group_members m WHERE m.group_id = p_group_id;
    IF v_members > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL410',
            MESSAGE = format('group %L has %s live member(s): %s only while it has none '
                             '(stop its consumers, or wait for their session timeout)', p_group_id, v_members, p_action);
    END IF;
END
$function$;

COMMENT ON FUNCTION group_require_no_members_v1(text, text) IS 'Internal: removes the group''s expired members, then raises NON_EMPTY_GROUP (OL410) if any member is left; the caller holds the groups row.';

REVOKE ALL ON FUNCTION group_require_no_members_v1(text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION reset_group_offsets_v1(p_group_id text, p_topics text[], p_partitions integer[], p_offsets bigint[])
 RETURNS TABLE(topic text, partition integer, previous_offset bigint, new_offset bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
#variable_conflict use_column
DECLARE
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
    PERFORM group_require_no_members_v1(p_group_id, 'offsets can be reset');
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
