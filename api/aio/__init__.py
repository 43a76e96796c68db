"""oncelog for asyncio: ``Producer``, ``Consumer`` and ``Admin`` with the semantics, errors and
transactions of :mod:`oncelog`'s clients, on psycopg's async connections, and ``send`` (a record
in the application's own transaction, on its async connection).

Each client runs the same logic as its synchronous twin on the event loop: every database wait
suspends the call and hands the loop back (:mod:`oncelog.store.runtime`), the producer's sender
and the consumer's heartbeats are tasks of the loop, and no call starts a thread.

>>> async with Producer(url, transactional_id="billing-1") as producer:
...     await producer.init_transactions()
...     async with producer.transaction():
...         await producer.send("orders", b"value", key=b"key")
"""

from oncelog.aio.admin import Admin
from oncelog.aio.consumer import Consumer
from oncelog.aio.outbox import send
from oncelog.aio.producer import Producer

__all__ = ["Admin", "Consumer", "Producer", "send"]
