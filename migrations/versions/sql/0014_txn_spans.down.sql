CREATE INDEX ix_records_producer_id_txn_number ON records (producer_id, txn_number) WHERE is_transactional;

CREATE OR REPLACE FUNCTION consistent_limits_v1(p_topic_ids integer[], p_partitions integer[], p_starts bigint[],
                                     p_limits bigint[], p_scan_ends bigint[])
RETURNS bigint[]
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_limits bigint[] := p_limits;
    v_changed boolean := true;
    v_cut bigint;
    i integer;
BEGIN
    WHILE v_changed LOOP
        v_changed := false;
        FOR i IN 1 .. coalesce(cardinality(p_topic_ids), 0) LOOP
            WITH here AS MATERIALIZED (
                -- Committed transactions among the records this read would return here (bounded
                -- by the scan end, the reader's record cap).
                SELECT DISTINCT r.producer_id, r.txn_number FROM records r
                WHERE r.topic_id = p_topic_ids[i] AND r.partition = p_partitions[i]
                  AND r."offset" >= p_starts[i] AND r."offset" < least(v_limits[i], p_scan_ends[i])
                  AND r.is_transactional AND r.control_type IS NULL AND NOT r.aborted
            ), torn AS (
                -- ... that have a record at or past some requested partition's limit. The probe
                -- goes through the (producer_id, txn_number) index of transactional records.
                SELECT h.producer_id, h.txn_number FROM here h
                WHERE EXISTS (
                    SELECT 1 FROM records x
                    JOIN unnest(p_topic_ids, p_partitions, v_limits) AS o(topic_id, partition, lim)
                      ON x.topic_id = o.topic_id AND x.partition = o.partition AND x."offset" >= o.lim
                    WHERE x.is_transactional AND x.producer_id = h.producer_id AND x.txn_number = h.txn_number
                      AND x.control_type IS NULL)
            )
            SELECT min(r."offset") INTO v_cut FROM records r JOIN torn USING (producer_id, txn_number)
            WHERE r.topic_id = p_topic_ids[i] AND r.partition = p_partitions[i] AND r.is_transactional
              AND r."offset" >= p_starts[i] AND r."offset" < v_limits[i];
            IF v_cut IS NOT NULL AND v_cut < v_limits[i] THEN
                v_limits[i] := v_cut;
                v_changed := true;
            END IF;
        END LOOP;
    END LOOP;
    RETURN v_limits;
END
$fn$;

CREATE OR REPLACE FUNCTION txn_complete_v1(p_transactional_id text, p_commit boolean) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    t transactions%ROWTYPE;
    v_epoch smallint;
    tp record;
    v_marker bigint;
BEGIN
    SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id;
    IF t.state <> 'Ongoing' THEN
        RAISE EXCEPTION USING ERRCODE = 'OL303',
            MESSAGE = format('transaction of %L is %s, not Ongoing', p_transactional_id, t.state);
    END IF;
    UPDATE transactions x SET state = CASE WHEN p_commit THEN 'PrepareCommit' ELSE 'PrepareAbort' END
    WHERE x.transactional_id = p_transactional_id;
    SELECT p.epoch INTO v_epoch FROM producers p WHERE p.producer_id = t.producer_id;
    -- Partitions in (topic_id, partition) order, the documented lock order. A partition the
    -- transaction never wrote to needs no marker.
    FOR tp IN
        SELECT x.topic_id, x.partition, x.first_offset FROM txn_partitions x
        WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL
        ORDER BY x.topic_id, x.partition
    LOOP
        SELECT pt.next_offset INTO v_marker FROM partitions pt
        WHERE pt.topic_id = tp.topic_id AND pt.partition = tp.partition
        FOR NO KEY UPDATE;
        IF NOT p_commit THEN
            -- The producer has one open transaction, so its records from the first offset on are
            -- this transaction's. Only aborts rewrite rows; commits touch no data row.
            UPDATE records r SET aborted = true
            WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition
              AND r."offset" >= tp.first_offset AND r."offset" < v_marker
              AND r.producer_id = t.producer_id AND r.is_transactional AND r.control_type IS NULL;
        END IF;
        INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, is_transactional, control_type,
                             txn_number)
        VALUES (tp.topic_id, tp.partition, v_marker, t.producer_id, v_epoch, true,
                CASE WHEN p_commit THEN 'commit' ELSE 'abort' END, t.txn_number);
        UPDATE partitions pt SET next_offset = v_marker + 1
        WHERE pt.topic_id = tp.topic_id AND pt.partition = tp.partition;
    END LOOP;
    IF p_commit THEN
        -- KIP-447: pending offsets become committed only if written after the committed ones.
        INSERT INTO committed_offsets AS c
            (group_id, topic_id, partition, committed_offset, metadata, commit_seq, producer_id, committed_at)
        SELECT po.group_id, po.topic_id, po.partition, po.committed_offset, po.metadata, po.commit_seq,
               po.producer_id, now()
        FROM pending_offsets po WHERE po.transactional_id = p_transactional_id
        ON CONFLICT ON CONSTRAINT pk_committed_offsets DO UPDATE SET
            committed_offset = EXCLUDED.committed_offset, metadata = EXCLUDED.metadata,
            commit_seq = EXCLUDED.commit_seq, producer_id = EXCLUDED.producer_id,
            committed_at = EXCLUDED.committed_at
        WHERE c.commit_seq < EXCLUDED.commit_seq;
    END IF;
    DELETE FROM pending_offsets po WHERE po.transactional_id = p_transactional_id;
    DELETE FROM txn_partitions x WHERE x.transactional_id = p_transactional_id;
    UPDATE transactions x
    SET state = CASE WHEN p_commit THEN 'CompleteCommit' ELSE 'CompleteAbort' END, txn_started_at = NULL
    WHERE x.transactional_id = p_transactional_id;
