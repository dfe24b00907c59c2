"""Five keys are not five shares: every cap, queue bound and per-person rate limit counts a
person's keys of a tier together."""

from __future__ import annotations

import asyncio

import httpx
from django.contrib.auth import get_user_model

from fairness.actions.keys import issue_key
from fairness.models import Replica, Tier
from tests.support.cast import MODEL
from tests.support.live_admission import drop, key_stats, wait_async


def five_keys(cast, tiers) -> list[str]:
    alice = get_user_model().objects.get(username="alice")
    return [cast["alice"].secret] + [issue_key(alice, tiers["interactive"], label=f"key {n}")[1] for n in range(4)]


def chat(max_tokens: int, stream: bool = False) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens,
            "ignore_eos": True, "stream": stream}


def test_ten_requests_over_five_keys_run_two_at_a_time_as_the_tier_allows_a_person(
    gateway, cast, tiers, slow_engine
):
    Replica.objects.create(name="slow", base_url=slow_engine.url, model=MODEL, max_num_seqs=8)
    secrets = five_keys(cast, tiers)
    alice = cast["alice"]

    async def scenario():
        async with httpx.AsyncClient(timeout=120) as client:
            async def send(secret: str) -> None:
                async with client.stream("POST", gateway.url + "/v1/chat/completions", json=chat(4000, True),
                                         headers={"authorization": f"Bearer {secret}"}) as response:
                    await response.aread()

            tasks = [asyncio.create_task(send(secrets[n % 5])) for n in range(10)]
            await wait_async(lambda: key_stats(alice)["queued"] == 8)
            seen = await asyncio.to_thread(key_stats, alice), slow_engine.stats()["running"]
            await drop(tasks)
            return seen

    person, engine_running = asyncio.run(scenario())
    assert person == {"in_flight": 2, "queued": 8}
    assert engine_running == 2  # the engine had a free slot for each of the other eight


def test_a_per_person_rate_limit_holds_across_the_persons_keys(gateway, cast, tiers, engine8):
    Replica.objects.create(name="sim-8", base_url=engine8.url, model=MODEL, max_num_seqs=8)
    Tier.objects.filter(name="interactive").update(key_requests_per_minute=1)
    Tier.objects.get(name="interactive").save()  # bump the config epoch
    first, second = five_keys(cast, tiers)[:2]

    def answer(secret: str) -> httpx.Response:
        return httpx.post(gateway.url + "/v1/chat/completions", json=chat(4),
                          headers={"authorization": f"Bearer {secret}"}, timeout=30)

    assert answer(first).status_code == 200
    refused = answer(second)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert "across your keys" in refused.json()["error"]["message"]
    assert answer(cast["bob"].secret).status_code == 200  # bob is a person of his own
