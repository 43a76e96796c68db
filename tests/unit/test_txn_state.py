"""The transactional producer's state machine, exhaustively and without a database.

The expected behaviour is written out here by hand (``ALLOWED`` and ``REQUIRE``), from Kafka's
``TransactionManager`` rather than from ``oncelog.txn_state``, so a wrong table in the module
cannot make its own tests pass.
"""

from __future__ import annotations

import ast
import itertools
import logging
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog import errors, txn_state
from oncelog.txn_state import TRANSITIONS, TransactionStateMachine, TxnState

NAMES = [
    "UNINITIALIZED",
    "INITIALIZING",
    "READY",
    "IN_TRANSACTION",
    "COMMITTING_TRANSACTION",
    "ABORTING_TRANSACTION",
    "ABORTABLE_ERROR",
    "FATAL_ERROR",
]
ERROR_NAMES = {"ABORTABLE_ERROR", "FATAL_ERROR"}

# Kafka 4.x TransactionManager.State.isTransitionValid, minus FATAL_ERROR -> FATAL_ERROR.
ALLOWED: set[tuple[str, str]] = {
    ("UNINITIALIZED", "INITIALIZING"),
    ("INITIALIZING", "READY"),
    ("INITIALIZING", "ABORTABLE_ERROR"),
    ("READY", "IN_TRANSACTION"),
    ("READY", "UNINITIALIZED"),
    ("IN_TRANSACTION", "COMMITTING_TRANSACTION"),
    ("IN_TRANSACTION", "ABORTING_TRANSACTION"),
    ("IN_TRANSACTION", "ABORTABLE_ERROR"),
    ("COMMITTING_TRANSACTION", "READY"),
    ("COMMITTING_TRANSACTION", "INITIALIZING"),
    ("COMMITTING_TRANSACTION", "ABORTABLE_ERROR"),
    ("ABORTING_TRANSACTION", "READY"),
    ("ABORTING_TRANSACTION", "INITIALIZING"),
    ("ABORTABLE_ERROR", "ABORTING_TRANSACTION"),
    ("ABORTABLE_ERROR", "ABORTABLE_ERROR"),
    ("ABORTABLE_ERROR", "UNINITIALIZED"),
    ("UNINITIALIZED", "FATAL_ERROR"),
    ("INITIALIZING", "FATAL_ERROR"),
    ("READY", "FATAL_ERROR"),
    ("IN_TRANSACTION", "FATAL_ERROR"),
    ("COMMITTING_TRANSACTION", "FATAL_ERROR"),
    ("ABORTING_TRANSACTION", "FATAL_ERROR"),
    ("ABORTABLE_ERROR", "FATAL_ERROR"),
}

# What each check does in each state: a return value, or the kind of error it raises.
ILLEGAL, ABORTABLE, FATAL = "raises IllegalStateError", "raises an abortable error", "raises a fatal error"
REQUIRE: dict[str, dict[str, object]] = {
    "require_initialized": {
        "UNINITIALIZED": ILLEGAL,
        "INITIALIZING": ILLEGAL,
        "READY": None,
        "IN_TRANSACTION": None,
        "COMMITTING_TRANSACTION": None,
        "ABORTING_TRANSACTION": None,
        "ABORTABLE_ERROR": None,
        "FATAL_ERROR": FATAL,
    },
    "require_can_begin": {
        "UNINITIALIZED": ILLEGAL,
        "INITIALIZING": ILLEGAL,
        "READY": None,
        "IN_TRANSACTION": ILLEGAL,
        "COMMITTING_TRANSACTION": ILLEGAL,
        "ABORTING_TRANSACTION": ILLEGAL,
        "ABORTABLE_ERROR": ABORTABLE,
        "FATAL_ERROR": FATAL,
    },
    "require_in_transaction": {
        "UNINITIALIZED": ILLEGAL,
        "INITIALIZING": ILLEGAL,
        "READY": ILLEGAL,
        "IN_TRANSACTION": None,
        "COMMITTING_TRANSACTION": ILLEGAL,
        "ABORTING_TRANSACTION": ILLEGAL,
        "ABORTABLE_ERROR": ABORTABLE,
        "FATAL_ERROR": FATAL,
    },
    "require_can_commit": {  # returns whether the call resumes an interrupted commit
        "UNINITIALIZED": ILLEGAL,
        "INITIALIZING": ILLEGAL,
        "READY": ILLEGAL,
        "IN_TRANSACTION": False,
        "COMMITTING_TRANSACTION": True,
        "ABORTING_TRANSACTION": ILLEGAL,
        "ABORTABLE_ERROR": ABORTABLE,
        "FATAL_ERROR": FATAL,
    },
    "require_can_abort": {  # returns whether the call resumes an interrupted abort
        "UNINITIALIZED": ILLEGAL,
        "INITIALIZING": ILLEGAL,
        "READY": ILLEGAL,
        "IN_TRANSACTION": False,
        "COMMITTING_TRANSACTION": ILLEGAL,
        "ABORTING_TRANSACTION": True,
        "ABORTABLE_ERROR": False,
        "FATAL_ERROR": FATAL,
    },
}

