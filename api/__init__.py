"""oncelog: Kafka's exactly-once semantics on PostgreSQL.

Producer, Consumer and Admin are shaped like Kafka's clients; every error raised is an
:class:`oncelog.errors.OncelogError`, marked retriable, abortable or fatal like Kafka's.
"""

import pkgutil

from oncelog import errors
from oncelog.admin import Admin
from oncelog.consumer import Consumer
from oncelog.errors import OncelogError
from oncelog.outbox import send
from oncelog.producer import Producer
from oncelog.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

# oncelog.verify ships in its own distribution (oncelog-verify, the `verify` extra), which may be
# installed into another folder than this package (editable installs each have their own): look
# for oncelog's subpackages in every oncelog folder on sys.path, not only this one.
__path__ = pkgutil.extend_path(__path__, __name__)

__version__ = "0.1.0"

__all__ = [
    "Admin",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OncelogError",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
    "__version__",
    "errors",
    "send",
]
