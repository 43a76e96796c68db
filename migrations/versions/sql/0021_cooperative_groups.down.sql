DROP VIEW IF EXISTS pending_group_offsets CASCADE;

DROP VIEW IF EXISTS group_offsets CASCADE;

DROP VIEW IF EXISTS group_status CASCADE;

DROP VIEW IF EXISTS transaction_status CASCADE;

DROP VIEW IF EXISTS committed_records CASCADE;

DROP VIEW IF EXISTS partition_offsets CASCADE;

CREATE OR REPLACE FUNCTION heartbeat_v1(p_group_id text, p_member_id text, p_group_instance_id text)
 RETURNS TABLE(generation integer, topics text[], partitions integer[])
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
$function$;

COMMENT ON FUNCTION heartbeat_v1(text, text, text) IS 'Heartbeat: keeps the member alive and returns the current generation and its assignment (a new generation means a rebalance happened). UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID when the member was replaced.';

REVOKE ALL ON FUNCTION heartbeat_v1(text, text, text) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION heartbeat_v1(text, text, text) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION join_group_v1(p_group_id text, p_member_id text, p_group_instance_id text, p_client_id text, p_topics text[], p_session_timeout_ms integer, p_assignor text)
 RETURNS TABLE(member_id text, generation integer, topics text[], partitions integer[])
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    g groups%ROWTYPE;
    m group_members%ROWTYPE;
    v_member text;
    v_changed boolean := false;
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
$function$;

COMMENT ON FUNCTION join_group_v1(text, text, text, text, text[], integer, text) IS 'JoinGroup (server-side assignment): joins or rejoins a member, removes members past their session timeout, rebalances on any membership or subscription change, and returns the member id, generation and its assignment. A static member (group instance id) takes its place back without a rebalance.';

REVOKE ALL ON FUNCTION join_group_v1(text, text, text, text, text[], integer, text) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION join_group_v1(text, text, text, text, text[], integer, text) TO @schema@_client, @schema@_admin;

DROP FUNCTION group_assign_sticky_v1(text, integer);

DROP FUNCTION group_channel_v1();

DROP FUNCTION group_listen_v1();

DROP FUNCTION group_member_view_v1(text, text);

DROP FUNCTION group_notify_v1(text);

DROP FUNCTION group_owned_args_v1(text[], integer[]);

DROP FUNCTION group_reconcile_v1(text);

DROP FUNCTION group_release_v1(text, text, text[], integer[]);

DROP FUNCTION heartbeat_v2(text, text, text, text[], integer[]);

DROP FUNCTION join_group_v2(text, text, text, text, text[], integer, text, text[], integer[]);

CREATE OR REPLACE FUNCTION group_expire_members_v1(p_group_id text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION group_expire_members_v1(text) IS 'Internal: removes members past their session timeout; rebalances if any went or a subscribed partition has no owner.';

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
$function$;

COMMENT ON FUNCTION group_member_check_v1(text, text, text, integer) IS 'Internal: UNKNOWN_MEMBER_ID (OL402), FENCED_INSTANCE_ID (OL405), ILLEGAL_GENERATION (OL403) checks.';

REVOKE ALL ON FUNCTION group_member_check_v1(text, text, text, integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION group_owns_partitions_v1(p_group_id text, p_member_id text, p_generation integer, p_topics text[], p_partitions integer[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION group_owns_partitions_v1(text, text, integer, text[], integer[]) IS 'Internal: UNASSIGNED_PARTITION (OL408) unless every partition is assigned to the member.';

REVOKE ALL ON FUNCTION group_owns_partitions_v1(text, text, integer, text[], integer[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION group_rebalance_v1(p_group_id text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION group_rebalance_v1(text) IS 'Internal: bumps the generation and recomputes the whole assignment (range or roundrobin).';

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
    DELETE FROM group_members x WHERE x.group_id = p_group_id AND x.member_id = p_member_id;
    IF FOUND THEN
        PERFORM group_rebalance_v1(p_group_id);
    END IF;
END
$function$;

COMMENT ON FUNCTION leave_group_v1(text, text) IS 'LeaveGroup: removes the member and rebalances the rest.';

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
    v.assignment
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
                  WHERE ((a.group_id = g.group_id) AND (a.member_id = m.member_id))) AS assignment
           FROM (groups g
             LEFT JOIN group_members m USING (group_id))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR acl_allowed_v1('group'::text, v.group_id, 'describe'::text));

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

-- The table changes, written by hand (above: frozen from store/sql by scripts/freeze_revision.py).
-- Revision 0020's groups know no sticky assignor and no Reconciling state.
UPDATE groups SET assignor = 'range' WHERE assignor = 'sticky';
UPDATE groups SET state = 'Stable' WHERE state = 'Reconciling';
ALTER TABLE groups DROP CONSTRAINT ck_groups_state_valid;
ALTER TABLE groups ADD CONSTRAINT ck_groups_state_valid
    CHECK (state IN ('Empty', 'PreparingRebalance', 'CompletingRebalance', 'Stable', 'Dead'));
ALTER TABLE groups DROP CONSTRAINT ck_groups_assignor_valid;
ALTER TABLE groups ADD CONSTRAINT ck_groups_assignor_valid CHECK (assignor IN ('range', 'roundrobin'));

COMMENT ON COLUMN groups.state IS 'Empty, PreparingRebalance, CompletingRebalance, Stable or Dead.';

COMMENT ON COLUMN groups.assignor IS 'The partition assignment strategy computed by the store (''range'' or ''roundrobin'').';

COMMENT ON COLUMN member_assignments.generation IS 'The generation in which this assignment was computed.';

COMMENT ON TABLE member_assignments IS 'The current assignment: each partition belongs to at most one member of a group.';

DROP TABLE target_assignments;

ALTER TABLE group_members DROP COLUMN owner;
