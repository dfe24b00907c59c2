"""Budgets and rate limits through real gateway processes: refused in words with a true
Retry-After, exact across processes, and the remaining amount on every answer."""

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis

from fairness.models import ApiKey, Budget, Tier
from fairness.scheduling import fair_share
from fairness.store import keyspace
from tests.support.live_admission import chat_body, nothing_held
from tests.support.polling import wait_for
from tests.support.processes import start_gateway
from tests.support.redis_db import TEST_REDIS_URL

MAX_TOKENS = 10


def estimate_of(member) -> float:
    """What the gateway reserves for chat_body(member): a quarter of the body's bytes, and max_tokens."""
    body = json.dumps(chat_body(member, max_tokens=MAX_TOKENS)).encode()
    return fair_share.weighted_tokens(len(body) // 4, MAX_TOKENS, 1, 2)


def post(url: str, member, **kwargs) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", content=json.dumps(chat_body(member, max_tokens=MAX_TOKENS)),
                      headers={"authorization": f"Bearer {member.secret}", "content-type": "application/json"},
                      timeout=60, **kwargs)


def budget_counters(budget: Budget) -> tuple[float, float]:
    """(settled, reserved) over the budget's windows in Redis."""
    client = redis.Redis.from_url(TEST_REDIS_URL)
    ns = keyspace.admission_namespace(keyspace.PREFIX)
    counter = f"k{budget.key_id}-{budget.period}"  # a key's budgets for the period share these
    windows = [client.hgetall(k) for k in client.scan_iter(match=f"{ns}{keyspace.ADMISSION_BUDGET_WINDOW}{counter}|*")]
    settled, reserved_field = (name.encode() for name in (keyspace.ADMISSION_FIELD_BUDGET_SETTLED,
                                                          keyspace.ADMISSION_FIELD_BUDGET_RESERVED))
    used = sum(float(v) for w in windows for f, v in w.items() if f.startswith(settled))
    reserved = sum(float(w.get(reserved_field, 0)) for w in windows)
    return used, reserved


def test_three_gateways_hold_a_budget_with_no_more_overshoot_than_is_in_flight(gateway, live_db_url, cast, replica):
    alice = cast["alice"]
    Tier.objects.filter(name="interactive").update(per_key_concurrency=8, max_queued_per_key=200,
                                                   max_queue_wait_seconds=120)
    Tier.objects.get(name="interactive").save()  # bump the epoch
    estimate = estimate_of(alice)
    key = ApiKey.objects.get(pk=alice.key_id)
    budget = Budget.objects.create(key=key, tokens=int(50 * estimate), period=Budget.Period.MONTH)
    others = [start_gateway(live_db_url, name=f"gateway-{n}") for n in (2, 3)]
    try:
        urls = [gateway.url, *(g.url for g in others)]
        for url in urls:  # every gateway has seen the budget before the burst
            wait_for(lambda url=url: "x-gpuportal-budget-remaining" in post(url, alice).headers, timeout=10,
                     what="the budget to reach the gateway")
        with ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(lambda n: post(urls[n % 3], alice), range(200)))
        wait_for(nothing_held, timeout=10, what="every lease back")
    finally:
        for process in others:
            process.stop()
    served = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert len(served) + len(refused) == 200
    assert {a.json()["error"]["code"] for a in refused} == {"budget_exceeded"}
    used, reserved = budget_counters(budget)
    assert reserved == pytest.approx(0, abs=1e-6)
    # Settlement is exact: the windows hold what every answered request really used (the probes too).
    really = [fair_share.weighted_tokens(a.json()["usage"]["prompt_tokens"], a.json()["usage"]["completion_tokens"],
                                         1, 2) for a in served]
    assert used == pytest.approx(sum(really) + 3 * really[0], rel=1e-9)
    # No request started once used + reserved reached the limit: the overshoot is at most what was
    # in flight then, the key's 8 requests at their estimates.
    assert all(r <= estimate for r in really)
    assert budget.tokens - max(really) < used < budget.tokens + 8 * estimate
    error = refused[0].json()["error"]
    assert "this key has used its" in error["message"] and "resets" in error["message"]
    assert 0 < int(refused[0].headers["retry-after"]) <= 31 * 86400


def test_the_remaining_budget_is_on_every_answer_and_a_refusal_says_when_it_resets(gateway, cast, replica):
    alice = cast["alice"]
    key = ApiKey.objects.get(pk=alice.key_id)
    Budget.objects.create(key=key, tokens=int(2 * estimate_of(alice)), period=Budget.Period.DAY)
    first = wait_for(lambda: (r := post(gateway.url, alice)).headers.get("x-gpuportal-budget-remaining") and r,
                     timeout=10, what="the budget header")
    assert float(first.headers["x-gpuportal-budget-remaining"]) >= 0
    refused = wait_for(lambda: (r := post(gateway.url, alice)).status_code == 429 and r, timeout=10,
                       what="the refusal")
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert int(refused.headers["retry-after"]) <= 86400
    # Another key of another user is not touched by alice's budget.
    assert post(gateway.url, cast["bob"]).status_code == 200


def test_a_rate_limit_answers_429_with_a_true_retry_after(gateway, cast, replica):
    Tier.objects.filter(name="interactive").update(key_requests_per_minute=30)
    Tier.objects.get(name="interactive").save()
    alice = cast["alice"]
    limited = wait_for(lambda: (r := post(gateway.url, alice)).status_code == 429 and r, timeout=20,
                       what="the rate limit")
    assert limited.json()["error"]["code"] == "rate_limited"
    retry = int(limited.headers["retry-after"])
    assert 1 <= retry <= 2  # 30 a minute: one every two seconds
    assert post(gateway.url, cast["bob"]).status_code == 200  # a limit per key
