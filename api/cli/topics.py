"""``oncelog topics create|list|describe|alter|delete`` and ``oncelog producers describe``."""

from __future__ import annotations

import click

from oncelog import validate
from oncelog.cli.context import CliContext
from oncelog.cli.render import OpsGroup, admin_for, emit, fields, json_option, table
from oncelog.errors import ConfigurationError, InvalidPartitionsError
from oncelog.store.topics import TOPIC_CONFIG_KEYS, TopicDescription, TopicSetting

#: Values that reset a setting to its default (retention_ms: the store-wide default; -1 is no limit).
_DEFAULT_WORDS = ("", "default", "none")


def _key(name: str) -> str:
    key = name.strip().replace(".", "_")
    if key not in TOPIC_CONFIG_KEYS:
        raise ConfigurationError(f"unknown topic config {key!r} (known: {', '.join(TOPIC_CONFIG_KEYS)})")
    return key


def _config(pairs: tuple[str, ...], deleted: tuple[str, ...] = ()) -> dict[str, TopicSetting]:
    """``KEY=VALUE`` settings (Kafka's dotted names accepted: ``retention.ms``) as a config map
    (each value as :func:`oncelog.validate.topic_setting_text` reads it)."""
    config: dict[str, TopicSetting] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ConfigurationError(f"expected KEY=VALUE, not {pair!r}")
        key = _key(name)
        value = value.strip()
        config[key] = None if value.lower() in _DEFAULT_WORDS else validate.topic_setting_text(key, value)
    for name in deleted:
        config[_key(name)] = None
    return config


_CONFIG_HELP = f"A setting KEY=VALUE (repeatable); keys: {', '.join(TOPIC_CONFIG_KEYS)}."


@click.group(cls=OpsGroup)
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


@topics.command()
@click.argument("name")
@click.option("-p", "--partitions", type=int, default=1, show_default=True, help="Number of partitions.")
@click.option("-c", "--config", "settings", multiple=True, metavar="KEY=VALUE", help=_CONFIG_HELP)
@click.option("--if-not-exists", is_flag=True, help="Succeed without change when the topic exists.")
@json_option
@click.pass_obj
def create(
    obj: CliContext, *, name: str, partitions: int, settings: tuple[str, ...], if_not_exists: bool, as_json: bool
) -> None:
    """Create topic NAME."""
    config = _config(settings)
    with admin_for(obj) as admin:
        created = True
        if if_not_exists and name in admin.list_topics():
            created = False
        else:
            admin.create_topic(name, partitions=partitions, config=config)
        description = admin.describe_topic(name)
    emit(
        as_json,
        {"created": created, "topic": description},
        f"{'created' if created else 'exists:'} topic {name} with {len(description.partitions)} partition(s); "
        f"{_cleanup(description)}",
    )


@topics.command(name="list")
@json_option
@click.pass_obj
def list_(obj: CliContext, as_json: bool) -> None:
    """List topics with their partitions, offsets held, bytes and open transactions."""
    with admin_for(obj) as admin:
        found = admin.topic_summaries()
    emit(
        as_json,
        found,
        table(
            None,
            ["topic", "partitions", "offsets", "bytes", "open txns"],
            [(t.name, t.partitions, t.offsets, t.log_bytes, t.open_transactions) for t in found],
            numeric=["partitions", "offsets", "bytes", "open txns"],
        ),
    )


