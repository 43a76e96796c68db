"""Consumer groups: membership, assignment and plain offset commits (store and Consumer API).

Store level (oncelog.store.groups, the SQL functions of migration 0004):

* a lone member gets every partition; a second member starts a new generation and splits the
  partitions (range by default, round robin when chosen); an assignor mismatch is refused;
* in every generation each subscribed partition is owned by exactly one member subscribed to its
  topic (checked on the group_status view after random joins, leaves, expiries and static rejoins,
  with hypothesis);
* leaving and a session timeout rebalance the rest; a static member rejoining gets a new member id,
  keeps its partitions, and the generation does not move; its old member id is fenced;
* partitions added to a subscribed topic get an owner (Kafka rebalances on metadata change);
* OffsetCommit checks (unknown member, old generation, unassigned partition, metadata size,
  standalone commits only while the group is empty), OffsetFetch, and the group_offsets lag.

Consumer API: subscribe callbacks with the right sets; a consumer that stops polling past
max_poll_interval_ms loses its partitions and, rejoining, resumes from the group's committed
offsets; a member that missed whole generations (a partition moved away and back) does too;
close() leaving (or not, for a static member); a replaced static member fenced; auto-commit.

Waiting is always for an event (a callback, a row in a view) with a bound, never a timed assertion.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition, errors
from oncelog.store import create_engine, groups
from oncelog.store.errors import mapped_errors
from oncelog.store.groups import Membership

TOPICS = {"a": 4, "b": 3}
ALL_A = {("a", p) for p in range(4)}
ALL_B = {("b", p) for p in range(3)}
#: A bound on waiting for an event; never an assertion on speed.
WAIT = 30.0
#: Fast group settings for the Consumer tests.
FAST = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 100, "enable_auto_commit": False}


# --- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture
def topics(db_url: str) -> str:
    with Admin(db_url) as admin:
        for name, count in TOPICS.items():
            admin.create_topic(name, partitions=count)
    return db_url


@pytest.fixture
def conn(engine: sa.Engine, topics: str) -> Iterator[sa.Connection]:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        yield c


def join(
    conn: sa.Connection,
    group: str,
    topics: tuple[str, ...] = ("a",),
    *,
    client: str = "m",
    assignor: str = "range",
    instance: str | None = None,
    member: str | None = None,
    session_ms: int = 60_000,
) -> Membership:
    return groups.join_group(
        conn,
        group_id=group,
        topics=topics,
        session_timeout_ms=session_ms,
        assignor=assignor,
        member_id=member,
        group_instance_id=instance,
        client_id=client,
    )


def heartbeat(
    conn: sa.Connection,
    group: str,
    m: Membership,
    instance: str | None = None,
    *,
    owned: frozenset[tuple[str, int]] | None = None,
) -> Membership:
    """A heartbeat naming what the member holds: by default its last answer's partitions (a
    member that applied that answer, revoking what it left out)."""
    return groups.heartbeat(
        conn,
        group_id=group,
        member_id=m.member_id,
        group_instance_id=instance,
        owned=m.assignment if owned is None else owned,
    )


def settle(conn: sa.Connection, group: str, members: dict[str, Membership], instances: dict[str, str | None]) -> None:
    """Heartbeat every member (each applying its last answer) until none is reconciling: the
    owners let go of what moves and the new owners take it. ``members`` is updated in place."""
    for _ in range(10):
        for mid in sorted(members):
            members[mid] = heartbeat(conn, group, members[mid], instances.get(mid))
        if not any(m.reconciling for m in members.values()):
            return
    raise AssertionError(f"group {group} never settled: {members}")


def commit(
    conn: sa.Connection,
    group: str,
    offsets: dict[tuple[str, int], int | tuple[int, str]],
    m: Membership | None = None,
    *,
    generation: int | None = None,
    instance: str | None = None,
) -> None:
    groups.offset_commit(
        conn,
        group_id=group,
        offsets={k: v if isinstance(v, tuple) else (v, "") for k, v in offsets.items()},
        member_id=m.member_id if m else None,
        group_instance_id=instance,
        generation=(m.generation if m else None) if generation is None else generation,
    )


def fetch(conn: sa.Connection, group: str, *tps: tuple[str, int]) -> dict[tuple[str, int], int | None]:
    return {k: v.offset for k, v in groups.offset_fetch(conn, group_id=group, partitions=tps).items()}


def status(conn: sa.Connection, group: str) -> dict[str, set[tuple[str, int]]]:
    """member id -> its assignment, from the group_status view."""
    rows = conn.exec_driver_sql(
        "SELECT member_id, assignment FROM group_status WHERE group_id = %(g)s AND member_id IS NOT NULL",
        {"g": group},
    ).all()
    out = {}
    for r in rows:
        out[r.member_id] = {(t, int(p)) for t, _, p in (s.rpartition("-") for s in (r.assignment or []))}
    return out


def generation(conn: sa.Connection, group: str) -> int:
    return int(conn.exec_driver_sql("SELECT generation FROM groups WHERE group_id = %(g)s", {"g": group}).scalar_one())


def check_every_partition_owned_once(conn: sa.Connection, group: str) -> None:
    """In a settled group: each partition of a topic some member subscribes to has exactly one
    owner, subscribed to it, which is its target; no ownership is from a future generation."""
    rows = conn.exec_driver_sql(
        "SELECT member_id, subscription, assignment, generation FROM group_status "
        "WHERE group_id = %(g)s AND member_id IS NOT NULL",
        {"g": group},
    ).all()
    owners: Counter[tuple[str, int]] = Counter()
    subscribed: set[str] = set()
    for r in rows:
        subscribed |= set(r.subscription)
        for s in r.assignment or []:
            t, _, p = s.rpartition("-")
            assert t in r.subscription, f"{r.member_id} owns {s} without subscribing to {t}"
            owners[(t, int(p))] += 1
    counts = dict(
        tuple(r)
        for r in conn.exec_driver_sql(
            "SELECT t.name, count(*) FROM topics t JOIN partitions p USING (topic_id) GROUP BY t.name"
        ).all()
    )
    expected = {(t, p) for t in subscribed for p in range(counts[t])}
    assert set(owners) == expected, f"unowned {expected - set(owners)}, unexpected {set(owners) - expected}"
    assert [tp for tp, n in owners.items() if n != 1] == []
    future = conn.exec_driver_sql(
        "SELECT count(*) FROM member_assignments a JOIN groups g USING (group_id) "
        "WHERE a.group_id = %(g)s AND a.generation > g.generation",
        {"g": group},
    ).scalar_one()
    assert future == 0
    apart = conn.exec_driver_sql(
        "SELECT count(*) FROM (SELECT topic_id, partition, member_id FROM member_assignments WHERE group_id = %(g)s "
        "EXCEPT SELECT topic_id, partition, member_id FROM target_assignments WHERE group_id = %(g)s) x",
        {"g": group},
    ).scalar_one()
    assert apart == 0, "a settled group owns what its target says"


def set_heartbeat_back(conn: sa.Connection, group: str, member_id: str) -> None:
    conn.exec_driver_sql(
        "UPDATE group_members SET last_heartbeat_at = last_heartbeat_at - interval '1 hour' "
        "WHERE group_id = %(g)s AND member_id = %(m)s",
        {"g": group, "m": member_id},
    )


def poll_until(consumers: list[Consumer], predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Keep the consumers polling (rebalances apply in poll) until ``predicate`` holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        for c in consumers:
            c.poll(0.02)


def read_until(consumer: Consumer, into: list[tuple[int, int]], count: int, what: str) -> None:
    """Poll ``consumer`` until ``into`` holds ``count`` (partition, offset) pairs."""
    deadline = time.monotonic() + WAIT
    while len(into) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT}s waiting for {what}; got {into}")
        into.extend((r.partition, r.offset) for r in consumer.poll(0.05))


def tps(*pairs: tuple[str, int]) -> set[TopicPartition]:
    return {TopicPartition(t, p) for t, p in pairs}


def produce_plain(url: str, per_partition: int, topic: str = "a", start: int = 0) -> None:
    with Producer(url, linger_ms=1) as producer:
        for p in range(TOPICS[topic]):
            for i in range(start, start + per_partition):
                producer.send(topic, f"{topic}{p}-{i}".encode(), partition=p)
        producer.flush()


# --- membership and assignment (store level) -------------------------------------------------


def test_a_lone_member_gets_every_partition(conn: sa.Connection) -> None:
    m = join(conn, "g", ("a", "b"))
    assert m.generation == 1
    assert m.assignment == ALL_A | ALL_B
    assert status(conn, "g") == {m.member_id: ALL_A | ALL_B}
    state = conn.exec_driver_sql("SELECT DISTINCT state FROM group_status WHERE group_id = 'g'").scalar_one()
    assert state == "Stable"
    # A heartbeat changes nothing.
    assert heartbeat(conn, "g", m) == m
    check_every_partition_owned_once(conn, "g")


def test_a_second_member_starts_a_generation_and_splits_by_range(conn: sa.Connection) -> None:
    m1 = join(conn, "g", ("a", "b"), client="m1")
    m2 = join(conn, "g", ("a", "b"), client="m2")
    assert m2.generation == m1.generation + 1
    # Range, per topic, members in member-id order ("m1-..." < "m2-..."): contiguous ranges, the
    # first member gets the extra partition of the 3-partition topic. m2's share is m1's until
    # m1 lets go of it: m2 owns nothing yet and is reconciling.
    theirs = {("a", 2), ("a", 3), ("b", 2)}
    assert (m2.assignment, m2.reconciling) == (frozenset(), True)
    seen = heartbeat(conn, "g", m1)
    assert seen.generation == m2.generation
    assert seen.assignment == {("a", 0), ("a", 1), ("b", 0), ("b", 1)} and seen.reconciling
    assert status(conn, "g") == {m1.member_id: ALL_A | ALL_B, m2.member_id: set()}
    assert heartbeat(conn, "g", m2).assignment == frozenset()
    state = conn.exec_driver_sql("SELECT DISTINCT state FROM group_status WHERE group_id = 'g'").scalar_one()
    assert state == "Reconciling"
    # m1 has revoked them: its next heartbeat no longer names them, which lets go of them.
    seen = heartbeat(conn, "g", seen)
    assert seen.assignment == {("a", 0), ("a", 1), ("b", 0), ("b", 1)} and not seen.reconciling
    m2 = heartbeat(conn, "g", m2)
    assert m2.assignment == theirs and not m2.reconciling
    assert status(conn, "g") == {m1.member_id: seen.assignment, m2.member_id: m2.assignment}
    check_every_partition_owned_once(conn, "g")
    # A rejoin with the same member id and subscription is not a membership change.
    again = join(conn, "g", ("a", "b"), client="m1", member=m1.member_id)
    assert again.generation == m2.generation and again.assignment == seen.assignment


def test_round_robin_when_chosen_and_an_assignor_mismatch_is_refused(conn: sa.Connection) -> None:
    m1 = join(conn, "rr", ("a", "b"), client="m1", assignor="roundrobin")
    m2 = join(conn, "rr", ("a", "b"), client="m2", assignor="roundrobin")
    both = {m1.member_id: m1, m2.member_id: m2}
    settle(conn, "rr", both, {})
    m1, m2 = both[m1.member_id], both[m2.member_id]
    # (topic, partition) order a0 a1 a2 a3 b0 b1 b2, dealt in turn.
    assert m1.assignment == {("a", 0), ("a", 2), ("b", 0), ("b", 2)}
    assert m2.assignment == {("a", 1), ("a", 3), ("b", 1)}
    check_every_partition_owned_once(conn, "rr")
    gen = generation(conn, "rr")
    with pytest.raises(errors.ConfigurationError, match="roundrobin"):
        join(conn, "rr", ("a",), client="m3", assignor="range")
    assert generation(conn, "rr") == gen and len(status(conn, "rr")) == 2
    with pytest.raises(errors.ConfigurationError, match="unknown assignor"):
        join(conn, "rr", ("a",), client="m3", assignor="cooperative")
    # Once the group is empty, the next member may choose again.
    groups.leave_group(conn, group_id="rr", member_id=m1.member_id)
    groups.leave_group(conn, group_id="rr", member_id=m2.member_id)
    m3 = join(conn, "rr", ("a",), client="m3", assignor="range")
    assert m3.assignment == ALL_A


def test_join_refuses_bad_requests(conn: sa.Connection) -> None:
    with pytest.raises(errors.InvalidTopicError):
        join(conn, "g", ("no such name!",))
    with pytest.raises(errors.InvalidRequestError, match="at most 10000"):
        join(conn, "g", tuple(f"t{i}" for i in range(10001)))
    with pytest.raises(errors.ConfigurationError, match="session timeout"):
        join(conn, "g", ("a",), session_ms=50)
    with pytest.raises(errors.InvalidGroupIdError):
        join(conn, "", ("a",))
    with pytest.raises(errors.UnknownMemberIdError):
        join(conn, "g", ("a",), member="made-up")


def test_leave_rebalances_the_rest(conn: sa.Connection) -> None:
    m1 = join(conn, "g", ("a",), client="m1")
    m2 = join(conn, "g", ("a",), client="m2")
    gen = m2.generation
    groups.leave_group(conn, group_id="g", member_id=m2.member_id)
    m1 = heartbeat(conn, "g", m1)
    assert m1.generation == gen + 1 and m1.assignment == ALL_A
    assert status(conn, "g") == {m1.member_id: ALL_A}
    with pytest.raises(errors.UnknownMemberIdError):
        heartbeat(conn, "g", m2)
    # Leaving twice (or an unknown member leaving) changes nothing.
    groups.leave_group(conn, group_id="g", member_id=m2.member_id)
    assert generation(conn, "g") == gen + 1
    # The last member leaving empties the group.
    groups.leave_group(conn, group_id="g", member_id=m1.member_id)
    row = conn.exec_driver_sql("SELECT state, member_id FROM group_status WHERE group_id = 'g'").one()
    assert (row.state, row.member_id) == ("Empty", None)


def test_a_member_silent_past_its_session_timeout_is_removed_at_the_next_group_call(conn: sa.Connection) -> None:
    m1 = join(conn, "g", ("a",), client="m1", session_ms=3000)
    m2 = join(conn, "g", ("a",), client="m2", session_ms=3000)
    gen = m2.generation
    set_heartbeat_back(conn, "g", m2.member_id)
    # The view already calls it expired; it goes at the next group call, with a rebalance.
    expired = {
        r.member_id: r.expired
        for r in conn.exec_driver_sql("SELECT member_id, expired FROM group_status WHERE group_id = 'g'")
    }
    assert expired == {m1.member_id: False, m2.member_id: True}
    m1 = heartbeat(conn, "g", m1)
    assert m1.generation == gen + 1 and m1.assignment == ALL_A
    assert set(status(conn, "g")) == {m1.member_id}
    with pytest.raises(errors.UnknownMemberIdError):
        heartbeat(conn, "g", m2)
    with pytest.raises(errors.UnknownMemberIdError):
        commit(conn, "g", {("a", 2): 1}, m2, generation=gen)
    # Rejoining without a member id is a new member and a new generation.
    m2b = join(conn, "g", ("a",), client="m2", session_ms=3000)
    assert m2b.member_id != m2.member_id and m2b.generation == gen + 2


def test_a_tiny_session_timeout_expires_a_silent_member(conn: sa.Connection) -> None:
    """With a real (short) timeout: the heartbeating member ends up alone; the silent one is gone."""
    m1 = join(conn, "g", ("a",), client="m1", session_ms=60_000)
    m2 = join(conn, "g", ("a",), client="m2", session_ms=200)
    deadline = time.monotonic() + WAIT
    while (m1 := heartbeat(conn, "g", m1)).assignment != ALL_A:
        assert time.monotonic() < deadline, "the silent member was never removed"
        time.sleep(0.05)
    assert set(status(conn, "g")) == {m1.member_id}
    with pytest.raises(errors.UnknownMemberIdError):
        heartbeat(conn, "g", m2)


def test_static_member_rejoins_with_a_new_id_same_partitions_same_generation(conn: sa.Connection) -> None:
    s = join(conn, "g", ("a", "b"), client="s", instance="inst-1")
    d = join(conn, "g", ("a", "b"), client="d")
    both = {s.member_id: s, d.member_id: d}
    settle(conn, "g", both, {s.member_id: "inst-1"})
    s, d = both[s.member_id], both[d.member_id]
    gen = generation(conn, "g")
    before = status(conn, "g")
    # The instance restarts: it joins without a member id.
    s2 = join(conn, "g", ("a", "b"), client="s", instance="inst-1")
    assert s2.member_id != s.member_id
    assert s2.generation == gen and generation(conn, "g") == gen
    assert s2.assignment == s.assignment == before[s.member_id]
    assert status(conn, "g") == {s2.member_id: s.assignment, d.member_id: before[d.member_id]}
    check_every_partition_owned_once(conn, "g")
    # The old member id is fenced, on heartbeat and on commit.
    with pytest.raises(errors.FencedInstanceIdError):
        heartbeat(conn, "g", s, "inst-1")
    tp = min(s.assignment)
    with pytest.raises(errors.FencedInstanceIdError):
        commit(conn, "g", {tp: 1}, s, instance="inst-1")
    # ...also when it does not name its instance: that member id no longer exists.
    with pytest.raises(errors.UnknownMemberIdError):
        heartbeat(conn, "g", s)
    # The new one commits fine.
    commit(conn, "g", {tp: 1}, s2, instance="inst-1")
    assert fetch(conn, "g", tp) == {tp: 1}
    # The other member saw no rebalance.
    assert heartbeat(conn, "g", d).generation == gen


def test_a_static_member_with_a_new_subscription_rebalances(conn: sa.Connection) -> None:
    s = join(conn, "g", ("a",), client="s", instance="inst-1")
    gen = s.generation
    s2 = join(conn, "g", ("a", "b"), client="s", instance="inst-1")
    assert s2.member_id != s.member_id
    assert s2.generation == gen + 1 and s2.assignment == ALL_A | ALL_B


def test_new_partitions_of_a_subscribed_topic_get_an_owner(db_url: str, conn: sa.Connection) -> None:
    """Kafka's consumer leader rebalances when a subscribed topic grows; here the store assigns, so
    the next group call must hand the new partitions to someone (or they are never consumed)."""
    m1 = join(conn, "g", ("a",), client="m1")
    m2 = join(conn, "g", ("a",), client="m2")
    with Admin(db_url) as admin:
        admin.create_partitions("a", 6)
    both = {m1.member_id: m1, m2.member_id: m2}
    settle(conn, "g", both, {})
    owned = both[m1.member_id].assignment | both[m2.member_id].assignment
    assert owned == {("a", p) for p in range(6)}, f"owned {sorted(owned)}: a-4 and a-5 have no owner"
    check_every_partition_owned_once(conn, "g")


def owners(conn: sa.Connection, group: str) -> dict[tuple[str, int], str]:
    """(topic, partition) -> the member that owns it, from the group_status view."""
    return {tp: mid for mid, parts in status(conn, group).items() for tp in parts}


def test_sticky_moves_only_what_it_must(conn: sa.Connection) -> None:
    """Seven partitions over three members, then four, then three again: the joiner gets its
    share from the others and nothing else moves; a leaver's partitions go to the rest and
    nothing else moves."""
    members: dict[str, Membership] = {}
    for client in ("m1", "m2", "m3"):
        m = join(conn, "st", ("a", "b"), client=client, assignor="sticky")
        members[m.member_id] = m
        settle(conn, "st", members, {})
    before = owners(conn, "st")
    assert sorted(Counter(before.values()).values()) == [2, 2, 3]
    m4 = join(conn, "st", ("a", "b"), client="m4", assignor="sticky")
    members[m4.member_id] = m4
    settle(conn, "st", members, {})
    after = owners(conn, "st")
    moved = {tp for tp in before if after[tp] != before[tp]}
    assert {after[tp] for tp in moved} == {m4.member_id}
    assert sorted(Counter(after.values()).values()) == [1, 2, 2, 2]
    assert len(moved) == Counter(after.values())[m4.member_id]
    check_every_partition_owned_once(conn, "st")
    # m1 leaves: only its partitions move.
    gone = sorted(members)[0]
    groups.leave_group(conn, group_id="st", member_id=gone)
    del members[gone]
    settle(conn, "st", members, {})
    final = owners(conn, "st")
    assert {tp for tp in after if final[tp] != after[tp]} == {tp for tp, mid in after.items() if mid == gone}
    assert sorted(Counter(final.values()).values()) == [2, 2, 3]
    check_every_partition_owned_once(conn, "st")


def test_a_member_lets_go_only_of_its_own_partitions_and_only_when_they_move(conn: sa.Connection) -> None:
    """What a heartbeat names (or leaves out) is only about the caller's own partitions, and only
    about those that are no longer its target; malformed lists are refused whole."""
    m1 = join(conn, "h", ("a",), client="m1")
    m2 = join(conn, "h", ("a",), client="m2")
    both = {m1.member_id: m1, m2.member_id: m2}
    settle(conn, "h", both, {})
    m1, m2 = both[m1.member_id], both[m2.member_id]
    # m1 names nothing at all: it keeps its own (still its target) and cannot touch m2's.
    assert heartbeat(conn, "h", m1, owned=frozenset()).assignment == m1.assignment
    # m1 names m2's partitions and a partition that does not exist: nothing changes.
    assert heartbeat(conn, "h", m1, owned=m2.assignment | {("a", 99), ("nope", 0)}).assignment == m1.assignment
    assert heartbeat(conn, "h", m2).assignment == m2.assignment
    for topics, partitions in ((["a"], []), (None, [0]), (["a"], None)):
        with pytest.raises(errors.InvalidRequestError, match="equal length"), mapped_errors():
            conn.exec_driver_sql(
                "SELECT * FROM heartbeat_v2('h', %(m)s, NULL, %(t)s::text[], %(p)s::integer[])",
                {"m": m1.member_id, "t": topics, "p": partitions},
            )
    assert status(conn, "h") == {m1.member_id: m1.assignment, m2.member_id: m2.assignment}


def test_a_commit_from_before_a_member_took_a_partition_back_is_refused(conn: sa.Connection) -> None:
    """m1 lets go of a-2 and a-3 (m2 joined), and takes them back when m2 leaves: a commit for a-2
    naming a generation from before it took it back is ILLEGAL_GENERATION; one naming the
    current generation is accepted."""
    m1 = join(conn, "back", ("a",), client="m1")
    m2 = join(conn, "back", ("a",), client="m2")
    both = {m1.member_id: m1, m2.member_id: m2}
    settle(conn, "back", both, {})
    m1 = both[m1.member_id]
    middle = m1.generation
    assert ("a", 2) not in m1.assignment
    groups.leave_group(conn, group_id="back", member_id=m2.member_id)
    m1 = heartbeat(conn, "back", m1)
    assert m1.assignment == ALL_A and m1.generation == middle + 1
    with pytest.raises(errors.IllegalGenerationError, match="owns it since generation"):
        commit(conn, "back", {("a", 2): 1}, m1, generation=middle)
    commit(conn, "back", {("a", 0): 1}, m1, generation=middle)  # a-0 was m1's all along
    commit(conn, "back", {("a", 2): 1}, m1)
    assert fetch(conn, "back", ("a", 0), ("a", 2)) == {("a", 0): 1, ("a", 2): 1}


def test_a_topic_subscribed_before_it_exists_is_assigned_once_created(db_url: str, conn: sa.Connection) -> None:
    m = join(conn, "later", ("a", "not-yet"))
    assert m.assignment == ALL_A and not m.reconciling
    with Admin(db_url) as admin:
        admin.create_topic("not-yet", partitions=2)
    m = heartbeat(conn, "later", m)
    assert m.assignment == ALL_A | {("not-yet", 0), ("not-yet", 1)}
    check_every_partition_owned_once(conn, "later")


# --- every partition owned exactly once, under random membership changes ---------------------

OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("join"),
            st.sampled_from([("a",), ("b",), ("a", "b")]),
            st.booleans(),  # static?
        ),
        st.tuples(st.just("leave"), st.integers(0, 20)),
        st.tuples(st.just("expire"), st.integers(0, 20)),
        st.tuples(st.just("restart"), st.integers(0, 20)),  # a static member rejoins
        st.tuples(st.just("resubscribe"), st.integers(0, 20), st.sampled_from([("a",), ("b",), ("a", "b")])),
    ),
    min_size=1,
    max_size=14,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS, assignor=st.sampled_from(["range", "roundrobin", "sticky"]))
def test_every_partition_has_exactly_one_owner_in_every_generation(
    conn: sa.Connection, ops: list[tuple[Any, ...]], assignor: str
) -> None:
    group = f"h-{uuid.uuid4().hex[:10]}"
    # member id -> (membership, instance id, subscription)
    members: dict[str, tuple[Membership, str | None, tuple[str, ...]]] = {}
    instances = 0
    last_gen = 0
    for op in ops:
        kind = op[0]
        ids = sorted(members)
        expect_bump: bool | None = True
        if kind == "join":
            instance = None
            if op[2]:
                instances += 1
                instance = f"inst-{instances}"
            m = join(conn, group, op[1], client=f"c{len(members)}", assignor=assignor, instance=instance)
            members[m.member_id] = (m, instance, op[1])
        elif not ids:
            continue
        elif kind == "leave":
            victim = ids[op[1] % len(ids)]
            groups.leave_group(conn, group_id=group, member_id=victim)
            del members[victim]
        elif kind == "expire":
            victim = ids[op[1] % len(ids)]
            set_heartbeat_back(conn, group, victim)
            del members[victim]
            if members:
                survivor, inst, _ = members[sorted(members)[0]]
                heartbeat(conn, group, survivor, inst)
            else:
                # No one left to notice; a new member's join removes it (two generations).
                m = join(conn, group, ("a",), client="late", assignor=assignor)
                members[m.member_id] = (m, None, ("a",))
        elif kind == "restart":
            statics = [mid for mid in ids if members[mid][1] is not None]
            if not statics:
                continue
            old, inst, sub = members.pop(statics[op[1] % len(statics)])
            before = status(conn, group)[old.member_id]
            m = join(conn, group, sub, client="again", assignor=assignor, instance=inst)
            assert m.member_id != old.member_id
            assert m.assignment == before, "a restarted static member must keep its partitions"
            members[m.member_id] = (m, inst, sub)
            expect_bump = False
        elif kind == "resubscribe":
            mid = ids[op[1] % len(ids)]
            m, inst, sub = members[mid]
            m = join(conn, group, op[2], client="re", assignor=assignor, instance=inst, member=mid)
            expect_bump = None if tuple(sorted(op[2])) == tuple(sorted(sub)) else True
            members[mid] = (m, inst, op[2])
        everyone = {mid: m for mid, (m, _, _) in members.items()}
        settle(conn, group, everyone, {mid: inst for mid, (_, inst, _) in members.items()})
        members = {mid: (everyone[mid], inst, sub) for mid, (_, inst, sub) in members.items()}
        gen = generation(conn, group)
        if expect_bump is True:
            assert gen > last_gen
        elif expect_bump is False:
            assert gen == last_gen
        last_gen = gen
        assert set(status(conn, group)) == set(members)
        check_every_partition_owned_once(conn, group)
        # Every member learns the same generation and exactly its rows of the view.
        view = status(conn, group)
        for mid, (m, inst, _) in members.items():
            seen = heartbeat(conn, group, m, inst)
            assert seen.generation == gen and seen.assignment == view[mid]


# --- plain offset commits and fetches --------------------------------------------------------


def test_offset_commit_checks(conn: sa.Connection) -> None:
    m1 = join(conn, "g", ("a",), client="m1")
    old = m1
    m2 = join(conn, "g", ("a",), client="m2")
    both = {m1.member_id: m1, m2.member_id: m2}
    settle(conn, "g", both, {})
    m1, m2 = both[m1.member_id], both[m2.member_id]
    mine, theirs = ("a", 0), ("a", 3)
    assert mine in m1.assignment and theirs in m2.assignment

    commit(conn, "g", {mine: (7, "seven")}, m1)
    assert fetch(conn, "g", mine) == {mine: 7}
    with pytest.raises(errors.UnknownMemberIdError):
        commit(conn, "g", {mine: 8}, Membership("nobody", m1.generation, frozenset()))
    # An older generation is fine while the member has owned the partition since then (m1 has
    # had a-0 since generation 1); one the group has not reached is not.
    commit(conn, "g", {mine: (7, "seven")}, old)
    with pytest.raises(errors.IllegalGenerationError):
        commit(conn, "g", {mine: 8}, m1, generation=m1.generation + 1)
    with pytest.raises(errors.UnassignedPartitionError):
        commit(conn, "g", {mine: 8, theirs: 8}, m1)
    with pytest.raises(errors.OffsetMetadataTooLargeError):
        commit(conn, "g", {mine: (8, "x" * 4097)}, m1)
    # The limit is in bytes: 2049 two-byte characters are too many.
    with pytest.raises(errors.OffsetMetadataTooLargeError):
        commit(conn, "g", {mine: (8, "é" * 2049)}, m1)
    with pytest.raises(errors.InvalidRequestError):
        commit(conn, "g", {mine: -1}, m1)
    # A standalone commit (no member id) is refused while the group has members.
    with pytest.raises(errors.UnknownMemberIdError):
        commit(conn, "g", {mine: 8})
    # None of the refused commits changed anything.
    assert fetch(conn, "g", mine, theirs) == {mine: 7, theirs: None}
    committed = groups.offset_fetch(conn, group_id="g", partitions=[mine])[mine]
    assert (committed.offset, committed.metadata, committed.error) == (7, "seven", None)

    commit(conn, "g", {mine: (8, "x" * 4096)}, m1)  # exactly the limit
    commit(conn, "g", {theirs: 3}, m2)
    assert fetch(conn, "g", mine, theirs) == {mine: 8, theirs: 3}

    # Once every member is gone, a standalone consumer may commit.
    groups.leave_group(conn, group_id="g", member_id=m1.member_id)
    groups.leave_group(conn, group_id="g", member_id=m2.member_id)
    commit(conn, "g", {mine: 1, ("b", 2): 5})
    assert fetch(conn, "g", mine, theirs, ("b", 2)) == {mine: 1, theirs: 3, ("b", 2): 5}
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        commit(conn, "g", {("a", 99): 1})
    # A standalone commit to a group that does not exist yet creates it.
    commit(conn, "fresh", {mine: 2})
    assert fetch(conn, "fresh", mine) == {mine: 2}


def test_offset_fetch(conn: sa.Connection) -> None:
    answers = groups.offset_fetch(conn, group_id="none-such", partitions=[("a", 0), ("a", 9), ("zz", 0)])
    assert answers[("a", 0)].offset is None and answers[("a", 0)].error is None
    assert answers[("a", 9)].error == "unknown_topic_or_partition"
    assert answers[("zz", 0)].error == "unknown_topic_or_partition"
    commit(conn, "g", {("a", 1): (4, "meta"), ("b", 0): 2})
    got = groups.offset_fetch(conn, group_id="g", partitions=[("a", 1), ("b", 0), ("b", 1)], require_stable=False)
    assert {k: (v.offset, v.metadata, v.error) for k, v in got.items()} == {
        ("a", 1): (4, "meta", None),
        ("b", 0): (2, "", None),
        ("b", 1): (None, "", None),
    }
    # A later commit replaces the offset (even a lower one: a plain commit is a reset).
    commit(conn, "g", {("a", 1): 1})
    assert fetch(conn, "g", ("a", 1)) == {("a", 1): 1}


def test_group_offsets_view_lag(db_url: str, conn: sa.Connection) -> None:
    produce_plain(db_url, 10)
    commit(conn, "g", {("a", 0): 4, ("a", 1): 10, ("a", 2): 100})

    def view() -> dict[int, tuple[int, int, int, int]]:
        rows = conn.exec_driver_sql(
            "SELECT partition, committed_offset, high_watermark, last_stable_offset, lag, lag_committed, "
            "committed_by_producer_id FROM group_offsets WHERE group_id = 'g' AND topic = 'a'"
        ).all()
        return {r.partition: (r.high_watermark, r.last_stable_offset, r.lag, r.lag_committed) for r in rows}

    assert view() == {0: (10, 10, 6, 6), 1: (10, 10, 0, 0), 2: (10, 10, 0, 0)}
    with Producer(db_url, transactional_id="lagger", linger_ms=1) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send("a", f"t{i}".encode(), partition=0)
        producer.flush()
        # Open transaction at offsets 10..12: the high watermark moves, the last stable offset not.
        assert view()[0] == (13, 10, 9, 6)
        producer.commit_transaction()
    # Committed: a marker at 13, everything stable.
    assert view()[0] == (14, 14, 10, 10)
    by = conn.exec_driver_sql("SELECT DISTINCT committed_by_producer_id FROM group_offsets WHERE group_id = 'g'")
    assert by.scalar_one() is None  # plain commits


# --- the Consumer API ------------------------------------------------------------------------


class Events:
    """Rebalance callbacks of one consumer, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, set[TopicPartition]]] = []

    def assign(self, partitions: set[TopicPartition]) -> None:
        self.log.append(("assign", set(partitions)))

    def revoke(self, partitions: set[TopicPartition]) -> None:
        self.log.append(("revoke", set(partitions)))

    def kinds(self, kind: str) -> list[set[TopicPartition]]:
        return [p for k, p in self.log if k == kind]