STATES = [TxnState[name] for name in NAMES]


def _path_to(name: str) -> list[str]:
    """The shortest path of allowed transitions from UNINITIALIZED to ``name``, found in ``ALLOWED``."""
    paths = {"UNINITIALIZED": ["UNINITIALIZED"]}
    todo = deque(["UNINITIALIZED"])
    while todo:
        here = todo.popleft()
        for source, target in sorted(ALLOWED):
            if source == here and target not in paths:
                paths[target] = [*paths[here], target]
                todo.append(target)
    return paths[name]


def machine_in(state: TxnState, error: Exception | None = None) -> TransactionStateMachine:
    """A machine driven to ``state`` through valid transitions; ``error`` is the one recorded there."""
    machine = TransactionStateMachine("tx-1")
    for step in _path_to(state.name)[1:]:
        if step in ERROR_NAMES:
            cause = error if step == state.name and error is not None else RuntimeError(f"into {step}")
            machine.transition_to(TxnState[step], cause)
        else:
            machine.transition_to(TxnState[step])
    return machine


def _error_for(target: TxnState) -> Exception | None:
    return RuntimeError(f"cause of {target.name}") if target.name in ERROR_NAMES else None


# --- the table -------------------------------------------------------------------------------


def test_states_are_kafkas() -> None:
    assert [s.name for s in TxnState] == NAMES


def test_table_is_the_literal_list() -> None:
    assert set(TRANSITIONS) == set(TxnState)
    table = {(source.name, target.name) for source, targets in TRANSITIONS.items() for target in targets}
    assert table == ALLOWED
    assert all(isinstance(targets, frozenset) for targets in TRANSITIONS.values())
    with pytest.raises(TypeError):
        TRANSITIONS[TxnState.READY] = frozenset()  # type: ignore[index]


@pytest.mark.parametrize(("source", "target"), list(itertools.product(STATES, STATES)), ids=str)
def test_every_pair(source: TxnState, target: TxnState) -> None:
    machine = machine_in(source)
    before = machine.last_error
    error = _error_for(target)
    assert txn_state.is_transition_valid(source, target) == ((source.name, target.name) in ALLOWED)
    if (source.name, target.name) in ALLOWED:
        machine.transition_to(target, error)
        assert machine.state is target
        assert machine.last_error is error
    else:
        with pytest.raises(errors.IllegalStateError) as raised:
            machine.transition_to(target, error)
        assert source.name in str(raised.value)
        assert target.name in str(raised.value)
        assert machine.state is source
        assert machine.last_error is before


@pytest.mark.parametrize(
    ("source", "target"),
    [(TxnState[s], TxnState[t]) for s, t in sorted(ALLOWED) if t in ERROR_NAMES],
    ids=str,
)
def test_error_states_require_the_error(source: TxnState, target: TxnState) -> None:
    machine = machine_in(source)
    before = machine.last_error
    with pytest.raises(errors.IllegalStateError, match="without the error"):
        machine.transition_to(target)
    assert machine.state is source
    assert machine.last_error is before


@pytest.mark.parametrize(
    ("source", "target"),
    [(TxnState[s], TxnState[t]) for s, t in sorted(ALLOWED) if t not in ERROR_NAMES],
    ids=str,
)
def test_other_states_refuse_an_error(source: TxnState, target: TxnState) -> None:
    machine = machine_in(source)
    with pytest.raises(errors.IllegalStateError, match="only ABORTABLE_ERROR and FATAL_ERROR"):
        machine.transition_to(target, RuntimeError("stray"))
    assert machine.state is source


def test_paths_reach_every_state() -> None:
    for state in STATES:
        assert machine_in(state).state is state


# --- errors ----------------------------------------------------------------------------------


def test_fatal_error_is_terminal() -> None:
    first = errors.ProducerFencedError()
    machine = machine_in(TxnState.FATAL_ERROR, first)
    for target in STATES:
        with pytest.raises(errors.IllegalStateError):
            machine.transition_to(target, _error_for(target))
        assert machine.state is TxnState.FATAL_ERROR
        assert machine.last_error is first
    machine.transition_to_fatal_error(RuntimeError("second"))
    machine.transition_to_abortable_error(RuntimeError("late"))
    assert machine.state is TxnState.FATAL_ERROR
    assert machine.last_error is first


