"""Database errors mapped to oncelog errors, in one place.

The SQL functions raise protocol errors with SQLSTATE codes of our own (class ``OL``); each maps
to the class in :mod:`oncelog.errors` that declares it. Driver and server failures map to the
retriable infrastructure errors, so callers never see a raw driver exception.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import psycopg
import sqlalchemy as sa

from oncelog import errors

#: SQLSTATEs after which the same request may succeed when sent again.
_SERIALIZATION = {"40001", "40P01"}  # serialization_failure, deadlock_detected
_UNAVAILABLE_PREFIXES = ("08", "57P")  # connection exceptions; admin/crash shutdown, cannot connect now
_UNAVAILABLE = {"53300"}  # too_many_connections
#: A connection the server refused for good (libpq reports its FATAL without a SQLSTATE): asking
#: again cannot succeed, so these are not retriable, unlike a server that is down or restarting.
#: Matched on PostgreSQL's English messages; with other lc_messages they stay retriable, as before.
_REFUSED_FOR_GOOD = (
    (re.compile(r'FATAL:\s+database ".*" does not exist'), errors.ConfigurationError),
    (re.compile(r'FATAL:\s+role ".*" does not exist'), errors.AuthorizationError),
    (re.compile(r"FATAL:\s+.*authentication failed for user"), errors.AuthorizationError),
    (re.compile(r"FATAL:\s+no pg_hba\.conf entry"), errors.AuthorizationError),
    (re.compile(r"FATAL:\s+permission denied for database"), errors.AuthorizationError),
    # libpq's own answer when the server asks for a password and the URL has none.
    (re.compile(r"fe_sendauth: no password supplied"), errors.AuthorizationError),
)
#: lock_not_available (lock_timeout) and query_canceled (statement_timeout, or a cancel request):
#: the client's own bound on a statement fired; the statement's transaction was rolled back.
_TIMED_OUT = {"55P03", "57014"}


def _sqlstate(exc: BaseException) -> str | None:
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    return getattr(orig, "sqlstate", None)


def _message(exc: BaseException) -> str:
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    diag = getattr(orig, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    return str(primary or orig).strip()


def translate(exc: BaseException) -> errors.OncelogError | None:
    """The oncelog error for a database exception, or None if ``exc`` is not a database error."""
    if isinstance(exc, errors.OncelogError):
        return exc
    if not isinstance(exc, sa.exc.DBAPIError | psycopg.Error):
        return None
    state = _sqlstate(exc)
    if state is not None:
        cls = errors.error_for_sqlstate(state)
        if cls is not None:
            return cls(_message(exc))
        if state in _SERIALIZATION:
            return errors.SerializationFailureError(_message(exc))
        if state in _TIMED_OUT:
            return errors.RequestTimeoutError(_message(exc))
        if state in _UNAVAILABLE or state.startswith(_UNAVAILABLE_PREFIXES):
            return errors.DatabaseUnavailableError(_message(exc))
        if state in {"3F000", "42P01", "42883"}:  # invalid_schema_name, undefined_table, undefined_function
            return errors.SchemaNotReadyError(f"{_message(exc)}: run `oncelog db upgrade`")
        # ACL denials (OL501..OL503) were mapped above, to AuthorizationError's subclasses.
        if state == "42501":  # insufficient_privilege
            return errors.AuthorizationError(_message(exc))
        if state.startswith("22") or state == "23514":
            # Data exceptions and check violations: a value the database cannot take.
            return errors.InvalidRequestError(_message(exc))
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    if isinstance(orig, psycopg.DataError) and state is None:
        # Refused by the driver before sending (a NUL character in text, an out-of-range number).
        return errors.InvalidRequestError(_message(exc))
    if (isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated) or isinstance(
        orig, psycopg.OperationalError | psycopg.InterfaceError
    ):
        # No SQLSTATE: the connection broke (server gone, proxy cut, reset), or the server
        # refused it, which only a changed URL, role or pg_hba.conf can cure.
        message = _message(exc)
        for pattern, cls in _REFUSED_FOR_GOOD:
            if pattern.search(message):
                return cls(f"{message} (the connection was refused; retrying will not help)")
        return errors.DatabaseUnavailableError(message or "connection lost")
    return None


def refusal(sqlstate: str, message: str) -> errors.OncelogError:
    """The oncelog error for a protocol refusal a SQL function reported as data (an OL code and
    its message, as produce_batches_v1 answers each batch) rather than raised."""
    cls = errors.error_for_sqlstate(sqlstate)
    if cls is None:  # a code this client does not know (a newer server): still a refusal
        return errors.InvalidRequestError(f"{message} (SQLSTATE {sqlstate})")
    return cls(message)


@contextlib.contextmanager
def mapped_errors() -> Iterator[None]:
    """Re-raise database exceptions inside the block as oncelog errors, chained to the driver's
    error. The cause a user sees is psycopg's one exception (the database's message and context),
    without a traceback of its own and without SQLAlchemy's wrapper: a failure reads in a few
    lines, not three chained tracebacks."""
    try:
        yield
    except (sa.exc.DBAPIError, psycopg.Error) as exc:
        mapped = translate(exc)
        if mapped is None:
            raise
        orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else None
        cause = orig if isinstance(orig, BaseException) else exc
        raise mapped from cause.with_traceback(None)
