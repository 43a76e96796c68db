DROP FUNCTION record_bytes_v1(bytea, bytea, jsonb);

CREATE OR REPLACE FUNCTION compaction_status_v1(p_topic text)
 RETURNS TABLE(partition integer, cleanup_policy text, log_start_offset bigint, clean_offset bigint, high_watermark bigint, log_bytes bigint, dirty_ratio double precision, examined_records bigint, removed_records bigint, removed_bytes bigint, cleaned_at timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
#variable_conflict use_column
BEGIN
    -- The ACL first (while enforcement is on): a role that may not describe the topic learns
    -- nothing, not even whether it exists. Revision 0036: the check ran with enforcement off too.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', ARRAY[p_topic], 'describe');
    END IF;
    PERFORM 1 FROM topics t WHERE t.name = p_topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_topic);
    END IF;
    -- The view's rows (revision 0038: the same query was written here a second time). Its ACL
    -- filter names the session's role, not this function's owner, and the check above passed.
    RETURN QUERY
    SELECT v.partition, v.cleanup_policy, v.log_start_offset, v.clean_offset, v.high_watermark, v.log_bytes,
           v.dirty_ratio, v.examined_records, v.removed_records, v.removed_bytes, v.cleaned_at
    FROM compaction_status v
    WHERE v.topic = p_topic
    ORDER BY v.partition;
END
$function$;

COMMENT ON FUNCTION compaction_status_v1(text) IS 'The compaction_status view''s rows for one topic (none when it is not compacted): per partition its cleanup policy, log start, the end of its clean section, high watermark, live bytes, dirty ratio (the share of live bytes not yet cleaned) and what compaction has examined and removed so far. Needs DESCRIBE on the topic; OL101 for an unknown topic.';

REVOKE ALL ON FUNCTION compaction_status_v1(text) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION compaction_status_v1(text) TO @schema@_reader, @schema@_client, @schema@_admin;
