-- Tables (by hand; the functions below are frozen from store/sql).
ALTER TABLE cleaner_state ADD COLUMN clean_start BIGINT DEFAULT 0 NOT NULL;

ALTER TABLE cleaner_state ADD CONSTRAINT ck_cleaner_state_clean_start_nonnegative CHECK (clean_start >= 0);

COMMENT ON COLUMN cleaner_state.clean_start IS 'The log start clean_bytes were counted from (migration 0034): past it, they are scaled down.';

-- Functions, triggers and grants, frozen from store/sql.
DROP VIEW IF EXISTS pending_group_offsets CASCADE;

DROP VIEW IF EXISTS group_offsets CASCADE;

DROP VIEW IF EXISTS group_status CASCADE;

DROP VIEW IF EXISTS transaction_status CASCADE;

DROP VIEW IF EXISTS committed_records CASCADE;

DROP VIEW IF EXISTS partition_offsets CASCADE;

DROP FUNCTION cleanable_end_v1(integer, integer, bigint, bigint, bigint, timestamp with time zone);

DROP FUNCTION compact_v1(text, integer, boolean);

DROP FUNCTION dirty_ratio_v1(bigint, bigint, bigint, bigint);

CREATE OR REPLACE FUNCTION cleanable_end_v2(p_topic_id integer, p_partition integer, p_from bigint, p_to bigint, p_next_offset bigint, p_min_lag_ms bigint, p_now timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION cleanable_end_v2(integer, integer, bigint, bigint, bigint, bigint, timestamp with time zone) IS 'Internal: where a compaction pass over [p_from, p_to) of a partition must stop: p_to, its last stable offset, or the first record from p_from younger than min_compaction_lag_ms, whichever comes first.';

REVOKE ALL ON FUNCTION cleanable_end_v2(integer, integer, bigint, bigint, bigint, bigint, timestamp with time zone) FROM PUBLIC;

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
        v_live := NULL;
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
            ), clean AS MATERIALIZED (
                SELECT r."offset", r.key, record_bytes_v1(r.key, r.value, r.headers) AS bytes FROM records r
                WHERE r.topic_id = c.topic_id AND r.partition = c.partition
                  AND r."offset" >= c.log_start_offset AND r."offset" < v_from AND r.control_type IS NULL
            ), doomed AS (
                -- In the chunk: aborted records (Kafka removes them at once, whatever their key),
                -- records without a key (written before the topic was compacted; Kafka's cleaner
                -- drops them too) and records a later one of their key supersedes.
                SELECT k."offset", k.bytes FROM chunk k
                WHERE k.control_type IS NULL
                  AND (k.aborted OR k.key IS NULL
                       OR EXISTS (SELECT 1 FROM latest l WHERE l.key = k.key AND l."offset" > k."offset"))
                UNION ALL
                -- In the clean section: each chunk key's older record. The clean section holds at
                -- most one record per key, so this removes at most one per key of the chunk.
                SELECT r."offset", r.bytes FROM clean r JOIN latest l ON l.key = r.key
            )
            SELECT (SELECT count(*) FROM chunk), (SELECT coalesce(array_agg(d."offset"), '{}') FROM doomed d),
                   (SELECT coalesce(sum(k.bytes), 0) FROM chunk k) + (SELECT coalesce(sum(r.bytes), 0) FROM clean r)
                   - (SELECT coalesce(sum(d.bytes), 0) FROM doomed d)
            INTO v_examined, v_doomed, v_live;
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
            WITH gone AS (
                DELETE FROM records r
                WHERE r.topic_id = c.topic_id AND r.partition = c.partition AND r."offset" = ANY (v_doomed)
                  AND r."offset" >= v_pt.log_start_offset
                RETURNING record_bytes_v1(r.key, r.value, r.headers) AS bytes, r.producer_id, r.txn_number
            )
            SELECT count(*), coalesce(sum(g.bytes), 0),
                   jsonb_agg(DISTINCT jsonb_build_array(g.producer_id, g.txn_number)) FILTER (WHERE g.txn_number IS NOT NULL)
            INTO v_removed, v_bytes, v_txns FROM gone g;
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

REVOKE ALL ON FUNCTION compact_v2(text, integer, boolean) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION compact_v2(text, integer, boolean) TO @schema@_admin;

CREATE OR REPLACE FUNCTION dirty_ratio_v2(p_log_bytes bigint, p_log_start bigint, p_clean_start bigint, p_clean_offset bigint, p_clean_bytes bigint)
 RETURNS double precision
 LANGUAGE sql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION dirty_ratio_v2(bigint, bigint, bigint, bigint, bigint) IS 'Internal: a partition''s dirty ratio, from its live bytes and its clean section''s (cleaner_state), the latter scaled down by the share of the section the log start has passed since they were counted.';

