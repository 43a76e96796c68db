-- The group row, locked FOR NO KEY UPDATE (created Empty on first use when p_create).
CREATE FUNCTION group_lock_v1(p_group_id text, p_create boolean) RETURNS groups
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    g groups%ROWTYPE;
BEGIN
    IF p_group_id IS NULL OR length(p_group_id) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL401', MESSAGE = 'a group id is 1 to 255 characters';
    END IF;
    LOOP
        SELECT * INTO g FROM groups x WHERE x.group_id = p_group_id FOR NO KEY UPDATE;
        IF FOUND THEN
            RETURN g;
        END IF;
        IF NOT p_create THEN
            RAISE EXCEPTION USING ERRCODE = 'OL409', MESSAGE = format('no group %L', p_group_id);
        END IF;
        INSERT INTO groups (group_id) VALUES (p_group_id) ON CONFLICT DO NOTHING;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION group_lock_v1(text, boolean) IS 'Internal: locks (and creates) a group row.';

-- Removes members silent past their session timeout; rebalances if any went. The caller holds
-- the group lock. Returns whether the membership changed.
CREATE FUNCTION group_expire_members_v1(p_group_id text) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
BEGIN
    DELETE FROM group_members m
    WHERE m.group_id = p_group_id
      AND m.last_heartbeat_at + make_interval(secs => m.session_timeout_ms / 1000.0) < clock_timestamp();
    -- Also rebalance when a subscribed partition has no owner: partitions added to a topic (or a
    -- topic created after the members subscribed) are assigned at the next group call.
    IF FOUND OR EXISTS (
        SELECT 1 FROM group_members m
        CROSS JOIN LATERAL unnest(m.subscription) AS sub(name)
        JOIN topics t ON t.name = sub.name
        JOIN partitions pt ON pt.topic_id = t.topic_id
        WHERE m.group_id = p_group_id
          AND NOT EXISTS (SELECT 1 FROM member_assignments a
                          WHERE a.group_id = p_group_id AND a.topic_id = pt.topic_id AND a.partition = pt.partition)) THEN
        PERFORM group_rebalance_v1(p_group_id);
        RETURN true;
    END IF;
    RETURN false;
END
$fn$;
COMMENT ON FUNCTION group_expire_members_v1(text) IS
  'Internal: removes members past their session timeout; rebalances if any went or a subscribed partition has no owner.';

