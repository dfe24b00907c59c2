"""Prompt tokens the engine found in its prefix cache are charged at their own weight, and the
engine's count of them is read as hostile input: it can lower a charge, never below what the
uncached prompt alone would cost, and never make one negative."""

import datetime as dt

import pytest
from django.utils import timezone

from fairness.accounting import usage
from fairness.gateway.sse_relay import StreamTally
from fairness.models import Budget, UsageRecord
from fairness.portal.reports import usage as usage_report
from fairness.scheduling.fair_share import weighted_tokens
from fairness.telemetry import budget_status
from tests.usage.test_usage_flush import event, push


def test_cached_prompt_tokens_are_charged_at_their_own_weight():
    # 100 prompt tokens of which 60 cached, 10 completion: 40 x 1 + 60 x 0.1 + 10 x 2
    assert weighted_tokens(100, 10, 1.0, 2.0, cached=60, w_cached=0.1) == pytest.approx(66.0)


def test_without_a_cached_weight_cached_tokens_cost_what_prompt_tokens_do():
    assert weighted_tokens(100, 10, 1.0, 2.0, cached=60) == weighted_tokens(100, 10, 1.0, 2.0) == 120.0


@pytest.mark.parametrize(("cached", "charged"), [
    (500, 0.1 * 100 + 20),  # more cached than the prompt: the whole prompt, no more
    (-50, 100 + 20),  # negative: nothing cached, no credit
    (float("nan"), 100 + 20),
    (float("inf"), 0.1 * 100 + 20),
    (2.5, 97.5 + 0.25 + 20),  # a fraction is weighed as it is
])
def test_a_hostile_cached_count_neither_credits_nor_undercuts_the_prompt(cached, charged):
    assert weighted_tokens(100, 10, 1.0, 2.0, cached=cached, w_cached=0.1) == pytest.approx(charged)


def test_a_negative_prompt_leaves_nothing_to_be_cached():
    assert weighted_tokens(-100, 10, 1.0, 2.0, cached=50, w_cached=0.1) == 20.0


def tally_of(usage_object) -> StreamTally:
    tally = StreamTally()
    tally.take_usage(usage_object)
    return tally


@pytest.mark.parametrize(("details", "cached"), [
    ({"cached_tokens": 64}, 64),
    ({"cached_tokens": 64.9}, 64),
    ({"cached_tokens": 10_000}, 100),  # at most the prompt
    ({"cached_tokens": -3}, 0),
    ({"cached_tokens": "64"}, 0),
    ({"cached_tokens": True}, 0),
    ({"cached_tokens": None}, 0),
    ({}, 0),
    (None, 0),  # vLLM without --enable-prompt-tokens-details
    ([64], 0),
    ("64", 0),
])
def test_the_engines_cached_count_is_read_as_far_as_it_is_a_count(details, cached):
    tally = tally_of({"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": details})
    assert (tally.prompt_tokens, tally.cached_tokens) == (100, cached)


def test_usage_without_details_counts_nothing_cached():
    assert tally_of({"prompt_tokens": 100, "completion_tokens": 5}).cached_tokens == 0


@pytest.mark.django_db(transaction=True)
def test_the_usage_row_keeps_the_cached_count_and_an_older_event_writes_zero(cast, redis_client, redis_url):
    alice = cast["alice"]
    older = event(alice.key_id, request_id="req-old")
    assert "cached_tokens" not in older  # as a gateway from before the field wrote it
    push(redis_url, older, event(alice.key_id, request_id="req-hit", cached_tokens=8),
         event(alice.key_id, request_id="req-odd", cached_tokens=999),  # more than its 12 prompt tokens
         event(alice.key_id, request_id="req-bad", cached_tokens="8"))
    assert usage.flush(redis_client) == 4
    rows = dict(UsageRecord.objects.values_list("request_id", "cached_tokens"))
    assert rows == {"req-old": 0, "req-hit": 8, "req-odd": 12, "req-bad": 0}


@pytest.mark.django_db(transaction=True)
def test_the_usage_report_and_a_budgets_recount_weigh_cached_tokens_as_the_gateway_did(cast):
    alice, now = cast["alice"], timezone.now()
    rows = [(100, 10, 0), (100, 10, 80), (100, 10, 250)]  # the last written around the gateway: too many cached
    for n, (prompt, completion, cached) in enumerate(rows):
        UsageRecord.objects.create(key_id=alice.key_id, request_id=f"req-{n}", endpoint="chat", model="m", status=200,
                                   prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached,
                                   created_at=now - dt.timedelta(minutes=n + 1))
    charged = sum(weighted_tokens(p, c, 1.0, 2.0, cached=k, w_cached=0.1) for p, c, k in rows)
    assert charged == pytest.approx(120 + 20 + 8 + 20 + 10 + 20)
    today = now.date()
    report = usage_report.report(today - dt.timedelta(days=1), today + dt.timedelta(days=1), ("user",))
    assert report.total.weighted_tokens == pytest.approx(charged)
    assert report.total.cached_tokens == 180
    budget = Budget.objects.create(key_id=alice.key_id, tokens=10_000, period=Budget.Period.ROLLING, window_hours=24)
    budget_status.recount(budget)
    assert budget_status.status_of([budget])[0].used == pytest.approx(charged)