REVOKE ALL ON FUNCTION dirty_ratio_v2(bigint, bigint, bigint, bigint, bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION alter_topic_config_v1(p_name text, p_config jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_config jsonb := topic_config_v1(p_config);
    v_topic_id integer;
    v_policy text;
BEGIN
    UPDATE topics SET
        max_message_bytes = CASE WHEN v_config ? 'max_message_bytes'
                                 THEN coalesce((v_config ->> 'max_message_bytes')::integer, 1048588)
                                 ELSE max_message_bytes END,
        retention_ms = CASE WHEN v_config ? 'retention_ms' THEN (v_config ->> 'retention_ms')::bigint
                            ELSE retention_ms END,
        retention_bytes = CASE WHEN v_config ? 'retention_bytes' THEN nullif((v_config ->> 'retention_bytes')::bigint, -1)
                               ELSE retention_bytes END,
        message_timestamp_after_max_ms = CASE WHEN v_config ? 'message_timestamp_after_max_ms'
                                              THEN coalesce((v_config ->> 'message_timestamp_after_max_ms')::bigint, 3600000)
                                              ELSE message_timestamp_after_max_ms END,
        cleanup_policy = CASE WHEN v_config ? 'cleanup_policy' THEN coalesce(v_config ->> 'cleanup_policy', 'delete')
                              ELSE cleanup_policy END,
        min_compaction_lag_ms = CASE WHEN v_config ? 'min_compaction_lag_ms'
                                     THEN coalesce((v_config ->> 'min_compaction_lag_ms')::bigint, 0)
                                     ELSE min_compaction_lag_ms END,
        max_compaction_lag_ms = CASE WHEN v_config ? 'max_compaction_lag_ms'
                                     THEN (v_config ->> 'max_compaction_lag_ms')::bigint
                                     ELSE max_compaction_lag_ms END,
        delete_retention_ms = CASE WHEN v_config ? 'delete_retention_ms'
                                   THEN coalesce((v_config ->> 'delete_retention_ms')::bigint, 86400000)
                                   ELSE delete_retention_ms END,
        min_cleanable_dirty_ratio = CASE WHEN v_config ? 'min_cleanable_dirty_ratio'
                                         THEN coalesce((v_config ->> 'min_cleanable_dirty_ratio')::float8, 0.5)
                                         ELSE min_cleanable_dirty_ratio END
    WHERE name = p_name
    RETURNING topic_id, cleanup_policy INTO v_topic_id, v_policy;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_name);
    END IF;
    IF v_policy <> 'delete' THEN
        -- The topic's partitions, in order, as appends lock them: this waits for the appends in
        -- flight, so that every record acknowledged after this call returns passed the insert
        -- trigger's check for keys, and every keyless one lies at an earlier offset (compaction
        -- removes those, as Kafka's cleaner does). Revision 0034: an append whose check ran
        -- before the change could commit after it.
        PERFORM 1 FROM partitions pt WHERE pt.topic_id = v_topic_id ORDER BY pt.partition FOR NO KEY UPDATE;
    END IF;
END
$function$;

COMMENT ON FUNCTION alter_topic_config_v1(text, jsonb) IS 'IncrementalAlterConfigs: sets the keys present in p_config (a JSON null resets a key to its default: retention_ms then follows settings.log_retention_ms; -1 is no limit for retention_ms and retention_bytes).';

REVOKE ALL ON FUNCTION alter_topic_config_v1(text, jsonb) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION alter_topic_config_v1(text, jsonb) TO @schema@_admin;

CREATE OR REPLACE FUNCTION append_batches_v2(p_producer_id bigint, p_producer_epoch smallint, p_transactional_id text, p_txn_number bigint, p_topics text[], p_partitions integer[], p_base_sequences integer[], p_counts integer[], p_keys bytea[], p_values bytea[], p_headers jsonb[], p_timestamps timestamp with time zone[], p_commit boolean)
 RETURNS TABLE(base_offset bigint, last_offset bigint, log_append_time timestamp with time zone)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
-- The set-based append (revision 0023): every batch of a request in one statement per table, where
-- produce_v2 spends about fifteen statements on each batch. It takes the common case only: each
-- batch new and next in sequence, valid, and alone in its partition in this request. For anything
-- else it returns no row and appends nothing, and the caller runs the batches through produce_v2,
-- whose answers (a duplicate's offsets, a refusal's error) are the protocol's. So this function
-- decides only "append" or "not mine": no error of its own, and no rule written here a second time
-- except the checks that pick the common case.
--
-- Generic plans: PostgreSQL would otherwise re-plan these statements on every call (their custom
-- plans look cheaper, as they know the arrays' lengths), which cost a third of the function's time
-- in a 10-record commit; the plans do not depend on the lengths.
--
-- The caller holds, in the documented order, the transactions row (transactional requests: the
-- transaction open through txn_check_v1, or with p_commit as below) and every partition of the
-- batches FOR NO KEY UPDATE, and has checked the request's shape: as many partitions, base
-- sequences and counts as topics, counts >= 1 that add up to the keys, values, headers and
-- timestamps given.
--
-- p_commit (revision 0024): these batches are the whole transaction, which the caller opens and
-- commits in its own database transaction (produce_end_txn_v2: with consumer offsets txn_check_v1
-- opened it and txn_complete_v1 completes it; without, the caller checked the owner and the epoch
-- under the producer row's lock, and moves the transactions row to CompleteCommit afterwards).
-- Each partition's commit marker goes into the same INSERT as the records, right after its batch,
-- the partition's offset moves once, and the transaction's spans are written here; the partitions
-- never join txn_partitions, as no other session can see the transaction open.
DECLARE
    v_txn boolean := p_transactional_id IS NOT NULL;
    v_commit boolean := coalesce(p_commit, false);
    v_n integer := cardinality(p_topics);
    v_now timestamptz := now();
    v_topic_ids integer[];
    v_next bigint[];
    v_starts bigint[];
    v_bytes bigint[];
    v_max_bytes integer[];
    v_after_max bigint[];
    v_ok boolean;
    v_epoch smallint;
    v_producer_tid text;
BEGIN
    IF (SELECT acl_settings.enforce FROM acl_settings)
       AND EXISTS (SELECT 1 FROM unnest(p_topics) q(topic) WHERE NOT acl_allowed_v1('topic', q.topic, 'write')) THEN
        RETURN;
    END IF;
    IF p_producer_id IS NULL THEN
        IF p_producer_epoch IS NOT NULL OR p_base_sequences IS NOT NULL OR v_txn THEN
            RETURN;
        END IF;
    ELSE
        IF p_producer_epoch IS NULL OR p_producer_epoch < 0 OR p_producer_epoch >= 32767 OR p_base_sequences IS NULL
           OR EXISTS (SELECT 1 FROM unnest(p_base_sequences) q WHERE q IS NULL OR q < 0) THEN
            RETURN;
        END IF;
        -- The caller's own producer row (owner in the WHERE clause), shared as in produce_v2.
        SELECT p.epoch, p.transactional_id INTO v_epoch, v_producer_tid FROM producers p
        WHERE p.producer_id = p_producer_id AND p.owner = acl_caller_v1()
        FOR SHARE;
        IF NOT FOUND OR v_epoch <> p_producer_epoch OR (NOT v_txn AND v_producer_tid IS NOT NULL) THEN
            RETURN;
        END IF;
    END IF;
    IF (v_txn AND p_txn_number IS NULL) OR (v_commit AND NOT v_txn) THEN
        RETURN;
    END IF;
    -- Each batch: its topic and partition exist, it is the only batch of its partition here, and
    -- it holds at most max_batch_records. The partition rows are the caller's, locked.
    SELECT bool_and(pt.partition IS NOT NULL AND q.cnt <= s.max_batch_records)
           AND count(DISTINCT (q.topic, q.partition)) = v_n,
           array_agg(t.topic_id ORDER BY q.b), array_agg(pt.next_offset ORDER BY q.b),
           array_agg(q.start ORDER BY q.b), array_agg(t.max_message_bytes ORDER BY q.b),
           array_agg(t.message_timestamp_after_max_ms ORDER BY q.b)
    INTO v_ok, v_topic_ids, v_next, v_starts, v_max_bytes, v_after_max
    FROM (SELECT u.*, sum(u.cnt) OVER (ORDER BY u.b) - u.cnt + 1 AS start
          FROM unnest(p_topics, p_partitions, p_counts) WITH ORDINALITY AS u(topic, partition, cnt, b)) q
    CROSS JOIN settings s
    LEFT JOIN topics t ON t.name = q.topic
    LEFT JOIN partitions pt ON pt.topic_id = t.topic_id AND pt.partition = q.partition;
    IF NOT coalesce(v_ok, false) THEN
        RETURN;
    END IF;
    -- A record without a key for a compacted topic is refused by the insert trigger, which would
    -- fail every batch of the request; produce_v2 refuses it for its own batch only (revision
    -- 0034). The probe of the topics table is all other requests pay.
    IF EXISTS (SELECT 1 FROM topics t WHERE t.topic_id = ANY (v_topic_ids) AND t.cleanup_policy <> 'delete')
       AND EXISTS (SELECT 1 FROM unnest(p_keys) WITH ORDINALITY AS r(k, o)
                   JOIN topics t ON t.topic_id = v_topic_ids[width_bucket(r.o, v_starts)]
                   WHERE r.k IS NULL AND t.cleanup_policy <> 'delete') THEN
        RETURN;
    END IF;
    -- Each record: no larger than its topic's max_message_bytes; headers of the one shape readers
    -- decode; timestamps within [1970, now + the topic's message_timestamp_after_max_ms] (the
    -- checks of produce_v2). Record o belongs to batch width_bucket(o, v_starts): a binary search
    -- of the batches' first ordinals. Bytes are summed per batch for the partitions' log_bytes.
    IF p_headers IS NULL AND p_timestamps IS NULL THEN
        SELECT bool_and(z.largest <= v_max_bytes[z.b]), array_agg(z.bytes ORDER BY z.b) INTO v_ok, v_bytes
        FROM (SELECT width_bucket(r.o, v_starts) AS b,
                     max(coalesce(octet_length(r.k), 0) + coalesce(octet_length(r.v), 0)) AS largest,
                     sum(coalesce(octet_length(r.k), 0) + coalesce(octet_length(r.v), 0)) AS bytes
              FROM unnest(p_keys, p_values) WITH ORDINALITY AS r(k, v, o) GROUP BY 1) z;
    ELSE
        SELECT bool_and(z.largest <= v_max_bytes[z.b] AND z.valid), array_agg(z.bytes ORDER BY z.b) INTO v_ok, v_bytes
        FROM (SELECT y.b, max(y.sz) AS largest, sum(y.sz) AS bytes,
                     bool_and(coalesce(headers_valid_v1(y.h), true)
                              AND (y.ts IS NULL OR (isfinite(y.ts) AND y.ts >= '1970-01-01 00:00:00+00'
                                                    AND y.ts < '10000-01-01 00:00:00+00'
                                                    AND extract(epoch FROM y.ts - v_now) * 1000 <= v_after_max[y.b]))) AS valid
              FROM (SELECT width_bucket(r.o, v_starts) AS b, r.h, r.ts,
                           coalesce(octet_length(r.k), 0) + coalesce(octet_length(r.v), 0)
                           + coalesce(octet_length(r.h::text), 0) AS sz
                    FROM unnest(p_keys, p_values,
                                coalesce(p_headers, array_fill(NULL::jsonb, ARRAY[cardinality(p_values)])),
                                coalesce(p_timestamps, array_fill(NULL::timestamptz, ARRAY[cardinality(p_values)])))
                         WITH ORDINALITY AS r(k, v, h, ts, o)) y
              GROUP BY y.b) z;
    END IF;
    IF NOT coalesce(v_ok, false) THEN
        RETURN;
    END IF;
    IF p_producer_id IS NOT NULL THEN
        -- The producer's sequence state of these partitions, locked in (topic_id, partition) order
        -- (the last lock of the order; expiry deletes these rows FOR UPDATE). Each batch must
        -- follow the last one of its epoch (or start at 0 in a new epoch, or with no state here),
        -- and be none of the five remembered: a retry is produce_v2's to answer.
        WITH q AS (
            SELECT u.topic_id, u.partition, u.seq
            FROM unnest(v_topic_ids, p_partitions, p_base_sequences) AS u(topic_id, partition, seq)
        ), locked AS (
            SELECT ps.topic_id, ps.partition, ps.epoch, ps.first_sequences,
                   ps.last_sequences[cardinality(ps.last_sequences)] AS last_seq
            FROM producer_partition_state ps
            WHERE ps.producer_id = p_producer_id AND (ps.topic_id, ps.partition) IN (SELECT q.topic_id, q.partition FROM q)
            ORDER BY ps.topic_id, ps.partition
            FOR UPDATE
        )
        SELECT bool_and(CASE WHEN l.epoch = p_producer_epoch
                             THEN q.seq = CASE WHEN l.last_seq = 2147483647 THEN 0 ELSE l.last_seq + 1 END
                                  AND q.seq <> ALL (l.first_sequences)
                             ELSE q.seq = 0 END)
        INTO v_ok
        FROM q LEFT JOIN locked l ON l.topic_id = q.topic_id AND l.partition = q.partition;
        IF NOT coalesce(v_ok, false) THEN
            RETURN;
        END IF;
    END IF;

    -- Every batch's records in one INSERT: batch b's record o at offset next[b] + (o - start[b]);
    -- with p_commit, batch b's commit marker at next[b] + count[b] in the same statement (the
    -- statement-level checks on records run once, not twice).
    IF p_headers IS NULL AND p_timestamps IS NULL THEN
        INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, sequence, is_transactional,
                             control_type, key, value, "timestamp", txn_number)
        SELECT v_topic_ids[r.b], p_partitions[r.b], v_next[r.b] + r.o - v_starts[r.b], p_producer_id, p_producer_epoch,
               CASE WHEN p_producer_id IS NOT NULL
                    THEN ((p_base_sequences[r.b]::bigint + r.o - v_starts[r.b]) % 2147483648)::integer END,
               v_txn, NULL, r.k, r.v, v_now, CASE WHEN v_txn THEN p_txn_number END
        FROM (SELECT u.k, u.v, u.o, width_bucket(u.o, v_starts) AS b
              FROM unnest(p_keys, p_values) WITH ORDINALITY AS u(k, v, o)) r
        UNION ALL
        SELECT v_topic_ids[m.b], p_partitions[m.b], v_next[m.b] + p_counts[m.b], p_producer_id, p_producer_epoch, NULL,
               true, 'commit', NULL, NULL, v_now, p_txn_number
        FROM generate_subscripts(p_topics, 1) AS m(b) WHERE v_commit;
    ELSE
        INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, sequence, is_transactional,
                             control_type, key, value, headers, "timestamp", txn_number)
        SELECT v_topic_ids[r.b], p_partitions[r.b], v_next[r.b] + r.o - v_starts[r.b], p_producer_id, p_producer_epoch,
               CASE WHEN p_producer_id IS NOT NULL
                    THEN ((p_base_sequences[r.b]::bigint + r.o - v_starts[r.b]) % 2147483648)::integer END,
               v_txn, NULL, r.k, r.v, r.h, coalesce(r.ts, v_now), CASE WHEN v_txn THEN p_txn_number END
        FROM (SELECT u.k, u.v, u.h, u.ts, u.o, width_bucket(u.o, v_starts) AS b
              FROM unnest(p_keys, p_values,
                          coalesce(p_headers, array_fill(NULL::jsonb, ARRAY[cardinality(p_values)])),
                          coalesce(p_timestamps, array_fill(NULL::timestamptz, ARRAY[cardinality(p_values)])))
                   WITH ORDINALITY AS u(k, v, h, ts, o)) r
        UNION ALL
        SELECT v_topic_ids[m.b], p_partitions[m.b], v_next[m.b] + p_counts[m.b], p_producer_id, p_producer_epoch, NULL,
               true, 'commit', NULL, NULL, NULL, v_now, p_txn_number
        FROM generate_subscripts(p_topics, 1) AS m(b) WHERE v_commit;
    END IF;
    UPDATE partitions pt SET next_offset = q.next + q.cnt + CASE WHEN v_commit THEN 1 ELSE 0 END,
                             log_bytes = pt.log_bytes + q.bytes
    FROM unnest(v_topic_ids, p_partitions, v_next, p_counts, v_bytes) AS q(topic_id, partition, next, cnt, bytes)
    WHERE pt.topic_id = q.topic_id AND pt.partition = q.partition;
    IF v_commit THEN
        -- The spans read_committed fetches test transactions against (consistent_limits_v1), as
        -- txn_complete_v1 writes them: each batch is the whole transaction in its partition.
        INSERT INTO txn_spans (producer_id, txn_number, topic_id, partition, first_offset, last_offset)
        SELECT p_producer_id, p_txn_number, q.topic_id, q.partition, q.next, q.next + q.cnt - 1
        FROM unnest(v_topic_ids, p_partitions, v_next, p_counts) AS q(topic_id, partition, next, cnt)
        ORDER BY q.topic_id, q.partition;
    ELSIF v_txn THEN
        -- The partitions join the transaction; a transaction's first offset in a partition holds
        -- the partition's last stable offset back.
        INSERT INTO txn_partitions AS x (transactional_id, topic_id, partition, first_offset)
        SELECT p_transactional_id, q.topic_id, q.partition, q.next
        FROM unnest(v_topic_ids, p_partitions, v_next) AS q(topic_id, partition, next)
        ORDER BY q.topic_id, q.partition
        ON CONFLICT ON CONSTRAINT pk_txn_partitions DO UPDATE SET first_offset = EXCLUDED.first_offset
        WHERE x.first_offset IS NULL;
    END IF;
    IF p_producer_id IS NOT NULL THEN
        PERFORM producer_window_push_v1(p_producer_id, p_producer_epoch, v_topic_ids, p_partitions, p_base_sequences,
                                        p_counts, v_next, v_now);
    END IF;
    RETURN QUERY SELECT q.next, q.next + q.cnt - 1, v_now
    FROM unnest(v_next, p_counts) WITH ORDINALITY AS q(next, cnt, b) ORDER BY q.b;
