ALTER TABLE fetch_waiters ADD COLUMN committed_once_until TIMESTAMP WITH TIME ZONE;

ALTER TABLE fetch_waiters ADD COLUMN uncommitted_once_until TIMESTAMP WITH TIME ZONE;

COMMENT ON TABLE fetch_waiters IS 'Readers waiting for records (fetch_wait_v1, fetch_wait_v2): a write to a partition with a reader waiting answers its producer with the partition''s wake token, which it NOTIFYs outside the write''s transaction (wake_readers_v1). Unlogged: emptied by a crash, which costs a waiting reader one poll interval.';

COMMENT ON COLUMN fetch_waiters.committed_once_until IS 'Until when a read_committed reader waits here for one wake-up (fetch_wait_v2); NULL once a wake-up was sent for it (wake_readers_v1), or if none waits.';

COMMENT ON COLUMN fetch_waiters.uncommitted_once_until IS 'Until when a read_uncommitted reader waits here for one wake-up (fetch_wait_v2); NULL once a wake-up was sent for it (wake_readers_v1), or if none waits.';

CREATE OR REPLACE FUNCTION fetch_wait_register_v1(p_topics text[], p_partitions integer[], p_read_committed boolean, p_wait_ms integer, p_once boolean)
 RETURNS TABLE(channel text, topic text, topic_id integer)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_channel text := wake_channel_v1();
    v_until timestamptz;
    v_lock_timeout text;
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
    -- A lasting registration (p_once false, fetch_wait_v1) holds until its time is up; a
    -- one-shot one (fetch_wait_v2) also ends with the first wake-up sent for it (wake_readers_v1).
    -- The upsert waits for a row another session holds: a reader registering (milliseconds), or
    -- anyone who keeps a transaction open after wake_readers_v1 or this function, which any
    -- client may do. Bounded as the wait below (revision 0042): past it nothing is registered,
    -- the answer has no rows, and the reader finds the records by its own looks.
    v_lock_timeout := current_setting('lock_timeout');
    BEGIN
        PERFORM set_config('lock_timeout', '250ms', true);
        INSERT INTO fetch_waiters AS w
            (topic_id, partition, committed_until, uncommitted_until, committed_once_until, uncommitted_once_until)
        SELECT DISTINCT t.topic_id, q.partition,
               CASE WHEN p_read_committed AND NOT p_once THEN v_until END,
               CASE WHEN NOT p_read_committed AND NOT p_once THEN v_until END,
               CASE WHEN p_read_committed AND p_once THEN v_until END,
               CASE WHEN NOT p_read_committed AND p_once THEN v_until END
        FROM unnest(p_topics, p_partitions) AS q(topic, partition)
        JOIN topics t ON t.name = q.topic
        JOIN partitions pt ON pt.topic_id = t.topic_id AND pt.partition = q.partition
        ORDER BY 1, 2
        ON CONFLICT ON CONSTRAINT pk_fetch_waiters DO UPDATE SET
            committed_until = greatest(w.committed_until, EXCLUDED.committed_until),
            uncommitted_until = greatest(w.uncommitted_until, EXCLUDED.uncommitted_until),
            committed_once_until = greatest(w.committed_once_until, EXCLUDED.committed_once_until),
            uncommitted_once_until = greatest(w.uncommitted_once_until, EXCLUDED.uncommitted_once_until);
        PERFORM set_config('lock_timeout', v_lock_timeout, true);
    EXCEPTION WHEN lock_not_available THEN
        RETURN;  -- the subtransaction's rollback restores lock_timeout
    END;
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

COMMENT ON FUNCTION fetch_wait_register_v1(text[], integer[], boolean, integer, boolean) IS 'Internal: registers a reader''s wait (fetch_wait_v1 lasting, fetch_wait_v2 one-shot), waits for the appends in flight on the partitions, LISTENs, and answers the channel and the topics'' ids; no rows when a session held the registration rows past 250 ms (nothing registered).';

REVOKE ALL ON FUNCTION fetch_wait_register_v1(text[], integer[], boolean, integer, boolean) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION fetch_wait_v2(p_topics text[], p_partitions integer[], p_read_committed boolean, p_wait_ms integer)
 RETURNS TABLE(channel text, topic text, topic_id integer)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
    SELECT * FROM fetch_wait_register_v1(p_topics, p_partitions, p_read_committed, p_wait_ms, true)
