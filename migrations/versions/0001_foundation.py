"""Foundation schema: topics, the log, producers, the transaction journal, groups and offsets.

Revision ID: 0001
Revises:
Create Date: 2026-11-21

Beyond the tables (generated from oncelog.store.schema, then reviewed), this revision installs:
the settings row, the offset commit sequence, and two triggers that make the persisted
transaction state machine and its append-only history impossible to bypass from any client.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Legal moves of the persisted coordinator state machine (Kafka's TransactionState, with the
# epoch fence folded into PrepareAbort because a fence and its abort commit in one database
# transaction here). Empty -> Empty is an epoch bump by InitProducerId; Dead -> Empty is a
# transactional id used again after it expired.
CREATE_SQL = """
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
"""

DROP_SQL = """
DROP TRIGGER IF EXISTS txn_history_append_only ON txn_history;
DROP TRIGGER IF EXISTS transactions_transition ON transactions;
DROP FUNCTION IF EXISTS refuse_change_v1();
DROP FUNCTION IF EXISTS txn_transition_v1();
DROP SEQUENCE IF EXISTS offset_commit_seq;
"""


def upgrade(schema: str) -> None:
    """Create the foundation tables, sequence, settings row and journal triggers."""
    op.create_table(
        "groups",
        sa.Column("group_id", sa.Text(), nullable=False, comment="The consumer group id."),
        sa.Column(
            "state",
            sa.Text(),
            server_default=sa.text("'Empty'"),
            nullable=False,
            comment="Empty, PreparingRebalance, CompletingRebalance, Stable or Dead.",
        ),
        sa.Column(
            "generation",
            sa.Integer(),
            server_default=sa.text("0"),
            nullable=False,
            comment="Bumped by every membership change; commits must name the current one.",
        ),
        sa.Column(
            "assignor",
            sa.Text(),
            server_default=sa.text("'range'"),
            nullable=False,
            comment="The partition assignment strategy computed by the store ('range' or 'roundrobin').",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the group was created.",
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the group last changed state or generation.",
        ),
        sa.CheckConstraint("assignor IN ('range', 'roundrobin')", name=op.f("ck_groups_assignor_valid")),
        sa.CheckConstraint(
            "state IN ('Empty', 'PreparingRebalance', 'CompletingRebalance', 'Stable', 'Dead')",
            name=op.f("ck_groups_state_valid"),
        ),
        sa.CheckConstraint("generation >= 0", name=op.f("ck_groups_generation_nonnegative")),
        sa.CheckConstraint("length(group_id) BETWEEN 1 AND 255", name=op.f("ck_groups_group_id_length")),
        sa.PrimaryKeyConstraint("group_id", name=op.f("pk_groups")),
        comment="Consumer groups and their generations.",
    )
    op.create_table(
        "producers",
        sa.Column(
            "producer_id",
            sa.BigInteger(),
            sa.Identity(always=True, start=0, minvalue=0),
            nullable=False,
            comment="The producer id, issued by InitProducerId from the column's sequence.",
        ),
        sa.Column(
            "transactional_id",
            sa.Text(),
            nullable=True,
            comment="The transactional id this producer id serves; NULL for an idempotent-only producer or a producer id retired by epoch exhaustion.",
        ),
        sa.Column(
            "epoch",
            sa.SmallInteger(),
            server_default=sa.text("0"),
            nullable=False,
            comment="The current epoch.",
        ),
        sa.Column(
            "last_epoch",
            sa.SmallInteger(),
            nullable=True,
            comment="The epoch before the last bump, so a retried bump can be recognised (KIP-360).",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the producer id was issued.",
        ),
        sa.Column(
            "last_used_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the producer id was issued or its epoch last changed; with its sequence state, drives expiration.",
        ),
        sa.CheckConstraint("epoch BETWEEN 0 AND 32767", name=op.f("ck_producers_epoch_range")),
        sa.CheckConstraint(
            "last_epoch IS NULL OR last_epoch BETWEEN 0 AND 32767", name=op.f("ck_producers_last_epoch_range")
        ),
        sa.CheckConstraint(
            "transactional_id IS NULL OR length(transactional_id) BETWEEN 1 AND 255",
            name=op.f("ck_producers_transactional_id_length"),
        ),
        sa.PrimaryKeyConstraint("producer_id", name=op.f("pk_producers")),
        sa.UniqueConstraint("producer_id", "transactional_id", name=op.f("uq_producers_producer_id_transactional_id")),
        sa.UniqueConstraint("transactional_id", name=op.f("uq_producers_transactional_id")),
        comment="Producer ids and their epochs.",
    )
    op.create_table(
        "settings",
        sa.Column(
            "id",
            sa.SmallInteger(),
            server_default=sa.text("1"),
            nullable=False,
            comment="Always 1: this table has exactly one row.",
        ),
        sa.Column(
            "producer_id_expiration_ms",
            sa.BigInteger(),
            server_default=sa.text("86400000"),
            nullable=False,
            comment="A producer's per-partition sequence state expires after this long idle (Kafka's producer.id.expiration.ms, default 1 day).",
        ),
        sa.Column(
            "transaction_max_timeout_ms",
            sa.BigInteger(),
            server_default=sa.text("900000"),
            nullable=False,
            comment="The largest transaction timeout a producer may ask for (Kafka's transaction.max.timeout.ms).",
        ),
        sa.Column(
            "transactional_id_expiration_ms",
            sa.BigInteger(),
            server_default=sa.text("604800000"),
            nullable=False,
            comment="A transactional id idle this long in Empty/Complete* becomes Dead (Kafka's transactional.id.expiration.ms, default 7 days).",
        ),
        sa.Column(
            "max_batch_records",
            sa.Integer(),
            server_default=sa.text("100000"),
            nullable=False,
            comment="The most records one produce request may carry.",
        ),
        sa.CheckConstraint("id = 1", name=op.f("ck_settings_single_row")),
        sa.CheckConstraint(
            "producer_id_expiration_ms > 0 AND transaction_max_timeout_ms > 0 AND transactional_id_expiration_ms > 0 AND max_batch_records > 0",
            name=op.f("ck_settings_positive"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_settings")),
        comment="Store-wide settings (one row), the counterpart of Kafka's broker configuration.",
    )
    op.create_table(
        "topics",
        sa.Column(
            "topic_id",
            sa.Integer(),
            sa.Identity(always=True),
            nullable=False,
            comment="Surrogate key: a topic deleted and created again under the same name gets a new id.",
        ),
        sa.Column("name", sa.Text(), nullable=False, comment="The topic name, unique."),
        sa.Column(
            "max_message_bytes",
            sa.Integer(),
            server_default=sa.text("1048588"),
            nullable=False,
            comment="The largest record (key + value + headers) accepted, in bytes (Kafka's max.message.bytes).",
        ),
        sa.Column(
            "retention_ms",
            sa.BigInteger(),
            nullable=True,
            comment="Records older than this are deleted by maintenance; NULL keeps them forever.",
        ),
        sa.Column(
            "retention_bytes",
            sa.BigInteger(),
            nullable=True,
            comment="Per partition, the oldest records beyond this size are deleted by maintenance; NULL is no limit.",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the topic was created.",
        ),
        sa.CheckConstraint(
            "name ~ '^[A-Za-z0-9._-]{1,249}$' AND name NOT IN ('.', '..')", name=op.f("ck_topics_name_valid")
        ),
        sa.CheckConstraint(
            "(retention_ms IS NULL OR retention_ms > 0) AND (retention_bytes IS NULL OR retention_bytes > 0)",
            name=op.f("ck_topics_retention_positive"),
        ),
        sa.CheckConstraint("max_message_bytes > 0", name=op.f("ck_topics_max_message_bytes_positive")),
        sa.PrimaryKeyConstraint("topic_id", name=op.f("pk_topics")),
        sa.UniqueConstraint("name", name=op.f("uq_topics_name")),
        comment="Topics: named, partitioned logs.",
    )
    op.create_table(
        "txn_history",
        sa.Column(
            "id",
            sa.BigInteger(),
            sa.Identity(always=True),
            nullable=False,
            comment="Order of the transitions.",
        ),
        sa.Column(
            "transactional_id",
            sa.Text(),
            nullable=False,
            comment="The transactional id (kept after the id itself is removed).",
        ),
        sa.Column("producer_id", sa.BigInteger(), nullable=False, comment="The producer id after the transition."),
        sa.Column(
            "producer_epoch",
            sa.SmallInteger(),
            nullable=False,
            comment="The producer epoch after the transition.",
        ),
        sa.Column(
            "txn_number",
            sa.BigInteger(),
            nullable=False,
            comment="The transaction number after the transition.",
        ),
        sa.Column("from_state", sa.Text(), nullable=True, comment="The state before; NULL when the id was created."),
        sa.Column("to_state", sa.Text(), nullable=False, comment="The state after."),
        sa.Column(
            "at",
            sa.DateTime(timezone=True),
            server_default=sa.text("clock_timestamp()"),
            nullable=False,
            comment="When the transition happened.",
        ),
        sa.CheckConstraint(
            "from_state IS NULL OR from_state IN ('Empty', 'Ongoing', 'PrepareCommit', 'PrepareAbort', 'CompleteCommit', 'CompleteAbort', 'Dead')",
            name=op.f("ck_txn_history_from_state_valid"),
        ),
        sa.CheckConstraint(
            "to_state IN ('Empty', 'Ongoing', 'PrepareCommit', 'PrepareAbort', 'CompleteCommit', 'CompleteAbort', 'Dead')",
            name=op.f("ck_txn_history_to_state_valid"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_txn_history")),
        comment="Append-only history of every transaction state transition and epoch change (written by a trigger on transactions; updates and deletes are refused).",
    )
    op.create_index(op.f("ix_txn_history_transactional_id_id"), "txn_history", ["transactional_id", "id"], unique=False)
    op.create_table(
        "group_members",
        sa.Column("group_id", sa.Text(), nullable=False, comment="The group."),
        sa.Column("member_id", sa.Text(), nullable=False, comment="The member id, issued by the store at join."),
        sa.Column(
            "group_instance_id",
            sa.Text(),
            nullable=True,
            comment="The static member id (group.instance.id); a restarted instance takes its place back.",
        ),
        sa.Column("client_id", sa.Text(), nullable=True, comment="The client's self-description, for operators."),
        sa.Column(
            "subscription",
            postgresql.ARRAY(sa.Text(), dimensions=1),
            server_default=sa.text("'{}'"),
            nullable=False,
            comment="The topics the member subscribed to.",
        ),
        sa.Column(
            "session_timeout_ms",
            sa.Integer(),
            nullable=False,
            comment="A member silent for longer than this is removed.",
        ),
        sa.Column(
            "joined_generation",
            sa.Integer(),
            nullable=False,
            comment="The generation in which the member joined.",
        ),
        sa.Column(
            "last_heartbeat_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the member last heartbeated.",
        ),
        sa.CheckConstraint("joined_generation >= 0", name=op.f("ck_group_members_joined_generation_nonnegative")),
        sa.CheckConstraint(
            "length(member_id) BETWEEN 1 AND 255 AND (group_instance_id IS NULL OR length(group_instance_id) BETWEEN 1 AND 255)",
            name=op.f("ck_group_members_id_length"),
        ),
        sa.CheckConstraint("session_timeout_ms > 0", name=op.f("ck_group_members_session_timeout_positive")),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["groups.group_id"],
            name=op.f("fk_group_members_group_id_groups"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("group_id", "member_id", name=op.f("pk_group_members")),
        sa.UniqueConstraint("group_id", "group_instance_id", name=op.f("uq_group_members_group_id_group_instance_id")),
        comment="Members of each consumer group.",
    )
    op.create_table(
        "partitions",
        sa.Column("topic_id", sa.Integer(), nullable=False, comment="The topic."),
        sa.Column("partition", sa.Integer(), nullable=False, comment="The partition number, from 0."),
        sa.Column(
            "log_start_offset",
            sa.BigInteger(),
            server_default=sa.text("0"),
            nullable=False,
            comment="The first offset still in the log; retention moves it forward.",
        ),
        sa.Column(
            "next_offset",
            sa.BigInteger(),
            server_default=sa.text("0"),
            nullable=False,
            comment="The offset the next record will get: the log end offset (high watermark). Appenders lock this row until commit, so offsets are dense and commit in order.",
        ),
        sa.CheckConstraint(
            "log_start_offset >= 0 AND next_offset >= log_start_offset",
            name=op.f("ck_partitions_offsets_ordered"),
        ),
        sa.CheckConstraint("partition >= 0", name=op.f("ck_partitions_partition_nonnegative")),
        sa.ForeignKeyConstraint(
            ["topic_id"], ["topics.topic_id"], name=op.f("fk_partitions_topic_id_topics"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("topic_id", "partition", name=op.f("pk_partitions")),
        comment="Partitions of each topic, with the offsets that bound their log. The row is the append lock of its partition.",
    )
    op.create_table(
        "transactions",
        sa.Column("transactional_id", sa.Text(), nullable=False, comment="The transactional id."),
        sa.Column(
            "producer_id",
            sa.BigInteger(),
            nullable=False,
            comment="The producer id currently serving this transactional id.",
        ),
        sa.Column(
            "state",
            sa.Text(),
            server_default=sa.text("'Empty'"),
            nullable=False,
            comment="The coordinator state: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort or Dead. Transitions are checked and journalled by a trigger.",
        ),
        sa.Column(
            "txn_number",
            sa.BigInteger(),
            server_default=sa.text("0"),
            nullable=False,
            comment="Counts the transactions of this transactional id; every call names the one it acts on, so a delayed call of transaction N can never touch transaction N+1.",
        ),
        sa.Column(
            "timeout_ms",
            sa.Integer(),
            server_default=sa.text("60000"),
            nullable=False,
            comment="The transaction timeout asked for by the producer at InitProducerId.",
        ),
        sa.Column(
            "txn_started_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="When the open transaction started; NULL unless Ongoing or Prepare*.",
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the state last changed; drives transactional id expiration.",
        ),
        sa.CheckConstraint(
            "(txn_started_at IS NOT NULL) = (state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort'))",
            name=op.f("ck_transactions_started_iff_open"),
        ),
        sa.CheckConstraint(
            "state IN ('Empty', 'Ongoing', 'PrepareCommit', 'PrepareAbort', 'CompleteCommit', 'CompleteAbort', 'Dead')",
            name=op.f("ck_transactions_state_valid"),
        ),
        sa.CheckConstraint(
            "length(transactional_id) BETWEEN 1 AND 255", name=op.f("ck_transactions_transactional_id_length")
        ),
        sa.CheckConstraint("timeout_ms > 0", name=op.f("ck_transactions_timeout_positive")),
        sa.CheckConstraint("txn_number >= 0", name=op.f("ck_transactions_txn_number_nonnegative")),
        sa.ForeignKeyConstraint(
            ["producer_id", "transactional_id"],
            ["producers.producer_id", "producers.transactional_id"],
            name=op.f("fk_transactions_producer_id_transactional_id_producers"),
            initially="DEFERRED",
            deferrable=True,
        ),
        sa.PrimaryKeyConstraint("transactional_id", name=op.f("pk_transactions")),
        sa.UniqueConstraint("producer_id", name=op.f("uq_transactions_producer_id")),
        comment="The transaction journal: the coordinator's current state per transactional id.",
    )
    op.create_table(
        "committed_offsets",
        sa.Column("group_id", sa.Text(), nullable=False, comment="The group."),
        sa.Column("topic_id", sa.Integer(), nullable=False, comment="The topic."),
        sa.Column("partition", sa.Integer(), nullable=False, comment="The partition."),
        sa.Column(
            "committed_offset",
            sa.BigInteger(),
            nullable=False,
            comment="The next offset the group will consume in this partition.",
        ),
        sa.Column("metadata", sa.Text(), server_default=sa.text("''"), nullable=False, comment="Client metadata."),
        sa.Column(
            "commit_seq",
            sa.BigInteger(),
            nullable=False,
            comment="Position of the commit in the store's commit order (offset_commit_seq); a transaction's pending offsets replace these only if written later (Kafka's rule).",
        ),
        sa.Column(
            "producer_id",
            sa.BigInteger(),
            nullable=True,
            comment="The transactional producer whose commit wrote this offset; NULL for a plain commit.",
        ),
        sa.Column(
            "committed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When the offset was committed.",
        ),
        sa.CheckConstraint("committed_offset >= 0", name=op.f("ck_committed_offsets_offset_nonnegative")),
        sa.CheckConstraint("octet_length(metadata) <= 4096", name=op.f("ck_committed_offsets_metadata_size")),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["groups.group_id"],
            name=op.f("fk_committed_offsets_group_id_groups"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["topic_id", "partition"],
            ["partitions.topic_id", "partitions.partition"],
            name=op.f("fk_committed_offsets_topic_id_partition_partitions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("group_id", "topic_id", "partition", name=op.f("pk_committed_offsets")),
        comment="Committed consumer group offsets.",
    )
    op.create_table(
        "member_assignments",
        sa.Column("group_id", sa.Text(), nullable=False, comment="The group."),
        sa.Column("topic_id", sa.Integer(), nullable=False, comment="The topic."),
        sa.Column("partition", sa.Integer(), nullable=False, comment="The partition."),
        sa.Column("member_id", sa.Text(), nullable=False, comment="The member that owns the partition."),
        sa.Column(
            "generation",
            sa.Integer(),
            nullable=False,
            comment="The generation in which this assignment was computed.",
        ),
        sa.ForeignKeyConstraint(
            ["group_id", "member_id"],
            ["group_members.group_id", "group_members.member_id"],
            name=op.f("fk_member_assignments_group_id_member_id_group_members"),
            onupdate="CASCADE",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["topic_id", "partition"],
            ["partitions.topic_id", "partitions.partition"],
            name=op.f("fk_member_assignments_topic_id_partition_partitions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("group_id", "topic_id", "partition", name=op.f("pk_member_assignments")),
        comment="The current assignment: each partition belongs to at most one member of a group.",
    )
    op.create_index(
        op.f("ix_member_assignments_group_id_member_id"),
        "member_assignments",
        ["group_id", "member_id"],
        unique=False,
    )
    op.create_table(
        "pending_offsets",
        sa.Column("group_id", sa.Text(), nullable=False, comment="The group."),
        sa.Column("topic_id", sa.Integer(), nullable=False, comment="The topic."),
        sa.Column("partition", sa.Integer(), nullable=False, comment="The partition."),
        sa.Column(
            "producer_id",
            sa.BigInteger(),
            nullable=False,
            comment="The transactional producer whose open transaction holds this offset.",
        ),
        sa.Column("transactional_id", sa.Text(), nullable=False, comment="The transaction that holds this offset."),
        sa.Column(
            "committed_offset",
            sa.BigInteger(),
            nullable=False,
            comment="The offset to commit when the transaction commits.",
        ),
        sa.Column("metadata", sa.Text(), server_default=sa.text("''"), nullable=False, comment="Client metadata."),
        sa.Column(
            "commit_seq",
            sa.BigInteger(),
            nullable=False,
            comment="Position of this TxnOffsetCommit in the store's commit order (offset_commit_seq).",
        ),
        sa.Column(
            "generation",
            sa.Integer(),
            nullable=False,
            comment="The group generation the member committed in.",
        ),
        sa.Column("member_id", sa.Text(), nullable=False, comment="The member that committed."),
        sa.CheckConstraint("committed_offset >= 0", name=op.f("ck_pending_offsets_offset_nonnegative")),
        sa.CheckConstraint("octet_length(metadata) <= 4096", name=op.f("ck_pending_offsets_metadata_size")),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["groups.group_id"],
            name=op.f("fk_pending_offsets_group_id_groups"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["producer_id"],
            ["producers.producer_id"],
            name=op.f("fk_pending_offsets_producer_id_producers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["topic_id", "partition"],
            ["partitions.topic_id", "partitions.partition"],
            name=op.f("fk_pending_offsets_topic_id_partition_partitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["transactional_id"],
            ["transactions.transactional_id"],
            name=op.f("fk_pending_offsets_transactional_id_transactions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("group_id", "topic_id", "partition", "producer_id", name=op.f("pk_pending_offsets")),
        comment="Offsets committed inside an open transaction (TxnOffsetCommit), applied by its commit and dropped by its abort (KIP-447).",
    )
    op.create_index(op.f("ix_pending_offsets_transactional_id"), "pending_offsets", ["transactional_id"], unique=False)
    op.create_table(
        "producer_partition_state",
        sa.Column("producer_id", sa.BigInteger(), nullable=False, comment="The producer."),
        sa.Column("topic_id", sa.Integer(), nullable=False, comment="The topic."),
        sa.Column("partition", sa.Integer(), nullable=False, comment="The partition."),
        sa.Column(
            "epoch",
            sa.SmallInteger(),
            nullable=False,
            comment="The epoch of the batches below; a bump resets them.",
        ),
        sa.Column(
            "first_sequences",
            postgresql.ARRAY(sa.Integer(), dimensions=1),
            nullable=False,
            comment="First sequence of each retained batch, oldest first (at most 5).",
        ),
        sa.Column(
            "last_sequences",
            postgresql.ARRAY(sa.Integer(), dimensions=1),
            nullable=False,
            comment="Last sequence of each retained batch, oldest first.",
        ),
        sa.Column(
            "first_offsets",
            postgresql.ARRAY(sa.BigInteger(), dimensions=1),
            nullable=False,
            comment="Offset of the first record of each retained batch, oldest first.",
        ),
        sa.Column(
            "last_offsets",
            postgresql.ARRAY(sa.BigInteger(), dimensions=1),
            nullable=False,
            comment="Offset of the last record of each retained batch, oldest first.",
        ),
        sa.Column(
            "timestamps",
            postgresql.ARRAY(sa.DateTime(timezone=True), dimensions=1),
            nullable=False,
            comment="Append time of each retained batch, returned again to a duplicate.",
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="When this producer last wrote to this partition.",
        ),
        sa.CheckConstraint(
            "cardinality(first_sequences) BETWEEN 1 AND 5 AND cardinality(last_sequences) = cardinality(first_sequences) AND cardinality(first_offsets) = cardinality(first_sequences) AND cardinality(last_offsets) = cardinality(first_sequences) AND cardinality(timestamps) = cardinality(first_sequences)",
            name=op.f("ck_producer_partition_state_window_shape"),
        ),
        sa.CheckConstraint("epoch BETWEEN 0 AND 32767", name=op.f("ck_producer_partition_state_epoch_range")),
        sa.ForeignKeyConstraint(
            ["producer_id"],
            ["producers.producer_id"],
            name=op.f("fk_producer_partition_state_producer_id_producers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["topic_id", "partition"],
            ["partitions.topic_id", "partitions.partition"],
            name=op.f("fk_producer_partition_state_topic_id_partition_partitions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("producer_id", "topic_id", "partition", name=op.f("pk_producer_partition_state")),
        comment="Per producer and partition: the last 5 batches, for sequence checks and duplicate detection. Kept apart from the log, so retention never loses it; expires only when idle.",
    )
    op.create_table(
        "records",
        sa.Column("topic_id", sa.Integer(), nullable=False, comment="The topic."),
        sa.Column("partition", sa.Integer(), nullable=False, comment="The partition."),
        sa.Column("offset", sa.BigInteger(), nullable=False, comment="The record's offset, dense per partition."),
        sa.Column(
            "producer_id",
            sa.BigInteger(),
            nullable=True,
            comment="The producer that wrote the record; NULL for a producer without idempotence.",
        ),
        sa.Column("producer_epoch", sa.SmallInteger(), nullable=True, comment="The producer's epoch at write time."),
        sa.Column(
            "sequence",
            sa.Integer(),
            nullable=True,
            comment="The record's sequence number for (producer, partition); NULL for control records.",
        ),
        sa.Column(
            "is_transactional",
            sa.Boolean(),
            server_default=sa.text("false"),
            nullable=False,
            comment="True when the record belongs to a transaction (decided by a later control record).",
        ),
        sa.Column(
            "control_type",
            sa.Text(),
            nullable=True,
            comment="'commit' or 'abort' for a transaction marker written by the coordinator; NULL for data.",
        ),
        sa.Column("key", postgresql.BYTEA(), nullable=True, comment="The record key."),
        sa.Column("value", postgresql.BYTEA(), nullable=True, comment="The record value; NULL is a tombstone."),
        sa.Column(
            "headers",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=True,
            comment='Headers as a JSON array of {"key": text, "value": base64 or null}, in order; NULL if none.',
        ),
        sa.Column(
            "timestamp",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
            comment="The record's timestamp: the producer's create time, or the append time if none was given.",
        ),
        sa.CheckConstraint("control_type IN ('commit', 'abort')", name=op.f("ck_records_control_type_valid")),
        sa.CheckConstraint("headers IS NULL OR jsonb_typeof(headers) = 'array'", name=op.f("ck_records_headers_array")),
        sa.CheckConstraint('"offset" >= 0', name=op.f("ck_records_offset_nonnegative")),
        sa.CheckConstraint(
            "(producer_id IS NULL) = (producer_epoch IS NULL)", name=op.f("ck_records_producer_id_with_epoch")
        ),
        sa.CheckConstraint(
            "NOT is_transactional OR producer_id IS NOT NULL",
            name=op.f("ck_records_transactional_has_producer"),
        ),
        sa.CheckConstraint(
            "control_type IS NOT NULL OR producer_id IS NULL OR sequence IS NOT NULL",
            name=op.f("ck_records_data_record_has_sequence"),
        ),
        sa.CheckConstraint(
            "control_type IS NULL OR (is_transactional AND producer_id IS NOT NULL AND sequence IS NULL AND key IS NULL AND value IS NULL AND headers IS NULL)",
            name=op.f("ck_records_control_record_shape"),
        ),
        sa.CheckConstraint(
            "producer_epoch IS NULL OR producer_epoch BETWEEN 0 AND 32767",
            name=op.f("ck_records_epoch_range"),
        ),
        sa.CheckConstraint(
            "sequence IS NULL OR sequence BETWEEN 0 AND 2147483647", name=op.f("ck_records_sequence_range")
        ),
        sa.ForeignKeyConstraint(
            ["topic_id", "partition"],
            ["partitions.topic_id", "partitions.partition"],
            name=op.f("fk_records_topic_id_partition_partitions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("topic_id", "partition", "offset", name=op.f("pk_records")),
        comment="The log: one row per record or control marker, keyed (topic, partition, offset).",
    )
    op.create_table(
        "txn_partitions",
        sa.Column("transactional_id", sa.Text(), nullable=False, comment="The transaction."),
        sa.Column("topic_id", sa.Integer(), nullable=False, comment="The topic."),
        sa.Column("partition", sa.Integer(), nullable=False, comment="The partition added to the transaction."),
        sa.Column(
            "first_offset",
            sa.BigInteger(),
            nullable=True,
            comment="Offset of the transaction's first record in this partition; NULL until one is written. The smallest first offset of open transactions is the partition's last stable offset.",
        ),
        sa.CheckConstraint(
            "first_offset IS NULL OR first_offset >= 0",
            name=op.f("ck_txn_partitions_first_offset_nonnegative"),
        ),
        sa.ForeignKeyConstraint(
            ["topic_id", "partition"],
            ["partitions.topic_id", "partitions.partition"],
            name=op.f("fk_txn_partitions_topic_id_partition_partitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["transactional_id"],
            ["transactions.transactional_id"],
            name=op.f("fk_txn_partitions_transactional_id_transactions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("transactional_id", "topic_id", "partition", name=op.f("pk_txn_partitions")),
        comment="The partitions of each open transaction (AddPartitionsToTxn), emptied when it completes.",
    )
    op.create_index(
        op.f("ix_txn_partitions_topic_id_partition"),
        "txn_partitions",
        ["topic_id", "partition"],
        unique=False,
    )
    op.execute(CREATE_SQL)


def downgrade(schema: str) -> None:
    """Remove everything upgrade() created."""
    op.execute(DROP_SQL)
    op.drop_index(op.f("ix_txn_partitions_topic_id_partition"), table_name="txn_partitions")
    op.drop_table("txn_partitions")
    op.drop_table("records")
    op.drop_table("producer_partition_state")
    op.drop_index(op.f("ix_pending_offsets_transactional_id"), table_name="pending_offsets")
    op.drop_table("pending_offsets")
    op.drop_index(op.f("ix_member_assignments_group_id_member_id"), table_name="member_assignments")
    op.drop_table("member_assignments")
    op.drop_table("committed_offsets")
    op.drop_table("transactions")
    op.drop_table("partitions")
    op.drop_table("group_members")
    op.drop_index(op.f("ix_txn_history_transactional_id_id"), table_name="txn_history")
    op.drop_table("txn_history")
    op.drop_table("topics")
    op.drop_table("settings")
    op.drop_table("producers")
    op.drop_table("groups")
