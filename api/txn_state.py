"""The client-side transaction state machine of the transactional producer.

A pure class (no I/O, no database) modelled on the state handling of Kafka's Java
``TransactionManager``: an enum of states, an explicit transition table, the error that caused an
error state kept as :attr:`TransactionStateMachine.last_error`, every transition logged at DEBUG
on the ``oncelog.txn_state`` logger, and the checks the producer runs before each call. Invalid
transitions raise :class:`~oncelog.errors.IllegalStateError`; nothing here uses ``assert``, which
``python -O`` strips.

The producer drives it like this::

    UNINITIALIZED --init_transactions()--> INITIALIZING --(producer id)--> READY
    READY --begin_transaction()--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction()--> COMMITTING_TRANSACTION --> READY
    IN_TRANSACTION --abort_transaction()--> ABORTING_TRANSACTION --> READY
    IN_TRANSACTION / COMMITTING_TRANSACTION --(abortable error)--> ABORTABLE_ERROR
    ABORTABLE_ERROR --abort_transaction()--> ABORTING_TRANSACTION --(epoch bump, KIP-360)--> INITIALIZING
    any state --(fatal error)--> FATAL_ERROR, which has no way out: close the producer.

Checks and transitions are separate calls, so another thread may change the state in between;
:meth:`TransactionStateMachine.transition_to` validates again under the lock, so such a race ends
in an :class:`~oncelog.errors.IllegalStateError`, never in a transition the table forbids.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager
from types import MappingProxyType
from typing import Any, NoReturn

from oncelog.errors import FatalError, IllegalStateError, OncelogError, TransactionAbortableError

__all__ = [
    "ERROR_STATES",
    "TRANSITIONS",
    "TransactionStateMachine",
    "TxnState",
    "is_transition_valid",
]

logger = logging.getLogger("oncelog.txn_state")


class TxnState(enum.Enum):
    """The states of a transactional producer, named as in Kafka's ``TransactionManager.State``."""

    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


_S = TxnState

#: The states that record the error that caused them (``transition_to`` requires it).
ERROR_STATES: frozenset[TxnState] = frozenset({_S.ABORTABLE_ERROR, _S.FATAL_ERROR})

# The transition table: source state -> the states it may move to.
#
# It follows ``TransactionManager.State.isTransitionValid`` of Kafka 4.x (the client with
# transaction V2 and 2PC support), which is written per target state. Kafka 2.5 to 3.x lacks the
# edges ABORTABLE_ERROR -> UNINITIALIZED, INITIALIZING -> ABORTABLE_ERROR and
# COMMITTING_TRANSACTION -> INITIALIZING.
#
#   UNINITIALIZED          <- READY, ABORTABLE_ERROR
#   INITIALIZING           <- UNINITIALIZED, COMMITTING_TRANSACTION, ABORTING_TRANSACTION
#   READY                  <- INITIALIZING, COMMITTING_TRANSACTION, ABORTING_TRANSACTION
#   IN_TRANSACTION         <- READY
#   COMMITTING_TRANSACTION <- IN_TRANSACTION
#   ABORTING_TRANSACTION   <- IN_TRANSACTION, ABORTABLE_ERROR
#   ABORTABLE_ERROR        <- IN_TRANSACTION, COMMITTING_TRANSACTION, ABORTABLE_ERROR, INITIALIZING
#   FATAL_ERROR            <- any state ("unconditionally")
#
# What each less obvious edge is for, in Kafka:
#   READY -> UNINITIALIZED             the idempotent producer drops an exhausted producer id
#   ABORTABLE_ERROR -> UNINITIALIZED   recovery from an authorization error (Sender) so the
#                                      application can call init_transactions() again
#   INITIALIZING -> ABORTABLE_ERROR    InitProducerId failed with an abortable error
#   COMMITTING_TRANSACTION -> INITIALIZING, ABORTING_TRANSACTION -> INITIALIZING
#                                      the transaction ended and the client must bump the epoch
#                                      before the next one (KIP-360, after an abortable error;
#                                      in Kafka also when upgrading to transaction V2)
#   ABORTABLE_ERROR -> ABORTABLE_ERROR a later abortable error replaces the recorded one
#
# Differences from Kafka:
#   * FATAL_ERROR -> FATAL_ERROR is invalid here. Kafka's ``default: return true`` branch admits
#     it (and overwrites lastError) although its own comment says FATAL_ERROR is never a valid
#     starting state. Here FATAL_ERROR is terminal and keeps the first fatal error, the root
#     cause; ``transition_to_fatal_error`` is the idempotent way to report another one.
#   * Kafka has no transition from READY or ABORTABLE_ERROR to INITIALIZING, and neither has this
#     table: an epoch bump after an abortable error goes ABORTABLE_ERROR -> ABORTING_TRANSACTION
#     -> INITIALIZING, because the open transaction must be ended first.
TRANSITIONS: Mapping[TxnState, frozenset[TxnState]] = MappingProxyType(
    {
        _S.UNINITIALIZED: frozenset({_S.INITIALIZING, _S.FATAL_ERROR}),
        _S.INITIALIZING: frozenset({_S.READY, _S.ABORTABLE_ERROR, _S.FATAL_ERROR}),
        _S.READY: frozenset({_S.IN_TRANSACTION, _S.UNINITIALIZED, _S.FATAL_ERROR}),
        _S.IN_TRANSACTION: frozenset(
            {_S.COMMITTING_TRANSACTION, _S.ABORTING_TRANSACTION, _S.ABORTABLE_ERROR, _S.FATAL_ERROR}
        ),
        _S.COMMITTING_TRANSACTION: frozenset({_S.READY, _S.INITIALIZING, _S.ABORTABLE_ERROR, _S.FATAL_ERROR}),
        _S.ABORTING_TRANSACTION: frozenset({_S.READY, _S.INITIALIZING, _S.FATAL_ERROR}),
        _S.ABORTABLE_ERROR: frozenset({_S.ABORTING_TRANSACTION, _S.ABORTABLE_ERROR, _S.UNINITIALIZED, _S.FATAL_ERROR}),
        _S.FATAL_ERROR: frozenset(),
    }
)