@pytest.mark.parametrize("source", STATES, ids=str)
def test_transition_to_fatal_error_from_any_state(source: TxnState) -> None:
    machine = machine_in(source)
    error = errors.ProducerFencedError()
    machine.transition_to_fatal_error(error)
    assert machine.state is TxnState.FATAL_ERROR
    assert machine.is_fatal
    if source is not TxnState.FATAL_ERROR:
        assert machine.last_error is error


@pytest.mark.parametrize("source", STATES, ids=str)
def test_transition_to_abortable_error(source: TxnState) -> None:
    machine = machine_in(source)
    before = machine.last_error
    error = errors.InvalidProducerEpochError()
    if source in (TxnState.ABORTING_TRANSACTION, TxnState.FATAL_ERROR):  # Kafka skips while aborting
        machine.transition_to_abortable_error(error)
        assert machine.state is source
        assert machine.last_error is before
    elif (source.name, "ABORTABLE_ERROR") in ALLOWED:
        machine.transition_to_abortable_error(error)
        assert machine.state is TxnState.ABORTABLE_ERROR
        assert machine.last_error is error
    else:
        with pytest.raises(errors.IllegalStateError):
            machine.transition_to_abortable_error(error)
        assert machine.state is source


def test_last_error_is_kept_in_error_states_and_cleared_on_leaving() -> None:
    machine = machine_in(TxnState.IN_TRANSACTION)
    first, second = errors.TransactionTimeoutError(), errors.InvalidProducerEpochError()
    seen: list[Exception | None] = []
    machine.transition_to(TxnState.ABORTABLE_ERROR, first)
    seen.append(machine.last_error)
    machine.transition_to(TxnState.ABORTABLE_ERROR, second)  # Kafka replaces it
    seen.append(machine.last_error)
    machine.transition_to(TxnState.ABORTING_TRANSACTION)  # leaving the error state clears it
    seen.append(machine.last_error)
    machine.transition_to(TxnState.INITIALIZING)  # KIP-360 epoch bump
    machine.transition_to(TxnState.READY)
    seen.append(machine.last_error)
    assert seen == [first, second, None, None]
    assert machine.state is TxnState.READY and not machine.has_error


# --- the checks ------------------------------------------------------------------------------


def _check_outcome(
    call: Callable[[], object], expected: object, recorded: Exception | None, expected_type: type[Exception] | None
) -> None:
    if expected == ILLEGAL:
        with pytest.raises(errors.IllegalStateError):
            call()
    elif expected in (ABORTABLE, FATAL):
        with pytest.raises(errors.OncelogError) as raised:
            call()
        flag = "abortable" if expected == ABORTABLE else "fatal"
        assert getattr(raised.value, flag), raised.value
        assert raised.value.__cause__ is recorded
        assert raised.value is not recorded
        if expected_type is not None:
            assert type(raised.value) is expected_type
    else:
        assert call() is expected


@pytest.mark.parametrize("state", STATES, ids=str)
@pytest.mark.parametrize("check", sorted(REQUIRE))
@pytest.mark.parametrize("kind", ["oncelog", "foreign"])
def test_checks_in_every_state(check: str, state: TxnState, kind: str) -> None:
    recorded: Exception | None = None
    expected_type: type[Exception] | None = None
    if state is TxnState.ABORTABLE_ERROR:
        if kind == "oncelog":
            recorded, expected_type = errors.InvalidProducerEpochError("old epoch"), errors.InvalidProducerEpochError
        else:
            recorded, expected_type = ValueError("broken"), errors.TransactionAbortableError
    elif state is TxnState.FATAL_ERROR:
        if kind == "oncelog":
            recorded, expected_type = errors.ProducerFencedError("fenced"), errors.ProducerFencedError
        else:
            recorded, expected_type = ValueError("broken"), errors.FatalError
    machine = machine_in(state, recorded)
    _check_outcome(getattr(machine, check), REQUIRE[check][state.name], recorded, expected_type)
    assert machine.state is state  # checks never change the state
    assert machine.last_error is (recorded if state.name in ERROR_NAMES else None)


def test_check_messages_name_the_state() -> None:
    machine = machine_in(TxnState.READY)
    with pytest.raises(errors.IllegalStateError, match=r"tx-1.*READY.*begin_transaction"):
        machine.require_in_transaction()
    with pytest.raises(errors.IllegalStateError, match="init_transactions"):
        TransactionStateMachine().require_can_begin()


def test_wrapped_error_keeps_the_cause_message() -> None:
    machine = machine_in(TxnState.ABORTABLE_ERROR, ValueError("disk on fire"))
    with pytest.raises(errors.TransactionAbortableError, match="disk on fire"):
        machine.require_in_transaction()


def test_repeated_checks_do_not_grow_the_recorded_traceback() -> None:
    fenced = errors.ProducerFencedError()
    machine = machine_in(TxnState.FATAL_ERROR, fenced)
    raised = []
    for _ in range(3):
        with pytest.raises(errors.ProducerFencedError) as info:
            machine.require_can_begin()
        raised.append(info.value)
    assert len({id(e) for e in raised}) == 3
    assert fenced.__traceback__ is None


