"""A researcher's own pages: their keys by prefix, their usage, their tier in plain words."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from django.utils.html import escape

from fairness.accounting import usage_rollup
from fairness.models import ApiKey, Tier, UsageHourly, UsageRecord
from fairness.portal.reports import tier_policy

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
    for sentence in tier_policy.in_words(Tier.objects.get(name="interactive")):
        assert f"<li>{escape(sentence)}</li>" in html
    assert "429" in html and "borrow" not in html  # alice is interactive: no borrowing to tell
    assert 'href="/capacity/"' in html


def test_the_overview_and_the_keys_page_are_named_apart(researcher_client, cast):
    overview = researcher_client.get("/me/").content.decode()
    assert "<h1>My overview</h1>" in overview and "My keys" not in overview
    assert '<a href="/me/"' in overview and ">My overview</a>" in overview  # its place in the navigation
    assert "<h1>Make and manage keys</h1>" in researcher_client.get("/me/keys/").content.decode()


def test_a_batch_researcher_is_told_that_batch_borrows_idle_slots(cast, client):
    carol = get_user_model().objects.get(username="carol")
    client.force_login(carol)
    html = client.get("/me/").content.decode()
    assert "borrows idle slots beyond these caps" in html
    assert "Up to 1,024 requests per person may wait" in html
    assert "A request that has waited 1 hour without starting is refused with 429." in html


def test_a_wait_of_zero_reads_as_no_waiting_and_no_data_as_a_dash(researcher_client, cast):
    alice = ApiKey.objects.get(pk=cast["alice"].key_id)
    UsageHourly.objects.create(key=alice, hour=hour(3), requests=4, queue_wait_counts=waits(ms_0=4))
    html = researcher_client.get("/me/usage/").content.decode()
    assert "no waiting" in html and "half of your requests started at once" in html
    assert "none</dd>" not in html
    # Today has no requests: a dash, and why.
    assert "no requests in this period" in html


def test_usage_shows_time_to_first_token_per_key(researcher_client, cast):
    alice = ApiKey.objects.get(pk=cast["alice"].key_id)
    bob = ApiKey.objects.get(pk=cast["bob"].key_id)
    now = timezone.now()
    for i, ttft in enumerate([100, 200, 300, 400, 5000]):
        UsageRecord.objects.create(key=alice, request_id=f"a{i}", endpoint="chat", model="m", status=200,
                                   ttft_ms=ttft, created_at=now - dt.timedelta(minutes=5))
    UsageRecord.objects.create(key=alice, request_id="old", endpoint="chat", model="m", status=200,
                               ttft_ms=90_000, created_at=now - dt.timedelta(days=2))
    UsageRecord.objects.create(key=alice, request_id="refused", endpoint="chat", model="m", status=429,
                               ttft_ms=None, created_at=now)
    UsageRecord.objects.create(key=bob, request_id="b", endpoint="chat", model="m", status=200,
                               ttft_ms=77_777, created_at=now)
    page = researcher_client.get("/me/usage/")
    row = next(r for r in page.context["ttft_rows"] if r["key"] == alice)
    assert (row["requests"], row["p50"], row["p95"]) == (5, "300 ms", "5.0 s")
    html = page.content.decode()
    assert "78 s" not in html and "90 s" not in html  # bob's key and the old record stay out


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
    assert '/static/vendor/plotly-basic/plotly-basic.min.js' in html

    daily = researcher_client.get("/me/usage/daily.json").json()
    assert len(daily["days"]) == 30 and daily["days"][-1] == timezone.now().date().isoformat()
    assert daily["requests"][-1] == 19 and daily["requests"][-4] == 1 and sum(daily["requests"]) == 20
    assert daily["completion_tokens"][-1] == 500


def test_a_person_without_keys_is_told_whom_to_ask(cast, client):
    client.force_login(get_user_model().objects.create_user("newbie"))
    html = client.get("/me/").content.decode()
    assert "Ask staff to issue one" in html
    assert client.get("/me/usage/daily.json").json()["requests"] == [0] * 30
