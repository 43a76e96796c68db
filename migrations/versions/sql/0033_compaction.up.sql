-- Tables (by hand; the functions below are frozen from store/sql).
ALTER TABLE topics ADD COLUMN cleanup_policy TEXT DEFAULT 'delete' NOT NULL;

ALTER TABLE topics ADD COLUMN min_compaction_lag_ms BIGINT DEFAULT 0 NOT NULL;

ALTER TABLE topics ADD COLUMN max_compaction_lag_ms BIGINT;

ALTER TABLE topics ADD COLUMN delete_retention_ms BIGINT DEFAULT 86400000 NOT NULL;

ALTER TABLE topics ADD COLUMN min_cleanable_dirty_ratio FLOAT DEFAULT 0.5 NOT NULL;

ALTER TABLE topics ADD CONSTRAINT ck_topics_cleanup_policy_valid CHECK (cleanup_policy IN ('delete', 'compact', 'compact,delete'));

ALTER TABLE topics ADD CONSTRAINT ck_topics_compaction_settings_valid CHECK (min_compaction_lag_ms >= 0 AND (max_compaction_lag_ms IS NULL OR max_compaction_lag_ms > 0) AND delete_retention_ms >= 0 AND min_cleanable_dirty_ratio BETWEEN 0 AND 1);

COMMENT ON COLUMN topics.cleanup_policy IS 'delete (retention by time and size), compact (the latest record of each key is kept) or compact,delete (both): Kafka''s cleanup.policy.';

COMMENT ON COLUMN topics.min_compaction_lag_ms IS 'Compaction leaves records younger than this (and all after them) alone.';

COMMENT ON COLUMN topics.max_compaction_lag_ms IS 'A dirty record this old makes its partition compacted whatever its dirty ratio; NULL is no limit.';

COMMENT ON COLUMN topics.delete_retention_ms IS 'How long tombstones and transaction markers stay once compacted (Kafka''s delete.retention.ms).';

COMMENT ON COLUMN topics.min_cleanable_dirty_ratio IS 'Compaction starts on a partition when this share of its live bytes is dirty (not yet compacted).';