-- A new generation and its assignment, computed by the store (range or round robin). Members
-- are ordered by their static instance id when they have one, so a restarted static member gets
-- the same partitions back (sticky where the assignor allows). The caller holds the group lock.
CREATE FUNCTION group_rebalance_v1(p_group_id text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    g groups%ROWTYPE;
BEGIN
    UPDATE groups x SET generation = x.generation + 1,
        state = CASE WHEN EXISTS (SELECT 1 FROM group_members m WHERE m.group_id = p_group_id)
                     THEN 'Stable' ELSE 'Empty' END,
        updated_at = now()
    WHERE x.group_id = p_group_id
    RETURNING * INTO g;
    DELETE FROM member_assignments a WHERE a.group_id = p_group_id;
    IF g.assignor = 'range' THEN
        -- Per topic, the subscribers in order get contiguous ranges; the first (p mod n) get one more.
        INSERT INTO member_assignments (group_id, topic_id, partition, member_id, generation)
        SELECT p_group_id, s.topic_id, pt.partition, s.member_id, g.generation
        FROM (
            SELECT m.member_id, t.topic_id,
                   row_number() OVER (PARTITION BY t.topic_id ORDER BY coalesce(m.group_instance_id, m.member_id), m.member_id) - 1 AS i,
                   count(*) OVER (PARTITION BY t.topic_id) AS n,
                   (SELECT count(*) FROM partitions q WHERE q.topic_id = t.topic_id) AS p
            FROM group_members m
            CROSS JOIN LATERAL unnest(m.subscription) AS sub(name)
            JOIN topics t ON t.name = sub.name
            WHERE m.group_id = p_group_id
        ) s
        JOIN partitions pt ON pt.topic_id = s.topic_id
        WHERE pt.partition >= s.i * (s.p / s.n) + least(s.i, s.p % s.n)
          AND pt.partition < (s.i + 1) * (s.p / s.n) + least(s.i + 1, s.p % s.n);
    ELSE
        -- Round robin over all subscribed partitions in (topic, partition) order, each partition
        -- going to the next member subscribed to its topic.
        INSERT INTO member_assignments (group_id, topic_id, partition, member_id, generation)
        SELECT p_group_id, tp.topic_id, tp.partition, sm.member_id, g.generation
        FROM (
            SELECT pt.topic_id, pt.partition,
                   row_number() OVER (ORDER BY t.name, pt.partition) - 1 AS k
            FROM partitions pt JOIN topics t USING (topic_id)
            WHERE EXISTS (SELECT 1 FROM group_members m WHERE m.group_id = p_group_id AND t.name = ANY (m.subscription))
        ) tp
        JOIN LATERAL (
            SELECT m.member_id,
                   row_number() OVER (ORDER BY coalesce(m.group_instance_id, m.member_id), m.member_id) - 1 AS i,
                   count(*) OVER () AS n
            FROM group_members m JOIN topics t2 ON t2.name = ANY (m.subscription)
            WHERE m.group_id = p_group_id AND t2.topic_id = tp.topic_id
        ) sm ON sm.i = tp.k % sm.n;
    END IF;
END
$fn$;
COMMENT ON FUNCTION group_rebalance_v1(text) IS
  'Internal: bumps the generation and recomputes the whole assignment (range or roundrobin).';

-- Checks that a member may act in the generation it names. The caller holds the group lock.
CREATE FUNCTION group_member_check_v1(p_group_id text, p_member_id text, p_group_instance_id text,
                                      p_generation integer)
RETURNS group_members
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    m group_members%ROWTYPE;
    v_generation integer;
BEGIN
    IF p_group_instance_id IS NOT NULL THEN
        SELECT * INTO m FROM group_members x WHERE x.group_id = p_group_id AND x.group_instance_id = p_group_instance_id;
        IF FOUND AND m.member_id <> p_member_id THEN
            RAISE EXCEPTION USING ERRCODE = 'OL405',
                MESSAGE = format('instance %L of group %L is now member %L, not %L', p_group_instance_id, p_group_id,
                                 m.member_id, p_member_id);
        END IF;
    END IF;
    SELECT * INTO m FROM group_members x WHERE x.group_id = p_group_id AND x.member_id = p_member_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL402',
            MESSAGE = format('%L is not a member of group %L (it left or timed out): rejoin', p_member_id, p_group_id);
    END IF;
    SELECT x.generation INTO v_generation FROM groups x WHERE x.group_id = p_group_id;
    IF p_generation IS NOT NULL AND p_generation <> v_generation THEN
        RAISE EXCEPTION USING ERRCODE = 'OL403',
            MESSAGE = format('generation %s of group %L is over: the group is at generation %s', p_generation,
                             p_group_id, v_generation);
    END IF;
    RETURN m;
END
$fn$;
COMMENT ON FUNCTION group_member_check_v1(text, text, text, integer) IS
  'Internal: UNKNOWN_MEMBER_ID (OL402), FENCED_INSTANCE_ID (OL405), ILLEGAL_GENERATION (OL403) checks.';

CREATE FUNCTION join_group_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_client_id text,
                              p_topics text[], p_session_timeout_ms integer, p_assignor text)
RETURNS TABLE (member_id text, generation integer, topics text[], partitions integer[])
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    g groups%ROWTYPE;
    m group_members%ROWTYPE;
    v_member text;
    v_changed boolean := false;
