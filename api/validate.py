"""Checks of the values a caller hands to the public API, in one place.

Every public entry point (the constructors and methods of Producer, Consumer and Admin) runs its
arguments through these before anything is queued or sent, so a bad value raises a typed
:class:`oncelog.errors.OncelogError` at the call that received it, instead of a ``TypeError``
deep in the driver, an ``OverflowError`` from ``datetime``, a misleading database error (a
``bigint`` where the SQL function takes an ``integer`` is "function does not exist"), or worse, a
value the client accepts and then chokes on later (a NaN linger, an offset past ``bigint``).

The ranges are the protocol's: int32 for partitions, counts and millisecond settings, int64 for
offsets, and record timestamps from the epoch to the end of year 9999 (UTC), which is what the
database stores. ``bool`` is never taken for an ``int`` (``True`` is not partition 1), and text
must be encodable as UTF-8 (no lone surrogates) and free of NUL, which PostgreSQL's text refuses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from oncelog.errors import (
    ConfigurationError,
    InvalidRecordError,
    InvalidRequestError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    OncelogError,
)
from oncelog.store.topics import TopicSetting
from oncelog.types import AclBinding, AclBindingFilter, OffsetAndMetadata, TopicPartition

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "MAX_TIMESTAMP",
    "MAX_TIMESTAMP_MS",
    "MIN_TIMESTAMP",
    "OFFSET_METADATA_MAX_BYTES",
    "acl_binding",
    "acl_filter",
    "aware_datetime",
    "callback",
    "headers",
    "integer",
    "number",
    "offset",
    "offset_map",
    "optional_text",
    "record_timestamp",
    "serialized",
    "text",
    "timeout",
    "topic_config",
    "topic_partition",
    "topic_partitions",
]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
#: The range of record timestamps: the epoch to the last millisecond of year 9999 (UTC).
#: The store's bound on an offset's metadata (offset_commit_args_v1, OL406), in UTF-8 bytes.
OFFSET_METADATA_MAX_BYTES = 4096
MIN_TIMESTAMP = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TIMESTAMP = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
MAX_TIMESTAMP_MS = 253_402_300_799_999

ErrorType = type[OncelogError]


def _shown(value: object) -> str:
    """A bad value for a message: its repr, cut short (a caller may pass something huge)."""
    try:
        shown = repr(value)
    except Exception:  # a broken __repr__ must not hide the real error
        shown = f"<{type(value).__name__}>"
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _bound(x: float) -> str:
    """A range bound for a message: ``253402300799999``, not ``2.53402e+14``."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def integer(name: str, value: object, *, low: int = 0, high: int = INT32_MAX, error: ErrorType) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) in ``[low, high]``, else ``error``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise error(f"{name} must be an integer from {low} to {high}, not {_shown(value)}")
    return int(value)  # an int subclass (IntEnum, numpy-like) becomes a plain int for the driver


def number(name: str, value: object, *, low: float = 0, high: float = INT32_MAX, error: ErrorType) -> float:
    """``value`` if it is a finite real number (int or float, not ``bool``) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{name} must be a number from {_bound(low)} to {_bound(high)}, not {_shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise error(f"{name} must be a finite number, not {_shown(value)}")
    if not low <= value <= high:
        raise error(f"{name} must be a number from {_bound(low)} to {_bound(high)}, not {_shown(value)}")
    return float(value)


def text(name: str, value: object, *, error: ErrorType, max_length: int | None = None) -> str:
    """``value`` if it is a ``str`` that PostgreSQL's ``text`` can hold: encodable as UTF-8 (no
    lone surrogate) and without NUL; at most ``max_length`` characters when given."""
    if not isinstance(value, str):
        raise error(f"{name} must be a str, not {_shown(value)}")
    if "\x00" in value:
        raise error(f"{name} must not contain a NUL character: {_shown(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{name} is not valid Unicode (a lone surrogate): {_shown(value)}") from None
    if max_length is not None and len(value) > max_length:
        raise error(f"{name} must be at most {max_length} characters, not {len(value)}")
    return str(value)


def texts(name: str, values: object, *, error: ErrorType) -> list[str]:
    """Every element of an iterable of strings, each as :func:`text` takes it (a lone str is
    refused: it would be taken letter by letter)."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise error(f"{name} must be an iterable of str, not {_shown(values)}")
    return [text(name, v, error=error) for v in values]


def optional_text(name: str, value: object, *, error: ErrorType, max_length: int | None = None) -> str | None:
    """:func:`text`, or ``None``."""
    return None if value is None else text(name, value, error=error, max_length=max_length)


