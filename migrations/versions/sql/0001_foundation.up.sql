CREATE TABLE groups (
	group_id TEXT NOT NULL,
	state TEXT DEFAULT 'Empty' NOT NULL,
	generation INTEGER DEFAULT 0 NOT NULL,
	assignor TEXT DEFAULT 'range' NOT NULL,
	created_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	updated_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT pk_groups PRIMARY KEY (group_id),
	CONSTRAINT ck_groups_assignor_valid CHECK (assignor IN ('range', 'roundrobin')),
	CONSTRAINT ck_groups_state_valid CHECK (state IN ('Empty', 'PreparingRebalance', 'CompletingRebalance', 'Stable', 'Dead')),
	CONSTRAINT ck_groups_generation_nonnegative CHECK (generation >= 0),
	CONSTRAINT ck_groups_group_id_length CHECK (length(group_id) BETWEEN 1 AND 255)
);

COMMENT ON TABLE groups IS 'Consumer groups and their generations.';

COMMENT ON COLUMN groups.group_id IS 'The consumer group id.';

COMMENT ON COLUMN groups.state IS 'Empty, PreparingRebalance, CompletingRebalance, Stable or Dead.';

COMMENT ON COLUMN groups.generation IS 'Bumped by every membership change; commits must name the current one.';

COMMENT ON COLUMN groups.assignor IS 'The partition assignment strategy computed by the store (''range'' or ''roundrobin'').';

COMMENT ON COLUMN groups.created_at IS 'When the group was created.';

COMMENT ON COLUMN groups.updated_at IS 'When the group last changed state or generation.';

CREATE TABLE producers (
	producer_id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 0 MINVALUE 0),
	transactional_id TEXT,
	epoch SMALLINT DEFAULT 0 NOT NULL,
	last_epoch SMALLINT,
	created_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	last_used_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT pk_producers PRIMARY KEY (producer_id),
	CONSTRAINT ck_producers_epoch_range CHECK (epoch BETWEEN 0 AND 32767),
	CONSTRAINT ck_producers_last_epoch_range CHECK (last_epoch IS NULL OR last_epoch BETWEEN 0 AND 32767),
	CONSTRAINT ck_producers_transactional_id_length CHECK (transactional_id IS NULL OR length(transactional_id) BETWEEN 1 AND 255),
	CONSTRAINT uq_producers_producer_id_transactional_id UNIQUE (producer_id, transactional_id),
	CONSTRAINT uq_producers_transactional_id UNIQUE (transactional_id)
);

COMMENT ON TABLE producers IS 'Producer ids and their epochs.';

COMMENT ON COLUMN producers.producer_id IS 'The producer id, issued by InitProducerId from the column''s sequence.';

COMMENT ON COLUMN producers.transactional_id IS 'The transactional id this producer id serves; NULL for an idempotent-only producer or a producer id retired by epoch exhaustion.';

COMMENT ON COLUMN producers.epoch IS 'The current epoch.';

COMMENT ON COLUMN producers.last_epoch IS 'The epoch before the last bump, so a retried bump can be recognised (KIP-360).';

COMMENT ON COLUMN producers.created_at IS 'When the producer id was issued.';

COMMENT ON COLUMN producers.last_used_at IS 'When the producer id was issued or its epoch last changed; with its sequence state, drives expiration.';

CREATE TABLE settings (
	id SMALLINT DEFAULT 1 NOT NULL,
	producer_id_expiration_ms BIGINT DEFAULT 86400000 NOT NULL,
	transaction_max_timeout_ms BIGINT DEFAULT 900000 NOT NULL,
	transactional_id_expiration_ms BIGINT DEFAULT 604800000 NOT NULL,
	max_batch_records INTEGER DEFAULT 100000 NOT NULL,
	CONSTRAINT pk_settings PRIMARY KEY (id),
	CONSTRAINT ck_settings_single_row CHECK (id = 1),
	CONSTRAINT ck_settings_positive CHECK (producer_id_expiration_ms > 0 AND transaction_max_timeout_ms > 0 AND transactional_id_expiration_ms > 0 AND max_batch_records > 0)
);

COMMENT ON TABLE settings IS 'Store-wide settings (one row), the counterpart of Kafka''s broker configuration.';

COMMENT ON COLUMN settings.id IS 'Always 1: this table has exactly one row.';