def group_consumer(url: str, client: str, **kwargs: object) -> Consumer:
    return Consumer(url, group_id="g", client_id=client, **{**FAST, **kwargs})  # type: ignore[arg-type]


def test_subscribe_callbacks_fire_with_the_right_sets(topics: str, conn: sa.Connection) -> None:
    e1, e2 = Events(), Events()
    with group_consumer(topics, "c1") as c1, group_consumer(topics, "c2") as c2:
        c1.subscribe(["a", "b"], on_assign=e1.assign, on_revoke=e1.revoke)
        assert e1.log == [("assign", tps(*ALL_A, *ALL_B))]
        assert c1.assignment() == tps(*ALL_A, *ALL_B)
        c2.subscribe(["a", "b"], on_assign=e2.assign, on_revoke=e2.revoke)
        mine2 = tps(("a", 2), ("a", 3), ("b", 2))
        # c2's share is c1's until c1 lets go of it.
        assert e2.log == [] and c2.assignment() == set()
        # c1 learns of the new generation from its heartbeat, revokes in poll (and lets go at
        # once); c2 gets its share at its next heartbeat.
        poll_until([c1, c2], lambda: len(e2.log) > 0, "c2's share")
        assert e1.log[1:] == [("revoke", mine2)]
        assert e2.log == [("assign", mine2)]
        assert c1.assignment() == tps(*ALL_A, *ALL_B) - mine2
        assert c1.group_metadata().generation_id == c2.group_metadata().generation_id
        assert c1.group_metadata().member_id != c2.group_metadata().member_id
        # close() leaves: c1 gets everything back at its next polls.
        c2.close()
        poll_until([c1], lambda: len(e1.log) > 2, "c1's new assignment after c2 left")
        assert e1.log[2:] == [("assign", mine2)]
        assert c1.assignment() == tps(*ALL_A, *ALL_B)
        assert set(status(conn, "g")) == {c1.group_metadata().member_id}


