"""Fair share across real processes: every gateway charges the same books, and the usage
outlives a Redis that restarts empty (the worker adds the database's copy back)."""

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis
import redis.asyncio
from django.conf import settings

from fairness.models import FairShareUsage
from fairness.scheduling import fair_share
from tests.support.accounts import association, live_usage
from tests.support.live_admission import chat_body, nothing_held
from tests.support.polling import wait_for
from tests.support.processes import start_gateway
from tests.support.redis_db import TEST_REDIS_URL


def test_three_gateway_processes_charge_the_same_books_exactly(gateway, live_db_url, cast, on_engine8):
    others = [start_gateway(live_db_url, name=f"gateway-{n}") for n in (2, 3)]
    first_charge = time.monotonic()
    try:
        urls = [gateway.url, *(g.url for g in others)]
        members = [cast["alice"], cast["bob"]]
        jobs = [(url, member, 5 + 7 * n) for n, (url, member) in
                enumerate((u, m) for u in urls for m in members for _ in range(4))]

        def send(job) -> tuple[str, float]:
            url, member, max_tokens = job
            response = httpx.post(url + "/v1/chat/completions", json=chat_body(member, max_tokens=max_tokens),
                                  headers={"authorization": f"Bearer {member.secret}"}, timeout=60)
            assert response.status_code == 200, response.text
            usage = response.json()["usage"]
            return member.username, fair_share.weighted_tokens(usage["prompt_tokens"], usage["completion_tokens"], 1, 2)

        with ThreadPoolExecutor(8) as pool:
            charged = list(pool.map(send, jobs))
        wait_for(nothing_held, timeout=5, what="every lease back (the charge rides on the release)")
    finally:
        for process in others:
            process.stop()
    expected = {association(cast[name]): sum(c for n, c in charged if n == name) for name in ("alice", "bob")}
    usage, total = live_usage()
    # Exact but for decay: since the first charge, at most 2^(-elapsed / half-life) of it has gone
    # (a week's half-life: about a millionth a second). One request lost or charged twice moves
    # a figure by tens of tokens, far outside this.
    kept = 2 ** (-(time.monotonic() - first_charge) / (settings.GP_FAIRSHARE_HALF_LIFE_HOURS * 3600))
    assert set(usage) == set(expected)
    for who, amount in expected.items():
        assert amount * kept - 1e-6 <= usage[who] <= amount + 1e-6, (who, usage[who], amount, kept)
    assert sum(expected.values()) * kept - 1e-6 <= total <= sum(expected.values()) + 1e-6


def test_usage_outlives_a_redis_that_restarts_empty(gateway, cast, on_engine8, worker):
    alice = cast["alice"]
    response = httpx.post(gateway.url + "/v1/chat/completions", json=chat_body(alice, max_tokens=30),
                          headers={"authorization": f"Bearer {alice.secret}"}, timeout=60)
    assert response.status_code == 200
    who = association(alice)
    wait_for(lambda: live_usage()[0].get(who, 0) > 0, timeout=5, what="alice's charge")
    charged = live_usage()[0][who]
    wait_for(lambda: FairShareUsage.objects.filter(membership_id=int(who)).exists(), timeout=20,
             what="the worker to save the usage")
    redis.Redis.from_url(TEST_REDIS_URL).flushdb()  # as a Redis without persistence restarts
    wait_for(lambda: live_usage()[0].get(who, 0) > 0, timeout=20, what="the worker to add it back")
    assert live_usage()[0][who] == pytest.approx(charged, rel=1e-4)
