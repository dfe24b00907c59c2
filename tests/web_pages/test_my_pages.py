"""A researcher's own pages: their keys by prefix, their usage, their tier in plain words."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.models import ApiKey, Tier, UsageHourly
from fairness.telemetry import usage_rollup

pytestmark = pytest.mark.django_db(transaction=True)


def hour(days_ago: int) -> dt.datetime:
    return timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(days=days_ago)


def waits(**buckets: int) -> list[int]:
    """Queue-wait counts by bucket bound, e.g. waits(ms_50=3)."""
    counts = [0] * usage_rollup.BUCKETS
    for name, n in buckets.items():
        counts[usage_rollup.bucket_of(int(name.removeprefix("ms_")))] += n
    return counts


def test_alice_sees_her_keys_by_prefix_and_nothing_of_bob(researcher_client, cast):
    html = researcher_client.get("/me/").content.decode()
    alice = ApiKey.objects.get(pk=cast["alice"].key_id)
    bob = ApiKey.objects.get(pk=cast["bob"].key_id)
    assert alice.prefix in html and bob.prefix not in html
    assert cast["alice"].secret not in html and "bob" not in html
    assert "alice&#x27;s key" in html  # the label, escaped


def test_the_dashboard_states_the_tier_policy_and_links_to_capacity(researcher_client, cast):
    html = researcher_client.get("/me/").content.decode()
    sentence = Tier.objects.get(name="interactive").policy_sentence()
    assert sentence[0].upper() + sentence[1:] in html
    assert 'href="/capacity/"' in html


def test_usage_figures_come_from_the_hourly_rollup(researcher_client, cast):
    alice = ApiKey.objects.get(pk=cast["alice"].key_id)
    bob = ApiKey.objects.get(pk=cast["bob"].key_id)
    UsageHourly.objects.create(key=alice, hour=hour(0), requests=19, prompt_tokens=1000, completion_tokens=500,
                               queue_wait_counts=waits(ms_50=18, ms_2500=1))
    UsageHourly.objects.create(key=alice, hour=hour(3), requests=1, prompt_tokens=10, completion_tokens=5,
                               queue_wait_counts=waits(ms_30000=1))
    UsageHourly.objects.create(key=alice, hour=hour(45), requests=999, prompt_tokens=9, completion_tokens=9)
    UsageHourly.objects.create(key=bob, hour=hour(0), requests=777, prompt_tokens=7, completion_tokens=7)

    page = researcher_client.get("/me/usage/")
    month, today = page.context["summary"], page.context["today"]
    assert (month["requests"], month["prompt_tokens"], month["completion_tokens"]) == (20, 1010, 505)
    assert (month["queue_wait_p50_ms"], month["queue_wait_p95_ms"]) == (50, 2500)
    assert today["requests"] == 19
    html = page.content.decode()
    assert "≤ 50 ms" in html and "≤ 2.5 s" in html and "1,515" in html
    assert '/static/vendor/plotly/plotly.min.js' in html

    daily = researcher_client.get("/me/usage/daily.json").json()
    assert len(daily["days"]) == 30 and daily["days"][-1] == timezone.now().date().isoformat()
    assert daily["requests"][-1] == 19 and daily["requests"][-4] == 1 and sum(daily["requests"]) == 20
    assert daily["completion_tokens"][-1] == 500


def test_a_person_without_keys_is_told_whom_to_ask(cast, client):
    client.force_login(get_user_model().objects.create_user("newbie"))
    html = client.get("/me/").content.decode()
    assert "Ask staff to issue one" in html
    assert client.get("/me/usage/daily.json").json()["requests"] == [0] * 30