END
$function$;

COMMENT ON FUNCTION append_batches_v2(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], boolean) IS 'Internal: appends every batch of a request (batch b: p_counts[b] records of the concatenated arrays, at p_base_sequences[b]) in one statement per table when each is new, next in sequence, valid and alone in its partition, returning one row per batch in order; otherwise no row and no write (the caller then runs produce_v2 per batch). The caller holds the transactions row (the transaction open, except with p_commit) and every partition row, in the documented order. p_commit: the batches are the whole transaction, opened and committed in the caller''s database transaction (produce_end_txn_v2): each partition''s commit marker and the transaction''s spans are written too, and txn_partitions is left alone; the caller then completes the transaction (one update of its row, or txn_complete_v1 when it carries consumer offsets).';

REVOKE ALL ON FUNCTION append_batches_v2(bigint, smallint, text, bigint, text[], integer[], integer[], integer[], bytea[], bytea[], jsonb[], timestamp with time zone[], boolean) FROM PUBLIC;

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
    -- The ACL first: a role that may not describe the topic learns nothing, not even whether it exists.
    PERFORM acl_require_v1('topic', ARRAY[p_topic], 'describe');
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

REVOKE ALL ON FUNCTION compaction_status_v1(text) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION compaction_status_v1(text) TO @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION enforce_retention_v2(p_batch integer DEFAULT 10000)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    -- The time is the server's (revision 0017): v1 took it from its caller, so any client could
    -- pass 'infinity' and abort every open transaction.
    v_now timestamptz := server_now_v1();
    pt record;
    v_start bigint;
    v_upto bigint;
    v_first bigint;
    v_deleted bigint := 0;
    v_n bigint;
    v_locked record;
    v_now_ms numeric := extract(epoch FROM v_now) * 1000;
