"""The consumer's positions (SubscriptionState) without a database (in the spirit of Kafka's
SubscriptionStateTest): assignment changes, seeks, pauses, resets and positions after a fetch.
That the store answers these positions with the right records is proven by the database tests
(test_client_api.py, test_read_committed.py, ...)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from oncelog import errors
from oncelog.positions import NoOffsetForPartitionError, SubscriptionState
from oncelog.types import OffsetAndMetadata, TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class Bounds:
    """A partition's (log start, end): every partition starts at 10 and ends at 50. Counts calls."""

    def __init__(self) -> None:
        self.asked: list[list[TopicPartition]] = []

    def __call__(self, partitions: list[TopicPartition]) -> Mapping[TopicPartition, tuple[int, int]]:
        self.asked.append(list(partitions))
        return {tp: (10, 50) for tp in partitions}


def assigned(*partitions: TopicPartition, reset: str = "earliest") -> SubscriptionState:
    state = SubscriptionState(reset)
    state.assign(partitions)
    return state


def test_a_new_assignment_awaits_positions_in_order_without_duplicates() -> None:
    state = assigned(B0, A0, B0)
    assert state.partitions == [B0, A0]
    assert state.awaiting() == [B0, A0]
    assert state.fetchable() == []  # nothing is read before it has a position
    assert state.position(A0) is None


def test_seek_gives_a_position_and_ends_the_wait() -> None:
    state = assigned(A0, A1)
    state.seek(A0, 7)
    assert state.position(A0) == 7
    assert state.awaiting() == [A1]
    assert state.fetchable() == [A0]
    assert state.positions() == {A0: 7}


def test_seek_checks_the_partition_and_the_offset() -> None:
    state = assigned(A0)
    with pytest.raises(errors.ConfigurationError, match="not assigned"):
        state.seek(B0, 1)
    with pytest.raises(errors.OffsetOutOfRangeError):
        state.seek(A0, -1)
    with pytest.raises(errors.InvalidRequestError):
        state.seek(A0, True)
    assert state.position(A0) is None


def test_pause_and_resume() -> None:
    state = assigned(A0, A1)
    state.seek(A0, 0)
    state.seek(A1, 0)
    state.pause([A1])
    assert state.paused() == {A1}
    assert state.fetchable() == [A0]
    assert state.position(A1) == 0  # a paused partition keeps its position
    state.resume([A1])
    assert state.paused() == set()
    assert state.fetchable() == [A0, A1]


def test_pausing_an_unassigned_partition_raises() -> None:
    state = assigned(A0)
    with pytest.raises(errors.ConfigurationError, match="not assigned"):
        state.pause([A0, B0])
    assert state.paused() == set()


def test_an_assignment_change_drops_what_belonged_to_revoked_partitions() -> None:
    state = assigned(A0, A1)
    state.seek(A0, 5)
    state.seek(A1, 6)
    state.pause([A1])
    state.assign([A0, B0])
    assert state.partitions == [A0, B0]
    assert state.position(A0) == 5  # kept: still assigned
    assert state.position(A1) is None
    assert state.paused() == set()
    assert state.awaiting() == [B0]
    # Assigned again later, A1 does not come back with its stale position.
    state.assign([A0, A1])
    assert state.position(A1) is None
    assert state.awaiting() == [A1]


def test_an_empty_assignment_drops_everything() -> None:
    state = assigned(A0)
    state.seek(A0, 3)
    state.assign([])
    assert state.partitions == []
    assert state.positions() == {}
    assert state.awaiting() == []


@pytest.mark.parametrize(("policy", "expected"), [("earliest", 10), ("latest", 50)])
def test_reset_by_policy(policy: str, expected: int) -> None:
    state = assigned(A0, A1, reset=policy)
    bounds = Bounds()
    state.reset([A0], bounds)
    assert state.position(A0) == expected
    assert state.awaiting() == [A1]
    assert bounds.asked == [[A0]]


def test_reset_none_raises_before_asking_the_store() -> None:
    state = assigned(A0, reset="none")
    bounds = Bounds()
    with pytest.raises(NoOffsetForPartitionError, match="auto_offset_reset is 'none'"):
        state.reset([A0], bounds)
    assert bounds.asked == []
    assert state.position(A0) is None
    assert state.awaiting() == [A0]


def test_an_unknown_policy_is_a_configuration_error() -> None:
    with pytest.raises(errors.ConfigurationError):
        SubscriptionState("smallest")


def test_committed_offsets_give_positions_and_name_the_partitions_to_reset() -> None:
    state = assigned(A0, A1, B0)
    # A1: nothing committed (to reset); B0: held by a transaction, not answered (keeps waiting).
    to_reset = state.apply_committed([A0, A1, B0], {A0: OffsetAndMetadata(42, "m"), A1: None})
    assert to_reset == [A1]
    assert state.position(A0) == 42
    assert state.awaiting() == [A1, B0]
    state.reset(to_reset, Bounds())
    assert state.awaiting() == [B0]
    assert state.position(A1) == 10


def test_committed_offsets_of_a_partition_revoked_meanwhile_are_ignored() -> None:
    state = assigned(A0)
    assert state.apply_committed([A0, A1], {A0: OffsetAndMetadata(1, ""), A1: OffsetAndMetadata(2, "")}) == []
    assert state.positions() == {A0: 1}
    assert state.position(A1) is None
    state.assign([A0, A1])
    assert state.awaiting() == [A1]


def test_seek_to_the_end_and_the_beginning() -> None:
    state = assigned(A0, A1)
    state.seek_to({A0: (10, 50), A1: (0, 3)}, end=True)
    assert state.positions() == {A0: 50, A1: 3}
    state.seek_to({A0: (10, 50)}, end=False)
    assert state.positions() == {A0: 10, A1: 3}
    assert state.awaiting() == []


def test_the_position_after_a_poll() -> None:
    state = assigned(A0, A1)
    state.seek(A0, 0)
    state.seek(A1, 4)
    state.advance({A0: 3})  # a poll returned offsets 0..2 of A0, nothing of A1
    assert state.position(A0) == 3
    assert state.position(A1) == 4
    assert state.fetchable() == [A0, A1]


def test_advancing_an_unassigned_partition_is_a_state_error() -> None:
    state = assigned(A0)
    state.seek(A0, 0)
    with pytest.raises(errors.IllegalStateError):
        state.advance({A0: 1, B0: 1})
    assert state.position(A0) == 0
    assert state.position(B0) is None
