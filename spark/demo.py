"""The main job's parts that Spark must import in its workers: the transform and the injected
task failure."""

from __future__ import annotations

from typing import Any


def upper_case(df: Any) -> Any:
    """The demo's transform: keep key and partition, upper-case the value."""
    from pyspark.sql import functions as F  # noqa: PLC0415 - the optional spark extra

    return df.select(F.col("key"), F.upper(F.col("value").cast("string")).alias("value"), F.col("partition"))


def fail_first_attempt_of_task_1(index: int, attempt: int) -> None:
    """Make task 1 fail on its first attempt, after it has sent its rows: Spark retries it, the
    retry fences the failed attempt, and the output still lands exactly once."""
    if index == 1 and attempt == 0:
        raise RuntimeError("injected task failure (the demo's chaos): Spark retries this task")
