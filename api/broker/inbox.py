"""A connection's requests, read ahead of their answers.

Kafka's clients keep several requests in flight on a connection (librdkafka five, each Produce
carrying one partition's batch). Reading them while an earlier one is in the store is what lets
the broker append Produce requests for different partitions at once, on as many database
connections. How many requests, and how many bytes of them, a connection has between read and
answered is bounded: at the bound its socket is left unread, and TCP holds the client back.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["Inbox"]


class Inbox:
    """Request frames in the order read, counted from ``put`` until ``release``: one task puts,
    one task gets, and whoever sends a frame's answer releases it; ``close`` marks the end."""

    def __init__(self, *, max_frames: int, max_bytes: int) -> None:
        self._frames: deque[bytes] = deque()
        self._held = 0  # frames read and not yet released
        self._held_bytes = 0
        self._closed = False
        self._max_frames = max_frames
        self._max_bytes = max_bytes
        self._changed = asyncio.Condition()

    async def put(self, frame: bytes) -> None:
        """Queue ``frame``, waiting while the connection holds its bound (with nothing held, a
        frame of any size is taken). A closed inbox drops it."""
        async with self._changed:
            await self._changed.wait_for(
                lambda: (
                    self._closed
                    or not self._held
                    or (self._held < self._max_frames and self._held_bytes < self._max_bytes)
                )
            )
            if not self._closed:
                self._frames.append(frame)
                self._held += 1
                self._held_bytes += len(frame)
                self._changed.notify_all()

    async def get(self) -> bytes | None:
        """The next frame, waiting for one; None once closed and empty."""
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self._frames) or self._closed)
            return self._frames.popleft() if self._frames else None

    async def release(self, size: int) -> None:
        """A frame of ``size`` bytes was answered (or will never be): room for the next."""
        async with self._changed:
            self._held -= 1
            self._held_bytes -= size
            self._changed.notify_all()

    async def close(self, *, drop: bool = False) -> None:
        """No frame follows (``drop``: and those queued are dropped): ``get`` returns None once
        the inbox is empty."""
        async with self._changed:
            self._closed = True
            if drop:
                self._frames.clear()
            self._changed.notify_all()
