-- The transaction coordinator: InitProducerId (transactional), AddPartitionsToTxn, EndTxn, the
-- operator's abort, and the internal steps they share (the checks under the transactions row's
-- lock, completion with markers, fencing). The state machine's trigger function and the journal's
-- guard live here too.

CREATE OR REPLACE FUNCTION init_transactional_producer_id_v1(p_transactional_id text, p_timeout_ms integer, p_producer_id bigint DEFAULT NULL::bigint, p_epoch smallint DEFAULT NULL::smallint)
 RETURNS TABLE(producer_id bigint, producer_epoch smallint, txn_number bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    t transactions%ROWTYPE;
    pr producers%ROWTYPE;
    v_pid bigint;
    v_prev bigint;
    v_fenced boolean := false;
    v_max bigint := (SELECT s.transaction_max_timeout_ms FROM settings s);
    v_caller oid := acl_caller_v1();
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('transactional_id', ARRAY[p_transactional_id], 'write');
    END IF;
    IF p_transactional_id IS NULL OR length(p_transactional_id) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'a transactional id is 1 to 255 characters';
    END IF;
    IF p_timeout_ms IS NULL OR p_timeout_ms <= 0 OR p_timeout_ms > v_max THEN
        RAISE EXCEPTION USING ERRCODE = 'OL304',
            MESSAGE = format('transaction timeout %s ms is outside (0, %s]', p_timeout_ms, v_max);
    END IF;
    IF (p_producer_id IS NULL) <> (p_epoch IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'give both the producer id and its epoch, or neither';
    END IF;
    PERFORM txn_gate_v1(p_transactional_id, false);
    LOOP
        SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR UPDATE;
        EXIT WHEN FOUND;
        -- First use of this transactional id. Two first initialisations race on the unique
        -- transactional id: the loser inserts nothing and loops to lock the winner's row.
        INSERT INTO producers AS p (transactional_id, owner) VALUES (p_transactional_id, v_caller)
        ON CONFLICT (transactional_id) DO NOTHING
        RETURNING p.producer_id INTO v_pid;
        IF v_pid IS NOT NULL THEN
            INSERT INTO transactions (transactional_id, producer_id, timeout_ms)
            VALUES (p_transactional_id, v_pid, p_timeout_ms);
            RETURN QUERY SELECT v_pid, 0::smallint, 0::bigint;
            RETURN;
        END IF;
        PERFORM pg_sleep(0.001);
    END LOOP;

    IF t.state IN ('PrepareCommit', 'PrepareAbort') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL305', MESSAGE = format('transaction of %L is completing', p_transactional_id);
    END IF;
    SELECT * INTO pr FROM producers p WHERE p.producer_id = t.producer_id FOR UPDATE;
    v_prev := t.prev_producer_id;

    IF p_producer_id IS NOT NULL AND t.state <> 'Dead' THEN
        -- KIP-360: the caller names the identity it holds.
        -- Revision 0017: an identity held by an instance of another principal (which initialised
        -- it after this caller did, or before revision 0017 bound identities to principals) is
        -- fenced, as a stale identity is in Kafka, and the caller learns nothing of its epoch.
        -- Initialising without an identity takes the transactional id over (ACLs permitting).
        PERFORM txn_owner_check_v1(p_transactional_id, pr.owner);
        IF p_producer_id = t.prev_producer_id AND t.state <> 'Ongoing' AND EXISTS (
            SELECT 1 FROM producers old
            WHERE old.producer_id = p_producer_id AND old.transactional_id IS NULL AND old.last_epoch = p_epoch) THEN
            -- A retried bump that moved an exhausted epoch to a new producer id: the same answer.
            -- The retired id's last_epoch names the identity that asked for that move (revision
            -- 0017; it was its epoch before, which let any holder of the old id at that epoch,
            -- a zombie included, claim the new id).
            UPDATE transactions x SET timeout_ms = p_timeout_ms WHERE x.transactional_id = p_transactional_id;
            RETURN QUERY SELECT pr.producer_id, pr.epoch, t.txn_number;
            RETURN;
        END IF;
        IF p_producer_id <> t.producer_id THEN
            RAISE EXCEPTION USING ERRCODE = 'OL301',
                MESSAGE = format('transactional id %L is now served by another producer id', p_transactional_id);
        END IF;
        IF p_epoch = pr.last_epoch AND p_epoch <> pr.epoch THEN
            -- A retried bump, or the holder of an epoch fenced by a timeout: the current identity,
            -- unless another instance has started a transaction with it meanwhile.
            IF t.state = 'Ongoing' THEN
                RAISE EXCEPTION USING ERRCODE = 'OL301',
                    MESSAGE = format('transactional id %L: epoch %s is in use by another instance', p_transactional_id, pr.epoch);
            END IF;
            IF pr.epoch < 32766 THEN
                UPDATE transactions x SET timeout_ms = p_timeout_ms WHERE x.transactional_id = p_transactional_id;
                RETURN QUERY SELECT pr.producer_id, pr.epoch, t.txn_number;
                RETURN;
            END IF;
            -- The current epoch is exhausted (or the fencing epoch): a new producer id below.
        ELSIF p_epoch <> pr.epoch THEN
            RAISE EXCEPTION USING ERRCODE = 'OL301',
                MESSAGE = format('transactional id %L: epoch %s is fenced by epoch %s', p_transactional_id, p_epoch, pr.epoch);
        END IF;
    END IF;

    -- Bump. An open transaction of the old epoch is aborted first, with a fencing epoch: once this
    -- commits, no call of the old epoch can land (they all check the epoch under the row lock).
    IF t.state = 'Ongoing' THEN
        PERFORM txn_fence_abort_v1(p_transactional_id, false);
        SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id;
        SELECT * INTO pr FROM producers p WHERE p.producer_id = t.producer_id;
        v_prev := t.prev_producer_id;
        v_fenced := true;
    END IF;
    IF t.state = 'Dead' OR pr.epoch >= 32766 THEN
        -- An expired transactional id, or an exhausted epoch (32767 is never handed out): a new
        -- producer id at epoch 0. The old id is retired (the deferred key lets both rows change
        -- in this transaction) and remembered, so a retry of this call is recognised: its
        -- last_epoch names the identity that asked (none when the caller named none), and its
        -- epoch becomes the fencing epoch, which no instance holds, so nothing can write with it.
        v_prev := pr.producer_id;
        UPDATE producers p
        SET transactional_id = NULL, epoch = 32767,
            last_epoch = CASE WHEN p_producer_id IS NOT NULL AND p_producer_id = pr.producer_id THEN p_epoch END
        WHERE p.producer_id = pr.producer_id;
        INSERT INTO producers AS p (transactional_id, owner) VALUES (p_transactional_id, v_caller) RETURNING * INTO pr;
    ELSIF v_fenced THEN
        -- The fence's epoch is this instance's; a retry of this call with the caller's old
        -- identity is recognised through last_epoch.
        IF p_producer_id IS NOT NULL THEN
            UPDATE producers p SET last_epoch = p_epoch WHERE p.producer_id = pr.producer_id;
        END IF;
    ELSE
        UPDATE producers p
        SET epoch = pr.epoch + 1, last_epoch = CASE WHEN p_producer_id IS NOT NULL THEN pr.epoch END, last_used_at = now()
        WHERE p.producer_id = pr.producer_id
        RETURNING * INTO pr;
    END IF;
    IF pr.owner IS DISTINCT FROM v_caller THEN
        -- The new epoch belongs to the principal that asked for it (revision 0017).
        UPDATE producers p SET owner = v_caller WHERE p.producer_id = pr.producer_id RETURNING * INTO pr;
    END IF;
    -- One update for the state and the (possibly new) producer id: one journalled transition.
    UPDATE transactions x
    SET state = 'Empty', producer_id = pr.producer_id, prev_producer_id = v_prev, timeout_ms = p_timeout_ms
    WHERE x.transactional_id = p_transactional_id
    RETURNING * INTO t;
    RETURN QUERY SELECT pr.producer_id, pr.epoch, t.txn_number;
END
$fn$;
COMMENT ON FUNCTION init_transactional_producer_id_v1(p_transactional_id text, p_timeout_ms integer, p_producer_id bigint, p_epoch smallint) IS
  'InitProducerId with a transactional id: one producer id per transactional id; each call bumps the epoch, fencing older instances and aborting their open transaction. KIP-360: with the current (id, epoch), a bump; a retried bump gets the same answer; anything else PRODUCER_FENCED (OL301), as is an identity another principal has initialised since. Epoch exhaustion or an expired id: a new producer id at epoch 0. The identity returned is bound to the calling principal. Returns the transaction number reached.';

CREATE OR REPLACE FUNCTION add_partitions_to_txn_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_topics text[], p_partitions integer[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_missing text;
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('transactional_id', ARRAY[p_transactional_id], 'write');
        PERFORM acl_require_v1('topic', p_topics, 'write');
    END IF;
    IF cardinality(p_topics) IS DISTINCT FROM cardinality(p_partitions) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'topics and partitions differ in length';
    END IF;
    PERFORM txn_check_v1(p_transactional_id, p_producer_id, p_epoch, p_txn_number, true);
    SELECT format('%s-%s', r.topic, r.partition) INTO v_missing
    FROM unnest(p_topics, p_partitions) AS r(topic, partition)
    WHERE NOT EXISTS (SELECT 1 FROM partitions pt JOIN topics tp USING (topic_id)
                      WHERE tp.name = r.topic AND pt.partition = r.partition)
    LIMIT 1;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL101', MESSAGE = format('unknown partition %s', v_missing);
    END IF;
    INSERT INTO txn_partitions (transactional_id, topic_id, partition)
    SELECT p_transactional_id, tp.topic_id, r.partition
    FROM unnest(p_topics, p_partitions) AS r(topic, partition) JOIN topics tp ON tp.name = r.topic
    ORDER BY tp.topic_id, r.partition
    ON CONFLICT DO NOTHING;
END
$fn$;
COMMENT ON FUNCTION add_partitions_to_txn_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_topics text[], p_partitions integer[]) IS
  'AddPartitionsToTxn: adds partitions to transaction p_txn_number, opening it if the previous one completed. produce_v2 adds a partition implicitly on its first write (as Kafka''s transaction version 2 does).';

CREATE OR REPLACE FUNCTION end_txn_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_commit boolean)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    t transactions%ROWTYPE;
    pr producers%ROWTYPE;
    v_want text := CASE WHEN p_commit THEN 'CompleteCommit' ELSE 'CompleteAbort' END;
