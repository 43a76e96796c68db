-- Compaction of topics with cleanup_policy 'compact' (or 'compact,delete'): Kafka's log cleaner
-- (core/src/main/scala/kafka/log/LogCleaner.scala) over the records table. Per partition the log
-- is a clean section [log start, clean_offset), where each key has at most one record, and a
-- dirty section above it. A pass takes a bounded chunk of the dirty section below the cleanable
-- end (the last stable offset, and min_compaction_lag_ms), keeps each key's latest record and
-- deletes what the chunk supersedes, in the chunk and in the clean section; then clean_offset
-- moves to the chunk's end. Offsets are never renumbered: readers step over the holes.

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

CREATE OR REPLACE FUNCTION dirty_ratio_v2(p_log_bytes bigint, p_log_start bigint, p_clean_start bigint, p_clean_offset bigint, p_clean_bytes bigint)
 RETURNS double precision
 LANGUAGE sql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $fn$
    -- The share of a partition's live bytes above its clean section (Kafka's dirty ratio).
    -- clean_bytes were counted from p_clean_start; once retention or DeleteRecords has moved the
    -- log start into the clean section, the part still live is estimated by its share of the
    -- section's offsets (revision 0034: kept whole, the stale count read as a clean log, and a
    -- compact,delete topic was never compacted again). A clean section wholly below the log
    -- start holds nothing.
    SELECT CASE WHEN p_log_bytes IS NULL OR p_log_bytes <= 0 THEN 0::float8
                ELSE greatest(0, least(1, (p_log_bytes - CASE
                    WHEN p_clean_offset IS NULL OR p_clean_offset <= p_log_start THEN 0
                    WHEN p_log_start <= p_clean_start THEN coalesce(p_clean_bytes, 0)
                    ELSE coalesce(p_clean_bytes, 0) * (p_clean_offset - p_log_start)::float8
                         / greatest(p_clean_offset - p_clean_start, 1) END)::float8 / p_log_bytes)) END
$fn$;
COMMENT ON FUNCTION dirty_ratio_v2(p_log_bytes bigint, p_log_start bigint, p_clean_start bigint, p_clean_offset bigint, p_clean_bytes bigint) IS
  'Internal: a partition''s dirty ratio, from its live bytes and its clean section''s (cleaner_state), the latter scaled down by the share of the section the log start has passed since they were counted.';

