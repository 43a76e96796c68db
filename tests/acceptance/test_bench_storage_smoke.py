"""The storage benchmark runs end to end (``--quick``) and reports every figure.

A smoke test only: the output's shape, and that retention really deleted the older half (the log
starts moved and the rows are gone), and that the partitioned table's calls ran and its locks were
read, never how fast anything is.
"""

from __future__ import annotations

from pathlib import Path

from bench.storage import VALUE_SIZES
from tests.support.bench import run_quick


def test_the_storage_benchmark_runs_and_reports_every_value_size(server_url: str, tmp_path: Path) -> None:
    result, stdout = run_quick("bench.storage", server_url, tmp_path)
    assert "| values | records | heap B/record |" in stdout
    assert [c["value_bytes"] for c in result["cases"]] == list(VALUE_SIZES)
    for case in result["cases"]:
        assert case["heap_per_record"] > case["value_bytes"]  # a row holds its value, key and header
        assert case["indexes_per_record"] > 0
        assert case["median"]["deleted"] == case["records"] // 2
        assert case["retention_records_per_s"] > 0 and case["raw_delete_records_per_s"] > 0
        assert case["scaled"]["table_gib"] > 0
    hot = result["hot_path"]
    assert [r["measure"] for r in hot["rows"]] == [
        "append 1",
        "append 10",
        "append 1000",
        "fetch 10 near the end",
        "fetch 1000 near the end",
        "fetch 10 anywhere",
    ]
    assert all(r["plain_ms"] > 0 and r["partitioned_ms"] > 0 for r in hot["rows"])
    # PostgreSQL's rules, read from pg_locks: only ATTACH leaves the table's readers and writers running.
    assert hot["locks"]["create partition of"] == "AccessExclusiveLock"
    assert hot["locks"]["attach"] == "ShareUpdateExclusiveLock"
    assert hot["locks"]["drop"] == "AccessExclusiveLock"
    assert "| fetch 10 anywhere |" in stdout