BEGIN
    -- Access control (revision 0009, docs/acl.md), before any lock or write. While enforcement
    -- is off this one lookup is all it costs.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('transactional_id', ARRAY[p_transactional_id], 'write');
    END IF;
    IF p_commit IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'commit or abort?';
    END IF;
    PERFORM txn_gate_v1(p_transactional_id, false);
    SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR UPDATE;
    IF NOT FOUND OR t.state = 'Dead' OR t.producer_id IS DISTINCT FROM p_producer_id THEN
        RAISE EXCEPTION USING ERRCODE = 'OL302',
            MESSAGE = format('producer id %s does not serve transactional id %L', p_producer_id, p_transactional_id);
    END IF;
    SELECT * INTO pr FROM producers p WHERE p.producer_id = t.producer_id;
    PERFORM txn_owner_check_v1(p_transactional_id, pr.owner);  -- before the epoch: see txn_check_v1
    IF p_epoch IS DISTINCT FROM pr.epoch THEN
        IF p_epoch = pr.last_epoch AND NOT p_commit AND t.state = 'CompleteAbort' AND t.txn_number = p_txn_number THEN
            -- Aborted by its timeout (a reader or maintenance got there first): the holder's abort
            -- is satisfied, and it must re-initialise (KIP-360) to get the new epoch.
            RETURN 'already_aborted_timed_out';
        ELSIF p_epoch = pr.last_epoch THEN
            RAISE EXCEPTION USING ERRCODE = 'OL202',
                MESSAGE = format('transactional id %L: epoch %s was bumped to %s (the transaction timed out)',
                                 p_transactional_id, p_epoch, pr.epoch);
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'OL301',
            MESSAGE = format('transactional id %L: epoch %s is fenced by epoch %s', p_transactional_id, p_epoch, pr.epoch);
    END IF;
    IF t.state IN ('PrepareCommit', 'PrepareAbort') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL305', MESSAGE = format('transaction of %L is completing', p_transactional_id);
    END IF;
    IF t.txn_number = p_txn_number AND t.state = 'Ongoing' THEN
        IF t.txn_started_at + make_interval(secs => t.timeout_ms / 1000.0) < clock_timestamp() THEN
            -- Timed out: fence and abort (recoverable: the holder may re-initialise, KIP-360).
            PERFORM txn_fence_abort_v1(p_transactional_id, true);
            RETURN CASE WHEN p_commit THEN 'timed_out' ELSE 'aborted_timed_out' END;
        END IF;
        PERFORM txn_complete_v1(p_transactional_id, p_commit);
        RETURN CASE WHEN p_commit THEN 'committed' ELSE 'aborted' END;
    END IF;
    IF t.txn_number = p_txn_number - 1 AND t.state IN ('Empty', 'CompleteCommit', 'CompleteAbort') THEN
        -- Transaction N never reached the store (nothing was sent, or nothing got through). It
        -- is opened and completed empty, so its number is used up: a delayed write of N that
        -- arrives later finds N complete and cannot open it.
        UPDATE transactions x SET state = 'Ongoing', txn_number = p_txn_number, txn_started_at = now()
        WHERE x.transactional_id = p_transactional_id;
        PERFORM txn_complete_v1(p_transactional_id, p_commit);
        RETURN CASE WHEN p_commit THEN 'committed' ELSE 'aborted' END;
    END IF;
    IF t.txn_number = p_txn_number AND t.state = v_want THEN
        -- A retry after a lost reply: already done, no second effect.
        RETURN CASE WHEN p_commit THEN 'already_committed' ELSE 'already_aborted' END;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'OL303',
        MESSAGE = format('cannot %s transaction %s of %L: the last is %s, %s',
                         CASE WHEN p_commit THEN 'commit' ELSE 'abort' END, p_txn_number, p_transactional_id,
                         t.txn_number, t.state);
