"""The consumer's group membership: join, heartbeat, rebalance, leave (Kafka's ConsumerCoordinator).

The store computes a target assignment when a member joins or leaves, and hands a partition to
its target member only once the partition's owner has let go of it (KIP-848's reconciliation;
see docs/design.md, "Consumer groups and KIP-447"). :class:`ConsumerCoordinator` runs the
heartbeat on a background thread and applies what it learns on the caller's thread, at the next
``poll()``. Revocation is incremental: only the partitions that move are revoked (``on_revoke``
runs, and may commit their offsets: the member still owns them), then a heartbeat names what
the member still holds, which lets go of the rest; the partitions that stay are consumed
throughout. A member waiting for partitions, or holding some it is to give up, heartbeats ten
times as often until it is done.

A member that has not heard from the store for its session timeout, or that the store removed
(UNKNOWN_MEMBER_ID), has lost its partitions: ``on_lost`` runs (``on_revoke`` without one, as
Kafka's default does) before anything else is fetched, and it rejoins. A fenced static member
(another instance took its ``group_instance_id``) is fatal: the next poll raises
FencedInstanceIdError.

The store calls go through :class:`GroupStore` (a Protocol; :class:`DatabaseGroupStore` calls
:mod:`oncelog.store.groups`), so the unit tests drive rebalances against a fake.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import sqlalchemy as sa

from oncelog import errors
from oncelog.positions import SubscriptionState
from oncelog.store import groups, runtime
from oncelog.store.groups import Membership
from oncelog.types import TopicPartition

__all__ = [
    "FROM_CALLBACK",
    "ConsumerCoordinator",
    "DatabaseGroupStore",
    "GroupStore",
    "Membership",
    "RebalanceCallback",
]

logger = logging.getLogger(__name__)

RebalanceCallback = Callable[[set[TopicPartition]], None]

#: An attribute set (True) on a DatabaseUnavailableError raised by an application's rebalance
#: callback: Consumer.poll passes it on to the caller rather than take it for the loss of its own
#: connection, which it would wait out (the callback is not called again).
FROM_CALLBACK = "_oncelog_from_callback"


def _call_back(callback: RebalanceCallback, partitions: set[TopicPartition]) -> None:
    try:
        callback(partitions)
    except errors.DatabaseUnavailableError as exc:
        setattr(exc, FROM_CALLBACK, True)
        raise


#: While reconciling, a member heartbeats this much more often than its heartbeat interval.
_RECONCILE_SPEEDUP = 10
#: ... but not more often than this (seconds).
_MIN_HEARTBEAT_S = 0.02


class GroupStore(Protocol):
    """What the coordinator asks of the store: JoinGroup, Heartbeat, LeaveGroup."""

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
        """Join (or rejoin with ``member_id``, naming what it holds); the member id, generation
        and assignment."""

    def heartbeat(
        self, *, group_id: str, member_id: str, group_instance_id: str | None, owned: Iterable[tuple[str, int]]
    ) -> Membership:
        """Stay a member, letting go of what it owned and no longer names in ``owned``; the
        group's current generation and what this member owns and keeps."""

    def leave_group(self, *, group_id: str, member_id: str) -> None:
        """Leave: the rest of the group is rebalanced at once."""

    def wait_for_change(self, group_id: str, timeout: float, interrupt: threading.Event) -> None:
        """Return after ``timeout`` seconds, or sooner: when the group's target or owners change,
        or once ``interrupt`` is set. Called on the heartbeat thread only."""

    def close(self) -> None:
        """Release what :meth:`wait_for_change` holds (on the heartbeat thread, as it ends)."""


#: How long the heartbeat thread listens at a time before it looks at its interrupt.
_LISTEN_SLICE_S = 0.1


