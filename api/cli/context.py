"""What every CLI command needs: the database, resolved once per invocation."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from oncelog.embedded import EmbeddedPostgres, default_data_dir
from oncelog.store import migrate
from oncelog.store.engine import create_engine, redact


@dataclass
class CliContext:
    """The options given to ``oncelog`` and the engine made from them."""

    database_url: str | None
    schema: str
    dev_db_dir: str | None
    pg_bin_dir: str | None = None
    #: $XDG_DATA_HOME, read by the entry point: where the embedded cluster lives by default.
    xdg_data_home: str | None = None
    _engine: sa.Engine | None = field(default=None, init=False, repr=False)

    def __repr__(self) -> str:
        url = redact(self.database_url) if self.database_url else None
        return f"CliContext(database_url={url!r}, schema={self.schema!r})"

    @property
    def embedded(self) -> EmbeddedPostgres:
        """The embedded cluster (used when no database URL is given)."""
        return EmbeddedPostgres(self.dev_db_dir or default_data_dir(self.xdg_data_home), bin_dir=self.pg_bin_dir)

    def url(self) -> str:
        """The server's URL; starts (or reuses) the embedded cluster when none was given."""
        if self.database_url:
            return self.database_url
        return self.embedded.start()

    def engine(self, *, migrated: bool = True) -> sa.Engine:
        """An engine on the oncelog database; with ``migrated``, the embedded cluster is upgraded
        to head first (an external server is never migrated implicitly)."""
        if self._engine is None:
            self._engine = create_engine(self.url(), schema=self.schema)
            if migrated and not self.database_url:
                migrate.upgrade(self._engine, schema=self.schema)
        return self._engine

    def close(self) -> None:
        """Release the connection pool."""
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
