"""The consumer's group membership: join, heartbeat, rebalance, leave (Kafka's ConsumerCoordinator).

The store assigns partitions when a member joins or leaves (see docs/design.md, "Consumer groups
and KIP-447"); a member learns of a new generation from its heartbeats. :class:`ConsumerCoordinator`
runs the heartbeat on a background thread and applies what it learns on the caller's thread, at
the next ``poll()``: a new generation changes the assignment (``on_revoke`` / ``on_assign`` run
there), an unknown member id (removed after a session timeout) or an illegal generation makes it
rejoin, and a fenced static member (another instance took its ``group_instance_id``) is fatal: the
next poll raises FencedInstanceIdError.

The store calls go through :class:`GroupStore` (a Protocol; :class:`DatabaseGroupStore` calls
:mod:`oncelog.store.groups`), so the unit tests drive rebalances against a fake.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

import sqlalchemy as sa

from oncelog import errors
from oncelog.positions import SubscriptionState
from oncelog.store import groups
from oncelog.store.groups import Membership
from oncelog.types import TopicPartition

__all__ = ["ConsumerCoordinator", "DatabaseGroupStore", "GroupStore", "Membership", "RebalanceCallback"]

logger = logging.getLogger(__name__)

RebalanceCallback = Callable[[set[TopicPartition]], None]


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
    ) -> Membership:
        """Join (or rejoin with ``member_id``); the member id, generation and assignment."""

    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None) -> Membership:
        """Stay a member; the group's current generation and this member's assignment."""

    def leave_group(self, *, group_id: str, member_id: str) -> None:
        """Leave: the rest of the group is rebalanced at once."""


class DatabaseGroupStore:
    """:class:`GroupStore` on PostgreSQL: each call one :mod:`oncelog.store.groups` call, on a
    connection of the client's for one request (looked up at every call, so a test wrapping a
    function of :mod:`oncelog.store.groups` sees the coordinator's calls too)."""

    def __init__(self, request: Callable[[], contextlib.AbstractContextManager[sa.Connection]]) -> None:
        self._request = request

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
            )

    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None) -> Membership:
        """See :func:`oncelog.store.groups.heartbeat`."""
        with self._request() as conn:
            return groups.heartbeat(conn, group_id=group_id, member_id=member_id, group_instance_id=group_instance_id)

    def leave_group(self, *, group_id: str, member_id: str) -> None:
        """See :func:`oncelog.store.groups.leave_group`."""
        with self._request() as conn:
            groups.leave_group(conn, group_id=group_id, member_id=member_id)


