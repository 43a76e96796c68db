-- Compaction of topics with cleanup_policy 'compact' (or 'compact,delete'): Kafka's log cleaner
-- (core/src/main/scala/kafka/log/LogCleaner.scala) over the records table. Per partition the log
-- is a clean section [log start, clean_offset), where each key has at most one record, and a
-- dirty section above it. A pass takes a bounded chunk of the dirty section below the cleanable
-- end (the last stable offset, and min_compaction_lag_ms), keeps each key's latest record and
-- deletes what the chunk supersedes, in the chunk and in the clean section; then clean_offset
-- moves to the chunk's end. Offsets are never renumbered: readers step over the holes.

CREATE OR REPLACE FUNCTION record_bytes_v1(p_key bytea, p_value bytea, p_headers jsonb)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $fn$
    -- What a record counts towards partitions.log_bytes (and retention_bytes).
    SELECT coalesce(octet_length(p_key), 0)::bigint + coalesce(octet_length(p_value), 0)
           + coalesce(octet_length(p_headers::text), 0)
$fn$;
COMMENT ON FUNCTION record_bytes_v1(p_key bytea, p_value bytea, p_headers jsonb) IS
  'Internal: the bytes a record counts towards its partition''s log_bytes (key, value and headers).';

CREATE OR REPLACE FUNCTION ms_before_v1(p_now timestamp with time zone, p_ms bigint)
 RETURNS timestamp with time zone
 LANGUAGE sql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $fn$
    -- A topic setting may be any bigint of milliseconds (Kafka's Long.MAX_VALUE is "never"); an
    -- interval that long overflows, and anything before 1970 is before every record anyway.
    SELECT CASE WHEN p_ms >= extract(epoch FROM p_now) * 1000 THEN '-infinity'::timestamptz
                ELSE p_now - make_interval(secs => p_ms / 1000.0) END
$fn$;
COMMENT ON FUNCTION ms_before_v1(p_now timestamp with time zone, p_ms bigint) IS
  'Internal: p_ms milliseconds before p_now, or -infinity when that is before 1970 (no overflow for any bigint).';

CREATE OR REPLACE FUNCTION dirty_ratio_v1(p_log_bytes bigint, p_log_start bigint, p_clean_offset bigint, p_clean_bytes bigint)
 RETURNS double precision
 LANGUAGE sql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $fn$
    -- The share of a partition's live bytes above its clean section (Kafka's dirty ratio). A
    -- clean section entirely below the log start (retention took it) holds nothing.
    SELECT CASE WHEN p_log_bytes IS NULL OR p_log_bytes <= 0 THEN 0::float8
                ELSE greatest(0, least(1, (p_log_bytes - CASE WHEN p_clean_offset > p_log_start
                                                              THEN coalesce(p_clean_bytes, 0) ELSE 0 END)::float8
                                          / p_log_bytes)) END
$fn$;
COMMENT ON FUNCTION dirty_ratio_v1(p_log_bytes bigint, p_log_start bigint, p_clean_offset bigint, p_clean_bytes bigint) IS
  'Internal: a partition''s dirty ratio, from its live bytes and its clean section''s (cleaner_state).';

