"""init_transactions() that ran out of time may be called again (as in Kafka), over a real outage.

The producer reaches PostgreSQL through the fault proxy, which refuses every new connection while
the test holds it "down": init_transactions raises a retriable error, and the same producer then
initialises and commits once the network is back. Errors that are not retriable stay fatal.
"""

from __future__ import annotations

import pytest

from oncelog import Admin, Consumer, Producer, TopicPartition, errors
from oncelog.txn_state import TxnState
from tests.support.logcheck import sslmode_disable
from tests.support.proxy import FaultProxy


def test_init_transactions_after_an_outage(db_url: str, proxy: FaultProxy) -> None:
    with Admin(db_url) as admin:
        admin.create_topic("t", partitions=1)
    proxy.block_new_connections(True)
    with Producer(proxy.url_for(sslmode_disable(db_url)), transactional_id="tid", max_block_ms=300) as p:
        with pytest.raises(errors.DatabaseUnavailableError) as info:
            p.init_transactions(timeout=0.3)
        assert info.value.retriable
        assert p.transaction_state is TxnState.INITIALIZING
        with pytest.raises(errors.DatabaseUnavailableError):
            p.init_transactions(timeout=0.3)  # still down: may be repeated again
        proxy.block_new_connections(False)
        p.init_transactions(timeout=30)
        assert p.transaction_state is TxnState.READY
        with p.transaction():
            p.send("t", b"after the outage", partition=0)
        with pytest.raises(errors.IllegalStateError):
            p.init_transactions()  # done once: not again
    with Consumer(db_url) as c:
        c.assign([TopicPartition("t", 0)])
        c.seek(TopicPartition("t", 0), 0)
        assert [r.value for r in c.poll(5.0)] == [b"after the outage"]


def test_a_refused_init_is_still_fatal(db_url: str) -> None:
    with Producer(db_url, transactional_id="tid", transaction_timeout_ms=10**9) as p:
        with pytest.raises(errors.InvalidTransactionTimeoutError):
            p.init_transactions()
        assert p.transaction_state is TxnState.FATAL_ERROR
        with pytest.raises(errors.IllegalStateError):
            p.init_transactions()