@topics.command()
@click.argument("name")
@json_option
@click.pass_obj
def describe(obj: CliContext, name: str, as_json: bool) -> None:
    """Show topic NAME: configuration and, per partition, log start, high watermark and last stable offset."""
    with admin_for(obj) as admin:
        topic = admin.describe_topic(name)
        offsets = admin.list_offsets(name)
        cleaner = {c.partition: c for c in admin.compaction_status(name)}
    compacted = topic.config.get("cleanup_policy", "delete") != "delete"
    payload = {
        "name": topic.name,
        "topic_id": topic.topic_id,
        "created_at": topic.created_at,
        "config": topic.config,
        "config_from_defaults": sorted(topic.defaults),
        "partitions": [
            {
                "partition": p.partition,
                "log_start_offset": p.log_start_offset,
                "high_watermark": p.high_watermark,
                "last_stable_offset": p.last_stable_offset,
            }
            | (
                {
                    "clean_offset": cleaner[p.partition].clean_offset,
                    "dirty_ratio": cleaner[p.partition].dirty_ratio,
                    "removed_records": cleaner[p.partition].removed_records,
                    "removed_bytes": cleaner[p.partition].removed_bytes,
                }
                if compacted and p.partition in cleaner
                else {}
            )
            for p in offsets
        ],
    }
    columns = ["partition", "log start", "high watermark", "last stable", "offsets"]
    if compacted:
        # Offsets are never renumbered: after compaction a partition holds fewer records than offsets.
        columns += ["clean to", "dirty ratio", "removed"]
    rows = []
    for p in offsets:
        row: list[object] = [p.partition, p.log_start_offset, p.high_watermark, p.last_stable_offset]
        row.append(p.high_watermark - p.log_start_offset)
        if compacted and (c := cleaner.get(p.partition)) is not None:
            row += [c.clean_offset, f"{c.dirty_ratio:.2f}", c.removed_records]
        rows.append(row)
    emit(
        as_json,
        payload,
        fields(
            f"topic {topic.name}",
            [("topic id", topic.topic_id), ("created", topic.created_at)]
            + [(k, _setting(v, k in topic.defaults)) for k, v in topic.config.items()],
        ),
        table(None, columns, rows, numeric=columns),
    )


@topics.command()
@click.argument("name")
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000_000),
    default=50_000,
    show_default=True,
    help="Offsets of one partition per pass (one database transaction each).",
)
@click.option(
    "--if-dirty",
    is_flag=True,
    help="Only partitions past min_cleanable_dirty_ratio or max_compaction_lag_ms, as the maintenance loop does.",
)
@json_option
@click.pass_obj
def compact(obj: CliContext, name: str, batch: int, if_dirty: bool, as_json: bool) -> None:
    """Compact topic NAME now (its cleanup_policy must include compact): each key keeps its latest
    record; superseded, aborted and keyless records go, and tombstones and transaction markers
    once past delete_retention_ms. Offsets are never renumbered."""
    with admin_for(obj) as admin:
        done = admin.compact(name, batch=batch, force=not if_dirty)
    emit(
        as_json,
        {
            "topic": name,
            "passes": len(done.passes),
            "examined": done.examined,
            "removed": done.removed,
            "removed_bytes": done.removed_bytes,
            "partitions": [p for _, p in done.partitions],
        },
        f"topic {name}: {done}",
    )


@topics.command()
@click.argument("name")
@click.option("-p", "--partitions", type=int, default=None, help="Grow the topic to this many partitions.")
@click.option("-c", "--config", "settings", multiple=True, metavar="KEY=VALUE", help=_CONFIG_HELP)
@click.option("--delete-config", multiple=True, metavar="KEY", help="Reset a setting to its default (repeatable).")
@json_option
@click.pass_obj
def alter(
    obj: CliContext,
    *,
    name: str,
    partitions: int | None,
    settings: tuple[str, ...],
    delete_config: tuple[str, ...],
    as_json: bool,
) -> None:
    """Change topic NAME: more partitions (never fewer), settings."""
    if partitions is None and not settings and not delete_config:
        raise click.UsageError("nothing to change: give --partitions, --config or --delete-config")
    config = _config(settings, delete_config)
    with admin_for(obj) as admin:
        # Everything is checked before anything changes, so a refused alter leaves the topic as it was.
        current = admin.describe_topic(name)
        if partitions is not None and partitions <= len(current.partitions):
            raise InvalidPartitionsError(
                f"topic {name!r} has {len(current.partitions)} partitions; it can only grow, not to {partitions}"
            )
        if config:
            admin.alter_topic_config(name, config)
        if partitions is not None:
            admin.create_partitions(name, partitions)
        topic = admin.describe_topic(name)
    emit(as_json, topic, f"altered topic {name}: {len(topic.partitions)} partition(s), config {topic.config}")