CREATE TABLE cleaner_state (
	topic_id INTEGER NOT NULL,
	partition INTEGER NOT NULL,
	clean_offset BIGINT DEFAULT 0 NOT NULL,
	clean_bytes BIGINT DEFAULT 0 NOT NULL,
	horizon_offset BIGINT DEFAULT 0 NOT NULL,
	checkpoint_offsets BIGINT[] DEFAULT '{}' NOT NULL,
	checkpoint_times TIMESTAMP WITH TIME ZONE[] DEFAULT '{}' NOT NULL,
	examined_records BIGINT DEFAULT 0 NOT NULL,
	removed_records BIGINT DEFAULT 0 NOT NULL,
	removed_bytes BIGINT DEFAULT 0 NOT NULL,
	cleaned_at TIMESTAMP WITH TIME ZONE,
	CONSTRAINT pk_cleaner_state PRIMARY KEY (topic_id, partition),
	CONSTRAINT ck_cleaner_state_progress_valid CHECK (clean_offset >= 0 AND clean_bytes >= 0 AND horizon_offset >= 0 AND cardinality(checkpoint_offsets) = cardinality(checkpoint_times)),
	CONSTRAINT fk_cleaner_state_topic_id_partition_partitions FOREIGN KEY(topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);

COMMENT ON TABLE cleaner_state IS 'Compaction''s progress in each partition of a compacted topic.';

COMMENT ON COLUMN cleaner_state.topic_id IS 'The topic.';

COMMENT ON COLUMN cleaner_state.partition IS 'The partition.';

COMMENT ON COLUMN cleaner_state.clean_offset IS 'The end of the clean section: below it (from the log start) each key has at most one record.';

COMMENT ON COLUMN cleaner_state.clean_bytes IS 'Live bytes of the clean section, for the dirty ratio.';

COMMENT ON COLUMN cleaner_state.horizon_offset IS 'Tombstones and markers below this have been removed once past delete_retention_ms.';

COMMENT ON COLUMN cleaner_state.checkpoint_offsets IS 'Ends of recent compaction passes, oldest first (the newest one older than delete_retention_ms is the delete horizon).';

COMMENT ON COLUMN cleaner_state.checkpoint_times IS 'When each of checkpoint_offsets was reached.';

COMMENT ON COLUMN cleaner_state.examined_records IS 'Records compaction has read in the dirty section, in all.';

COMMENT ON COLUMN cleaner_state.removed_records IS 'Records compaction has removed, in all.';

COMMENT ON COLUMN cleaner_state.removed_bytes IS 'Bytes (keys, values, headers) compaction has removed, in all.';

COMMENT ON COLUMN cleaner_state.cleaned_at IS 'When compaction last ran here.';

-- Functions, triggers and grants, frozen from store/sql.
DROP TRIGGER records_partition_check ON records;

DROP FUNCTION records_partition_check_v1();

CREATE OR REPLACE FUNCTION cleanable_end_v1(p_topic_id integer, p_partition integer, p_from bigint, p_next_offset bigint, p_min_lag_ms bigint, p_now timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION cleanable_end_v1(integer, integer, bigint, bigint, bigint, timestamp with time zone) IS 'Internal: where compaction of a partition must stop: its last stable offset, or the first record from p_from younger than min_compaction_lag_ms if that comes first.';

REVOKE ALL ON FUNCTION cleanable_end_v1(integer, integer, bigint, bigint, bigint, timestamp with time zone) FROM PUBLIC;

CREATE OR REPLACE FUNCTION compact_v1(p_topic text DEFAULT NULL::text, p_batch integer DEFAULT 50000, p_force boolean DEFAULT false)
 RETURNS TABLE(topic text, partition integer, examined bigint, removed bigint, removed_bytes bigint, dirty_ratio double precision, dirty_offsets bigint, more boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
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
$function$;

COMMENT ON FUNCTION compact_v1(text, integer, boolean) IS 'Maintenance: one bounded pass of compaction (up to p_batch offsets of one partition''s dirty section, and of its tombstones and markers past the delete horizon) on the dirtiest partition of a compacted topic (of p_topic if given) that needs it: below min_cleanable_dirty_ratio only after max_compaction_lag_ms, or always with p_force. Keeps each key''s latest record; removes superseded, aborted and keyless records, and tombstones and markers delete_retention_ms after they were cleaned. Never touches records at or past the last stable offset or younger than min_compaction_lag_ms. Returns one row (the partition, records examined and removed, bytes removed, its dirty ratio before, dirty offsets left below the cleanable end, whether more is to do there now) or none when nothing needs doing; call again, one transaction each, until none.';

REVOKE ALL ON FUNCTION compact_v1(text, integer, boolean) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION compact_v1(text, integer, boolean) TO @schema@_admin;

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
$function$;

COMMENT ON FUNCTION compaction_status_v1(text) IS 'Per partition of a topic: its cleanup policy, log start, the end of its clean section, high watermark, live bytes, dirty ratio (the share of live bytes not yet cleaned) and what compaction has examined and removed so far. Needs DESCRIBE on the topic; OL101 for an unknown topic.';

REVOKE ALL ON FUNCTION compaction_status_v1(text) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION compaction_status_v1(text) TO @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION dirty_ratio_v1(p_log_bytes bigint, p_log_start bigint, p_clean_offset bigint, p_clean_bytes bigint)
 RETURNS double precision
 LANGUAGE sql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $function$
    -- The share of a partition's live bytes above its clean section (Kafka's dirty ratio). A
    -- clean section entirely below the log start (retention took it) holds nothing.
    SELECT CASE WHEN p_log_bytes IS NULL OR p_log_bytes <= 0 THEN 0::float8
                ELSE greatest(0, least(1, (p_log_bytes - CASE WHEN p_clean_offset > p_log_start
                                                              THEN coalesce(p_clean_bytes, 0) ELSE 0 END)::float8
                                          / p_log_bytes)) END
$function$;

COMMENT ON FUNCTION dirty_ratio_v1(bigint, bigint, bigint, bigint) IS 'Internal: a partition''s dirty ratio, from its live bytes and its clean section''s (cleaner_state).';

REVOKE ALL ON FUNCTION dirty_ratio_v1(bigint, bigint, bigint, bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION ms_before_v1(p_now timestamp with time zone, p_ms bigint)
 RETURNS timestamp with time zone
 LANGUAGE sql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $function$
    -- A topic setting may be any bigint of milliseconds (Kafka's Long.MAX_VALUE is "never"); an
    -- interval that long overflows, and anything before 1970 is before every record anyway.
    SELECT CASE WHEN p_ms >= extract(epoch FROM p_now) * 1000 THEN '-infinity'::timestamptz
                ELSE p_now - make_interval(secs => p_ms / 1000.0) END
$function$;

COMMENT ON FUNCTION ms_before_v1(timestamp with time zone, bigint) IS 'Internal: p_ms milliseconds before p_now, or -infinity when that is before 1970 (no overflow for any bigint).';

REVOKE ALL ON FUNCTION ms_before_v1(timestamp with time zone, bigint) FROM PUBLIC;

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

REVOKE ALL ON FUNCTION record_bytes_v1(bytea, bytea, jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION records_insert_check_v2()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_missing text;
    v_topic text;
BEGIN
    SELECT format('(%s, %s)', n.topic_id, n.partition) INTO v_missing
    FROM (SELECT DISTINCT topic_id, partition FROM new_records) n
    WHERE NOT EXISTS (SELECT 1 FROM partitions p WHERE p.topic_id = n.topic_id AND p.partition = n.partition)
    LIMIT 1;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
            MESSAGE = format('records for partition %s, which does not exist', v_missing);
    END IF;
    -- A compacted topic keeps the latest record per key, so a record without one is refused, as
    -- Kafka's broker refuses it. Here, in the one place every write path's rows pass (produce,
    -- the outbox, appends of whole transactions), and only when some topic is compacted: the
    -- probe of the small topics table is all other writes pay.
    IF EXISTS (SELECT 1 FROM topics t WHERE t.cleanup_policy <> 'delete') THEN
        SELECT t.name INTO v_topic FROM topics t
        WHERE t.cleanup_policy <> 'delete'
          AND t.topic_id IN (SELECT n.topic_id FROM new_records n WHERE n.key IS NULL AND n.control_type IS NULL)
        LIMIT 1;
        IF v_topic IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'OL107',
                MESSAGE = format('topic %L is compacted (cleanup_policy %s): every record needs a key', v_topic,
                                 (SELECT t.cleanup_policy FROM topics t WHERE t.name = v_topic));
        END IF;
    END IF;
    RETURN NULL;
END
$function$;

COMMENT ON FUNCTION records_insert_check_v2() IS 'Trigger (once per statement): every inserted record belongs to an existing partition, and a data record for a compacted topic has a key (OL107).';

REVOKE ALL ON FUNCTION records_insert_check_v2() FROM PUBLIC;

CREATE OR REPLACE FUNCTION alter_topic_config_v1(p_name text, p_config jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_config jsonb := topic_config_v1(p_config);
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
    WHERE name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown topic %L', p_name);
    END IF;
END
$function$;

COMMENT ON FUNCTION alter_topic_config_v1(text, jsonb) IS 'IncrementalAlterConfigs: sets the keys present in p_config (a JSON null resets a key to its default: retention_ms then follows settings.log_retention_ms; -1 is no limit for retention_ms and retention_bytes).';

REVOKE ALL ON FUNCTION alter_topic_config_v1(text, jsonb) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION alter_topic_config_v1(text, jsonb) TO @schema@_admin;

CREATE OR REPLACE FUNCTION create_topic_v1(p_name text, p_partitions integer, p_config jsonb DEFAULT '{}'::jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_config jsonb := topic_config_v1(p_config);
    v_topic_id integer;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9._-]{1,249}$' OR p_name IN ('.', '..') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL103',
            MESSAGE = format('invalid topic name %L: use letters, digits, ''.'', ''_'', ''-'' (1 to 249 characters)', p_name);
    END IF;
    IF p_partitions IS NULL OR p_partitions < 1 OR p_partitions > 100000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL104',
            MESSAGE = format('a topic needs 1 to 100000 partitions, not %s', p_partitions);
    END IF;
    INSERT INTO topics (name, max_message_bytes, retention_ms, retention_bytes, message_timestamp_after_max_ms,
                        cleanup_policy, min_compaction_lag_ms, max_compaction_lag_ms, delete_retention_ms,
                        min_cleanable_dirty_ratio)
    VALUES (p_name,
            coalesce((v_config ->> 'max_message_bytes')::integer, 1048588),
            (v_config ->> 'retention_ms')::bigint,  -- NULL: settings.log_retention_ms (revision 0025)
            nullif((v_config ->> 'retention_bytes')::bigint, -1),
            coalesce((v_config ->> 'message_timestamp_after_max_ms')::bigint, 3600000),
            -- Kafka's defaults for the compaction settings (revision 0033).
            coalesce(v_config ->> 'cleanup_policy', 'delete'),
            coalesce((v_config ->> 'min_compaction_lag_ms')::bigint, 0),
            (v_config ->> 'max_compaction_lag_ms')::bigint,  -- NULL: no limit
            coalesce((v_config ->> 'delete_retention_ms')::bigint, 86400000),
            coalesce((v_config ->> 'min_cleanable_dirty_ratio')::float8, 0.5))
    ON CONFLICT (name) DO NOTHING
    RETURNING topic_id INTO v_topic_id;
    IF v_topic_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL102', MESSAGE = format('topic %L already exists', p_name);
    END IF;
    INSERT INTO partitions (topic_id, partition)
    SELECT v_topic_id, p FROM generate_series(0, p_partitions - 1) AS p;
    RETURN v_topic_id;
END
$function$;

COMMENT ON FUNCTION create_topic_v1(text, integer, jsonb) IS 'CreateTopics: a topic with p_partitions partitions and a config object; OL102 if it exists, OL103/OL104/OL001 on bad input.';

REVOKE ALL ON FUNCTION create_topic_v1(text, integer, jsonb) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION create_topic_v1(text, integer, jsonb) TO @schema@_admin;

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
    -- (compact_v1), as Kafka's: time and size retention apply with delete among its policies.
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
        IF pt.retention_bytes IS NOT NULL AND pt.log_bytes > pt.retention_bytes THEN
            -- log_bytes counts the live log (from the log start), so drop the shortest prefix
            -- that brings it within the limit.
            SELECT coalesce(min(c."offset") + 1, v_start) INTO v_upto FROM (
                SELECT r."offset", sum(coalesce(octet_length(r.key), 0) + coalesce(octet_length(r.value), 0)
                                       + coalesce(octet_length(r.headers::text), 0)) OVER (ORDER BY r."offset") AS cum
                FROM records r
                WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition AND r."offset" >= pt.log_start_offset
            ) c WHERE c.cum >= pt.log_bytes - pt.retention_bytes;
            v_start := greatest(v_start, v_upto);
        END IF;
        v_start := least(v_start, pt.next_offset);
        IF v_start > pt.log_start_offset THEN
            -- The partition row is locked first, in a statement of its own, so that the update
            -- below reads the records as they are once it holds the lock: compaction (compact_v1)
            -- deletes and counts under the same lock, and a snapshot taken before its commit
            -- would count its deleted records a second time. DeleteRecords may have moved the
            -- log start meanwhile; it never moves back.
            PERFORM 1 FROM partitions p WHERE p.topic_id = pt.topic_id AND p.partition = pt.partition
            FOR NO KEY UPDATE;
            -- A short update of the partition row: readers stop returning what is below it at
            -- once, and the live byte count drops by what left the log.
            UPDATE partitions p
            SET log_start_offset = greatest(p.log_start_offset, v_start),
                log_bytes = greatest(p.log_bytes - coalesce((
                    SELECT sum(record_bytes_v1(r.key, r.value, r.headers))
                    FROM records r
                    WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition
                      AND r."offset" >= p.log_start_offset AND r."offset" < v_start), 0), 0)
            WHERE p.topic_id = pt.topic_id AND p.partition = pt.partition;
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
            IF jsonb_typeof(v) <> 'number' OR v::numeric < 0 OR v::numeric > 1 THEN
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

CREATE TRIGGER records_insert_check AFTER INSERT ON records REFERENCING NEW TABLE AS new_records FOR EACH STATEMENT EXECUTE FUNCTION records_insert_check_v2();

COMMENT ON TRIGGER records_insert_check ON records IS NULL;