def test_a_consumer_that_stops_polling_loses_its_partitions_and_rejoins(topics: str) -> None:
    """c1 stops polling past max_poll_interval_ms: it leaves, c2 takes its partitions, reads on
    from c1's commits and commits further. When c1 polls again it rejoins and gets its partitions
    back; it must resume from the group's committed offsets (c2's), not from its own stale
    positions, or it processes c2's records a second time."""
    produce_plain(topics, 5)
    e1, e2 = Events(), Events()
    c2_start: dict[TopicPartition, int] = {}
    first = tps(("a", 0), ("a", 1))
    with (
        group_consumer(topics, "c1", max_poll_interval_ms=2000) as c1,
        group_consumer(topics, "c2") as c2,
    ):

        def c2_assigned(parts: set[TopicPartition]) -> None:
            e2.assign(parts)
            c2_start.update({tp: c2.position(tp) for tp in parts})

        c1.subscribe(["a"], on_assign=e1.assign, on_revoke=e1.revoke)
        c2.subscribe(["a"], on_assign=c2_assigned, on_revoke=e2.revoke)
        # c1 applies the split, reads its partitions to the end and commits.
        poll_until(
            [c1],
            lambda: c1.assignment() == first and all(c1.position(tp) == 5 for tp in first),
            "c1 to read a-0 and a-1",
        )
        c1.commit()
        assert c1.committed(first) == {tp: OffsetAndMetadata(5, "") for tp in first}
        old_member = c1.group_metadata().member_id
        stalled_at = len(e1.log)
        # c1 stalls. Its heartbeat thread notices and leaves; c2 (polling) gets everything.
        produce_plain(topics, 5, start=5)
        poll_until([c2], lambda: c2.assignment() == tps(*ALL_A), "c2 to take c1's partitions")
        assert e2.kinds("assign")[-1] == first
        assert {tp: c2_start[tp] for tp in first} == {tp: 5 for tp in first}  # from c1's commit
        poll_until([c2], lambda: all(c2.position(tp) == 10 for tp in tps(*ALL_A)), "c2 to read everything")
        c2.commit()
        assert c2.committed(first) == {tp: OffsetAndMetadata(10, "") for tp in first}
        # c1 polls again: it rejoins (a new member id) and gets a-0 and a-1 back.
        again: list[tuple[int, int]] = []
        deadline = time.monotonic() + WAIT
        while c1.assignment() != first or c2.assignment() != tps(("a", 2), ("a", 3)):
            assert time.monotonic() < deadline, "c1 never got a-0 and a-1 back"
            again.extend((r.partition, r.offset) for r in c1.poll(0.05))
            c2.poll(0.02)
        again.extend((r.partition, r.offset) for r in c1.poll(0.2))
        assert c1.group_metadata().member_id != old_member
        assert again == [], f"c1 re-read records c2 had already processed and committed: {again}"
        assert {tp: c1.position(tp) for tp in first} == {tp: 10 for tp in first}
        # As in Kafka (onPartitionsLost, then onPartitionsAssigned): c1 hears that it lost a-0
        # and a-1, then that it got them again.
        assert e1.log[stalled_at:] == [("revoke", first), ("assign", first)]