def timeout(name: str, value: object, *, error: ErrorType = InvalidRequestError) -> float | None:
    """A timeout in seconds: ``None`` (the default applies) or a finite number >= 0 (at most
    int32 milliseconds, about 24.8 days)."""
    if value is None:
        return None
    return number(name, value, low=0, high=INT32_MAX / 1000, error=error)


def topic_partition(value: object, *, error: ErrorType = InvalidRequestError) -> TopicPartition:
    """A :class:`TopicPartition` (or a ``(topic, partition)`` pair) with a valid topic name and
    partition number."""
    if not isinstance(value, tuple) or len(value) != 2:
        raise error(f"a partition must be a TopicPartition(topic, partition), not {_shown(value)}")
    topic = text("topic", value[0], error=error)
    return TopicPartition(topic, integer("partition", value[1], error=error))


def topic_partitions(values: object, *, error: ErrorType = InvalidRequestError) -> list[TopicPartition]:
    """Every element of an iterable of partitions, checked (a str is not taken for one)."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise error(f"expected an iterable of TopicPartition, not {_shown(values)}")
    return [topic_partition(v, error=error) for v in values]


def record_timestamp(value: object) -> datetime | None:
    """A record's timestamp: ``None`` (the store's append time), a timezone-aware datetime, or
    milliseconds since the epoch (an int or a finite float), within ``[MIN_TIMESTAMP,
    MAX_TIMESTAMP]``. InvalidRecordError otherwise."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            raise InvalidRecordError("timestamp must be timezone-aware (naive datetimes are ambiguous)")
        ts = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number("timestamp", value, low=0, high=MAX_TIMESTAMP_MS, error=InvalidRecordError)
        # Exact for an int, unlike fromtimestamp(ms / 1000), whose float loses microseconds in
        # late years; and no platform time_t in the way.
        ts = MIN_TIMESTAMP + timedelta(milliseconds=value)
    else:
        raise InvalidRecordError(f"timestamp must be a datetime or milliseconds since the epoch, not {_shown(value)}")
    try:
        in_range = MIN_TIMESTAMP <= ts <= MAX_TIMESTAMP
    except (OverflowError, ValueError):  # a tzinfo whose offset pushes it past datetime's range
        in_range = False
    if not in_range:
        raise InvalidRecordError(f"timestamp must lie between {MIN_TIMESTAMP} and {MAX_TIMESTAMP}, not {ts!r}")
    return ts


