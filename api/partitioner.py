"""Kafka's default partitioning, bit for bit.

A record with a key goes to ``to_positive(murmur2(key)) % num_partitions``, exactly as the Java
client computes it (``BuiltInPartitioner.partitionForKey``), so a key lands in the same partition
whether it was written by oncelog or by a Java, librdkafka or kafka-python producer using the
default partitioner. A record without a key goes to the topic's current *sticky* partition
(KIP-480), which changes only when a batch for it is completed.

Users may pass their own :class:`Partitioner`: any callable
``(topic, key, num_partitions) -> partition``.
"""

from __future__ import annotations

import random
import struct
import threading
from typing import Protocol

from oncelog.errors import InvalidPartitionsError

__all__ = [
    "DefaultPartitioner",
    "Partitioner",
    "StickyPartitioner",
    "murmur2",
    "partition_for_key",
    "to_positive",
]

#: What :func:`murmur2` and :func:`partition_for_key` accept: any flat buffer of bytes.
BytesLike = bytes | bytearray | memoryview

# Constants of Kafka's Utils.murmur2. The seed is the Java int 0x9747b28c (negative in Java);
# keeping every intermediate as an unsigned 32-bit value and masking after each multiplication
# gives the same bit patterns as Java's wrapping int arithmetic.
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF
_SIGN32 = 0x80000000
# Little-endian unsigned 32-bit words: Java assembles each k as data[i] | data[i+1] << 8 | ...
_WORD = struct.Struct("<I")


def murmur2(data: BytesLike) -> int:
    """Kafka's ``org.apache.kafka.common.utils.Utils.murmur2`` of ``data``.

    Returns the signed 32-bit result exactly as Java's ``int`` would hold it, in
    ``[-2**31, 2**31)``; ``murmur2(b"21") == -973932308``.
    """
    # memoryview: accepts bytes, bytearray and memoryview without copying, and rejects str (a
    # key must be serialized first; hashing some implicit encoding would silently disagree with
    # other clients).
    buf = memoryview(data).cast("B")
    length = len(buf)
    # Java: int h = seed ^ length. length < 2**31, so the xor fits in 32 bits.
    h = _SEED ^ length
    body = length & ~3

    for (word,) in _WORD.iter_unpack(buf[:body]):
        k = (word * _M) & _MASK32
        k ^= k >> _R  # Java's >>> on the unsigned pattern is a plain right shift here.
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k

    # Java's `switch (length % 4)` falls through from case 3 to case 1, and the final
    # `h *= m` lives inside case 1, so it runs for any non-empty tail and never for an
    # empty one (length % 4 == 0). Bytes are `& 0xff` in Java, i.e. unsigned, as here.
    tail = length & 3
    if tail == 3:
        h ^= buf[body + 2] << 16
    if tail >= 2:
        h ^= buf[body + 1] << 8
    if tail >= 1:
        h ^= buf[body]
        h = (h * _M) & _MASK32

    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15

    return h - (1 << 32) if h & _SIGN32 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (``n & 0x7fffffff``).

    This is not ``abs``: ``to_positive(-1) == 2147483647``. Kafka relies on exactly this mapping
    for partition compatibility, so it must not be "fixed".
    """
    return n & 0x7FFFFFFF


def _check_num_partitions(num_partitions: int) -> None:
    # bool is an int subclass; True as a partition count is a bug, not a topic of one partition.
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int) or num_partitions <= 0:
        raise InvalidPartitionsError(f"the number of partitions must be a positive integer, got {num_partitions!r}")


def partition_for_key(key: BytesLike, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a serialized ``key``.

    ``to_positive(murmur2(key)) % num_partitions`` (``BuiltInPartitioner.partitionForKey``).

    Raises:
        InvalidPartitionsError: ``num_partitions`` is not a positive integer.
    """
    _check_num_partitions(num_partitions)
    return to_positive(murmur2(key)) % num_partitions