def test_a_partition_moves_only_after_its_owner_lets_go_and_on_revoke_may_commit(
    topics: str, engine: sa.Engine
) -> None:
    """c1 owns every partition and reads them. B joins (straight through the store): its target
    is a-2 and a-3, but while c1 has not polled, c1 has not let go of them, however often both
    heartbeat: B owns nothing and its commit for a-2 is refused, while c1 still commits there.
    At c1's next poll, on_revoke commits a-2 and a-3 (c1 still owns them while it runs), c1 lets
    go, and B takes them with c1's offsets."""
    produce_plain(topics, 5)
    moved = tps(("a", 2), ("a", 3))
    with group_consumer(topics, "c1") as c1:

        def revoke(parts: set[TopicPartition]) -> None:
            assert parts == moved
            c1.commit({tp: c1.position(tp) for tp in parts})

        c1.subscribe(["a"], on_revoke=revoke)
        every = tps(*ALL_A)
        poll_until([c1], lambda: all(c1.position(tp) == 5 for tp in every), "c1 to read everything")
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            b = join(conn, "g", ("a",), client="z", session_ms=60_000)  # after "c1": a-2 and a-3
            assert (b.assignment, b.reconciling) == (frozenset(), True)
            for _ in range(5):
                time.sleep(0.15)  # c1's heartbeat thread beats every 100 ms meanwhile
                b = heartbeat(conn, "g", b)
                assert b.assignment == frozenset()
                with pytest.raises(errors.UnassignedPartitionError):
                    commit(conn, "g", {("a", 2): 1}, b)
            c1.commit({TopicPartition("a", 2): 4})  # still c1's
            assert status(conn, "g")[c1.group_metadata().member_id] == ALL_A
            poll_until([c1], lambda: c1.assignment() == tps(("a", 0), ("a", 1)), "c1's revocation")
            b = heartbeat(conn, "g", b)
            assert b.assignment == {("a", 2), ("a", 3)} and not b.reconciling
            assert fetch(conn, "g", ("a", 2), ("a", 3)) == {("a", 2): 5, ("a", 3): 5}
            commit(conn, "g", {("a", 2): 5}, b)
            # c1 no longer owns them: its commits there are refused.
            with pytest.raises(errors.UnassignedPartitionError):
                c1.commit({TopicPartition("a", 2): 5})
            groups.leave_group(conn, group_id="g", member_id=b.member_id)


