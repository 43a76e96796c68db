"""A SparkSession with PostgreSQL's JDBC driver configured (a Spark entry point: it reads the
ONCELOG_SPARK_MASTER and ONCELOG_JDBC_JAR environment variables)."""

from __future__ import annotations

import os
import sys
from typing import Any

from oncelog.spark.jdbc import find_jdbc_jar


def session(master: str | None = None, *, app_name: str = "oncelog", jdbc_jar: str | None = None, **conf: Any) -> Any:
    """Build (or get) a SparkSession that can read and write oncelog.

    ``master`` defaults to ``ONCELOG_SPARK_MASTER``, else local mode with 2 threads that retries a
    failed task up to 4 times (``local[2,4]``, as a cluster would); ``spark://HOST:PORT`` is a
    standalone cluster. The JDBC jar goes on ``spark.jars`` (which ships it to the executors) and
    the driver's class path, so it is there before the JVM starts.
    """
    from pyspark.sql import SparkSession  # noqa: PLC0415 - the optional spark extra

    jar = find_jdbc_jar(jdbc_jar or os.environ.get("ONCELOG_JDBC_JAR"))
    chosen = master or os.environ.get("ONCELOG_SPARK_MASTER") or "local[2,4]"
    # Executors run this interpreter (its path travels with every task), so oncelog is importable
    # in tasks: on a cluster the same path must hold the same environment on every worker
    # (docs/guide-spark.md, "On a cluster").
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if chosen.startswith("local"):
        # Local mode talks to itself only: the loopback. A cluster's executors must reach the
        # driver at an address of its own (SPARK_LOCAL_IP, or spark.driver.host).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(chosen)
        .appName(app_name)
        .config("spark.jars", jar)
        .config("spark.driver.extraClassPath", jar)
        .config("spark.executor.extraClassPath", jar)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
    )
    for key, value in conf.items():
        builder = builder.config(key, str(value))  # e.g. **{"spark.executor.memory": "2g"}
    return builder.getOrCreate()
