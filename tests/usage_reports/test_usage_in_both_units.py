"""A person's usage per day in both units: the raw tokens the engine counted, and beside them the
weighted tokens budgets and fair share charged for them, with the weights stated once on /me/usage/."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import transaction
from django.test import Client, override_settings
from django.utils import timezone

from fairness.accounting import usage_rollup
from fairness.models import ApiKey, UsageHourly, UsageRecord
from fairness.portal.reports.usage_units import days_of, total
from tests.support.usage_records import record

pytestmark = pytest.mark.django_db


def used(key: ApiKey, at: dt.datetime, prompt: int, completion: int, cached: int = 0) -> UsageRecord:
    """One request's record and its hourly row, as the worker's flush writes both."""
    row = record(key, at=at, prompt=prompt, completion=completion)
    UsageRecord.objects.filter(pk=row.pk).update(cached_tokens=cached)
    row.refresh_from_db()
    with transaction.atomic():  # as the flush runs it (its rows are locked: PostgreSQL wants a transaction)
        usage_rollup.add([row])
    return row


def days_table(html: str) -> list[list[str]]:
    """The cells of the per-day table's body rows, tags stripped."""
    body = re.search(r'<table class="usage-days">.*?<tbody>(.*?)</tbody>', html, re.S)
    assert body, "no per-day table"
    rows = re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)
    return [[re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
            for row in rows]


def signed_in(username: str) -> Client:
    from django.contrib.auth import get_user_model

    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return client


def test_each_day_has_the_weighted_tokens_beside_the_raw_ones(tree):
    now = timezone.now()
    used(tree.alice, now, prompt=100, completion=10, cached=40)  # 60 + 0.1 × 40 + 2 × 10 = 84
    used(tree.alice, now - dt.timedelta(days=1), prompt=10, completion=5)  # 10 + 2 × 5 = 20
    days = {d.day: d for d in days_of(tree.alice.owner)}
    today, yesterday = days[now.date()], days[(now - dt.timedelta(days=1)).date()]
    assert (today.prompt_tokens, today.completion_tokens, today.cached_tokens) == (100, 10, 40)
    assert today.weighted_tokens == pytest.approx(84.0)
    assert yesterday.weighted_tokens == pytest.approx(20.0)
    assert len(days) == 30 and sum(d.requests for d in days.values()) == 2
    assert total(list(days.values())).weighted_tokens == pytest.approx(104.0)


def test_the_usage_page_shows_both_units_and_states_the_weights_once(tree):
    now = timezone.now()
    used(tree.alice, now, prompt=1000, completion=300, cached=500)  # 500 + 50 + 600 = 1,150
    html = signed_in("alice").get("/me/usage/").content.decode()
    first = days_table(html)[0]  # newest first
    assert first[1:] == ["1", "1,000", "500", "300", "1,150"]
    rule = ("Budgets and fair share count weighted tokens: 1 × each prompt token, 0.1 × each prompt token the "
            "engine already had cached, and 2 × each completion token.")
    assert html.count(rule) == 1
    assert "<th scope=\"col\" class=\"num\">Weighted tokens</th>" in html


@override_settings(GP_FAIRSHARE_WEIGHT_COMPLETION=3.0, GP_FAIRSHARE_WEIGHT_CACHED_PROMPT=0.5)
def test_the_weights_are_the_deployments(tree):
    used(tree.alice, timezone.now(), prompt=100, completion=10, cached=20)  # 80 + 10 + 30
    html = signed_in("alice").get("/me/usage/").content.decode()
    assert days_table(html)[0][-1] == "120"
    assert "0.5 × each prompt token the engine already had cached, and 3 × each completion token" in html


@override_settings(GP_USAGE_RECORDS_DAYS=3.0)
def test_a_day_whose_records_are_gone_shows_its_raw_tokens_and_no_weighted_count(tree):
    long_ago = (timezone.now() - dt.timedelta(days=10)).replace(hour=12, minute=0, second=0, microsecond=0)
    UsageHourly.objects.create(key=tree.alice, person=tree.alice.owner, hour=long_ago, requests=2,
                               prompt_tokens=70, completion_tokens=7)
    day = next(d for d in days_of(tree.alice.owner) if d.day == long_ago.date())
    assert (day.prompt_tokens, day.cached_tokens, day.weighted_tokens) == (70, None, None)
    assert total(days_of(tree.alice.owner)).weighted_tokens is None  # a sum with a day unknown is unknown
    row = next(r for r in days_table(signed_in("alice").get("/me/usage/").content.decode()) if r[2] == "70")
    assert row[3:] == ["–", "7", "–"]


def test_nobody_elses_usage_is_counted_in_a_persons_days(tree):
    now = timezone.now()
    used(tree.bob, now, prompt=5000, completion=5000)
    used(tree.alice, now, prompt=1, completion=1)
    assert sum(d.prompt_tokens for d in days_of(tree.alice.owner)) == 1
    assert total(days_of(tree.alice.owner)).weighted_tokens == pytest.approx(3.0)
    assert "5,000" not in signed_in("alice").get("/me/usage/").content.decode()
