CREATE OR REPLACE FUNCTION list_offsets_max_timestamp_v1(p_topics text[], p_partitions integer[], p_read_committed boolean)
 RETURNS TABLE(idx integer, "offset" bigint, "timestamp" timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_n integer := coalesce(cardinality(p_topics), 0);
    v_bad text;
    i integer;
BEGIN
    IF v_n <> coalesce(cardinality(p_partitions), 0) OR v_n > 10000 OR p_read_committed IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = 'name 0 to 10000 partitions as arrays of one length, and the isolation level';
    END IF;
    -- Access control (revision 0009, docs/acl.md): ListOffsets needs DESCRIBE, as in Kafka.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', p_topics, 'describe');
    END IF;
    v_bad := unknown_partition_v1(p_topics, p_partitions);
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic or partition %s', v_bad);
    END IF;
    -- Per partition, the data record with the largest timestamp (the first of equals, as Kafka's
    -- segments keep the offset of their largest timestamp so far) among those a reader of the
    -- isolation level could read: below the high watermark, or below the last stable offset and
    -- not aborted. Kafka answers "none" when that record lies past the last stable offset; this
    -- answers the largest below it, which a read_committed consumer can seek to. Nothing indexes
    -- timestamps, so this reads the whole partition. No lock, as list_offsets_for_times_v1.
    FOR i IN 1 .. v_n LOOP
        RETURN QUERY
        SELECT i, x."offset", x."timestamp"
        FROM partitions pt
        JOIN topics t ON t.topic_id = pt.topic_id
        LEFT JOIN LATERAL (
            SELECT r."offset", r."timestamp" FROM records r
            WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition
              AND r."offset" >= pt.log_start_offset
              AND r."offset" < readable_end_v1(pt.topic_id, pt.partition, pt.next_offset, p_read_committed)
              AND r.control_type IS NULL AND NOT (p_read_committed AND r.aborted)
            ORDER BY r."timestamp" DESC, r."offset"
            LIMIT 1
        ) x ON true
        WHERE t.name = p_topics[i] AND pt.partition = p_partitions[i];
    END LOOP;
END
$function$;

COMMENT ON FUNCTION list_offsets_max_timestamp_v1(text[], integer[], boolean) IS 'ListOffsets for the largest timestamp (Kafka''s MAX_TIMESTAMP, -3, KIP-734): per partition asked (idx, in order), the offset and timestamp of the data record with the largest timestamp (the first of equals) below the high watermark, or for read_committed below the last stable offset and not aborted; NULL when there is none. Needs DESCRIBE on the topics. OL101 names an unknown topic or partition.';

REVOKE ALL ON FUNCTION list_offsets_max_timestamp_v1(text[], integer[], boolean) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION list_offsets_max_timestamp_v1(text[], integer[], boolean) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION readable_end_v1(p_topic_id integer, p_partition integer, p_next_offset bigint, p_read_committed boolean)
 RETURNS bigint
 LANGUAGE sql
 STABLE
 SET search_path FROM CURRENT
AS $function$
    -- The high watermark, or for read_committed the last stable offset: the first offset of the
    -- oldest open transaction that wrote to the partition, if below it.
    SELECT CASE WHEN p_read_committed
                THEN least(p_next_offset, (
                    SELECT min(xp.first_offset) FROM txn_partitions xp
                    JOIN transactions tx ON tx.transactional_id = xp.transactional_id
                    WHERE xp.topic_id = p_topic_id AND xp.partition = p_partition
                      AND xp.first_offset IS NOT NULL
                      AND tx.state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort')))
                ELSE p_next_offset END
$function$;

COMMENT ON FUNCTION readable_end_v1(integer, integer, bigint, boolean) IS 'Internal: where a reader of the isolation level stops in a partition whose next offset is p_next_offset: the high watermark, or for read_committed the last stable offset.';

REVOKE ALL ON FUNCTION readable_end_v1(integer, integer, bigint, boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION list_offsets_for_times_v1(p_topics text[], p_partitions integer[], p_timestamps timestamp with time zone[], p_read_committed boolean)
 RETURNS TABLE(idx integer, "offset" bigint, "timestamp" timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_n integer := coalesce(cardinality(p_topics), 0);
    v_bad text;
    i integer;
BEGIN
    IF v_n <> coalesce(cardinality(p_partitions), 0) OR v_n <> coalesce(cardinality(p_timestamps), 0) OR v_n > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = 'name 0 to 10000 partitions, each with a timestamp, as arrays of one length';
    END IF;
    IF p_read_committed IS NULL OR EXISTS (SELECT 1 FROM unnest(p_timestamps) ts WHERE ts IS NULL OR NOT isfinite(ts)) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = 'every partition needs a finite timestamp, and the isolation level must be named';
    END IF;
    -- Access control (revision 0009, docs/acl.md): ListOffsets needs DESCRIBE, as in Kafka.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', p_topics, 'describe');
    END IF;
    v_bad := unknown_partition_v1(p_topics, p_partitions);
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic or partition %s', v_bad);
    END IF;
    -- Per partition, the first data record from the log start whose timestamp is at or after the
    -- one asked for, below the high watermark, or for read_committed below the last stable offset
    -- and not aborted (a read_committed consumer could not read one past it). Timestamps need not
    -- grow with offsets, so this scans the partition in offset order to the answer: its cost is
    -- the records before it. No lock: the bounds are read first, and what lies below them is
    -- decided (see fetch_v3). No record: offset and timestamp NULL, as Kafka answers null.
    FOR i IN 1 .. v_n LOOP
        RETURN QUERY
        SELECT i, x."offset", x."timestamp"
        FROM partitions pt
        JOIN topics t ON t.topic_id = pt.topic_id
        LEFT JOIN LATERAL (
            SELECT r."offset", r."timestamp" FROM records r
            WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition
              AND r."offset" >= pt.log_start_offset
              AND r."offset" < readable_end_v1(pt.topic_id, pt.partition, pt.next_offset, p_read_committed)
              AND r.control_type IS NULL AND NOT (p_read_committed AND r.aborted)
              AND r."timestamp" >= p_timestamps[i]
            ORDER BY r."offset"
            LIMIT 1
        ) x ON true
        WHERE t.name = p_topics[i] AND pt.partition = p_partitions[i];
    END LOOP;
END
$function$;

COMMENT ON FUNCTION list_offsets_for_times_v1(text[], integer[], timestamp with time zone[], boolean) IS 'ListOffsets by timestamp (Kafka''s offsetsForTimes): per partition asked (idx, in order), the offset and timestamp of the first record from the log start whose timestamp is at or after the one given, below the high watermark, or for read_committed below the last stable offset and not aborted; NULL when there is none. Needs DESCRIBE on the topics. OL101 names an unknown topic or partition.';

REVOKE ALL ON FUNCTION list_offsets_for_times_v1(text[], integer[], timestamp with time zone[], boolean) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION list_offsets_for_times_v1(text[], integer[], timestamp with time zone[], boolean) TO @schema@_client, @schema@_admin;
