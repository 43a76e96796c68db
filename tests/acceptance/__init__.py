"""Acceptance tests: the product as a user runs it: processes (the CLI, clients killed and restarted,
child workers), network faults through the fault proxy, server restarts, Spark, benchmarks, static checks."""