$function$;

COMMENT ON FUNCTION fetch_wait_v2(text[], integer[], boolean, integer) IS 'fetch_wait_v1, for one wait: the registration ends with the first wake-up sent for it (wake_readers_v1) or after p_wait_ms, whichever comes first, so writers stop naming the partitions once their readers have been woken. A reader registers again before it waits again. Writes answer with the partition''s wake token while it holds, as for fetch_wait_v1.';

REVOKE ALL ON FUNCTION fetch_wait_v2(text[], integer[], boolean, integer) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION fetch_wait_v2(text[], integer[], boolean, integer) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION wake_payloads_v1(p_tokens text[])
 RETURNS SETOF text
 LANGUAGE sql
 IMMUTABLE
 SET search_path FROM CURRENT
AS $function$
    -- Each token once, in payloads of 350 tokens at most: a token is at most 21 bytes
    -- (topic_id:partition, each at most 2147483647), so a payload stays under PostgreSQL's 8000.
    SELECT string_agg(c.token, ',' ORDER BY c.n)
    FROM (SELECT d.token, d.n, (d.n - 1) / 350 AS chunk
          FROM (SELECT u.token, row_number() OVER (ORDER BY u.token) AS n
                FROM (SELECT DISTINCT token FROM unnest(p_tokens) AS t(token) WHERE token IS NOT NULL) u) d) c
    GROUP BY c.chunk
    ORDER BY c.chunk
$function$;

COMMENT ON FUNCTION wake_payloads_v1(text[]) IS 'Internal: the NOTIFY payloads that carry these wake tokens (each once, comma-separated, 350 to a payload).';

REVOKE ALL ON FUNCTION wake_payloads_v1(text[]) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION wake_readers_v1(p_tokens text[])
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_n integer := coalesce(cardinality(p_tokens), 0);
    v_topic_ids integer[];
    v_partitions integer[];
    v_payload text;
    v_sent integer := 0;
