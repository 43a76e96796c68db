"""``oncelog demo``: the main job, end to end on the embedded default.

1. start (or reuse) the private PostgreSQL and migrate it;
2. produce an input topic in transactions, some of them aborted;
3. run the exactly-once Spark pipeline (local mode) with an injected task failure;
4. check the output against the committed input and print a report, with the proof beside it:
   the output topic read read_uncommitted (the failed task attempt's aborted copies included)
   against read_committed (each committed input record once).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from oncelog.admin import Admin
from oncelog.cli.context import CliContext
from oncelog.cli.render import console, json_option, print_json
from oncelog.consumer import Consumer
from oncelog.producer import Producer
from oncelog.store import migrate, redact
from oncelog.types import TopicPartition

#: A Spark master that never retries a failed task: the demo's injected failure would end the job.
_NO_RETRIES = re.compile(r"local(\[(\*|\d+)\])?")


@click.command()
@click.option("--transactions", default=40, show_default=True, help="Input transactions to write.")
@click.option("--records-per-transaction", default=250, show_default=True)
@click.option("--abort-every", default=5, show_default=True, help="Abort every n-th input transaction.")
@click.option("--partitions", default=4, show_default=True)
@click.option(
    "--master",
    default=None,
    help="Spark master (default: ONCELOG_SPARK_MASTER, else local[2,4]); local mode needs task retries: local[N,F].",
)
@json_option
@click.pass_obj
def demo(
    obj: CliContext,
    *,
    transactions: int,
    records_per_transaction: int,
    abort_every: int,
    partitions: int,
    master: str | None,
    as_json: bool,
) -> None:
    """Run the exactly-once Spark pipeline end to end, with an injected task failure, and check
    its output: read_uncommitted shows the failed attempt's copies, read_committed each record once."""
    effective = master or os.environ.get("ONCELOG_SPARK_MASTER") or "local[2,4]"
    if _NO_RETRIES.fullmatch(effective.strip()):
        raise click.BadParameter(
            f"{effective} never retries a failed task, and the demo injects one: use local mode with "
            "retries, local[N,F] with F >= 2 (e.g. --master 'local[2,4]')",
            param_hint="--master",
        )
    out = console()
    started = time.monotonic()
    with _status(out, "starting the database and migrating...", as_json):
        engine = obj.engine()
        migrate.check(engine, schema=obj.schema)
        url = obj.url()
    if not as_json:
        out.print(f"[bold]database[/] {redact(engine.url)}  schema {obj.schema} at {migrate.head()}")

    run = uuid.uuid4().hex[:8]
    source, sink, group = f"demo-{run}-input", f"demo-{run}-output", f"demo-{run}"
    with Admin(url, schema=obj.schema) as admin:
        admin.create_topic(source, partitions=partitions)
        admin.create_topic(sink, partitions=partitions)

    committed: list[bytes] = []
    aborted = 0
    progress_columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*progress_columns, console=out, disable=as_json) as progress:
        task = progress.add_task("producing input transactions", total=transactions)
        with Producer(url, schema=obj.schema, transactional_id=f"demo-{run}-feeder", linger_ms=5) as producer:
            producer.init_transactions()
            for t in range(transactions):
                producer.begin_transaction()
                values = [f"txn {t:04d} record {i:05d}".encode() for i in range(records_per_transaction)]
                for i, value in enumerate(values):
                    producer.send(source, value, key=f"key-{i % 97}".encode())
                producer.flush()  # in the log either way: read_committed must skip the aborted ones
                if abort_every and t % abort_every == abort_every - 1:
                    producer.abort_transaction()
                    aborted += len(values)
                else:
                    producer.commit_transaction()
                    committed.extend(values)
                progress.advance(task)

    with _status(out, "starting Spark and running the pipeline with an injected task failure...", as_json):
        from oncelog import spark as oncelog_spark  # noqa: PLC0415 - the optional spark extra
        from oncelog.spark.demo import fail_first_attempt_of_task_1, upper_case  # noqa: PLC0415

        # The injected failure is expected: keep Spark's log of it (and its progress bars) quiet.
        session = oncelog_spark.session(master, **{"spark.ui.showConsoleProgress": "false", "spark.log.level": "OFF"})
        session.sparkContext.setLogLevel("OFF")
        try:
            spark_started = time.monotonic()
            result = oncelog_spark.run_pipeline(
                session,
                url,
                input_topics=[source],
                output_topic=sink,
                group=group,
                transform=upper_case,
                schema=obj.schema,
                task_hook=fail_first_attempt_of_task_1,
            )
            spark_seconds = time.monotonic() - spark_started
            rerun = oncelog_spark.run_pipeline(
                session,
                url,
                input_topics=[source],
                output_topic=sink,
                group=group,
                transform=upper_case,
                schema=obj.schema,
            )
        finally:
            session.stop()

    output = _read(url, obj.schema, sink, partitions, "read_committed")
    everything = _read(url, obj.schema, sink, partitions, "read_uncommitted")
    counts = Counter(output)
    expected = Counter(v.upper() for v in committed)
    missing = sum((expected - counts).values())
    unexpected = sum((counts - expected).values())
    ok = (
        _duplicates(output) == missing == unexpected == 0
        and rerun.output_records == 0
        and len(output) == len(committed)
    )
    embedded = None if obj.database_url else str(obj.embedded.data_dir)
    report = {
        "database": redact(engine.url),
        "embedded_data_directory": embedded,
        "input": {"committed_records": len(committed), "aborted_records": aborted},
        "task_failures_injected": 1,
        "output_read_uncommitted": {"records": len(everything), "duplicates": _duplicates(everything)},
        "output_read_committed": {"records": len(output), "duplicates": _duplicates(output)},
        "missing_records": missing,
        "records_not_from_committed_input": unexpected,
        "records_copied_by_an_immediate_rerun": rerun.output_records,
        "spark_seconds": round(spark_seconds, 3),
        "records_per_s": round(result.output_records / spark_seconds, 1),
        "total_seconds": round(time.monotonic() - started, 3),
        "exactly_once": ok,
    }
    if as_json:
        print_json(report)
    else:
        out.print(_table(report))
        if embedded is not None:
            out.print(
                f"The demo's PostgreSQL is still running, its data in {embedded}: "
                "[bold]oncelog dev-db stop[/] stops it (its topics stay until you delete the directory)."
            )
    if not ok:
        raise click.ClickException("the output is NOT exactly the committed input")
    if not as_json:
        out.print(
            "[bold green]exactly once:[/] every committed input record is in the output once, nothing else is; "
            "the failed attempt's copies are there only for read_uncommitted."
        )


