-- Consumer groups: JoinGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, TxnOffsetCommit
-- (KIP-447) and the operator's offset reset. The groups row is the lock of every membership
-- decision; offset rows are written in key order. The assignor computes a target
-- (target_assignments); a partition passes to its target member only once its owner
-- (member_assignments) lets go, as in KIP-848, so no two members own a partition at once.

CREATE OR REPLACE FUNCTION join_group_v2(p_group_id text, p_member_id text, p_group_instance_id text, p_client_id text, p_topics text[], p_session_timeout_ms integer, p_assignor text, p_owned_topics text[], p_owned_partitions integer[])
 RETURNS TABLE(member_id text, generation integer, topics text[], partitions integer[], reconciling boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    g groups%ROWTYPE;
    m group_members%ROWTYPE;
    v_member text;
    v_changed boolean := false;
    v_bad text;
    v_topics text[];
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('group', ARRAY[p_group_id], 'read');
        PERFORM acl_require_v1('topic', p_topics, 'read');
    END IF;
    IF p_session_timeout_ms IS NULL OR p_session_timeout_ms NOT BETWEEN 100 AND 1800000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001',
            MESSAGE = format('session timeout %s ms is outside [100, 1800000]', p_session_timeout_ms);
    END IF;
    IF p_assignor IS NULL OR p_assignor NOT IN ('range', 'roundrobin', 'sticky') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001',
            MESSAGE = format('unknown assignor %L (range, roundrobin, sticky)', p_assignor);
    END IF;
    IF length(p_client_id) > 255 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'a client id is at most 255 characters';
    END IF;
    -- A topic that does not exist yet may be subscribed to, as in Kafka: its partitions are
    -- assigned at the first group call after it is created (group_expire_members_v1). So the
    -- names are checked as names, and bounded.
    IF p_topics IS NULL OR cardinality(p_topics) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'a member subscribes to an array of at most 10000 topics';
    END IF;
    SELECT n INTO v_bad FROM unnest(p_topics) n
    WHERE n IS NULL OR n !~ '^[A-Za-z0-9._-]{1,249}$' OR n IN ('.', '..')
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL103',
            MESSAGE = format('invalid topic name %L: use letters, digits, ''.'', ''_'', ''-'' (1 to 249 characters)', v_bad);
    END IF;
    -- Each topic once, in order: the assignors count a member once per topic it names.
    v_topics := ARRAY(SELECT DISTINCT n FROM unnest(p_topics) n ORDER BY 1);
    PERFORM group_owned_args_v1(p_owned_topics, p_owned_partitions);
    g := group_lock_v1(p_group_id, true);
    IF g.assignor <> p_assignor AND EXISTS (SELECT 1 FROM group_members x WHERE x.group_id = p_group_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001',
            MESSAGE = format('group %L uses the %s assignor, not %s', p_group_id, g.assignor, p_assignor);
    END IF;
    IF g.assignor <> p_assignor THEN
        UPDATE groups x SET assignor = p_assignor WHERE x.group_id = p_group_id;
    END IF;
    v_changed := group_expire_members_v1(p_group_id);

    IF p_member_id IS NOT NULL THEN
        SELECT * INTO m FROM group_members x WHERE x.group_id = p_group_id AND x.member_id = p_member_id;
        -- Another principal's member is unknown to the caller (revision 0021: a member id is not
        -- a bearer token).
        IF NOT FOUND OR m.owner IS DISTINCT FROM acl_caller_v1() THEN
            RAISE EXCEPTION USING ERRCODE = 'OL402',
                MESSAGE = format('%L is not a member of group %L: join without a member id', p_member_id, p_group_id);
        END IF;
        v_member := p_member_id;
        IF m.subscription IS DISTINCT FROM v_topics OR m.session_timeout_ms <> p_session_timeout_ms THEN
            UPDATE group_members x SET subscription = v_topics, session_timeout_ms = p_session_timeout_ms
            WHERE x.group_id = p_group_id AND x.member_id = v_member;
            v_changed := true;
        END IF;
    ELSIF p_group_instance_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM group_members x WHERE x.group_id = p_group_id AND x.group_instance_id = p_group_instance_id) THEN
        -- Static membership: a restarted instance takes its place back under a new member id,
        -- which fences the old one (FENCED_INSTANCE_ID) and hands over what it owned and was
        -- to own (ON UPDATE CASCADE); no rebalance unless it subscribes differently.
        v_member := group_member_id_v1(p_client_id);
        SELECT * INTO m FROM group_members x WHERE x.group_id = p_group_id AND x.group_instance_id = p_group_instance_id;
        IF m.owner IS DISTINCT FROM acl_caller_v1() THEN
            RAISE EXCEPTION USING ERRCODE = 'OL405',
                MESSAGE = format('instance %L of group %L is held by another principal', p_group_instance_id, p_group_id);
        END IF;
        UPDATE group_members x SET member_id = v_member, client_id = p_client_id, last_heartbeat_at = clock_timestamp()
        WHERE x.group_id = p_group_id AND x.member_id = m.member_id;
        IF m.subscription IS DISTINCT FROM v_topics OR m.session_timeout_ms <> p_session_timeout_ms THEN
            UPDATE group_members x SET subscription = v_topics, session_timeout_ms = p_session_timeout_ms
            WHERE x.group_id = p_group_id AND x.member_id = v_member;
            v_changed := true;
        END IF;
    ELSE
        v_member := group_member_id_v1(p_client_id);
        INSERT INTO group_members (group_id, member_id, group_instance_id, client_id, subscription,
                                   session_timeout_ms, joined_generation, last_heartbeat_at, owner)
        VALUES (p_group_id, v_member, p_group_instance_id, p_client_id, v_topics, p_session_timeout_ms,
                g.generation + 1, clock_timestamp(), acl_caller_v1());
        v_changed := true;
    END IF;
    UPDATE group_members x SET last_heartbeat_at = clock_timestamp() WHERE x.group_id = p_group_id AND x.member_id = v_member;
    IF v_changed THEN
        PERFORM group_rebalance_v1(p_group_id);
    END IF;
    -- A member rejoining under its id names what it holds; a new member (or a static one back
    -- under a new id) holds nothing yet, so whatever it owns and no longer targets goes at once.
    PERFORM group_release_v1(p_group_id, v_member,
                             CASE WHEN p_member_id IS NULL THEN '{}' ELSE p_owned_topics END,
                             CASE WHEN p_member_id IS NULL THEN '{}' ELSE p_owned_partitions END);
    RETURN QUERY SELECT v_member, v.generation, v.topics, v.partitions, v.reconciling
    FROM group_member_view_v1(p_group_id, v_member) v;
