CREATE OR REPLACE FUNCTION leave_group_members_v1(p_group_id text, p_member_ids text[], p_instance_ids text[])
 RETURNS TABLE(idx integer, member_id text, group_instance_id text, error text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION leave_group_members_v1(text, text[], text[]) IS 'LeaveGroup v3 and later (KIP-345; Kafka''s removeMembersFromConsumerGroup): removes each member named by member id or by group instance id (a member id given beside an instance id must match: else fenced_instance_id) and rebalances the rest once; per member (idx, in order) the error, NULL when removed, unknown_member_id when there is no such member or the caller may not remove it (only the principal that joined it, the owner or the admin role may). Needs READ on the group; an unknown group is OL409.';

REVOKE ALL ON FUNCTION leave_group_members_v1(text, text[], text[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION leave_group_members_v1(text, text[], text[]) TO @schema@_client, @schema@_admin;