BEGIN
    IF p_session_timeout_ms IS NULL OR p_session_timeout_ms NOT BETWEEN 100 AND 1800000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001',
            MESSAGE = format('session timeout %s ms is outside [100, 1800000]', p_session_timeout_ms);
    END IF;
    IF p_assignor NOT IN ('range', 'roundrobin') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001', MESSAGE = format('unknown assignor %L (range, roundrobin)', p_assignor);
    END IF;
    IF p_topics IS NULL OR cardinality(p_topics) = 0 OR EXISTS (
        SELECT 1 FROM unnest(p_topics) n WHERE NOT EXISTS (SELECT 1 FROM topics t WHERE t.name = n)) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = 'subscribe to one or more existing topics';
    END IF;
    g := group_lock_v1(p_group_id, true);
    IF g.assignor <> p_assignor AND EXISTS (SELECT 1 FROM group_members x WHERE x.group_id = p_group_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001',
            MESSAGE = format('group %L uses the %s assignor, not %s', p_group_id, g.assignor, p_assignor);
    END IF;
    UPDATE groups x SET assignor = p_assignor WHERE x.group_id = p_group_id;
    v_changed := group_expire_members_v1(p_group_id);

    IF p_member_id IS NOT NULL THEN
        SELECT * INTO m FROM group_members x WHERE x.group_id = p_group_id AND x.member_id = p_member_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'OL402',
                MESSAGE = format('%L is not a member of group %L: join without a member id', p_member_id, p_group_id);
        END IF;
        v_member := p_member_id;
        IF m.subscription IS DISTINCT FROM p_topics OR m.session_timeout_ms <> p_session_timeout_ms THEN
            UPDATE group_members x SET subscription = p_topics, session_timeout_ms = p_session_timeout_ms
            WHERE x.group_id = p_group_id AND x.member_id = v_member;
            v_changed := true;
        END IF;
    ELSIF p_group_instance_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM group_members x WHERE x.group_id = p_group_id AND x.group_instance_id = p_group_instance_id) THEN
        -- Static membership: a restarted instance takes its place back under a new member id,
        -- which fences the old one (FENCED_INSTANCE_ID); no rebalance unless it subscribes
        -- differently.
        v_member := coalesce(p_client_id, 'member') || '-' || gen_random_uuid();
        SELECT * INTO m FROM group_members x WHERE x.group_id = p_group_id AND x.group_instance_id = p_group_instance_id;
        UPDATE group_members x SET member_id = v_member, client_id = p_client_id, last_heartbeat_at = clock_timestamp()
        WHERE x.group_id = p_group_id AND x.member_id = m.member_id;
        IF m.subscription IS DISTINCT FROM p_topics OR m.session_timeout_ms <> p_session_timeout_ms THEN
            UPDATE group_members x SET subscription = p_topics, session_timeout_ms = p_session_timeout_ms
            WHERE x.group_id = p_group_id AND x.member_id = v_member;
            v_changed := true;
        END IF;
    ELSE
        v_member := coalesce(p_client_id, 'member') || '-' || gen_random_uuid();
        INSERT INTO group_members (group_id, member_id, group_instance_id, client_id, subscription,
                                   session_timeout_ms, joined_generation, last_heartbeat_at)
        VALUES (p_group_id, v_member, p_group_instance_id, p_client_id, p_topics, p_session_timeout_ms,
                g.generation + 1, clock_timestamp());
        v_changed := true;
    END IF;
    UPDATE group_members x SET last_heartbeat_at = clock_timestamp() WHERE x.group_id = p_group_id AND x.member_id = v_member;
    IF v_changed THEN
        PERFORM group_rebalance_v1(p_group_id);
    END IF;
    RETURN QUERY
    SELECT v_member, gr.generation,
           coalesce(array_agg(t.name ORDER BY t.name, a.partition) FILTER (WHERE a.member_id IS NOT NULL), '{}'),
           coalesce(array_agg(a.partition ORDER BY t.name, a.partition) FILTER (WHERE a.member_id IS NOT NULL), '{}')
    FROM groups gr
    LEFT JOIN member_assignments a ON a.group_id = gr.group_id AND a.member_id = v_member
    LEFT JOIN topics t ON t.topic_id = a.topic_id
    WHERE gr.group_id = p_group_id
    GROUP BY gr.generation;
END
$fn$;
COMMENT ON FUNCTION join_group_v1(text, text, text, text, text[], integer, text) IS
  'JoinGroup (server-side assignment): joins or rejoins a member, removes members past their session timeout, '
  'rebalances on any membership or subscription change, and returns the member id, generation and its '
  'assignment. A static member (group instance id) takes its place back without a rebalance.';

