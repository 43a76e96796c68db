"""A connection's requests, read ahead of their answers.

Kafka's clients keep several requests in flight on a connection (librdkafka five, each Produce
carrying one partition's batch). Reading them while an earlier one is in the store is what lets
the broker append Produce requests for different partitions at once, on as many database
connections. How far a connection reads ahead is bounded, in requests and in bytes: beyond that its
socket is left unread, and TCP holds the client back.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["Inbox"]


class Inbox:
    """Request frames in the order read: one task puts, one task gets; ``close`` marks the end."""

    def __init__(self, *, max_frames: int, max_bytes: int) -> None:
        self._frames: deque[bytes] = deque()
        self._bytes = 0
        self._closed = False
        self._max_frames = max_frames
        self._max_bytes = max_bytes
        self._changed = asyncio.Condition()

    async def put(self, frame: bytes) -> None:
        """Queue ``frame``, waiting while the inbox is full (an empty inbox takes a frame of any
        size). A closed inbox drops it."""
        async with self._changed:
            await self._changed.wait_for(
                lambda: (
                    self._closed
                    or not self._frames
                    or (len(self._frames) < self._max_frames and self._bytes < self._max_bytes)
                )
            )
            if not self._closed:
                self._frames.append(frame)
                self._bytes += len(frame)
                self._changed.notify_all()

    async def close(self, *, drop: bool = False) -> None:
        """No frame follows (``drop``: and those queued are dropped): ``get`` returns None once
        the inbox is empty."""
        async with self._changed:
            self._closed = True
            if drop:
                self._frames.clear()
                self._bytes = 0
            self._changed.notify_all()

    async def get(self) -> bytes | None:
        """The next frame, waiting for one; None once closed and empty."""
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self._frames) or self._closed)
            if not self._frames:
                return None
            frame = self._frames.popleft()
            self._bytes -= len(frame)
            self._changed.notify_all()
            return frame