def is_transition_valid(source: TxnState, target: TxnState) -> bool:
    """Whether the table allows moving from ``source`` to ``target``."""
    return target in TRANSITIONS.get(source, frozenset())


class TransactionStateMachine:
    """The transaction state of one transactional producer, safe to share between threads.

    One lock guards the state and the last error. The ``require_*`` checks raise, in an error
    state, an error the application can act on, as Kafka's ``maybeFailWithError`` does:

    * in FATAL_ERROR, a fresh copy of the fatal error (same class, same message, the recorded
      error as its ``__cause__``), or a :class:`~oncelog.errors.FatalError` wrapping it when the
      recorded error is not itself marked fatal;
    * in ABORTABLE_ERROR, likewise a fresh copy of the abortable error, or a
      :class:`~oncelog.errors.TransactionAbortableError` wrapping it, so the application aborts.

    A fresh instance is raised, not the recorded one, so repeated calls do not pile their frames
    onto one traceback (Kafka also creates a new exception "since it was not thrown because of the
    current call").
    """

    def __init__(self, transactional_id: str | None = None, *, lock: AbstractContextManager[Any] | None = None) -> None:
        """Start in UNINITIALIZED; ``transactional_id`` only labels log lines and messages.

        ``lock``: guard the state with this lock instead of one of its own, so an owner (the
        producer's TransactionManager) can check and transition under the lock that guards its
        other state too; it must then be re-entrant (``threading.RLock``).
        """
        self._lock: AbstractContextManager[Any] = lock if lock is not None else threading.Lock()
        self._state = TxnState.UNINITIALIZED
        self._last_error: Exception | None = None
        self._prefix = f"TransactionalId {transactional_id}: " if transactional_id is not None else ""

    def __repr__(self) -> str:
        return f"<TransactionStateMachine {self._prefix}{self._state.name}>"

    # --- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> TxnState:
        """The current state."""
        return self._state

    @property
    def last_error(self) -> Exception | None:
        """The error that caused the current error state; ``None`` in every other state."""
        return self._last_error

    @property
    def is_fatal(self) -> bool:
        """Whether the producer is in FATAL_ERROR and can only be closed."""
        return self._state is TxnState.FATAL_ERROR

    @property
    def has_error(self) -> bool:
        """Whether the producer is in ABORTABLE_ERROR or FATAL_ERROR."""
        return self._state in ERROR_STATES

    @property
    def is_in_transaction(self) -> bool:
        """Whether a transaction is open: begun and not yet completed (Kafka's ``isInTransaction``).

        True in IN_TRANSACTION, COMMITTING_TRANSACTION, ABORTING_TRANSACTION and ABORTABLE_ERROR.
        Whether records may be sent is :meth:`require_in_transaction`'s question.
        """
        return self._state in _OPEN_TRANSACTION_STATES

    # --- transitions ---------------------------------------------------------------------------

    def transition_to(self, target: TxnState, error: Exception | None = None) -> None:
        """Move to ``target``, or raise :class:`~oncelog.errors.IllegalStateError` and change nothing.

        ``error`` is required when ``target`` is ABORTABLE_ERROR or FATAL_ERROR (it becomes
        :attr:`last_error`) and refused otherwise. Entering any other state clears
        :attr:`last_error`, as in Kafka.
        """
        with self._lock:
            source = self._apply(target, error)
        _log_transition(self._prefix, source, target, error)

    def transition_to_abortable_error(self, error: Exception) -> None:
        """Record an abortable error, as Kafka's ``transitionToAbortableError`` does.

        Nothing changes in ABORTING_TRANSACTION (the transaction is being aborted already, as in
        Kafka) or in FATAL_ERROR (the fatal error stands); elsewhere this is
        ``transition_to(ABORTABLE_ERROR, error)``, checked and applied under one lock, and raises
        where that transition is invalid.
        """
        with self._lock:
            source = self._state
            skip = source is TxnState.ABORTING_TRANSACTION or source is TxnState.FATAL_ERROR
            if not skip:
                self._apply(TxnState.ABORTABLE_ERROR, error)
        if skip:
            logger.debug(
                "%sSkipping transition to ABORTABLE_ERROR in state %s; underlying error: %r",
                self._prefix,
                source.name,
                error,
            )
        else:
            _log_transition(self._prefix, source, TxnState.ABORTABLE_ERROR, error)

    def transition_to_fatal_error(self, error: Exception) -> None:
        """Move to FATAL_ERROR from any state; once fatal, keep the first error and only log this one."""
        with self._lock:
            source = self._state
            if source is not TxnState.FATAL_ERROR:
                self._apply(TxnState.FATAL_ERROR, error)
        if source is TxnState.FATAL_ERROR:
            logger.debug("%sAlready in FATAL_ERROR; not replacing the first error with %r", self._prefix, error)
        else:
            _log_transition(self._prefix, source, TxnState.FATAL_ERROR, error)

    # --- checks used by the producer -----------------------------------------------------------

    def require_initialized(self) -> None:
        """Check that ``init_transactions()`` has completed (any state but the first two).

        Raises :class:`~oncelog.errors.IllegalStateError` in UNINITIALIZED and INITIALIZING, and
        the fatal error in FATAL_ERROR.
        """
        state, error = self._snapshot()
        if state is TxnState.FATAL_ERROR:
            self._raise_recorded(state, error)
        if state is TxnState.UNINITIALIZED:
            raise IllegalStateError(f"{self._prefix}Call init_transactions() first (state is UNINITIALIZED)")
        if state is TxnState.INITIALIZING:
            raise IllegalStateError(
                f"{self._prefix}The producer is still initializing (state is INITIALIZING); "
                "wait for init_transactions() to complete"
            )

    def require_can_begin(self) -> None:
        """Check that ``begin_transaction()`` may be called: the state must be READY."""
        state, error = self._snapshot()
        if state in ERROR_STATES:
            self._raise_recorded(state, error)
        if state is not TxnState.READY:
            raise IllegalStateError(f"{self._prefix}Cannot begin a transaction in state {state.name}; {_HINTS[state]}")

    def require_in_transaction(self) -> None:
        """Check that records or offsets may be sent: the state must be IN_TRANSACTION.

        In ABORTABLE_ERROR this raises the recorded abortable error, so the application aborts.
        """
        state, error = self._snapshot()
        if state in ERROR_STATES:
            self._raise_recorded(state, error)
        if state is not TxnState.IN_TRANSACTION:
            raise IllegalStateError(
                f"{self._prefix}Cannot send records or offsets in state {state.name}; {_HINTS[state]}"
            )

    def require_can_commit(self) -> bool:
        """Check that ``commit_transaction()`` may be called; return whether it is a retry.

        IN_TRANSACTION returns ``False`` (move to COMMITTING_TRANSACTION). COMMITTING_TRANSACTION
        returns ``True``: an earlier commit was interrupted and this call resumes it without a new
        transition (Kafka's cached pending result). In ABORTABLE_ERROR this raises the recorded
        abortable error, so the application aborts.
        """
        state, error = self._snapshot()
        if state in ERROR_STATES:
            self._raise_recorded(state, error)
        if state is TxnState.IN_TRANSACTION:
            return False
        if state is TxnState.COMMITTING_TRANSACTION:
            return True
        raise IllegalStateError(f"{self._prefix}Cannot commit a transaction in state {state.name}; {_HINTS[state]}")

    def require_can_abort(self) -> bool:
        """Check that ``abort_transaction()`` may be called; return whether it is a retry.

        IN_TRANSACTION and ABORTABLE_ERROR return ``False`` (move to ABORTING_TRANSACTION).
        ABORTING_TRANSACTION returns ``True``: an earlier abort was interrupted and this call resumes
        it. As in Kafka an abort cannot interrupt a commit in progress (COMMITTING_TRANSACTION
        raises; retry the commit). FATAL_ERROR raises the fatal error.
        """
        state, error = self._snapshot()
        if state is TxnState.FATAL_ERROR:
            self._raise_recorded(state, error)
        if state is TxnState.IN_TRANSACTION or state is TxnState.ABORTABLE_ERROR:
            return False
        if state is TxnState.ABORTING_TRANSACTION:
            return True
        raise IllegalStateError(f"{self._prefix}Cannot abort a transaction in state {state.name}; {_HINTS[state]}")

    # --- internals -----------------------------------------------------------------------------

    def _apply(self, target: TxnState, error: Exception | None) -> TxnState:
        """Validate and make one transition; the caller holds the lock. Returns the source state."""
        source = self._state
        if not is_transition_valid(source, target):
            raise IllegalStateError(
                f"{self._prefix}Invalid transition attempted from state {_name(source)} to state {_name(target)}"
            )
        if target in ERROR_STATES:
            if error is None:
                raise IllegalStateError(
                    f"{self._prefix}Cannot transition from {source.name} to {target.name} "
                    "without the error that caused it"
                )
        elif error is not None:
            raise IllegalStateError(
                f"{self._prefix}Cannot record an error when transitioning from {source.name} to "
                f"{target.name}; only ABORTABLE_ERROR and FATAL_ERROR keep one"
            )
        self._state = target
        self._last_error = error
        return source

    def _snapshot(self) -> tuple[TxnState, Exception | None]:
        with self._lock:
            return self._state, self._last_error

    def _raise_recorded(self, state: TxnState, error: Exception | None) -> NoReturn:
        """Raise what the application should see in the error state ``state``."""
        if error is None:  # impossible through transition_to; kept so no path raises nothing
            raise IllegalStateError(f"{self._prefix}In state {state.name} without a recorded error")
        wrapper: type[OncelogError] = FatalError
        flag, what = "fatal", "This producer cannot continue"
        if state is TxnState.ABORTABLE_ERROR:
            wrapper = TransactionAbortableError
            flag, what = "abortable", "The transaction cannot commit and must be aborted"
        fresh = _fresh_copy(error) if getattr(error, flag, False) else None
        if fresh is None:
            fresh = wrapper(f"{self._prefix}{what}: {type(error).__name__}: {error}")
        raise fresh from error