END
$fn$;
COMMENT ON FUNCTION end_txn_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_commit boolean) IS
  'EndTxn: commits or aborts transaction p_txn_number in one database transaction. Returns committed, aborted, already_committed / already_aborted (a retry), timed_out (the commit came too late; the transaction was aborted and the epoch bumped), or aborted_timed_out / already_aborted_timed_out (an abort of a transaction past its timeout: the epoch was bumped, re-initialise). Abort after commit, or a call naming another transaction: OL303.';

CREATE OR REPLACE FUNCTION end_txn_v2(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_commit boolean, OUT outcome text, OUT wake text[])
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION end_txn_v2(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_commit boolean, OUT outcome text, OUT wake text[]) IS
  'end_txn_v1, and the tokens (topic_id:partition) of the partitions of the commit or abort on which a read_committed reader waits (an abort moves their last stable offsets on, so records committed behind it become readable): the caller wakes them, outside this transaction, with a NOTIFY on the schema''s channel (wake_channel_v1()).';

CREATE OR REPLACE FUNCTION abort_transaction_v1(p_transactional_id text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    t transactions%ROWTYPE;
BEGIN
    PERFORM txn_gate_v1(p_transactional_id, false);
    SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL308', MESSAGE = format('no transactional id %L', p_transactional_id);
    END IF;
    IF t.state <> 'Ongoing' THEN
        RAISE EXCEPTION USING ERRCODE = 'OL303',
            MESSAGE = format('transaction of %L is %s: nothing to abort', p_transactional_id, t.state);
    END IF;
    -- Unlike Kafka's tool, this goes through the coordinator state: the holder is fenced (not
    -- recoverable: an operator aborts a transaction whose producer is gone or misbehaving).
    PERFORM txn_fence_abort_v1(p_transactional_id, false);
