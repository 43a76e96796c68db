"""The consumer's group membership (ConsumerCoordinator) against a fake group store (in the spirit of
Kafka's ConsumerCoordinatorTest): rebalances, rejoins, fencing and max_poll_interval, driven step by
step with ``heartbeat_once()`` and ``poll()`` under a clock the test moves. How the store assigns
partitions, fences static members and bumps generations is proven by tests/test_groups.py.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pytest

from oncelog import errors
from oncelog.membership import FROM_CALLBACK, ConsumerCoordinator, GroupStore
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
    closed: bool = False

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
        owned: Iterable[tuple[str, int]] = (),
    ) -> Membership:
        self._call(
            "join_group", member_id=member_id, topics=topics, group_instance_id=group_instance_id, owned=list(owned)
        )
        if member_id is None:
            self.next_member += 1
            member_id = f"member-{self.next_member}"
        self.generation += 1
        self.assignments[member_id] = self.on_join
        return Membership(member_id, self.generation, self.on_join)

    def heartbeat(
        self, *, group_id: str, member_id: str, group_instance_id: str | None, owned: Iterable[tuple[str, int]]
    ) -> Membership:
        self._call("heartbeat", member_id=member_id, owned=list(owned))
        return Membership(member_id, self.generation, self.assignments[member_id])

    def leave_group(self, *, group_id: str, member_id: str) -> None:
        self._call("leave_group", member_id=member_id)
        del self.assignments[member_id]
        self.generation += 1

    def wait_for_change(self, group_id: str, timeout: float, interrupt: threading.Event) -> None:
        interrupt.wait(timeout)

    def close(self) -> None:
        self.closed = True


class Harness:
    """A coordinator over a fake store, its positions, the callbacks' calls and a clock."""

    def __init__(
        self, *, instance_id: str | None = None, heartbeat_interval: float = 3600.0, on_lost: bool = False
    ) -> None:
        self.with_on_lost = on_lost
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
            session_timeout_ms=45_000,
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
            on_lost=(lambda tps: self.events.append(("lost", set(tps)))) if self.with_on_lost else None,
        )

    def owned_in_last(self, operation: str) -> list[tuple[str, int]]:
        """The partitions the last ``operation`` call named as held."""
        args = [a for op, a in self.store.calls if op == operation][-1]
        owned = args["owned"]
        assert isinstance(owned, list)
        return owned

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
    # Having revoked a-1, it lets go of it at once: a heartbeat that no longer names it.
    assert h.store.count("heartbeat") == 2
    assert h.owned_in_last("heartbeat") == [("a", 0), ("a", 2)]
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


def test_a_heartbeat_names_what_a_pending_answer_may_hand_over(h: Harness) -> None:
    """The store lets go of whatever a heartbeat does not name: a partition in an answer the
    caller's thread has not applied yet must be named, or the next poll would read a partition
    that has another owner by then."""
    h.subscribe()
    assert h.owned_in_last("join_group") == []
    assert h.coordinator.heartbeat_once()
    assert h.owned_in_last("heartbeat") == [("a", 0), ("a", 1)]
    h.store.rebalance(h.member_id, {A1, A2})
    assert h.coordinator.heartbeat_once()  # the answer with a-2 is pending
    assert h.coordinator.heartbeat_once()
    assert h.owned_in_last("heartbeat") == [("a", 0), ("a", 1), ("a", 2)]
    h.events.clear()
    h.coordinator.poll()  # revokes a-0, then lets go of it
    assert h.events == [("revoke", {A0}), ("assign", {A2})]
    assert h.owned_in_last("heartbeat") == [("a", 1), ("a", 2)]


def test_no_answer_for_the_session_timeout_loses_the_partitions_before_a_fetch() -> None:
    """The store may hand the partitions on once the session has run out: the next poll calls
    on_lost (not on_revoke) and drops them, then rejoins under the same member id (the store
    still has it here)."""
    h = Harness(on_lost=True)
    h.subscribe()
    h.store.fail("heartbeat", errors.DatabaseUnavailableError())
    assert h.coordinator.heartbeat_once()
    h.now += 44
    h.coordinator.poll()
    assert h.events == [("assign", {A0, A1})]
    h.now += 2  # 46 s since the last answer's request was sent
    h.events.clear()
    h.coordinator.poll()
    assert h.events == [("lost", {A0, A1}), ("assign", {A0, A1})]
    joins = [(args["member_id"], args["owned"]) for op, args in h.store.calls if op == "join_group"]
    assert joins == [(None, []), ("member-1", [])]


def test_a_member_rejoins_after_its_on_lost_raised_or_its_rejoin_failed(h: Harness) -> None:
    """The session ran out while the database was unreachable: the application's on_lost may
    raise (its commit failed), and the first rejoin may fail too. Neither may leave the consumer
    without a membership: each later poll tries again until a join succeeds."""
    failures = iter([RuntimeError("the application's on_lost failed")])

    def on_lost(tps: set[TopicPartition]) -> None:
        raise next(failures)

    h.coordinator.subscribe(["a"], on_lost=on_lost)
    assert h.store.count("join_group") == 1
    h.now += 46
    with pytest.raises(RuntimeError, match="on_lost failed"):
        h.coordinator.poll()
    assert h.coordinator.member is None and not h.positions.partitions
    h.store.fail("join_group", errors.DatabaseUnavailableError("still down"))
    with pytest.raises(errors.DatabaseUnavailableError):
        h.coordinator.poll()
    assert h.coordinator.member is None
    h.coordinator.poll()
    member = h.coordinator.member
    assert member is not None and h.store.count("join_group") == 3
    assert set(h.positions.partitions) == {A0, A1}


def test_subscribe_with_the_database_unreachable_leaves_the_join_to_poll(h: Harness) -> None:
    """As Kafka's subscribe, which only records the subscription."""
    h.store.fail("join_group", errors.DatabaseUnavailableError("down"))
    h.subscribe()
    assert h.coordinator.member is None and h.events == []
    h.coordinator.poll()
    assert h.coordinator.member is not None and h.events == [("assign", {A0, A1})]


def test_a_database_error_raised_by_a_rebalance_callback_is_marked_as_the_callbacks(h: Harness) -> None:
    """Consumer.poll waits out its own connection's loss but passes the callback's on."""
    failed = errors.DatabaseUnavailableError("the application's own query failed")

    def on_assign(tps: set[TopicPartition]) -> None:
        raise failed

    with pytest.raises(errors.DatabaseUnavailableError) as caught:
        h.coordinator.subscribe(["a"], on_assign=on_assign)
    assert caught.value is failed and getattr(failed, FROM_CALLBACK) is True


def test_on_revoke_stands_in_for_a_missing_on_lost(h: Harness) -> None:
    h.subscribe()
    h.now += 46
    h.events.clear()
    h.coordinator.poll()
    assert h.events == [("revoke", {A0, A1}), ("assign", {A0, A1})]


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
    assert h.store.calls[-1] == (
        "join_group",
        {"member_id": old, "topics": ["a"], "group_instance_id": None, "owned": [("a", 0), ("a", 1)]},
    )
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
    assert h.store.closed  # the thread released what it listened on
