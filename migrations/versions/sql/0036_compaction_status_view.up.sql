DROP VIEW IF EXISTS pending_group_offsets CASCADE;

DROP VIEW IF EXISTS group_offsets CASCADE;

DROP VIEW IF EXISTS group_status CASCADE;

DROP VIEW IF EXISTS transaction_status CASCADE;

DROP VIEW IF EXISTS committed_records CASCADE;

DROP VIEW IF EXISTS partition_offsets CASCADE;

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
    -- The ACL first (while enforcement is on): a role that may not describe the topic learns
    -- nothing, not even whether it exists. Revision 0036: the check ran with enforcement off too.
    IF (SELECT acl_settings.enforce FROM acl_settings) THEN
        PERFORM acl_require_v1('topic', ARRAY[p_topic], 'describe');
    END IF;
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

REVOKE ALL ON FUNCTION compaction_status_v1(text) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION compaction_status_v1(text) TO @schema@_reader, @schema@_client, @schema@_admin;

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

REVOKE ALL ON FUNCTION dirty_ratio_v2(bigint, bigint, bigint, bigint, bigint) FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT EXECUTE ON FUNCTION dirty_ratio_v2(bigint, bigint, bigint, bigint, bigint) TO @schema@_reader, @schema@_client, @schema@_admin;

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

CREATE VIEW compaction_status WITH (security_barrier=true) AS
 SELECT v.topic,
    v.partition,
    v.cleanup_policy,
    v.log_start_offset,
    v.clean_offset,
    v.high_watermark,
    v.log_bytes,
    v.dirty_ratio,
    v.examined_records,
    v.removed_records,
    v.removed_bytes,
    v.cleaned_at
   FROM ( SELECT t.name AS topic,
            p.partition,
            t.cleanup_policy,
            p.log_start_offset,
            GREATEST(p.log_start_offset, COALESCE(s.clean_offset, (0)::bigint)) AS clean_offset,
            p.next_offset AS high_watermark,
            p.log_bytes,
            dirty_ratio_v2(p.log_bytes, p.log_start_offset, s.clean_start, s.clean_offset, s.clean_bytes) AS dirty_ratio,
            COALESCE(s.examined_records, (0)::bigint) AS examined_records,
            COALESCE(s.removed_records, (0)::bigint) AS removed_records,
            COALESCE(s.removed_bytes, (0)::bigint) AS removed_bytes,
            s.cleaned_at
           FROM ((partitions p
             JOIN topics t USING (topic_id))
             LEFT JOIN cleaner_state s ON (((s.topic_id = p.topic_id) AND (s.partition = p.partition))))
          WHERE (t.cleanup_policy <> 'delete'::text)) v
  WHERE (( SELECT (NOT acl_settings.enforce)
           FROM acl_settings) OR acl_allowed_v1('topic'::text, v.topic, 'describe'::text));

COMMENT ON VIEW compaction_status IS 'Per partition of every compacted topic: the end of its clean section, its dirty ratio (compaction starts at the topic''s min_cleanable_dirty_ratio) and what compaction has examined and removed so far.';

COMMENT ON COLUMN compaction_status.topic IS 'The topic name.';

COMMENT ON COLUMN compaction_status.partition IS 'The partition number.';

COMMENT ON COLUMN compaction_status.cleanup_policy IS 'compact, or compact,delete (retention too).';

COMMENT ON COLUMN compaction_status.log_start_offset IS 'The first offset still in the log.';

COMMENT ON COLUMN compaction_status.clean_offset IS 'The end of the clean section: below it each key has at most one record.';

COMMENT ON COLUMN compaction_status.high_watermark IS 'The offset the next record will get.';

COMMENT ON COLUMN compaction_status.log_bytes IS 'Bytes of keys, values and headers in the log.';

COMMENT ON COLUMN compaction_status.dirty_ratio IS 'The share of the live bytes above the clean section.';

COMMENT ON COLUMN compaction_status.examined_records IS 'Records compaction has read in dirty sections, in all.';

COMMENT ON COLUMN compaction_status.removed_records IS 'Records compaction has removed, in all.';

COMMENT ON COLUMN compaction_status.removed_bytes IS 'Bytes compaction has removed, in all.';

COMMENT ON COLUMN compaction_status.cleaned_at IS 'When compaction last ran on the partition (NULL: never).';

REVOKE ALL ON TABLE compaction_status FROM PUBLIC, @schema@_reader, @schema@_client, @schema@_admin;

GRANT SELECT ON TABLE compaction_status TO @schema@_reader;

GRANT SELECT ON TABLE compaction_status TO @schema@_client;

GRANT SELECT ON TABLE compaction_status TO @schema@_admin;

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
