"""``oncelog produce`` and ``oncelog consume``: records in from lines or JSON, records out.

The JSON shape of a record is the same both ways, so ``consume --json`` output can be fed back to
``produce --format json``::

    {"key": "k", "value": "v", "headers": [["h", "1"]], "partition": 0, "timestamp": "2026-11-21T13:00:00+00:00"}

A key, value or header value is ``null``, a string (its UTF-8 bytes), or ``{"base64": "..."}`` for
bytes that are not UTF-8. ``timestamp`` is ISO 8601 text or milliseconds since the epoch.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType
from typing import IO, Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from oncelog.cli.context import CliContext
from oncelog.cli.render import OpsCommand, admin_for, bytes_to_json, console, json_option, print_json, table
from oncelog.consumer import Consumer
from oncelog.errors import (
    ConfigurationError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    OncelogError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from oncelog.producer import Producer
from oncelog.store.records import PartitionOffsets, encode_headers, record_size
from oncelog.store.topics import TopicSetting
from oncelog.types import ConsumerRecord, RecordMetadata, TopicPartition

#: Keys a JSON input line may carry; ``topic`` and ``offset`` (from ``consume --json``) are ignored.
_JSON_KEYS = {"key", "value", "headers", "partition", "timestamp", "topic", "offset"}


@dataclass(frozen=True, slots=True)
class _Input:
    """One record read from the input, before anything is sent."""

    line: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int | None
    timestamp: datetime | None


# --- reading the input -----------------------------------------------------------------------


def _bytes_field(value: Any, what: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except binascii.Error:
            raise InvalidRecordError(f"{what}: invalid base64") from None
    raise InvalidRecordError(f'{what} must be a string, null or {{"base64": "..."}}, not {json.dumps(value)}')


def _headers_field(value: Any) -> list[tuple[str, bytes | None]]:
    if value is None:
        return []
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        pairs = [(p[0], p[1]) for p in value]
    else:
        raise InvalidRecordError("headers must be an object or a list of [key, value] pairs")
    out = []
    for k, v in pairs:
        if not isinstance(k, str):
            raise InvalidRecordError(f"a header key must be a string, not {json.dumps(k)}")
        out.append((k, _bytes_field(v, f"header {k!r}")))
    return out


def _timestamp_field(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return datetime.fromtimestamp(value / 1000, tz=UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidRecordError(f"timestamp {value!r} is not ISO 8601") from None
        return parsed if parsed.tzinfo is not None else parsed.astimezone()
    raise InvalidRecordError(f"timestamp must be ISO 8601 text or milliseconds since the epoch, not {value!r}")


def _json_record(raw: bytes, line: int, headers: list[tuple[str, bytes | None]]) -> _Input:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InvalidRecordError(f"invalid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidRecordError("expected a JSON object with value (and key, headers, partition, timestamp)")
    unknown = sorted(set(data) - _JSON_KEYS)
    if unknown:
        raise InvalidRecordError(f"unknown field {unknown[0]!r} (known: key, value, headers, partition, timestamp)")
    partition = data.get("partition")
    if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int) or partition < 0):
        raise InvalidRecordError(f"partition must be an integer >= 0, not {json.dumps(partition)}")
    return _Input(
        line=line,
        key=_bytes_field(data.get("key"), "key"),
        value=_bytes_field(data.get("value"), "value"),
        headers=headers + _headers_field(data.get("headers")),
        partition=partition,
        timestamp=_timestamp_field(data.get("timestamp")),
    )


def _parse(
    stream: Iterable[bytes],
    source: str,
    input_format: str,
    key_separator: bytes | None,
    headers: list[tuple[str, bytes]],
) -> Iterator[_Input]:
    """The records of the input, one at a time (nothing kept: the input may be larger than memory);
    a bad line raises with its line number."""
    for number, raw in enumerate(stream, start=1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        line = line[:-1] if line.endswith(b"\r") else line
        try:
            if input_format == "json":
                if line.strip():
                    yield _json_record(line, number, list(headers))
                continue
            # Lines: every line is a record, an empty one too (as Kafka's console producer).
            key: bytes | None = None
            if key_separator is not None:
                key, sep, line = line.partition(key_separator)
                if not sep:
                    raise InvalidRecordError(f"no key separator {key_separator.decode(errors='replace')!r}")
            yield _Input(number, key, line, list(headers), None, None)
        except InvalidRecordError as exc:
            raise InvalidRecordError(f"{source} line {number}: {exc}") from None


def _header_options(pairs: tuple[str, ...]) -> list[tuple[str, bytes]]:
    out = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigurationError(f"expected a header KEY=VALUE, not {pair!r}")
        out.append((key, value.encode("utf-8")))
    return out


def _separator(text: str | None) -> bytes | None:
    if text is None:
        return None
    if "\\" in text:  # '\t' typed on a command line means a tab
        text = text.encode("utf-8").decode("unicode_escape")
    if not text:
        raise ConfigurationError("the key separator cannot be empty")
    return text.encode("utf-8")


def _check(r: _Input, source: str, topic: str, partitions: int, config: Mapping[str, TopicSetting]) -> None:
    """Refuse what the store would refuse, before the first record is sent."""
    if r.partition is not None and r.partition >= partitions:
        raise UnknownTopicOrPartitionError(
            f"{source} line {r.line}: partition {r.partition} of topic {topic!r} does not exist "
            f"({partitions} partitions)"
        )
    if r.key is None and config.get("cleanup_policy", "delete") != "delete":
        raise InvalidRecordError(
            f"{source} line {r.line}: topic {topic!r} is compacted (cleanup_policy {config['cleanup_policy']}): "
            "every record needs a key"
        )
    max_bytes = config.get("max_message_bytes")
    try:
        size = record_size(r.key, r.value, encode_headers(r.headers))
    except InvalidRecordError as exc:
        raise InvalidRecordError(f"{source} line {r.line}: {exc}") from None
    if isinstance(max_bytes, int) and size > max_bytes:
        raise RecordTooLargeError(
            f"{source} line {r.line}: a record of {size} bytes exceeds max_message_bytes {max_bytes} of {topic!r}"
        )


class _Replay:
    """The input, read twice (checked whole, then sent) without holding it in memory: a seekable
    file is rewound; anything else (stdin from a pipe) is copied aside as the first pass reads it,
    to a temporary file once it outgrows a few MiB."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        try:
            seekable = stream.seekable() and stream.tell() == 0
        except (OSError, ValueError):
            seekable = False
        # Closed by close(), which produce() calls in a finally.
        self._copy: IO[bytes] | None = None if seekable else tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115

    def first(self) -> Iterator[bytes]:
        for raw in self._stream:
            if self._copy is not None:
                self._copy.write(raw)
            yield raw

    def second(self) -> IO[bytes]:
        target = self._stream if self._copy is None else self._copy
        target.seek(0)
        return target

    def close(self) -> None:
        if self._copy is not None:
            self._copy.close()


