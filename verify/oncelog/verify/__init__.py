"""``oncelog verify``: check the exactly-once promise on a deployment, the way Jepsen checks databases.

Workloads record a :mod:`history <oncelog.verify.history>` of every operation while faults are
injected; the :mod:`checker <oncelog.verify.checker>` then judges the history against what the log
finally holds.
"""
