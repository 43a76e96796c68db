"""SASL/PLAIN: Kafka clients authenticate as PostgreSQL roles.

A client's SASL/PLAIN user name and password are a PostgreSQL role's: the broker opens the
client's database connections as that role, and PostgreSQL checks the password (as for any of
its clients). From then on every request of the client's connection reaches the store as that
role, so the store's roles, ACLs and ownership rules (a producer id, a group member, a
transactional id belong to the role that made them) hold for Kafka clients as for oncelog's.

The password is kept only inside the engine's URL, in memory, never logged. Engines are cached
per user and password digest, so a client reconnecting does not pay for a new pool; the cache is
bounded and a wrong password opens no engine. A role whose password PostgreSQL does not check
(``trust`` in pg_hba.conf, as the embedded server's superuser) is refused: logging in as it would
prove nothing.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
from collections import OrderedDict

import sqlalchemy as sa

from oncelog import errors
from oncelog.store import create_engine
from oncelog.store.engine import DEFAULT_SCHEMA, Timeouts, database_url

__all__ = ["PLAIN", "Principals", "parse_plain"]

logger = logging.getLogger(__name__)

PLAIN = "PLAIN"
#: Engines kept for authenticated principals (the least recently used goes first).
MAX_PRINCIPALS = 64
#: Each store call of a principal is bounded like a client's request (Kafka's request timeout).
_REQUEST_TIMEOUT_MS = 30_000


def parse_plain(token: bytes) -> tuple[str, str]:
    """(user, password) of a SASL/PLAIN token (RFC 4616: authzid NUL authcid NUL passwd); an
    authorization id other than the user's own is refused (no acting for another role)."""
    parts = token.split(b"\0")
    if len(parts) != 3:
        raise errors.AuthorizationError("a SASL/PLAIN token is authzid NUL user NUL password")
    authzid, user, password = (p.decode("utf-8", errors="strict") for p in parts)
    if not user or (authzid and authzid != user):
        raise errors.AuthorizationError("SASL/PLAIN: an empty user, or an authorization id other than the user")
    return user, password


class Principals:
    """Engines of the PostgreSQL roles clients authenticated as, over the broker's database."""

    def __init__(self, database_url_: str | sa.URL, *, schema: str = DEFAULT_SCHEMA) -> None:
        self._url = database_url(database_url_)
        self._schema = schema
        self._lock = threading.Lock()
        self._engines: OrderedDict[tuple[str, bytes], sa.Engine] = OrderedDict()

    def authenticate(self, user: str, password: str) -> sa.Engine:
        """The engine of role ``user``, after PostgreSQL accepted ``password`` for it (a new
        connection is opened to check: AuthorizationError when it refuses)."""
        key = (user, hashlib.sha256(password.encode()).digest())
        with self._lock:
            engine = self._engines.get(key)
            if engine is not None:
                self._engines.move_to_end(key)
                return engine
        engine = create_engine(
            self._url.set(username=user, password=password),
            schema=self._schema,
            timeouts=Timeouts.for_request(_REQUEST_TIMEOUT_MS),
            pool_size=2,
            max_overflow=6,
        ).execution_options(isolation_level="AUTOCOMMIT")
        try:
            with engine.connect():
                pass  # connecting is the check: PostgreSQL authenticates the role
        except Exception:  # refused, or the server is down: either way not authenticated
            engine.dispose()
            logger.info("SASL/PLAIN: authentication as %r failed", user)
            raise errors.AuthorizationError(f"authentication as {user!r} failed") from None
        if self._accepts_any_password(user):
            engine.dispose()
            logger.warning(
                "SASL/PLAIN: refused %r: PostgreSQL does not check this role's password (trust authentication in "
                "pg_hba.conf), so any password would do",
                user,
            )
            raise errors.AuthorizationError(f"authentication as {user!r} failed")
        with self._lock:
            self._engines[key] = engine
            while len(self._engines) > MAX_PRINCIPALS:
                _, oldest = self._engines.popitem(last=False)
                oldest.dispose()
        return engine

    def _accepts_any_password(self, user: str) -> bool:
        """Whether the server lets ``user`` in with a password nobody knows: then it checks no
        password for that role (trust), and a SASL login as it would prove nothing."""
        probe = sa.create_engine(
            self._url.set(username=user, password=secrets.token_urlsafe(24)), poolclass=sa.NullPool
        )
        try:
            with probe.connect():
                return True
        except Exception:  # refused: the server checks this role's password
            return False
        finally:
            probe.dispose()

    def close(self) -> None:
        """Dispose of every principal's engine."""
        with self._lock:
            engines, self._engines = list(self._engines.values()), OrderedDict()
        for engine in engines:
            engine.dispose()
