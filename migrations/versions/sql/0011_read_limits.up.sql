CREATE FUNCTION read_limits_v1(p_topics text[], p_partitions integer[], p_starts bigint[], p_limits bigint[])
RETURNS TABLE (topic text, partition integer, read_limit bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_ids integer[];
    v_missing text;
BEGIN
    IF cardinality(p_topics) IS DISTINCT FROM cardinality(p_partitions)
       OR cardinality(p_topics) IS DISTINCT FROM cardinality(p_starts)
       OR cardinality(p_topics) IS DISTINCT FROM cardinality(p_limits) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'topics, partitions, starts and limits differ in length';
    END IF;
    -- Access control (docs/acl.md), as in the protocol functions: one lookup while it is off.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', p_topics, 'read');
    END IF;
    SELECT x.name INTO v_missing
    FROM unnest(p_topics, p_starts, p_limits) AS x(name, start, lim)
    WHERE x.start IS NULL OR x.lim IS NULL OR x.start < 0 OR x.lim < x.start
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('a range of topic %L is not 0 <= start <= limit', v_missing);
    END IF;
    SELECT format('%s-%s', x.name, x.part) INTO v_missing
    FROM unnest(p_topics, p_partitions) AS x(name, part)
    WHERE NOT EXISTS (SELECT 1 FROM partitions pt JOIN topics t USING (topic_id)
                      WHERE t.name = x.name AND pt.partition = x.part)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown partition %s', v_missing);
    END IF;
    SELECT array_agg(t.topic_id ORDER BY x.i) INTO v_ids
    FROM unnest(p_topics) WITH ORDINALITY AS x(name, i) JOIN topics t ON t.name = x.name;
    -- The limits are caps here (each range ends at its limit), hence limits passed as scan ends too.
    RETURN QUERY
    SELECT x.name, x.part, x.lim
    FROM unnest(p_topics, p_partitions,
                consistent_limits_v1(v_ids, p_partitions, p_starts, p_limits, p_limits)) AS x(name, part, lim);
END
$fn$;
COMMENT ON FUNCTION read_limits_v1(text[], integer[], bigint[], bigint[]) IS
  'For ranges [start, limit) of partitions, limits are last stable offsets or below: the limits under which '
  'every committed transaction in them is read on all of these partitions or on none (planned reads, e.g. Spark). '
  'Needs topic READ when ACLs are enforced.';

REVOKE ALL ON FUNCTION read_limits_v1(text[], integer[], bigint[], bigint[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION read_limits_v1(text[], integer[], bigint[], bigint[]) TO @schema@_reader, @schema@_client, @schema@_admin;
