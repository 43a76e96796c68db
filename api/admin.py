"""``oncelog.Admin``: topics and maintenance."""

from __future__ import annotations

from oncelog.client import Client
from oncelog.store import log, topics
from oncelog.store.topics import TopicConfig, TopicDescription


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
