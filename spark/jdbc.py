"""The PostgreSQL JDBC driver and connection details for Spark."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.errors import ConfigurationError
from oncelog.store.engine import database_url

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


def jdbc_target(url: str, *, schema: str = "oncelog") -> JdbcTarget:
    """Translate a ``postgresql://user:password@host:port/db`` URL for the JDBC driver."""
    parsed = database_url(url)
    if not parsed.host or not parsed.database:
        raise ConfigurationError("Spark needs a TCP database URL with a host and a database name")
    props = {"driver": DRIVER_CLASS, "user": parsed.username or "postgres"}
    # The password may come as userinfo or as libpq's ?password= query parameter (the JDBC URL
    # carries neither: it goes in the properties, which no repr shows).
    query_password = parsed.query.get("password")
    password = parsed.password or (query_password if isinstance(query_password, str) else None)
    if password:
        props["password"] = str(password)
    return JdbcTarget(f"jdbc:postgresql://{parsed.host}:{parsed.port or 5432}/{parsed.database}", props, schema)
