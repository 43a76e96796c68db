"""Benchmarks for oncelog, measured against raw PostgreSQL baselines on the same server (see ``bench/run``)."""
