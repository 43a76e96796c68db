"""Serializers and deserializers: built-ins, round trips, None, lookup by name, wrong types."""

from __future__ import annotations

import decimal
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.errors import ConfigurationError, InvalidRecordError
from oncelog.serde import (
    DESERIALIZERS,
    SERIALIZERS,
    Deserializer,
    Serializer,
    deserialize_bytes,
    deserialize_json,
    deserialize_str,
    resolve_deserializer,
    resolve_serializer,
    serialize_bytes,
    serialize_json,
    serialize_str,
)

NAMES = ["bytes", "str", "json"]

# JSON values that survive a round trip unchanged: no tuples (they come back as lists), no
# non-str dict keys (they come back as str), no NaN/infinities (refused, they are not JSON).
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=20,
)


# --- bytes ---------------------------------------------------------------------------------------


def test_bytes_passes_bytes_through() -> None:
    data = b"\x00\xffabc"
    assert serialize_bytes(data) is data
    assert deserialize_bytes(data) is data


def test_bytes_copies_bytearray_and_memoryview() -> None:
    buf = bytearray(b"abc")
    out = serialize_bytes(buf)
    assert out == b"abc"
    assert type(out) is bytes
    buf[0] = ord("z")  # the caller reusing its buffer must not change the record
    assert out == b"abc"
    view = serialize_bytes(memoryview(b"xabcx")[1:4])
    assert view == b"abc"
    assert type(view) is bytes


@settings(database=None)
@given(st.binary())
def test_bytes_round_trip(data: bytes) -> None:
    assert deserialize_bytes(serialize_bytes(data)) == data


@pytest.mark.parametrize(
    ("value", "got"),
    [("abc", "str"), (1, "int"), (1.5, "float"), ([1], "list"), ({"a": 1}, "dict"), (True, "bool")],
)
def test_bytes_refuses_other_types(value: Any, got: str) -> None:
    with pytest.raises(InvalidRecordError) as info:
        serialize_bytes(value)
    assert str(info.value) == (f"the 'bytes' serializer expects bytes, bytearray, memoryview or None, got {got}")


# --- str -----------------------------------------------------------------------------------------


def test_str_is_utf8() -> None:
    assert serialize_str("héllo ✓") == "héllo ✓".encode()
    assert deserialize_str(b"h\xc3\xa9llo") == "héllo"
    assert serialize_str("") == b""
    assert deserialize_str(b"") == ""


@settings(database=None)
@given(st.text())
def test_str_round_trip(text: str) -> None:
    data = serialize_str(text)
    assert isinstance(data, bytes)
    assert deserialize_str(data) == text


@pytest.mark.parametrize(("value", "got"), [(b"abc", "bytes"), (1, "int"), (["a"], "list")])
def test_str_refuses_other_types(value: Any, got: str) -> None:
    with pytest.raises(InvalidRecordError) as info:
        serialize_str(value)
    assert str(info.value) == f"the 'str' serializer expects str or None, got {got}"


def test_str_refuses_a_lone_surrogate() -> None:
    with pytest.raises(InvalidRecordError, match="UTF-8"):
        serialize_str("\ud800")


def test_str_deserializer_refuses_invalid_utf8() -> None:
    with pytest.raises(InvalidRecordError, match="cannot decode the data as UTF-8") as info:
        deserialize_str(b"\xff\xfe")
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


# --- json ----------------------------------------------------------------------------------------


def test_json_is_compact_utf8() -> None:
    assert serialize_json({"a": [1, 2], "b": "é"}) == '{"a":[1,2],"b":"é"}'.encode()
    assert serialize_json("x") == b'"x"'
    assert serialize_json(0) == b"0"
    assert serialize_json(False) == b"false"
    assert serialize_json([]) == b"[]"


def test_json_deserializer() -> None:
    assert deserialize_json(b'{"a":[1,2.5,null,true]}') == {"a": [1, 2.5, None, True]}
    assert deserialize_json(' {"é" : "ü"} '.encode()) == {"é": "ü"}
    # A JSON null document reads as None, the same as a tombstone.
    assert deserialize_json(b"null") is None


@settings(database=None)
@given(json_values)
def test_json_round_trip(value: Any) -> None:
    data = serialize_json(value)
    if value is None:
        assert data is None
    else:
        assert isinstance(data, bytes)
        # Matches json.loads of the stdlib's own reading of the bytes.
        assert json.loads(data.decode("utf-8")) == value
    assert deserialize_json(data) == value


@pytest.mark.parametrize(
    ("value", "got"),
    [
        ({1, 2}, "set"),
        (b"abc", "bytes"),
        (decimal.Decimal("1.5"), "decimal.Decimal"),
        (object(), "object"),
        ({"nested": {1, 2}}, "dict"),
    ],
)
def test_json_refuses_values_it_cannot_encode(value: Any, got: str) -> None:
    with pytest.raises(InvalidRecordError) as info:
        serialize_json(value)
    message = str(info.value)
    assert message.startswith(
        f"the 'json' serializer expects a JSON-compatible value (dict, list, str, int, float, bool) or None, got {got} "
    )
    assert isinstance(info.value.__cause__, TypeError)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, [1.0, math.nan]])
