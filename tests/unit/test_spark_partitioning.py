"""The Spark write tasks' routing, without Spark or a database: the numpy murmur2 over an Arrow
column agrees with the Producer's scalar one key for key, and each row goes where
``oncelog.spark.write`` documents (its partition column, else its key's hash, else its task's)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.errors import InvalidPartitionsError
from oncelog.partitioner import partition_for_key
from oncelog.spark.partitioning import partitions_for_keys
from oncelog.spark.task import _slice_end, route
from tests.unit.test_partitioner import KAFKA_UTILS_TEST_VECTORS, LIBRDKAFKA_JAVA_VECTORS


def scalar(keys: list[bytes], n: int) -> list[int]:
    return [partition_for_key(k, n) for k in keys]


def test_known_vectors_every_tail_length() -> None:
    keys = [k for k, _ in KAFKA_UTILS_TEST_VECTORS + LIBRDKAFKA_JAVA_VECTORS]
    # Enough copies of each length that the vectorised path (not the per-key fallback) runs.
    many = keys * 40
    for n in (1, 3, 7, 1000, 2**31 - 1):
        assert partitions_for_keys(pa.array(many, pa.binary()), n).tolist() == scalar(many, n)


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.binary(max_size=40), max_size=300),
    n=st.integers(min_value=1, max_value=10_000),
    large=st.booleans(),
)
def test_agrees_with_the_producer(keys: list[bytes], n: int, large: bool) -> None:
    arr = pa.array(keys, pa.large_binary() if large else pa.binary())
    assert partitions_for_keys(arr, n).tolist() == scalar(keys, n)


@settings(max_examples=50, deadline=None)
@given(keys=st.lists(st.binary(max_size=12), min_size=1, max_size=200), data=st.data())
def test_slices_and_gathered_arrays(keys: list[bytes], data: st.DataObject) -> None:
    """Arrow slices share their parent's buffers with an offset; taken arrays get new ones."""
    start = data.draw(st.integers(min_value=0, max_value=len(keys)))
    end = data.draw(st.integers(min_value=start, max_value=len(keys)))
    arr = pa.array(keys, pa.binary())
    assert partitions_for_keys(arr.slice(start, end - start), 5).tolist() == scalar(keys[start:end], 5)
    picks = data.draw(st.lists(st.integers(min_value=0, max_value=len(keys) - 1), max_size=50))
    taken = arr.take(pa.array(picks, pa.int64()))
    assert partitions_for_keys(taken, 5).tolist() == scalar([keys[i] for i in picks], 5)


def test_many_keys_of_one_length_and_long_keys() -> None:
    keys = [f"user-{i:06d}".encode() for i in range(5000)] + [bytes(range(256)) * 40] * 3
    assert partitions_for_keys(pa.array(keys), 12).tolist() == scalar(keys, 12)


def test_bad_input() -> None:
    with pytest.raises(InvalidPartitionsError):
        partitions_for_keys(pa.array([b"k"]), 0)
    with pytest.raises(InvalidPartitionsError):
        partitions_for_keys(pa.array([b"k"]), True)
    with pytest.raises(ValueError, match="null keys"):
        partitions_for_keys(pa.array([b"k", None]), 3)
    with pytest.raises(TypeError, match="binary"):
        partitions_for_keys(pa.array(["text"]), 3)
    assert partitions_for_keys(pa.array([], pa.binary()), 3).tolist() == []


def batch(**cols: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(cols)


def test_route_partition_column_then_key_then_task() -> None:
    keys = [b"a", None, b"c", None, b"e"]
    parts = [2, 1, None, None, None]
    b = batch(
        value=pa.array([b"v"] * 5),
        key=pa.array(keys, pa.binary()),
        partition=pa.array(parts, pa.int64()),
    )
    got = route(b, 4, task_index=7)
    # Given partitions win; a null partition falls back to the key's hash; no key either: the task's.
    assert got.tolist() == [2, 1, partition_for_key(b"c", 4), 7 % 4, partition_for_key(b"e", 4)]


def test_route_without_columns() -> None:
    only_values = batch(value=pa.array([b"x", b"y"]))
    assert route(only_values, 3, task_index=5).tolist() == [2, 2]
    keyed = batch(value=pa.array([b"x", b"y"]), key=pa.array([b"k1", b"k2"]))
    assert route(keyed, 3, task_index=0).tolist() == scalar([b"k1", b"k2"], 3)


def test_route_keeps_out_of_range_partitions_for_the_store_to_refuse() -> None:
    b = batch(value=pa.array([b"x", b"y"]), partition=pa.array([-1, 9], pa.int64()))
    assert route(b, 3, task_index=0).tolist() == [-1, 9]


def test_slice_end_bounds_records_and_bytes() -> None:
    sizes = np.array([10, 10, 10, 50, 10], dtype=np.int64)
    assert _slice_end(sizes, 0, max_records=100, max_bytes=1000) == 5
    assert _slice_end(sizes, 0, max_records=2, max_bytes=1000) == 2
    assert _slice_end(sizes, 0, max_records=100, max_bytes=30) == 3
    assert _slice_end(sizes, 3, max_records=100, max_bytes=30) == 4  # one row, even over the limit
    assert _slice_end(sizes, 4, max_records=100, max_bytes=30) == 5