class DatabaseGroupStore:
    """:class:`GroupStore` on PostgreSQL: each call one :mod:`oncelog.store.groups` call, on a
    connection of the client's for one request (looked up at every call, so a test wrapping a
    function of :mod:`oncelog.store.groups` sees the coordinator's calls too)."""

    def __init__(
        self,
        request: Callable[[], contextlib.AbstractContextManager[sa.Connection]],
        connect: Callable[[], sa.Connection] | None = None,
    ) -> None:
        """``connect()``: a connection of the heartbeat thread's own, in autocommit, on which it
        LISTENs for the group's changes; without it the thread just sleeps between beats."""
        self._request = request
        self._connect = connect
        self._listening: tuple[sa.Connection, str] | None = None

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
        """See :func:`oncelog.store.groups.join_group`."""
        with self._request() as conn:
            return groups.join_group(
                conn,
                group_id=group_id,
                topics=topics,
                session_timeout_ms=session_timeout_ms,
                assignor=assignor,
                member_id=member_id,
                group_instance_id=group_instance_id,
                client_id=client_id,
                owned=owned,
            )

    def heartbeat(
        self, *, group_id: str, member_id: str, group_instance_id: str | None, owned: Iterable[tuple[str, int]]
    ) -> Membership:
        """See :func:`oncelog.store.groups.heartbeat`."""
        with self._request() as conn:
            return groups.heartbeat(
                conn, group_id=group_id, member_id=member_id, group_instance_id=group_instance_id, owned=owned
            )

    def leave_group(self, *, group_id: str, member_id: str) -> None:
        """See :func:`oncelog.store.groups.leave_group`."""
        with self._request() as conn:
            groups.leave_group(conn, group_id=group_id, member_id=member_id)

    def wait_for_change(self, group_id: str, timeout: float, interrupt: threading.Event) -> None:
        """LISTENs (see :func:`oncelog.store.groups.await_change`) in slices, so that ``interrupt``
        is seen within 0.1 s; a failed connection is dropped and the wait becomes a sleep until
        the next call, which connects again."""
        deadline = time.monotonic() + timeout
        if self._connect is None:
            _pause(interrupt, timeout)
            return
        digest = groups.change_digest(group_id)
        try:
            if self._listening is None:
                conn = self._connect()
                try:
                    self._listening = (conn, groups.listen_for_changes(conn))
                except BaseException:
                    conn.close()
                    raise
            conn, channel = self._listening
            while not interrupt.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or groups.await_change(conn, channel, digest, min(remaining, _LISTEN_SLICE_S)):
                    return
        except errors.OncelogError:
            logger.debug("listening for group changes failed; sleeping instead", exc_info=True)
            self.close()
            _pause(interrupt, max(deadline - time.monotonic(), 0.0))

    def close(self) -> None:
        """Close the listening connection, if any."""
        listening, self._listening = self._listening, None
        if listening is not None:
            with contextlib.suppress(Exception):
                listening[0].close()