def _read(url: str, schema: str, topic: str, partitions: int, isolation_level: str) -> list[bytes]:
    with Consumer(url, schema=schema, isolation_level=isolation_level) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        # To the ends fixed now, not to the first empty poll: a poll also returns nothing while
        # the database is unreachable for a moment, which must not read as missing records.
        ends = consumer.end_offsets(tps)
        values: list[bytes] = []
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            values.extend(r.value for r in consumer.poll(timeout=0.5) if r.value is not None)
    return values


def _duplicates(values: list[bytes]) -> int:
    return sum(n - 1 for n in Counter(values).values() if n > 1)


def _table(r: dict[str, Any]) -> Table:
    table = Table(title="exactly-once pipeline report", show_header=False)
    table.add_column("what", style="bold", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    ins = r["input"]
    uncommitted, committed = r["output_read_uncommitted"], r["output_read_committed"]
    rows = [
        ("input records written", ins["committed_records"] + ins["aborted_records"]),
        ("  in committed transactions", ins["committed_records"]),
        ("  in aborted transactions (excluded)", ins["aborted_records"]),
        ("Spark task failures injected", r["task_failures_injected"]),
        ("output read read_uncommitted", uncommitted["records"]),
        ("  duplicates in it (the failed attempt's aborted copies)", uncommitted["duplicates"]),
        ("committed output records", committed["records"]),
        ("duplicates found", committed["duplicates"]),
        ("missing records", r["missing_records"]),
        ("records not from committed input", r["records_not_from_committed_input"]),
        ("records copied by an immediate re-run", r["records_copied_by_an_immediate_rerun"]),
    ]
    for what, value in rows:
        table.add_row(what, f"{value:,}")
    table.add_row("Spark pipeline time", f"{r['spark_seconds']:.1f} s ({r['records_per_s']:,.0f} records/s)")
    table.add_row("total time", f"{r['total_seconds']:.1f} s")
    return table


@contextlib.contextmanager
def _status(out: Any, text: str, quiet: bool) -> Iterator[None]:
    if quiet:
        yield
        return
    with out.status(text):
        yield