CREATE FUNCTION heartbeat_v1(p_group_id text, p_member_id text, p_group_instance_id text)
RETURNS TABLE (generation integer, topics text[], partitions integer[])
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
BEGIN
    PERFORM group_lock_v1(p_group_id, false);
    PERFORM group_expire_members_v1(p_group_id);
    PERFORM group_member_check_v1(p_group_id, p_member_id, p_group_instance_id, NULL);
    UPDATE group_members x SET last_heartbeat_at = clock_timestamp()
    WHERE x.group_id = p_group_id AND x.member_id = p_member_id;
    RETURN QUERY
    SELECT gr.generation,
           coalesce(array_agg(t.name ORDER BY t.name, a.partition) FILTER (WHERE a.member_id IS NOT NULL), '{}'),
           coalesce(array_agg(a.partition ORDER BY t.name, a.partition) FILTER (WHERE a.member_id IS NOT NULL), '{}')
    FROM groups gr
    LEFT JOIN member_assignments a ON a.group_id = gr.group_id AND a.member_id = p_member_id
    LEFT JOIN topics t ON t.topic_id = a.topic_id
    WHERE gr.group_id = p_group_id
    GROUP BY gr.generation;
END
$fn$;
COMMENT ON FUNCTION heartbeat_v1(text, text, text) IS
  'Heartbeat: keeps the member alive and returns the current generation and its assignment (a new generation '
  'means a rebalance happened). UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID when the member was replaced.';

CREATE FUNCTION leave_group_v1(p_group_id text, p_member_id text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
BEGIN
    PERFORM group_lock_v1(p_group_id, false);
    DELETE FROM group_members x WHERE x.group_id = p_group_id AND x.member_id = p_member_id;
    IF FOUND THEN
        PERFORM group_rebalance_v1(p_group_id);
    END IF;
END
$fn$;
COMMENT ON FUNCTION leave_group_v1(text, text) IS 'LeaveGroup: removes the member and rebalances the rest.';

-- The argument checks of OffsetCommit and TxnOffsetCommit.
CREATE FUNCTION offset_commit_args_v1(p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $fn$
BEGIN
    IF cardinality(p_topics) IS DISTINCT FROM cardinality(p_partitions)
       OR cardinality(p_topics) IS DISTINCT FROM cardinality(p_offsets)
       OR cardinality(p_topics) IS DISTINCT FROM cardinality(p_metadata) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'topics, partitions, offsets and metadata differ in length';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_offsets) o WHERE o IS NULL OR o < 0) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'offsets must be >= 0';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_metadata) md WHERE octet_length(md) > 4096) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL406', MESSAGE = 'offset metadata is larger than 4096 bytes';
    END IF;
END
$fn$;
COMMENT ON FUNCTION offset_commit_args_v1(text[], integer[], bigint[], text[]) IS
  'Internal: offset commit arguments have equal lengths, offsets >= 0, metadata <= 4096 bytes (OL406).';