def test_a_static_member_close_does_not_leave(topics: str, conn: sa.Connection) -> None:
    e2 = Events()
    # A long session timeout for the static member: it must not expire while it is away.
    with (
        group_consumer(topics, "c1", group_instance_id="s1", session_timeout_ms=60_000) as c1,
        group_consumer(topics, "c2") as c2,
    ):
        c1.subscribe(["a"])
        c2.subscribe(["a"], on_assign=e2.assign, on_revoke=e2.revoke)
        poll_until([c1], lambda: len(c1.assignment()) == 2, "c1 to apply the split")
        before = c1.assignment()
        meta = c1.group_metadata()
        c1.close()
        assert meta.member_id in status(conn, "g"), "a static member's close must not leave"
        assert generation(conn, "g") == meta.generation_id
        # The instance comes back: same partitions, same generation, a new member id.
        e1b = Events()
        with group_consumer(topics, "c1", group_instance_id="s1", session_timeout_ms=60_000) as c1b:
            c1b.subscribe(["a"], on_assign=e1b.assign)
            assert e1b.log == [("assign", before)]
            assert c1b.group_metadata().generation_id == meta.generation_id
            assert c1b.group_metadata().member_id != meta.member_id
            c2.poll(0.3)
            assert c2.group_metadata().generation_id == meta.generation_id
            assert e2.kinds("revoke") == []
            with pytest.raises(errors.FencedInstanceIdError):
                groups.heartbeat(conn, group_id="g", member_id=meta.member_id, group_instance_id="s1")
            assert set(status(conn, "g")) == {c1b.group_metadata().member_id, c2.group_metadata().member_id}
            # A non-static close does leave.
            c2.close()
            poll_until([c1b], lambda: c1b.assignment() == tps(*ALL_A), "c1b to get everything")


