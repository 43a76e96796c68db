"""Integration tests: one real PostgreSQL database per test (a clone of the migrated template), driven
through the store and the client API in this process; races use real threads and connections."""
