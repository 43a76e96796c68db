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

CREATE OR REPLACE FUNCTION end_txn_v2(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_commit boolean, OUT outcome text, OUT wake text[])
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
BEGIN
    outcome := end_txn_v1(p_transactional_id, p_producer_id, p_epoch, p_txn_number, p_commit);
    IF outcome = 'committed' THEN
        wake := txn_waiters_v1(p_producer_id, p_txn_number);
    ELSIF outcome = 'aborted' THEN
        -- An abort shows none of its records, but it stops holding its partitions' last stable
        -- offsets back (revision 0041): what committed behind it becomes readable at once. (One
        -- past its timeout was a fence, which woke them itself: txn_fence_abort_v1.)
        wake := txn_abort_waiters_v1(p_producer_id, p_txn_number);
    END IF;
END
$function$;

COMMENT ON FUNCTION end_txn_v2(text, bigint, smallint, bigint, boolean) IS 'end_txn_v1, and the tokens (topic_id:partition) of the partitions of the commit or abort on which a read_committed reader waits (an abort moves their last stable offsets on, so records committed behind it become readable): the caller wakes them, outside this transaction, with a NOTIFY on the schema''s channel (wake_channel_v1()).';

REVOKE ALL ON FUNCTION end_txn_v2(text, bigint, smallint, bigint, boolean) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION end_txn_v2(text, bigint, smallint, bigint, boolean) TO @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION outbox_flush_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
DECLARE
    b record;
    v_topics text[];
    v_partitions integer[];
    v_counts integer[];
    v_keys bytea[];
    v_values bytea[];
    v_headers jsonb[];
    v_whole boolean;
    v_appended integer := 0;