# --- produce -----------------------------------------------------------------------------------


@click.command(cls=OpsCommand)
@click.argument("topic")
@click.option(
    "-f",
    "--file",
    "path",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    default="-",
    show_default=True,
    help="Read records from this file ('-': stdin).",
)
@click.option(
    "--format",
    "input_format",
    type=click.Choice(["lines", "json"]),
    default="lines",
    show_default=True,
    help="lines: each line is a value; json: each line is a JSON object (key, value, headers, partition, timestamp).",
)
@click.option("--key-separator", default=None, metavar="SEP", help="lines: each line is KEY<SEP>VALUE ('\\t': a tab).")
@click.option("-H", "--header", "header_pairs", multiple=True, metavar="KEY=VALUE", help="A header on every record.")
@click.option("--partition", type=click.IntRange(min=0), default=None, help="Send every record to this partition.")
@click.option("--transactional-id", default=None, help="Write everything in one transaction: all or nothing.")
@json_option
@click.pass_obj
def produce(
    obj: CliContext,
    *,
    topic: str,
    path: str,
    input_format: str,
    key_separator: str | None,
    header_pairs: tuple[str, ...],
    partition: int | None,
    transactional_id: str | None,
    as_json: bool,
) -> None:
    """Write records to TOPIC from stdin or a file, one per line.

    The whole input is checked first (JSON, partitions, record sizes), so a bad line writes
    nothing, then read again and sent; nothing per record is held, so an input larger than memory
    works (stdin is copied to a temporary file for the second read). Records are idempotent; with
    --transactional-id they commit together.
    """
    source = "stdin" if path == "-" else path
    headers = _header_options(header_pairs)
    separator = _separator(key_separator)
    with admin_for(obj) as admin:
        described = admin.describe_topic(topic)
    count = len(described.partitions)

    def routed(r: _Input) -> _Input:
        return r if partition is None else _Input(r.line, r.key, r.value, r.headers, partition, r.timestamp)

    with click.open_file(path, "rb") as stream:
        replay = _Replay(stream)
        try:
            total = 0
            for r in _parse(replay.first(), source, input_format, separator, headers):
                _check(routed(r), source, topic, count, described.config)
                total += 1
            records = (routed(r) for r in _parse(replay.second(), source, input_format, separator, headers))
            summary = _send(obj, topic, records, total, transactional_id, progress=path != "-" and not as_json)
        finally:
            replay.close()
    sent = sum(n for n, _, _ in summary.values())
    payload = {
        "topic": topic,
        "records": sent,
        "transactional_id": transactional_id,
        "partitions": [
            {"partition": p, "records": n, "first_offset": first, "last_offset": last}
            for p, (n, first, last) in sorted(summary.items())
        ],
    }
    if as_json:
        print_json(payload)
    else:
        where = "; ".join(f"partition {p}: offsets {first}..{last}" for p, (_, first, last) in sorted(summary.items()))
        how = f" in a transaction of {transactional_id}" if transactional_id else ""
        click.echo(f"produced {sent} records to {topic}{how}" + (f" ({where})" if where else ""))


