"""A key held below its tier through a live gateway and the real Redis: its own cap at once and its
own rate hold, while a key of the same tier without limits of its own gets the tier's."""

import asyncio

import httpx

from fairness.actions.keys import set_limits
from fairness.models import ApiKey, KeyLimits, Tier
from tests.support.audit import SETUP
from tests.support.live_admission import chat_body, drop, hold, key_stats, send, wait_async
from tests.support.v1_calls import CHAT, assert_error, post


def narrow(member, **limits) -> None:
    set_limits(SETUP, ApiKey.objects.select_related("tier").get(pk=member.key_id), KeyLimits(**limits))


def test_a_key_capped_below_its_tier_runs_one_at_once_and_the_next_waits(gateway, cast, on_engine8, engine8):
    alice, bob = cast["alice"], cast["bob"]
    narrow(alice, max_concurrent=1)  # the interactive tier runs 2 at once

    async def scenario():
        async with httpx.AsyncClient(timeout=60) as client:
            running = await hold(client, gateway.url, alice, 1)
            waiting = asyncio.create_task(send(client, gateway.url, alice, chat_body(alice, max_tokens=4)))
            await wait_async(lambda: key_stats(alice)["queued"] == 1)
            held = await asyncio.to_thread(key_stats, alice)
            tiers_two = await hold(client, gateway.url, bob, 2)  # the same tier, no cap of its own
            await drop(running)  # alice's slot frees: her waiting request runs and ends
            answered = await waiting
            await drop(tiers_two)
            return held, answered

    held, answered = asyncio.run(scenario())
    assert held == {"in_flight": 1, "queued": 1}
    assert answered.status_code == 200


def test_a_keys_rate_below_its_tiers_refuses_with_429_rate_limited_at_the_keys_figure(gateway, cast, replica):
    Tier.objects.filter(name="interactive").update(key_requests_per_minute=600)  # a burst of 30 for bob
    Tier.objects.get(name="interactive").save()  # bump the config epoch
    narrow(cast["alice"], requests_per_minute=20)  # a burst of one, then one each 3 s
    alice, bob = cast["alice"].secret, cast["bob"].secret
    assert post(gateway, alice, CHAT).status_code == 200
    error = assert_error(refused := post(gateway, alice, CHAT), 429, "rate_limited")
    assert "this key's 20 requests a minute" in error["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 3
    assert [post(gateway, bob, CHAT).status_code for _ in range(3)] == [200] * 3
