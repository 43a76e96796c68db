CREATE OR REPLACE FUNCTION compact_v2(p_topic text DEFAULT NULL::text, p_batch integer DEFAULT 50000, p_force boolean DEFAULT false)
 RETURNS TABLE(topic text, partition integer, examined bigint, removed bigint, removed_bytes bigint, dirty_ratio double precision, clean_offset bigint, dirty_offsets bigint, more boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
#variable_conflict use_column
DECLARE
    v_now timestamptz := server_now_v1();
    v_force boolean := coalesce(p_force, false);
    c record;
    v_pt record;
    v_st record;
    v_dirty boolean;
    v_first_dirty timestamptz;
    v_end bigint;
    v_from bigint;
    v_to bigint;
    v_hz_from bigint;
    v_hz_to bigint;
    v_doomed bigint[];
    v_doomed_bytes bigint[];
    v_examined bigint := 0;
    v_removed bigint := 0;
    v_bytes bigint := 0;
    v_live bigint;
    v_clean_start bigint;
    v_n bigint;
    v_b bigint;
    v_txns jsonb;  -- [[producer id, transaction number], ...] whose records this pass removed
    v_hz_txns jsonb;
    v_cp_offsets bigint[];
    v_cp_times timestamptz[];
BEGIN
    IF p_batch IS NULL OR p_batch < 1 OR p_batch > 10000000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'batch must be 1 to 10000000 offsets';
    END IF;
    IF p_topic IS NOT NULL THEN
        PERFORM 1 FROM topics t WHERE t.name = p_topic;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_topic);
        END IF;
        PERFORM 1 FROM topics t WHERE t.name = p_topic AND t.cleanup_policy <> 'delete';
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'OL001',
                MESSAGE = format('topic %L is not compacted (cleanup_policy is delete): set cleanup_policy to compact first',
                                 p_topic);
        END IF;
    END IF;
    -- The dirtiest partition first, as Kafka's cleaner picks the dirtiest log. The dirty ratio is
    -- the share of the partition's live bytes above its clean section.
    FOR c IN
        SELECT t.topic_id, t.name, p.partition, p.log_start_offset, p.next_offset, t.min_compaction_lag_ms,
               t.max_compaction_lag_ms, t.delete_retention_ms, t.min_cleanable_dirty_ratio,
               greatest(p.log_start_offset, coalesce(s.clean_offset, 0)) AS clean_from,
               greatest(p.log_start_offset, coalesce(s.horizon_offset, 0)) AS horizon_from,
               dirty_ratio_v2(p.log_bytes, p.log_start_offset, s.clean_start, s.clean_offset, s.clean_bytes) AS ratio,
               (SELECT max(k.o) FROM unnest(s.checkpoint_offsets, s.checkpoint_times) AS k(o, at)
                WHERE k.at <= ms_before_v1(v_now, t.delete_retention_ms)) AS horizon
        FROM topics t JOIN partitions p USING (topic_id)
        LEFT JOIN cleaner_state s ON s.topic_id = p.topic_id AND s.partition = p.partition
        WHERE t.cleanup_policy <> 'delete' AND (p_topic IS NULL OR t.name = p_topic)
        ORDER BY ratio DESC, t.topic_id, p.partition
    LOOP
        -- The cheap tests first: is there a dirty section, and (unforced) is it dirty enough, or
        -- has its oldest record waited max_compaction_lag_ms?
        v_dirty := c.clean_from < c.next_offset;
        IF v_dirty AND NOT v_force AND c.ratio < c.min_cleanable_dirty_ratio THEN
            v_first_dirty := NULL;
            IF c.max_compaction_lag_ms IS NOT NULL THEN
                SELECT r."timestamp" INTO v_first_dirty FROM records r
                WHERE r.topic_id = c.topic_id AND r.partition = c.partition AND r."offset" >= c.clean_from
                ORDER BY r."offset" LIMIT 1;
            END IF;
            v_dirty := v_first_dirty IS NOT NULL AND v_first_dirty <= ms_before_v1(v_now, c.max_compaction_lag_ms);
        END IF;
        v_end := c.clean_from;
        IF v_dirty THEN
            v_end := cleanable_end_v2(c.topic_id, c.partition, c.clean_from, c.clean_from + p_batch, c.next_offset,
                                      c.min_compaction_lag_ms, v_now);
        END IF;
        CONTINUE WHEN v_end <= c.clean_from AND coalesce(c.horizon, 0) <= c.horizon_from;

        -- Phase 1, without the partition's lock: what this pass deletes, and the clean section's
        -- live bytes after it. The records read lie below the last stable offset: decided, never
        -- changed again, only ever deleted (by retention below the log start, or by a pass,
        -- which the state check below catches), so the plan holds until phase 2 carries it out.
        -- The clean section is read here, once per pass (there is no index on keys: every append
        -- would pay for one), so appends never wait on that scan (revision 0034).
        v_from := c.clean_from;
        v_to := greatest(v_end, v_from);
        v_clean_start := c.log_start_offset;
        v_doomed := '{}';
        v_doomed_bytes := '{}';
        v_live := NULL;
        IF v_to > v_from THEN
            -- One window over the clean section and the chunk, by key: a record goes when a later
            -- committed record of its key follows it (in the chunk; the clean section holds at
            -- most one per key), and a chunk record also when it is aborted (Kafka removes those
            -- at once, whatever their key) or has no key (written before the topic was compacted;
            -- Kafka's cleaner drops those too). A tombstone counts as a later record: it
            -- supersedes. (A window, not a join of the chunk's keys with the section: estimated
            -- from parameters, the join was planned as a nested loop over every pair.)
            SELECT count(*) FILTER (WHERE x.in_chunk),
                   coalesce(array_agg(x."offset" ORDER BY x."offset") FILTER (WHERE x.doomed), '{}'),
                   coalesce(array_agg(x.bytes ORDER BY x."offset") FILTER (WHERE x.doomed), '{}'),
                   coalesce(sum(x.bytes) FILTER (WHERE NOT x.doomed), 0)
            INTO v_examined, v_doomed, v_doomed_bytes, v_live
            FROM (SELECT w."offset", w.bytes, w.in_chunk,
                         (w.in_chunk AND (w.aborted OR w.key IS NULL)) OR coalesce(w."offset" < w.last_of_key, false)
                             AS doomed
                  FROM (SELECT r."offset", r.key, r.aborted, r."offset" >= v_from AS in_chunk,
                               -- record_bytes_v1, written out: a function with its own search_path
                               -- is never inlined, and its call per row was most of the pass.
                               coalesce(octet_length(r.key), 0)::bigint + coalesce(octet_length(r.value), 0)
                               + coalesce(octet_length(r.headers::text), 0) AS bytes,
                               max(r."offset") FILTER (WHERE NOT r.aborted AND r.key IS NOT NULL)
                                   OVER (PARTITION BY r.key) AS last_of_key
                        FROM records r
                        WHERE r.topic_id = c.topic_id AND r.partition = c.partition
                          AND r."offset" >= c.log_start_offset AND r."offset" < v_to AND r.control_type IS NULL) w) x;
        END IF;

        -- Phase 2. Lock order: the partition row before its records, as appends (produce_v2),
        -- aborts (txn_complete_v1), DeleteRecords and retention take them. Under it no log start
        -- moves while this pass deletes and counts, so the byte count is exact; the pass's
        -- deletions are bounded (the planned rows by primary key, and at most p_batch offsets of
        -- tombstones and markers), so appends to the partition wait that long at most.
        SELECT p.log_start_offset INTO v_pt FROM partitions p
        WHERE p.topic_id = c.topic_id AND p.partition = c.partition
        FOR NO KEY UPDATE;
        CONTINUE WHEN NOT FOUND;
        INSERT INTO cleaner_state AS s (topic_id, partition) VALUES (c.topic_id, c.partition)
        ON CONFLICT (topic_id, partition) DO NOTHING;
        SELECT * INTO v_st FROM cleaner_state s WHERE s.topic_id = c.topic_id AND s.partition = c.partition;
        IF greatest(v_pt.log_start_offset, v_st.clean_offset) <> v_from
           OR greatest(v_pt.log_start_offset, v_st.horizon_offset) <> c.horizon_from THEN
            -- Another pass, or retention, moved this partition on since the plan: it is stale.
            -- Stand down; the next call plans from the new state.
            RETURN QUERY SELECT c.name, c.partition, 0::bigint, 0::bigint, 0::bigint, c.ratio,
                                greatest(v_pt.log_start_offset, v_st.clean_offset),
                                greatest(c.next_offset - greatest(v_pt.log_start_offset, v_st.clean_offset), 0), true;
            RETURN;
        END IF;

        v_txns := NULL;
        IF cardinality(v_doomed) > 0 THEN
            -- A join with the planned offsets, within their range: with a table's statistics from
            -- when it was small, "= ANY (array)" was planned as a scan of the whole partition
            -- that searched the array once per row.
            WITH gone AS (
                DELETE FROM records r USING unnest(v_doomed) AS d(o)
                WHERE r.topic_id = c.topic_id AND r.partition = c.partition AND r."offset" = d.o
                  AND r."offset" >= greatest(v_pt.log_start_offset, v_doomed[1])
                  AND r."offset" <= v_doomed[cardinality(v_doomed)]
                RETURNING r.producer_id, r.txn_number
            )
            SELECT count(*),
                   jsonb_agg(DISTINCT jsonb_build_array(g.producer_id, g.txn_number)) FILTER (WHERE g.txn_number IS NOT NULL)
            INTO v_removed, v_txns FROM gone g;
            -- Every planned row from the log start on was deleted by this statement: no other
            -- pass ran since the plan (checked above), and retention deletes only below the log
            -- start. So their bytes, counted in the plan, are the bytes that left the log.
            SELECT coalesce(sum(d.b), 0) INTO v_bytes FROM unnest(v_doomed, v_doomed_bytes) AS d(o, b)
            WHERE d.o >= v_pt.log_start_offset;
        END IF;

        -- Tombstones and transaction markers go once they have been in the clean section for
        -- delete_retention_ms (Kafka's delete horizon: a reader from the start has that long to
        -- see a deletion). The horizon is the end of the last pass that long ago. A tombstone
        -- there is its key's last record (the pass that cleaned it removed the older ones), so
        -- removing it leaves nothing of the key. An abort marker has no records left (they were
        -- aborted, and removed by the same passes); a commit marker goes once its transaction
        -- has no record left in the log here (its span, written by EndTxn, bounds the search).
        v_hz_from := c.horizon_from;
        v_hz_to := least(coalesce(c.horizon, 0), v_st.clean_offset, v_hz_from + p_batch);
        v_hz_txns := NULL;
        IF v_hz_to > v_hz_from THEN
            WITH gone AS (
                DELETE FROM records r
                WHERE r.topic_id = c.topic_id AND r.partition = c.partition
                  AND r."offset" >= v_hz_from AND r."offset" < v_hz_to
                  AND ((r.control_type IS NULL AND r.value IS NULL)
                       OR r.control_type = 'abort'
                       OR (r.control_type = 'commit' AND NOT EXISTS (
                           SELECT 1 FROM txn_spans s JOIN records d
                             ON d.topic_id = s.topic_id AND d.partition = s.partition
                            AND d."offset" >= greatest(s.first_offset, v_pt.log_start_offset)
                            AND d."offset" <= s.last_offset
                           WHERE s.producer_id = r.producer_id AND s.txn_number = r.txn_number
                             AND s.topic_id = r.topic_id AND s.partition = r.partition
                             AND d.producer_id = r.producer_id AND d.txn_number = r.txn_number
                             AND d.control_type IS NULL)))
                RETURNING record_bytes_v1(r.key, r.value, r.headers) AS bytes, r.producer_id, r.txn_number,
                          r.control_type
            )
            SELECT count(*), coalesce(sum(g.bytes), 0),
                   jsonb_agg(DISTINCT jsonb_build_array(g.producer_id, g.txn_number))
                       FILTER (WHERE g.txn_number IS NOT NULL AND g.control_type IS NULL)
            INTO v_n, v_b, v_hz_txns FROM gone g;
            v_removed := v_removed + v_n;
            v_bytes := v_bytes + v_b;
            v_live := coalesce(v_live, v_st.clean_bytes) - v_b;
            v_clean_start := CASE WHEN v_to > v_from THEN v_clean_start ELSE v_st.clean_start END;
            v_txns := coalesce(v_txns, '[]') || coalesce(v_hz_txns, '[]');
        ELSE
            v_hz_to := v_hz_from;
        END IF;

        -- A commit marker the horizon has passed stayed because its transaction still had records
        -- here. When this pass removed the last of them, the marker goes now: the horizon does not
        -- come back for it. Found from the transaction's span, just after its last record.
        IF jsonb_array_length(coalesce(v_txns, '[]')) > 0 THEN
            WITH marks AS (
                SELECT (SELECT m."offset" FROM records m
                        WHERE m.topic_id = c.topic_id AND m.partition = c.partition AND m."offset" > s.last_offset
                          AND m."offset" < greatest(v_hz_to, v_st.horizon_offset) AND m.control_type = 'commit'
                          AND m.producer_id = x.producer_id AND m.txn_number = x.txn_number
                        ORDER BY m."offset" LIMIT 1) AS o
                FROM (SELECT (e ->> 0)::bigint AS producer_id, (e ->> 1)::bigint AS txn_number
                      FROM jsonb_array_elements(v_txns) AS e) x
                JOIN txn_spans s ON s.producer_id = x.producer_id AND s.txn_number = x.txn_number
                                AND s.topic_id = c.topic_id AND s.partition = c.partition
                WHERE NOT EXISTS (
                    SELECT 1 FROM records d
                    WHERE d.topic_id = c.topic_id AND d.partition = c.partition
                      AND d."offset" >= greatest(s.first_offset, v_pt.log_start_offset) AND d."offset" <= s.last_offset
                      AND d.producer_id = x.producer_id AND d.txn_number = x.txn_number AND d.control_type IS NULL)
            )
            DELETE FROM records r USING marks k
            WHERE r.topic_id = c.topic_id AND r.partition = c.partition AND r."offset" = k.o;
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_removed := v_removed + v_n;
        END IF;

        UPDATE partitions p SET log_bytes = greatest(p.log_bytes - v_bytes, 0)
        WHERE p.topic_id = c.topic_id AND p.partition = c.partition AND v_bytes > 0;
        -- The pass's end and time join the checkpoints. Kept: the newest one older than the
        -- delete retention (the horizon) and those after it; past 64, every other one is dropped
        -- (a horizon found among fewer checkpoints is never later than the true one: tombstones
        -- may then stay longer, never go sooner).
        v_cp_offsets := v_st.checkpoint_offsets;
        v_cp_times := v_st.checkpoint_times;
        IF v_to > v_from THEN
            SELECT coalesce(array_agg(k.o ORDER BY k.i), '{}'), coalesce(array_agg(k.at ORDER BY k.i), '{}')
            INTO v_cp_offsets, v_cp_times
            FROM unnest(v_cp_offsets || v_to, v_cp_times || v_now) WITH ORDINALITY AS k(o, at, i)
            WHERE k.i >= coalesce((SELECT max(j.i) FROM unnest(v_cp_times) WITH ORDINALITY AS j(at, i)
                                   WHERE j.at <= ms_before_v1(v_now, c.delete_retention_ms)), 1);
            IF cardinality(v_cp_offsets) > 64 THEN
                SELECT array_agg(k.o ORDER BY k.i), array_agg(k.at ORDER BY k.i) INTO v_cp_offsets, v_cp_times
                FROM unnest(v_cp_offsets, v_cp_times) WITH ORDINALITY AS k(o, at, i)
                WHERE k.i % 2 = 1 OR k.i = cardinality(v_cp_offsets);
            END IF;
        END IF;
        UPDATE cleaner_state s SET
            clean_offset = greatest(s.clean_offset, v_to),
            clean_start = CASE WHEN v_live IS NULL THEN s.clean_start ELSE v_clean_start END,
            clean_bytes = CASE WHEN v_live IS NULL THEN s.clean_bytes ELSE greatest(v_live, 0) END,
            horizon_offset = greatest(s.horizon_offset, v_hz_to),
            checkpoint_offsets = v_cp_offsets,
            checkpoint_times = v_cp_times,
            examined_records = s.examined_records + v_examined,
            removed_records = s.removed_records + v_removed,
            removed_bytes = s.removed_bytes + v_bytes,
            cleaned_at = v_now
        WHERE s.topic_id = c.topic_id AND s.partition = c.partition;
        RETURN QUERY SELECT c.name, c.partition, v_examined, v_removed, v_bytes, c.ratio,
                            greatest(v_st.clean_offset, v_to), greatest(c.next_offset - greatest(v_st.clean_offset, v_to), 0),
                            v_to >= v_from + p_batch OR coalesce(c.horizon, 0) > v_hz_to;
        -- One partition and one chunk per call: the caller commits between calls, so the partition
        -- lock is held for one bounded chunk and never with another partition's.
        RETURN;
    END LOOP;
END
$function$;

COMMENT ON FUNCTION compact_v2(text, integer, boolean) IS 'Maintenance: one bounded pass of compaction (up to p_batch offsets of one partition''s dirty section, and of its tombstones and markers past the delete horizon) on the dirtiest partition of a compacted topic (of p_topic if given) that needs it: below min_cleanable_dirty_ratio only after max_compaction_lag_ms, or always with p_force. Keeps each key''s latest record; removes superseded, aborted and keyless records, and tombstones and markers delete_retention_ms after they were cleaned. Never touches records at or past the last stable offset or younger than min_compaction_lag_ms. Returns one row (the partition, records examined and removed, bytes removed, its dirty ratio before, the end of its clean section after, offsets above it, whether a pass there now would find more) or none when nothing needs doing; call again, one transaction each, until none.';

REVOKE ALL ON FUNCTION compact_v2(text, integer, boolean) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION compact_v2(text, integer, boolean) TO @schema@_admin;
