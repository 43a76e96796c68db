"""What ``oncelog topics create`` says of a new topic's retention (oncelog.cli.topics)."""

from __future__ import annotations

from oncelog.cli.topics import _retention


def test_a_new_topics_retention_is_said_in_days_or_hours() -> None:
    assert "604800000 ms (7 days) (the default" in _retention(604_800_000, True)
    assert "7200000 ms (2 hours) (its retention_ms)" in _retention(7_200_000, False)
    assert "1500 ms (its retention_ms)" in _retention(1500, False)
    assert _retention(None, False) == "records are kept for ever"
