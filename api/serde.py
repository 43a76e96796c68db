"""Serializers and deserializers for record keys and values.

The store holds keys and values as bytes (or null). A :data:`Serializer` turns an application
value into those bytes for the producer; a :data:`Deserializer` turns them back for the consumer.
Both pass ``None`` through untouched: a null key is a record without a key, and a null value is a
tombstone, so neither may be turned into bytes such as ``b"null"``.

Built-ins, selectable by name with :func:`resolve_serializer` and :func:`resolve_deserializer`:

* ``"bytes"``: bytes pass through (bytearray and memoryview are copied into bytes).
* ``"str"``: UTF-8 text.
* ``"json"``: compact UTF-8 JSON (``{"a":1}``), strict: no NaN or Infinity.

A value of the wrong type raises :class:`oncelog.errors.InvalidRecordError` naming the type
expected and the type received.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeAlias

from oncelog.errors import ConfigurationError, InvalidRecordError

__all__ = [
    "DESERIALIZERS",
    "SERIALIZERS",
    "Deserializer",
    "Serializer",
    "deserialize_bytes",
    "deserialize_json",
    "deserialize_str",
    "resolve_deserializer",
    "resolve_serializer",
    "serialize_bytes",
    "serialize_json",
    "serialize_str",
]

#: Turns a key or value into the bytes stored, or ``None`` for a null key or a tombstone.
Serializer: TypeAlias = Callable[[Any], bytes | None]
#: Turns stored bytes (or ``None``) back into a key or value.
Deserializer: TypeAlias = Callable[[bytes | None], Any]

_BUFFER_TYPES = (bytes, bytearray, memoryview)


def _type_name(value: object) -> str:
    """``int`` for builtins, ``decimal.Decimal`` for the rest: what the user would write."""
    cls = type(value)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _wrong_type(role: str, name: str, expected: str, value: object) -> InvalidRecordError:
    return InvalidRecordError(f"the {name!r} {role} expects {expected}, got {_type_name(value)}")


def _as_bytes(data: object, name: str) -> bytes:
    """The stored bytes handed to deserializer ``name``, or a typed error if they are not bytes."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise _wrong_type("deserializer", name, "bytes or None", data)


# --- bytes ---------------------------------------------------------------------------------------


def serialize_bytes(value: Any) -> bytes | None:
    """Pass bytes through; copy a bytearray or memoryview into bytes; ``None`` stays ``None``.

    Raises:
        InvalidRecordError: ``value`` is of any other type (a str must be encoded first, or use
            the ``"str"`` serializer).
    """
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        # Copy: the caller may reuse or mutate the buffer after send() returns, and the record
        # must keep the bytes it had when it was sent.
        return bytes(value)
    raise _wrong_type("serializer", "bytes", "bytes, bytearray, memoryview or None", value)


def deserialize_bytes(data: bytes | None) -> bytes | None:
    """The stored bytes as they are; ``None`` stays ``None``."""
    if data is None:
        return None
    return _as_bytes(data, "bytes")


# --- str -----------------------------------------------------------------------------------------