BEGIN
    IF v_n > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('wake the readers of 0 to 10000 partitions at once, not %s', v_n);
    ELSIF v_n = 0 THEN
        RETURN 0;
    END IF;
    -- A malformed token parses to NULL (CASE: no cast runs on what the pattern refused). Only
    -- the canonical form, as writes answer it: readers match the NOTIFY's text, so '01:0' would
    -- end partition 1:0's registrations and wake nobody.
    SELECT array_agg(CASE WHEN u.token ~ '^(0|[1-9][0-9]{0,9}):(0|[1-9][0-9]{0,9})$'
                               AND split_part(u.token, ':', 1)::bigint <= 2147483647
                               AND split_part(u.token, ':', 2)::bigint <= 2147483647
                          THEN split_part(u.token, ':', 1)::integer END),
           array_agg(CASE WHEN u.token ~ '^(0|[1-9][0-9]{0,9}):(0|[1-9][0-9]{0,9})$'
                               AND split_part(u.token, ':', 2)::bigint <= 2147483647
                          THEN split_part(u.token, ':', 2)::integer END)
      INTO v_topic_ids, v_partitions
    FROM unnest(p_tokens) AS u(token);
    IF array_position(v_topic_ids, NULL) IS NOT NULL OR array_position(v_partitions, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = format(
            'a wake token is topic_id:partition, as a write answered it, not %s',
            coalesce(quote_literal(p_tokens[coalesce(array_position(v_topic_ids, NULL), array_position(v_partitions, NULL))]), 'NULL'));
    END IF;
    -- One-shot registrations (fetch_wait_v2) end here, in the transaction that NOTIFYs: every
    -- reader that made one hears this NOTIFY (it LISTENs since its registration committed), and
    -- registers again before it waits again; until then writers stop naming the partition, so a
    -- busy partition costs one NOTIFY per wait of its readers, not one per write. A row a reader
    -- is registering on right now is left alone (SKIP LOCKED: a wake-up never waits on a
    -- reader): its registration then holds for the next write, and the reader's fetch after it
    -- sees the write this wakes for. Lasting registrations (fetch_wait_v1) are not touched.
    UPDATE fetch_waiters w SET committed_once_until = NULL, uncommitted_once_until = NULL
    FROM (SELECT f.topic_id, f.partition
          FROM fetch_waiters f
          JOIN unnest(v_topic_ids, v_partitions) AS u(topic_id, partition)
            ON f.topic_id = u.topic_id AND f.partition = u.partition
          WHERE f.committed_once_until IS NOT NULL OR f.uncommitted_once_until IS NOT NULL
          ORDER BY f.topic_id, f.partition
          FOR UPDATE OF f SKIP LOCKED) d
    WHERE w.topic_id = d.topic_id AND w.partition = d.partition;
    IF v_n = 1 THEN  -- the common case, without the payloads' aggregate (any array bounds)
        PERFORM pg_notify(wake_channel_v1(), u.token) FROM unnest(p_tokens) AS u(token);
        RETURN 1;
    END IF;
    FOR v_payload IN SELECT wake_payloads_v1(p_tokens) LOOP
        PERFORM pg_notify(wake_channel_v1(), v_payload);
        v_sent := v_sent + 1;
    END LOOP;
    RETURN v_sent;
END
$function$;

COMMENT ON FUNCTION wake_readers_v1(text[]) IS 'Wakes the readers waiting on the partitions of these wake tokens (topic_id:partition, as a write answered them): NOTIFYs the schema''s channel (wake_channel_v1()) with them, and ends the one-shot registrations (fetch_wait_v2) they answered, so later writes do not name those partitions until their readers register again. Call it after the write committed, in a transaction of its own: the NOTIFY is delivered at its commit. Answers the NOTIFYs sent (350 tokens to a payload). Tokens in their canonical form only, at most 10000. Any client may wake any partition''s readers: each reader woken fetches, and registers again if it then finds nothing.';

REVOKE ALL ON FUNCTION wake_readers_v1(text[]) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION wake_readers_v1(text[]) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION fetch_wait_v1(p_topics text[], p_partitions integer[], p_read_committed boolean, p_wait_ms integer)
 RETURNS TABLE(channel text, topic text, topic_id integer)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
    SELECT * FROM fetch_wait_register_v1(p_topics, p_partitions, p_read_committed, p_wait_ms, false)
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
      AND ((p_committed AND greatest(w.committed_until, w.committed_once_until) > server_now_v1())
           OR (p_uncommitted AND greatest(w.uncommitted_until, w.uncommitted_once_until) > server_now_v1()));
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
    WHERE ps.producer_id = p_producer_id AND greatest(w.committed_until, w.committed_once_until) > server_now_v1()
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
    WHERE s.producer_id = p_producer_id AND s.txn_number = p_txn_number
      AND greatest(w.committed_until, w.committed_once_until) > server_now_v1();
    RETURN v_tokens;
END
$function$;

COMMENT ON FUNCTION txn_waiters_v1(bigint, bigint) IS 'Internal: the wake tokens (topic_id:partition) of the partitions of a just committed transaction on which a read_committed reader waits.';

REVOKE ALL ON FUNCTION txn_waiters_v1(bigint, bigint) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION wake_channel_v1()
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $function$
BEGIN
    -- One channel per oncelog schema (a database may hold several), named by the schema's oid: a
    -- channel is an identifier of at most 63 bytes, which a schema name alone can fill.
    -- plpgsql, not sql (revision 0042): PostgreSQL 15 plans a non-inlined SQL function's query
    -- again in every transaction (30 us here), and every wake-up and registration asks.
    RETURN 'oncelog_wake_' || current_schema()::regnamespace::oid;
END
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
    FOR v_payload IN SELECT wake_payloads_v1(p_tokens) LOOP
        PERFORM pg_notify(wake_channel_v1(), v_payload);
    END LOOP;
END
$function$;

COMMENT ON FUNCTION wake_notify_v1(text[]) IS 'Internal: wakes the readers of these wake tokens with a NOTIFY delivered at the caller''s commit (the outbox''s flush, a fence''s abort); nothing on a server that allows PREPARE TRANSACTION.';

REVOKE ALL ON FUNCTION wake_notify_v1(text[]) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;