def _send(
    obj: CliContext,
    topic: str,
    records: Iterable[_Input],
    total: int,
    transactional_id: str | None,
    *,
    progress: bool,
) -> dict[int, tuple[int, int, int]]:
    """Send ``records`` (``total`` of them); per partition, how many landed and their first and last
    offsets. Acknowledgements are counted as they come, so nothing per record is kept."""
    err = console(stderr=True)
    bar = Progress(
        TextColumn("[bold]producing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err,
        # A bar only where a person watches: a file being sent, on a terminal.
        disable=not (progress and err.is_terminal),
    )
    lock = threading.Lock()
    summary: dict[int, tuple[int, int, int]] = {}
    failures: list[BaseException] = []
    with bar, Producer(obj.url(), schema=obj.schema, transactional_id=transactional_id, linger_ms=5) as producer:
        task = bar.add_task("producing", total=total)

        def acked(meta: RecordMetadata | None, exc: BaseException | None) -> None:
            with lock:
                if exc is not None or meta is None:
                    failures.append(exc or RuntimeError("no metadata"))
                else:
                    n, first, last = summary.get(meta.partition, (0, meta.offset, meta.offset))
                    summary[meta.partition] = (n + 1, min(first, meta.offset), max(last, meta.offset))
            bar.advance(task)

        if transactional_id is not None:
            producer.init_transactions()
            producer.begin_transaction()
        try:
            for r in records:
                producer.send(
                    topic,
                    r.value,
                    r.key,
                    partition=r.partition,
                    headers=r.headers or None,
                    timestamp=r.timestamp,
                    callback=acked,
                )
            if transactional_id is not None:
                producer.commit_transaction()
            else:
                producer.flush()
        except BaseException:
            if transactional_id is not None:
                with contextlib.suppress(OncelogError):
                    producer.abort_transaction()
            raise
    if failures:
        # Only without a transaction: some records may be in the log already; say how many.
        written = sum(n for n, _, _ in summary.values())
        first_failure = failures[0]
        if isinstance(first_failure, OncelogError):
            raise type(first_failure)(f"{first_failure} ({written} of {total} records were written)") from first_failure
        raise first_failure
    return summary


# --- consume -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM while inside (the previous handlers come back after)."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _record_json(r: ConsumerRecord) -> dict[str, Any]:
    return {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp.isoformat(),
        "key": bytes_to_json(r.key),
        "value": bytes_to_json(r.value),
        "headers": [[k, bytes_to_json(v)] for k, v in r.headers],
    }


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


def _print(records: Sequence[ConsumerRecord], output: str) -> None:
    if output == "json":
        for r in records:
            print_json(_record_json(r), compact=True)
    elif output == "table":
        console().print(
            table(
                None,
                ["partition", "offset", "timestamp", "key", "value", "headers"],
                [
                    (
                        r.partition,
                        r.offset,
                        r.timestamp,
                        _text(r.key),
                        _text(r.value),
                        [f"{k}={_text(v)}" for k, v in r.headers],
                    )
                    for r in records
                ],
                numeric=["partition", "offset"],
            )
        )
    else:
        for r in records:
            value = b"null" if r.value is None else r.value
            if output == "kv":
                value = (b"null" if r.key is None else r.key) + b"\t" + value
            click.echo(value)


@click.command(cls=OpsCommand)
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the log start (--group: if nothing is committed).")
@click.option("--offset", type=click.IntRange(min=0), default=None, help="Start at this offset on each partition.")
@click.option("--partition", "partitions", type=click.IntRange(min=0), multiple=True, help="Only this partition.")
@click.option("--group", default=None, help="Read as a member of this consumer group and commit its offsets.")
@click.option(
    "--isolation-level",
    type=click.Choice(["read_committed", "read_uncommitted"]),
    default="read_committed",
    show_default=True,
    help="read_committed never shows aborted or undecided records.",
)
@click.option("-f", "--follow", is_flag=True, help="Keep reading new records until interrupted.")
@click.option("--max-messages", type=click.IntRange(min=1), default=None, help="Stop after this many records.")
@click.option(
    "--format",
    "output",
    type=click.Choice(["value", "kv", "table", "json"]),
    default="value",
    show_default=True,
    help="value: one value per line; kv: key<TAB>value; table; json: one JSON object per record.",
)
@json_option
@click.pass_obj
def consume(
    obj: CliContext,
    *,
    topic: str,
    from_beginning: bool,
    offset: int | None,
    partitions: tuple[int, ...],
    group: str | None,
    isolation_level: str,
    follow: bool,
    max_messages: int | None,
    output: str,
    as_json: bool,
) -> None:
    """Read records of TOPIC and print them.

    Starts at the end (as Kafka's console consumer) unless --from-beginning, --offset or a
    --group's committed offsets say otherwise; without --follow, stops at the end of each
    partition as it was when reading began (the last stable offset for read_committed).
    """
    if as_json:
        output = "json"
    if group is not None and (partitions or offset is not None):
        raise click.UsageError("--group reads the partitions the group assigns: no --partition or --offset with it")
    if offset is not None and from_beginning:
        raise click.UsageError("give --from-beginning or --offset, not both")
    with admin_for(obj) as admin:  # also starts and migrates the embedded server if that is what we use
        bounds = admin.list_offsets(topic)  # an unknown topic fails here, before joining any group
    consumer = Consumer(
        obj.url(),
        schema=obj.schema,
        group_id=group,
        client_id="oncelog-cli",
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest" if from_beginning else "latest",
    )
    seen = 0
    with consumer, _stop_on_signals() as stop:
        if group is not None:
            consumer.subscribe([topic])
        else:
            _assign(
                consumer,
                topic=topic,
                bounds=bounds,
                partitions=partitions,
                offset=offset,
                from_beginning=from_beginning,
            )
        ends = consumer.end_offsets(consumer.assignment())
        buffered: list[ConsumerRecord] = []
        while not stop.is_set():
            records = consumer.poll(timeout=0.5)
            if max_messages is not None and len(records) > max_messages - seen:
                kept = records[: max_messages - seen]
                # Rewind every partition to its first record not printed, so a group commits
                # exactly what was shown (the last seek per partition is its lowest offset).
                for r in reversed(records[len(kept) :]):
                    consumer.seek(r.topic_partition, r.offset)
                records = kept
            seen += len(records)
            if output == "table" and not follow:
                buffered.extend(records)  # one table at the end
            elif records:
                _print(records, output)
            if group is not None and records:
                consumer.commit()
            if max_messages is not None and seen >= max_messages:
                break
            # A partition gained in a rebalance meanwhile has no recorded end: it does not hold us.
            if not follow and all(consumer.position(tp) >= ends.get(tp, 0) for tp in consumer.assignment()):
                break
        if buffered:
            _print(buffered, output)
        if group is not None:
            consumer.commit()
    if not as_json:
        click.echo(f"consumed {seen} records", err=True)


def _assign(
    consumer: Consumer,
    *,
    topic: str,
    bounds: Sequence[PartitionOffsets],
    partitions: tuple[int, ...],
    offset: int | None,
    from_beginning: bool,
) -> None:
    """Assign the partitions (all, or the ones named) and place the consumer on each."""
    known = {p.partition: p for p in bounds}
    for p in partitions:
        if p not in known:
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{p}")
    wanted = sorted(partitions) if partitions else sorted(known)
    consumer.assign([TopicPartition(topic, p) for p in wanted])
    for p in wanted:
        tp = TopicPartition(topic, p)
        if offset is not None:
            start, end = known[p].log_start_offset, known[p].high_watermark
            if not start <= offset <= end:
                raise OffsetOutOfRangeError(f"offset {offset} is outside {topic}-{p}: the log holds [{start}, {end}]")
            consumer.seek(tp, offset)
        elif from_beginning:
            consumer.seek_to_beginning([tp])
        else:
            consumer.seek_to_end([tp])
