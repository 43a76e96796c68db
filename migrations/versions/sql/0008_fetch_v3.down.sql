CREATE OR REPLACE FUNCTION fetch_v2(p_topics text[], p_partitions integer[], p_offsets bigint[], p_max_records integer,
                         p_read_committed boolean)
RETURNS TABLE (
    kind text, topic text, partition integer, "offset" bigint, key bytea, value bytea, headers jsonb,
    "timestamp" timestamptz, producer_id bigint, producer_epoch smallint, sequence integer,
    log_start_offset bigint, high_watermark bigint, last_stable_offset bigint, read_limit bigint,
    expired_open boolean, error text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    n integer := coalesce(cardinality(p_topics), 0);
    i integer;
    v_topic_ids integer[] := array_fill(NULL::integer, ARRAY[n]);
    v_starts bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_ends bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_lsos bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_limits bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_scan_ends bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    v_expired boolean[] := array_fill(false, ARRAY[n]);
    v_errors text[] := array_fill(NULL::text, ARRAY[n]);
    v_cap bigint;
    v_tid integer;
    v_start bigint;
    v_end bigint;
    v_lso bigint;
    v_exp boolean;
    v_torn_possible boolean := false;
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
    -- Phase 1: each partition's bounds, and the limit this read stops at.
    FOR i IN 1 .. n LOOP
        v_tid := NULL;
        SELECT pt.topic_id, pt.log_start_offset, pt.next_offset INTO v_tid, v_start, v_end
        FROM partitions pt JOIN topics t USING (topic_id)
        WHERE t.name = p_topics[i] AND pt.partition = p_partitions[i];
        IF v_tid IS NULL THEN
            v_errors[i] := 'unknown_topic_or_partition';
            CONTINUE;
        END IF;
        v_topic_ids[i] := v_tid;
        v_starts[i] := v_start;
        v_ends[i] := v_end;
        -- Last stable offset: the first offset of the oldest open transaction, else the end.
        SELECT least(coalesce(min(x.first_offset), v_ends[i]), v_ends[i]),
               coalesce(bool_or(tx.txn_started_at + make_interval(secs => tx.timeout_ms / 1000.0) < clock_timestamp()), false)
        INTO v_lso, v_exp
        FROM txn_partitions x JOIN transactions tx USING (transactional_id)
        WHERE x.topic_id = v_tid AND x.partition = p_partitions[i] AND x.first_offset IS NOT NULL
          AND tx.state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort');
        v_lsos[i] := v_lso;
        v_expired[i] := v_exp;
        IF p_offsets[i] IS NULL OR p_offsets[i] < v_starts[i] OR p_offsets[i] > v_ends[i] THEN
            v_errors[i] := 'offset_out_of_range';
            CONTINUE;
        END IF;
        v_limits[i] := CASE WHEN p_read_committed THEN v_lsos[i] ELSE v_ends[i] END;
        v_scan_ends[i] := v_limits[i];
        IF p_read_committed AND v_lsos[i] < v_ends[i] THEN
            -- An open transaction holds this partition back: a committed transaction read
            -- elsewhere may be above its last stable offset here. The check below looks only at
            -- the transactions of the records this read can return (up to the record cap).
            v_torn_possible := true;
        END IF;
        IF p_read_committed THEN
            v_cap := NULL;
            SELECT r."offset" + 1 INTO v_cap FROM records r
            WHERE r.topic_id = v_topic_ids[i] AND r.partition = p_partitions[i]
              AND r."offset" >= p_offsets[i] AND r."offset" < v_limits[i]
              AND r.control_type IS NULL AND NOT r.aborted
            ORDER BY r."offset" OFFSET p_max_records - 1 LIMIT 1;
            v_scan_ends[i] := coalesce(v_cap, v_limits[i]);
        END IF;
    END LOOP;
    -- A committed transaction is returned on all of the requested partitions or on none. Only
    -- possible to break when some limit falls short of its partition's end.
    IF p_read_committed AND v_torn_possible THEN
        SELECT array_agg(v_topic_ids[j] ORDER BY j), array_agg(p_partitions[j] ORDER BY j),
               array_agg(p_offsets[j] ORDER BY j), array_agg(v_limits[j] ORDER BY j),
               array_agg(v_scan_ends[j] ORDER BY j), array_agg(j ORDER BY j)
        INTO ok_ids, ok_parts, ok_starts, ok_limits, ok_scan_ends, ok_index
        FROM generate_series(1, n) AS j WHERE v_errors[j] IS NULL;
        cut := consistent_limits_v1(ok_ids, ok_parts, ok_starts, ok_limits, ok_scan_ends);
        FOR i IN 1 .. coalesce(cardinality(ok_index), 0) LOOP
            v_limits[ok_index[i]] := cut[i];
        END LOOP;
    END IF;
    -- Phase 2: a 'partition' row for each, then its records below the limit.
    FOR i IN 1 .. n LOOP
        RETURN QUERY SELECT 'partition', p_topics[i], p_partitions[i], p_offsets[i], NULL::bytea, NULL::bytea,
            NULL::jsonb, NULL::timestamptz, NULL::bigint, NULL::smallint, NULL::integer, v_starts[i], v_ends[i],
            v_lsos[i], v_limits[i], v_expired[i], v_errors[i];
        IF v_errors[i] IS NOT NULL THEN
            CONTINUE;
        END IF;
        -- Control records are never returned; read_committed also skips aborted records.
        RETURN QUERY
        SELECT 'record', p_topics[i], p_partitions[i], r."offset", r.key, r.value, r.headers, r."timestamp",
               r.producer_id, r.producer_epoch, r.sequence, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
               NULL::boolean, NULL::text
        FROM records r
        WHERE r.topic_id = v_topic_ids[i] AND r.partition = p_partitions[i]
          AND r."offset" >= p_offsets[i] AND r."offset" < v_limits[i] AND r.control_type IS NULL
          AND NOT (p_read_committed AND r.aborted)
        ORDER BY r."offset"
        LIMIT p_max_records;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION fetch_v2(text[], integer[], bigint[], integer, boolean) IS
  'Fetch many partitions in one snapshot: per partition a ''partition'' row (log start, high watermark, last '
  'stable offset, the limit this read stopped at, whether an expired transaction holds it, or an error) then up to '
  'p_max_records records. read_committed stops at the last stable offset, skips aborted records, and returns a '
  'committed transaction on all the requested partitions or on none. Control records never appear.';

DROP FUNCTION IF EXISTS fetch_v3(text[], integer[], bigint[], integer, boolean);

DROP FUNCTION IF EXISTS fetch_bounds_v1(text[], integer[], bigint[], integer, boolean);