BEGIN
    IF p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'batch must be at least 1';
    END IF;
    -- Every partition: one with no retention may still hold rows below its log start (left by
    -- an earlier pass before retention was turned off); the min() probe is one index lookup. A
    -- topic without a retention of its own follows settings.log_retention_ms; -1 keeps its
    -- records for ever (revision 0025, Kafka's log.retention.ms and its -1).
    -- A topic whose cleanup_policy is compact alone keeps its records for compaction to thin
    -- (compact_v2), as Kafka's: time and size retention apply with delete among its policies.
    FOR pt IN
        SELECT p.topic_id, p.partition, p.log_start_offset, p.next_offset, p.log_bytes,
               CASE WHEN t.retention_ms = -1 OR t.cleanup_policy = 'compact' THEN NULL
                    ELSE coalesce(t.retention_ms, s.log_retention_ms) END AS retention_ms,
               CASE WHEN t.cleanup_policy = 'compact' THEN NULL ELSE t.retention_bytes END AS retention_bytes
        FROM partitions p JOIN topics t USING (topic_id) CROSS JOIN settings s
        ORDER BY p.topic_id, p.partition
    LOOP
        v_start := pt.log_start_offset;
        -- A retention longer than the time since 1970 cannot apply (and would overflow).
        IF pt.retention_ms IS NOT NULL AND pt.retention_ms < v_now_ms THEN
            -- The log start moves past the oldest records, up to the first one still young enough.
            SELECT coalesce(min(r."offset"), pt.next_offset) INTO v_upto FROM (
                SELECT r."offset" FROM records r
                WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition AND r."offset" >= v_start
                  AND r."timestamp" >= v_now - make_interval(secs => pt.retention_ms / 1000.0)
                ORDER BY r."offset" LIMIT 1) r;
            v_start := greatest(v_start, v_upto);
        END IF;
        IF v_start > pt.log_start_offset
           OR (pt.retention_bytes IS NOT NULL AND pt.log_bytes > pt.retention_bytes) THEN
            -- The partition row is locked first, in a statement of its own, and read again: the
            -- statements after it see the records and the byte count as they are once it is held.
            -- Compaction (compact_v2) deletes and counts under the same lock; counted in a snapshot
            -- taken before its commit, its deleted records were subtracted a second time, and the
            -- size cut overshot by its bytes (revision 0034). DeleteRecords may have moved the log
            -- start meanwhile; it never moves back.
            SELECT p.log_start_offset, p.log_bytes INTO v_locked FROM partitions p
            WHERE p.topic_id = pt.topic_id AND p.partition = pt.partition
            FOR NO KEY UPDATE;
            v_start := greatest(v_start, v_locked.log_start_offset);
            IF pt.retention_bytes IS NOT NULL AND v_locked.log_bytes > pt.retention_bytes THEN
                -- log_bytes counts the live log (from the log start), so drop the shortest prefix
                -- that brings it within the limit.
                SELECT coalesce(min(c."offset") + 1, v_start) INTO v_upto FROM (
                    SELECT r."offset", sum(record_bytes_v1(r.key, r.value, r.headers)) OVER (ORDER BY r."offset") AS cum
                    FROM records r
                    WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition
                      AND r."offset" >= v_locked.log_start_offset
                ) c WHERE c.cum >= v_locked.log_bytes - pt.retention_bytes;
                v_start := greatest(v_start, v_upto);
            END IF;
            v_start := least(v_start, pt.next_offset);
            IF v_start > v_locked.log_start_offset THEN
                -- A short update of the partition row: readers stop returning what is below it at
                -- once, and the live byte count drops by what left the log.
                UPDATE partitions p
                SET log_start_offset = v_start,
                    log_bytes = greatest(p.log_bytes - coalesce((
                        SELECT sum(record_bytes_v1(r.key, r.value, r.headers))
                        FROM records r
                        WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition
                          AND r."offset" >= p.log_start_offset AND r."offset" < v_start), 0), 0)
                WHERE p.topic_id = pt.topic_id AND p.partition = pt.partition;
            END IF;
        END IF;
        -- Delete at most p_batch records below the log start, oldest first; the caller repeats
        -- in new transactions until nothing is left, so appends never wait for a long delete.
        SELECT min(r."offset") INTO v_first FROM records r
        WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition;
        IF v_first IS NOT NULL AND v_first < v_start THEN
            DELETE FROM records r
            WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition
              AND r."offset" >= v_first AND r."offset" < least(v_start, v_first + p_batch);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_deleted := v_deleted + v_n;
        END IF;
        -- A committed transaction's span that ends below the log start can no longer be read
        -- in part (revision 0014).
        DELETE FROM txn_spans s
        WHERE s.topic_id = pt.topic_id AND s.partition = pt.partition AND s.last_offset < v_start;
    END LOOP;
    RETURN v_deleted;
END
$function$;

COMMENT ON FUNCTION enforce_retention_v2(integer) IS 'Maintenance, at the server''s time (server_now_v1): advances each partition''s log start by its topic''s retention (time: its retention_ms, else settings.log_retention_ms, none for -1; size: retention_bytes; neither for cleanup_policy compact alone) and deletes at most p_batch records per partition below it; returns the number deleted (call again until 0).';

REVOKE ALL ON FUNCTION enforce_retention_v2(integer) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION enforce_retention_v2(integer) TO @schema@_admin;

CREATE OR REPLACE FUNCTION send_v1(p_topic text, p_value bytea, p_key bytea DEFAULT NULL::bytea, p_headers jsonb DEFAULT NULL::jsonb, p_partition integer DEFAULT NULL::integer)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    t topics%ROWTYPE;
    v_partitions integer;
    v_partition integer;
    v_size bigint;
BEGIN
    -- Access control (revision 0009, docs/acl.md), before anything is staged. The append at
    -- commit (produce_v2) checks again, as the same principal.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', ARRAY[p_topic], 'write');
    END IF;
    SELECT * INTO t FROM topics x WHERE x.name = p_topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_topic);
    END IF;
    IF p_key IS NULL AND t.cleanup_policy <> 'delete' THEN
        -- Said at the send, rather than by the insert trigger at the application's commit
        -- (revision 0034).
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = format('topic %L is compacted (cleanup_policy %s): every record needs a key', p_topic,
                             t.cleanup_policy);
    END IF;
    SELECT count(*) INTO v_partitions FROM partitions pt WHERE pt.topic_id = t.topic_id;
    IF p_partition IS NOT NULL THEN
        IF p_partition < 0 OR p_partition >= v_partitions THEN
            RAISE EXCEPTION USING ERRCODE = 'OL101',
                MESSAGE = format('unknown partition %s of topic %L (it has %s)', p_partition, p_topic, v_partitions);
        END IF;
        v_partition := p_partition;
    ELSIF p_key IS NOT NULL THEN
        v_partition := murmur2_v1(p_key) % v_partitions;
    ELSE
        -- No key: one partition per topic and transaction, as Kafka's sticky partitioner keeps a
        -- batch together.
        v_partition := (hashtext(pg_current_xact_id()::text || ':' || t.topic_id) & 2147483647) % v_partitions;
    END IF;
    v_size := coalesce(octet_length(p_key), 0) + coalesce(octet_length(p_value), 0)
              + coalesce(octet_length(p_headers::text), 0);
    IF v_size > t.max_message_bytes THEN
        RAISE EXCEPTION USING ERRCODE = 'OL105',
            MESSAGE = format('a record of %s bytes exceeds max_message_bytes %s of topic %L', v_size, t.max_message_bytes,
                             p_topic);
    END IF;
    IF p_headers IS NOT NULL AND NOT headers_valid_v1(p_headers) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL107',
            MESSAGE = 'headers must be a JSON array of {"key": text, "value": base64 text or null} objects';
    END IF;
    INSERT INTO outbox_records (topic_id, partition, key, value, headers)
    VALUES (t.topic_id, v_partition, p_key, p_value, p_headers);
    RETURN v_partition;
