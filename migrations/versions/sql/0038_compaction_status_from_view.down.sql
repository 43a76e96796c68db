CREATE OR REPLACE FUNCTION record_bytes_v1(p_key bytea, p_value bytea, p_headers jsonb)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $function$
    -- What a record counts towards partitions.log_bytes (and retention_bytes).
    SELECT coalesce(octet_length(p_key), 0)::bigint + coalesce(octet_length(p_value), 0)
           + coalesce(octet_length(p_headers::text), 0)
$function$;

COMMENT ON FUNCTION record_bytes_v1(bytea, bytea, jsonb) IS 'Internal: the bytes a record counts towards its partition''s log_bytes (key, value and headers).';

REVOKE ALL ON FUNCTION record_bytes_v1(bytea, bytea, jsonb) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION compaction_status_v1(p_topic text)
 RETURNS TABLE(partition integer, cleanup_policy text, log_start_offset bigint, clean_offset bigint, high_watermark bigint, log_bytes bigint, dirty_ratio double precision, examined_records bigint, removed_records bigint, removed_bytes bigint, cleaned_at timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
#variable_conflict use_column
DECLARE
    v_topic_id integer;
BEGIN
    -- The ACL first (while enforcement is on): a role that may not describe the topic learns
    -- nothing, not even whether it exists. Revision 0036: the check ran with enforcement off too.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', ARRAY[p_topic], 'describe');
    END IF;
    SELECT t.topic_id INTO v_topic_id FROM topics t WHERE t.name = p_topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_topic);
    END IF;
    RETURN QUERY
    SELECT p.partition, t.cleanup_policy, p.log_start_offset,
           greatest(p.log_start_offset, coalesce(s.clean_offset, 0)), p.next_offset, p.log_bytes,
           dirty_ratio_v2(p.log_bytes, p.log_start_offset, s.clean_start, s.clean_offset, s.clean_bytes),
           coalesce(s.examined_records, 0), coalesce(s.removed_records, 0), coalesce(s.removed_bytes, 0), s.cleaned_at
    FROM topics t JOIN partitions p USING (topic_id)
    LEFT JOIN cleaner_state s ON s.topic_id = p.topic_id AND s.partition = p.partition
    WHERE t.topic_id = v_topic_id
    ORDER BY p.partition;
END
$function$;

COMMENT ON FUNCTION compaction_status_v1(text) IS 'Per partition of a topic: its cleanup policy, log start, the end of its clean section, high watermark, live bytes, dirty ratio (the share of live bytes not yet cleaned) and what compaction has examined and removed so far. Needs DESCRIBE on the topic; OL101 for an unknown topic.';

REVOKE ALL ON FUNCTION compaction_status_v1(text) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION compaction_status_v1(text) TO @schema@_reader, @schema@_client, @schema@_admin;