-- Beyond Kafka (KIP-1287): a member commits offsets only for partitions it owns. The caller holds
-- the group lock and has checked the member and generation.
CREATE FUNCTION group_owns_partitions_v1(p_group_id text, p_member_id text, p_generation integer,
                                         p_topics text[], p_partitions integer[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_bad text;
BEGIN
    SELECT format('%s-%s', r.topic, r.partition) INTO v_bad
    FROM unnest(p_topics, p_partitions) AS r(topic, partition)
    WHERE NOT EXISTS (
        SELECT 1 FROM member_assignments a JOIN topics t USING (topic_id)
        WHERE a.group_id = p_group_id AND a.member_id = p_member_id AND t.name = r.topic AND a.partition = r.partition)
    LIMIT 1;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL408',
            MESSAGE = format('partition %s is not assigned to %L in generation %s', v_bad, p_member_id, p_generation);
    END IF;
END
$fn$;
COMMENT ON FUNCTION group_owns_partitions_v1(text, text, integer, text[], integer[]) IS
  'Internal: UNASSIGNED_PARTITION (OL408) unless every partition is assigned to the member.';

CREATE FUNCTION offset_commit_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer,
                                 p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    g groups%ROWTYPE;
    v_bad text;
BEGIN
    PERFORM offset_commit_args_v1(p_topics, p_partitions, p_offsets, p_metadata);
    g := group_lock_v1(p_group_id, p_member_id IS NULL);
    IF p_member_id IS NULL THEN
        -- A standalone consumer (no membership) may commit only while the group has no members.
        IF EXISTS (SELECT 1 FROM group_members x WHERE x.group_id = p_group_id) THEN
            RAISE EXCEPTION USING ERRCODE = 'OL402',
                MESSAGE = format('group %L has members: commit as one of them', p_group_id);
        END IF;
    ELSE
        PERFORM group_member_check_v1(p_group_id, p_member_id, p_group_instance_id, p_generation);
        PERFORM group_owns_partitions_v1(p_group_id, p_member_id, p_generation, p_topics, p_partitions);
    END IF;
    SELECT format('%s-%s', r.topic, r.partition) INTO v_bad
    FROM unnest(p_topics, p_partitions) AS r(topic, partition)
    WHERE NOT EXISTS (SELECT 1 FROM partitions pt JOIN topics t USING (topic_id) WHERE t.name = r.topic AND pt.partition = r.partition)
    LIMIT 1;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown partition %s', v_bad);
    END IF;
    INSERT INTO committed_offsets AS c (group_id, topic_id, partition, committed_offset, metadata, commit_seq, producer_id, committed_at)
    SELECT p_group_id, t.topic_id, r.partition, r.off, coalesce(r.md, ''), nextval('offset_commit_seq'), NULL, now()
    FROM unnest(p_topics, p_partitions, p_offsets, p_metadata) AS r(topic, partition, off, md)
    JOIN topics t ON t.name = r.topic
    ON CONFLICT ON CONSTRAINT pk_committed_offsets DO UPDATE SET
        committed_offset = EXCLUDED.committed_offset, metadata = EXCLUDED.metadata, commit_seq = EXCLUDED.commit_seq,
        producer_id = NULL, committed_at = EXCLUDED.committed_at;
END
$fn$;
COMMENT ON FUNCTION offset_commit_v1(text, text, text, integer, text[], integer[], bigint[], text[]) IS
  'OffsetCommit: checked against member id, instance id and generation, and (beyond Kafka) against the '
  'member''s assignment. Without a member id, a standalone commit to a group with no members.';

CREATE FUNCTION offset_fetch_v1(p_group_id text, p_topics text[], p_partitions integer[], p_require_stable boolean)
RETURNS TABLE (topic text, partition integer, committed_offset bigint, metadata text, error text,
               expired_transaction boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
BEGIN
    IF cardinality(p_topics) IS DISTINCT FROM cardinality(p_partitions) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'topics and partitions differ in length';
    END IF;
    RETURN QUERY
    SELECT r.topic, r.partition, c.committed_offset, c.metadata,
           CASE WHEN t.topic_id IS NULL OR NOT EXISTS (SELECT 1 FROM partitions pt WHERE pt.topic_id = t.topic_id AND pt.partition = r.partition)
                THEN 'unknown_topic_or_partition'
                WHEN p_require_stable AND pend.n > 0 THEN 'unstable_offset_commit' END,
           coalesce(pend.expired, false)
    FROM unnest(p_topics, p_partitions) AS r(topic, partition)
    LEFT JOIN topics t ON t.name = r.topic
    LEFT JOIN committed_offsets c ON c.group_id = p_group_id AND c.topic_id = t.topic_id AND c.partition = r.partition
    LEFT JOIN LATERAL (
        SELECT count(*) AS n,
               bool_or(tx.txn_started_at + make_interval(secs => tx.timeout_ms / 1000.0) < clock_timestamp()) AS expired
        FROM pending_offsets po JOIN transactions tx USING (transactional_id)
        WHERE po.group_id = p_group_id AND po.topic_id = t.topic_id AND po.partition = r.partition
    ) pend ON true;
END
$fn$;
COMMENT ON FUNCTION offset_fetch_v1(text, text[], integer[], boolean) IS
  'OffsetFetch: the committed offset per partition (NULL if none). With require_stable, a partition with offsets '
  'pending in an open transaction answers unstable_offset_commit (and whether that transaction is past its '
  'timeout, so the reader can have it aborted) instead of a possibly stale offset.';

CREATE FUNCTION txn_offset_commit_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint,
                                     p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer,
                                     p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
BEGIN
    PERFORM offset_commit_args_v1(p_topics, p_partitions, p_offsets, p_metadata);
    -- Lock order: the transactions row first (opening transaction N if N-1 completed), then the group.
    PERFORM txn_check_v1(p_transactional_id, p_producer_id, p_epoch, p_txn_number, true);
    PERFORM group_lock_v1(p_group_id, false);
    PERFORM group_expire_members_v1(p_group_id);
    PERFORM group_member_check_v1(p_group_id, p_member_id, p_group_instance_id, p_generation);
    PERFORM group_owns_partitions_v1(p_group_id, p_member_id, p_generation, p_topics, p_partitions);
    INSERT INTO pending_offsets AS po (group_id, topic_id, partition, producer_id, transactional_id, committed_offset,
                                       metadata, commit_seq, generation, member_id)
    SELECT p_group_id, t.topic_id, r.partition, p_producer_id, p_transactional_id, r.off, coalesce(r.md, ''),
           nextval('offset_commit_seq'), p_generation, p_member_id
    FROM unnest(p_topics, p_partitions, p_offsets, p_metadata) AS r(topic, partition, off, md)
    JOIN topics t ON t.name = r.topic
    ON CONFLICT ON CONSTRAINT pk_pending_offsets DO UPDATE SET
        committed_offset = EXCLUDED.committed_offset, metadata = EXCLUDED.metadata, commit_seq = EXCLUDED.commit_seq,
        generation = EXCLUDED.generation, member_id = EXCLUDED.member_id, transactional_id = EXCLUDED.transactional_id;
END
$fn$;
COMMENT ON FUNCTION txn_offset_commit_v1(text, bigint, smallint, bigint, text, text, text, integer, text[], integer[], bigint[], text[]) IS
  'TxnOffsetCommit (KIP-447): consumer offsets pending in transaction p_txn_number, applied by its commit '
  '(only if later than the committed ones) and dropped by its abort. Checked like Kafka (member id, generation, '
  'instance id) and, beyond Kafka, against the member''s assignment in that generation.';

CREATE VIEW group_status AS
SELECT g.group_id, g.state, g.generation, g.assignor, m.member_id, m.group_instance_id, m.client_id,
       m.subscription, m.last_heartbeat_at,
       m.last_heartbeat_at + make_interval(secs => m.session_timeout_ms / 1000.0) < now() AS expired,
       (SELECT array_agg(format('%s-%s', t.name, a.partition) ORDER BY t.name, a.partition)
        FROM member_assignments a JOIN topics t USING (topic_id)
        WHERE a.group_id = g.group_id AND a.member_id = m.member_id) AS assignment
FROM groups g LEFT JOIN group_members m USING (group_id);
COMMENT ON VIEW group_status IS 'Consumer groups with their state, generation, members and each member''s assignment.';
COMMENT ON COLUMN group_status.group_id IS 'The group id.';
COMMENT ON COLUMN group_status.state IS 'Empty or Stable (the store assigns partitions in the same transaction as the membership change).';
COMMENT ON COLUMN group_status.generation IS 'The current generation.';
COMMENT ON COLUMN group_status.assignor IS 'range or roundrobin.';
COMMENT ON COLUMN group_status.member_id IS 'A member (NULL for a group with none).';
COMMENT ON COLUMN group_status.group_instance_id IS 'The member''s static instance id, if any.';
COMMENT ON COLUMN group_status.client_id IS 'The member''s client id.';
COMMENT ON COLUMN group_status.subscription IS 'Topics the member subscribed to.';
COMMENT ON COLUMN group_status.last_heartbeat_at IS 'The member''s last heartbeat.';
COMMENT ON COLUMN group_status.expired IS 'Silent past its session timeout (removed at the next group call).';
COMMENT ON COLUMN group_status.assignment IS 'Partitions assigned to the member, as topic-partition.';

CREATE VIEW group_offsets AS
SELECT c.group_id, o.topic, c.partition, c.committed_offset, c.metadata, c.committed_at,
       o.high_watermark, o.last_stable_offset,
       greatest(o.high_watermark - c.committed_offset, 0) AS lag,
       greatest(o.last_stable_offset - c.committed_offset, 0) AS lag_committed,
       c.producer_id AS committed_by_producer_id
FROM committed_offsets c
JOIN partition_offsets o ON o.topic_id = c.topic_id AND o.partition = c.partition;
COMMENT ON VIEW group_offsets IS
  'Committed offsets of every group, with lag against the high watermark and against the last stable offset '
  '(what a read_committed consumer can still read).';
COMMENT ON COLUMN group_offsets.group_id IS 'The group id.';
COMMENT ON COLUMN group_offsets.topic IS 'The topic.';
COMMENT ON COLUMN group_offsets.partition IS 'The partition.';
COMMENT ON COLUMN group_offsets.committed_offset IS 'The next offset the group will read.';
COMMENT ON COLUMN group_offsets.metadata IS 'Commit metadata.';
COMMENT ON COLUMN group_offsets.committed_at IS 'When the offset was committed.';
COMMENT ON COLUMN group_offsets.high_watermark IS 'The partition''s high watermark.';
COMMENT ON COLUMN group_offsets.last_stable_offset IS 'The partition''s last stable offset.';
COMMENT ON COLUMN group_offsets.lag IS 'high watermark - committed offset.';
COMMENT ON COLUMN group_offsets.lag_committed IS 'last stable offset - committed offset (read_committed lag).';
COMMENT ON COLUMN group_offsets.committed_by_producer_id IS 'The transactional producer whose commit wrote it (NULL: a plain commit).';

CREATE VIEW pending_group_offsets AS
SELECT po.group_id, t.name AS topic, po.partition, po.committed_offset, po.transactional_id, po.producer_id,
       po.generation, po.member_id, tx.state AS transaction_state, tx.txn_started_at
FROM pending_offsets po
JOIN topics t USING (topic_id)
JOIN transactions tx USING (transactional_id);
COMMENT ON VIEW pending_group_offsets IS
  'Offsets committed inside still-open transactions (KIP-447), with the transaction holding them: a consumer '
  'asking for stable offsets waits until that transaction ends.';
COMMENT ON COLUMN pending_group_offsets.group_id IS 'The group id.';
COMMENT ON COLUMN pending_group_offsets.topic IS 'The topic.';
COMMENT ON COLUMN pending_group_offsets.partition IS 'The partition.';
COMMENT ON COLUMN pending_group_offsets.committed_offset IS 'The offset the transaction''s commit would apply.';
COMMENT ON COLUMN pending_group_offsets.transactional_id IS 'The transaction holding it.';
COMMENT ON COLUMN pending_group_offsets.producer_id IS 'The transactional producer.';
COMMENT ON COLUMN pending_group_offsets.generation IS 'The group generation it was committed in.';
COMMENT ON COLUMN pending_group_offsets.member_id IS 'The member that committed it.';
COMMENT ON COLUMN pending_group_offsets.transaction_state IS 'The state of that transaction.';
COMMENT ON COLUMN pending_group_offsets.txn_started_at IS 'When that transaction started.';

REVOKE ALL ON FUNCTION group_lock_v1(text, boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION group_expire_members_v1(text) FROM PUBLIC;

REVOKE ALL ON FUNCTION group_rebalance_v1(text) FROM PUBLIC;

REVOKE ALL ON FUNCTION group_member_check_v1(text, text, text, integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION offset_commit_args_v1(text[], integer[], bigint[], text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION group_owns_partitions_v1(text, text, integer, text[], integer[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION join_group_v1(text, text, text, text, text[], integer, text) FROM PUBLIC;

REVOKE ALL ON FUNCTION heartbeat_v1(text, text, text) FROM PUBLIC;

REVOKE ALL ON FUNCTION leave_group_v1(text, text) FROM PUBLIC;

REVOKE ALL ON FUNCTION offset_commit_v1(text, text, text, integer, text[], integer[], bigint[], text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION offset_fetch_v1(text, text[], integer[], boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION txn_offset_commit_v1(text, bigint, smallint, bigint, text, text, text, integer, text[], integer[], bigint[], text[]) FROM PUBLIC;