END
$fn$;
COMMENT ON FUNCTION join_group_v2(p_group_id text, p_member_id text, p_group_instance_id text, p_client_id text, p_topics text[], p_session_timeout_ms integer, p_assignor text, p_owned_topics text[], p_owned_partitions integer[]) IS
  'JoinGroup (server-side assignment): joins or rejoins a member, removes members past their session timeout, recomputes the target assignment on any membership or subscription change, and returns the member id, the generation, the partitions the member owns and keeps, and whether it is reconciling (it is to give up partitions it owns, or waits for partitions their owners have not let go yet). A member rejoining under its id names the partitions it still holds (p_owned_*), as heartbeat_v2. A static member (group instance id) takes its place back without a rebalance.';

CREATE OR REPLACE FUNCTION heartbeat_v2(p_group_id text, p_member_id text, p_group_instance_id text, p_owned_topics text[], p_owned_partitions integer[])
 RETURNS TABLE(generation integer, topics text[], partitions integer[], reconciling boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('group', ARRAY[p_group_id], 'read');
    END IF;
    PERFORM group_owned_args_v1(p_owned_topics, p_owned_partitions);
    PERFORM group_lock_v1(p_group_id, false);
    PERFORM group_expire_members_v1(p_group_id);
    PERFORM group_member_check_v1(p_group_id, p_member_id, p_group_instance_id, NULL);
    UPDATE group_members x SET last_heartbeat_at = clock_timestamp()
    WHERE x.group_id = p_group_id AND x.member_id = p_member_id;
    PERFORM group_release_v1(p_group_id, p_member_id, p_owned_topics, p_owned_partitions);
    RETURN QUERY SELECT v.generation, v.topics, v.partitions, v.reconciling
    FROM group_member_view_v1(p_group_id, p_member_id) v;
END
$fn$;
COMMENT ON FUNCTION heartbeat_v2(p_group_id text, p_member_id text, p_group_instance_id text, p_owned_topics text[], p_owned_partitions integer[]) IS
  'Heartbeat (KIP-848''s ConsumerGroupHeartbeat): keeps the member alive, lets go of the partitions it owns that are no longer its target and that it no longer names in p_owned_* (their target members take them), and returns the generation, the partitions it owns and keeps, and whether it is reconciling. UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID when the member was replaced.';

CREATE OR REPLACE FUNCTION leave_group_v1(p_group_id text, p_member_id text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('group', ARRAY[p_group_id], 'read');
    END IF;
    PERFORM group_lock_v1(p_group_id, false);
    -- Only the principal that joined may remove the member (revision 0021).
    DELETE FROM group_members x
    WHERE x.group_id = p_group_id AND x.member_id = p_member_id AND x.owner IS NOT DISTINCT FROM acl_caller_v1();
    IF FOUND THEN
        PERFORM group_rebalance_v1(p_group_id);
    END IF;
END
$fn$;
COMMENT ON FUNCTION leave_group_v1(p_group_id text, p_member_id text) IS
  'LeaveGroup: removes the member (only the principal that joined may) and rebalances the rest.';

CREATE OR REPLACE FUNCTION leave_group_members_v1(p_group_id text, p_member_ids text[], p_instance_ids text[])
 RETURNS TABLE(idx integer, member_id text, group_instance_id text, error text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
#variable_conflict use_column
DECLARE
    v_n integer := coalesce(cardinality(p_member_ids), 0);
    v_caller oid := acl_caller_v1();
    v_any boolean;
    v_removed integer := 0;
    v_member text;
    v_instance text;
    m group_members%ROWTYPE;
    i integer;
BEGIN
    IF v_n = 0 OR v_n > 1000 OR v_n <> coalesce(cardinality(p_instance_ids), 0) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = 'name 1 to 1000 members, each by member id and group instance id (either may be null), '
                      'as arrays of one length';
    END IF;
    -- Access control (revision 0009, docs/acl.md), before any lock or write: as LeaveGroup.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('group', ARRAY[p_group_id], 'read');
    END IF;
    PERFORM group_lock_v1(p_group_id, false);
    -- The owner and the admin role remove any member (Kafka's removeMembersFromConsumerGroup);
    -- any other principal only those it joined itself (revision 0021's rule for LeaveGroup).
    v_any := acl_bypass_v1(v_caller);
    FOR i IN 1 .. v_n LOOP
        v_member := nullif(p_member_ids[i], '');
        v_instance := p_instance_ids[i];
        IF v_instance IS NOT NULL THEN
            -- A static member by its instance id; a member id given with it must be that
            -- member's (Kafka: FENCED_INSTANCE_ID otherwise).
            SELECT * INTO m FROM group_members x WHERE x.group_id = p_group_id AND x.group_instance_id = v_instance;
        ELSE
            SELECT * INTO m FROM group_members x WHERE x.group_id = p_group_id AND x.member_id = v_member;
        END IF;
        IF NOT FOUND OR NOT (v_any OR m.owner IS NOT DISTINCT FROM v_caller) THEN
            RETURN QUERY SELECT i, p_member_ids[i], v_instance, 'unknown_member_id'::text;
        ELSIF v_instance IS NOT NULL AND v_member IS NOT NULL AND v_member <> m.member_id THEN
            RETURN QUERY SELECT i, p_member_ids[i], v_instance, 'fenced_instance_id'::text;
        ELSE
            DELETE FROM group_members x WHERE x.group_id = p_group_id AND x.member_id = m.member_id;
            v_removed := v_removed + 1;
            RETURN QUERY SELECT i, m.member_id, m.group_instance_id, NULL::text;
        END IF;
    END LOOP;
    IF v_removed > 0 THEN
        PERFORM group_rebalance_v1(p_group_id);
    END IF;
END
$fn$;
COMMENT ON FUNCTION leave_group_members_v1(p_group_id text, p_member_ids text[], p_instance_ids text[]) IS
  'LeaveGroup v3 and later (KIP-345; Kafka''s removeMembersFromConsumerGroup): removes each member named by member id or by group instance id (a member id given beside an instance id must match: else fenced_instance_id) and rebalances the rest once; per member (idx, in order) the error, NULL when removed, unknown_member_id when there is no such member or the caller may not remove it (only the principal that joined it, the owner or the admin role may). Needs READ on the group; an unknown group is OL409.';

CREATE OR REPLACE FUNCTION offset_commit_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION offset_commit_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[]) IS
  'OffsetCommit: checked against member id, instance id and generation, and (beyond Kafka) against the member''s assignment. Without a member id, a standalone commit to a group with no members.';

CREATE OR REPLACE FUNCTION offset_fetch_v1(p_group_id text, p_topics text[], p_partitions integer[], p_require_stable boolean)
 RETURNS TABLE(topic text, partition integer, committed_offset bigint, metadata text, error text, expired_transaction boolean)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('group', ARRAY[p_group_id], 'read');
        PERFORM acl_require_v1('topic', p_topics, 'read');
    END IF;
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
COMMENT ON FUNCTION offset_fetch_v1(p_group_id text, p_topics text[], p_partitions integer[], p_require_stable boolean) IS
  'OffsetFetch: the committed offset per partition (NULL if none). With require_stable, a partition with offsets pending in an open transaction answers unstable_offset_commit (and whether that transaction is past its timeout, so the reader can have it aborted) instead of a possibly stale offset.';

CREATE OR REPLACE FUNCTION txn_offset_commit_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION txn_offset_commit_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer, p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[]) IS
  'TxnOffsetCommit (KIP-447): consumer offsets pending in transaction p_txn_number, applied by its commit (only if later than the committed ones) and dropped by its abort. Checked like Kafka (member id, generation, instance id) and, beyond Kafka, against the member''s assignment in that generation. Without a member id (NULL or empty), a standalone consumer''s offsets, while the group has no members (else UNKNOWN_MEMBER_ID, OL402).';

CREATE OR REPLACE FUNCTION reset_group_offsets_v1(p_group_id text, p_topics text[], p_partitions integer[], p_offsets bigint[])
 RETURNS TABLE(topic text, partition integer, previous_offset bigint, new_offset bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION reset_group_offsets_v1(p_group_id text, p_topics text[], p_partitions integer[], p_offsets bigint[]) IS
  'Operator: sets the committed offsets of a consumer group with no live members (else NON_EMPTY_GROUP, OL410), each within [log start offset, high watermark] of its partition (else OL108; unknown partitions OL101). Creates an unknown group. Returns each partition''s previous offset (NULL if none) and new offset.';

CREATE OR REPLACE FUNCTION group_lock_v1(p_group_id text, p_create boolean)
 RETURNS groups
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
COMMENT ON FUNCTION group_lock_v1(p_group_id text, p_create boolean) IS
  'Internal: locks (and creates) a group row.';

CREATE OR REPLACE FUNCTION group_expire_members_v1(p_group_id text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    DELETE FROM group_members m
    WHERE m.group_id = p_group_id
      AND m.last_heartbeat_at + make_interval(secs => m.session_timeout_ms / 1000.0) < clock_timestamp();
    -- Also rebalance when a subscribed partition is nobody's target: partitions added to a topic
    -- (or a topic created after the members subscribed) are assigned at the next group call.
    IF FOUND OR EXISTS (
        SELECT 1 FROM group_members m
        CROSS JOIN LATERAL unnest(m.subscription) AS sub(name)
        JOIN topics t ON t.name = sub.name
        JOIN partitions pt ON pt.topic_id = t.topic_id
        WHERE m.group_id = p_group_id
          AND NOT EXISTS (SELECT 1 FROM target_assignments a
                          WHERE a.group_id = p_group_id AND a.topic_id = pt.topic_id AND a.partition = pt.partition)) THEN
        PERFORM group_rebalance_v1(p_group_id);
        RETURN true;
    END IF;
    RETURN false;
END
$fn$;
COMMENT ON FUNCTION group_expire_members_v1(p_group_id text) IS
  'Internal: removes members past their session timeout (their partitions go to their target members); rebalances if any went or a subscribed partition is nobody''s target.';

CREATE OR REPLACE FUNCTION group_rebalance_v1(p_group_id text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    g groups%ROWTYPE;
BEGIN
    UPDATE groups x SET generation = x.generation + 1, updated_at = now()
    WHERE x.group_id = p_group_id
    RETURNING * INTO g;
    IF g.assignor = 'sticky' THEN
        PERFORM group_assign_sticky_v1(p_group_id, g.generation);
    ELSIF g.assignor = 'range' THEN
        DELETE FROM target_assignments a WHERE a.group_id = p_group_id;
        -- Per topic, the subscribers in order get contiguous ranges; the first (p mod n) get one more.
        INSERT INTO target_assignments (group_id, topic_id, partition, member_id, generation)
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
        DELETE FROM target_assignments a WHERE a.group_id = p_group_id;
        -- Round robin over all subscribed partitions in (topic, partition) order, each partition
        -- going to the next member subscribed to its topic.
        INSERT INTO target_assignments (group_id, topic_id, partition, member_id, generation)
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
    PERFORM group_reconcile_v1(p_group_id);
    PERFORM group_notify_v1(p_group_id);
END
$fn$;
COMMENT ON FUNCTION group_rebalance_v1(p_group_id text) IS
  'Internal: bumps the generation, recomputes the target assignment (range, roundrobin or sticky) and hands over the partitions nobody owns.';

CREATE OR REPLACE FUNCTION group_assign_sticky_v1(p_group_id text, p_generation integer)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_members text[];
    v_counts integer[];
    v_total integer;
    v_floor integer;
    v_extra integer;
    v_topic integer := NULL;
    v_subs integer[];
    v_best integer;
    v_k integer;
    v_topic_ids integer[] := '{}';
    v_parts integer[] := '{}';
    v_owners text[] := '{}';
    r record;
BEGIN
    -- Kafka's sticky assignor, simplified: every member keeps what the previous target gave it
    -- (and still subscribes to) up to its fair share, and the rest go, one by one, to the
    -- subscribed member with the fewest. With every member subscribed to the same topics the
    -- shares differ by at most one and only the partitions that must move do.
    SELECT array_agg(m.member_id ORDER BY coalesce(m.group_instance_id, m.member_id), m.member_id)
    INTO v_members FROM group_members m WHERE m.group_id = p_group_id;
    DELETE FROM target_assignments a WHERE a.group_id = p_group_id AND a.member_id <> ALL (coalesce(v_members, '{}'));
    IF v_members IS NULL THEN
        RETURN;
    END IF;
    v_counts := array_fill(0, ARRAY[cardinality(v_members)]);
    SELECT count(*) INTO v_total FROM partitions pt JOIN topics t USING (topic_id)
    WHERE EXISTS (SELECT 1 FROM group_members m WHERE m.group_id = p_group_id AND t.name = ANY (m.subscription));
    v_floor := v_total / cardinality(v_members);
    v_extra := v_total % cardinality(v_members);
    -- Keep: the previous target's rows whose member still subscribes to the topic, member by
    -- member, up to the floor share, or one more while the shares above the floor last.
    FOR r IN
        SELECT array_position(v_members, a.member_id) AS k, a.topic_id, a.partition
        FROM target_assignments a JOIN topics t USING (topic_id)
        JOIN group_members m ON m.group_id = a.group_id AND m.member_id = a.member_id
        WHERE a.group_id = p_group_id AND t.name = ANY (m.subscription)
        ORDER BY 1, t.name, a.partition
    LOOP
        IF v_counts[r.k] < v_floor OR (v_counts[r.k] = v_floor AND v_extra > 0) THEN
            IF v_counts[r.k] = v_floor THEN
                v_extra := v_extra - 1;
            END IF;
            v_counts[r.k] := v_counts[r.k] + 1;
            v_topic_ids := v_topic_ids || r.topic_id;
            v_parts := v_parts || r.partition;
            v_owners := v_owners || v_members[r.k];
        END IF;
    END LOOP;
    -- Give: every other subscribed partition to the subscribed member with the fewest (the
    -- first in member order on a tie).
    FOR r IN
        SELECT pt.topic_id, pt.partition FROM partitions pt JOIN topics t USING (topic_id)
        WHERE EXISTS (SELECT 1 FROM group_members m WHERE m.group_id = p_group_id AND t.name = ANY (m.subscription))
          AND NOT EXISTS (SELECT 1 FROM unnest(v_topic_ids, v_parts) kept(topic_id, partition)
                          WHERE kept.topic_id = pt.topic_id AND kept.partition = pt.partition)
        ORDER BY t.name, pt.partition
    LOOP
        IF v_topic IS DISTINCT FROM r.topic_id THEN
            v_topic := r.topic_id;
            SELECT array_agg(array_position(v_members, m.member_id) ORDER BY array_position(v_members, m.member_id)) INTO v_subs
            FROM group_members m JOIN topics t ON t.name = ANY (m.subscription)
            WHERE m.group_id = p_group_id AND t.topic_id = r.topic_id;
        END IF;
        v_best := NULL;
        FOREACH v_k IN ARRAY v_subs LOOP
            IF v_best IS NULL OR v_counts[v_k] < v_counts[v_best] THEN
                v_best := v_k;
            END IF;
        END LOOP;
        v_counts[v_best] := v_counts[v_best] + 1;
        v_topic_ids := v_topic_ids || r.topic_id;
        v_parts := v_parts || r.partition;
        v_owners := v_owners || v_members[v_best];
    END LOOP;
    DELETE FROM target_assignments a WHERE a.group_id = p_group_id;
    INSERT INTO target_assignments (group_id, topic_id, partition, member_id, generation)
    SELECT p_group_id, x.topic_id, x.partition, x.member_id, p_generation
    FROM unnest(v_topic_ids, v_parts, v_owners) AS x(topic_id, partition, member_id)
    ORDER BY x.topic_id, x.partition;
END
$fn$;
COMMENT ON FUNCTION group_assign_sticky_v1(p_group_id text, p_generation integer) IS
  'Internal: the sticky target assignment: members keep their previous target up to a fair share; the rest go to the subscribed member with the fewest.';

CREATE OR REPLACE FUNCTION group_reconcile_v1(p_group_id text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_state text;
BEGIN
    -- The handover rule: a partition goes to its target member only while nobody owns it. The
    -- caller holds the groups row (FOR NO KEY UPDATE), so no other call of the group decides
    -- at the same time, and the primary key of member_assignments keeps one owner per partition.
    INSERT INTO member_assignments (group_id, topic_id, partition, member_id, generation)
    SELECT a.group_id, a.topic_id, a.partition, a.member_id, a.generation
    FROM target_assignments a
    WHERE a.group_id = p_group_id
      AND NOT EXISTS (SELECT 1 FROM member_assignments o
                      WHERE o.group_id = a.group_id AND o.topic_id = a.topic_id AND o.partition = a.partition)
    ORDER BY a.topic_id, a.partition;  -- key order, as every writer of these rows
    SELECT CASE
        WHEN NOT EXISTS (SELECT 1 FROM group_members m WHERE m.group_id = p_group_id) THEN 'Empty'
        WHEN EXISTS (SELECT 1 FROM member_assignments o
                     WHERE o.group_id = p_group_id
                       AND NOT EXISTS (SELECT 1 FROM target_assignments a
                                       WHERE a.group_id = o.group_id AND a.topic_id = o.topic_id
                                         AND a.partition = o.partition AND a.member_id = o.member_id)) THEN 'Reconciling'
        ELSE 'Stable' END
    INTO v_state;
    UPDATE groups x SET state = v_state, updated_at = now()
    WHERE x.group_id = p_group_id AND x.state IS DISTINCT FROM v_state;
END
$fn$;
COMMENT ON FUNCTION group_reconcile_v1(p_group_id text) IS
  'Internal: hands every partition nobody owns to its target member, and sets the group''s state (Empty, Reconciling while an owner has yet to let go, Stable).';

CREATE OR REPLACE FUNCTION group_release_v1(p_group_id text, p_member_id text, p_owned_topics text[], p_owned_partitions integer[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- A member lets go of a partition by no longer naming it while the partition is not its
    -- target. A partition it owns but has not heard of yet (taken at a call whose answer it has
    -- not applied) is in its target, so it is kept.
    DELETE FROM member_assignments o
    WHERE o.group_id = p_group_id AND o.member_id = p_member_id
      AND NOT EXISTS (SELECT 1 FROM target_assignments a
                      WHERE a.group_id = o.group_id AND a.topic_id = o.topic_id AND a.partition = o.partition
                        AND a.member_id = o.member_id)
      AND NOT EXISTS (SELECT 1 FROM unnest(p_owned_topics, p_owned_partitions) AS h(topic, partition)
                      JOIN topics t ON t.name = h.topic
                      WHERE t.topic_id = o.topic_id AND h.partition = o.partition);
    IF FOUND THEN
        PERFORM group_reconcile_v1(p_group_id);
        PERFORM group_notify_v1(p_group_id);  -- the partitions' new owners need not wait for their next beat
    END IF;
END
$fn$;
COMMENT ON FUNCTION group_release_v1(p_group_id text, p_member_id text, p_owned_topics text[], p_owned_partitions integer[]) IS
  'Internal: the member lets go of the partitions it owns, does not name and no longer targets; they go to their target members.';

CREATE OR REPLACE FUNCTION group_channel_v1()
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
    -- As wake_channel_v1: one channel per oncelog schema, named by the schema's oid.
    SELECT 'oncelog_groups_' || n.oid FROM pg_namespace n WHERE n.nspname = current_schema()
$fn$;
COMMENT ON FUNCTION group_channel_v1() IS
  'Internal: the LISTEN/NOTIFY channel on which this schema''s consumer groups announce a change of target or of owner.';

CREATE OR REPLACE FUNCTION group_notify_v1(p_group_id text)
 RETURNS void
 LANGUAGE sql
 SET search_path FROM CURRENT
AS $fn$
    -- The members heartbeat at once instead of at their next interval. The payload is a digest
    -- of the group id: every client may LISTEN, and need not learn the names of groups it may
    -- not describe. The NOTIFY takes PostgreSQL's notification lock at commit, which only group
    -- changes pay (not heartbeats that change nothing, nor producers).
    SELECT pg_notify(group_channel_v1(), md5(p_group_id))
$fn$;
COMMENT ON FUNCTION group_notify_v1(p_group_id text) IS
  'Internal: NOTIFYs the group channel with md5(group id) at the commit: its members heartbeat at once.';

CREATE OR REPLACE FUNCTION group_listen_v1()
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_channel text := group_channel_v1();
BEGIN
    EXECUTE format('LISTEN %I', v_channel);
    RETURN v_channel;
END
$fn$;
COMMENT ON FUNCTION group_listen_v1() IS
  'A consumer LISTENs for changes of its group (target or owners), announced with md5(group id) as the payload, so that it heartbeats at once; returns the channel.';

CREATE OR REPLACE FUNCTION group_member_view_v1(p_group_id text, p_member_id text)
 RETURNS TABLE(generation integer, topics text[], partitions integer[], reconciling boolean)
 LANGUAGE sql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
    -- What the member is to consume: the partitions it owns and still targets. Those it owns and
    -- no longer targets it is to revoke (and then no longer name); those it targets and does
    -- not own yet come once their owners let go. Either way it is reconciling.
    SELECT gr.generation,
           coalesce(array_agg(t.name ORDER BY t.name, o.partition) FILTER (WHERE a.member_id IS NOT NULL), '{}'),
           coalesce(array_agg(o.partition ORDER BY t.name, o.partition) FILTER (WHERE a.member_id IS NOT NULL), '{}'),
           bool_or(o.member_id IS NOT NULL AND a.member_id IS NULL) IS TRUE OR EXISTS (
               SELECT 1 FROM target_assignments x
               WHERE x.group_id = p_group_id AND x.member_id = p_member_id
                 AND NOT EXISTS (SELECT 1 FROM member_assignments y
                                 WHERE y.group_id = x.group_id AND y.topic_id = x.topic_id
                                   AND y.partition = x.partition AND y.member_id = x.member_id))
    FROM groups gr
    LEFT JOIN member_assignments o ON o.group_id = gr.group_id AND o.member_id = p_member_id
    LEFT JOIN target_assignments a ON a.group_id = o.group_id AND a.topic_id = o.topic_id
                                  AND a.partition = o.partition AND a.member_id = o.member_id
    LEFT JOIN topics t ON t.topic_id = o.topic_id
    WHERE gr.group_id = p_group_id
    GROUP BY gr.generation;
$fn$;
COMMENT ON FUNCTION group_member_view_v1(p_group_id text, p_member_id text) IS
  'Internal: a member''s answer: the generation, the partitions it owns and keeps, and whether it is reconciling.';

CREATE OR REPLACE FUNCTION group_owned_args_v1(p_owned_topics text[], p_owned_partitions integer[])
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    IF p_owned_topics IS NULL OR p_owned_partitions IS NULL
       OR cardinality(p_owned_topics) <> cardinality(p_owned_partitions) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = 'the partitions a member holds are two arrays of equal length (topics, partitions), empty for none';
    END IF;
    IF cardinality(p_owned_topics) > 1000000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'a member names at most 1000000 partitions it holds';
    END IF;
END
$fn$;
COMMENT ON FUNCTION group_owned_args_v1(p_owned_topics text[], p_owned_partitions integer[]) IS
  'Internal: the partitions a member says it holds are two arrays of equal length (OL000).';

CREATE OR REPLACE FUNCTION group_member_check_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer)
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
    -- Another principal's member is unknown to the caller (revision 0021), so nobody else can
    -- heartbeat, let go or commit for it.
    IF NOT FOUND OR m.owner IS DISTINCT FROM acl_caller_v1() THEN
        RAISE EXCEPTION USING ERRCODE = 'OL402',
            MESSAGE = format('%L is not a member of group %L (it left or timed out): rejoin', p_member_id, p_group_id);
    END IF;
    -- An older generation is fine: a member keeps the partitions it owns through rebalances
    -- until it lets go, and group_owns_partitions_v1 fences a generation older than its ownership.
    SELECT x.generation INTO v_generation FROM groups x WHERE x.group_id = p_group_id;
    IF p_generation IS NOT NULL AND p_generation > v_generation THEN
        RAISE EXCEPTION USING ERRCODE = 'OL403',
            MESSAGE = format('generation %s of group %L is not there yet: the group is at generation %s', p_generation,
                             p_group_id, v_generation);
    END IF;
    RETURN m;
END
$fn$;
COMMENT ON FUNCTION group_member_check_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer) IS
  'Internal: UNKNOWN_MEMBER_ID (OL402), FENCED_INSTANCE_ID (OL405), and ILLEGAL_GENERATION (OL403) for a generation the group has not reached.';

CREATE OR REPLACE FUNCTION group_generation_required_v1(p_group_id text, p_generation integer)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- A member's commit names its generation: without one, a member fenced by a rebalance could
    -- still commit (revision 0017; group_member_check_v1 skips the check for heartbeats).
    IF p_generation IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL403',
            MESSAGE = format('a member of group %L commits with its generation', p_group_id);
    END IF;
END
$fn$;
COMMENT ON FUNCTION group_generation_required_v1(p_group_id text, p_generation integer) IS
  'Internal: ILLEGAL_GENERATION (OL403) for a member''s offset commit that names no generation.';

CREATE OR REPLACE FUNCTION group_owns_partitions_v1(p_group_id text, p_member_id text, p_generation integer, p_topics text[], p_partitions integer[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_bad record;
BEGIN
    -- Ownership, not the group's generation, decides (KIP-848): a partition has one owner at a
    -- time, and a member that let go of a partition and took it back in a later generation
    -- cannot commit for it with a generation from before (its earlier ownership).
    SELECT r.topic, r.partition, a.generation AS since INTO v_bad
    FROM unnest(p_topics, p_partitions) AS r(topic, partition)
    LEFT JOIN topics t ON t.name = r.topic
    LEFT JOIN member_assignments a ON a.group_id = p_group_id AND a.member_id = p_member_id
                                  AND a.topic_id = t.topic_id AND a.partition = r.partition
    WHERE a.member_id IS NULL OR a.generation > p_generation
    ORDER BY a.member_id NULLS FIRST
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_bad.since IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL408',
            MESSAGE = format('partition %s-%s is not owned by %L (generation %s)', v_bad.topic, v_bad.partition,
                             p_member_id, p_generation);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'OL403',
        MESSAGE = format('generation %s of group %L is over for partition %s-%s: %L owns it since generation %s',
                         p_generation, p_group_id, v_bad.topic, v_bad.partition, p_member_id, v_bad.since);
END
$fn$;
COMMENT ON FUNCTION group_owns_partitions_v1(p_group_id text, p_member_id text, p_generation integer, p_topics text[], p_partitions integer[]) IS
  'Internal: UNASSIGNED_PARTITION (OL408) unless the member owns every partition; ILLEGAL_GENERATION (OL403) for a generation older than its ownership.';

CREATE OR REPLACE FUNCTION offset_commit_args_v1(p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[])
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
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
COMMENT ON FUNCTION offset_commit_args_v1(p_topics text[], p_partitions integer[], p_offsets bigint[], p_metadata text[]) IS
  'Internal: offset commit arguments have equal lengths, offsets >= 0, metadata <= 4096 bytes (OL406).';

CREATE OR REPLACE FUNCTION delete_group_v1(p_group_id text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION delete_group_v1(p_group_id text) IS
  'DeleteGroups: deletes a consumer group with no live members and no offsets pending in an open transaction (else NON_EMPTY_GROUP, OL410; an unknown group OL409), with its committed offsets.';

CREATE OR REPLACE FUNCTION offset_delete_v1(p_group_id text, p_topics text[], p_partitions integer[])
 RETURNS TABLE(topic text, partition integer, error text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION offset_delete_v1(p_group_id text, p_topics text[], p_partitions integer[]) IS
  'OffsetDelete (Kafka''s deleteConsumerGroupOffsets): removes the group''s committed offsets of the partitions named, except those of topics a live member subscribes to (error group_subscribed_to_topic) and unknown partitions (error unknown_topic_or_partition); one row per partition named, error NULL when its offset is gone (or there was none). An unknown group is OL409. Offsets pending in an open transaction stay pending.';

CREATE OR REPLACE FUNCTION group_require_no_members_v1(p_group_id text, p_action text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION group_require_no_members_v1(p_group_id text, p_action text) IS
  'Internal: removes the group''s expired members, then raises NON_EMPTY_GROUP (OL410) if any member is left; the caller holds the groups row.';

CREATE OR REPLACE FUNCTION group_member_id_v1(p_client_id text)
 RETURNS text
 LANGUAGE sql
 VOLATILE
 SET search_path FROM CURRENT
AS $fn$
    -- Kafka's form, the client id and a UUID; the prefix is cut so the id stays within the
    -- 255 characters member ids may have.
    SELECT left(coalesce(p_client_id, 'member'), 200) || '-' || gen_random_uuid();
$fn$;
COMMENT ON FUNCTION group_member_id_v1(p_client_id text) IS
  'Internal: a new member id, the client id (its first 200 characters, or member) and a UUID.';

CREATE OR REPLACE FUNCTION group_standalone_commit_v1(p_group_id text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION group_standalone_commit_v1(p_group_id text) IS
  'Internal: locks (and creates) the group row for a standalone consumer''s commit; UNKNOWN_MEMBER_ID (OL402) while the group has members after the expired ones are removed.';

CREATE OR REPLACE FUNCTION offset_partitions_known_v1(p_topics text[], p_partitions integer[])
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION offset_partitions_known_v1(p_topics text[], p_partitions integer[]) IS
  'Internal: UNKNOWN_TOPIC_OR_PARTITION (OL101) for an offset commit naming a partition that does not exist.';