END
$function$;

COMMENT ON FUNCTION send_v1(text, bytea, bytea, jsonb, integer) IS 'A record in the caller''s own transaction (the transactional outbox): checked now (OL101 unknown topic or partition, OL105 too large, OL107 bad headers, ACL write on the topic), appended at the caller''s commit, and never if it rolls back. Partition: p_partition, else murmur2 of the key (as Kafka''s client), else one per topic and transaction. Returns the partition.';

REVOKE ALL ON FUNCTION send_v1(text, bytea, bytea, jsonb, integer) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION send_v1(text, bytea, bytea, jsonb, integer) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION topic_config_v1(p_config jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $function$
DECLARE
    k text;
    v jsonb;
    v_out jsonb;
BEGIN
    IF p_config IS NULL THEN
        RETURN '{}'::jsonb;
    END IF;
    IF jsonb_typeof(p_config) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001', MESSAGE = 'topic config must be a JSON object';
    END IF;
    v_out := p_config;
    FOR k, v IN SELECT * FROM jsonb_each(p_config) LOOP
        IF k NOT IN ('max_message_bytes', 'retention_ms', 'retention_bytes', 'message_timestamp_after_max_ms',
                     'cleanup_policy', 'min_compaction_lag_ms', 'max_compaction_lag_ms', 'delete_retention_ms',
                     'min_cleanable_dirty_ratio') THEN
            RAISE EXCEPTION USING ERRCODE = 'OL001',
                MESSAGE = format('unknown topic config %L (known: max_message_bytes, retention_ms, retention_bytes, '
                                 'message_timestamp_after_max_ms, cleanup_policy, min_compaction_lag_ms, '
                                 'max_compaction_lag_ms, delete_retention_ms, min_cleanable_dirty_ratio)', k);
        END IF;
        IF jsonb_typeof(v) = 'null' OR (k IN ('retention_ms', 'retention_bytes') AND v::text = '-1') THEN
            CONTINUE;  -- the default; for retention, -1 is Kafka's "no limit" (revision 0025)
        END IF;
        IF k = 'cleanup_policy' THEN
            -- Kafka's list of policies, in either order, stored in one spelling (revision 0033).
            IF jsonb_typeof(v) <> 'string'
               OR replace(v #>> '{}', ' ', '') NOT IN ('delete', 'compact', 'compact,delete', 'delete,compact') THEN
                RAISE EXCEPTION USING ERRCODE = 'OL001',
                    MESSAGE = format('topic config cleanup_policy must be delete, compact or compact,delete, not %s', v);
            END IF;
            v_out := jsonb_set(v_out, '{cleanup_policy}',
                               to_jsonb(CASE replace(v #>> '{}', ' ', '') WHEN 'delete,compact' THEN 'compact,delete'
                                             ELSE replace(v #>> '{}', ' ', '') END));
        ELSIF k = 'min_cleanable_dirty_ratio' THEN
            -- (A number below 1e-300 other than 0 does not fit a double precision.)
            IF jsonb_typeof(v) <> 'number' OR v::numeric < 0 OR v::numeric > 1
               OR (v::numeric > 0 AND v::numeric < 1e-300) THEN
                RAISE EXCEPTION USING ERRCODE = 'OL001',
                    MESSAGE = format('topic config min_cleanable_dirty_ratio must be a number from 0 to 1, not %s', v);
            END IF;
        ELSIF jsonb_typeof(v) <> 'number' OR v::text !~ '^[0-9]+$'
              OR (v::numeric = 0 AND k NOT IN ('min_compaction_lag_ms', 'delete_retention_ms'))
              OR (k = 'max_message_bytes' AND v::numeric > 2147483647)
              OR v::numeric > 9223372036854775807 THEN
            RAISE EXCEPTION USING ERRCODE = 'OL001',
                MESSAGE = format('topic config %s must be a %s integer, not %s', k,
                                 CASE WHEN k IN ('min_compaction_lag_ms', 'delete_retention_ms') THEN 'non-negative'
                                      ELSE 'positive' END, v);
        END IF;
    END LOOP;
    RETURN v_out;
END
$function$;

COMMENT ON FUNCTION topic_config_v1(jsonb) IS 'Validates a topic configuration object and returns it with cleanup_policy in its one spelling: max_message_bytes, retention_ms, retention_bytes, message_timestamp_after_max_ms and max_compaction_lag_ms positive integers (-1 too for the two retention keys); min_compaction_lag_ms and delete_retention_ms non-negative integers; cleanup_policy delete, compact or compact,delete; min_cleanable_dirty_ratio from 0 to 1; null is the default. Raises OL001.';

REVOKE ALL ON FUNCTION topic_config_v1(jsonb) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION topic_config_v1(jsonb) TO @schema@_admin;

CREATE VIEW partition_offsets WITH (security_barrier=true) AS
 SELECT v.topic,
    v.partition,
    v.log_start_offset,
    v.high_watermark,
    v.last_stable_offset,
    v.open_transactions,
    v.log_bytes,
    v.topic_id
   FROM ( SELECT t.name AS topic,
            p.partition,
            p.log_start_offset,
            p.next_offset AS high_watermark,
            LEAST(p.next_offset, o.first_open_offset) AS last_stable_offset,
            COALESCE(o.open_transactions, (0)::bigint) AS open_transactions,
            p.log_bytes,
            p.topic_id
           FROM ((partitions p
             JOIN topics t USING (topic_id))
             LEFT JOIN LATERAL ( SELECT min(x.first_offset) AS first_open_offset,
                    count(*) AS open_transactions
                   FROM (txn_partitions x
                     JOIN transactions tx USING (transactional_id))
                  WHERE ((x.topic_id = p.topic_id) AND (x.partition = p.partition) AND (x.first_offset IS NOT NULL) AND (tx.state = ANY (ARRAY['Ongoing'::text, 'PrepareCommit'::text, 'PrepareAbort'::text])))) o ON (true))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR acl_allowed_v1('topic'::text, v.topic, 'describe'::text));

COMMENT ON VIEW partition_offsets IS 'Per partition: log start offset, high watermark, last stable offset (read_committed readers stop there) and how many open transactions have written to it.';

COMMENT ON COLUMN partition_offsets.topic IS 'The topic name.';

COMMENT ON COLUMN partition_offsets.partition IS 'The partition number.';

COMMENT ON COLUMN partition_offsets.log_start_offset IS 'The first offset still in the log.';

COMMENT ON COLUMN partition_offsets.high_watermark IS 'The offset the next record will get (read_uncommitted readers stop here).';

COMMENT ON COLUMN partition_offsets.last_stable_offset IS 'The first offset of the oldest open transaction, else the high watermark.';

COMMENT ON COLUMN partition_offsets.open_transactions IS 'Open transactions that have written to this partition.';

COMMENT ON COLUMN partition_offsets.log_bytes IS 'Bytes of keys, values and headers in the log.';

COMMENT ON COLUMN partition_offsets.topic_id IS 'The topic''s id (for joins).';

REVOKE ALL ON TABLE partition_offsets FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE partition_offsets TO @schema@_reader;

GRANT SELECT ON TABLE partition_offsets TO @schema@_client;

GRANT SELECT ON TABLE partition_offsets TO @schema@_admin;

CREATE VIEW committed_records WITH (security_barrier=true) AS
 SELECT v.topic,
    v.partition,
    v."offset",
    v.key,
    v.value,
    v.headers,
    v."timestamp",
    v.producer_id
   FROM ( SELECT o.topic,
            r.partition,
            r."offset",
            r.key,
            r.value,
            r.headers,
            r."timestamp",
            r.producer_id
           FROM (records r
             JOIN partition_offsets o ON (((o.topic_id = r.topic_id) AND (o.partition = r.partition))))
          WHERE ((r.control_type IS NULL) AND (NOT r.aborted) AND (r."offset" < o.last_stable_offset) AND (r."offset" >= o.log_start_offset))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR acl_allowed_v1('topic'::text, v.topic, 'read'::text));

COMMENT ON VIEW committed_records IS 'read_committed: data records below each partition''s last stable offset that are not from an aborted transaction; never control records. Records here are decided and do not change (until retention, or compaction of a compacted topic).';

COMMENT ON COLUMN committed_records.topic IS 'The topic name.';

COMMENT ON COLUMN committed_records.partition IS 'The partition number.';

COMMENT ON COLUMN committed_records."offset" IS 'The record''s offset.';

COMMENT ON COLUMN committed_records.key IS 'The record key.';

COMMENT ON COLUMN committed_records.value IS 'The record value.';

COMMENT ON COLUMN committed_records.headers IS 'Headers as a JSON array of {"key", "value": base64}.';

COMMENT ON COLUMN committed_records."timestamp" IS 'The record timestamp.';

COMMENT ON COLUMN committed_records.producer_id IS 'The producer that wrote it.';

REVOKE ALL ON TABLE committed_records FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE committed_records TO @schema@_reader;

GRANT SELECT ON TABLE committed_records TO @schema@_client;

GRANT SELECT ON TABLE committed_records TO @schema@_admin;

CREATE VIEW transaction_status WITH (security_barrier=true) AS
 SELECT v.transactional_id,
    v.state,
    v.producer_id,
    v.producer_epoch,
    v.txn_number,
    v.timeout_ms,
    v.txn_started_at,
    v.age,
    v.expired,
    v.partitions,
    v.updated_at
   FROM ( SELECT x.transactional_id,
            x.state,
            x.producer_id,
            p.epoch AS producer_epoch,
            x.txn_number,
            x.timeout_ms,
            x.txn_started_at,
            (now() - x.txn_started_at) AS age,
            COALESCE(((x.txn_started_at + make_interval(secs => (((x.timeout_ms)::numeric / 1000.0))::double precision)) < now()), false) AS expired,
            COALESCE(( SELECT array_agg(format('%s-%s@%s'::text, t.name, tp.partition, COALESCE((tp.first_offset)::text, '-'::text)) ORDER BY t.name, tp.partition) AS array_agg
                   FROM (txn_partitions tp
                     JOIN topics t USING (topic_id))
                  WHERE (tp.transactional_id = x.transactional_id)), '{}'::text[]) AS partitions,
            x.updated_at
           FROM (transactions x
             JOIN producers p ON ((p.producer_id = x.producer_id)))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR acl_allowed_v1('transactional_id'::text, v.transactional_id, 'describe'::text));

COMMENT ON VIEW transaction_status IS 'The coordinator state of every transactional id: state, producer id and epoch, the open transaction''s age, whether it exceeded its timeout, and its partitions (topic-partition@first offset).';

COMMENT ON COLUMN transaction_status.transactional_id IS 'The transactional id.';

COMMENT ON COLUMN transaction_status.state IS 'Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort or Dead.';

COMMENT ON COLUMN transaction_status.producer_id IS 'The producer id serving it.';

COMMENT ON COLUMN transaction_status.producer_epoch IS 'The current epoch (older epochs are fenced).';

COMMENT ON COLUMN transaction_status.txn_number IS 'The number of the last transaction opened.';

COMMENT ON COLUMN transaction_status.timeout_ms IS 'The transaction timeout.';

COMMENT ON COLUMN transaction_status.txn_started_at IS 'When the open transaction started.';

COMMENT ON COLUMN transaction_status.age IS 'How long the open transaction has been open.';

COMMENT ON COLUMN transaction_status.expired IS 'Open past its timeout (the next reader or maintenance aborts it).';

COMMENT ON COLUMN transaction_status.partitions IS 'Partitions of the open transaction, as topic-partition@first offset.';

COMMENT ON COLUMN transaction_status.updated_at IS 'When the state last changed.';

REVOKE ALL ON TABLE transaction_status FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE transaction_status TO @schema@_reader;

GRANT SELECT ON TABLE transaction_status TO @schema@_client;

GRANT SELECT ON TABLE transaction_status TO @schema@_admin;

CREATE VIEW group_status WITH (security_barrier=true) AS
 SELECT v.group_id,
    v.state,
    v.generation,
    v.assignor,
    v.member_id,
    v.group_instance_id,
    v.client_id,
    v.subscription,
    v.last_heartbeat_at,
    v.expired,
    v.assignment,
    v.target
   FROM ( SELECT g.group_id,
            g.state,
            g.generation,
            g.assignor,
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.subscription,
            m.last_heartbeat_at,
            ((m.last_heartbeat_at + make_interval(secs => (((m.session_timeout_ms)::numeric / 1000.0))::double precision)) < now()) AS expired,
            ( SELECT array_agg(format('%s-%s'::text, t.name, a.partition) ORDER BY t.name, a.partition) AS array_agg
                   FROM (member_assignments a
                     JOIN topics t USING (topic_id))
                  WHERE ((a.group_id = g.group_id) AND (a.member_id = m.member_id))) AS assignment,
            ( SELECT array_agg(format('%s-%s'::text, t.name, a.partition) ORDER BY t.name, a.partition) AS array_agg
                   FROM (target_assignments a
                     JOIN topics t USING (topic_id))
                  WHERE ((a.group_id = g.group_id) AND (a.member_id = m.member_id))) AS target
           FROM (groups g
             LEFT JOIN group_members m USING (group_id))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR acl_allowed_v1('group'::text, v.group_id, 'describe'::text));

COMMENT ON VIEW group_status IS 'Consumer groups with their state, generation, members, and what each member owns and is to own.';

COMMENT ON COLUMN group_status.group_id IS 'The group id.';

COMMENT ON COLUMN group_status.state IS 'Empty, Stable, or Reconciling while a partition waits for its owner to let go of it.';

COMMENT ON COLUMN group_status.generation IS 'The current generation.';

COMMENT ON COLUMN group_status.assignor IS 'range, roundrobin or sticky.';

COMMENT ON COLUMN group_status.member_id IS 'A member (NULL for a group with none).';

COMMENT ON COLUMN group_status.group_instance_id IS 'The member''s static instance id, if any.';

COMMENT ON COLUMN group_status.client_id IS 'The member''s client id.';

COMMENT ON COLUMN group_status.subscription IS 'Topics the member subscribed to.';

COMMENT ON COLUMN group_status.last_heartbeat_at IS 'The member''s last heartbeat.';

COMMENT ON COLUMN group_status.expired IS 'Silent past its session timeout (removed at the next group call).';

COMMENT ON COLUMN group_status.assignment IS 'Partitions the member owns now, as topic-partition.';

COMMENT ON COLUMN group_status.target IS 'Partitions the assignor gives the member, as topic-partition: it owns each once its previous owner lets go.';

REVOKE ALL ON TABLE group_status FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE group_status TO @schema@_reader;

GRANT SELECT ON TABLE group_status TO @schema@_client;

GRANT SELECT ON TABLE group_status TO @schema@_admin;

CREATE VIEW group_offsets WITH (security_barrier=true) AS
 SELECT v.group_id,
    v.topic,
    v.partition,
    v.committed_offset,
    v.metadata,
    v.committed_at,
    v.high_watermark,
    v.last_stable_offset,
    v.lag,
    v.lag_committed,
    v.committed_by_producer_id
   FROM ( SELECT c.group_id,
            o.topic,
            c.partition,
            c.committed_offset,
            c.metadata,
            c.committed_at,
            o.high_watermark,
            o.last_stable_offset,
            GREATEST((o.high_watermark - c.committed_offset), (0)::bigint) AS lag,
            GREATEST((o.last_stable_offset - c.committed_offset), (0)::bigint) AS lag_committed,
            c.producer_id AS committed_by_producer_id
           FROM (committed_offsets c
             JOIN partition_offsets o ON (((o.topic_id = c.topic_id) AND (o.partition = c.partition))))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR (acl_allowed_v1('group'::text, v.group_id, 'describe'::text) AND acl_allowed_v1('topic'::text, v.topic, 'describe'::text)));

COMMENT ON VIEW group_offsets IS 'Committed offsets of every group, with lag against the high watermark and against the last stable offset (what a read_committed consumer can still read).';

COMMENT ON COLUMN group_offsets.group_id IS 'The group id.';

COMMENT ON COLUMN group_offsets.topic IS 'The topic.';

COMMENT ON COLUMN group_offsets.partition IS 'The partition.';

COMMENT ON COLUMN group_offsets.committed_offset IS 'The next offset the group will read.';

COMMENT ON COLUMN group_offsets.metadata IS 'Commit metadata.';

COMMENT ON COLUMN group_offsets.committed_at IS 'When the offset was committed.';

COMMENT ON COLUMN group_offsets.high_watermark IS 'The partition''s high watermark.';

COMMENT ON COLUMN group_offsets.last_stable_offset IS 'The partition''s last stable offset.';

COMMENT ON COLUMN group_offsets.lag IS 'high watermark - committed offset.';

COMMENT ON COLUMN group_offsets.lag_committed IS 'last stable offset - committed offset (read_committed lag).';

COMMENT ON COLUMN group_offsets.committed_by_producer_id IS 'The transactional producer whose commit wrote it (NULL: a plain commit).';

REVOKE ALL ON TABLE group_offsets FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE group_offsets TO @schema@_reader;

GRANT SELECT ON TABLE group_offsets TO @schema@_client;

GRANT SELECT ON TABLE group_offsets TO @schema@_admin;

CREATE VIEW pending_group_offsets WITH (security_barrier=true) AS
 SELECT v.group_id,
    v.topic,
    v.partition,
    v.committed_offset,
    v.transactional_id,
    v.producer_id,
    v.generation,
    v.member_id,
    v.transaction_state,
    v.txn_started_at
   FROM ( SELECT po.group_id,
            t.name AS topic,
            po.partition,
            po.committed_offset,
            po.transactional_id,
            po.producer_id,
            po.generation,
            po.member_id,
            tx.state AS transaction_state,
            tx.txn_started_at
           FROM ((pending_offsets po
             JOIN topics t USING (topic_id))
             JOIN transactions tx USING (transactional_id))) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR (acl_allowed_v1('group'::text, v.group_id, 'describe'::text) AND acl_allowed_v1('topic'::text, v.topic, 'describe'::text)));

COMMENT ON VIEW pending_group_offsets IS 'Offsets committed inside still-open transactions (KIP-447), with the transaction holding them: a consumer asking for stable offsets waits until that transaction ends.';

COMMENT ON COLUMN pending_group_offsets.group_id IS 'The group id.';

COMMENT ON COLUMN pending_group_offsets.topic IS 'The topic.';

COMMENT ON COLUMN pending_group_offsets.partition IS 'The partition.';

COMMENT ON COLUMN pending_group_offsets.committed_offset IS 'The offset the transaction''s commit would apply.';

COMMENT ON COLUMN pending_group_offsets.transactional_id IS 'The transaction holding it.';

COMMENT ON COLUMN pending_group_offsets.producer_id IS 'The transactional producer.';

COMMENT ON COLUMN pending_group_offsets.generation IS 'The group generation it was committed in.';

COMMENT ON COLUMN pending_group_offsets.member_id IS 'The member that committed it.';

COMMENT ON COLUMN pending_group_offsets.transaction_state IS 'The state of that transaction.';

COMMENT ON COLUMN pending_group_offsets.txn_started_at IS 'When that transaction started.';

REVOKE ALL ON TABLE pending_group_offsets FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE pending_group_offsets TO @schema@_reader;

GRANT SELECT ON TABLE pending_group_offsets TO @schema@_client;

GRANT SELECT ON TABLE pending_group_offsets TO @schema@_admin;

REVOKE ALL ON TABLE cleaner_state FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE cleaner_state TO @schema@_admin;
