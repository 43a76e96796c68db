"""``oncelog broker``: the Kafka protocol over the store, for Kafka's own clients.

Kafka clients (librdkafka's confluent-kafka, kafka-python, kcat, ...) connect to a
:class:`Broker` as to a one-node Kafka cluster; what they write is the store's log, readable
through the Python API, Spark and psql, and the reverse. The store's functions answer every
request, so its rules (producer ids and epochs, sequences, read_committed, ACLs of the
broker's database role) hold for these clients too. What is served so far: docs/guide-broker.md.
"""

from oncelog.broker.common import API_RANGES
from oncelog.broker.server import Broker, Listener, parse_listener, serve_in_thread

__all__ = ["API_RANGES", "Broker", "Listener", "parse_listener", "serve_in_thread"]