class ConsumerCoordinator:
    """One consumer's membership of its group, and the heartbeat thread that keeps it.

    Threads: :meth:`subscribe`, :meth:`poll`, :meth:`unsubscribe`, :meth:`leave` and :meth:`stop`
    run on the caller's thread, which alone changes the assignment (the :class:`SubscriptionState`
    handed in) and runs the rebalance callbacks. The heartbeat thread (:meth:`heartbeat_once`)
    only records what it learns (a pending generation, a rejoin, a fatal error) and may leave
    after ``max_poll_interval``. ``_lock`` guards the fields both threads touch: the member, the
    pending generation, the rejoin flag and the fatal error. The time of the last poll is one
    float, written by the caller and read by the heartbeat.
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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``fill_positions(partitions)``: give newly assigned partitions their positions (from
        the group's committed offsets); called before ``on_assign``."""
        self._store = store
        self._subscriptions = subscriptions
        self.group_id = group_id
        self.instance_id = group_instance_id
        self._client_id = client_id
        self._session_timeout_ms = session_timeout_ms
        self._heartbeat_interval = heartbeat_interval
        self._max_poll_interval = max_poll_interval
        self._assignor = assignor
        self._fill_positions = fill_positions
        self._clock = clock
        self._topics: list[str] | None = None
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._lock = threading.Lock()
        self._member: Membership | None = None
        self._pending: Membership | None = None
        self._rejoin = False
        self._fatal: errors.OncelogError | None = None
        self._last_poll = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def subscription(self) -> list[str] | None:
        """The subscribed topics; None when not subscribed."""
        return None if self._topics is None else list(self._topics)

    @property
    def member(self) -> Membership | None:
        """This member's id, generation and assignment as last applied; None when not a member."""
        with self._lock:
            return self._member

    # --- the caller's thread ------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> None:
        """Join the group for ``topics`` (checked by the caller) and start heartbeating."""
        self._topics = sorted(topics)
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self._join()
        if self._thread is None:
            self._thread = threading.Thread(target=self._heartbeat_loop, name="oncelog-consumer-heartbeat", daemon=True)
            self._thread.start()

    def unsubscribe(self) -> None:
        """Leave the group and forget the subscription (the caller drops the assignment)."""
        self.leave()
        self._topics = None

    def poll(self) -> None:
        """At each poll: note the time (see max_poll_interval), surface a fatal group error,
        rejoin, or apply a generation the heartbeat saw."""
        self._last_poll = self._clock()
        if self._topics is None:
            return
        with self._lock:
            fatal, rejoin, pending, member = self._fatal, self._rejoin, self._pending, self._member
            self._pending = None
        if fatal is not None:
            raise fatal
        if rejoin:
            self._join()
        elif pending is not None and (member is None or pending.generation != member.generation):
            self._apply(pending)

    def leave(self) -> None:
        """Leave the group, if a member (the store rebalances the others at once)."""
        with self._lock:
            member, self._member = self._member, None
        if member is not None:
            self._store.leave_group(group_id=self.group_id, member_id=member.member_id)

    def stop(self) -> None:
        """Stop the heartbeat thread (waiting up to 10 s for it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _join(self) -> None:
        topics = self._topics
        if topics is None:
            raise errors.IllegalStateError("join needs a subscription: subscribe() first")
        member = self.member
        try:
            joined = self._join_as(topics, member.member_id if member else None)
        except errors.UnknownMemberIdError:
            # Removed meanwhile (session timeout): join as a new member.
            joined = self._join_as(topics, None)
        with self._lock:
            self._rejoin = False
            self._pending = None
        if self._subscriptions.partitions and (member is None or joined.member_id != member.member_id):
            # A new member id (we left, or were removed): whatever we owned may have been read and
            # committed by others meanwhile. Revoke everything, so the positions of partitions we
            # get back come from the group's committed offsets, not from our stale ones.
            self._revoke_all()
        self._apply(joined)

    def _join_as(self, topics: list[str], member_id: str | None) -> Membership:
        return self._store.join_group(
            group_id=self.group_id,
            topics=topics,
            session_timeout_ms=self._session_timeout_ms,
            assignor=self._assignor,
            member_id=member_id,
            group_instance_id=self.instance_id,
            client_id=self._client_id,
        )

    def _revoke_all(self) -> None:
        old = set(self._subscriptions.partitions)
        if old and self._on_revoke is not None:
            self._on_revoke(old)
        self._subscriptions.assign([])

    def _apply(self, membership: Membership) -> None:
        current = self.member
        if current is not None and membership.generation > current.generation + 1:
            # Generations were missed: a partition may have moved away and back meanwhile (its
            # other owner reading and committing). Start again from the group's committed offsets.
            self._revoke_all()
        old = set(self._subscriptions.partitions)
        new = {TopicPartition(t, p) for t, p in membership.assignment}
        revoked, added = old - new, new - old
        if revoked and self._on_revoke is not None:
            self._on_revoke(revoked)
        with self._lock:
            self._member = membership
        self._subscriptions.assign(sorted(new))
        self._fill_positions(sorted(added))
        if added and self._on_assign is not None:
            self._on_assign(added)

    # --- the heartbeat thread -----------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self._heartbeat_interval):
            if not self.heartbeat_once():
                return

    def heartbeat_once(self) -> bool:
        """One heartbeat (or a leave, past max_poll_interval); False once the membership is fatally
        lost (the thread then stops)."""
        member = self.member
        if member is None:
            return True
        if self._clock() - self._last_poll > self._max_poll_interval:
            # Like Kafka: a member that stopped polling leaves, so its partitions move on;
            # the next poll rejoins.
            logger.warning("no poll for max_poll_interval_ms: leaving group %s", self.group_id)
            try:
                self.leave()
            except errors.OncelogError:
                logger.debug("leaving after max_poll_interval_ms failed", exc_info=True)
            with self._lock:
                self._rejoin = True
            return True
        try:
            seen = self._store.heartbeat(
                group_id=self.group_id, member_id=member.member_id, group_instance_id=self.instance_id
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
            if seen.generation != member.generation:
                with self._lock:
                    self._pending = seen
        return True
