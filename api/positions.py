"""The consumer's positions: what it reads, from where, and what is paused (Kafka's SubscriptionState).

:class:`SubscriptionState` is bookkeeping only: it never talks to the store. Where an answer
needs the store (committed offsets, a partition's bounds for a seek to its beginning or end, a
reset by ``auto_offset_reset``), the Consumer asks the store and hands the answer over; a reset is
given a ``bounds`` function to call, so that with ``auto_offset_reset="none"`` it raises before
any request is made.

A partition is *assigned*; an assigned partition has a *position* (the next offset to read) or is
*awaiting* one (to be taken from the group's committed offsets, else by the reset policy); it may
be *paused*. Dropping a partition from the assignment drops its position, pause and wait, so a
partition assigned again never resumes from a stale position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from oncelog import validate
from oncelog.errors import ConfigurationError, IllegalStateError
from oncelog.types import OffsetAndMetadata, TopicPartition

__all__ = ["RESETS", "NoOffsetForPartitionError", "SubscriptionState"]

#: The auto_offset_reset policies.
RESETS = ("earliest", "latest", "none")

#: ``bounds(partitions)``: each partition's (log start offset, end offset) as the consumer sees it.
Bounds = Callable[[list[TopicPartition]], Mapping[TopicPartition, tuple[int, int]]]


class NoOffsetForPartitionError(ConfigurationError):
    """The consumer has no position for a partition and auto_offset_reset is 'none'."""


class SubscriptionState:
    """Assigned partitions (in order), their positions, the awaiting and the paused ones.

    Confined to the caller's thread: the Consumer's public methods and ``poll()`` (with the
    rebalance callbacks it runs) change it; the heartbeat thread never touches it, so it has no
    lock. A metrics reader on another thread calls only :attr:`partitions`, :meth:`is_assigned`
    and :meth:`position`, each a single read of one field (safe under the GIL, possibly stale).
    """

    def __init__(self, auto_offset_reset: str = "earliest") -> None:
        if auto_offset_reset not in RESETS:
            raise ConfigurationError(f"auto_offset_reset must be one of {RESETS}, not {auto_offset_reset!r}")
        self._reset = auto_offset_reset
        self._assignment: list[TopicPartition] = []
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._positions: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        self._awaiting: set[TopicPartition] = set()  # positions to be taken from committed offsets

    # --- assignment ---------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions`` (duplicates dropped, order kept). Partitions no longer
        assigned lose their position, pause and wait; newly assigned ones await a position."""
        self._assignment = list(dict.fromkeys(partitions))
        self._assigned = keep = frozenset(self._assignment)
        self._positions = {tp: pos for tp, pos in self._positions.items() if tp in keep}
        self._paused &= keep
        self._awaiting &= keep
        self._awaiting |= {tp for tp in self._assignment if tp not in self._positions}

    @property
    def partitions(self) -> list[TopicPartition]:
        """The assigned partitions, in assignment order."""
        return list(self._assignment)

    def is_assigned(self, partition: TopicPartition) -> bool:
        """Whether ``partition`` is assigned."""
        return partition in self._assigned

    def assigned(self, partition: TopicPartition) -> TopicPartition:
        """``partition``, checked as a TopicPartition that is assigned (else ConfigurationError)."""
        tp = validate.topic_partition(partition)
        if tp not in self._assigned:
            raise ConfigurationError(f"partition {tp} is not assigned to this consumer")
        return tp

    # --- positions ----------------------------------------------------------------------------

    def position(self, partition: TopicPartition) -> int | None:
        """The next offset to read from ``partition``; None while it has no position."""
        return self._positions.get(partition)

    def positions(self) -> dict[TopicPartition, int]:
        """Every assigned partition's position (those that have one)."""
        return {tp: pos for tp, pos in self._positions.items() if tp in self._assigned}

    def move_if_at(self, partition: TopicPartition, expected: int, offset: int) -> bool:
        """Set ``partition``'s position to ``offset`` if it is assigned and still at ``expected``
        (nobody sought or revoked it meanwhile); whether it was."""
        if partition not in self._assigned or self._positions.get(partition) != expected:
            return False
        self._positions[partition] = offset
        return True

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read an assigned ``partition`` from ``offset`` next (it no longer awaits a committed one)."""
        tp = self.assigned(partition)
        self._positions[tp] = validate.offset("offset", offset)
        self._awaiting.discard(tp)

    def seek_to(self, bounds: Mapping[TopicPartition, tuple[int, int]], *, end: bool) -> None:
        """Move each partition of ``bounds`` ({partition: (log start, end)}) to its end or its start."""
        for tp, (start, stop) in bounds.items():
            self.seek(tp, stop if end else start)

    def advance(self, positions: Mapping[TopicPartition, int]) -> None:
        """Positions after a fetch: where each partition's records handed over end."""
        unassigned = [tp for tp in positions if tp not in self._assigned]
        if unassigned:
            raise IllegalStateError(f"cannot advance unassigned partitions {sorted(unassigned)}")
        self._positions.update(positions)

    def awaiting(self) -> list[TopicPartition]:
        """Assigned partitions with no position yet, in assignment order."""
        return [tp for tp in self._assignment if tp in self._awaiting]

    def apply_committed(
        self, partitions: Iterable[TopicPartition], committed: Mapping[TopicPartition, OffsetAndMetadata | None]
    ) -> list[TopicPartition]:
        """Take positions from the group's committed offsets. A partition missing from
        ``committed`` (its offsets held by a transaction) keeps awaiting; the partitions the
        group has no offset for are returned, to be reset (:meth:`reset`)."""
        to_reset = []
        for tp in partitions:
            if tp not in committed or not self.is_assigned(tp):
                continue
            found = committed[tp]
            if found is None:
                to_reset.append(tp)
            else:
                self._positions[tp] = found.offset
                self._awaiting.discard(tp)
        return to_reset

    def reset(self, partitions: list[TopicPartition], bounds: Bounds) -> None:
        """Give ``partitions`` a position by auto_offset_reset: their log start (``earliest``) or
        end (``latest``), which ``bounds`` is asked for; ``none`` raises NoOffsetForPartitionError
        before it is asked."""
        if not partitions:
            return
        if self._reset == "none":
            raise NoOffsetForPartitionError(f"no position for {partitions[0]} and auto_offset_reset is 'none'")
        self.seek_to(bounds(partitions), end=self._reset == "latest")

    # --- pause --------------------------------------------------------------------------------

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching these assigned partitions (ConfigurationError for an unassigned one)."""
        self._paused |= {self.assigned(tp) for tp in validate.topic_partitions(partitions)}

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch these partitions again."""
        self._paused -= set(validate.topic_partitions(partitions))

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return set(self._paused)

    def fetchable(self) -> list[TopicPartition]:
        """The partitions a fetch reads: assigned, not paused, with a position; in assignment order."""
        return [tp for tp in self._assignment if tp not in self._paused and tp in self._positions]