COMMENT ON COLUMN settings.producer_id_expiration_ms IS 'A producer''s per-partition sequence state expires after this long idle (Kafka''s producer.id.expiration.ms, default 1 day).';

COMMENT ON COLUMN settings.transaction_max_timeout_ms IS 'The largest transaction timeout a producer may ask for (Kafka''s transaction.max.timeout.ms).';

COMMENT ON COLUMN settings.transactional_id_expiration_ms IS 'A transactional id idle this long in Empty/Complete* becomes Dead (Kafka''s transactional.id.expiration.ms, default 7 days).';

COMMENT ON COLUMN settings.max_batch_records IS 'The most records one produce request may carry.';

CREATE TABLE topics (
	topic_id INTEGER GENERATED ALWAYS AS IDENTITY,
	name TEXT NOT NULL,
	max_message_bytes INTEGER DEFAULT 1048588 NOT NULL,
	retention_ms BIGINT,
	retention_bytes BIGINT,
	created_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT pk_topics PRIMARY KEY (topic_id),
	CONSTRAINT ck_topics_name_valid CHECK (name ~ '^[A-Za-z0-9._-]{1,249}$' AND name NOT IN ('.', '..')),
	CONSTRAINT ck_topics_retention_positive CHECK ((retention_ms IS NULL OR retention_ms > 0) AND (retention_bytes IS NULL OR retention_bytes > 0)),
	CONSTRAINT ck_topics_max_message_bytes_positive CHECK (max_message_bytes > 0),
	CONSTRAINT uq_topics_name UNIQUE (name)
);

COMMENT ON TABLE topics IS 'Topics: named, partitioned logs.';

COMMENT ON COLUMN topics.topic_id IS 'Surrogate key: a topic deleted and created again under the same name gets a new id.';

COMMENT ON COLUMN topics.name IS 'The topic name, unique.';

COMMENT ON COLUMN topics.max_message_bytes IS 'The largest record (key + value + headers) accepted, in bytes (Kafka''s max.message.bytes).';

COMMENT ON COLUMN topics.retention_ms IS 'Records older than this are deleted by maintenance; NULL keeps them forever.';

COMMENT ON COLUMN topics.retention_bytes IS 'Per partition, the oldest records beyond this size are deleted by maintenance; NULL is no limit.';

COMMENT ON COLUMN topics.created_at IS 'When the topic was created.';

CREATE TABLE txn_history (
	id BIGINT GENERATED ALWAYS AS IDENTITY,
	transactional_id TEXT NOT NULL,
	producer_id BIGINT NOT NULL,
	producer_epoch SMALLINT NOT NULL,
	txn_number BIGINT NOT NULL,
	from_state TEXT,
	to_state TEXT NOT NULL,
	at TIMESTAMP WITH TIME ZONE DEFAULT clock_timestamp() NOT NULL,
	CONSTRAINT pk_txn_history PRIMARY KEY (id),
	CONSTRAINT ck_txn_history_from_state_valid CHECK (from_state IS NULL OR from_state IN ('Empty', 'Ongoing', 'PrepareCommit', 'PrepareAbort', 'CompleteCommit', 'CompleteAbort', 'Dead')),
	CONSTRAINT ck_txn_history_to_state_valid CHECK (to_state IN ('Empty', 'Ongoing', 'PrepareCommit', 'PrepareAbort', 'CompleteCommit', 'CompleteAbort', 'Dead'))
);

COMMENT ON TABLE txn_history IS 'Append-only history of every transaction state transition and epoch change (written by a trigger on transactions; updates and deletes are refused).';

COMMENT ON COLUMN txn_history.id IS 'Order of the transitions.';

COMMENT ON COLUMN txn_history.transactional_id IS 'The transactional id (kept after the id itself is removed).';

COMMENT ON COLUMN txn_history.producer_id IS 'The producer id after the transition.';

COMMENT ON COLUMN txn_history.producer_epoch IS 'The producer epoch after the transition.';

COMMENT ON COLUMN txn_history.txn_number IS 'The transaction number after the transition.';

COMMENT ON COLUMN txn_history.from_state IS 'The state before; NULL when the id was created.';

COMMENT ON COLUMN txn_history.to_state IS 'The state after.';

COMMENT ON COLUMN txn_history.at IS 'When the transition happened.';