@pytest.mark.parametrize("state", STATES, ids=str)
def test_properties(state: TxnState) -> None:
    machine = machine_in(state)
    assert machine.state is state
    assert machine.is_fatal == (state.name == "FATAL_ERROR")
    assert machine.has_error == (state.name in ERROR_NAMES)
    assert machine.is_in_transaction == (
        state.name in {"IN_TRANSACTION", "COMMITTING_TRANSACTION", "ABORTING_TRANSACTION", "ABORTABLE_ERROR"}
    )
    assert state.name in repr(machine)


# --- logging, threads, no assert -------------------------------------------------------------


def test_every_transition_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="oncelog.txn_state")
    machine = TransactionStateMachine("tx-log")
    steps: list[tuple[TxnState, Exception | None]] = [
        (TxnState.INITIALIZING, None),
        (TxnState.READY, None),
        (TxnState.IN_TRANSACTION, None),
        (TxnState.ABORTABLE_ERROR, errors.TransactionTimeoutError()),
        (TxnState.FATAL_ERROR, errors.ProducerFencedError()),
    ]
    source = machine.state
    for target, error in steps:
        machine.transition_to(target, error)
        record = caplog.records[-1]
        assert record.name == "oncelog.txn_state"
        assert record.levelno == logging.DEBUG
        message = record.getMessage()
        assert "tx-log" in message and source.name in message and target.name in message
        if error is not None:
            assert "error state" in message and type(error).__name__ in message
        source = target
    assert len(caplog.records) == len(steps)


def test_racing_threads_make_one_transition() -> None:
    """Check-and-set is atomic: of many threads beginning at once, exactly one succeeds."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to open any race window
    try:
        for _ in range(50):
            _race_once(threads_count=8)
    finally:
        sys.setswitchinterval(interval)


def _race_once(threads_count: int) -> None:
    machine = machine_in(TxnState.READY)
    barrier = threading.Barrier(threads_count)
    outcomes: list[str] = []
    lock = threading.Lock()

    def begin() -> None:
        barrier.wait()
        try:
            machine.transition_to(TxnState.IN_TRANSACTION)
            result = "won"
        except errors.IllegalStateError:
            result = "refused"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=begin) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["refused"] * (threads_count - 1) + ["won"]
    assert machine.state is TxnState.IN_TRANSACTION


def test_module_never_uses_assert() -> None:
    source = Path(txn_state.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source)
    assert not [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]


# --- random sequences against a reference model ----------------------------------------------


class Model:
    """The reference: a state name and the recorded error, driven only by ``ALLOWED`` and ``REQUIRE``."""

    def __init__(self) -> None:
        self.state = "UNINITIALIZED"
        self.error: Exception | None = None

    def transition(self, target: str, error: Exception | None) -> bool:
        valid = (self.state, target) in ALLOWED and ((target in ERROR_NAMES) == (error is not None))
        if valid:
            self.state, self.error = target, error
        return valid


ACTIONS = st.one_of(
    st.tuples(st.just("to"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("check"), st.sampled_from(sorted(REQUIRE)), st.booleans()),
    st.tuples(st.just("abortable_error"), st.just(""), st.booleans()),
    st.tuples(st.just("fatal_error"), st.just(""), st.booleans()),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(ACTIONS, max_size=60))
def test_random_sequences_follow_the_model(actions: list[tuple[str, str, bool]]) -> None:
    machine, model = TransactionStateMachine(), Model()
    for number, (kind, name, flag) in enumerate(actions):
        error: Exception | None
        if kind == "to":
            error = RuntimeError(f"error {number}") if flag else None
            if model.transition(name, error):
                machine.transition_to(TxnState[name], error)
            else:
                with pytest.raises(errors.IllegalStateError):
                    machine.transition_to(TxnState[name], error)
        elif kind == "check":
            _check_outcome(getattr(machine, name), REQUIRE[name][model.state], model.error, None)
        elif kind == "abortable_error":
            error = errors.TransactionAbortableError(f"error {number}") if flag else RuntimeError(f"error {number}")
            skipped = model.state in {"ABORTING_TRANSACTION", "FATAL_ERROR"}  # no change, as in Kafka
            if skipped or model.transition("ABORTABLE_ERROR", error):
                machine.transition_to_abortable_error(error)
            else:
                with pytest.raises(errors.IllegalStateError):
                    machine.transition_to_abortable_error(error)
        else:
            error = errors.ProducerFencedError(f"error {number}")
            if model.state != "FATAL_ERROR":
                model.transition("FATAL_ERROR", error)
            machine.transition_to_fatal_error(error)
        assert machine.state.name == model.state, (number, kind, name)
        assert machine.last_error is model.error