CREATE OR REPLACE FUNCTION cleanable_end_v2(p_topic_id integer, p_partition integer, p_from bigint, p_to bigint, p_next_offset bigint, p_min_lag_ms bigint, p_now timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- Where a pass over [p_from, p_to) must stop. Nothing at or past the last stable offset is
    -- cleaned (Kafka's rule: an undecided transaction's records, and what follows them, are left
    -- alone), nor a record younger than min_compaction_lag_ms, nor anything after it. Read without
    -- the partition's lock: the last stable offset only moves up, so a stale one cleans less. The
    -- probe for a young record looks only as far as the pass would go (revision 0034: it read the
    -- whole dirty section). (plpgsql, not sql: a revision creates its functions in name order, and
    -- a sql body is checked at once, before ms_before_v1 exists.)
    RETURN least(
        p_to,
        (SELECT least(min(x.first_offset), p_next_offset)
         FROM txn_partitions x JOIN transactions tx USING (transactional_id)
         WHERE x.topic_id = p_topic_id AND x.partition = p_partition AND x.first_offset IS NOT NULL
           AND tx.state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort')),
        CASE WHEN p_min_lag_ms > 0 THEN (
            SELECT r."offset" FROM records r
            WHERE r.topic_id = p_topic_id AND r.partition = p_partition AND r."offset" >= p_from
              AND r."offset" < p_to AND r."timestamp" > ms_before_v1(p_now, p_min_lag_ms)
            ORDER BY r."offset" LIMIT 1) END);
END
$fn$;
COMMENT ON FUNCTION cleanable_end_v2(p_topic_id integer, p_partition integer, p_from bigint, p_to bigint, p_next_offset bigint, p_min_lag_ms bigint, p_now timestamp with time zone) IS
  'Internal: where a compaction pass over [p_from, p_to) of a partition must stop: p_to, its last stable offset, or the first record from p_from younger than min_compaction_lag_ms, whichever comes first.';

CREATE OR REPLACE FUNCTION compact_v2(p_topic text DEFAULT NULL, p_batch integer DEFAULT 50000, p_force boolean DEFAULT false)
 RETURNS TABLE(topic text, partition integer, examined bigint, removed bigint, removed_bytes bigint, dirty_ratio double precision, clean_offset bigint, dirty_offsets bigint, more boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
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
               coalesce(s.clean_offset, 0) AS state_clean_offset, coalesce(s.horizon_offset, 0) AS state_horizon_offset,
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

        -- Phase 1, without the partition's lock: every row this pass deletes, and the clean
        -- section's live bytes after it. The rows read lie below the last stable offset: decided,
        -- never changed again, only ever deleted (by retention below the log start, or by a pass,
        -- which the state check below catches), so the plan holds until phase 2 carries it out.
        -- One scan of the clean section and the chunk (there is no index on keys: every append
        -- would pay for one), and it is made before the lock, so appends never wait on it
        -- (revisions 0034, 0037).
        v_from := c.clean_from;
        v_to := greatest(v_end, v_from);
        v_clean_start := c.log_start_offset;
        v_examined := 0;
        v_removed := 0;
        v_bytes := 0;
        -- The delete horizon's window: tombstones and markers the end of a pass delete_retention_ms
        -- ago passed (Kafka's delete horizon: a reader from the start has had that long to see a
        -- deletion). At most p_batch offsets of it per pass.
        v_hz_from := c.horizon_from;
        v_hz_to := greatest(least(coalesce(c.horizon, 0), c.clean_from, v_hz_from + p_batch), v_hz_from);
        -- Per row, by two windows: by key, whether a later committed record of its key follows it
        -- (a tombstone counts: it supersedes); by transaction, whether any of its data records
        -- survives this pass, and whether this pass removes one. What goes:
        -- * in the chunk, aborted records (Kafka removes them at once, whatever their key) and
        --   records without a key (written before the topic was compacted; Kafka's cleaner drops
        --   them too); anywhere, a record a later one of its key supersedes (the clean section holds
        --   at most one per key, so its later record is in the chunk);
        -- * in the horizon's window, tombstones (the pass that cleaned one removed its key's older
        --   records, so nothing of the key is left) and abort markers (their records were aborted,
        --   and removed by the same passes);
        -- * a commit marker once no record of its transaction is left in the log: in the horizon's
        --   window, or below it when this pass removes the transaction's last record. Its records
        --   all lie below it, so within this scan; no search along its span (revision 0037: that
        --   walk, under the lock, had no bound).
        -- (Windows, not joins: estimated from parameters, a join of the chunk with the section was
        -- planned as a nested loop over every pair. The bytes are written out: a function with its
        -- own search_path is never inlined, and its call per row cost most of the pass.)
        WITH w AS MATERIALIZED (
            SELECT r."offset", r.key, r.control_type, r.aborted, r.producer_id, r.txn_number,
                   r.control_type IS NULL AND r.value IS NULL AS tombstone, r."offset" >= v_from AS in_chunk,
                   coalesce(octet_length(r.key), 0)::bigint + coalesce(octet_length(r.value), 0)
                   + coalesce(octet_length(r.headers::text), 0) AS bytes,
                   max(r."offset") FILTER (WHERE r.control_type IS NULL AND NOT r.aborted AND r.key IS NOT NULL)
                       OVER (PARTITION BY r.key) AS last_of_key
            FROM records r
            WHERE r.topic_id = c.topic_id AND r.partition = c.partition
              AND r."offset" >= c.log_start_offset AND r."offset" < v_to
        ), d AS MATERIALIZED (
            SELECT w.*, w.control_type IS NULL AND (
                       (w.in_chunk AND (w.aborted OR w.key IS NULL))
                       OR coalesce(w."offset" < w.last_of_key, false)
                       OR (w.tombstone AND w."offset" >= v_hz_from AND w."offset" < v_hz_to)) AS gone
            FROM w
        ), t AS (
            SELECT d.*,
                   bool_or(d.control_type IS NULL AND NOT d.gone) OVER txn AS survives,
                   bool_or(d.gone) OVER txn AS hit
            FROM d
            WINDOW txn AS (PARTITION BY d.producer_id, d.txn_number)
        ), x AS (
            SELECT t."offset", t.bytes, t.in_chunk AND t.control_type IS NULL AS examined,
                   t.gone
                   OR (t.control_type = 'abort' AND t."offset" >= v_hz_from AND t."offset" < v_hz_to)
                   OR (t.control_type = 'commit' AND NOT coalesce(t.survives, false)
                       AND ((t."offset" >= v_hz_from AND t."offset" < v_hz_to)
                            OR (t."offset" < v_hz_from AND coalesce(t.hit, false)))) AS doomed
            FROM t
        )
        SELECT count(*) FILTER (WHERE x.examined),
               coalesce(array_agg(x."offset" ORDER BY x."offset") FILTER (WHERE x.doomed), '{}'),
               coalesce(array_agg(x.bytes ORDER BY x."offset") FILTER (WHERE x.doomed), '{}'),
               coalesce(sum(x.bytes) FILTER (WHERE NOT x.doomed), 0)
        INTO v_examined, v_doomed, v_doomed_bytes, v_live
        FROM x;

        -- Phase 2. Lock order: the partition row before its records, as appends (produce_v2),
        -- aborts (txn_complete_v1), DeleteRecords and retention take them. Under it no log start
        -- moves while this pass deletes and counts, so the byte count is exact; the pass deletes
        -- only the planned rows, by primary key, so appends to the partition wait that long.
        SELECT p.log_start_offset INTO v_pt FROM partitions p
        WHERE p.topic_id = c.topic_id AND p.partition = c.partition
        FOR NO KEY UPDATE;
        CONTINUE WHEN NOT FOUND;
        INSERT INTO cleaner_state AS s (topic_id, partition) VALUES (c.topic_id, c.partition)
        ON CONFLICT (topic_id, partition) DO NOTHING;
        SELECT * INTO v_st FROM cleaner_state s WHERE s.topic_id = c.topic_id AND s.partition = c.partition;
        IF v_st.clean_offset IS DISTINCT FROM c.state_clean_offset
           OR v_st.horizon_offset IS DISTINCT FROM c.state_horizon_offset THEN
            -- Another pass ran since the plan: it is stale. Stand down; the next call plans from
            -- the new state. (A log start moved meanwhile does not make it stale: the deletions
            -- and their bytes count only from the log start held now. Revision 0037: it did.)
            RETURN QUERY SELECT c.name, c.partition, 0::bigint, 0::bigint, 0::bigint, c.ratio,
                                greatest(v_pt.log_start_offset, v_st.clean_offset),
                                greatest(c.next_offset - greatest(v_pt.log_start_offset, v_st.clean_offset), 0), true;
            RETURN;
        END IF;

        IF cardinality(v_doomed) > 0 THEN
            -- A join with the planned offsets, within their range: with a table's statistics from
            -- when it was small, "= ANY (array)" was planned as a scan of the whole partition
            -- that searched the array once per row.
            DELETE FROM records r USING unnest(v_doomed) AS d(o)
            WHERE r.topic_id = c.topic_id AND r.partition = c.partition AND r."offset" = d.o
              AND r."offset" >= greatest(v_pt.log_start_offset, v_doomed[1])
              AND r."offset" <= v_doomed[cardinality(v_doomed)];
            GET DIAGNOSTICS v_removed = ROW_COUNT;
            -- Every planned row from the log start on was deleted by this statement: no other
            -- pass ran since the plan (checked above), and retention deletes only below the log
            -- start. So their bytes, counted in the plan, are the bytes that left the log.
            SELECT coalesce(sum(d.b), 0) INTO v_bytes FROM unnest(v_doomed, v_doomed_bytes) AS d(o, b)
            WHERE d.o >= v_pt.log_start_offset;
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
            clean_start = v_clean_start,
            clean_bytes = greatest(v_live, 0),
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
$fn$;
COMMENT ON FUNCTION compact_v2(p_topic text, p_batch integer, p_force boolean) IS
  'Maintenance: one bounded pass of compaction (up to p_batch offsets of one partition''s dirty section, and of its tombstones and markers past the delete horizon) on the dirtiest partition of a compacted topic (of p_topic if given) that needs it: below min_cleanable_dirty_ratio only after max_compaction_lag_ms, or always with p_force. Keeps each key''s latest record; removes superseded, aborted and keyless records, and tombstones and markers delete_retention_ms after they were cleaned. Never touches records at or past the last stable offset or younger than min_compaction_lag_ms. Returns one row (the partition, records examined and removed, bytes removed, its dirty ratio before, the end of its clean section after, offsets above it, whether a pass there now would find more) or none when nothing needs doing; call again, one transaction each, until none.';

CREATE OR REPLACE FUNCTION compaction_status_v1(p_topic text)
 RETURNS TABLE(partition integer, cleanup_policy text, log_start_offset bigint, clean_offset bigint, high_watermark bigint, log_bytes bigint, dirty_ratio double precision, examined_records bigint, removed_records bigint, removed_bytes bigint, cleaned_at timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION compaction_status_v1(p_topic text) IS
  'The compaction_status view''s rows for one topic (none when it is not compacted): per partition its cleanup policy, log start, the end of its clean section, high watermark, live bytes, dirty ratio (the share of live bytes not yet cleaned) and what compaction has examined and removed so far. Needs DESCRIBE on the topic; OL101 for an unknown topic.';