CREATE INDEX ix_txn_history_transactional_id_id ON txn_history (transactional_id, id);

CREATE TABLE group_members (
	group_id TEXT NOT NULL,
	member_id TEXT NOT NULL,
	group_instance_id TEXT,
	client_id TEXT,
	subscription TEXT[] DEFAULT '{}' NOT NULL,
	session_timeout_ms INTEGER NOT NULL,
	joined_generation INTEGER NOT NULL,
	last_heartbeat_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT pk_group_members PRIMARY KEY (group_id, member_id),
	CONSTRAINT ck_group_members_joined_generation_nonnegative CHECK (joined_generation >= 0),
	CONSTRAINT ck_group_members_id_length CHECK (length(member_id) BETWEEN 1 AND 255 AND (group_instance_id IS NULL OR length(group_instance_id) BETWEEN 1 AND 255)),
	CONSTRAINT ck_group_members_session_timeout_positive CHECK (session_timeout_ms > 0),
	CONSTRAINT fk_group_members_group_id_groups FOREIGN KEY(group_id) REFERENCES groups (group_id) ON DELETE CASCADE,
	CONSTRAINT uq_group_members_group_id_group_instance_id UNIQUE (group_id, group_instance_id)
);

COMMENT ON TABLE group_members IS 'Members of each consumer group.';

COMMENT ON COLUMN group_members.group_id IS 'The group.';

COMMENT ON COLUMN group_members.member_id IS 'The member id, issued by the store at join.';

COMMENT ON COLUMN group_members.group_instance_id IS 'The static member id (group.instance.id); a restarted instance takes its place back.';

COMMENT ON COLUMN group_members.client_id IS 'The client''s self-description, for operators.';

COMMENT ON COLUMN group_members.subscription IS 'The topics the member subscribed to.';

COMMENT ON COLUMN group_members.session_timeout_ms IS 'A member silent for longer than this is removed.';

COMMENT ON COLUMN group_members.joined_generation IS 'The generation in which the member joined.';

COMMENT ON COLUMN group_members.last_heartbeat_at IS 'When the member last heartbeated.';

CREATE TABLE partitions (
	topic_id INTEGER NOT NULL,
	partition INTEGER NOT NULL,
	log_start_offset BIGINT DEFAULT 0 NOT NULL,
	next_offset BIGINT DEFAULT 0 NOT NULL,
	CONSTRAINT pk_partitions PRIMARY KEY (topic_id, partition),
	CONSTRAINT ck_partitions_offsets_ordered CHECK (log_start_offset >= 0 AND next_offset >= log_start_offset),
	CONSTRAINT ck_partitions_partition_nonnegative CHECK (partition >= 0),
	CONSTRAINT fk_partitions_topic_id_topics FOREIGN KEY(topic_id) REFERENCES topics (topic_id) ON DELETE CASCADE
);

COMMENT ON TABLE partitions IS 'Partitions of each topic, with the offsets that bound their log. The row is the append lock of its partition.';

COMMENT ON COLUMN partitions.topic_id IS 'The topic.';

COMMENT ON COLUMN partitions.partition IS 'The partition number, from 0.';

COMMENT ON COLUMN partitions.log_start_offset IS 'The first offset still in the log; retention moves it forward.';

COMMENT ON COLUMN partitions.next_offset IS 'The offset the next record will get: the log end offset (high watermark). Appenders lock this row until commit, so offsets are dense and commit in order.';

