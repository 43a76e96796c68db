"""Spark integration: read committed records over JDBC, write back exactly once.

* :func:`session` builds a SparkSession with PostgreSQL's JDBC driver wired in (local mode by
  default; ``master=`` or ``ONCELOG_SPARK_MASTER`` for a cluster).
* :func:`read_committed` returns a DataFrame of committed records. The driver fixes, in one
  query, the last stable offset of every partition it reads; every task reads below those bounds
  from the ``committed_records`` view, where records are decided and immutable. So the read is
  consistent (a transaction spanning partitions is in the DataFrame on all of them or none, though
  tasks read over separate connections) and repeatable.
* :func:`write` writes a DataFrame to a topic exactly once and all-or-nothing: each task takes its
  rows as Arrow batches (``mapInArrow``, no pickled rows) and appends them in batches of many
  records in its own transaction (transactional id ``<job>-<task>``, so a retried or speculative
  attempt fences the earlier one), and leaves it open; the driver then commits every task's
  transaction in ONE database transaction (with the input offsets, for a pipeline).
* :func:`run_pipeline` reads a group's committed offsets up to fixed bounds, transforms, writes and
  commits the input offsets in that same database transaction: re-running after any crash neither
  skips nor duplicates.

Installed with the ``spark`` extra.
"""

from oncelog.spark.jdbc import JdbcTarget, find_jdbc_jar, jdbc_target
from oncelog.spark.pipeline import PipelineResult, run_pipeline
from oncelog.spark.reader import read_committed
from oncelog.spark.session import session
from oncelog.spark.writer import WriteResult, write

__all__ = [
    "JdbcTarget",
    "PipelineResult",
    "WriteResult",
    "find_jdbc_jar",
    "jdbc_target",
    "read_committed",
    "run_pipeline",
    "session",
    "write",
]
