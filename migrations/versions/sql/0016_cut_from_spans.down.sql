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
                -- ... that have a record at or past some requested partition's limit: their last
                -- record there, from the spans EndTxn wrote (revision 0014).
                SELECT h.producer_id, h.txn_number FROM here h
                WHERE EXISTS (
                    SELECT 1 FROM txn_spans s
                    JOIN unnest(p_topic_ids, p_partitions, v_limits) AS o(topic_id, partition, lim)
                      ON s.topic_id = o.topic_id AND s.partition = o.partition AND s.last_offset >= o.lim
                    WHERE s.producer_id = h.producer_id AND s.txn_number = h.txn_number)
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