def test_a_replaced_static_member_is_fenced_in_poll_and_commit(topics: str) -> None:
    with group_consumer(topics, "c1", group_instance_id="s1") as old:
        old.subscribe(["a"])
        old.poll(0.05)
        with group_consumer(topics, "c1", group_instance_id="s1") as new:
            new.subscribe(["a"])
            assert new.assignment() == tps(*ALL_A)
            # The old instance's heartbeat thread meets FENCED_INSTANCE_ID; its next poll raises it.
            deadline = time.monotonic() + WAIT
            with pytest.raises(errors.FencedInstanceIdError):
                while time.monotonic() < deadline:
                    old.poll(0.05)
            with pytest.raises(errors.FencedInstanceIdError):
                old.commit({TopicPartition("a", 0): 1})
            new.commit({TopicPartition("a", 0): 1})
            assert new.committed([TopicPartition("a", 0)]) == {TopicPartition("a", 0): OffsetAndMetadata(1, "")}


def test_auto_commit_commits_positions(topics: str, conn: sa.Connection) -> None:
    produce_plain(topics, 5)
    with group_consumer(topics, "c1", enable_auto_commit=True, auto_commit_interval_ms=100) as c1:
        c1.subscribe(["a"])
        seen: list[tuple[int, int]] = []
        read_until(c1, seen, 20, "20 records")
        every = tps(*ALL_A)
        poll_until(
            [c1],
            lambda: c1.committed(every) == {tp: OffsetAndMetadata(5, "") for tp in every},
            "auto-commit of the positions",
        )
    # close() commits what was read since the last auto-commit.
    produce_plain(topics, 2, start=5)
    with group_consumer(topics, "c2", enable_auto_commit=True, auto_commit_interval_ms=3_600_000) as c2:
        c2.subscribe(["a"])
        assert {tp: c2.position(tp) for tp in every} == {tp: 5 for tp in every}
        got: list[tuple[int, int]] = []
        read_until(c2, got, 8, "8 records")
    assert fetch(conn, "g", *ALL_A) == {tp: 7 for tp in ALL_A}
    assert status(conn, "g") == {}  # the dynamic member left on close