@topics.command()
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def delete(obj: CliContext, name: str, yes: bool, as_json: bool) -> None:
    """Delete topic NAME with all its records and committed offsets."""
    with admin_for(obj) as admin:
        admin.describe_topic(name)  # unknown topic: say so before asking
        if not yes:
            click.confirm(f"delete topic {name} and all its records?", abort=True, err=True)
        admin.delete_topic(name)
    emit(as_json, {"deleted": name}, f"deleted topic {name}")


@topics.command(name="delete-records")
@click.argument("name")
@click.option(
    "--before",
    "befores",
    multiple=True,
    required=True,
    metavar="PARTITION:OFFSET",
    help="Delete PARTITION's records below OFFSET (-1: every record, up to the high watermark); repeatable.",
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def delete_records(obj: CliContext, name: str, befores: tuple[str, ...], yes: bool, as_json: bool) -> None:
    """Delete topic NAME's records below an offset, per partition (Kafka's kafka-delete-records):
    each partition's log start moves up to it, and readers start there."""
    offsets: dict[int, int] = {}
    for text in befores:
        partition, sep, offset = text.partition(":")
        try:
            if not sep:
                raise ValueError(text)
            offsets[int(partition)] = int(offset)
        except ValueError:
            raise click.BadParameter(f"{text!r} is not PARTITION:OFFSET", param_hint="--before") from None
    with admin_for(obj) as admin:
        admin.describe_topic(name)  # unknown topic: say so before asking
        if not yes:
            click.confirm(f"delete records of topic {name} below {offsets}?", abort=True, err=True)
        low = admin.delete_records(name, offsets)
    emit(
        as_json,
        {"topic": name, "low_watermarks": low},
        table(
            f"topic {name}: records deleted below each partition's log start",
            ["partition", "log start"],
            sorted(low.items()),
            numeric=["partition", "log start"],
        ),
    )


@click.group(cls=OpsGroup)
def producers() -> None:
    """Producer state kept for duplicate detection."""


@producers.command(name="describe")
@click.argument("topic")
@click.option("--partition", type=int, default=None, help="Only this partition.")
@json_option
@click.pass_obj
def describe_producers(obj: CliContext, topic: str, partition: int | None, as_json: bool) -> None:
    """Show the producers with sequence state on TOPIC (Kafka's describe-producers)."""
    with admin_for(obj) as admin:
        found = admin.describe_producers(topic, partition)
    emit(
        as_json,
        found,
        table(
            f"producers of {topic}",
            [
                "partition",
                "producer id",
                "epoch",
                "last sequence",
                "last offset",
                "last timestamp",
                "transactional id",
                "txn start offset",
            ],
            [
                (
                    p.partition,
                    p.producer_id,
                    p.producer_epoch,
                    p.last_sequence,
                    p.last_offset,
                    p.last_timestamp,
                    p.transactional_id,
                    p.current_txn_start_offset,
                )
                for p in found
            ],
            numeric=["partition", "producer id", "epoch", "last sequence", "last offset", "txn start offset"],
        ),
    )


def _cleanup(topic: TopicDescription) -> str:
    """What happens to a topic's old records: retention, compaction or both."""
    policy = topic.config.get("cleanup_policy", "delete")
    compacted = "each key's latest record is kept by oncelog coordinator run (compaction)"
    if policy == "compact":
        return compacted
    ms = topic.config["retention_ms"]
    retention = _retention(ms if isinstance(ms, int) else None, "retention_ms" in topic.defaults)
    return f"{retention}; {compacted}" if policy == "compact,delete" else retention


def _setting(value: TopicSetting, from_default: bool) -> str:
    shown = "no limit" if value is None else str(value)
    return f"{shown} (default)" if from_default else shown


def _retention(ms: int | None, from_default: bool) -> str:
    """What a new topic's retention is, and who applies it (the maintenance loop)."""
    if ms is None:
        return "records are kept for ever"
    if ms % 86_400_000 == 0:
        span = f" ({ms // 86_400_000} days)"
    elif ms % 3_600_000 == 0:
        span = f" ({ms // 3_600_000} hours)"
    else:
        span = ""
    source = "the default, settings.log_retention_ms" if from_default else "its retention_ms"
    return f"records older than {ms} ms{span} ({source}) are deleted by oncelog coordinator run"
