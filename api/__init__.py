"""oncelog: Kafka's exactly-once semantics on PostgreSQL.

Producer, Consumer and Admin are shaped like Kafka's clients; every error raised is an
:class:`oncelog.errors.OncelogError`, marked retriable, abortable or fatal like Kafka's.
"""

from oncelog import errors
from oncelog.admin import Admin
from oncelog.consumer import Consumer
from oncelog.errors import OncelogError
from oncelog.producer import Producer
from oncelog.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    RecordMetadata,
    TopicPartition,
)

__version__ = "0.1.0"

__all__ = [
    "Admin",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "OffsetAndMetadata",
    "OncelogError",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
    "__version__",
    "errors",
]
