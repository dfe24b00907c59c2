"""Alerts in words for people: percentages, whole counts, the tiers (and for staff the keys)."""

from __future__ import annotations

from fairness.telemetry.alert_words import describe


def test_the_kv_alert_says_a_percentage_and_what_the_kv_cache_is():
    text = describe("kv", {"kv_usage": 0.0444123, "waiting": 0, "running": 1})
    assert text.startswith("KV cache 4% full (the engine's memory")
    assert "0.0444" not in text


def test_the_queue_alert_names_the_tiers_that_wait_and_only_staff_see_keys():
    figures = {"waiting": 120.0, "running": 16.0, "ratio": 7.5, "kv_usage": 0.8,
               "now": {"waiting": 95.0, "running": 16.0, "free_slots": 0,
                       "waiting_by_tier": {"interactive": 5, "batch": 90},
                       "waiting_keys": {"gp-abc123": 90, "gp-def456": 5}}}
    public = describe("queue", figures)
    assert public.startswith("95 requests waiting for 16 running")
    assert "Waiting by tier: batch 90, interactive 5." in public
    assert "At its worst 120 requests waited." in public
    assert "gp-abc123" not in public
    staff = describe("queue", figures, public=False)
    assert "Keys waiting: gp-abc123 (90), gp-def456 (5)." in staff


def test_an_averaged_count_keeps_one_decimal_and_large_ones_get_separators():
    assert describe("queue", {"waiting": 1234.0, "running": 2.5}).startswith("1,234 requests waiting for 2.5 running")
    assert describe("usage", {"dropped": 12000, "backlog_max": 10000}).startswith("12,000 usage events dropped")