END
$fn$;
COMMENT ON FUNCTION abort_transaction_v1(p_transactional_id text) IS
  'Operator abort of an open (hanging) transaction: fences its producer and aborts it, updating the coordinator state (Kafka''s tool only writes a marker).';

CREATE OR REPLACE FUNCTION txn_gate_v1(p_transactional_id text, p_shared boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION txn_gate_v1(p_transactional_id text, p_shared boolean) IS
  'Internal: the queue in front of a transactional id''s transactions row, taken just before it: shared by appends, exclusive by every call that waits for the row FOR UPDATE, so that appends cannot hold a commit, an abort or a fence off without end.';

CREATE OR REPLACE FUNCTION txn_check_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_begin boolean)
 RETURNS transactions
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    RETURN txn_check_v2(p_transactional_id, p_producer_id, p_epoch, p_txn_number, p_begin, false);
END
$fn$;
COMMENT ON FUNCTION txn_check_v1(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_begin boolean) IS
  'Internal: txn_check_v2 with the transactions row always FOR UPDATE.';

CREATE OR REPLACE FUNCTION txn_check_v2(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_begin boolean, p_append boolean)
 RETURNS transactions
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION txn_check_v2(p_transactional_id text, p_producer_id bigint, p_epoch smallint, p_txn_number bigint, p_begin boolean, p_append boolean) IS
  'Internal: locks and validates a transactional call (producer id, epoch, transaction number, timeout); opens transaction N after N-1 when asked. The transactions row is held FOR UPDATE, or FOR SHARE for an append (p_append) to a transaction already open, so that one transaction''s appends to different partitions run side by side.';

