"""oncelog: Kafka's exactly-once semantics on PostgreSQL.

The public API grows with the protocol: producers, transactional producers, consumers with
groups and an admin client. Every error raised is an :class:`oncelog.errors.OncelogError`.
"""

from oncelog import errors
from oncelog.errors import OncelogError

__version__ = "0.1.0"

__all__ = ["OncelogError", "__version__", "errors"]
