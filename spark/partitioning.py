"""Kafka's key partitioning over a whole Arrow column at once, for the Spark write tasks.

:func:`oncelog.partitioner.partition_for_key` hashes one key in Python (about 2 us a key here);
a task routing 100,000 keyed rows would spend longer hashing than appending. This computes the
same murmur2 for a column of keys with numpy, a few operations per 4-byte word over all keys of
one length at a time, so a key lands exactly where oncelog's Producer (and Kafka's Java client)
would put it. ``tests/unit/test_spark_partitioning.py`` checks it against the scalar version.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from oncelog.errors import InvalidPartitionsError
from oncelog.partitioner import partition_for_key

# Kafka's Utils.murmur2 constants (see oncelog.partitioner). numpy's uint32 arithmetic wraps
# modulo 2**32 like Java's int, so no masking is needed.
_SEED = 0x9747B28C
_M = np.uint32(0x5BD1E995)

#: Below this many keys of one length, the per-array overhead of numpy costs more than hashing
#: the keys one by one.
_VECTOR_MIN_KEYS = 32


def partitions_for_keys(keys: Any, num_partitions: int) -> npt.NDArray[np.int64]:
    """``to_positive(murmur2(key)) % num_partitions`` for every key of ``keys``, an Arrow binary
    array without nulls (the caller routes null keys otherwise)."""
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int) or num_partitions <= 0:
        raise InvalidPartitionsError(f"the number of partitions must be a positive integer, got {num_partitions!r}")
    if keys.null_count:
        raise ValueError("partitions_for_keys: null keys have no hash")
    n = len(keys)
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return out
    offsets, data = _buffers(keys)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        if len(rows) < _VECTOR_MIN_KEYS:
            for r in rows:
                out[r] = partition_for_key(data[starts[r] : starts[r] + length].tobytes(), num_partitions)
            continue
        # One row per key, its bytes as columns: a gather of exactly the keys' bytes.
        matrix = data[starts[rows, None] + np.arange(length, dtype=np.int64)]
        hashes = _murmur2_rows(matrix)
        out[rows] = (hashes & np.uint32(0x7FFFFFFF)).astype(np.int64) % num_partitions
    return out


def _buffers(keys: Any) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """The offsets (relative to the data buffer, one more than there are keys) and data bytes of
    an Arrow binary or large_binary array, without copying the data."""
    import pyarrow as pa  # noqa: PLC0415 - the optional spark extra

    large = pa.types.is_large_binary(keys.type)
    if not (large or pa.types.is_binary(keys.type)):
        raise TypeError(f"keys must be an Arrow binary array, not {keys.type}")
    _, offset_buffer, data_buffer = keys.buffers()
    width = np.int64 if large else np.int32
    offsets = np.frombuffer(offset_buffer, dtype=width)[keys.offset : keys.offset + len(keys) + 1].astype(np.int64)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    return offsets, data


def _murmur2_rows(matrix: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint32]:
    """murmur2 of each row of a (keys x length) byte matrix, as unsigned 32-bit patterns."""
    rows, length = matrix.shape
    h = np.full(rows, (_SEED ^ length) & 0xFFFFFFFF, dtype=np.uint32)
    body = length & ~3
    if body:
        # Little-endian words, as Java assembles them (data[i] | data[i+1] << 8 | ...).
        words = np.ascontiguousarray(matrix[:, :body]).view("<u4")
        for w in range(body // 4):
            k = words[:, w] * _M
            k ^= k >> np.uint32(24)
            k *= _M
            h *= _M
            h ^= k
    # Java's switch falls through from case 3 to 1, and `h *= m` is in case 1: it runs for any
    # non-empty tail, never for an empty one.
    tail = length & 3
    if tail == 3:
        h ^= matrix[:, body + 2].astype(np.uint32) << np.uint32(16)
    if tail >= 2:
        h ^= matrix[:, body + 1].astype(np.uint32) << np.uint32(8)
    if tail >= 1:
        h ^= matrix[:, body].astype(np.uint32)
        h *= _M
    h ^= h >> np.uint32(13)
    h *= _M
    h ^= h >> np.uint32(15)
    return h