def serialize_str(value: Any) -> bytes | None:
    """Encode a str as UTF-8; ``None`` stays ``None``.

    Raises:
        InvalidRecordError: ``value`` is not a str (bytes are refused rather than passed through,
            so a mixed-up serializer shows up at once), or it holds a lone surrogate, which has
            no UTF-8 form.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise _wrong_type("serializer", "str", "str or None", value)
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRecordError(f"the 'str' serializer cannot encode the value as UTF-8: {exc}") from exc


def deserialize_str(data: bytes | None) -> str | None:
    """Decode UTF-8; ``None`` stays ``None``.

    Raises:
        InvalidRecordError: the data is not valid UTF-8, or not bytes.
    """
    if data is None:
        return None
    raw = _as_bytes(data, "str")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecordError(f"the 'str' deserializer cannot decode the data as UTF-8: {exc}") from exc


# --- json ----------------------------------------------------------------------------------------

_JSON_TYPES = "a JSON-compatible value (dict, list, str, int, float, bool) or None"


def serialize_json(value: Any) -> bytes | None:
    """Compact UTF-8 JSON (``separators=(",", ":")``); ``None`` stays ``None`` (a tombstone).

    Because ``None`` means a null key or a tombstone, a JSON ``null`` document cannot be
    produced through this serializer. NaN and the infinities are refused: Python would write
    them as bare ``NaN``/``Infinity``, which is not JSON and which other Kafka clients reject.

    Raises:
        InvalidRecordError: ``value`` (or something inside it) cannot be encoded as JSON.
    """
    if value is None:
        return None
    try:
        # ensure_ascii=False: non-ASCII text is stored as UTF-8, not as \\uXXXX escapes, which is
        # smaller and what Kafka's JSON serializers (Jackson) write.
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return text.encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        # TypeError: an unsupported type (set, bytes, ...), possibly nested; ValueError: NaN,
        # an infinity or a circular reference; UnicodeEncodeError (a ValueError): a lone
        # surrogate in a str.
        raise InvalidRecordError(
            f"the 'json' serializer expects {_JSON_TYPES}, got {_type_name(value)} that cannot be encoded: {exc}"
        ) from exc


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def deserialize_json(data: bytes | None) -> Any:
    """Parse UTF-8 JSON; ``None`` (a tombstone or null key) stays ``None``.

    Raises:
        InvalidRecordError: the data is not UTF-8 JSON (NaN and Infinity are not JSON), or not
            bytes.
    """
    if data is None:
        return None
    raw = _as_bytes(data, "json")
    try:
        # Decode explicitly: json.loads(bytes) would also guess UTF-16/32, and we only write UTF-8.
        # parse_constant: Python would read the non-JSON NaN/Infinity that the serializer refuses
        # to write; refuse them here too, so what we read is what any JSON reader would accept.
        return json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        # ValueError covers json.JSONDecodeError and UnicodeDecodeError.
        raise InvalidRecordError(f"the 'json' deserializer cannot parse the data as UTF-8 JSON: {exc}") from exc


# --- lookup by name ------------------------------------------------------------------------------

#: The built-in serializers by name.
SERIALIZERS: Mapping[str, Serializer] = MappingProxyType(
    {"bytes": serialize_bytes, "str": serialize_str, "json": serialize_json}
)
#: The built-in deserializers by name.
DESERIALIZERS: Mapping[str, Deserializer] = MappingProxyType(
    {"bytes": deserialize_bytes, "str": deserialize_str, "json": deserialize_json}
)


def _resolve(spec: object, default: object, table: Mapping[str, Callable[..., Any]], role: str) -> Any:
    # `spec` is typed `object` here (not the public union) so the checks for wrong types stay
    # reachable for mypy: configuration often comes from untyped sources (files, env, kwargs).
    if spec is None:
        spec = default
    if isinstance(spec, str):
        try:
            return table[spec]
        except KeyError:
            known = ", ".join(repr(n) for n in table)
            raise ConfigurationError(f"unknown {role} {spec!r}; expected one of {known}") from None
    if callable(spec):
        return spec
    raise ConfigurationError(
        f"a {role} must be a name ({', '.join(repr(n) for n in table)}) or a callable, got {_type_name(spec)}"
    )


def resolve_serializer(spec: str | Serializer | None, default: str = "bytes") -> Serializer:
    """The serializer that ``spec`` names or is.

    ``spec`` may be a built-in name (``"bytes"``, ``"str"``, ``"json"``), any callable (returned
    as is), or ``None`` for the ``default`` name.

    Raises:
        ConfigurationError: an unknown name, or neither a name nor a callable.
    """
    resolved: Serializer = _resolve(spec, default, SERIALIZERS, "serializer")
    return resolved


def resolve_deserializer(spec: str | Deserializer | None, default: str = "bytes") -> Deserializer:
    """The deserializer that ``spec`` names or is.

    ``spec`` may be a built-in name (``"bytes"``, ``"str"``, ``"json"``), any callable (returned
    as is), or ``None`` for the ``default`` name.

    Raises:
        ConfigurationError: an unknown name, or neither a name nor a callable.
    """
    resolved: Deserializer = _resolve(spec, default, DESERIALIZERS, "deserializer")
    return resolved
