"""The SQL layer of oncelog: the only place where SQL is written or sent.

The public API (:mod:`oncelog`) calls one typed function here per protocol operation; the rules
themselves live in SQL functions installed by the migrations, so every client (this package,
psql, JDBC) gets the same guarantees.
"""

from oncelog.store.engine import DEFAULT_SCHEMA, create_engine, database_url, redact, validate_schema

__all__ = ["DEFAULT_SCHEMA", "create_engine", "database_url", "redact", "validate_schema"]