BEGIN
    -- Deferred to the commit, once per staged row: the first appends every record the
    -- transaction staged, the others find nothing left.
    IF NOT EXISTS (SELECT 1 FROM outbox_records o WHERE o.xact_id = NEW.xact_id) THEN
        RETURN NULL;
    END IF;
    -- Every partition the transaction sent to, locked in (topic_id, partition) order, the
    -- documented lock order, and held through the commit that follows. Only those of topics the
    -- caller may still write (as produce_batches_v1): an ACL revoked since the send is refused
    -- below by produce_v2, and the caller never held a partition it has no right to.
    PERFORM 1 FROM partitions pt JOIN topics t ON t.topic_id = pt.topic_id
    WHERE (pt.topic_id, pt.partition) IN (SELECT o.topic_id, o.partition FROM outbox_records o WHERE o.xact_id = NEW.xact_id)
      AND acl_allowed_v1('topic', t.name, 'write')
    ORDER BY pt.topic_id, pt.partition
    FOR NO KEY UPDATE OF pt;
    -- One batch per partition, records in the order they were sent, appended all at once
    -- (append_batches_v2, revision 0023) when the transaction sent to several partitions and none
    -- holds more than max_batch_records. A single batch goes to produce_v2, which costs less.
    SELECT array_agg(t.name ORDER BY c.topic_id, c.partition), array_agg(c.partition ORDER BY c.topic_id, c.partition),
           array_agg(c.n ORDER BY c.topic_id, c.partition), bool_and(c.n <= s.max_batch_records)
    INTO v_topics, v_partitions, v_counts, v_whole
    FROM (SELECT o.topic_id, o.partition, count(*)::integer AS n FROM outbox_records o WHERE o.xact_id = NEW.xact_id
          GROUP BY o.topic_id, o.partition) c
    JOIN topics t ON t.topic_id = c.topic_id
    CROSS JOIN settings s;
    IF v_whole AND cardinality(v_topics) > 1 THEN
        SELECT array_agg(o.key ORDER BY o.topic_id, o.partition, o.seq), array_agg(o.value ORDER BY o.topic_id, o.partition, o.seq),
               CASE WHEN bool_or(o.headers IS NOT NULL) THEN array_agg(o.headers ORDER BY o.topic_id, o.partition, o.seq) END
        INTO v_keys, v_values, v_headers
        FROM outbox_records o WHERE o.xact_id = NEW.xact_id;
        SELECT count(*) INTO v_appended
        FROM append_batches_v2(NULL, NULL, NULL, NULL, v_topics, v_partitions, NULL, v_counts, v_keys, v_values,
                               v_headers, NULL, false);
    END IF;
    IF v_appended = 0 THEN
        -- One batch, larger than a batch, or not the common case: produce_v2, which also raises
        -- what a record staged earlier may now break (a topic's limits changed since the send).
        FOR b IN
            SELECT t.name, c.partition, array_agg(c.key ORDER BY c.seq) AS keys, array_agg(c.value ORDER BY c.seq) AS vals,
                   CASE WHEN bool_or(c.headers IS NOT NULL) THEN array_agg(c.headers ORDER BY c.seq) END AS hdrs
            FROM (SELECT o.*, (row_number() OVER (PARTITION BY o.topic_id, o.partition ORDER BY o.seq) - 1)
                              / (SELECT s.max_batch_records FROM settings s) AS chunk
                  FROM outbox_records o WHERE o.xact_id = NEW.xact_id) c
            JOIN topics t ON t.topic_id = c.topic_id
            GROUP BY c.topic_id, t.name, c.partition, c.chunk
            ORDER BY c.topic_id, c.partition, c.chunk
        LOOP
            PERFORM produce_v2(b.name, b.partition, NULL, NULL, NULL, b.keys, b.vals, b.hdrs);
        END LOOP;
    END IF;
    DELETE FROM outbox_records o WHERE o.xact_id = NEW.xact_id;
    -- Readers waiting on these partitions (registered in fetch_waiters; one registering now waits
    -- for the partition locks held here, so it sees these records) are woken by a NOTIFY at the
    -- commit (wake_notify_v1: nothing on a server that allows PREPARE TRANSACTION, as this runs at
    -- a PREPARE too).
    PERFORM wake_notify_v1(ARRAY(SELECT fetch_waiting_v1(q.topic, q.partition, true, true)
                                 FROM unnest(v_topics, v_partitions) AS q(topic, partition)));
    RETURN NULL;
END
$function$;

COMMENT ON FUNCTION outbox_flush_v1() IS 'Internal (deferred constraint trigger on outbox_records): at the commit, appends the records the transaction staged with send_v1, every partition locked first in lock order (one set-based append, or produce_v2 per batch when a partition holds more than a batch), removes them from the stage, and wakes the readers waiting on those partitions (a NOTIFY delivered at the commit; not on a server that allows PREPARE TRANSACTION, which refuses to prepare a transaction that has notified).';

REVOKE ALL ON FUNCTION outbox_flush_v1() FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION txn_check_v2(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_begin boolean, p_append boolean)
 RETURNS transactions
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
-- The transactions row's lock, the first of the documented order (docs/design.md). Every call
-- that changes the row (opens, completes, aborts or fences a transaction, bumps the epoch) holds
-- it FOR UPDATE. An append (p_append, revision 0039) changes nothing in it: to a transaction
-- already open it takes the row FOR SHARE, so that appends of one transaction to different
-- partitions run side by side (a commit, an abort and a bump still wait for every one of them,
-- expiry skips the row while they hold it, and none of them can start while one of those holds
-- the row; txn_gate_v1 keeps a stream of appends from holding them off for good). An append that
-- may open the transaction takes FOR UPDATE as before. Which lock to take is read first without one: a
-- transaction's number only grows, so a row seen open with this number is either still so under
-- the shared lock, or has moved on, and the checks below then refuse the append as they would
-- under FOR UPDATE. A caller that holds the row FOR SHARE never asks for FOR UPDATE on it
-- afterwards in the same database transaction: two such callers would deadlock.
DECLARE
    t transactions%ROWTYPE;
    pr producers%ROWTYPE;
    v_shared boolean := false;
BEGIN
    IF p_append THEN
        SELECT x.state = 'Ongoing' AND x.txn_number = p_txn_number INTO v_shared
        FROM transactions x WHERE x.transactional_id = p_transactional_id;
        v_shared := coalesce(v_shared, false);
    END IF;
    PERFORM txn_gate_v1(p_transactional_id, v_shared);
    IF v_shared THEN
        SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR SHARE;
    ELSE
        SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR UPDATE;
    END IF;
    IF NOT FOUND OR t.state = 'Dead' OR t.producer_id IS DISTINCT FROM p_producer_id THEN
        RAISE EXCEPTION USING ERRCODE = 'OL302',
            MESSAGE = format('producer id %s does not serve transactional id %L (expired or replaced)',
                             p_producer_id, p_transactional_id);
    END IF;
    SELECT * INTO pr FROM producers p WHERE p.producer_id = t.producer_id;
    -- Revision 0017: the identity is its principal's. Checked before the epoch, so another
    -- principal learns nothing of it; the owner changes only under this row's lock (held here).
    PERFORM txn_owner_check_v1(p_transactional_id, pr.owner);
    IF p_epoch IS DISTINCT FROM pr.epoch THEN
        IF p_epoch = pr.last_epoch THEN
            RAISE EXCEPTION USING ERRCODE = 'OL202',
                MESSAGE = format('transactional id %L: epoch %s was bumped to %s (the transaction timed out); '
                                 'abort and re-initialise', p_transactional_id, p_epoch, pr.epoch);
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'OL301',
            MESSAGE = format('transactional id %L: epoch %s is fenced by epoch %s', p_transactional_id, p_epoch, pr.epoch);
    END IF;
    IF t.state IN ('PrepareCommit', 'PrepareAbort') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL305', MESSAGE = format('transaction of %L is completing', p_transactional_id);
    END IF;
    IF t.state = 'Ongoing' THEN
        IF t.txn_number <> p_txn_number THEN
            RAISE EXCEPTION USING ERRCODE = 'OL303',
                MESSAGE = format('transactional id %L: transaction %s is open, not %s', p_transactional_id, t.txn_number, p_txn_number);
        END IF;
        IF t.txn_started_at + make_interval(secs => t.timeout_ms / 1000.0) < clock_timestamp() THEN
            RAISE EXCEPTION USING ERRCODE = 'OL307',
                MESSAGE = format('transaction %s of %L exceeded its timeout of %s ms', t.txn_number, p_transactional_id, t.timeout_ms);
        END IF;
        RETURN t;
    END IF;
    -- Opening needs the row FOR UPDATE; under the shared lock it cannot be due (the row was seen
    -- open with this number, and numbers only grow), so a shared call never reaches the UPDATE.
    IF p_begin AND NOT v_shared AND t.txn_number = p_txn_number - 1 THEN
        UPDATE transactions x SET state = 'Ongoing', txn_number = p_txn_number, txn_started_at = now()
        WHERE x.transactional_id = p_transactional_id
        RETURNING * INTO t;
        RETURN t;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'OL303',
        MESSAGE = format('transactional id %L: transaction %s is not open (the last is %s, %s)',
                         p_transactional_id, p_txn_number, t.txn_number, t.state);
END
$function$;

COMMENT ON FUNCTION txn_check_v2(text, bigint, smallint, bigint, boolean, boolean) IS 'Internal: locks and validates a transactional call (producer id, epoch, transaction number, timeout); opens transaction N after N-1 when asked. The transactions row is held FOR UPDATE, or FOR SHARE for an append (p_append) to a transaction already open, so that one transaction''s appends to different partitions run side by side.';

REVOKE ALL ON FUNCTION txn_check_v2(text, bigint, smallint, bigint, boolean, boolean) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION txn_fence_abort_v1(p_transactional_id text, p_recoverable boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
DECLARE
    pr producers%ROWTYPE;
    v_pid bigint;
    v_number bigint;
BEGIN
    SELECT p.* INTO pr FROM producers p JOIN transactions t ON t.producer_id = p.producer_id
    WHERE t.transactional_id = p_transactional_id;
    SELECT t.txn_number INTO v_number FROM transactions t WHERE t.transactional_id = p_transactional_id;
    IF pr.epoch < 32767 THEN
        -- 32767 itself is Kafka's fencing epoch: reachable by a fence, never handed to a producer.
        UPDATE producers p
        SET epoch = pr.epoch + 1, last_epoch = CASE WHEN p_recoverable THEN pr.epoch END, last_used_at = now()
        WHERE p.producer_id = pr.producer_id;
        PERFORM txn_complete_v1(p_transactional_id, false);
        PERFORM wake_notify_v1(txn_abort_waiters_v1(pr.producer_id, v_number));
    ELSE
        -- No epoch left to fence with: abort, then retire the producer id itself (its holder then
        -- gets INVALID_PRODUCER_ID_MAPPING). One update for state and id: one journalled transition.
        -- The retired id remembers no identity (revision 0017): nobody asked for this move, so
        -- init_transactional_producer_id_v1 answers no retry with the new id. The new id stays
        -- with the principal that held the old one.
        PERFORM txn_complete_v1(p_transactional_id, false);
        PERFORM wake_notify_v1(txn_abort_waiters_v1(pr.producer_id, v_number));
        UPDATE producers p SET transactional_id = NULL, last_epoch = NULL WHERE p.producer_id = pr.producer_id;
        INSERT INTO producers AS p (transactional_id, owner) VALUES (p_transactional_id, pr.owner)
        RETURNING p.producer_id INTO v_pid;
        UPDATE transactions x SET state = 'Empty', producer_id = v_pid, prev_producer_id = pr.producer_id
        WHERE x.transactional_id = p_transactional_id;
    END IF;
END
$function$;

COMMENT ON FUNCTION txn_fence_abort_v1(text, boolean) IS 'Internal: bumps the epoch of a transactional id (fencing its holder) and aborts its open transaction, waking the read_committed readers waiting on its partitions (wake_notify_v1 at its commit).';

REVOKE ALL ON FUNCTION txn_fence_abort_v1(text, boolean) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

CREATE OR REPLACE FUNCTION txn_gate_v1(p_transactional_id text, p_shared boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
BEGIN
    -- The gate in front of a transactional id's transactions row (revision 0040), taken just
    -- before the row: shared by appends, which hold the row FOR SHARE, exclusive by every call
    -- that waits for it FOR UPDATE. PostgreSQL grants a row's FOR SHARE at once while only share
    -- locks are held, even to a session that comes after a FOR UPDATE already waiting, so
    -- overlapping appends (a zombie's, or a stranger's refused ones) could hold a commit, an
    -- abort or a fence off without end. A heavyweight lock queues: a shared request that comes
    -- after a waiting exclusive one waits behind it. Keyed by the id's hash (another id with the
    -- same hash only shares the queue), in a class of its own so no other advisory lock meets it.
    IF p_shared THEN
        PERFORM pg_advisory_xact_lock_shared(1869375329, hashtext(p_transactional_id));
    ELSE
        PERFORM pg_advisory_xact_lock(1869375329, hashtext(p_transactional_id));
    END IF;
END
$function$;

COMMENT ON FUNCTION txn_gate_v1(text, boolean) IS 'Internal: the queue in front of a transactional id''s transactions row, taken just before it: shared by appends, exclusive by every call that waits for the row FOR UPDATE, so that appends cannot hold a commit, an abort or a fence off without end.';

REVOKE ALL ON FUNCTION txn_gate_v1(text, boolean) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;