class Partitioner(Protocol):
    """Chooses the partition of a record: ``(topic, key, num_partitions) -> partition``.

    ``key`` is the *serialized* key, or ``None`` for a record without a key. The result must be
    in ``range(num_partitions)``. Any function with this shape will do; the parameters are
    positional-only so that their names do not matter.
    """

    def __call__(self, topic: str, key: bytes | None, num_partitions: int, /) -> int:
        """The partition, in ``range(num_partitions)``, for a record of ``topic`` with ``key``."""
        ...


class StickyPartitioner:
    """Sticky partitioning for records without a key (KIP-480).

    Spreading keyless records round-robin makes many small batches; instead every keyless record
    of a topic goes to one partition until a batch for that partition is completed, then the
    topic moves to another partition picked at random (never the same one again while the topic
    has more than one partition). Over many batches the load evens out, and each batch is as
    full as it can be.

    The producer calls :meth:`partition` for each keyless record and :meth:`on_new_batch` when it
    completes (closes) a batch. Safe to share between threads.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        """Create a partitioner; ``rng`` makes the random choices reproducible in tests."""
        # Not for security: the choice only spreads load, like Java's ThreadLocalRandom.
        self._rng = rng if rng is not None else random.Random()  # noqa: S311
        self._lock = threading.Lock()
        self._current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int) -> int:
        """The current sticky partition of ``topic``, choosing one if it has none yet.

        Raises:
            InvalidPartitionsError: ``num_partitions`` is not a positive integer.
        """
        _check_num_partitions(num_partitions)
        with self._lock:
            current = self._current.get(topic)
            # A partition beyond the count we are told now is stale (the caller's view of the
            # topic changed); never hand it out.
            if current is None or current >= num_partitions:
                current = self._rng.randrange(num_partitions)
                self._current[topic] = current
            return current

    def on_new_batch(self, topic: str, num_partitions: int, prev_partition: int | None = None) -> int:
        """A batch of ``topic`` was completed: move to another partition and return it.

        ``prev_partition`` is the partition whose batch was completed. As in Kafka's
        ``StickyPartitionCache.nextPartition``, the topic moves only if that is still its sticky
        partition: when several threads complete batches of the same partition at once, the
        first moves the topic and the others then leave it where it is, rather than each
        moving it again. ``None`` moves unconditionally.

        Raises:
            InvalidPartitionsError: ``num_partitions`` is not a positive integer.
        """
        _check_num_partitions(num_partitions)
        with self._lock:
            current = self._current.get(topic)
            if current is not None and current < num_partitions and prev_partition not in (None, current):
                return current
            if current is None or current >= num_partitions or num_partitions == 1:
                new = self._rng.randrange(num_partitions)
            else:
                # Uniform over the other num_partitions - 1 partitions, without a retry loop:
                # draw from a range one shorter and skip over the current partition.
                new = self._rng.randrange(num_partitions - 1)
                if new >= current:
                    new += 1
            self._current[topic] = new
            return new

    def __call__(self, topic: str, key: bytes | None, num_partitions: int, /) -> int:
        """The sticky partition of ``topic``; ``key`` is ignored (see :class:`DefaultPartitioner`)."""
        return self.partition(topic, num_partitions)


class DefaultPartitioner:
    """Kafka's default: hash the key (:func:`partition_for_key`), or stick when there is none.

    A :class:`Partitioner`. Keyless records use the embedded :class:`StickyPartitioner`, so the
    producer must call :meth:`on_new_batch` when it completes a batch.
    """

    def __init__(self, sticky: StickyPartitioner | None = None) -> None:
        """Create one; ``sticky`` replaces the keyless-record partitioner (for tests)."""
        self.sticky = sticky if sticky is not None else StickyPartitioner()

    def __call__(self, topic: str, key: bytes | None, num_partitions: int, /) -> int:
        """The partition for a record of ``topic`` with serialized ``key`` (or none)."""
        if key is None:
            return self.sticky.partition(topic, num_partitions)
        return partition_for_key(key, num_partitions)

    def on_new_batch(self, topic: str, num_partitions: int, prev_partition: int | None = None) -> int:
        """Forwarded to :meth:`StickyPartitioner.on_new_batch`."""
        return self.sticky.on_new_batch(topic, num_partitions, prev_partition)