_OPEN_TRANSACTION_STATES = frozenset(
    {_S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION, _S.ABORTING_TRANSACTION, _S.ABORTABLE_ERROR}
)

_HINTS: Mapping[TxnState, str] = MappingProxyType(
    {
        _S.UNINITIALIZED: "call init_transactions() first",
        _S.INITIALIZING: "wait for init_transactions() to complete",
        _S.READY: "call begin_transaction() first",
        _S.IN_TRANSACTION: "a transaction is already in progress",
        _S.COMMITTING_TRANSACTION: "a commit is in progress; retry commit_transaction() to complete it",
        _S.ABORTING_TRANSACTION: "an abort is in progress; retry abort_transaction() to complete it",
        _S.ABORTABLE_ERROR: "the transaction must be aborted",
        _S.FATAL_ERROR: "the producer must be closed",
    }
)


def _name(state: object) -> str:
    return state.name if isinstance(state, TxnState) else repr(state)


def _fresh_copy(error: Exception) -> OncelogError | None:
    """A new instance of an oncelog error's class with its message, or ``None`` if none can be made."""
    if not isinstance(error, OncelogError):
        return None
    try:
        fresh = type(error)(error.message)
    except TypeError:  # a subclass whose constructor takes other arguments
        return None
    return fresh


def _log_transition(prefix: str, source: TxnState, target: TxnState, error: Exception | None) -> None:
    if error is None:
        logger.debug("%sTransition from state %s to %s", prefix, source.name, target.name)
    else:
        logger.debug("%sTransition from state %s to error state %s: %r", prefix, source.name, target.name, error)