END
$fn$;

CREATE OR REPLACE FUNCTION enforce_retention_v1(p_batch integer DEFAULT 10000, p_now timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $fn$
DECLARE
    pt record;
    v_start bigint;
    v_upto bigint;
    v_first bigint;
    v_deleted bigint := 0;
    v_n bigint;
    v_now_ms numeric := extract(epoch FROM p_now) * 1000;
BEGIN
    IF p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'batch must be at least 1';
    END IF;
    -- Every partition: one with no retention may still hold rows below its log start (left by
    -- an earlier pass before retention was turned off); the min() probe is one index lookup.
    FOR pt IN
        SELECT p.topic_id, p.partition, p.log_start_offset, p.next_offset, p.log_bytes, t.retention_ms, t.retention_bytes
        FROM partitions p JOIN topics t USING (topic_id)
        ORDER BY p.topic_id, p.partition
    LOOP
        v_start := pt.log_start_offset;
        -- A retention longer than the time since 1970 cannot apply (and would overflow).
        IF pt.retention_ms IS NOT NULL AND pt.retention_ms < v_now_ms THEN
            -- The log start moves past the oldest records, up to the first one still young enough.
            SELECT coalesce(min(r."offset"), pt.next_offset) INTO v_upto FROM (
                SELECT r."offset" FROM records r
                WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition AND r."offset" >= v_start
                  AND r."timestamp" >= p_now - make_interval(secs => pt.retention_ms / 1000.0)
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
            -- A short update of the partition row: readers stop returning what is below it at
            -- once, and the live byte count drops by what left the log.
            UPDATE partitions p
            SET log_start_offset = v_start,
                log_bytes = greatest(p.log_bytes - coalesce((
                    SELECT sum(coalesce(octet_length(r.key), 0) + coalesce(octet_length(r.value), 0)
                               + coalesce(octet_length(r.headers::text), 0))
                    FROM records r
                    WHERE r.topic_id = pt.topic_id AND r.partition = pt.partition
                      AND r."offset" >= pt.log_start_offset AND r."offset" < v_start), 0), 0)
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
    END LOOP;
    RETURN v_deleted;
END
$fn$;

DROP INDEX ix_txn_spans_topic_id_partition_last_offset;

DROP TABLE txn_spans;
