"""``oncelog spark run``: run an exactly-once pipeline with a user transform."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import click

from oncelog.cli.context import CliContext
from oncelog.cli.render import console, json_option, print_json
from oncelog.errors import ConfigurationError


def _load(spec: str) -> tuple[ModuleType, Any]:
    """The module and the function of ``module:function``. The working directory comes first on
    the import path, as for ``python -m``: a job module next to the user is found."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter("expected module:function", param_hint="TRANSFORM")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot import {module_name!r} (looked in {cwd} and the installed packages): {exc}"
        ) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigurationError(f"{spec!r} is not a function")
    return module, fn


def _ship(session: Any, module: ModuleType, workdir: Path) -> None:
    """Send the job's module to the executors (a UDF in it is pickled by reference, so they must
    import it): its file, or its top-level package zipped. Installed modules are left alone."""
    top = sys.modules[module.__name__.split(".")[0]]
    source = Path(getattr(top, "__file__", None) or "")
    if not source.is_file() or Path(os.getcwd()) not in source.resolve().parents:
        return
    if source.name == "__init__.py":  # a package: executors import it from a zip
        archive = shutil.make_archive(str(workdir / top.__name__), "zip", source.parent.parent, top.__name__)
        session.sparkContext.addPyFile(archive)
    else:
        session.sparkContext.addPyFile(str(source))


def _conf(pairs: tuple[str, ...]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--conf")
        conf[key.strip()] = value
    return conf


@click.group()
def spark() -> None:
    """Spark pipelines over committed records."""


@spark.command()
@click.argument("transform")
@click.option("--input", "inputs", required=True, multiple=True, help="Input topic (repeatable).")
@click.option("--output", required=True, help="Output topic.")
@click.option("--group", required=True, help="Consumer group whose committed offsets start the read.")
@click.option("--master", default=None, help="Spark master [env ONCELOG_SPARK_MASTER]; default local mode.")
@click.option(
    "--conf", "conf_pairs", multiple=True, metavar="KEY=VALUE", help="A Spark setting (repeatable), as spark-submit's."
)
@click.option("--max-records-per-task", default=1_000_000, show_default=True)
@click.option(
    "--job-id",
    "job_id",
    type=click.IntRange(min=0),
    default=None,
    help="The run's number (default: the time in ms), which names its transactions. A run whose "
    "number committed before is not run again: a scheduler retrying run N writes its output once.",
)
@json_option
@click.pass_obj
def run(
    obj: CliContext,
    *,
    transform: str,
    inputs: tuple[str, ...],
    output: str,
    group: str,
    master: str | None,
    conf_pairs: tuple[str, ...],
    max_records_per_task: int,
    job_id: int | None,
    as_json: bool,
) -> None:
    """Read committed records of the inputs from the group's offsets, apply TRANSFORM
    (module:function taking and returning a DataFrame with value [, key, partition] columns),
    write the output and commit the input offsets in one database transaction.

    The module is imported from the working directory first, and sent to the executors. Spark
    starts only when there is something to read."""
    from oncelog import spark as oncelog_spark  # noqa: PLC0415 - the optional spark extra

    conf = _conf(conf_pairs)
    module, fn = _load(transform)
    obj.engine()  # start and migrate the embedded server if that is what we use
    sessions: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="oncelog-spark-run-") as workdir:

        def start_spark() -> Any:
            session = oncelog_spark.session(master, **conf)
            sessions.append(session)
            _ship(session, module, Path(workdir))
            return session

        err = console(stderr=True)
        # A spinner where a person watches: a terminal, without --json.
        busy = err.status("running the pipeline...") if err.is_terminal and not as_json else contextlib.nullcontext()
        try:
            with busy:
                result = oncelog_spark.run_pipeline(
                    start_spark,
                    obj.url(),
                    input_topics=inputs,
                    output_topic=output,
                    group=group,
                    transform=fn,
                    schema=obj.schema,
                    max_records_per_task=max_records_per_task,
                    run_id=job_id,
                )
        finally:
            for session in sessions:
                session.stop()
    if as_json:
        print_json(
            {
                "group": group,
                "input_offsets": result.input_offsets,
                "output_records": result.output_records,
                "output": output,
                "spark_started": bool(sessions),
                "job_id": result.run_id,
                "already_committed": result.already_committed,
                "ranges": result.ranges,
                "phases_s": result.phases,
            }
        )
    elif result.already_committed:
        click.echo(f"run {result.run_id} of the group {group} committed before: nothing done (Spark not started)")
    elif not sessions:
        click.echo(f"nothing to read: the group {group} is at the inputs' last stable offsets (Spark not started)")
    else:
        click.echo(f"read {result.input_offsets} input offsets, wrote {result.output_records} records to {output}")
