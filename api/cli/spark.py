"""``oncelog spark run``: run an exactly-once pipeline with a user transform."""

from __future__ import annotations

import importlib
from typing import Any

import click

from oncelog.cli.context import CliContext
from oncelog.errors import ConfigurationError


def _load(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter("expected module:function", param_hint="TRANSFORM")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r}: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigurationError(f"{spec!r} is not a function")
    return fn


@click.group()
def spark() -> None:
    """Spark pipelines over committed records."""


@spark.command()
@click.argument("transform")
@click.option("--input", "inputs", required=True, multiple=True, help="Input topic (repeatable).")
@click.option("--output", required=True, help="Output topic.")
@click.option("--group", required=True, help="Consumer group whose committed offsets start the read.")
@click.option("--master", default=None, help="Spark master [env ONCELOG_SPARK_MASTER]; default local mode.")
@click.option("--max-records-per-task", default=1_000_000, show_default=True)
@click.pass_obj
def run(
    obj: CliContext,
    *,
    transform: str,
    inputs: tuple[str, ...],
    output: str,
    group: str,
    master: str | None,
    max_records_per_task: int,
) -> None:
    """Read committed records of the inputs from the group's offsets, apply TRANSFORM
    (module:function taking and returning a DataFrame with value [, key, partition] columns),
    write the output and commit the input offsets in one database transaction."""
    from oncelog import spark as oncelog_spark  # noqa: PLC0415 - the optional spark extra

    fn = _load(transform)
    obj.engine()  # start and migrate the embedded server if that is what we use
    session = oncelog_spark.session(master)
    try:
        result = oncelog_spark.run_pipeline(
            session,
            obj.url(),
            input_topics=inputs,
            output_topic=output,
            group=group,
            transform=fn,
            schema=obj.schema,
            max_records_per_task=max_records_per_task,
        )
    finally:
        session.stop()
    click.echo(f"read {result.input_offsets} input offsets, wrote {result.output_records} records to {output}")