def headers(value: object) -> list[tuple[str, bytes | None]] | None:
    """Record headers: a mapping or an iterable of ``(key, value)`` pairs, each key a valid str
    (:func:`text`), each value bytes-like or ``None``. InvalidRecordError otherwise."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        items: list[Any] = list(value.items())
    elif isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidRecordError(f"headers must be a mapping or (str, bytes | None) pairs, not {_shown(value)}")
    else:
        items = list(value)
    out: list[tuple[str, bytes | None]] = []
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise InvalidRecordError(f"a header must be a (str, bytes | None) pair, not {_shown(item)}")
        key = text("header key", item[0], error=InvalidRecordError)
        v = item[1]
        if v is not None and not isinstance(v, bytes | bytearray | memoryview):
            raise InvalidRecordError(f"header {key!r}: value must be bytes or None, not {type(v).__name__}")
        out.append((key, None if v is None else bytes(v)))
    return out or None


def offset(name: str, value: object) -> int:
    """An offset: an ``int`` (not a ``bool``; InvalidRequestError) from 0 to int64's maximum
    (OffsetOutOfRangeError: the store's offsets are ``bigint``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"{name} must be an integer, not {_shown(value)}")
    if not 0 <= value <= INT64_MAX:
        raise OffsetOutOfRangeError(f"{name} must be from 0 to {INT64_MAX}, not {_shown(value)}")
    return int(value)


def offset_map(offsets: object) -> dict[tuple[str, int], tuple[int, str]]:
    """Offsets to commit: a mapping of TopicPartition to an offset or an OffsetAndMetadata, as the
    store takes them (``(topic, partition) -> (offset, metadata)``)."""
    if not isinstance(offsets, Mapping):
        raise InvalidRequestError(f"offsets must be a mapping of TopicPartition to offsets, not {_shown(offsets)}")
    out: dict[tuple[str, int], tuple[int, str]] = {}
    for tp, value in offsets.items():
        topic, partition = topic_partition(tp)
        if isinstance(value, OffsetAndMetadata):
            at, metadata = value.offset, value.metadata
        else:
            at, metadata = value, ""
        out[(topic, partition)] = (
            offset(f"offset for {topic}-{partition}", at),
            text("offset metadata", metadata, error=InvalidRequestError),
        )
        if len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
            # Checked here too, so that an offset held for a transaction's commit is refused at
            # once, where Kafka refuses it.
            raise OffsetMetadataTooLargeError(f"offset metadata is larger than {OFFSET_METADATA_MAX_BYTES} bytes")
    return out


def callback(name: str, value: object) -> None:
    """A callback: ``None`` or callable (InvalidRequestError otherwise)."""
    if value is not None and not callable(value):
        raise InvalidRequestError(f"{name} must be callable or None, not {_shown(value)}")


def serialized(role: str, serializer: Callable[[Any], bytes | None], value: object) -> bytes | None:
    """``serializer(value)``, its failures typed: an error of the application's serializer (any
    exception) or a result that is not bytes becomes InvalidRecordError, as Kafka's
    SerializationException; nothing is queued."""
    try:
        # `object`: an application's serializer may return anything, whatever its annotation says.
        out: object = serializer(value)
    except OncelogError:
        raise
    except Exception as exc:
        raise InvalidRecordError(f"the {role} serializer failed: {type(exc).__name__}: {exc}") from exc
    if out is None or isinstance(out, bytes):
        return out
    if isinstance(out, bytearray | memoryview):
        return bytes(out)
    raise InvalidRecordError(f"the {role} serializer returned {type(out).__name__}, not bytes or None")


def topic_config(value: object, *, error: ErrorType = ConfigurationError) -> dict[str, TopicSetting]:
    """Per-topic settings: a mapping of setting names to an int64 (not a ``bool``), a finite
    ``float`` (``min_cleanable_dirty_ratio``), a ``str`` (``cleanup_policy``) or ``None``; which
    names and values are allowed is the store's decision (``topic_config_v1``)."""
    if not isinstance(value, Mapping):
        raise error(f"a topic config must be a mapping of setting names to values, not {_shown(value)}")
    out: dict[str, TopicSetting] = {}
    for key, setting in value.items():
        name = text("topic config key", key, error=error)
        if setting is None:
            out[name] = None
        elif isinstance(setting, str):
            out[name] = text(name, setting, error=error, max_length=100)
        elif isinstance(setting, float):
            if not math.isfinite(setting):
                raise error(f"{name} must be a finite number, not {_shown(setting)}")
            out[name] = setting
        else:
            out[name] = integer(name, setting, low=-INT64_MAX, high=INT64_MAX, error=error)
    return out


#: Topic settings that are not integers: a word list, and a fraction from 0 to 1.
TOPIC_TEXT_SETTINGS = frozenset({"cleanup_policy"})
TOPIC_FRACTION_SETTINGS = frozenset({"min_cleanable_dirty_ratio"})


def topic_setting_text(key: str, text: str, *, error: ErrorType = ConfigurationError) -> TopicSetting:
    """A topic setting given as text (the CLI's ``KEY=VALUE``, a Kafka client's config entry) as
    the value the store takes: cleanup_policy's words as they are, min_cleanable_dirty_ratio a
    finite number, every other setting an integer. Which values are allowed is the store's
    decision (``topic_config_v1``)."""
    if key in TOPIC_TEXT_SETTINGS:
        return text
    fraction = key in TOPIC_FRACTION_SETTINGS
    try:
        value: float | int = float(text) if fraction else int(text)
    except ValueError:
        raise error(f"topic config {key} must be {'a number' if fraction else 'an integer'}, not {text!r}") from None
    if fraction and not math.isfinite(value):
        raise error(f"topic config {key} must be a finite number, not {text!r}")
    return value


def aware_datetime(name: str, value: object, *, error: ErrorType = InvalidRequestError) -> datetime:
    """A timezone-aware datetime."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise error(f"{name} must be a timezone-aware datetime, not {_shown(value)}")
    return value


def acl_binding(value: object) -> AclBinding:
    """An AclBinding whose fields are text the store can take (which values are valid is the
    store's decision)."""
    if not isinstance(value, AclBinding):
        raise InvalidRequestError(f"expected an AclBinding, not {_shown(value)}")
    _acl_fields(value, optional=False)
    return value


def acl_filter(value: object) -> AclBindingFilter:
    """An AclBindingFilter whose fields are None or text the store can take."""
    if not isinstance(value, AclBindingFilter):
        raise InvalidRequestError(f"expected an AclBindingFilter, not {_shown(value)}")
    _acl_fields(value, optional=True)
    return value


def _acl_fields(binding: AclBinding | AclBindingFilter, *, optional: bool) -> None:
    for name in ("principal", "resource_type", "resource_name", "operation", "pattern_type"):
        value = getattr(binding, name)
        if not (optional and value is None):
            text(name, value, error=InvalidRequestError)
