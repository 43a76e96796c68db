"""The oncelog tables, as SQLAlchemy Core objects.

This module is the model that ``alembic check`` compares the migrated database against, so it
must always describe exactly what the migrations build. Tables carry no schema: the schema name
is configurable (default ``oncelog``) and is chosen by the connection's ``search_path`` (see
:mod:`oncelog.store.engine`), which the migrations also use.

Constraints make illegal states unrepresentable; comments are on every table and column so an
operator in psql can read the schema with ``\\d+``.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

#: The states of Kafka's transaction coordinator (TransactionState), persisted.
TXN_STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
)

#: The states a consumer group can be in.
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Reconciling", "Stable", "Dead")

#: Control records written by the coordinator at the end of a transaction.
CONTROL_TYPES = ("commit", "abort")

#: Kafka's largest producer epoch; 32767 is reserved for fencing, 32766 is "exhausted".
MAX_PRODUCER_EPOCH = 32767
#: Sequences are 32-bit and wrap from 2147483647 to 0.
MAX_SEQUENCE = 2147483647
#: Kafka retains this many batches per producer and partition for duplicate detection.
DEDUP_WINDOW = 5
#: Kafka's offset.metadata.max.bytes default.
MAX_OFFSET_METADATA = 4096
#: Kafka's topic name limit.
MAX_TOPIC_NAME = 249
#: Identifiers (transactional ids, group ids, member ids) are bounded so they index well.
MAX_ID_LENGTH = 255


def _in(column: str, values: tuple[str, ...]) -> str:
    quoted = ", ".join(f"'{v}'" for v in values)
    return f"{column} IN ({quoted})"


def _now() -> sa.TextClause:
    return sa.text("now()")


settings = sa.Table(
    "settings",
    metadata,
    sa.Column(
        "id",
        sa.SmallInteger,
        primary_key=True,
        server_default=sa.text("1"),
        comment="Always 1: this table has exactly one row.",
    ),
    sa.Column(
        "producer_id_expiration_ms",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("86400000"),
        comment="A producer's per-partition sequence state expires after this long idle "
        "(Kafka's producer.id.expiration.ms, default 1 day).",
    ),
    sa.Column(
        "transaction_max_timeout_ms",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("900000"),
        comment="The largest transaction timeout a producer may ask for (Kafka's transaction.max.timeout.ms).",
    ),
    sa.Column(
        "transactional_id_expiration_ms",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("604800000"),
        comment="A transactional id idle this long in Empty/Complete* becomes Dead "
        "(Kafka's transactional.id.expiration.ms, default 7 days).",
    ),
    sa.Column(
        "max_batch_records",
        sa.Integer,
        nullable=False,
        server_default=sa.text("100000"),
        comment="The most records one produce request may carry.",
    ),
    sa.Column(
        "txn_history_retention_ms",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("604800000"),
        comment="txn_history rows older than this are pruned by maintenance, except each transactional id's "
        "newest CompleteCommit (default 7 days).",
    ),
    sa.Column(
        "log_retention_ms",
        sa.BigInteger,
        nullable=True,
        server_default=sa.text("604800000"),
        comment="The retention of a topic that sets none (Kafka's log.retention.ms, 7 days); NULL keeps records "
        "for ever.",
    ),
    sa.CheckConstraint("id = 1", name="single_row"),
    sa.CheckConstraint(
        "producer_id_expiration_ms > 0 AND transaction_max_timeout_ms > 0 "
        "AND transactional_id_expiration_ms > 0 AND max_batch_records > 0",
        name="positive",
    ),
    sa.CheckConstraint("txn_history_retention_ms > 0", name="txn_history_retention_positive"),
    sa.CheckConstraint("log_retention_ms IS NULL OR log_retention_ms > 0", name="log_retention_positive"),
    comment="Store-wide settings (one row), the counterpart of Kafka's broker configuration.",
)

clock = sa.Table(
    "clock",
    metadata,
    sa.Column(
        "id",
        sa.SmallInteger,
        primary_key=True,
        server_default=sa.text("1"),
        comment="Always 1: the table has one row.",
    ),
    sa.Column(
        "frozen_at",
        sa.DateTime(timezone=True),
        nullable=True,
        comment="The time server_now_v1 returns while set; NULL: the server's clock.",
    ),
    sa.CheckConstraint("id = 1", name="single_row"),
    comment="One row: when set, the time server_now_v1 returns instead of the server's clock; every maintenance "
    "function reads the time there. Only the schema owner can set it (tests that need time to pass); NULL in "
    "production.",
)

topics = sa.Table(
    "topics",
    metadata,
    sa.Column(
        "topic_id",
        sa.Integer,
        sa.Identity(always=True),
        primary_key=True,
        comment="Surrogate key: a topic deleted and created again under the same name gets a new id.",
    ),
    sa.Column("name", sa.Text, nullable=False, comment="The topic name, unique."),
    sa.Column(
        "max_message_bytes",
        sa.Integer,
        nullable=False,
        server_default=sa.text("1048588"),
        comment="The largest record (key + value + headers) accepted, in bytes (Kafka's max.message.bytes).",
    ),
    sa.Column(
        "retention_ms",
        sa.BigInteger,
        nullable=True,
        comment="Records older than this are deleted by maintenance; NULL follows settings.log_retention_ms "
        "(7 days), -1 keeps them for ever.",
    ),
    sa.Column(
        "retention_bytes",
        sa.BigInteger,
        nullable=True,
        comment="Per partition, the oldest records beyond this size are deleted by maintenance; NULL is no limit.",
    ),
    sa.Column(
        "message_timestamp_after_max_ms",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("3600000"),
        comment="How far into the future (ms after the server's time) a record's timestamp may be: Kafka's "
        "message.timestamp.after.max.ms (KIP-937), one hour by default as in Kafka 4.0.",
    ),
    # Compaction (migration 0033): Kafka's settings of the same names and defaults.
    sa.Column(
        "cleanup_policy",
        sa.Text,
        nullable=False,
        server_default=sa.text("'delete'"),
        comment="delete (retention by time and size), compact (the latest record of each key is kept) or "
        "compact,delete (both): Kafka's cleanup.policy.",
    ),
    sa.Column(
        "min_compaction_lag_ms",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("0"),
        comment="Compaction leaves records younger than this (and all after them) alone.",
    ),
    sa.Column(
        "max_compaction_lag_ms",
        sa.BigInteger,
        nullable=True,
        comment="A dirty record this old makes its partition compacted whatever its dirty ratio; NULL is no limit.",
    ),
    sa.Column(
        "delete_retention_ms",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("86400000"),
        comment="How long tombstones and transaction markers stay once compacted (Kafka's delete.retention.ms).",
    ),
    sa.Column(
        "min_cleanable_dirty_ratio",
        sa.Float,
        nullable=False,
        server_default=sa.text("0.5"),
        comment="Compaction starts on a partition when this share of its live bytes is dirty (not yet compacted).",
    ),
    sa.Column(
        "created_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=_now(),
        comment="When the topic was created.",
    ),
    sa.UniqueConstraint("name"),
    sa.CheckConstraint(
        f"name ~ '^[A-Za-z0-9._-]{{1,{MAX_TOPIC_NAME}}}$' AND name NOT IN ('.', '..')",
        name="name_valid",
    ),
    sa.CheckConstraint("max_message_bytes > 0", name="max_message_bytes_positive"),
    sa.CheckConstraint(
        "(retention_ms IS NULL OR retention_ms = -1 OR retention_ms > 0) "
        "AND (retention_bytes IS NULL OR retention_bytes > 0)",
        name="retention_positive",
    ),
    sa.CheckConstraint("message_timestamp_after_max_ms > 0", name="message_timestamp_after_max_ms_positive"),
    sa.CheckConstraint("cleanup_policy IN ('delete', 'compact', 'compact,delete')", name="cleanup_policy_valid"),
    sa.CheckConstraint(
        "min_compaction_lag_ms >= 0 AND (max_compaction_lag_ms IS NULL OR max_compaction_lag_ms > 0) "
        "AND delete_retention_ms >= 0 AND min_cleanable_dirty_ratio BETWEEN 0 AND 1",
        name="compaction_settings_valid",
    ),
    comment="Topics: named, partitioned logs.",
)

partitions = sa.Table(
    "partitions",
    metadata,
    sa.Column(
        "topic_id",
        sa.Integer,
        sa.ForeignKey(topics.c.topic_id, ondelete="CASCADE"),
        primary_key=True,
        comment="The topic.",
    ),
    sa.Column("partition", sa.Integer, primary_key=True, comment="The partition number, from 0."),
    sa.Column(
        "log_start_offset",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("0"),
        comment="The first offset still in the log; retention moves it forward.",
    ),
    sa.Column(
        "next_offset",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("0"),
        comment="The offset the next record will get: the log end offset (high watermark). "
        "Appenders lock this row until commit, so offsets are dense and commit in order.",
    ),
    sa.Column(
        "log_bytes",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("0"),
        comment="Bytes of keys, values and headers from the log start to the log end; drives size retention.",
    ),
    sa.CheckConstraint("partition >= 0", name="partition_nonnegative"),
    sa.CheckConstraint("log_bytes >= 0", name="log_bytes_nonnegative"),
    sa.CheckConstraint("log_start_offset >= 0 AND next_offset >= log_start_offset", name="offsets_ordered"),
    comment="Partitions of each topic, with the offsets that bound their log. "
    "The row is the append lock of its partition.",
)

records = sa.Table(
    "records",
    metadata,
    sa.Column("topic_id", sa.Integer, primary_key=True, comment="The topic."),
    sa.Column("partition", sa.Integer, primary_key=True, comment="The partition."),
    sa.Column("offset", sa.BigInteger, primary_key=True, comment="The record's offset, dense per partition."),
    sa.Column(
        "producer_id",
        sa.BigInteger,
        nullable=True,
        comment="The producer that wrote the record; NULL for a producer without idempotence.",
    ),
    sa.Column("producer_epoch", sa.SmallInteger, nullable=True, comment="The producer's epoch at write time."),
    sa.Column(
        "sequence",
        sa.Integer,
        nullable=True,
        comment="The record's sequence number for (producer, partition); NULL for control records.",
    ),
    sa.Column(
        "is_transactional",
        sa.Boolean,
        nullable=False,
        server_default=sa.false(),
        comment="True when the record belongs to a transaction (decided by a later control record).",
    ),
    sa.Column(
        "control_type",
        sa.Text,
        nullable=True,
        comment="'commit' or 'abort' for a transaction marker written by the coordinator; NULL for data.",
    ),
    sa.Column("key", pg.BYTEA, nullable=True, comment="The record key."),
    sa.Column("value", pg.BYTEA, nullable=True, comment="The record value; NULL is a tombstone."),
    sa.Column(
        "headers",
        pg.JSONB,
        nullable=True,
        comment='Headers as a JSON array of {"key": text, "value": base64 or null}, in order; NULL if none.',
    ),
    sa.Column(
        "timestamp",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=_now(),
        comment="The record's timestamp: the producer's create time, or the append time if none was given.",
    ),
    sa.Column(
        "txn_number",
        sa.BigInteger,
        nullable=True,
        comment="For a transactional record or marker, the number of its transaction: (producer_id, txn_number) "
        "names the transaction, so readers can return it on all partitions or none.",
    ),
    sa.Column(
        "aborted",
        sa.Boolean,
        nullable=False,
        server_default=sa.false(),
        comment="True for a data record of an aborted transaction (set by the abort); read_committed skips it.",
    ),
    # No foreign key to partitions: a per-row check cost half of every append. Statement-level
    # triggers (migration 0006) give the same guarantee once per statement.
    sa.CheckConstraint('"offset" >= 0', name="offset_nonnegative"),
    sa.CheckConstraint("NOT aborted OR is_transactional", name="aborted_is_transactional"),
    sa.CheckConstraint("(txn_number IS NOT NULL) = is_transactional", name="txn_number_iff_transactional"),
    sa.CheckConstraint(
        f"producer_epoch IS NULL OR producer_epoch BETWEEN 0 AND {MAX_PRODUCER_EPOCH}", name="epoch_range"
    ),
    sa.CheckConstraint(f"sequence IS NULL OR sequence BETWEEN 0 AND {MAX_SEQUENCE}", name="sequence_range"),
    sa.CheckConstraint("(producer_id IS NULL) = (producer_epoch IS NULL)", name="producer_id_with_epoch"),
    sa.CheckConstraint(_in("control_type", CONTROL_TYPES), name="control_type_valid"),
    # A marker is always written by a transactional producer's coordinator and carries no data;
    # a data record from an idempotent producer always has a sequence.
    sa.CheckConstraint(
        "control_type IS NULL OR (is_transactional AND producer_id IS NOT NULL AND sequence IS NULL "
        "AND key IS NULL AND value IS NULL AND headers IS NULL)",
        name="control_record_shape",
    ),
    sa.CheckConstraint(
        "control_type IS NOT NULL OR producer_id IS NULL OR sequence IS NOT NULL",
        name="data_record_has_sequence",
    ),
    sa.CheckConstraint("NOT is_transactional OR producer_id IS NOT NULL", name="transactional_has_producer"),
    sa.CheckConstraint("headers IS NULL OR jsonb_typeof(headers) = 'array'", name="headers_array"),
    comment="The log: one row per record or control marker, keyed (topic, partition, offset).",
)

producers = sa.Table(
    "producers",
    metadata,
    sa.Column(
        "producer_id",
        sa.BigInteger,
        sa.Identity(always=True, start=0, minvalue=0),
        primary_key=True,
        comment="The producer id, issued by InitProducerId from the column's sequence.",
    ),
    sa.Column(
        "transactional_id",
        sa.Text,
        nullable=True,
        comment="The transactional id this producer id serves; NULL for an idempotent-only producer "
        "or a producer id retired by epoch exhaustion.",
    ),
    sa.Column("epoch", sa.SmallInteger, nullable=False, server_default=sa.text("0"), comment="The current epoch."),
    sa.Column(
        "last_epoch",
        sa.SmallInteger,
        nullable=True,
        comment="The epoch before the last bump, so a retried bump can be recognised (KIP-360).",
    ),
    sa.Column(
        "created_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=_now(),
        comment="When the producer id was issued.",
    ),
    sa.Column(
        "last_used_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=_now(),
        comment="When the producer id was issued or its epoch last changed; with its sequence state, drives "
        "expiration.",
    ),
    sa.Column(
        "owner",
        pg.OID,
        nullable=True,
        comment="The principal (role OID) the producer id was issued to; only it may use the id (revision 0017). "
        "NULL for ids issued before revision 0017: usable by nobody, so their holders re-initialise.",
    ),
    sa.UniqueConstraint("transactional_id"),
    sa.UniqueConstraint("producer_id", "transactional_id"),
    sa.CheckConstraint(f"epoch BETWEEN 0 AND {MAX_PRODUCER_EPOCH}", name="epoch_range"),
    sa.CheckConstraint(f"last_epoch IS NULL OR last_epoch BETWEEN 0 AND {MAX_PRODUCER_EPOCH}", name="last_epoch_range"),
    sa.CheckConstraint(
        f"transactional_id IS NULL OR length(transactional_id) BETWEEN 1 AND {MAX_ID_LENGTH}",
        name="transactional_id_length",
    ),
    comment="Producer ids and their epochs.",
)

producer_partition_state = sa.Table(
    "producer_partition_state",
    metadata,
    sa.Column(
        "producer_id",
        sa.BigInteger,
        sa.ForeignKey(producers.c.producer_id, ondelete="CASCADE"),
        primary_key=True,
        comment="The producer.",
    ),
    sa.Column("topic_id", sa.Integer, primary_key=True, comment="The topic."),
    sa.Column("partition", sa.Integer, primary_key=True, comment="The partition."),
    sa.Column(
        "epoch",
        sa.SmallInteger,
        nullable=False,
        comment="The epoch of the batches below; a bump resets them.",
    ),
    sa.Column(
        "first_sequences",
        pg.ARRAY(sa.Integer, dimensions=1),
        nullable=False,
        comment="First sequence of each retained batch, oldest first (at most 5).",
    ),
    sa.Column(
        "last_sequences",
        pg.ARRAY(sa.Integer, dimensions=1),
        nullable=False,
        comment="Last sequence of each retained batch, oldest first.",
    ),
    sa.Column(
        "first_offsets",
        pg.ARRAY(sa.BigInteger, dimensions=1),
        nullable=False,
        comment="Offset of the first record of each retained batch, oldest first.",
    ),
    sa.Column(
        "last_offsets",
        pg.ARRAY(sa.BigInteger, dimensions=1),
        nullable=False,
        comment="Offset of the last record of each retained batch, oldest first.",
    ),
    sa.Column(
        "timestamps",
        pg.ARRAY(sa.DateTime(timezone=True), dimensions=1),
        nullable=False,
        comment="Append time of each retained batch, returned again to a duplicate.",
    ),
    sa.Column(
        "updated_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=_now(),
        comment="When this producer last wrote to this partition.",
    ),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"],
        [partitions.c.topic_id, partitions.c.partition],
        ondelete="CASCADE",
    ),
    sa.CheckConstraint(f"epoch BETWEEN 0 AND {MAX_PRODUCER_EPOCH}", name="epoch_range"),
    sa.CheckConstraint(
        f"cardinality(first_sequences) BETWEEN 1 AND {DEDUP_WINDOW} "
        "AND cardinality(last_sequences) = cardinality(first_sequences) "
        "AND cardinality(first_offsets) = cardinality(first_sequences) "
        "AND cardinality(last_offsets) = cardinality(first_sequences) "
        "AND cardinality(timestamps) = cardinality(first_sequences)",
        name="window_shape",
    ),
    comment="Per producer and partition: the last 5 batches, for sequence checks and duplicate detection. "
    "Kept apart from the log, so retention never loses it; expires only when idle.",
)

transactions = sa.Table(
    "transactions",
    metadata,
    sa.Column("transactional_id", sa.Text, primary_key=True, comment="The transactional id."),
    sa.Column(
        "producer_id",
        sa.BigInteger,
        nullable=False,
        comment="The producer id currently serving this transactional id.",
    ),
    sa.Column(
        "prev_producer_id",
        sa.BigInteger,
        nullable=True,
        comment="The producer id this transactional id had before the current one (epoch exhaustion), so a "
        "retried InitProducerId is recognised (KIP-360).",
    ),
    sa.Column(
        "state",
        sa.Text,
        nullable=False,
        server_default=sa.text("'Empty'"),
        comment="The coordinator state: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, "
        "CompleteAbort or Dead. Transitions are checked and journalled by a trigger.",
    ),
    sa.Column(
        "txn_number",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("0"),
        comment="Counts the transactions of this transactional id; every call names the one it acts on, "
        "so a delayed call of transaction N can never touch transaction N+1.",
    ),
    sa.Column(
        "timeout_ms",
        sa.Integer,
        nullable=False,
        server_default=sa.text("60000"),
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
        nullable=False,
        server_default=_now(),
        comment="When the state last changed; drives transactional id expiration.",
    ),
    # Deferred so an epoch-exhaustion swap (new producer id for the same transactional id) can
    # retire the old producer row and install the new one inside one database transaction.
    sa.ForeignKeyConstraint(
        ["producer_id", "transactional_id"],
        [producers.c.producer_id, producers.c.transactional_id],
        deferrable=True,
        initially="DEFERRED",
    ),
    sa.UniqueConstraint("producer_id"),
    sa.CheckConstraint(_in("state", TXN_STATES), name="state_valid"),
    sa.CheckConstraint("timeout_ms > 0", name="timeout_positive"),
    sa.CheckConstraint("txn_number >= 0", name="txn_number_nonnegative"),
    sa.CheckConstraint(
        "(txn_started_at IS NOT NULL) = (state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort'))",
        name="started_iff_open",
    ),
    sa.CheckConstraint(f"length(transactional_id) BETWEEN 1 AND {MAX_ID_LENGTH}", name="transactional_id_length"),
    comment="The transaction journal: the coordinator's current state per transactional id.",
)

txn_partitions = sa.Table(
    "txn_partitions",
    metadata,
    sa.Column(
        "transactional_id",
        sa.Text,
        sa.ForeignKey(transactions.c.transactional_id, ondelete="CASCADE"),
        primary_key=True,
        comment="The transaction.",
    ),
    sa.Column("topic_id", sa.Integer, primary_key=True, comment="The topic."),
    sa.Column("partition", sa.Integer, primary_key=True, comment="The partition added to the transaction."),
    sa.Column(
        "first_offset",
        sa.BigInteger,
        nullable=True,
        comment="Offset of the transaction's first record in this partition; NULL until one is written. "
        "The smallest first offset of open transactions is the partition's last stable offset.",
    ),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"],
        [partitions.c.topic_id, partitions.c.partition],
        ondelete="CASCADE",
    ),
    sa.CheckConstraint("first_offset IS NULL OR first_offset >= 0", name="first_offset_nonnegative"),
    sa.Index(None, "topic_id", "partition"),
    comment="The partitions of each open transaction (AddPartitionsToTxn), emptied when it completes.",
)

# Written by EndTxn (commit), one row per partition; migration 0014.
txn_spans = sa.Table(
    "txn_spans",
    metadata,
    sa.Column("producer_id", sa.BigInteger, primary_key=True, comment="The transaction's producer id."),
    sa.Column(
        "txn_number",
        sa.BigInteger,
        primary_key=True,
        comment="The transaction's number: (producer_id, txn_number) names it, as on its records.",
    ),
    sa.Column("topic_id", sa.Integer, primary_key=True, comment="The topic."),
    sa.Column("partition", sa.Integer, primary_key=True, comment="A partition the transaction wrote to."),
    sa.Column("first_offset", sa.BigInteger, nullable=False, comment="Offset of its first record in this partition."),
    sa.Column(
        "last_offset",
        sa.BigInteger,
        nullable=False,
        comment="Offset of its last data record in this partition (its commit marker follows).",
    ),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"],
        [partitions.c.topic_id, partitions.c.partition],
        ondelete="CASCADE",
    ),
    sa.CheckConstraint("first_offset >= 0 AND last_offset >= first_offset", name="offsets_ordered"),
    sa.Index(None, "topic_id", "partition", "last_offset"),
    comment="Where each committed transaction lies in each partition it wrote to (written by EndTxn): "
    "read_committed fetches withhold a transaction that a read would return only in part.",
)

# Compaction's progress per partition (compact_v2); migration 0033.
cleaner_state = sa.Table(
    "cleaner_state",
    metadata,
    sa.Column("topic_id", sa.Integer, primary_key=True, comment="The topic."),
    sa.Column("partition", sa.Integer, primary_key=True, comment="The partition."),
    sa.Column(
        "clean_offset",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("0"),
        comment="The end of the clean section: below it (from the log start) each key has at most one record.",
    ),
    sa.Column(
        "clean_bytes",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("0"),
        comment="Live bytes of the clean section, for the dirty ratio.",
    ),
    sa.Column(
        "clean_start",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("0"),
        comment="The log start clean_bytes were counted from (migration 0034): past it, they are scaled down.",
    ),
    sa.Column(
        "horizon_offset",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("0"),
        comment="Tombstones and markers below this have been removed once past delete_retention_ms.",
    ),
    sa.Column(
        "checkpoint_offsets",
        pg.ARRAY(sa.BigInteger, dimensions=1),
        nullable=False,
        server_default=sa.text("'{}'"),
        comment="Ends of recent compaction passes, oldest first (the newest one older than delete_retention_ms "
        "is the delete horizon).",
    ),
    sa.Column(
        "checkpoint_times",
        pg.ARRAY(sa.DateTime(timezone=True), dimensions=1),
        nullable=False,
        server_default=sa.text("'{}'"),
        comment="When each of checkpoint_offsets was reached.",
    ),
    sa.Column(
        "examined_records",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("0"),
        comment="Records compaction has read in the dirty section, in all.",
    ),
    sa.Column(
        "removed_records",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("0"),
        comment="Records compaction has removed, in all.",
    ),
    sa.Column(
        "removed_bytes",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("0"),
        comment="Bytes (keys, values, headers) compaction has removed, in all.",
    ),
    sa.Column("cleaned_at", sa.DateTime(timezone=True), nullable=True, comment="When compaction last ran here."),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"],
        [partitions.c.topic_id, partitions.c.partition],
        ondelete="CASCADE",
    ),
    sa.CheckConstraint(
        "clean_offset >= 0 AND clean_bytes >= 0 AND horizon_offset >= 0 "
        "AND cardinality(checkpoint_offsets) = cardinality(checkpoint_times)",
        name="progress_valid",
    ),
    sa.CheckConstraint("clean_start >= 0", name="clean_start_nonnegative"),
    comment="Compaction's progress in each partition of a compacted topic.",
)

txn_history = sa.Table(
    "txn_history",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True, comment="Order of the transitions."),
    sa.Column(
        "transactional_id",
        sa.Text,
        nullable=False,
        comment="The transactional id (kept after the id itself is removed).",
    ),
    sa.Column("producer_id", sa.BigInteger, nullable=False, comment="The producer id after the transition."),
    sa.Column("producer_epoch", sa.SmallInteger, nullable=False, comment="The producer epoch after the transition."),
    sa.Column("txn_number", sa.BigInteger, nullable=False, comment="The transaction number after the transition."),
    sa.Column("from_state", sa.Text, nullable=True, comment="The state before; NULL when the id was created."),
    sa.Column("to_state", sa.Text, nullable=False, comment="The state after."),
    sa.Column(
        "at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=sa.text("clock_timestamp()"),
        comment="When the transition happened.",
    ),
    sa.CheckConstraint(f"from_state IS NULL OR {_in('from_state', TXN_STATES)}", name="from_state_valid"),
    sa.CheckConstraint(_in("to_state", TXN_STATES), name="to_state_valid"),
    sa.Index(None, "transactional_id", "id"),
    comment="Append-only history of every transaction state transition and epoch change (written by a "
    "trigger on transactions; updates are refused, deletes too except maintenance pruning past "
    "settings.txn_history_retention_ms).",
)

groups = sa.Table(
    "groups",
    metadata,
    sa.Column("group_id", sa.Text, primary_key=True, comment="The consumer group id."),
    sa.Column(
        "state",
        sa.Text,
        nullable=False,
        server_default=sa.text("'Empty'"),
        comment="Empty, Stable, or Reconciling (a partition waits for its old owner to let go); "
        "PreparingRebalance, CompletingRebalance and Dead are never set.",
    ),
    sa.Column(
        "generation",
        sa.Integer,
        nullable=False,
        server_default=sa.text("0"),
        comment="Bumped by every membership change; commits must name the current one.",
    ),
    sa.Column(
        "assignor",
        sa.Text,
        nullable=False,
        server_default=sa.text("'range'"),
        comment="The partition assignment strategy computed by the store ('range', 'roundrobin' or 'sticky').",
    ),
    sa.Column(
        "created_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=_now(),
        comment="When the group was created.",
    ),
    sa.Column(
        "updated_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=_now(),
        comment="When the group last changed state or generation.",
    ),
    sa.CheckConstraint(_in("state", GROUP_STATES), name="state_valid"),
    sa.CheckConstraint("generation >= 0", name="generation_nonnegative"),
    sa.CheckConstraint("assignor IN ('range', 'roundrobin', 'sticky')", name="assignor_valid"),
    sa.CheckConstraint(f"length(group_id) BETWEEN 1 AND {MAX_ID_LENGTH}", name="group_id_length"),
    comment="Consumer groups and their generations.",
)

group_members = sa.Table(
    "group_members",
    metadata,
    sa.Column(
        "group_id",
        sa.Text,
        sa.ForeignKey(groups.c.group_id, ondelete="CASCADE"),
        primary_key=True,
        comment="The group.",
    ),
    sa.Column("member_id", sa.Text, primary_key=True, comment="The member id, issued by the store at join."),
    sa.Column(
        "group_instance_id",
        sa.Text,
        nullable=True,
        comment="The static member id (group.instance.id); a restarted instance takes its place back.",
    ),
    sa.Column("client_id", sa.Text, nullable=True, comment="The client's self-description, for operators."),
    sa.Column(
        "subscription",
        pg.ARRAY(sa.Text, dimensions=1),
        nullable=False,
        server_default=sa.text("'{}'"),
        comment="The topics the member subscribed to.",
    ),
    sa.Column(
        "session_timeout_ms",
        sa.Integer,
        nullable=False,
        comment="A member silent for longer than this is removed.",
    ),
    sa.Column(
        "joined_generation",
        sa.Integer,
        nullable=False,
        comment="The generation in which the member joined.",
    ),
    sa.Column(
        "last_heartbeat_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=_now(),
        comment="When the member last heartbeated.",
    ),
    sa.Column(
        "owner",
        pg.OID,
        nullable=True,
        comment="The principal (role OID) that joined; only it may act as the member (revision 0021). NULL for "
        "members that joined before: usable by nobody, so they join again.",
    ),
    sa.UniqueConstraint("group_id", "group_instance_id"),
    sa.CheckConstraint("session_timeout_ms > 0", name="session_timeout_positive"),
    sa.CheckConstraint("joined_generation >= 0", name="joined_generation_nonnegative"),
    sa.CheckConstraint(
        f"length(member_id) BETWEEN 1 AND {MAX_ID_LENGTH} "
        f"AND (group_instance_id IS NULL OR length(group_instance_id) BETWEEN 1 AND {MAX_ID_LENGTH})",
        name="id_length",
    ),
    comment="Members of each consumer group.",
)

member_assignments = sa.Table(
    "member_assignments",
    metadata,
    sa.Column("group_id", sa.Text, primary_key=True, comment="The group."),
    sa.Column("topic_id", sa.Integer, primary_key=True, comment="The topic."),
    sa.Column("partition", sa.Integer, primary_key=True, comment="The partition."),
    sa.Column("member_id", sa.Text, nullable=False, comment="The member that owns the partition."),
    sa.Column(
        "generation",
        sa.Integer,
        nullable=False,
        comment="The generation in which the member took the partition: its commits must name this one or a later one.",
    ),
    # ON UPDATE CASCADE: a static member rejoining gets a new member id and keeps its partitions.
    sa.ForeignKeyConstraint(
        ["group_id", "member_id"],
        [group_members.c.group_id, group_members.c.member_id],
        ondelete="CASCADE",
        onupdate="CASCADE",
    ),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"],
        [partitions.c.topic_id, partitions.c.partition],
        ondelete="CASCADE",
    ),
    sa.Index(None, "group_id", "member_id"),
    comment="Who owns each partition now: at most one member of a group. A partition passes to the member its "
    "target_assignments row names only once its owner has let go of it (or left, or timed out).",
)

target_assignments = sa.Table(
    "target_assignments",
    metadata,
    sa.Column("group_id", sa.Text, primary_key=True, comment="The group."),
    sa.Column("topic_id", sa.Integer, primary_key=True, comment="The topic."),
    sa.Column("partition", sa.Integer, primary_key=True, comment="The partition."),
    sa.Column("member_id", sa.Text, nullable=False, comment="The member the assignor gives the partition to."),
    sa.Column(
        "generation",
        sa.Integer,
        nullable=False,
        comment="The generation whose assignment this is.",
    ),
    # ON UPDATE CASCADE: a static member rejoining gets a new member id and keeps its target.
    sa.ForeignKeyConstraint(
        ["group_id", "member_id"],
        [group_members.c.group_id, group_members.c.member_id],
        ondelete="CASCADE",
        onupdate="CASCADE",
    ),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"],
        [partitions.c.topic_id, partitions.c.partition],
        ondelete="CASCADE",
    ),
    sa.Index(None, "group_id", "member_id"),
    comment="The assignor's answer for the current generation (KIP-848's target assignment): each member_assignments "
    "row moves towards it as owners let go.",
)

committed_offsets = sa.Table(
    "committed_offsets",
    metadata,
    sa.Column(
        "group_id",
        sa.Text,
        sa.ForeignKey(groups.c.group_id, ondelete="CASCADE"),
        primary_key=True,
        comment="The group.",
    ),
    sa.Column("topic_id", sa.Integer, primary_key=True, comment="The topic."),
    sa.Column("partition", sa.Integer, primary_key=True, comment="The partition."),
    sa.Column(
        "committed_offset",
        sa.BigInteger,
        nullable=False,
        comment="The next offset the group will consume in this partition.",
    ),
    sa.Column("metadata", sa.Text, nullable=False, server_default=sa.text("''"), comment="Client metadata."),
    sa.Column(
        "commit_seq",
        sa.BigInteger,
        nullable=False,
        comment="Position of the commit in the store's commit order (offset_commit_seq); a transaction's "
        "pending offsets replace these only if written later (Kafka's rule).",
    ),
    sa.Column(
        "producer_id",
        sa.BigInteger,
        nullable=True,
        comment="The transactional producer whose commit wrote this offset; NULL for a plain commit.",
    ),
    sa.Column(
        "committed_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=_now(),
        comment="When the offset was committed.",
    ),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"],
        [partitions.c.topic_id, partitions.c.partition],
        ondelete="CASCADE",
    ),
    sa.CheckConstraint("committed_offset >= 0", name="offset_nonnegative"),
    sa.CheckConstraint(f"octet_length(metadata) <= {MAX_OFFSET_METADATA}", name="metadata_size"),
    comment="Committed consumer group offsets.",
)

pending_offsets = sa.Table(
    "pending_offsets",
    metadata,
    sa.Column(
        "group_id",
        sa.Text,
        sa.ForeignKey(groups.c.group_id, ondelete="CASCADE"),
        primary_key=True,
        comment="The group.",
    ),
    sa.Column("topic_id", sa.Integer, primary_key=True, comment="The topic."),
    sa.Column("partition", sa.Integer, primary_key=True, comment="The partition."),
    sa.Column(
        "producer_id",
        sa.BigInteger,
        sa.ForeignKey(producers.c.producer_id, ondelete="CASCADE"),
        primary_key=True,
        comment="The transactional producer whose open transaction holds this offset.",
    ),
    sa.Column(
        "transactional_id",
        sa.Text,
        sa.ForeignKey(transactions.c.transactional_id, ondelete="CASCADE"),
        nullable=False,
        comment="The transaction that holds this offset.",
    ),
    sa.Column(
        "committed_offset",
        sa.BigInteger,
        nullable=False,
        comment="The offset to commit when the transaction commits.",
    ),
    sa.Column("metadata", sa.Text, nullable=False, server_default=sa.text("''"), comment="Client metadata."),
    sa.Column(
        "commit_seq",
        sa.BigInteger,
        nullable=False,
        comment="Position of this TxnOffsetCommit in the store's commit order (offset_commit_seq).",
    ),
    sa.Column(
        "generation",
        sa.Integer,
        nullable=False,
        comment="The group generation the member committed in.",
    ),
    sa.Column("member_id", sa.Text, nullable=False, comment="The member that committed."),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"],
        [partitions.c.topic_id, partitions.c.partition],
        ondelete="CASCADE",
    ),
    sa.CheckConstraint("committed_offset >= 0", name="offset_nonnegative"),
    sa.CheckConstraint(f"octet_length(metadata) <= {MAX_OFFSET_METADATA}", name="metadata_size"),
    sa.Index(None, "transactional_id"),
    comment="Offsets committed inside an open transaction (TxnOffsetCommit), applied by its commit "
    "and dropped by its abort (KIP-447).",
)


# --- access control (migration 0009; the calls are in oncelog.store.acl) -------------------------

acls = sa.Table(
    "acls",
    metadata,
    sa.Column(
        "resource_type",
        sa.Text,
        primary_key=True,
        comment="What the ACL protects: topic, group or transactional_id.",
    ),
    sa.Column(
        "resource_name",
        sa.Text,
        primary_key=True,
        comment="A name (literal; * is every name) or a name prefix (prefixed).",
    ),
    sa.Column("pattern_type", sa.Text, primary_key=True, comment="literal or prefixed."),
    sa.Column(
        "principal",
        sa.Text,
        primary_key=True,
        comment="The PostgreSQL role allowed; every role with its privileges (its members) is allowed too.",
    ),
    sa.Column(
        "operation",
        sa.Text,
        primary_key=True,
        comment="read, write, describe (implied by read and write) or all.",
    ),
    sa.Column(
        "created_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=sa.text("now()"),
        comment="When the ACL was created.",
    ),
    sa.Column(
        "created_by",
        sa.Text,
        nullable=False,
        server_default=sa.text("SESSION_USER"),
        comment="The login role that created it.",
    ),
    sa.CheckConstraint("resource_type IN ('topic', 'group', 'transactional_id')", name="resource_type_valid"),
    sa.CheckConstraint("pattern_type IN ('literal', 'prefixed')", name="pattern_type_valid"),
    sa.CheckConstraint(
        "operation IN ('read', 'write', 'describe', 'all') AND NOT (resource_type = 'group' AND operation = 'write') "
        "AND NOT (resource_type = 'transactional_id' AND operation = 'read')",
        name="operation_valid",
    ),
    sa.CheckConstraint("length(resource_name) BETWEEN 1 AND 255", name="resource_name_length"),
    comment="Access control lists (Kafka's ACLs, allow only): which role may do what to which topics, groups "
    "and transactional ids. Enforced only while acl_settings.enforce is on.",
)

acl_settings = sa.Table(
    "acl_settings",
    metadata,
    sa.Column(
        "id",
        sa.SmallInteger,
        primary_key=True,
        server_default=sa.text("1"),
        comment="Always 1: this table has exactly one row.",
    ),
    sa.Column(
        "enforce",
        sa.Boolean,
        nullable=False,
        server_default=sa.text("false"),
        comment="Whether ACLs are enforced (off: every role may do what its grants allow, as before ACLs).",
    ),
    sa.Column(
        "changed_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=sa.text("now()"),
        comment="When enforcement was last switched.",
    ),
    sa.Column(
        "changed_by",
        sa.Text,
        nullable=True,
        comment="The login role that last switched it (NULL: never switched).",
    ),
    sa.CheckConstraint("id = 1", name="single_row"),
    comment="Whether this installation enforces its ACLs (one row; set_acl_enforcement_v1).",
)

# Readers waiting for new records (migration 0020): unlogged, since a registration matters only
# while its reader waits, and writing it must not cost a WAL flush.
outbox_records = sa.Table(
    "outbox_records",
    metadata,
    sa.Column(
        "xact_id",
        sa.BigInteger,
        primary_key=True,
        server_default=sa.text("(pg_current_xact_id())::text::bigint"),
        comment="The sending transaction (pg_current_xact_id()).",
    ),
    sa.Column(
        "seq",
        sa.BigInteger,
        sa.Identity(always=True),
        primary_key=True,
        comment="Send order within the transaction.",
    ),
    sa.Column("topic_id", sa.Integer, nullable=False, comment="The topic."),
    sa.Column("partition", sa.Integer, nullable=False, comment="The partition send_v1 chose."),
    sa.Column("key", pg.BYTEA, nullable=True, comment="The record key."),
    sa.Column("value", pg.BYTEA, nullable=True, comment="The record value; NULL is a tombstone."),
    sa.Column("headers", pg.JSONB, nullable=True, comment="The record headers, as produce_v2 takes them."),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"],
        [partitions.c.topic_id, partitions.c.partition],
        ondelete="CASCADE",
    ),
    comment="Records sent in a transaction that has not committed yet (send_v1): a deferred trigger appends them "
    "to the log at its commit and removes them. Empty outside open transactions.",
)

fetch_waiters = sa.Table(
    "fetch_waiters",
    metadata,
    sa.Column("topic_id", sa.Integer, primary_key=True, comment="The topic."),
    sa.Column("partition", sa.Integer, primary_key=True, comment="The partition someone waits on."),
    sa.Column(
        "committed_until",
        sa.DateTime(timezone=True),
        nullable=True,
        comment="Until when a read_committed reader waits for a commit here (NULL: none has).",
    ),
    sa.Column(
        "uncommitted_until",
        sa.DateTime(timezone=True),
        nullable=True,
        comment="Until when a read_uncommitted reader waits for an append here (NULL: none has).",
    ),
    sa.Column(
        "committed_once_until",
        sa.DateTime(timezone=True),
        nullable=True,
        comment="Until when a read_committed reader waits here for one wake-up (fetch_wait_v2); "
        "NULL once a wake-up was sent for it (wake_readers_v1), or if none waits.",
    ),
    sa.Column(
        "uncommitted_once_until",
        sa.DateTime(timezone=True),
        nullable=True,
        comment="Until when a read_uncommitted reader waits here for one wake-up (fetch_wait_v2); "
        "NULL once a wake-up was sent for it (wake_readers_v1), or if none waits.",
    ),
    sa.ForeignKeyConstraint(
        ["topic_id", "partition"],
        [partitions.c.topic_id, partitions.c.partition],
        ondelete="CASCADE",
    ),
    prefixes=["UNLOGGED"],
    comment="Readers waiting for records (fetch_wait_v1, fetch_wait_v2): a write to a partition with a reader "
    "waiting answers its producer with the partition's wake token, which it NOTIFYs outside the write's "
    "transaction (wake_readers_v1). Unlogged: emptied by a crash, which costs a waiting reader one poll interval.",
)