CREATE TABLE transactions (
	transactional_id TEXT NOT NULL,
	producer_id BIGINT NOT NULL,
	state TEXT DEFAULT 'Empty' NOT NULL,
	txn_number BIGINT DEFAULT 0 NOT NULL,
	timeout_ms INTEGER DEFAULT 60000 NOT NULL,
	txn_started_at TIMESTAMP WITH TIME ZONE,
	updated_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT pk_transactions PRIMARY KEY (transactional_id),
	CONSTRAINT ck_transactions_started_iff_open CHECK ((txn_started_at IS NOT NULL) = (state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort'))),
	CONSTRAINT ck_transactions_state_valid CHECK (state IN ('Empty', 'Ongoing', 'PrepareCommit', 'PrepareAbort', 'CompleteCommit', 'CompleteAbort', 'Dead')),
	CONSTRAINT ck_transactions_transactional_id_length CHECK (length(transactional_id) BETWEEN 1 AND 255),
	CONSTRAINT ck_transactions_timeout_positive CHECK (timeout_ms > 0),
	CONSTRAINT ck_transactions_txn_number_nonnegative CHECK (txn_number >= 0),
	CONSTRAINT fk_transactions_producer_id_transactional_id_producers FOREIGN KEY(producer_id, transactional_id) REFERENCES producers (producer_id, transactional_id) DEFERRABLE INITIALLY DEFERRED,
	CONSTRAINT uq_transactions_producer_id UNIQUE (producer_id)
);

COMMENT ON TABLE transactions IS 'The transaction journal: the coordinator''s current state per transactional id.';

COMMENT ON COLUMN transactions.transactional_id IS 'The transactional id.';

COMMENT ON COLUMN transactions.producer_id IS 'The producer id currently serving this transactional id.';

COMMENT ON COLUMN transactions.state IS 'The coordinator state: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort or Dead. Transitions are checked and journalled by a trigger.';

COMMENT ON COLUMN transactions.txn_number IS 'Counts the transactions of this transactional id; every call names the one it acts on, so a delayed call of transaction N can never touch transaction N+1.';

COMMENT ON COLUMN transactions.timeout_ms IS 'The transaction timeout asked for by the producer at InitProducerId.';

COMMENT ON COLUMN transactions.txn_started_at IS 'When the open transaction started; NULL unless Ongoing or Prepare*.';

COMMENT ON COLUMN transactions.updated_at IS 'When the state last changed; drives transactional id expiration.';

CREATE TABLE committed_offsets (
	group_id TEXT NOT NULL,
	topic_id INTEGER NOT NULL,
	partition INTEGER NOT NULL,
	committed_offset BIGINT NOT NULL,
	metadata TEXT DEFAULT '' NOT NULL,
	commit_seq BIGINT NOT NULL,
	producer_id BIGINT,
	committed_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT pk_committed_offsets PRIMARY KEY (group_id, topic_id, partition),
	CONSTRAINT ck_committed_offsets_offset_nonnegative CHECK (committed_offset >= 0),
	CONSTRAINT ck_committed_offsets_metadata_size CHECK (octet_length(metadata) <= 4096),
	CONSTRAINT fk_committed_offsets_group_id_groups FOREIGN KEY(group_id) REFERENCES groups (group_id) ON DELETE CASCADE,
	CONSTRAINT fk_committed_offsets_topic_id_partition_partitions FOREIGN KEY(topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);

COMMENT ON TABLE committed_offsets IS 'Committed consumer group offsets.';

COMMENT ON COLUMN committed_offsets.group_id IS 'The group.';

COMMENT ON COLUMN committed_offsets.topic_id IS 'The topic.';

COMMENT ON COLUMN committed_offsets.partition IS 'The partition.';

COMMENT ON COLUMN committed_offsets.committed_offset IS 'The next offset the group will consume in this partition.';

COMMENT ON COLUMN committed_offsets.metadata IS 'Client metadata.';

COMMENT ON COLUMN committed_offsets.commit_seq IS 'Position of the commit in the store''s commit order (offset_commit_seq); a transaction''s pending offsets replace these only if written later (Kafka''s rule).';

COMMENT ON COLUMN committed_offsets.producer_id IS 'The transactional producer whose commit wrote this offset; NULL for a plain commit.';

COMMENT ON COLUMN committed_offsets.committed_at IS 'When the offset was committed.';

CREATE TABLE member_assignments (
	group_id TEXT NOT NULL,
	topic_id INTEGER NOT NULL,
	partition INTEGER NOT NULL,
	member_id TEXT NOT NULL,
	generation INTEGER NOT NULL,
	CONSTRAINT pk_member_assignments PRIMARY KEY (group_id, topic_id, partition),
	CONSTRAINT fk_member_assignments_group_id_member_id_group_members FOREIGN KEY(group_id, member_id) REFERENCES group_members (group_id, member_id) ON DELETE CASCADE ON UPDATE CASCADE,
	CONSTRAINT fk_member_assignments_topic_id_partition_partitions FOREIGN KEY(topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);

COMMENT ON TABLE member_assignments IS 'The current assignment: each partition belongs to at most one member of a group.';

COMMENT ON COLUMN member_assignments.group_id IS 'The group.';

COMMENT ON COLUMN member_assignments.topic_id IS 'The topic.';

COMMENT ON COLUMN member_assignments.partition IS 'The partition.';

COMMENT ON COLUMN member_assignments.member_id IS 'The member that owns the partition.';

COMMENT ON COLUMN member_assignments.generation IS 'The generation in which this assignment was computed.';

CREATE INDEX ix_member_assignments_group_id_member_id ON member_assignments (group_id, member_id);

CREATE TABLE pending_offsets (
	group_id TEXT NOT NULL,
	topic_id INTEGER NOT NULL,
	partition INTEGER NOT NULL,
	producer_id BIGINT NOT NULL,
	transactional_id TEXT NOT NULL,
	committed_offset BIGINT NOT NULL,
	metadata TEXT DEFAULT '' NOT NULL,
	commit_seq BIGINT NOT NULL,
	generation INTEGER NOT NULL,
	member_id TEXT NOT NULL,
	CONSTRAINT pk_pending_offsets PRIMARY KEY (group_id, topic_id, partition, producer_id),
	CONSTRAINT ck_pending_offsets_offset_nonnegative CHECK (committed_offset >= 0),
	CONSTRAINT ck_pending_offsets_metadata_size CHECK (octet_length(metadata) <= 4096),
	CONSTRAINT fk_pending_offsets_group_id_groups FOREIGN KEY(group_id) REFERENCES groups (group_id) ON DELETE CASCADE,
	CONSTRAINT fk_pending_offsets_producer_id_producers FOREIGN KEY(producer_id) REFERENCES producers (producer_id) ON DELETE CASCADE,
	CONSTRAINT fk_pending_offsets_topic_id_partition_partitions FOREIGN KEY(topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE,
	CONSTRAINT fk_pending_offsets_transactional_id_transactions FOREIGN KEY(transactional_id) REFERENCES transactions (transactional_id) ON DELETE CASCADE
);

COMMENT ON TABLE pending_offsets IS 'Offsets committed inside an open transaction (TxnOffsetCommit), applied by its commit and dropped by its abort (KIP-447).';

COMMENT ON COLUMN pending_offsets.group_id IS 'The group.';

COMMENT ON COLUMN pending_offsets.topic_id IS 'The topic.';

COMMENT ON COLUMN pending_offsets.partition IS 'The partition.';

COMMENT ON COLUMN pending_offsets.producer_id IS 'The transactional producer whose open transaction holds this offset.';

COMMENT ON COLUMN pending_offsets.transactional_id IS 'The transaction that holds this offset.';

COMMENT ON COLUMN pending_offsets.committed_offset IS 'The offset to commit when the transaction commits.';

COMMENT ON COLUMN pending_offsets.metadata IS 'Client metadata.';

COMMENT ON COLUMN pending_offsets.commit_seq IS 'Position of this TxnOffsetCommit in the store''s commit order (offset_commit_seq).';

COMMENT ON COLUMN pending_offsets.generation IS 'The group generation the member committed in.';

COMMENT ON COLUMN pending_offsets.member_id IS 'The member that committed.';

CREATE INDEX ix_pending_offsets_transactional_id ON pending_offsets (transactional_id);

CREATE TABLE producer_partition_state (
	producer_id BIGINT NOT NULL,
	topic_id INTEGER NOT NULL,
	partition INTEGER NOT NULL,
	epoch SMALLINT NOT NULL,
	first_sequences INTEGER[] NOT NULL,
	last_sequences INTEGER[] NOT NULL,
	first_offsets BIGINT[] NOT NULL,
	last_offsets BIGINT[] NOT NULL,
	timestamps TIMESTAMP WITH TIME ZONE[] NOT NULL,
	updated_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT pk_producer_partition_state PRIMARY KEY (producer_id, topic_id, partition),
	CONSTRAINT ck_producer_partition_state_window_shape CHECK (cardinality(first_sequences) BETWEEN 1 AND 5 AND cardinality(last_sequences) = cardinality(first_sequences) AND cardinality(first_offsets) = cardinality(first_sequences) AND cardinality(last_offsets) = cardinality(first_sequences) AND cardinality(timestamps) = cardinality(first_sequences)),
	CONSTRAINT ck_producer_partition_state_epoch_range CHECK (epoch BETWEEN 0 AND 32767),
	CONSTRAINT fk_producer_partition_state_producer_id_producers FOREIGN KEY(producer_id) REFERENCES producers (producer_id) ON DELETE CASCADE,
	CONSTRAINT fk_producer_partition_state_topic_id_partition_partitions FOREIGN KEY(topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);

COMMENT ON TABLE producer_partition_state IS 'Per producer and partition: the last 5 batches, for sequence checks and duplicate detection. Kept apart from the log, so retention never loses it; expires only when idle.';

COMMENT ON COLUMN producer_partition_state.producer_id IS 'The producer.';

COMMENT ON COLUMN producer_partition_state.topic_id IS 'The topic.';

COMMENT ON COLUMN producer_partition_state.partition IS 'The partition.';

COMMENT ON COLUMN producer_partition_state.epoch IS 'The epoch of the batches below; a bump resets them.';

COMMENT ON COLUMN producer_partition_state.first_sequences IS 'First sequence of each retained batch, oldest first (at most 5).';

COMMENT ON COLUMN producer_partition_state.last_sequences IS 'Last sequence of each retained batch, oldest first.';

COMMENT ON COLUMN producer_partition_state.first_offsets IS 'Offset of the first record of each retained batch, oldest first.';

COMMENT ON COLUMN producer_partition_state.last_offsets IS 'Offset of the last record of each retained batch, oldest first.';

COMMENT ON COLUMN producer_partition_state.timestamps IS 'Append time of each retained batch, returned again to a duplicate.';

COMMENT ON COLUMN producer_partition_state.updated_at IS 'When this producer last wrote to this partition.';

CREATE TABLE records (
	topic_id INTEGER NOT NULL,
	partition INTEGER NOT NULL,
	"offset" BIGINT NOT NULL,
	producer_id BIGINT,
	producer_epoch SMALLINT,
	sequence INTEGER,
	is_transactional BOOLEAN DEFAULT false NOT NULL,
	control_type TEXT,
	key BYTEA,
	value BYTEA,
	headers JSONB,
	timestamp TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
	CONSTRAINT pk_records PRIMARY KEY (topic_id, partition, "offset"),
	CONSTRAINT ck_records_control_type_valid CHECK (control_type IN ('commit', 'abort')),
	CONSTRAINT ck_records_headers_array CHECK (headers IS NULL OR jsonb_typeof(headers) = 'array'),
	CONSTRAINT ck_records_offset_nonnegative CHECK ("offset" >= 0),
	CONSTRAINT ck_records_producer_id_with_epoch CHECK ((producer_id IS NULL) = (producer_epoch IS NULL)),
	CONSTRAINT ck_records_transactional_has_producer CHECK (NOT is_transactional OR producer_id IS NOT NULL),
	CONSTRAINT ck_records_data_record_has_sequence CHECK (control_type IS NOT NULL OR producer_id IS NULL OR sequence IS NOT NULL),
	CONSTRAINT ck_records_control_record_shape CHECK (control_type IS NULL OR (is_transactional AND producer_id IS NOT NULL AND sequence IS NULL AND key IS NULL AND value IS NULL AND headers IS NULL)),
	CONSTRAINT ck_records_epoch_range CHECK (producer_epoch IS NULL OR producer_epoch BETWEEN 0 AND 32767),
	CONSTRAINT ck_records_sequence_range CHECK (sequence IS NULL OR sequence BETWEEN 0 AND 2147483647),
	CONSTRAINT fk_records_topic_id_partition_partitions FOREIGN KEY(topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE
);

COMMENT ON TABLE records IS 'The log: one row per record or control marker, keyed (topic, partition, offset).';

COMMENT ON COLUMN records.topic_id IS 'The topic.';

COMMENT ON COLUMN records.partition IS 'The partition.';

COMMENT ON COLUMN records."offset" IS 'The record''s offset, dense per partition.';

COMMENT ON COLUMN records.producer_id IS 'The producer that wrote the record; NULL for a producer without idempotence.';

COMMENT ON COLUMN records.producer_epoch IS 'The producer''s epoch at write time.';

COMMENT ON COLUMN records.sequence IS 'The record''s sequence number for (producer, partition); NULL for control records.';

COMMENT ON COLUMN records.is_transactional IS 'True when the record belongs to a transaction (decided by a later control record).';

COMMENT ON COLUMN records.control_type IS '''commit'' or ''abort'' for a transaction marker written by the coordinator; NULL for data.';

COMMENT ON COLUMN records.key IS 'The record key.';

COMMENT ON COLUMN records.value IS 'The record value; NULL is a tombstone.';

COMMENT ON COLUMN records.headers IS 'Headers as a JSON array of {"key": text, "value": base64 or null}, in order; NULL if none.';

COMMENT ON COLUMN records.timestamp IS 'The record''s timestamp: the producer''s create time, or the append time if none was given.';

CREATE TABLE txn_partitions (
	transactional_id TEXT NOT NULL,
	topic_id INTEGER NOT NULL,
	partition INTEGER NOT NULL,
	first_offset BIGINT,
	CONSTRAINT pk_txn_partitions PRIMARY KEY (transactional_id, topic_id, partition),
	CONSTRAINT ck_txn_partitions_first_offset_nonnegative CHECK (first_offset IS NULL OR first_offset >= 0),
	CONSTRAINT fk_txn_partitions_topic_id_partition_partitions FOREIGN KEY(topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE,
	CONSTRAINT fk_txn_partitions_transactional_id_transactions FOREIGN KEY(transactional_id) REFERENCES transactions (transactional_id) ON DELETE CASCADE
);

COMMENT ON TABLE txn_partitions IS 'The partitions of each open transaction (AddPartitionsToTxn), emptied when it completes.';

COMMENT ON COLUMN txn_partitions.transactional_id IS 'The transaction.';

COMMENT ON COLUMN txn_partitions.topic_id IS 'The topic.';

COMMENT ON COLUMN txn_partitions.partition IS 'The partition added to the transaction.';

COMMENT ON COLUMN txn_partitions.first_offset IS 'Offset of the transaction''s first record in this partition; NULL until one is written. The smallest first offset of open transactions is the partition''s last stable offset.';

CREATE INDEX ix_txn_partitions_topic_id_partition ON txn_partitions (topic_id, partition);

CREATE SEQUENCE offset_commit_seq AS bigint;
COMMENT ON SEQUENCE offset_commit_seq IS
  'Orders offset commits (plain and transactional): a transaction''s pending offsets replace a committed '
  'offset only if they were written after it.';

INSERT INTO settings DEFAULT VALUES;

COMMENT ON TABLE alembic_version IS 'The migration revision this schema is at (alembic; see oncelog db current).';
COMMENT ON COLUMN alembic_version.version_num IS 'The alembic revision id.';

CREATE FUNCTION txn_transition_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_epoch smallint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'Empty' THEN
            RAISE EXCEPTION USING ERRCODE = 'OL303',
                MESSAGE = format('transactional id %L must start in state Empty, not %s',
                                 NEW.transactional_id, NEW.state);
        END IF;
    ELSIF (OLD.state, NEW.state) NOT IN (
        ('Empty', 'Empty'), ('Empty', 'Ongoing'), ('Empty', 'Dead'),
        ('Ongoing', 'Ongoing'), ('Ongoing', 'PrepareCommit'), ('Ongoing', 'PrepareAbort'),
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
    INSERT INTO txn_history (transactional_id, producer_id, producer_epoch, txn_number, from_state, to_state)
    VALUES (NEW.transactional_id, NEW.producer_id, v_epoch, NEW.txn_number,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END, NEW.state);
    RETURN NEW;
END
$fn$;
COMMENT ON FUNCTION txn_transition_v1() IS
  'Trigger: refuses illegal coordinator state transitions (SQLSTATE OL303) and appends every transition '
  'to txn_history.';

CREATE TRIGGER transactions_transition
BEFORE INSERT OR UPDATE OF state, producer_id, txn_number ON transactions
FOR EACH ROW EXECUTE FUNCTION txn_transition_v1();

CREATE FUNCTION refuse_change_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'OL000',
        MESSAGE = format('%s is append-only: %s is refused', TG_TABLE_NAME, TG_OP);
END
$fn$;
COMMENT ON FUNCTION refuse_change_v1() IS 'Trigger: refuses UPDATE and DELETE on append-only tables.';

CREATE TRIGGER txn_history_append_only
BEFORE UPDATE OR DELETE ON txn_history
FOR EACH ROW EXECUTE FUNCTION refuse_change_v1();