def test_auto_commit_never_covers_what_this_poll_returns(topics: str, conn: sa.Connection) -> None:
    """At least once, as Kafka: a poll commits what earlier polls returned, so a crash right after
    poll() returned records re-delivers them instead of losing them."""
    produce_plain(topics, 5)
    every = tps(*ALL_A)
    with group_consumer(topics, "c1", enable_auto_commit=True, auto_commit_interval_ms=1, max_poll_records=4) as c1:
        c1.subscribe(["a"])
        returned: dict[TopicPartition, int] = {}
        for _ in range(50):
            records = c1.poll(0.2)
            # What the store holds now is at most what the polls BEFORE this one returned.
            committed = fetch(conn, "g", *ALL_A)
            for tp in every:
                assert (committed.get((tp.topic, tp.partition)) or 0) <= returned.get(tp, 0), (tp, committed, returned)
            for r in records:
                returned[r.topic_partition] = r.offset + 1
            if sum(returned.values()) == 20 and fetch(conn, "g", *ALL_A) == {tp: 5 for tp in ALL_A}:
                break
        assert fetch(conn, "g", *ALL_A) == {tp: 5 for tp in ALL_A}


def test_position_and_committed_for_a_new_member(topics: str, conn: sa.Connection) -> None:
    commit(conn, "g", {("a", 0): 3, ("a", 1): (2, "m")})
    produce_plain(topics, 5)
    with group_consumer(topics, "c1") as c1:
        c1.subscribe(["a"])
        positions = {tp.partition: c1.position(tp) for tp in c1.assignment()}
        assert positions == {0: 3, 1: 2, 2: 0, 3: 0}  # no commit: auto_offset_reset=earliest
        assert c1.committed([TopicPartition("a", 1), TopicPartition("a", 2)]) == {
            TopicPartition("a", 1): OffsetAndMetadata(2, "m"),
            TopicPartition("a", 2): None,
        }
        first = c1.poll(0.5)
        assert all(r.offset >= positions[r.partition] for r in first)