CREATE OR REPLACE FUNCTION cleanable_end_v1(p_topic_id integer, p_partition integer, p_from bigint, p_next_offset bigint, p_min_lag_ms bigint, p_now timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- Nothing at or past the last stable offset is cleaned (Kafka's rule: an undecided
    -- transaction's records, and what follows them, are left alone), nor a record younger than
    -- min_compaction_lag_ms, nor anything after it. (plpgsql, not sql: a revision creates its
    -- functions in name order, and a sql body is checked at once, before ms_before_v1 exists.) Read without the partition's lock: the last
    -- stable offset only moves up, so a stale one cleans less, never more.
    RETURN least(
        (SELECT least(min(x.first_offset), p_next_offset)
         FROM txn_partitions x JOIN transactions tx USING (transactional_id)
         WHERE x.topic_id = p_topic_id AND x.partition = p_partition AND x.first_offset IS NOT NULL
           AND tx.state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort')),
        CASE WHEN p_min_lag_ms > 0 THEN (
            SELECT r."offset" FROM records r
            WHERE r.topic_id = p_topic_id AND r.partition = p_partition AND r."offset" >= p_from
              AND r."timestamp" > ms_before_v1(p_now, p_min_lag_ms)
            ORDER BY r."offset" LIMIT 1) END);
END
$fn$;
COMMENT ON FUNCTION cleanable_end_v1(p_topic_id integer, p_partition integer, p_from bigint, p_next_offset bigint, p_min_lag_ms bigint, p_now timestamp with time zone) IS
  'Internal: where compaction of a partition must stop: its last stable offset, or the first record from p_from younger than min_compaction_lag_ms if that comes first.';

CREATE OR REPLACE FUNCTION compact_v1(p_topic text DEFAULT NULL, p_batch integer DEFAULT 50000, p_force boolean DEFAULT false)
 RETURNS TABLE(topic text, partition integer, examined bigint, removed bigint, removed_bytes bigint, dirty_ratio double precision, dirty_offsets bigint, more boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
#variable_conflict use_column
DECLARE
    v_now timestamptz := server_now_v1();
    c record;
    v_pt record;
    v_st record;
    v_end bigint;
    v_from bigint;
    v_to bigint;
    v_horizon bigint;
    v_hz_from bigint;
    v_hz_to bigint;
    v_first_dirty timestamptz;
    v_examined bigint := 0;
    v_removed bigint := 0;
    v_bytes bigint := 0;
    v_bytes_clean bigint := 0;
    v_chunk_bytes bigint := 0;
    v_n bigint;
    v_b bigint;
    v_keep integer;
    v_txns jsonb;  -- [[producer id, transaction number], ...] whose records this pass removed
    v_hz_txns jsonb;
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
        SELECT t.topic_id, t.name, p.partition, p.next_offset, t.min_compaction_lag_ms, t.max_compaction_lag_ms,
               t.delete_retention_ms, t.min_cleanable_dirty_ratio,
               greatest(p.log_start_offset, coalesce(s.clean_offset, 0)) AS clean_from,
               greatest(p.log_start_offset, coalesce(s.horizon_offset, 0)) AS horizon_from,
               dirty_ratio_v1(p.log_bytes, p.log_start_offset, s.clean_offset, s.clean_bytes) AS ratio,
               (SELECT max(k.o) FROM unnest(s.checkpoint_offsets, s.checkpoint_times) AS k(o, at)
                WHERE k.at <= ms_before_v1(v_now, t.delete_retention_ms)) AS horizon
        FROM topics t JOIN partitions p USING (topic_id)
        LEFT JOIN cleaner_state s ON s.topic_id = p.topic_id AND s.partition = p.partition
        WHERE t.cleanup_policy <> 'delete' AND (p_topic IS NULL OR t.name = p_topic)
        ORDER BY ratio DESC, t.topic_id, p.partition
    LOOP
        v_end := cleanable_end_v1(c.topic_id, c.partition, c.clean_from, c.next_offset, c.min_compaction_lag_ms, v_now);
        IF NOT p_force AND v_end > c.clean_from AND c.ratio < c.min_cleanable_dirty_ratio THEN
            -- Below the dirty ratio, only max_compaction_lag_ms forces a pass: the oldest dirty
            -- record has waited that long.
            v_first_dirty := NULL;
            IF c.max_compaction_lag_ms IS NOT NULL THEN
                SELECT r."timestamp" INTO v_first_dirty FROM records r
                WHERE r.topic_id = c.topic_id AND r.partition = c.partition AND r."offset" >= c.clean_from
                ORDER BY r."offset" LIMIT 1;
            END IF;
            IF v_first_dirty IS NULL
               OR v_first_dirty > ms_before_v1(v_now, c.max_compaction_lag_ms) THEN
                v_end := c.clean_from;
            END IF;
        END IF;
        CONTINUE WHEN v_end <= c.clean_from AND coalesce(c.horizon, 0) <= c.horizon_from;

        -- Lock order: the partition row before its records, as appends (produce_v2), aborts
        -- (complete_txn_v1), DeleteRecords and retention take them. The row lock is what makes the
        -- byte count right: no log start moves while this pass deletes and counts. Appends to the
        -- partition wait for the rest of this call (one bounded chunk), never longer.
        SELECT p.log_start_offset, p.next_offset INTO v_pt FROM partitions p
        WHERE p.topic_id = c.topic_id AND p.partition = c.partition
        FOR NO KEY UPDATE;
        CONTINUE WHEN NOT FOUND;
        INSERT INTO cleaner_state AS s (topic_id, partition) VALUES (c.topic_id, c.partition)
        ON CONFLICT (topic_id, partition) DO NOTHING;
        -- Read again under the lock: another cleaner may have moved on since the choice above.
        SELECT * INTO v_st FROM cleaner_state s WHERE s.topic_id = c.topic_id AND s.partition = c.partition;
        v_from := greatest(v_pt.log_start_offset, v_st.clean_offset);
        v_to := least(v_end, v_from + p_batch);

        IF v_to > v_from THEN
            WITH chunk AS MATERIALIZED (
                SELECT r."offset", r.key, r.control_type, r.aborted, record_bytes_v1(r.key, r.value, r.headers) AS bytes
                FROM records r
                WHERE r.topic_id = c.topic_id AND r.partition = c.partition
                  AND r."offset" >= v_from AND r."offset" < v_to
            ), latest AS MATERIALIZED (
                -- Each key's last committed record in the chunk (a tombstone counts: it supersedes).
                SELECT DISTINCT ON (k.key) k.key, k."offset" FROM chunk k
                WHERE k.control_type IS NULL AND NOT k.aborted AND k.key IS NOT NULL
                ORDER BY k.key, k."offset" DESC
            ), doomed AS (
                -- In the chunk: aborted records (Kafka removes them at once, whatever their key),
                -- records without a key (written before the topic was compacted; Kafka's cleaner
                -- drops them too) and records a later one of their key supersedes.
                SELECT k."offset" FROM chunk k
                WHERE k.control_type IS NULL
                  AND (k.aborted OR k.key IS NULL
                       OR EXISTS (SELECT 1 FROM latest l WHERE l.key = k.key AND l."offset" > k."offset"))
                UNION ALL
                -- In the clean section: each chunk key's older record. The clean section holds at
                -- most one record per key, so this removes at most one per key of the chunk.
                SELECT r."offset" FROM records r JOIN latest l ON l.key = r.key
                WHERE r.topic_id = c.topic_id AND r.partition = c.partition
                  AND r."offset" >= v_pt.log_start_offset AND r."offset" < v_from AND r.control_type IS NULL
            ), gone AS (
                DELETE FROM records r USING doomed d
                WHERE r.topic_id = c.topic_id AND r.partition = c.partition AND r."offset" = d."offset"
                RETURNING r."offset", record_bytes_v1(r.key, r.value, r.headers) AS bytes, r.producer_id,
                          r.txn_number
            )
            SELECT (SELECT count(*) FROM chunk), count(*), coalesce(sum(g.bytes), 0),
                   coalesce(sum(g.bytes) FILTER (WHERE g."offset" < v_from), 0),
                   (SELECT coalesce(sum(k.bytes), 0) FROM chunk k),
                   (SELECT jsonb_agg(DISTINCT jsonb_build_array(x.producer_id, x.txn_number)) FROM gone x
                    WHERE x.txn_number IS NOT NULL)
            INTO v_examined, v_removed, v_bytes, v_bytes_clean, v_chunk_bytes, v_txns
            FROM gone g;
        ELSE
            v_to := v_from;
        END IF;

        -- Tombstones and transaction markers go once they have been in the clean section for
        -- delete_retention_ms (Kafka's delete horizon: a reader from the start has that long to
        -- see a deletion). The horizon is the end of the last pass that long ago. A tombstone
        -- there is its key's last record (the pass that cleaned it removed the older ones), so
        -- removing it leaves nothing of the key. An abort marker has no records left (they were
        -- aborted, and removed by the same passes); a commit marker goes once its transaction
        -- has no record left in this partition (its span, written by EndTxn, bounds the search).
        v_hz_from := greatest(v_pt.log_start_offset, v_st.horizon_offset);
        v_hz_to := least(coalesce(c.horizon, 0), v_st.clean_offset, v_hz_from + p_batch);
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
                            AND d."offset" >= s.first_offset AND d."offset" <= s.last_offset
                           WHERE s.producer_id = r.producer_id AND s.txn_number = r.txn_number
                             AND s.topic_id = r.topic_id AND s.partition = r.partition
                             AND d.producer_id = r.producer_id AND d.txn_number = r.txn_number
                             AND d.control_type IS NULL)))
                RETURNING record_bytes_v1(r.key, r.value, r.headers) AS bytes, r.producer_id, r.txn_number,
                          r.control_type
            )
            SELECT count(*), coalesce(sum(g.bytes), 0),
                   (SELECT jsonb_agg(DISTINCT jsonb_build_array(x.producer_id, x.txn_number)) FROM gone x
                    WHERE x.txn_number IS NOT NULL AND x.control_type IS NULL)
            INTO v_n, v_b, v_hz_txns FROM gone g;
            v_removed := v_removed + v_n;
            v_bytes := v_bytes + v_b;
            v_bytes_clean := v_bytes_clean + v_b;
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
                          AND m."offset" < v_hz_to AND m.control_type = 'commit'
                          AND m.producer_id = x.producer_id AND m.txn_number = x.txn_number
                        ORDER BY m."offset" LIMIT 1) AS o
                FROM (SELECT (e ->> 0)::bigint AS producer_id, (e ->> 1)::bigint AS txn_number
                      FROM jsonb_array_elements(v_txns) AS e) x
                JOIN txn_spans s ON s.producer_id = x.producer_id AND s.txn_number = x.txn_number
                                AND s.topic_id = c.topic_id AND s.partition = c.partition
                WHERE s.last_offset < v_hz_to
                  AND NOT EXISTS (
                      SELECT 1 FROM records d
                      WHERE d.topic_id = c.topic_id AND d.partition = c.partition
                        AND d."offset" >= s.first_offset AND d."offset" <= s.last_offset
                        AND d.producer_id = x.producer_id AND d.txn_number = x.txn_number AND d.control_type IS NULL)
            )
            DELETE FROM records r USING marks k
            WHERE r.topic_id = c.topic_id AND r.partition = c.partition AND r."offset" = k.o;
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_removed := v_removed + v_n;
        END IF;

        UPDATE partitions p SET log_bytes = greatest(p.log_bytes - v_bytes, 0)
        WHERE p.topic_id = c.topic_id AND p.partition = c.partition AND v_bytes > 0;
        -- The pass's end and time join the checkpoints; only the newest one older than the delete
        -- retention (the horizon) and those after it are kept.
        SELECT count(*) INTO v_keep FROM unnest(v_st.checkpoint_times) AS k(at)
        WHERE k.at > ms_before_v1(v_now, c.delete_retention_ms);
        v_keep := least(v_keep + 1, cardinality(v_st.checkpoint_times));
        UPDATE cleaner_state s SET
            clean_offset = greatest(s.clean_offset, v_to),
            clean_bytes = greatest(CASE WHEN s.clean_offset > v_pt.log_start_offset THEN s.clean_bytes ELSE 0 END
                                   + v_chunk_bytes - v_bytes, 0),
            horizon_offset = greatest(s.horizon_offset, v_hz_to),
            checkpoint_offsets = CASE WHEN v_to > v_from
                                      THEN s.checkpoint_offsets[cardinality(s.checkpoint_offsets) - v_keep + 1:] || v_to
                                      ELSE s.checkpoint_offsets END,
            checkpoint_times = CASE WHEN v_to > v_from
                                    THEN s.checkpoint_times[cardinality(s.checkpoint_times) - v_keep + 1:] || v_now
                                    ELSE s.checkpoint_times END,
            examined_records = s.examined_records + v_examined,
            removed_records = s.removed_records + v_removed,
            removed_bytes = s.removed_bytes + v_bytes,
            cleaned_at = v_now
        WHERE s.topic_id = c.topic_id AND s.partition = c.partition;
        RETURN QUERY SELECT c.name, c.partition, v_examined, v_removed, v_bytes, c.ratio,
                            greatest(v_end - v_to, 0), v_end > v_to OR coalesce(c.horizon, 0) > v_hz_to;
        -- One partition and one chunk per call: the caller commits between calls, so the partition
        -- lock is held for one bounded chunk and never with another partition's.
        RETURN;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION compact_v1(p_topic text, p_batch integer, p_force boolean) IS
  'Maintenance: one bounded pass of compaction (up to p_batch offsets of one partition''s dirty section, and of its tombstones and markers past the delete horizon) on the dirtiest partition of a compacted topic (of p_topic if given) that needs it: below min_cleanable_dirty_ratio only after max_compaction_lag_ms, or always with p_force. Keeps each key''s latest record; removes superseded, aborted and keyless records, and tombstones and markers delete_retention_ms after they were cleaned. Never touches records at or past the last stable offset or younger than min_compaction_lag_ms. Returns one row (the partition, records examined and removed, bytes removed, its dirty ratio before, dirty offsets left below the cleanable end, whether more is to do there now) or none when nothing needs doing; call again, one transaction each, until none.';

