"""Spark integration (read committed records over JDBC, write exactly once).

Installed with the ``spark`` extra; the pipeline arrives with the Spark issue.
"""
