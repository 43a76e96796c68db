"""The fault-injecting TCP proxy, for the tests: it ships in the product as
:mod:`oncelog.verify.proxy` (``oncelog verify`` uses it), and this module re-exports it so tests
keep importing ``tests.support.proxy``."""

from oncelog.verify.proxy import (
    FAULT_CUT_AFTER_REPLY,
    FAULT_CUT_ALL,
    FAULT_CUT_BEFORE_REQUEST,
    FAULT_STALL,
    FaultProxy,
    ProxyStats,
)

__all__ = [
    "FAULT_CUT_AFTER_REPLY",
    "FAULT_CUT_ALL",
    "FAULT_CUT_BEFORE_REQUEST",
    "FAULT_STALL",
    "FaultProxy",
    "ProxyStats",
]
