"""The consumer's group membership (ConsumerCoordinator) against a fake group store (in the spirit of
Kafka's ConsumerCoordinatorTest): rebalances, rejoins, fencing and max_poll_interval, driven step by
step with ``heartbeat_once()`` and ``poll()`` under a clock the test moves. How the store assigns
partitions, fences static members and bumps generations is proven by tests/test_groups.py.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from oncelog import errors
from oncelog.membership import ConsumerCoordinator, GroupStore
from oncelog.positions import SubscriptionState
from oncelog.store.groups import Membership
from oncelog.types import TopicPartition

GROUP = "billing"
A0, A1, A2 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("a", 2)


@dataclass
class FakeGroupStore:
    """One group: its generation and each member's assignment, set by the test."""

    generation: int = 0
    assignments: dict[str, frozenset[tuple[str, int]]] = field(default_factory=dict)
    #: What the next join hands a member (set by the test before it joins).
    on_join: frozenset[tuple[str, int]] = frozenset({("a", 0), ("a", 1)})
    next_member: int = 0
    calls: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    faults: dict[str, deque[errors.OncelogError]] = field(default_factory=dict)

    def fail(self, operation: str, exc: errors.OncelogError) -> None:
        self.faults.setdefault(operation, deque()).append(exc)

    def rebalance(self, member_id: str, partitions: set[TopicPartition], *, generations: int = 1) -> None:
        """What another member's join or leave does: a new generation and assignment."""
        self.generation += generations
        self.assignments[member_id] = frozenset((tp.topic, tp.partition) for tp in partitions)

    def _call(self, operation: str, **args: object) -> None:
        self.calls.append((operation, args))
        queue = self.faults.get(operation)
        if queue:
            raise queue.popleft()

    def count(self, operation: str) -> int:
        return sum(1 for op, _ in self.calls if op == operation)

    def join_group(
        self,
        *,
        group_id: str,
        topics: list[str],
        session_timeout_ms: int,
        assignor: str,
        member_id: str | None = None,
        group_instance_id: str | None = None,
        client_id: str | None = None,
    ) -> Membership:
        self._call("join_group", member_id=member_id, topics=topics, group_instance_id=group_instance_id)
        if member_id is None:
            self.next_member += 1
            member_id = f"member-{self.next_member}"
        self.generation += 1
        self.assignments[member_id] = self.on_join
        return Membership(member_id, self.generation, self.on_join)

    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None) -> Membership:
        self._call("heartbeat", member_id=member_id)
        return Membership(member_id, self.generation, self.assignments[member_id])

    def leave_group(self, *, group_id: str, member_id: str) -> None:
        self._call("leave_group", member_id=member_id)
        del self.assignments[member_id]
        self.generation += 1


class Harness:
    """A coordinator over a fake store, its positions, the callbacks' calls and a clock."""

    def __init__(self, *, instance_id: str | None = None, heartbeat_interval: float = 3600.0) -> None:
        self.now = 1000.0
        self.store = FakeGroupStore()
        seam: GroupStore = self.store  # the fake satisfies the Protocol (checked by mypy)
        self.positions = SubscriptionState("earliest")
        self.events: list[tuple[str, set[TopicPartition]]] = []
        self.filled: list[list[TopicPartition]] = []
        self.coordinator = ConsumerCoordinator(
            seam,
            self.positions,
            group_id=GROUP,
            group_instance_id=instance_id,
            heartbeat_interval=heartbeat_interval,  # by default the thread never beats: tests call heartbeat_once()
            max_poll_interval=300.0,
            fill_positions=self.fill,
            clock=lambda: self.now,
        )

    def fill(self, partitions: list[TopicPartition]) -> None:
        """As the Consumer does: positions from committed offsets (here, all at 0)."""
        self.filled.append(partitions)
        for tp in partitions:
            self.positions.seek(tp, 0)

    def subscribe(self) -> None:
        self.coordinator.subscribe(
            ["a"],
            on_assign=lambda tps: self.events.append(("assign", set(tps))),
            on_revoke=lambda tps: self.events.append(("revoke", set(tps))),
        )

    @property
    def member_id(self) -> str:
        member = self.coordinator.member
        assert member is not None
        return member.member_id


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.coordinator.stop()


def test_subscribe_joins_and_applies_the_assignment(h: Harness) -> None:
    h.subscribe()
    member = h.coordinator.member
    assert member is not None and member.generation == 1
    assert h.positions.partitions == [A0, A1]
    assert h.events == [("assign", {A0, A1})]
    assert h.filled == [[A0, A1]]  # positions before on_assign, so it may read or seek them
    assert h.coordinator.subscription == ["a"]


def test_a_rebalance_seen_by_a_heartbeat_is_applied_at_the_next_poll(h: Harness) -> None:
    h.subscribe()
    h.positions.seek(A0, 7)
    h.store.rebalance(h.member_id, {A0, A2})
    assert h.coordinator.heartbeat_once()
    assert h.positions.partitions == [A0, A1]  # not on the heartbeat thread
    h.events.clear()
    h.coordinator.poll()
    member = h.coordinator.member
    assert member is not None and member.generation == 2
    assert h.positions.partitions == [A0, A2]
    assert h.events == [("revoke", {A1}), ("assign", {A2})]
    assert h.positions.position(A0) == 7  # kept partition, kept position
    assert h.positions.position(A1) is None
    # Applied once: the next poll changes nothing.
    h.events.clear()
    h.coordinator.poll()
    assert h.events == []


