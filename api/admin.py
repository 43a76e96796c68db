"""``oncelog.Admin``: topics and maintenance."""

from __future__ import annotations

from datetime import timedelta

from oncelog.client import Client
from oncelog.store import log, topics, txn
from oncelog.store.topics import TopicConfig, TopicDescription
from oncelog.store.txn import TransactionStatus

#: Kafka's kafka-transactions.sh find-hanging default: open longer than 15 minutes.
HANGING_AFTER = timedelta(minutes=15)


class Admin(Client):
    """Administer topics; run the store's maintenance.

    >>> admin = Admin(url)
    >>> admin.create_topic("orders", partitions=3, config={"max_message_bytes": 1_000_000})
    """

    def create_topic(self, name: str, partitions: int = 1, config: TopicConfig | None = None) -> None:
        """Create a topic (TopicAlreadyExistsError, InvalidTopicError, InvalidPartitionsError)."""
        with self._connect() as conn:
            topics.create_topic(conn, name=name, partitions=partitions, config=config)

    def delete_topic(self, name: str) -> None:
        """Delete a topic with all its records and offsets."""
        with self._connect() as conn:
            topics.delete_topic(conn, name=name)

    def list_topics(self) -> dict[str, int]:
        """Topic names with their partition counts."""
        with self._connect() as conn:
            return topics.list_topics(conn)

    def describe_topic(self, name: str) -> TopicDescription:
        """A topic's partitions (with offsets) and configuration."""
        with self._connect() as conn:
            return topics.describe_topic(conn, name=name)

    def create_partitions(self, name: str, total: int) -> None:
        """Grow a topic to ``total`` partitions (partitions are never removed)."""
        with self._connect() as conn:
            topics.create_partitions(conn, name=name, total=total)

    def alter_topic_config(self, name: str, config: TopicConfig) -> None:
        """Set per-topic settings; None resets a setting to its default (no limit for retention)."""
        with self._connect() as conn:
            topics.alter_topic_config(conn, name=name, config=config)

    def list_transactions(self, states: list[str] | None = None) -> list[TransactionStatus]:
        """Every transactional id with its coordinator state (optionally only these states)."""
        with self._connect() as conn:
            return txn.list_transactions(conn, states=states)

    def describe_transaction(self, transactional_id: str) -> TransactionStatus:
        """The coordinator state of one transactional id (TransactionalIdNotFoundError if unknown)."""
        with self._connect() as conn:
            return txn.describe_transaction(conn, transactional_id=transactional_id)

    def find_hanging_transactions(self, older_than: timedelta = HANGING_AFTER) -> list[TransactionStatus]:
        """Open transactions older than ``older_than``: the ones holding a last stable offset back."""
        with self._connect() as conn:
            return txn.list_transactions(
                conn, states=["Ongoing", "PrepareCommit", "PrepareAbort"], older_than=older_than
            )

    def abort_transaction(self, transactional_id: str) -> None:
        """Abort an open transaction through the coordinator: its producer is fenced, its records
        are marked aborted, its pending offsets dropped, and the journal says so."""
        with self._connect() as conn:
            txn.abort_transaction(conn, transactional_id=transactional_id)

    def expire_transactions(self) -> int:
        """Abort transactions open past their timeout; expire idle transactional ids. Returns aborts."""
        with self._connect() as conn:
            return txn.expire_transactions(conn)

    def expire_producers(self) -> int:
        """Drop producer state idle past ``producer_id_expiration_ms``; returns state rows removed."""
        with self._connect() as conn:
            return log.expire_producers(conn)

    def enforce_retention(self, batch: int = 10_000) -> int:
        """Apply every topic's retention, deleting in bounded batches; returns records deleted."""
        total = 0
        with self._connect() as conn:
            while deleted := log.enforce_retention(conn, batch=batch):
                total += deleted
        return total