def test_json_refuses_nan_and_infinity(value: Any) -> None:
    with pytest.raises(InvalidRecordError, match="Out of range float"):
        serialize_json(value)


def test_json_refuses_a_circular_value() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(InvalidRecordError, match="got list"):
        serialize_json(loop)


def test_json_refuses_a_lone_surrogate() -> None:
    with pytest.raises(InvalidRecordError, match="got str"):
        serialize_json("\udc80")


@pytest.mark.parametrize("data", [b"{", b"NaN", b"[Infinity]", b"-Infinity", b"\xff", b"", "[1]".encode("utf-16")])
def test_json_deserializer_refuses_bad_data(data: bytes) -> None:
    with pytest.raises(InvalidRecordError, match="cannot parse the data as UTF-8 JSON"):
        deserialize_json(data)


# --- None: null keys and tombstones --------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_none_passes_through_every_built_in(name: str) -> None:
    assert SERIALIZERS[name](None) is None
    assert DESERIALIZERS[name](None) is None
    assert resolve_serializer(name)(None) is None
    assert resolve_deserializer(name)(None) is None


# --- deserializers given something that is not bytes -----------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("data", "got"), [("abc", "str"), (3, "int")])
def test_deserializers_refuse_data_that_is_not_bytes(name: str, data: Any, got: str) -> None:
    with pytest.raises(InvalidRecordError) as info:
        DESERIALIZERS[name](data)
    assert str(info.value) == f"the {name!r} deserializer expects bytes or None, got {got}"


@pytest.mark.parametrize("name", NAMES)
def test_deserializers_accept_bytearray_and_memoryview(name: str) -> None:
    data = b'"x"'
    expected = DESERIALIZERS[name](data)
    assert DESERIALIZERS[name](bytearray(data)) == expected  # type: ignore[arg-type]
    assert DESERIALIZERS[name](memoryview(data)) == expected  # type: ignore[arg-type]


# --- resolve_serializer / resolve_deserializer -----------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_resolve_by_name(name: str) -> None:
    assert resolve_serializer(name) is SERIALIZERS[name]
    assert resolve_deserializer(name) is DESERIALIZERS[name]


def test_resolve_the_built_ins_are_the_module_functions() -> None:
    assert {"bytes": serialize_bytes, "str": serialize_str, "json": serialize_json} == SERIALIZERS
    assert {"bytes": deserialize_bytes, "str": deserialize_str, "json": deserialize_json} == DESERIALIZERS


def test_resolve_none_gives_the_default() -> None:
    assert resolve_serializer(None) is serialize_bytes
    assert resolve_deserializer(None) is deserialize_bytes
    assert resolve_serializer(None, default="json") is serialize_json
    assert resolve_deserializer(None, default="str") is deserialize_str


def test_resolve_returns_a_callable_as_is() -> None:
    def upper(value: Any) -> bytes | None:
        return None if value is None else str(value).upper().encode()

    def lower(data: bytes | None) -> Any:
        return None if data is None else data.decode().lower()

    serializer: Serializer = resolve_serializer(upper)
    deserializer: Deserializer = resolve_deserializer(lower)
    assert serializer is upper
    assert deserializer is lower
    assert deserializer(serializer("Ab")) == "ab"


@pytest.mark.parametrize("name", ["xml", "JSON", "", "string"])
def test_resolve_refuses_unknown_names(name: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve_serializer(name)
    assert str(info.value) == f"unknown serializer {name!r}; expected one of 'bytes', 'str', 'json'"
    with pytest.raises(ConfigurationError, match=f"unknown deserializer {name!r}"):
        resolve_deserializer(name)


def test_resolve_refuses_an_unknown_default() -> None:
    with pytest.raises(ConfigurationError, match="unknown serializer 'avro'"):
        resolve_serializer(None, default="avro")
    with pytest.raises(ConfigurationError, match="unknown deserializer 'avro'"):
        resolve_deserializer(None, default="avro")


@pytest.mark.parametrize(("spec", "got"), [(42, "int"), (b"json", "bytes")])
def test_resolve_refuses_what_is_neither_name_nor_callable(spec: Any, got: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve_serializer(spec)
    assert str(info.value) == (f"a serializer must be a name ('bytes', 'str', 'json') or a callable, got {got}")
    with pytest.raises(ConfigurationError, match=f"a deserializer must be .* got {got}"):
        resolve_deserializer(spec)


def test_built_in_tables_are_read_only() -> None:
    with pytest.raises(TypeError):
        SERIALIZERS["x"] = serialize_bytes  # type: ignore[index]