class ConsumerCoordinator:
    """One consumer's membership of its group, and the heartbeat thread that keeps it.

    Threads: :meth:`subscribe`, :meth:`poll`, :meth:`unsubscribe`, :meth:`leave` and :meth:`stop`
    run on the caller's thread, which alone changes the assignment (the :class:`SubscriptionState`
    handed in) and runs the rebalance callbacks. The heartbeat thread (:meth:`heartbeat_once`)
    only records what it learns (a pending answer, a rejoin, a fatal error) and may leave after
    ``max_poll_interval``. ``_lock`` guards the fields both threads touch: the member, the
    pending answer, what the caller's thread holds (``_owned``, and ``_applying`` while it
    applies an answer), the rejoin flag, the fatal error and the time of the last answer.

    The rule that keeps one owner per partition: every heartbeat names every partition the
    caller's thread holds or may be about to hold (:meth:`_held`), since the store lets go of
    whatever a heartbeat does not name.
    """

    def __init__(
        self,
        store: GroupStore,
        subscriptions: SubscriptionState,
        *,
        group_id: str,
        group_instance_id: str | None = None,
        client_id: str | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval: float = 3.0,
        max_poll_interval: float = 300.0,
        assignor: str = "range",
        fill_positions: Callable[[list[TopicPartition]], None] = lambda partitions: None,
        before_revoke: Callable[[set[TopicPartition]], None] = lambda partitions: None,
        list_topics: Callable[[], Iterable[str]] = lambda: (),
        metadata_max_age: float = 300.0,
        event_loop: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``fill_positions(partitions)``: give newly assigned partitions their positions (from
        the group's committed offsets); called before ``on_assign``. ``before_revoke(partitions)``:
        called before ``on_revoke`` (the Consumer's auto-commit of the revoked partitions).
        ``list_topics()``: the topics there are, which a pattern subscription matches again every
        ``metadata_max_age`` seconds (on the heartbeat thread). With ``event_loop`` (the calls
        run in greenlets of an asyncio loop, :mod:`oncelog.aio`) there is no heartbeat thread: the
        caller runs :meth:`wait_for_change` and :meth:`heartbeat_once` from a task."""
        self._store = store
        self._subscriptions = subscriptions
        self.group_id = group_id
        self.instance_id = group_instance_id
        self._client_id = client_id
        self._session_timeout = session_timeout_ms / 1000
        self._session_timeout_ms = session_timeout_ms
        self._heartbeat_interval = heartbeat_interval
        self._max_poll_interval = max_poll_interval
        self._assignor = assignor
        self._fill_positions = fill_positions
        self._before_revoke = before_revoke
        self._clock = clock
        self._list_topics = list_topics
        self._metadata_max_age = metadata_max_age
        self._pattern: re.Pattern[str] | None = None
        self._matched_at = clock()
        self._topics: list[str] | None = None
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._on_lost: RebalanceCallback | None = None
        self._lock = threading.Lock()
        # Held across a join's or heartbeat's store call: what a request names and what its
        # answer may hand over are decided one request at a time (see _held).
        self._beat_lock: contextlib.AbstractContextManager[Any] = runtime.LoopLock() if event_loop else threading.Lock()
        self._member: Membership | None = None
        self._lost_member_id: str | None = None
        self._pending: Membership | None = None
        self._owned: frozenset[TopicPartition] = frozenset()
        self._applying: frozenset[TopicPartition] = frozenset()
        self._rejoin = False
        self._resubscribe: list[str] | None = None
        self._fatal: errors.OncelogError | None = None
        # When the request of the last answer was sent: the store counts the session from a
        # moment after that, so a member that goes by this clock never outlives its session.
        self._last_answer = clock()
        self._reconciling = False
        self._last_poll = clock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._heartbeat_thread = not event_loop

    @property
    def subscription(self) -> list[str] | None:
        """The subscribed topics; None when not subscribed."""
        return None if self._topics is None else list(self._topics)

    @property
    def member(self) -> Membership | None:
        """This member's id, generation and assignment as last applied; None when not a member."""
        with self._lock:
            return self._member

    @property
    def reconciling(self) -> bool:
        """Whether the last answer said partitions are still to move to or from this member."""
        with self._lock:
            return self._reconciling

    # --- the caller's thread ------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
        *,
        pattern: re.Pattern[str] | None = None,
    ) -> None:
        """Join the group for ``topics`` (checked by the caller), or for the topics whose whole
        name ``pattern`` matches, now and every ``metadata_max_age`` (then ``topics`` is
        ignored), and start heartbeating."""
        self._pattern = pattern
        self._topics = self._match() if pattern is not None else sorted(topics)
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        with self._lock:
            self._rejoin = True  # until a join succeeds: the next poll tries again
        try:
            self._join()
        except errors.DatabaseUnavailableError as exc:
            if getattr(exc, FROM_CALLBACK, False):
                raise
            # As Kafka's subscribe, which only records the subscription: the first poll joins.
            logger.warning("joining group %s failed (database unreachable): poll() joins", self.group_id, exc_info=True)
        finally:
            if self._thread is None and self._heartbeat_thread:
                self._thread = threading.Thread(
                    target=self._heartbeat_loop, name="oncelog-consumer-heartbeat", daemon=True
                )
                self._thread.start()

    def unsubscribe(self) -> None:
        """Leave the group and forget the subscription (the caller drops the assignment)."""
        self.leave()
        self._topics = None
        self._pattern = None

    def _match(self) -> list[str]:
        """The topics the pattern matches (as Kafka's consumer does: the whole name)."""
        self._matched_at = self._clock()
        pattern = self._pattern
        return [] if pattern is None else sorted(n for n in set(self._list_topics()) if pattern.fullmatch(n))

    def poll(self) -> None:
        """At each poll: note the time (see max_poll_interval), surface a fatal group error, drop
        partitions whose session ran out, rejoin, or apply an answer the heartbeat had."""
        self._last_poll = self._clock()
        if self._topics is None:
            return
        with self._lock:
            fatal, rejoin, member = self._fatal, self._rejoin, self._member
            expired = member is not None and self._clock() - self._last_answer > self._session_timeout
            resubscribe, self._resubscribe = self._resubscribe, None
        if resubscribe is not None and self._pattern is not None:
            # The pattern matches other topics now: join again under the same member id.
            self._topics = resubscribe
            rejoin = True
        if fatal is not None:
            raise fatal
        if expired or rejoin:
            with self._lock:
                # Kept until a join succeeds: one that fails (the database unreachable), or an
                # on_lost that raises, leaves it for the next poll to try again.
                self._rejoin = True
        if expired:
            # The store may have handed our partitions to others by now: stop before fetching.
            logger.warning("no answer from group %s for session_timeout_ms: partitions lost", self.group_id)
            self._lose()
            rejoin = True
        if rejoin:
            self._join()
            return
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is not None:
                self._applying = self._owned | _partitions(pending)
        if pending is not None and self._apply(pending):
            # Let go of the revoked partitions now, not at the next beat: their next owners wait.
            self.heartbeat_once()

    def session_alive(self) -> bool:
        """False once the session may have run out in the store (no answer for
        session_timeout_ms since its request was sent): records fetched after that may be
        another member's already, and the next :meth:`poll` loses the partitions."""
        with self._lock:
            return self._member is None or self._clock() - self._last_answer <= self._session_timeout

    def leave(self) -> None:
        """Leave the group, if a member (the store hands its partitions on at once)."""
        with self._lock:
            member, self._member = self._member, None
        if member is not None:
            self._store.leave_group(group_id=self.group_id, member_id=member.member_id)

    def stop(self) -> None:
        """Stop the heartbeat thread (waiting up to 10 s for it)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    def _join(self) -> None:
        topics = self._topics
        if topics is None:
            raise errors.IllegalStateError("join needs a subscription: subscribe() first")
        if self.member is None and self._subscriptions.partitions:
            # We left (max_poll_interval): the store has handed our partitions on.
            self._lose()
        with self._beat_lock:
            with self._lock:
                member = self._member
                member_id = member.member_id if member is not None else self._lost_member_id
                held = self._held()
            sent = self._clock()
            try:
                joined = self._join_as(topics, member_id, held)
            except errors.UnknownMemberIdError:
                # Removed meanwhile (session timeout): our partitions may have new owners already.
                if self._subscriptions.partitions:
                    self._lose()
                sent = self._clock()
                joined = self._join_as(topics, None, [])
            with self._lock:
                self._lost_member_id = None
                self._rejoin = False
                self._pending = None
                self._last_answer = sent
                self._reconciling = joined.reconciling
                self._applying = self._owned | _partitions(joined)
        if self._apply(joined):
            self.heartbeat_once()

    def _join_as(self, topics: list[str], member_id: str | None, held: list[tuple[str, int]]) -> Membership:
        return self._store.join_group(
            group_id=self.group_id,
            topics=topics,
            session_timeout_ms=self._session_timeout_ms,
            assignor=self._assignor,
            member_id=member_id,
            group_instance_id=self.instance_id,
            client_id=self._client_id,
            owned=held,
        )

    def _held(self) -> list[tuple[str, int]]:
        """Under ``_lock``: every partition the caller's thread holds, is applying, or may take
        from the pending answer."""
        held = self._owned | self._applying
        if self._pending is not None:
            held |= _partitions(self._pending)
        return sorted((tp.topic, tp.partition) for tp in held)

    def _lose(self) -> None:
        """Our partitions may be someone else's already: ``on_lost`` (else ``on_revoke``), and
        drop them. The member stays as it was during the callback, so a commit in it is refused
        by the store unless we still own the partitions there."""
        lost = set(self._subscriptions.partitions)
        callback = self._on_lost if self._on_lost is not None else self._on_revoke
        try:
            if lost and callback is not None:
                _call_back(callback, lost)
        finally:
            self._subscriptions.assign([])
            with self._lock:
                if self._member is not None:
                    # Rejoin under it if the store still has it (then what we still own there
                    # comes back, from the committed offsets).
                    self._lost_member_id = self._member.member_id
                self._member = None
                self._owned = frozenset()
                self._applying = frozenset()
                self._pending = None

    def _apply(self, membership: Membership) -> bool:
        """Apply an answer (``_applying`` already covers it); True if partitions were revoked."""
        try:
            old = set(self._subscriptions.partitions)
            new = _partitions(membership)
            revoked, added = old - new, new - old
            if revoked:
                self._before_revoke(revoked)
                if self._on_revoke is not None:
                    _call_back(self._on_revoke, revoked)
            self._subscriptions.assign(sorted(new))
            with self._lock:
                self._member = membership
                self._owned = frozenset(new)
            try:
                self._fill_positions(sorted(added))
            except errors.RetriableError:
                # The database is unreachable (or the offsets still held): the partitions keep
                # awaiting a position, which the next poll fetches; on_assign is still owed.
                logger.debug("positions of the assigned partitions are fetched at the next poll", exc_info=True)
            if added and self._on_assign is not None:
                _call_back(self._on_assign, added)
            if membership.reconciling:
                self._wake.set()
            return bool(revoked)
        finally:
            with self._lock:
                self._applying = frozenset()

    # --- the heartbeat thread -----------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        try:
            while not self._stop.is_set():
                self.wait_for_change()
                if self._stop.is_set() or not self.heartbeat_once():
                    return
        finally:
            self._store.close()

    def wait_for_change(self) -> None:
        """Until the next heartbeat is due, or the group changes (a member joined or left, a
        partition was let go of): members hear of a change at once, not at their next interval."""
        self._store.wait_for_change(self.group_id, self.heartbeat_interval(), self._wake)
        self._wake.clear()

    def close(self) -> None:
        """Release the group store's own connection (its LISTEN), when the heartbeats stop."""
        self._store.close()

    def heartbeat_interval(self) -> float:
        """Seconds to the next heartbeat: shorter while partitions are still to move."""
        if self.reconciling:
            return max(self._heartbeat_interval / _RECONCILE_SPEEDUP, _MIN_HEARTBEAT_S)
        return self._heartbeat_interval

    def heartbeat_once(self) -> bool:
        """One heartbeat (or a leave, past max_poll_interval); False once the membership is fatally
        lost (the thread then stops). Also called on the caller's thread, to let go at once."""
        if self.member is None:
            return True
        if self._pattern is not None and self._clock() - self._matched_at >= self._metadata_max_age:
            self._rematch()
        if self._clock() - self._last_poll > self._max_poll_interval:
            # Like Kafka: a member that stopped polling leaves, so its partitions move on;
            # the next poll drops them (on_lost) and rejoins.
            logger.warning("no poll for max_poll_interval_ms: leaving group %s", self.group_id)
            try:
                self.leave()
            except errors.OncelogError:
                logger.debug("leaving after max_poll_interval_ms failed", exc_info=True)
            with self._lock:
                self._rejoin = True
            return True
        with self._beat_lock:
            return self._beat()

    def _beat(self) -> bool:
        with self._lock:
            member = self._member
            held = self._held()
        if member is None:
            return True
        sent = self._clock()
        try:
            seen = self._store.heartbeat(
                group_id=self.group_id, member_id=member.member_id, group_instance_id=self.instance_id, owned=held
            )
        except (errors.UnknownMemberIdError, errors.IllegalGenerationError):
            with self._lock:
                self._rejoin = True
        except errors.FencedInstanceIdError as exc:
            with self._lock:
                self._fatal = exc
            return False
        except errors.OncelogError:
            logger.debug("heartbeat failed; retrying", exc_info=True)
        else:
            with self._lock:
                if self._member is None or self._member.member_id != member.member_id:
                    return True  # left or rejoined meanwhile: this answer is for an old member
                self._last_answer = max(self._last_answer, sent)
                self._reconciling = seen.reconciling
                applied = self._member
                if seen.generation != applied.generation or seen.assignment != applied.assignment:
                    self._pending = seen
                else:
                    self._pending = None
        return True

    def _rematch(self) -> None:
        try:
            names = self._match()
        except errors.OncelogError:
            logger.debug("listing topics for the subscription's pattern failed; next time", exc_info=True)
            return
        if names != self._topics:
            with self._lock:
                self._resubscribe = names


def _pause(interrupt: threading.Event, seconds: float) -> None:
    """Wait ``seconds`` or until ``interrupt`` is set; on an event loop (oncelog.aio), sleeps that
    let the loop run, looking at ``interrupt`` between them."""
    if not runtime.on_event_loop():
        interrupt.wait(seconds)
        return
    deadline = time.monotonic() + seconds
    while not interrupt.is_set() and (left := deadline - time.monotonic()) > 0:
        runtime.sleep(min(left, _LISTEN_SLICE_S))


def _partitions(membership: Membership) -> set[TopicPartition]:
    return {TopicPartition(t, p) for t, p in membership.assignment}
