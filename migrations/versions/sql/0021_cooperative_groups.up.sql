CREATE TABLE target_assignments (
	group_id TEXT NOT NULL,
	topic_id INTEGER NOT NULL,
	partition INTEGER NOT NULL,
	member_id TEXT NOT NULL,
	generation INTEGER NOT NULL,
	CONSTRAINT pk_target_assignments PRIMARY KEY (group_id, topic_id, partition),
	CONSTRAINT fk_target_assignments_group_id_member_id_group_members FOREIGN KEY(group_id, member_id) REFERENCES group_members (group_id, member_id) ON DELETE CASCADE ON UPDATE CASCADE,
	CONSTRAINT fk_target_assignments_topic_id_partition_partitions FOREIGN KEY(topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);

CREATE INDEX ix_target_assignments_group_id_member_id ON target_assignments (group_id, member_id);

COMMENT ON TABLE target_assignments IS 'The assignor''s answer for the current generation (KIP-848''s target assignment): each member_assignments row moves towards it as owners let go.';

COMMENT ON COLUMN target_assignments.group_id IS 'The group.';

COMMENT ON COLUMN target_assignments.topic_id IS 'The topic.';

COMMENT ON COLUMN target_assignments.partition IS 'The partition.';

COMMENT ON COLUMN target_assignments.member_id IS 'The member the assignor gives the partition to.';

COMMENT ON COLUMN target_assignments.generation IS 'The generation whose assignment this is.';

REVOKE ALL ON TABLE target_assignments FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;
GRANT SELECT ON TABLE target_assignments TO @schema@_admin;

-- Every owner so far is its own target: the groups carry on as they were.
INSERT INTO target_assignments (group_id, topic_id, partition, member_id, generation)
SELECT group_id, topic_id, partition, member_id, generation FROM member_assignments;

ALTER TABLE groups DROP CONSTRAINT ck_groups_state_valid;
ALTER TABLE groups ADD CONSTRAINT ck_groups_state_valid
    CHECK (state IN ('Empty', 'PreparingRebalance', 'CompletingRebalance', 'Reconciling', 'Stable', 'Dead'));
ALTER TABLE groups DROP CONSTRAINT ck_groups_assignor_valid;
ALTER TABLE groups ADD CONSTRAINT ck_groups_assignor_valid CHECK (assignor IN ('range', 'roundrobin', 'sticky'));

COMMENT ON COLUMN groups.state IS 'Empty, Stable, or Reconciling (a partition waits for its old owner to let go); PreparingRebalance, CompletingRebalance and Dead are never set.';

COMMENT ON COLUMN groups.assignor IS 'The partition assignment strategy computed by the store (''range'', ''roundrobin'' or ''sticky'').';

COMMENT ON COLUMN member_assignments.generation IS 'The generation in which the member took the partition: its commits must name this one or a later one.';

COMMENT ON TABLE member_assignments IS 'Who owns each partition now: at most one member of a group. A partition passes to the member its target_assignments row names only once its owner has let go of it (or left, or timed out).';

ALTER TABLE group_members ADD COLUMN owner OID;

COMMENT ON COLUMN group_members.owner IS 'The principal (role OID) that joined; only it may act as the member (revision 0021). NULL for members that joined before: usable by nobody, so they join again.';

-- Frozen from store/sql by scripts/freeze_revision.py (above: the table changes, written by hand).
DROP VIEW IF EXISTS pending_group_offsets CASCADE;

DROP VIEW IF EXISTS group_offsets CASCADE;

DROP VIEW IF EXISTS group_status CASCADE;

DROP VIEW IF EXISTS transaction_status CASCADE;

DROP VIEW IF EXISTS committed_records CASCADE;

DROP VIEW IF EXISTS partition_offsets CASCADE;

DROP FUNCTION heartbeat_v1(text, text, text);

DROP FUNCTION join_group_v1(text, text, text, text, text[], integer, text);

CREATE OR REPLACE FUNCTION group_assign_sticky_v1(p_group_id text, p_generation integer)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION group_assign_sticky_v1(text, integer) IS 'Internal: the sticky target assignment: members keep their previous target up to a fair share; the rest go to the subscribed member with the fewest.';

REVOKE ALL ON FUNCTION group_assign_sticky_v1(text, integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION group_channel_v1()
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path FROM CURRENT
AS $function$
    -- As wake_channel_v1: one channel per oncelog schema, named by the schema's oid.
    SELECT 'oncelog_groups_' || n.oid FROM pg_namespace n WHERE n.nspname = current_schema()
$function$;

COMMENT ON FUNCTION group_channel_v1() IS 'Internal: the LISTEN/NOTIFY channel on which this schema''s consumer groups announce a change of target or of owner.';

REVOKE ALL ON FUNCTION group_channel_v1() FROM PUBLIC;

CREATE OR REPLACE FUNCTION group_listen_v1()
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_channel text := group_channel_v1();
BEGIN
    EXECUTE format('LISTEN %I', v_channel);
    RETURN v_channel;
END
$function$;

COMMENT ON FUNCTION group_listen_v1() IS 'A consumer LISTENs for changes of its group (target or owners), announced with md5(group id) as the payload, so that it heartbeats at once; returns the channel.';

REVOKE ALL ON FUNCTION group_listen_v1() FROM PUBLIC;

GRANT EXECUTE ON FUNCTION group_listen_v1() TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION group_member_view_v1(p_group_id text, p_member_id text)
 RETURNS TABLE(generation integer, topics text[], partitions integer[], reconciling boolean)
 LANGUAGE sql
 STABLE
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION group_member_view_v1(text, text) IS 'Internal: a member''s answer: the generation, the partitions it owns and keeps, and whether it is reconciling.';

REVOKE ALL ON FUNCTION group_member_view_v1(text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION group_notify_v1(p_group_id text)
 RETURNS void
 LANGUAGE sql
 SET search_path FROM CURRENT
AS $function$
    -- The members heartbeat at once instead of at their next interval. The payload is a digest
    -- of the group id: every client may LISTEN, and need not learn the names of groups it may
    -- not describe. The NOTIFY takes PostgreSQL's notification lock at commit, which only group
    -- changes pay (not heartbeats that change nothing, nor producers).
    SELECT pg_notify(group_channel_v1(), md5(p_group_id))
$function$;

COMMENT ON FUNCTION group_notify_v1(text) IS 'Internal: NOTIFYs the group channel with md5(group id) at the commit: its members heartbeat at once.';

REVOKE ALL ON FUNCTION group_notify_v1(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION group_owned_args_v1(p_owned_topics text[], p_owned_partitions integer[])
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION group_owned_args_v1(text[], integer[]) IS 'Internal: the partitions a member says it holds are two arrays of equal length (OL000).';

REVOKE ALL ON FUNCTION group_owned_args_v1(text[], integer[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION group_reconcile_v1(p_group_id text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION group_reconcile_v1(text) IS 'Internal: hands every partition nobody owns to its target member, and sets the group''s state (Empty, Reconciling while an owner has yet to let go, Stable).';

REVOKE ALL ON FUNCTION group_reconcile_v1(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION group_release_v1(p_group_id text, p_member_id text, p_owned_topics text[], p_owned_partitions integer[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION group_release_v1(text, text, text[], integer[]) IS 'Internal: the member lets go of the partitions it owns, does not name and no longer targets; they go to their target members.';

REVOKE ALL ON FUNCTION group_release_v1(text, text, text[], integer[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION heartbeat_v2(p_group_id text, p_member_id text, p_group_instance_id text, p_owned_topics text[], p_owned_partitions integer[])
 RETURNS TABLE(generation integer, topics text[], partitions integer[], reconciling boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION heartbeat_v2(text, text, text, text[], integer[]) IS 'Heartbeat (KIP-848''s ConsumerGroupHeartbeat): keeps the member alive, lets go of the partitions it owns that are no longer its target and that it no longer names in p_owned_* (their target members take them), and returns the generation, the partitions it owns and keeps, and whether it is reconciling. UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID when the member was replaced.';

REVOKE ALL ON FUNCTION heartbeat_v2(text, text, text, text[], integer[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION heartbeat_v2(text, text, text, text[], integer[]) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION join_group_v2(p_group_id text, p_member_id text, p_group_instance_id text, p_client_id text, p_topics text[], p_session_timeout_ms integer, p_assignor text, p_owned_topics text[], p_owned_partitions integer[])
 RETURNS TABLE(member_id text, generation integer, topics text[], partitions integer[], reconciling boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
        v_member := coalesce(p_client_id, 'member') || '-' || gen_random_uuid();
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
        v_member := coalesce(p_client_id, 'member') || '-' || gen_random_uuid();
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
$function$;

COMMENT ON FUNCTION join_group_v2(text, text, text, text, text[], integer, text, text[], integer[]) IS 'JoinGroup (server-side assignment): joins or rejoins a member, removes members past their session timeout, recomputes the target assignment on any membership or subscription change, and returns the member id, the generation, the partitions the member owns and keeps, and whether it is reconciling (it is to give up partitions it owns, or waits for partitions their owners have not let go yet). A member rejoining under its id names the partitions it still holds (p_owned_*), as heartbeat_v2. A static member (group instance id) takes its place back without a rebalance.';

REVOKE ALL ON FUNCTION join_group_v2(text, text, text, text, text[], integer, text, text[], integer[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION join_group_v2(text, text, text, text, text[], integer, text, text[], integer[]) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION group_expire_members_v1(p_group_id text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION group_expire_members_v1(text) IS 'Internal: removes members past their session timeout (their partitions go to their target members); rebalances if any went or a subscribed partition is nobody''s target.';

REVOKE ALL ON FUNCTION group_expire_members_v1(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION group_member_check_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_generation integer)
 RETURNS group_members
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION group_member_check_v1(text, text, text, integer) IS 'Internal: UNKNOWN_MEMBER_ID (OL402), FENCED_INSTANCE_ID (OL405), and ILLEGAL_GENERATION (OL403) for a generation the group has not reached.';

REVOKE ALL ON FUNCTION group_member_check_v1(text, text, text, integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION group_owns_partitions_v1(p_group_id text, p_member_id text, p_generation integer, p_topics text[], p_partitions integer[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION group_owns_partitions_v1(text, text, integer, text[], integer[]) IS 'Internal: UNASSIGNED_PARTITION (OL408) unless the member owns every partition; ILLEGAL_GENERATION (OL403) for a generation older than its ownership.';

REVOKE ALL ON FUNCTION group_owns_partitions_v1(text, text, integer, text[], integer[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION group_rebalance_v1(p_group_id text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION group_rebalance_v1(text) IS 'Internal: bumps the generation, recomputes the target assignment (range, roundrobin or sticky) and hands over the partitions nobody owns.';

REVOKE ALL ON FUNCTION group_rebalance_v1(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION leave_group_v1(p_group_id text, p_member_id text)
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
    END IF;
    PERFORM group_lock_v1(p_group_id, false);
    -- Only the principal that joined may remove the member (revision 0021).
    DELETE FROM group_members x
    WHERE x.group_id = p_group_id AND x.member_id = p_member_id AND x.owner IS NOT DISTINCT FROM acl_caller_v1();
    IF FOUND THEN
        PERFORM group_rebalance_v1(p_group_id);
    END IF;
END
$function$;

COMMENT ON FUNCTION leave_group_v1(text, text) IS 'LeaveGroup: removes the member (only the principal that joined may) and rebalances the rest.';

REVOKE ALL ON FUNCTION leave_group_v1(text, text) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION leave_group_v1(text, text) TO @schema@_client, @schema@_admin;

CREATE VIEW partition_offsets WITH (security_barrier=true) AS
 SELECT v.topic,
    v.partition,
    v.log_start_offset,
    v.high_watermark,
    v.last_stable_offset,
    v.open_transactions,
    v.log_bytes,
    v.topic_id
   FROM ( SELECT t.name AS topic,
            p.partition,
            p.log_start_offset,
            p.next_offset AS high_watermark,
            LEAST(p.next_offset, o.first_open_offset) AS last_stable_offset,
            COALESCE(o.open_transactions, (0)::bigint) AS open_transactions,
            p.log_bytes,
            p.topic_id
           FROM ((partitions p
             JOIN topics t USING (topic_id))
             LEFT JOIN LATERAL ( SELECT min(x.first_offset) AS first_open_offset,
                    count(*) AS open_transactions
                   FROM (txn_partitions x
                     JOIN transactions tx USING (transactional_id))
                  WHERE ((x.topic_id = p.topic_id) AND (x.partition = p.partition) AND (x.first_offset IS NOT NULL) AND (tx.state = ANY (ARRAY['Ongoing'::text, 'PrepareCommit'::text, 'PrepareAbort'::text])))) o ON (true))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR acl_allowed_v1('topic'::text, v.topic, 'describe'::text));

COMMENT ON VIEW partition_offsets IS 'Per partition: log start offset, high watermark, last stable offset (read_committed readers stop there) and how many open transactions have written to it.';

COMMENT ON COLUMN partition_offsets.topic IS 'The topic name.';

COMMENT ON COLUMN partition_offsets.partition IS 'The partition number.';

COMMENT ON COLUMN partition_offsets.log_start_offset IS 'The first offset still in the log.';

COMMENT ON COLUMN partition_offsets.high_watermark IS 'The offset the next record will get (read_uncommitted readers stop here).';

COMMENT ON COLUMN partition_offsets.last_stable_offset IS 'The first offset of the oldest open transaction, else the high watermark.';

COMMENT ON COLUMN partition_offsets.open_transactions IS 'Open transactions that have written to this partition.';

COMMENT ON COLUMN partition_offsets.log_bytes IS 'Bytes of keys, values and headers in the log.';

COMMENT ON COLUMN partition_offsets.topic_id IS 'The topic''s id (for joins).';

REVOKE ALL ON TABLE partition_offsets FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE partition_offsets TO @schema@_reader;

GRANT SELECT ON TABLE partition_offsets TO @schema@_client;

GRANT SELECT ON TABLE partition_offsets TO @schema@_admin;

CREATE VIEW committed_records WITH (security_barrier=true) AS
 SELECT v.topic,
    v.partition,
    v."offset",
    v.key,
    v.value,
    v.headers,
    v."timestamp",
    v.producer_id
   FROM ( SELECT o.topic,
            r.partition,
            r."offset",
            r.key,
            r.value,
            r.headers,
            r."timestamp",
            r.producer_id
           FROM (records r
             JOIN partition_offsets o ON (((o.topic_id = r.topic_id) AND (o.partition = r.partition))))
          WHERE ((r.control_type IS NULL) AND (NOT r.aborted) AND (r."offset" < o.last_stable_offset) AND (r."offset" >= o.log_start_offset))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR acl_allowed_v1('topic'::text, v.topic, 'read'::text));

COMMENT ON VIEW committed_records IS 'read_committed: data records below each partition''s last stable offset that are not from an aborted transaction; never control records. Records here are decided and do not change (until retention).';

COMMENT ON COLUMN committed_records.topic IS 'The topic name.';

COMMENT ON COLUMN committed_records.partition IS 'The partition number.';

COMMENT ON COLUMN committed_records."offset" IS 'The record''s offset.';

COMMENT ON COLUMN committed_records.key IS 'The record key.';

COMMENT ON COLUMN committed_records.value IS 'The record value.';

COMMENT ON COLUMN committed_records.headers IS 'Headers as a JSON array of {"key", "value": base64}.';

COMMENT ON COLUMN committed_records."timestamp" IS 'The record timestamp.';

COMMENT ON COLUMN committed_records.producer_id IS 'The producer that wrote it.';

REVOKE ALL ON TABLE committed_records FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE committed_records TO @schema@_reader;

GRANT SELECT ON TABLE committed_records TO @schema@_client;

GRANT SELECT ON TABLE committed_records TO @schema@_admin;

CREATE VIEW transaction_status WITH (security_barrier=true) AS
 SELECT v.transactional_id,
    v.state,
    v.producer_id,
    v.producer_epoch,
    v.txn_number,
    v.timeout_ms,
    v.txn_started_at,
    v.age,
    v.expired,
    v.partitions,
    v.updated_at
   FROM ( SELECT x.transactional_id,
            x.state,
            x.producer_id,
            p.epoch AS producer_epoch,
            x.txn_number,
            x.timeout_ms,
            x.txn_started_at,
            (now() - x.txn_started_at) AS age,
            COALESCE(((x.txn_started_at + make_interval(secs => (((x.timeout_ms)::numeric / 1000.0))::double precision)) < now()), false) AS expired,
            COALESCE(( SELECT array_agg(format('%s-%s@%s'::text, t.name, tp.partition, COALESCE((tp.first_offset)::text, '-'::text)) ORDER BY t.name, tp.partition) AS array_agg
                   FROM (txn_partitions tp
                     JOIN topics t USING (topic_id))
                  WHERE (tp.transactional_id = x.transactional_id)), '{}'::text[]) AS partitions,
            x.updated_at
           FROM (transactions x
             JOIN producers p ON ((p.producer_id = x.producer_id)))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR acl_allowed_v1('transactional_id'::text, v.transactional_id, 'describe'::text));

COMMENT ON VIEW transaction_status IS 'The coordinator state of every transactional id: state, producer id and epoch, the open transaction''s age, whether it exceeded its timeout, and its partitions (topic-partition@first offset).';

COMMENT ON COLUMN transaction_status.transactional_id IS 'The transactional id.';

COMMENT ON COLUMN transaction_status.state IS 'Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort or Dead.';

COMMENT ON COLUMN transaction_status.producer_id IS 'The producer id serving it.';

COMMENT ON COLUMN transaction_status.producer_epoch IS 'The current epoch (older epochs are fenced).';

COMMENT ON COLUMN transaction_status.txn_number IS 'The number of the last transaction opened.';

COMMENT ON COLUMN transaction_status.timeout_ms IS 'The transaction timeout.';

COMMENT ON COLUMN transaction_status.txn_started_at IS 'When the open transaction started.';

COMMENT ON COLUMN transaction_status.age IS 'How long the open transaction has been open.';

COMMENT ON COLUMN transaction_status.expired IS 'Open past its timeout (the next reader or maintenance aborts it).';

COMMENT ON COLUMN transaction_status.partitions IS 'Partitions of the open transaction, as topic-partition@first offset.';

COMMENT ON COLUMN transaction_status.updated_at IS 'When the state last changed.';

REVOKE ALL ON TABLE transaction_status FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE transaction_status TO @schema@_reader;

GRANT SELECT ON TABLE transaction_status TO @schema@_client;

GRANT SELECT ON TABLE transaction_status TO @schema@_admin;

CREATE VIEW group_status WITH (security_barrier=true) AS
 SELECT v.group_id,
    v.state,
    v.generation,
    v.assignor,
    v.member_id,
    v.group_instance_id,
    v.client_id,
    v.subscription,
    v.last_heartbeat_at,
    v.expired,
    v.assignment,
    v.target
   FROM ( SELECT g.group_id,
            g.state,
            g.generation,
            g.assignor,
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.subscription,
            m.last_heartbeat_at,
            ((m.last_heartbeat_at + make_interval(secs => (((m.session_timeout_ms)::numeric / 1000.0))::double precision)) < now()) AS expired,
            ( SELECT array_agg(format('%s-%s'::text, t.name, a.partition) ORDER BY t.name, a.partition) AS array_agg
                   FROM (member_assignments a
                     JOIN topics t USING (topic_id))
                  WHERE ((a.group_id = g.group_id) AND (a.member_id = m.member_id))) AS assignment,
            ( SELECT array_agg(format('%s-%s'::text, t.name, a.partition) ORDER BY t.name, a.partition) AS array_agg
                   FROM (target_assignments a
                     JOIN topics t USING (topic_id))
                  WHERE ((a.group_id = g.group_id) AND (a.member_id = m.member_id))) AS target
           FROM (groups g
             LEFT JOIN group_members m USING (group_id))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR acl_allowed_v1('group'::text, v.group_id, 'describe'::text));

COMMENT ON VIEW group_status IS 'Consumer groups with their state, generation, members, and what each member owns and is to own.';

COMMENT ON COLUMN group_status.group_id IS 'The group id.';

COMMENT ON COLUMN group_status.state IS 'Empty, Stable, or Reconciling while a partition waits for its owner to let go of it.';

COMMENT ON COLUMN group_status.generation IS 'The current generation.';

COMMENT ON COLUMN group_status.assignor IS 'range, roundrobin or sticky.';

COMMENT ON COLUMN group_status.member_id IS 'A member (NULL for a group with none).';

COMMENT ON COLUMN group_status.group_instance_id IS 'The member''s static instance id, if any.';

COMMENT ON COLUMN group_status.client_id IS 'The member''s client id.';

COMMENT ON COLUMN group_status.subscription IS 'Topics the member subscribed to.';

COMMENT ON COLUMN group_status.last_heartbeat_at IS 'The member''s last heartbeat.';

COMMENT ON COLUMN group_status.expired IS 'Silent past its session timeout (removed at the next group call).';

COMMENT ON COLUMN group_status.assignment IS 'Partitions the member owns now, as topic-partition.';

COMMENT ON COLUMN group_status.target IS 'Partitions the assignor gives the member, as topic-partition: it owns each once its previous owner lets go.';

REVOKE ALL ON TABLE group_status FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE group_status TO @schema@_reader;

GRANT SELECT ON TABLE group_status TO @schema@_client;

GRANT SELECT ON TABLE group_status TO @schema@_admin;

CREATE VIEW group_offsets WITH (security_barrier=true) AS
 SELECT v.group_id,
    v.topic,
    v.partition,
    v.committed_offset,
    v.metadata,
    v.committed_at,
    v.high_watermark,
    v.last_stable_offset,
    v.lag,
    v.lag_committed,
    v.committed_by_producer_id
   FROM ( SELECT c.group_id,
            o.topic,
            c.partition,
            c.committed_offset,
            c.metadata,
            c.committed_at,
            o.high_watermark,
            o.last_stable_offset,
            GREATEST((o.high_watermark - c.committed_offset), (0)::bigint) AS lag,
            GREATEST((o.last_stable_offset - c.committed_offset), (0)::bigint) AS lag_committed,
            c.producer_id AS committed_by_producer_id
           FROM (committed_offsets c
             JOIN partition_offsets o ON (((o.topic_id = c.topic_id) AND (o.partition = c.partition))))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR (acl_allowed_v1('group'::text, v.group_id, 'describe'::text) AND acl_allowed_v1('topic'::text, v.topic, 'describe'::text)));

COMMENT ON VIEW group_offsets IS 'Committed offsets of every group, with lag against the high watermark and against the last stable offset (what a read_committed consumer can still read).';

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

REVOKE ALL ON TABLE group_offsets FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE group_offsets TO @schema@_reader;

GRANT SELECT ON TABLE group_offsets TO @schema@_client;

GRANT SELECT ON TABLE group_offsets TO @schema@_admin;

CREATE VIEW pending_group_offsets WITH (security_barrier=true) AS
 SELECT v.group_id,
    v.topic,
    v.partition,
    v.committed_offset,
    v.transactional_id,
    v.producer_id,
    v.generation,
    v.member_id,
    v.transaction_state,
    v.txn_started_at
   FROM ( SELECT po.group_id,
            t.name AS topic,
            po.partition,
            po.committed_offset,
            po.transactional_id,
            po.producer_id,
            po.generation,
            po.member_id,
            tx.state AS transaction_state,
            tx.txn_started_at
           FROM ((pending_offsets po
             JOIN topics t USING (topic_id))
             JOIN transactions tx USING (transactional_id))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR (acl_allowed_v1('group'::text, v.group_id, 'describe'::text) AND acl_allowed_v1('topic'::text, v.topic, 'describe'::text)));

COMMENT ON VIEW pending_group_offsets IS 'Offsets committed inside still-open transactions (KIP-447), with the transaction holding them: a consumer asking for stable offsets waits until that transaction ends.';

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

REVOKE ALL ON TABLE pending_group_offsets FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE pending_group_offsets TO @schema@_reader;

GRANT SELECT ON TABLE pending_group_offsets TO @schema@_client;

GRANT SELECT ON TABLE pending_group_offsets TO @schema@_admin;