CREATE OR REPLACE FUNCTION txn_owner_check_v1(p_transactional_id text, p_owner oid)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    IF p_owner IS DISTINCT FROM acl_caller_v1() THEN
        RAISE EXCEPTION USING ERRCODE = 'OL301',
            MESSAGE = format('transactional id %L is held by an instance of another principal', p_transactional_id);
    END IF;
END
$fn$;
COMMENT ON FUNCTION txn_owner_check_v1(p_transactional_id text, p_owner oid) IS
  'Internal: PRODUCER_FENCED (OL301) unless the calling principal holds the transactional id''s producer id; says nothing of the holder''s epoch.';

CREATE OR REPLACE FUNCTION txn_complete_v1(p_transactional_id text, p_commit boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    t transactions%ROWTYPE;
    v_epoch smallint;
    tp record;
BEGIN
    SELECT * INTO t FROM transactions x WHERE x.transactional_id = p_transactional_id;
    IF t.state <> 'Ongoing' THEN
        RAISE EXCEPTION USING ERRCODE = 'OL303',
            MESSAGE = format('transaction of %L is %s, not Ongoing', p_transactional_id, t.state);
    END IF;
    SELECT p.epoch INTO v_epoch FROM producers p WHERE p.producer_id = t.producer_id;
    -- A transaction that wrote no record here needs no marker (an empty one, or one whose markers
    -- append_batches_v2 wrote with its records, revision 0024): skip the statements below.
    PERFORM 1 FROM txn_partitions x WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL LIMIT 1;
    IF FOUND THEN
        -- Every partition the transaction wrote to, in (topic_id, partition) order, the documented
        -- lock order (rows are locked as the sorted scan returns them). A partition the transaction
        -- never wrote to needs no marker. Each partition's marker goes at its next offset; the
        -- statements below are set-based (revision 0023: one statement per table, not one per
        -- partition), and all read that offset before the last one moves it.
        PERFORM 1 FROM partitions pt
        WHERE (pt.topic_id, pt.partition) IN (
            SELECT x.topic_id, x.partition FROM txn_partitions x
            WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL)
        ORDER BY pt.topic_id, pt.partition
        FOR NO KEY UPDATE;
        IF NOT p_commit THEN
            -- The producer has one open transaction, so its records from the first offset on are
            -- this transaction's. Only aborts rewrite rows; commits touch no data row. One partition
            -- at a time: each is a range scan of the records' primary key.
            FOR tp IN
                SELECT x.topic_id, x.partition, x.first_offset, pt.next_offset FROM txn_partitions x
                JOIN partitions pt ON pt.topic_id = x.topic_id AND pt.partition = x.partition
                WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL
                ORDER BY x.topic_id, x.partition
            LOOP
                UPDATE records r SET aborted = true
                WHERE r.topic_id = tp.topic_id AND r.partition = tp.partition
                  AND r."offset" >= tp.first_offset AND r."offset" < tp.next_offset
                  AND r.producer_id = t.producer_id AND r.is_transactional AND r.control_type IS NULL;
            END LOOP;
        END IF;
        INSERT INTO records (topic_id, partition, "offset", producer_id, producer_epoch, is_transactional, control_type,
                             txn_number)
        SELECT x.topic_id, x.partition, pt.next_offset, t.producer_id, v_epoch, true,
               CASE WHEN p_commit THEN 'commit' ELSE 'abort' END, t.txn_number
        FROM txn_partitions x JOIN partitions pt ON pt.topic_id = x.topic_id AND pt.partition = x.partition
        WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL
        ORDER BY x.topic_id, x.partition;
        IF p_commit THEN
            -- The span read_committed fetches test transactions against (consistent_limits_v1).
            -- Its last record is the producer's last batch here: the producer's records from the
            -- first offset on are this transaction's (as for the abort above), and produce_v2
            -- keeps that batch in its sequence state. A state expired meanwhile is looked up (the
            -- CASE runs that scan only then).
            INSERT INTO txn_spans (producer_id, txn_number, topic_id, partition, first_offset, last_offset)
            SELECT t.producer_id, t.txn_number, x.topic_id, x.partition, x.first_offset,
                   CASE WHEN ps.last_offsets[cardinality(ps.last_offsets)] >= x.first_offset
                             AND ps.last_offsets[cardinality(ps.last_offsets)] < pt.next_offset
                        THEN ps.last_offsets[cardinality(ps.last_offsets)]
                        ELSE (SELECT max(r."offset") FROM records r
                              WHERE r.topic_id = x.topic_id AND r.partition = x.partition
                                AND r."offset" >= x.first_offset AND r."offset" < pt.next_offset
                                AND r.producer_id = t.producer_id AND r.is_transactional AND r.control_type IS NULL) END
            FROM txn_partitions x
            JOIN partitions pt ON pt.topic_id = x.topic_id AND pt.partition = x.partition
            LEFT JOIN producer_partition_state ps
                   ON ps.producer_id = t.producer_id AND ps.topic_id = x.topic_id AND ps.partition = x.partition
            WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL
            ORDER BY x.topic_id, x.partition;
        END IF;
        UPDATE partitions pt SET next_offset = pt.next_offset + 1
        FROM txn_partitions x
        WHERE x.transactional_id = p_transactional_id AND x.first_offset IS NOT NULL
          AND pt.topic_id = x.topic_id AND pt.partition = x.partition;
    END IF;
    IF p_commit THEN
        -- KIP-447: pending offsets become committed only if written after the committed ones.
        INSERT INTO committed_offsets AS c
            (group_id, topic_id, partition, committed_offset, metadata, commit_seq, producer_id, committed_at)
        SELECT po.group_id, po.topic_id, po.partition, po.committed_offset, po.metadata, po.commit_seq,
               po.producer_id, now()
        FROM pending_offsets po WHERE po.transactional_id = p_transactional_id
        -- Offset rows in key order (revision 0017), as every writer of committed_offsets takes
        -- them: two commits for the same group and partitions cannot deadlock on each other.
        ORDER BY po.group_id, po.topic_id, po.partition
        ON CONFLICT ON CONSTRAINT pk_committed_offsets DO UPDATE SET
            committed_offset = EXCLUDED.committed_offset, metadata = EXCLUDED.metadata,
            commit_seq = EXCLUDED.commit_seq, producer_id = EXCLUDED.producer_id,
            committed_at = EXCLUDED.committed_at
        WHERE c.commit_seq < EXCLUDED.commit_seq;
    END IF;
    DELETE FROM pending_offsets po WHERE po.transactional_id = p_transactional_id;
    DELETE FROM txn_partitions x WHERE x.transactional_id = p_transactional_id;
    -- Ongoing to Complete in one update (revision 0024): txn_transition_v1 journals it as Kafka's
    -- two steps, through PrepareCommit or PrepareAbort, which no other session could see anyway.
    UPDATE transactions x
    SET state = CASE WHEN p_commit THEN 'CompleteCommit' ELSE 'CompleteAbort' END, txn_started_at = NULL
    WHERE x.transactional_id = p_transactional_id;
END
$fn$;
COMMENT ON FUNCTION txn_complete_v1(p_transactional_id text, p_commit boolean) IS
  'Internal: commits or aborts the Ongoing transaction (markers on every written partition, pending offsets applied or dropped, aborted records flagged) in the caller''s database transaction.';

CREATE OR REPLACE FUNCTION txn_fence_abort_v1(p_transactional_id text, p_recoverable boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
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
$fn$;
COMMENT ON FUNCTION txn_fence_abort_v1(p_transactional_id text, p_recoverable boolean) IS
  'Internal: bumps the epoch of a transactional id (fencing its holder) and aborts its open transaction, waking the read_committed readers waiting on its partitions (wake_notify_v1 at its commit).';

CREATE OR REPLACE FUNCTION txn_transition_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_epoch smallint;
    v_prepare text;
    v_whole boolean := false;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'Empty' THEN
            RAISE EXCEPTION USING ERRCODE = 'OL303',
                MESSAGE = format('transactional id %L must start in state Empty, not %s',
                                 NEW.transactional_id, NEW.state);
        END IF;
    ELSE
        -- A whole transaction opened and committed by one update (produce_end_txn_v2, revision
        -- 0024): the next number, the same producer, from a state a transaction may open from.
        v_whole := OLD.state IN ('Empty', 'CompleteCommit', 'CompleteAbort') AND NEW.state = 'CompleteCommit'
                   AND NEW.txn_number = OLD.txn_number + 1 AND NEW.producer_id = OLD.producer_id;
    END IF;
    IF TG_OP = 'UPDATE' AND NOT v_whole AND (OLD.state, NEW.state) NOT IN (
        ('Empty', 'Empty'), ('Empty', 'Ongoing'), ('Empty', 'Dead'),
        ('Ongoing', 'Ongoing'), ('Ongoing', 'PrepareCommit'), ('Ongoing', 'PrepareAbort'),
        ('Ongoing', 'CompleteCommit'), ('Ongoing', 'CompleteAbort'),
        ('PrepareCommit', 'CompleteCommit'), ('PrepareAbort', 'CompleteAbort'),
        ('CompleteCommit', 'Empty'), ('CompleteCommit', 'Ongoing'), ('CompleteCommit', 'Dead'),
        ('CompleteAbort', 'Empty'), ('CompleteAbort', 'Ongoing'), ('CompleteAbort', 'Dead'),
        ('Dead', 'Empty')
    ) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL303',
            MESSAGE = format('illegal transaction state transition %s -> %s for transactional id %L',
                             OLD.state, NEW.state, NEW.transactional_id);
    END IF;
    SELECT epoch INTO v_epoch FROM producers WHERE producer_id = NEW.producer_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OL302',
            MESSAGE = format('producer id %s of transactional id %L does not exist',
                             NEW.producer_id, NEW.transactional_id);
    END IF;
    NEW.updated_at := now();
    IF v_whole THEN
        -- Journaled as the three steps it stands for.
        INSERT INTO txn_history (transactional_id, producer_id, producer_epoch, txn_number, from_state, to_state)
        VALUES (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number, OLD.state, 'Ongoing'),
               (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number, 'Ongoing', 'PrepareCommit'),
               (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number, 'PrepareCommit', 'CompleteCommit');
    ELSIF TG_OP = 'UPDATE' AND OLD.state = 'Ongoing' AND NEW.state IN ('CompleteCommit', 'CompleteAbort') THEN
        -- EndTxn's two steps in one update (txn_complete_v1, revision 0024), journaled as two: the
        -- Prepare state lived only inside this database transaction.
        v_prepare := CASE WHEN NEW.state = 'CompleteCommit' THEN 'PrepareCommit' ELSE 'PrepareAbort' END;
        INSERT INTO txn_history (transactional_id, producer_id, producer_epoch, txn_number, from_state, to_state)
        VALUES (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number, 'Ongoing', v_prepare),
               (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number, v_prepare, NEW.state);
    ELSE
        INSERT INTO txn_history (transactional_id, producer_id, producer_epoch, txn_number, from_state, to_state)
        VALUES (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number,
                CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END, NEW.state);
    END IF;
    RETURN NEW;
END
$fn$;
COMMENT ON FUNCTION txn_transition_v1() IS
  'Trigger: refuses illegal coordinator state transitions (SQLSTATE OL303) and appends every transition to txn_history. Two updates stand for several steps and are journaled as such: Ongoing to CompleteCommit or CompleteAbort (through PrepareCommit or PrepareAbort), and Empty, CompleteCommit or CompleteAbort to CompleteCommit with the next transaction number (a whole transaction opened and committed at once: through Ongoing and PrepareCommit).';

CREATE OR REPLACE FUNCTION txn_history_guard_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- A custom setting, local to the pruning transaction: only expire_txn_history_v2 sets it. The
    -- owner could drop this trigger anyway; the guard stops mistakes, not the owner.
    IF TG_OP = 'DELETE' AND current_setting('oncelog.pruning_txn_history', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'OL000',
        MESSAGE = format('%s is append-only: %s is refused (history is pruned by expire_txn_history_v2)',
                         TG_TABLE_NAME, TG_OP);
END
$fn$;
COMMENT ON FUNCTION txn_history_guard_v1() IS
  'Trigger: txn_history is append-only; UPDATE is refused, DELETE is let through only for expire_txn_history_v2.';