def test_a_pattern_subscription_picks_up_topics_created_later(db_url: str, topics: str) -> None:
    """subscribe(pattern=...) matches whole topic names, and again every metadata_max_age_ms; a
    plain subscription to a topic that does not exist yet waits for it."""
    events = Events()
    with (
        group_consumer(topics, "p1", metadata_max_age_ms=200) as by_pattern,
        Consumer(topics, group_id="plain", client_id="p2", **FAST) as plain,  # type: ignore[arg-type]
    ):
        by_pattern.subscribe(pattern=r"pat-\d+", on_assign=events.assign, on_revoke=events.revoke)
        plain.subscribe(["pat-9"])
        assert by_pattern.assignment() == set() and plain.assignment() == set()
        with Admin(db_url) as admin:
            admin.create_topic("pat-1", partitions=2)
            admin.create_topic("pat-9", partitions=1)
            admin.create_topic("pat-1x", partitions=1)  # not a whole-name match
        want = tps(("pat-1", 0), ("pat-1", 1), ("pat-9", 0))
        poll_until([by_pattern, plain], lambda: by_pattern.assignment() == want, "the pattern's topics")
        poll_until([plain], lambda: plain.assignment() == tps(("pat-9", 0)), "the topic created after subscribe")
        assert events.kinds("revoke") == []
        with pytest.raises(errors.ConfigurationError, match="not both"):
            plain.subscribe(["a"], pattern="a")
        with pytest.raises(errors.ConfigurationError, match="regular expression"):
            plain.subscribe(pattern="(")


def test_a_topic_named_twice_counts_once(conn: sa.Connection) -> None:
    """A hostile or careless subscription naming a topic twice does not get a double share."""
    m1 = conn.exec_driver_sql(
        "SELECT member_id FROM join_group_v2('twice', NULL, NULL, 'm1', ARRAY['a', 'a'], 60000, 'range', '{}', '{}')"
    ).scalar_one()
    m2 = join(conn, "twice", ("a",), client="m2")
    both = {m1: Membership(m1, m2.generation, frozenset()), m2.member_id: m2}
    settle(conn, "twice", both, {})
    assert sorted(len(m.assignment) for m in both.values()) == [2, 2]
    subscription = conn.exec_driver_sql("SELECT subscription FROM group_members WHERE member_id = %(m)s", {"m": m1})
    assert subscription.scalar_one() == ["a"]


def test_a_pipeline_commit_waits_for_its_group_lock_no_longer_than_its_timeout(engine: sa.Engine) -> None:
    """Anyone may take an advisory lock: a session holding a group's standalone-commit lock makes
    the next run's commit wait, and that wait ends at the timeout given, typed and retriable."""
    with engine.connect() as holder, engine.connect() as committer:
        groups.lock_standalone_commit(holder, group_id="g-lock", timeout_ms=1000)  # held until rollback
        with pytest.raises(errors.RequestTimeoutError) as raised:
            groups.lock_standalone_commit(committer, group_id="g-lock", timeout_ms=200)
        assert raised.value.retriable
        committer.rollback()
        groups.lock_standalone_commit(committer, group_id="g-other", timeout_ms=200)  # another group's: free
        committer.rollback()
        holder.rollback()
        groups.lock_standalone_commit(committer, group_id="g-lock", timeout_ms=200)  # released with the transaction
        committer.rollback()


def test_a_client_id_is_bounded_with_a_typed_error(topics: str) -> None:
    """A member id is made of the client id: a long one is refused up front by the Consumer, and
    by the store for a caller of its own (InvalidRequestError, never an unmapped integrity
    error); one of 255 characters makes a member id within its bound."""
    with pytest.raises(errors.ConfigurationError, match="client_id"):
        Consumer(topics, group_id="long", client_id="x" * 256)
    engine = create_engine(topics, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            with pytest.raises(errors.InvalidRequestError, match="255"):
                groups.join_group(conn, group_id="long", topics=["a"], session_timeout_ms=6000, client_id="y" * 3000)
            joined = groups.join_group(
                conn, group_id="long", topics=["a"], session_timeout_ms=6000, client_id="z" * 255
            )
            assert joined.member_id.startswith("z" * 200 + "-") and len(joined.member_id) <= 255
    finally:
        engine.dispose()