def test_a_heartbeat_in_the_same_generation_changes_nothing(h: Harness) -> None:
    h.subscribe()
    h.events.clear()
    assert h.coordinator.heartbeat_once()
    h.coordinator.poll()
    assert h.events == []
    assert h.store.count("join_group") == 1


def test_missed_generations_revoke_everything(h: Harness) -> None:
    h.subscribe()
    h.positions.seek(A0, 7)
    h.store.rebalance(h.member_id, {A0, A1}, generations=2)  # moved away and back meanwhile
    h.coordinator.heartbeat_once()
    h.events.clear()
    h.coordinator.poll()
    assert h.events == [("revoke", {A0, A1}), ("assign", {A0, A1})]
    assert h.positions.position(A0) == 0  # from the committed offset, not the stale 7


@pytest.mark.parametrize("error", [errors.UnknownMemberIdError, errors.IllegalGenerationError])
def test_a_heartbeat_refused_for_membership_rejoins_at_the_next_poll(
    h: Harness, error: type[errors.OncelogError]
) -> None:
    h.subscribe()
    old = h.member_id
    h.store.fail("heartbeat", error())
    assert h.coordinator.heartbeat_once()
    assert h.store.count("join_group") == 1
    h.coordinator.poll()
    assert h.store.count("join_group") == 2
    assert h.store.calls[-1] == ("join_group", {"member_id": old, "topics": ["a"], "group_instance_id": None})
    member = h.coordinator.member
    assert member is not None and member.generation == 2


def test_a_removed_member_rejoins_as_a_new_member_and_revokes_everything(h: Harness) -> None:
    h.subscribe()
    h.positions.seek(A0, 7)
    h.store.fail("heartbeat", errors.UnknownMemberIdError())
    h.store.fail("join_group", errors.UnknownMemberIdError())  # its session timed out
    h.coordinator.heartbeat_once()
    h.events.clear()
    h.coordinator.poll()
    joins = [args["member_id"] for op, args in h.store.calls if op == "join_group"]
    assert joins == [None, "member-1", None]
    assert h.member_id == "member-2"
    assert h.events == [("revoke", {A0, A1}), ("assign", {A0, A1})]
    assert h.positions.position(A0) == 0


def test_another_failure_of_a_heartbeat_is_retried(h: Harness) -> None:
    h.subscribe()
    h.store.fail("heartbeat", errors.DatabaseUnavailableError())
    assert h.coordinator.heartbeat_once()
    h.coordinator.poll()
    assert h.store.count("join_group") == 1
    assert h.coordinator.heartbeat_once()
    assert h.store.count("heartbeat") == 2


def test_a_fenced_static_member_is_fatal() -> None:
    h = Harness(instance_id="billing-1")
    h.subscribe()
    h.store.fail("heartbeat", errors.FencedInstanceIdError())
    assert not h.coordinator.heartbeat_once()  # the heartbeat thread stops
    for _ in range(2):  # every later poll raises it too
        with pytest.raises(errors.FencedInstanceIdError):
            h.coordinator.poll()
    assert h.store.count("join_group") == 1
    h.coordinator.stop()


def test_a_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll(h: Harness) -> None:
    h.subscribe()
    h.now += 301
    assert h.coordinator.heartbeat_once()
    assert h.store.count("leave_group") == 1
    assert h.store.count("heartbeat") == 0
    assert h.coordinator.member is None
    h.events.clear()
    h.coordinator.poll()
    assert h.member_id == "member-2"
    assert h.events == [("revoke", {A0, A1}), ("assign", {A0, A1})]


def test_polling_in_time_keeps_the_membership(h: Harness) -> None:
    h.subscribe()
    h.now += 200
    h.coordinator.poll()
    h.now += 200
    assert h.coordinator.heartbeat_once()
    assert h.store.count("leave_group") == 0
    assert h.store.count("heartbeat") == 1


def test_unsubscribe_leaves(h: Harness) -> None:
    h.subscribe()
    member_id = h.member_id
    h.coordinator.unsubscribe()
    assert h.store.calls[-1] == ("leave_group", {"member_id": member_id})
    assert h.coordinator.member is None
    assert h.coordinator.subscription is None
    h.coordinator.poll()  # not subscribed: nothing to apply
    assert h.store.count("join_group") == 1


def test_the_heartbeat_thread_beats_until_stopped() -> None:
    h = Harness(heartbeat_interval=0.01)
    h.subscribe()
    end = time.monotonic() + 5
    while h.store.count("heartbeat") < 2 and time.monotonic() < end:
        time.sleep(0.01)
    h.coordinator.stop()
    beats = h.store.count("heartbeat")
    assert beats >= 2
    time.sleep(0.05)
    assert h.store.count("heartbeat") == beats