CREATE OR REPLACE FUNCTION compaction_status_v1(p_topic text)
 RETURNS TABLE(partition integer, cleanup_policy text, log_start_offset bigint, clean_offset bigint, high_watermark bigint, log_bytes bigint, dirty_ratio double precision, examined_records bigint, removed_records bigint, removed_bytes bigint, cleaned_at timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
#variable_conflict use_column
DECLARE
    v_topic_id integer;
BEGIN
    SELECT t.topic_id INTO v_topic_id FROM topics t WHERE t.name = p_topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_topic);
    END IF;
    PERFORM acl_require_v1('topic', ARRAY[p_topic], 'describe');
    RETURN QUERY
    SELECT p.partition, t.cleanup_policy, p.log_start_offset,
           greatest(p.log_start_offset, coalesce(s.clean_offset, 0)), p.next_offset, p.log_bytes,
           dirty_ratio_v1(p.log_bytes, p.log_start_offset, s.clean_offset, s.clean_bytes),
           coalesce(s.examined_records, 0), coalesce(s.removed_records, 0), coalesce(s.removed_bytes, 0), s.cleaned_at
    FROM topics t JOIN partitions p USING (topic_id)
    LEFT JOIN cleaner_state s ON s.topic_id = p.topic_id AND s.partition = p.partition
    WHERE t.topic_id = v_topic_id
    ORDER BY p.partition;
END
$fn$;
COMMENT ON FUNCTION compaction_status_v1(p_topic text) IS
  'Per partition of a topic: its cleanup policy, log start, the end of its clean section, high watermark, live bytes, dirty ratio (the share of live bytes not yet cleaned) and what compaction has examined and removed so far. Needs DESCRIBE on the topic; OL101 for an unknown topic.';
