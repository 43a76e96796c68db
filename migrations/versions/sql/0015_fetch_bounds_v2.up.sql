-- Phase 1 of a fetch: for each requested partition (element i of every array answers p_topics[i],
-- p_partitions[i], p_offsets[i]) its bounds or an error, and the limit the read stops at.
-- read_committed stops at the last stable offset, pulled back, when an open transaction holds some
-- partition back, so that no committed transaction is returned only in part (consistent_limits_v1).
CREATE FUNCTION fetch_bounds_v2(p_topics text[], p_partitions integer[], p_offsets bigint[],
                                p_max_records integer, p_read_committed boolean,
                                OUT topic_ids integer[], OUT log_start_offsets bigint[],
                                OUT high_watermarks bigint[], OUT last_stable_offsets bigint[],
                                OUT read_limits bigint[], OUT expired_open boolean[], OUT errors text[])
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
-- The lookup's plan for a request of 4 partitions was costed below the plan kept for any request,
-- so plpgsql planned it afresh on every call (~1 ms here); every lookup here is an index lookup by
-- key, which the kept plan does as well.
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    n integer := coalesce(cardinality(p_topics), 0);
    i integer;
    v_torn_possible boolean := false;
    v_scan_ends bigint[];
    v_cap bigint;
    ok_ids integer[];
    ok_parts integer[];
    ok_starts bigint[];
    ok_limits bigint[];
    ok_scan_ends bigint[];
    ok_index integer[];
    cut bigint[];
