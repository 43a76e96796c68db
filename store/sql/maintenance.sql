-- Maintenance: transaction timeouts and expiry, producer state expiry, retention of records and
-- of the transaction history. The time is the server's (server_now_v1): no function a client or
-- admin may call takes it from its caller.

CREATE OR REPLACE FUNCTION server_now_v1()
 RETURNS timestamp with time zone
 LANGUAGE sql
 SET search_path FROM CURRENT
AS $fn$
    -- The one source of "now" for maintenance. No function a client or admin can call takes the
    -- time from its caller: with a caller's time, 'infinity' aborted every open transaction.
    SELECT coalesce(c.frozen_at, clock_timestamp()) FROM clock c
$fn$;
COMMENT ON FUNCTION server_now_v1() IS
  'Internal: the server''s time (clock_timestamp), or clock.frozen_at, which only the owner can set (tests).';

CREATE OR REPLACE FUNCTION expire_transactions_v2()
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    -- The time is the server's (revision 0017): v1 took it from its caller, so any client could
    -- pass 'infinity' and abort every open transaction.
    v_now timestamptz := server_now_v1();
    v_id text;
    v_n integer := 0;
    v_idle bigint := (SELECT s.transactional_id_expiration_ms FROM settings s);
BEGIN
    -- At most ONE abort per call (the caller loops, one database transaction each): aborting two
    -- here would hold the first one's partition locks while taking the second's, out of the
    -- (topic_id, partition) lock order. SKIP LOCKED: a transaction being committed or appended to
    -- right now is not waited for.
    SELECT x.transactional_id INTO v_id FROM transactions x
    WHERE x.state = 'Ongoing' AND x.txn_started_at + make_interval(secs => x.timeout_ms / 1000.0) < v_now
    ORDER BY x.txn_started_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF v_id IS NOT NULL THEN
        PERFORM txn_fence_abort_v1(v_id, true);
        v_n := 1;
    END IF;
    -- Rule 21: transactional ids idle in Empty/Complete* past the expiration become Dead.
    UPDATE transactions x SET state = 'Dead'
    WHERE x.transactional_id IN (
        SELECT y.transactional_id FROM transactions y
        WHERE y.state IN ('Empty', 'CompleteCommit', 'CompleteAbort')
          AND y.updated_at < v_now - make_interval(secs => v_idle / 1000.0)
        FOR UPDATE SKIP LOCKED);
    RETURN v_n;
END
$fn$;
COMMENT ON FUNCTION expire_transactions_v2() IS
  'Maintenance, at the server''s time (server_now_v1) (also called by readers that meet an expired transaction): fences and aborts the oldest transaction open past its timeout (one per call, to keep the lock order: call again until 0), and moves transactional ids idle past transactional_id_expiration_ms to Dead. Returns the number aborted (0 or 1).';

CREATE OR REPLACE FUNCTION expire_producers_v2()
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    -- The time is the server's (revision 0017): v1 took it from its caller, so any client could
    -- pass 'infinity' and abort every open transaction.
    v_now timestamptz := server_now_v1();
    v_cutoff timestamptz := v_now - make_interval(secs => (SELECT producer_id_expiration_ms FROM settings) / 1000.0);
    v_states integer;
BEGIN
    -- Sequence state idle past the expiration goes (SKIP LOCKED: never wait behind an append).
    WITH gone AS (
        DELETE FROM producer_partition_state ps
        WHERE (ps.producer_id, ps.topic_id, ps.partition) IN (
            SELECT x.producer_id, x.topic_id, x.partition FROM producer_partition_state x
            WHERE x.updated_at < v_cutoff FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*) INTO v_states FROM gone;
    -- Idempotent producer ids idle past it, with no state left anywhere, are forgotten.
    DELETE FROM producers p
    WHERE p.transactional_id IS NULL AND p.last_used_at < v_cutoff
      AND NOT EXISTS (SELECT 1 FROM producer_partition_state x WHERE x.producer_id = p.producer_id)
      AND NOT EXISTS (SELECT 1 FROM transactions t WHERE t.producer_id = p.producer_id)
      AND p.producer_id IN (SELECT y.producer_id FROM producers y WHERE y.last_used_at < v_cutoff FOR UPDATE SKIP LOCKED);
    RETURN v_states;
END
$fn$;
COMMENT ON FUNCTION expire_producers_v2() IS
  'Maintenance, at the server''s time (server_now_v1): removes producer sequence state idle longer than settings.producer_id_expiration_ms, then idempotent producer ids with no state left; returns the number of sequence-state rows removed.';

CREATE OR REPLACE FUNCTION enforce_retention_v2(p_batch integer DEFAULT 10000)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
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
                    SELECT r."offset", sum(coalesce(octet_length(r.key), 0) + coalesce(octet_length(r.value), 0)
                                           + coalesce(octet_length(r.headers::text), 0)) OVER (ORDER BY r."offset") AS cum
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
                        SELECT sum(coalesce(octet_length(r.key), 0) + coalesce(octet_length(r.value), 0)
                                   + coalesce(octet_length(r.headers::text), 0))
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
$fn$;
COMMENT ON FUNCTION enforce_retention_v2(p_batch integer) IS
  'Maintenance, at the server''s time (server_now_v1): advances each partition''s log start by its topic''s retention (time: its retention_ms, else settings.log_retention_ms, none for -1; size: retention_bytes; neither for cleanup_policy compact alone) and deletes at most p_batch records per partition below it; returns the number deleted (call again until 0).';

CREATE OR REPLACE FUNCTION expire_txn_history_v2(p_batch integer DEFAULT 10000)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    -- The time is the server's (revision 0017): v1 took it from its caller, so any client could
    -- pass 'infinity' and abort every open transaction.
    v_now timestamptz := server_now_v1();
    v_before timestamptz;
    v_n integer;
BEGIN
    IF p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'batch must be at least 1';
    END IF;
    v_before := v_now - make_interval(secs => (SELECT s.txn_history_retention_ms FROM settings s) / 1000.0);
    PERFORM set_config('oncelog.pruning_txn_history', 'on', true);
    -- Oldest first, at most p_batch rows per call (the caller loops, one transaction each), so a
    -- large backlog never holds locks or bloats one transaction. Rows are immutable and only this
    -- function deletes them, so no lock order is involved.
    DELETE FROM txn_history h
    WHERE h.id IN (
        SELECT x.id FROM txn_history x
        WHERE x.at < v_before
          AND NOT (x.to_state = 'CompleteCommit' AND x.id = (
                SELECT max(y.id) FROM txn_history y
                WHERE y.transactional_id = x.transactional_id AND y.to_state = 'CompleteCommit'))
        ORDER BY x.id
        LIMIT p_batch);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    PERFORM set_config('oncelog.pruning_txn_history', 'off', true);
    RETURN v_n;
END
$fn$;
COMMENT ON FUNCTION expire_txn_history_v2(p_batch integer) IS
  'Maintenance, at the server''s time (server_now_v1): deletes up to p_batch txn_history rows older than settings.txn_history_retention_ms, keeping the newest CompleteCommit row of every transactional id. Returns the number deleted (call again until 0).';

CREATE OR REPLACE FUNCTION refuse_change_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'OL000',
        MESSAGE = format('%s is append-only: %s is refused', TG_TABLE_NAME, TG_OP);
END
$fn$;
COMMENT ON FUNCTION refuse_change_v1() IS
  'Trigger: refuses UPDATE and DELETE on append-only tables.';
