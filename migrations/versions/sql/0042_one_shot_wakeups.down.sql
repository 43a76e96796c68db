DROP FUNCTION fetch_wait_register_v1(text[], integer[], boolean, integer, boolean);

DROP FUNCTION fetch_wait_v2(text[], integer[], boolean, integer);

DROP FUNCTION wake_payloads_v1(text[]);

DROP FUNCTION wake_readers_v1(text[]);

CREATE OR REPLACE FUNCTION fetch_wait_v1(p_topics text[], p_partitions integer[], p_read_committed boolean, p_wait_ms integer)
 RETURNS TABLE(channel text, topic text, topic_id integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_channel text := wake_channel_v1();
    v_until timestamptz;
BEGIN
    IF coalesce(cardinality(p_topics), 0) <> coalesce(cardinality(p_partitions), 0)
       OR coalesce(cardinality(p_topics), 0) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'name 0 to 10000 partitions, as topics and partitions of one length';
    END IF;
    IF p_read_committed IS NULL OR p_wait_ms IS NULL OR p_wait_ms < 0 OR p_wait_ms > 300000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('a wait names its isolation and lasts 0 to 300000 ms, not %s', p_wait_ms);
    END IF;
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', p_topics, 'read');
    END IF;
    -- This transaction writes only the unlogged waiters and takes row locks: nothing a crash
    -- must keep, so its commit does not wait for a WAL flush (until the end of this transaction).
    PERFORM set_config('synchronous_commit', 'off', true);
    v_until := server_now_v1() + make_interval(secs => p_wait_ms / 1000.0);
    INSERT INTO fetch_waiters AS w (topic_id, partition, committed_until, uncommitted_until)
    SELECT DISTINCT t.topic_id, q.partition,
           CASE WHEN p_read_committed THEN v_until END, CASE WHEN NOT p_read_committed THEN v_until END
    FROM unnest(p_topics, p_partitions) AS q(topic, partition)
    JOIN topics t ON t.name = q.topic
    JOIN partitions pt ON pt.topic_id = t.topic_id AND pt.partition = q.partition
    ORDER BY 1, 2
    ON CONFLICT ON CONSTRAINT pk_fetch_waiters DO UPDATE SET
        committed_until = greatest(w.committed_until, EXCLUDED.committed_until),
        uncommitted_until = greatest(w.uncommitted_until, EXCLUDED.uncommitted_until);
    -- An append checks for waiters under its partition's lock (produce_batches_v1, the commits).
    -- Wait here until the appends holding these partitions now have finished: they committed
    -- before the caller's next fetch (which then sees them), and every later one sees this
    -- registration and wakes the caller. FOR SHARE is the row lock that conflicts with an
    -- append's; it is taken in the lock order and released at once (the subtransaction rolls
    -- back), so no reader holds up a writer beyond that. The wait is bounded (revision 0023):
    -- an append holds a partition for milliseconds, but a prepared transaction (PREPARE
    -- TRANSACTION after oncelog.send) holds it until it is resolved, and a reader must not hang
    -- on it. Past the bound the reader registers all the same and, for the appends it did not
    -- wait out, relies on its own next look, as for the window described in docs/design.md.
    BEGIN
        PERFORM set_config('lock_timeout', '250ms', true);  -- undone with the subtransaction
        PERFORM 1 FROM partitions pt JOIN topics t ON t.topic_id = pt.topic_id
        WHERE (t.name, pt.partition) IN (SELECT q.topic, q.partition FROM unnest(p_topics, p_partitions) AS q(topic, partition))
        ORDER BY pt.topic_id, pt.partition
        FOR SHARE OF pt;
        RAISE EXCEPTION USING ERRCODE = 'OLW00', MESSAGE = 'release the locks';
    EXCEPTION WHEN SQLSTATE 'OLW00' OR lock_not_available THEN
        NULL;
    END;
    EXECUTE format('LISTEN %I', v_channel);
    RETURN QUERY SELECT v_channel, t.name, t.topic_id FROM topics t WHERE t.name = ANY(p_topics) ORDER BY t.topic_id;
END
$function$;

COMMENT ON FUNCTION fetch_wait_v1(text[], integer[], boolean, integer) IS 'A reader about to wait for records on these partitions (read_committed: for commits; otherwise for appends): registers the wait for p_wait_ms (up to 5 minutes), waits for the appends in flight on them to finish, and LISTENs on the schema''s channel, returned with the topics'' ids. A write that lands on a waited-on partition answers its producer with the partition''s wake token (topic_id:partition), which the producer NOTIFYs on the channel, outside the write''s transaction. The caller then fetches once more before it waits: what committed before the registration is seen by that fetch, what commits after it wakes the caller.';

REVOKE ALL ON FUNCTION fetch_wait_v1(text[], integer[], boolean, integer) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION fetch_wait_v1(text[], integer[], boolean, integer) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION fetch_waiting_v1(p_topic text, p_partition integer, p_committed boolean, p_uncommitted boolean)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_token text;
BEGIN
    SELECT t.topic_id || ':' || w.partition INTO v_token
    FROM fetch_waiters w JOIN topics t ON t.topic_id = w.topic_id
    WHERE t.name = p_topic AND w.partition = p_partition
      AND ((p_committed AND w.committed_until > server_now_v1())
           OR (p_uncommitted AND w.uncommitted_until > server_now_v1()));
    RETURN v_token;
END
$function$;

COMMENT ON FUNCTION fetch_waiting_v1(text, integer, boolean, boolean) IS 'Internal: the wake token (topic_id:partition) of a partition on which a read_committed (p_committed) or read_uncommitted (p_uncommitted) reader waits now; NULL if none does.';

