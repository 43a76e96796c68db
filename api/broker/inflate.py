"""A produced batch's records, decompressed with a bound on what they inflate to.

A compressed record batch is small on the wire and may be anything once decompressed: a few
kilobytes of gzip or zstd inflate to gigabytes. The broker holds a batch's records in memory until
the store has appended them, so it never lets them grow past a bound it chooses: each codec here
stops at ``limit`` bytes (gzip through zlib's ``max_length``, snappy from the lengths its blocks
declare before any is decompressed, LZ4 and zstd into a buffer that grows to the bound and no
further), and a batch past it is refused before more memory is spent on it.

The codecs are Kafka's (the attributes' low three bits): 1 gzip, 2 snappy (raw, or the xerial
framing Kafka's Java client writes), 3 LZ4 frames, 4 zstd. The decompressors are cramjam's and
zlib's, the ones aiokafka's own codec calls.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam

__all__ = ["GZIP", "LZ4", "SNAPPY", "ZSTD", "Corrupt", "TooLarge", "inflate"]

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4

#: xerial's snappy framing: a 16-byte header (marker, 'SNAPPY', pad, version 1, compat 1), then
#: blocks of a big-endian int32 length and a raw snappy block.
_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_BLOCK_LENGTH = struct.Struct(">i")
#: The first output buffer for LZ4 and zstd, as a multiple of the compressed size (grown 4x each
#: time it is too small, up to the bound): most batches fit in the first.
_FIRST_RATIO = 8
_MIN_FIRST = 64 * 1024
#: cramjam's error when a stream decompresses to more than the buffer it was given.
_BUFFER_FULL = "failed to write whole buffer"


class TooLarge(Exception):
    """The records inflate past the bound."""


class Corrupt(Exception):
    """The compressed stream does not decompress (cut short, bad data, trailing bytes)."""


def inflate(codec: int, payload: bytes | memoryview, limit: int) -> bytes:
    """``payload`` decompressed with Kafka's ``codec``; :class:`TooLarge` if that would exceed
    ``limit`` bytes, :class:`Corrupt` if it does not decompress, ValueError for a codec Kafka does
    not have."""
    data = bytes(payload)
    try:
        if codec == GZIP:
            return _gzip(data, limit)
        if codec == SNAPPY:
            return _snappy(data, limit)
        if codec == LZ4:
            return _into(cramjam.lz4.decompress_into, data, limit)
        if codec == ZSTD:
            return _into(cramjam.zstd.decompress_into, data, limit)
    except (TooLarge, Corrupt):
        raise
    except Exception as exc:
        # Whatever else a decompressor raises on hostile bytes (its own error types differ, and
        # are not all documented) means the same: the stream does not decompress.
        raise Corrupt(f"{type(exc).__name__}: {exc}") from None
    raise ValueError(f"compression codec {codec}")


def _gzip(data: bytes, limit: int) -> bytes:
    out = bytearray()
    rest = data
    while rest:  # one gzip member after another, as gzip.decompress reads them
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out += stream.decompress(rest, limit + 1 - len(out))  # max_length >= 1: 0 means no bound
        if len(out) > limit:
            raise TooLarge(f"gzip records inflate past {limit} bytes")
        if not stream.eof:
            raise Corrupt("a gzip stream cut short")
        rest = stream.unused_data
    return bytes(out)


def _snappy(data: bytes, limit: int) -> bytes:
    # Each raw snappy block starts with the length it decompresses to: every block's is read and
    # added up before any is decompressed.
    if not data.startswith(_XERIAL_HEADER):
        if cramjam.snappy.decompress_raw_len(data) > limit:
            raise TooLarge(f"snappy records inflate past {limit} bytes")
        return bytes(cramjam.snappy.decompress_raw(data))
    blocks: list[memoryview] = []
    declared = 0
    view = memoryview(data)
    at = len(_XERIAL_HEADER)
    while at < len(view):
        if at + _BLOCK_LENGTH.size > len(view):
            raise Corrupt("a snappy block length cut short")
        size = _BLOCK_LENGTH.unpack_from(view, at)[0]
        at += _BLOCK_LENGTH.size
        if not 0 < size <= len(view) - at:
            raise Corrupt("a snappy block whose length does not fit")
        block = view[at : at + size]
        at += size
        declared += cramjam.snappy.decompress_raw_len(block)
        if declared > limit:
            raise TooLarge(f"snappy records inflate past {limit} bytes")
        blocks.append(block)
    return b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks)


def _into(decompress_into: Callable[[bytes, bytearray], int], data: bytes, limit: int) -> bytes:
    size = min(limit + 1, max(_MIN_FIRST, _FIRST_RATIO * len(data)))
    while True:
        buffer = bytearray(size)
        try:
            written = decompress_into(data, buffer)
        except cramjam.DecompressionError as exc:
            if _BUFFER_FULL not in str(exc):
                raise Corrupt(str(exc)) from None
            if size > limit:
                raise TooLarge(f"records inflate past {limit} bytes") from None
            size = min(limit + 1, size * 4)
            continue
        if written > limit:
            raise TooLarge(f"records inflate past {limit} bytes")
        return bytes(memoryview(buffer)[:written])