BEGIN
    IF cardinality(p_topics) IS DISTINCT FROM cardinality(p_partitions)
       OR cardinality(p_topics) IS DISTINCT FROM cardinality(p_offsets) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'topics, partitions and offsets differ in length';
    END IF;
    IF p_max_records IS NULL OR p_max_records < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'max records must be at least 1';
    END IF;
    -- Every partition in one statement: a statement per partition cost more in overhead than in
    -- lookups. Last stable offset: the first offset of the oldest open transaction, else the end
    -- (least() skips the NULL of a partition without one).
    SELECT array_agg(pt.topic_id ORDER BY q.i),
           array_agg(pt.log_start_offset ORDER BY q.i),
           array_agg(pt.next_offset ORDER BY q.i),
           array_agg(least(o.first_open, pt.next_offset) ORDER BY q.i),
           array_agg(CASE WHEN pt.topic_id IS NULL OR q.off IS NULL OR q.off < pt.log_start_offset
                               OR q.off > pt.next_offset THEN NULL
                          WHEN p_read_committed THEN least(o.first_open, pt.next_offset)
                          ELSE pt.next_offset END ORDER BY q.i),
           array_agg(coalesce(o.expired, false) ORDER BY q.i),
           array_agg(CASE WHEN pt.topic_id IS NULL THEN 'unknown_topic_or_partition'
                          WHEN q.off IS NULL OR q.off < pt.log_start_offset OR q.off > pt.next_offset
                          THEN 'offset_out_of_range' END ORDER BY q.i)
    INTO topic_ids, log_start_offsets, high_watermarks, last_stable_offsets, read_limits, expired_open, errors
    FROM unnest(p_topics, p_partitions, p_offsets) WITH ORDINALITY AS q(name, part, off, i)
    -- Lateral, with LIMIT 1 (name and partition are unique) so that it stays a subquery: as a
    -- plain join the kept plan hashed every partition of every topic (0.5 ms with 600).
    LEFT JOIN LATERAL (
        SELECT p.topic_id, p.log_start_offset, p.next_offset FROM topics t JOIN partitions p USING (topic_id)
        WHERE t.name = q.name AND p.partition = q.part
        LIMIT 1) pt ON true
    LEFT JOIN LATERAL (
        SELECT min(x.first_offset) AS first_open,
               bool_or(tx.txn_started_at + make_interval(secs => tx.timeout_ms / 1000.0) < clock_timestamp())
                   AS expired
        FROM txn_partitions x JOIN transactions tx USING (transactional_id)
        WHERE x.topic_id = pt.topic_id AND x.partition = q.part AND x.first_offset IS NOT NULL
          AND tx.state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort')) o ON true;
    FOR i IN 1 .. n LOOP
        -- An open transaction holds this partition back: a committed transaction read elsewhere
        -- may be above its last stable offset here.
        IF p_read_committed AND errors[i] IS NULL AND last_stable_offsets[i] < high_watermarks[i] THEN
            v_torn_possible := true;
        END IF;
    END LOOP;
    -- A committed transaction is returned on all of the requested partitions or on none. Only
    -- possible to break when some limit falls short of its partition's end.
    IF v_torn_possible THEN
        -- The record cap bounds which transactions this read can return (the scan end): only
        -- needed for the check below, so found only when it runs (it costs a second index scan).
        v_scan_ends := read_limits;
        FOR i IN 1 .. n LOOP
            IF errors[i] IS NULL THEN
                v_cap := NULL;
                SELECT r."offset" + 1 INTO v_cap FROM records r
                WHERE r.topic_id = topic_ids[i] AND r.partition = p_partitions[i]
                  AND r."offset" >= p_offsets[i] AND r."offset" < read_limits[i]
                  AND r.control_type IS NULL AND NOT r.aborted
                ORDER BY r."offset" OFFSET p_max_records - 1 LIMIT 1;
                v_scan_ends[i] := coalesce(v_cap, read_limits[i]);
            END IF;
        END LOOP;
        SELECT array_agg(topic_ids[j] ORDER BY j), array_agg(p_partitions[j] ORDER BY j),
               array_agg(p_offsets[j] ORDER BY j), array_agg(read_limits[j] ORDER BY j),
               array_agg(v_scan_ends[j] ORDER BY j), array_agg(j ORDER BY j)
        INTO ok_ids, ok_parts, ok_starts, ok_limits, ok_scan_ends, ok_index
        FROM generate_series(1, n) AS j WHERE errors[j] IS NULL;
        cut := consistent_limits_v1(ok_ids, ok_parts, ok_starts, ok_limits, ok_scan_ends);
        FOR i IN 1 .. coalesce(cardinality(ok_index), 0) LOOP
            read_limits[ok_index[i]] := cut[i];
        END LOOP;
    END IF;
END
$fn$;
COMMENT ON FUNCTION fetch_bounds_v2(text[], integer[], bigint[], integer, boolean) IS
  'Internal (phase 1 of fetch_v3): one row of arrays, element i for requested partition i: its topic id, log '
  'start offset, high watermark, last stable offset, the limit this read stops at, whether an expired '
  'transaction holds it back, and its error (unknown_topic_or_partition, offset_out_of_range) if any.';

REVOKE ALL ON FUNCTION fetch_bounds_v2(text[], integer[], bigint[], integer, boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION fetch_v3(p_topics text[], p_partitions integer[], p_offsets bigint[],
                                    p_max_records integer, p_read_committed boolean)
RETURNS TABLE (idx integer, "offset" bigint, key bytea, value bytea, headers jsonb, "timestamp" timestamptz,
               producer_id bigint, producer_epoch smallint, sequence integer, bounds bigint[], error text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    i integer;
    v_topic_ids integer[];
    v_starts bigint[];
    v_ends bigint[];
    v_lsos bigint[];
    v_limits bigint[];
    v_expired boolean[];
    v_errors text[];
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', p_topics, 'read');
    END IF;
    -- Into arrays of this function's own: fields of a record variable measured ~30 us slower here.
    SELECT * INTO v_topic_ids, v_starts, v_ends, v_lsos, v_limits, v_expired, v_errors
    FROM fetch_bounds_v2(p_topics, p_partitions, p_offsets, p_max_records, p_read_committed);
    -- A loop of per-partition queries: one statement (a lateral join of each partition's row and
    -- records) measured no faster from a client.
    FOR i IN 1 .. coalesce(cardinality(p_topics), 0) LOOP
        RETURN QUERY SELECT i, NULL::bigint, NULL::bytea, NULL::bytea, NULL::jsonb, NULL::timestamptz,
            NULL::bigint, NULL::smallint, NULL::integer,
            ARRAY[v_starts[i], v_ends[i], v_lsos[i], v_limits[i], v_expired[i]::integer], v_errors[i];
        IF v_errors[i] IS NOT NULL THEN
            CONTINUE;
        END IF;
        -- Control records are never returned; read_committed also skips aborted records.
        RETURN QUERY
        SELECT i, x."offset", x.key, x.value, x.headers, x."timestamp", x.producer_id, x.producer_epoch,
               x.sequence, NULL::bigint[], NULL::text
        FROM records x
        WHERE x.topic_id = v_topic_ids[i] AND x.partition = p_partitions[i]
          AND x."offset" >= p_offsets[i] AND x."offset" < v_limits[i] AND x.control_type IS NULL
          AND NOT (p_read_committed AND x.aborted)
        ORDER BY x."offset"
        LIMIT p_max_records;
    END LOOP;
END
$fn$;

DROP FUNCTION fetch_bounds_v1(text[], integer[], bigint[], integer, boolean);