REVOKE ALL ON FUNCTION fetch_waiting_v1(text, integer, boolean, boolean) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION txn_abort_waiters_v1(p_producer_id bigint, p_txn_number bigint)
 RETURNS text[]
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_tokens text[];
BEGIN
    -- The partitions a just aborted transaction wrote to on which a read_committed reader waits.
    -- The abort makes none of its own records readable, but its open transaction held each of
    -- those partitions' last stable offset back: records committed behind it (other producers'
    -- transactions, idempotent appends) become readable with the abort, as with a commit.
    -- Called right after the abort, under the partition locks it took, so the abort's marker is
    -- each such partition's last record (next_offset - 1). The producer's sequence states name
    -- every partition it appended to (an index range of the primary key), and only those with
    -- a reader waiting are looked at further, each by primary key.
    SELECT array_agg(ps.topic_id || ':' || ps.partition ORDER BY ps.topic_id, ps.partition) INTO v_tokens
    FROM producer_partition_state ps
    JOIN fetch_waiters w ON w.topic_id = ps.topic_id AND w.partition = ps.partition
    JOIN partitions pt ON pt.topic_id = ps.topic_id AND pt.partition = ps.partition
    JOIN records r ON r.topic_id = pt.topic_id AND r.partition = pt.partition AND r."offset" = pt.next_offset - 1
    WHERE ps.producer_id = p_producer_id AND w.committed_until > server_now_v1()
      AND r.control_type = 'abort' AND r.producer_id = p_producer_id AND r.txn_number = p_txn_number;
    RETURN v_tokens;
END
$function$;

COMMENT ON FUNCTION txn_abort_waiters_v1(bigint, bigint) IS 'Internal: the wake tokens (topic_id:partition) of the partitions of a just aborted transaction on which a read_committed reader waits (the abort moved their last stable offsets on).';

REVOKE ALL ON FUNCTION txn_abort_waiters_v1(bigint, bigint) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION txn_waiters_v1(p_producer_id bigint, p_txn_number bigint)
 RETURNS text[]
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_tokens text[];
BEGIN
    -- The partitions a committed transaction wrote to (its spans) on which a read_committed
    -- reader waits. Called right after the commit, under the partitions' locks it took.
    SELECT array_agg(s.topic_id || ':' || s.partition ORDER BY s.topic_id, s.partition) INTO v_tokens
    FROM txn_spans s
    JOIN fetch_waiters w ON w.topic_id = s.topic_id AND w.partition = s.partition
    WHERE s.producer_id = p_producer_id AND s.txn_number = p_txn_number AND w.committed_until > server_now_v1();
    RETURN v_tokens;
END
$function$;

COMMENT ON FUNCTION txn_waiters_v1(bigint, bigint) IS 'Internal: the wake tokens (topic_id:partition) of the partitions of a just committed transaction on which a read_committed reader waits.';

REVOKE ALL ON FUNCTION txn_waiters_v1(bigint, bigint) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION wake_channel_v1()
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path FROM CURRENT
AS $function$
    -- One channel per oncelog schema (a database may hold several), named by the schema's oid: a
    -- channel is an identifier of at most 63 bytes, which a schema name alone can fill.
    SELECT 'oncelog_wake_' || n.oid FROM pg_namespace n WHERE n.nspname = current_schema()
$function$;

COMMENT ON FUNCTION wake_channel_v1() IS 'The LISTEN/NOTIFY channel on which this schema''s waiting readers are woken: a producer NOTIFYs it with the wake tokens (topic_id:partition, comma-separated) a write answered with.';

REVOKE ALL ON FUNCTION wake_channel_v1() FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION wake_channel_v1() TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION wake_notify_v1(p_tokens text[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_payload text;
BEGIN
    -- Wakes from inside the caller's transaction the readers of ``p_tokens``, for a write with no
    -- producer to send the NOTIFY after it (a record sent in the application's own transaction,
    -- revision 0023; an abort by a fence or a timeout, 0041). PostgreSQL delivers the NOTIFY at
    -- the commit and drops it with a rollback; the commit then waits for the server's
    -- notification lock, so only writes that found a reader waiting call this. Nothing on a
    -- server that can PREPARE TRANSACTION, which refuses to prepare a transaction that has
    -- notified: there the readers find the records by their own next look.
    IF current_setting('max_prepared_transactions')::integer > 0 THEN
        RETURN;
    END IF;
    -- Payloads of 500 tokens at most, well under PostgreSQL's 8000 bytes.
    FOR v_payload IN
        SELECT string_agg(c.token, ',' ORDER BY c.n)
        FROM (SELECT u.token, u.n, (u.n - 1) / 500 AS chunk
              FROM unnest(p_tokens) WITH ORDINALITY AS u(token, n) WHERE u.token IS NOT NULL) c
        GROUP BY c.chunk
    LOOP
        PERFORM pg_notify(wake_channel_v1(), v_payload);
    END LOOP;
END
$function$;

COMMENT ON FUNCTION wake_notify_v1(text[]) IS 'Internal: wakes the readers of these wake tokens with a NOTIFY delivered at the caller''s commit (the outbox''s flush, a fence''s abort); nothing on a server that allows PREPARE TRANSACTION.';

REVOKE ALL ON FUNCTION wake_notify_v1(text[]) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

COMMENT ON TABLE fetch_waiters IS 'Readers waiting for records (fetch_wait_v1): a write to a partition with a reader waiting answers its producer with the partition''s wake token, which it NOTIFYs outside the write''s transaction. Unlogged: emptied by a crash, which costs a waiting reader one poll interval.';

ALTER TABLE fetch_waiters DROP COLUMN uncommitted_once_until;

ALTER TABLE fetch_waiters DROP COLUMN committed_once_until;
