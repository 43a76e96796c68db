"""The PostgreSQL JDBC driver and connection details for Spark."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.errors import ConfigurationError
from oncelog.store.engine import database_url, url_hosts

#: Where Debian's libpostgresql-jdbc-java puts the driver.
DEBIAN_JAR = "/usr/share/java/postgresql.jar"
DRIVER_CLASS = "org.postgresql.Driver"

MISSING_JAR = (
    "the PostgreSQL JDBC driver jar was not found (Spark cannot download it: Maven is not reachable here).\n"
    "Install it:  sudo apt-get install -y libpostgresql-jdbc-java   (puts it at /usr/share/java/postgresql.jar)\n"
    "or name a jar you have:  export ONCELOG_JDBC_JAR=/path/to/postgresql-42.x.jar"
)


def find_jdbc_jar(explicit: str | os.PathLike[str] | None = None) -> str:
    """The driver jar: ``explicit``, else Debian's package location. ConfigurationError (saying how
    to get it) when there is none."""
    candidates = [Path(explicit)] if explicit else [Path(DEBIAN_JAR)]
    for jar in candidates:
        if jar.is_file():
            return str(jar)
    raise ConfigurationError(MISSING_JAR + (f"\n(looked at {candidates[0]})" if explicit else ""))


@dataclass(frozen=True)
class JdbcTarget:
    """A JDBC URL and the connection properties Spark's JDBC source and tasks need."""

    url: str
    properties: dict[str, str] = field(repr=False)
    schema: str = "oncelog"

    def __repr__(self) -> str:  # never show the password
        return f"JdbcTarget(url={self.url!r}, user={self.properties.get('user')!r}, schema={self.schema!r})"


#: libpq's target_session_attrs as pgjdbc's targetServerType.
_TARGET_SERVER_TYPES = {
    "any": "any",
    "read-write": "primary",
    "primary": "primary",
    "read-only": "secondary",
    "standby": "secondary",
    "prefer-standby": "preferSecondary",
}


def jdbc_target(url: str, *, schema: str = "oncelog") -> JdbcTarget:
    """Translate a ``postgresql://user:password@host:port/db`` URL for the JDBC driver.

    Several hosts (libpq's ``postgresql://u@h1:5432,h2:5433/db``, or ``?host=...``) become
    pgjdbc's ``jdbc:postgresql://h1:5432,h2:5433/db``, tried in order like libpq does, and
    ``target_session_attrs`` its ``targetServerType`` (``read-write`` is ``primary``): tasks then
    follow a failover to the new primary when they reconnect."""
    parsed = database_url(url)
    hosts = url_hosts(parsed)
    if not hosts or any(h.startswith("/") for h, _ in hosts) or not parsed.database:
        raise ConfigurationError("Spark needs a TCP database URL with a host and a database name")
    attrs = parsed.query.get("target_session_attrs")
    if attrs is not None and (not isinstance(attrs, str) or attrs not in _TARGET_SERVER_TYPES):
        raise ConfigurationError(
            f"target_session_attrs {attrs!r} has no JDBC counterpart (use one of {sorted(_TARGET_SERVER_TYPES)})"
        )
    props = {"driver": DRIVER_CLASS, "user": parsed.username or "postgres"}
    # The password may come as userinfo or as libpq's ?password= query parameter (the JDBC URL
    # carries neither: it goes in the properties, which no repr shows).
    query_password = parsed.query.get("password")
    password = parsed.password or (query_password if isinstance(query_password, str) else None)
    if password:
        props["password"] = str(password)
    authority = ",".join(f"[{h}]:{p or 5432}" if ":" in h else f"{h}:{p or 5432}" for h, p in hosts)
    jdbc = f"jdbc:postgresql://{authority}/{parsed.database}"
    if attrs is not None:
        jdbc += f"?targetServerType={_TARGET_SERVER_TYPES[attrs]}"
    return JdbcTarget(jdbc, props, schema)
