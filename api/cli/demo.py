"""``oncelog demo``: the main job, end to end on the embedded default.

1. start (or reuse) the private PostgreSQL and migrate it;
2. produce an input topic in transactions, some of them aborted;
3. run the exactly-once Spark pipeline (local mode) with an injected task failure;
4. check the output against the committed input and print a report.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from oncelog.admin import Admin
from oncelog.cli.context import CliContext
from oncelog.consumer import Consumer
from oncelog.producer import Producer
from oncelog.store import migrate, redact
from oncelog.types import TopicPartition


@click.command()
@click.option("--transactions", default=40, show_default=True, help="Input transactions to write.")
@click.option("--records-per-transaction", default=250, show_default=True)
@click.option("--abort-every", default=5, show_default=True, help="Abort every n-th input transaction.")
@click.option("--partitions", default=4, show_default=True)
@click.option("--master", default=None, help="Spark master (default: ONCELOG_SPARK_MASTER, else local mode).")
@click.pass_obj
def demo(
    obj: CliContext,
    *,
    transactions: int,
    records_per_transaction: int,
    abort_every: int,
    partitions: int,
    master: str | None,
) -> None:
    """Run the exactly-once Spark pipeline end to end and check its output."""
    console = Console()
    started = time.monotonic()
    with console.status("starting the database and migrating..."):
        engine = obj.engine()
        migrate.check(engine, schema=obj.schema)
        url = obj.url()
    console.print(f"[bold]database[/] {redact(engine.url)}  schema {obj.schema} at {migrate.head()}")

    run = uuid.uuid4().hex[:8]
    source, sink, group = f"demo-{run}-input", f"demo-{run}-output", f"demo-{run}"
    with Admin(url, schema=obj.schema) as admin:
        admin.create_topic(source, partitions=partitions)
        admin.create_topic(sink, partitions=partitions)

    committed: list[bytes] = []
    aborted = 0
    progress_columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*progress_columns, console=console) as progress:
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

    with console.status("starting Spark (local mode) and running the pipeline with an injected task failure..."):
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

    with Consumer(url, schema=obj.schema) as consumer:
        consumer.assign([TopicPartition(sink, p) for p in range(partitions)])
        output: list[bytes] = []
        while batch := consumer.poll(timeout=0.5):
            output.extend(r.value for r in batch)
    counts = Counter(output)
    expected = Counter(v.upper() for v in committed)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    missing = sum((expected - counts).values())
    unexpected = sum((counts - expected).values())

    report = Table(title="exactly-once pipeline report", show_header=False)
    report.add_column("what", style="bold")
    report.add_column("value", justify="right")
    report.add_row("input records written", f"{len(committed) + aborted:,}")
    report.add_row("  in committed transactions", f"{len(committed):,}")
    report.add_row("  in aborted transactions (excluded)", f"{aborted:,}")
    report.add_row("Spark task failures injected", "1")
    report.add_row("committed output records", f"{len(output):,}")
    report.add_row("duplicates found", str(duplicates))
    report.add_row("missing records", str(missing))
    report.add_row("records not from committed input", str(unexpected))
    report.add_row("records copied by an immediate re-run", str(rerun.output_records))
    report.add_row(
        "Spark pipeline time", f"{spark_seconds:.1f} s ({result.output_records / spark_seconds:,.0f} records/s)"
    )
    report.add_row("total time", f"{time.monotonic() - started:.1f} s")
    console.print(report)
    ok = duplicates == missing == unexpected == 0 and rerun.output_records == 0 and len(output) == len(committed)
    if not ok:
        raise click.ClickException("the output is NOT exactly the committed input")
    console.print("[bold green]exactly once:[/] every committed input record is in the output once, nothing else is.")
