CREATE OR REPLACE FUNCTION group_member_id_v1(p_client_id text)
 RETURNS text
 LANGUAGE sql
 SET search_path FROM CURRENT
AS $function$
    -- Kafka's form, the client id and a UUID; the prefix is cut so the id stays within the
    -- 255 characters member ids may have.
    SELECT left(coalesce(p_client_id, 'member'), 200) || '-' || gen_random_uuid();
$function$;

COMMENT ON FUNCTION group_member_id_v1(text) IS 'Internal: a new member id, the client id (its first 200 characters, or member) and a UUID.';

REVOKE ALL ON FUNCTION group_member_id_v1(text) FROM PUBLIC;

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
$function$;

COMMENT ON FUNCTION join_group_v2(text, text, text, text, text[], integer, text, text[], integer[]) IS 'JoinGroup (server-side assignment): joins or rejoins a member, removes members past their session timeout, recomputes the target assignment on any membership or subscription change, and returns the member id, the generation, the partitions the member owns and keeps, and whether it is reconciling (it is to give up partitions it owns, or waits for partitions their owners have not let go yet). A member rejoining under its id names the partitions it still holds (p_owned_*), as heartbeat_v2. A static member (group instance id) takes its place back without a rebalance.';

REVOKE ALL ON FUNCTION join_group_v2(text, text, text, text, text[], integer, text, text[], integer[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION join_group_v2(text, text, text, text, text[], integer, text, text[], integer[]) TO @schema@_client, @schema@_admin;
