"""Queue limits answer 429 with Retry-After; engine priority follows the tier."""

import asyncio

import httpx

from fairness.models import Replica, Tier
from tests.support.cast import MODEL
from tests.support.live_admission import chat_body, drop, hold, key_stats, send, wait_async


def test_too_many_queued_gets_429_naming_the_limit(gateway, cast, on_engine8, engine8):
    Tier.objects.filter(name="interactive").update(max_queued_per_key=1)
    Tier.objects.get(name="interactive").save()  # bump the config epoch
    alice = cast["alice"]

    async def scenario():
        async with httpx.AsyncClient(timeout=60) as client:
            running = await hold(client, gateway.url, alice, 2)
            waiting = asyncio.create_task(send(client, gateway.url, alice, chat_body(alice)))
            await wait_async(lambda: key_stats(alice)["queued"] == 1)
            refused = await send(client, gateway.url, alice, chat_body(alice))
            await drop([*running, waiting])
            return refused

    refused = asyncio.run(scenario())
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    error = refused.json()["error"]
    assert error["code"] == "queue_full"
    assert "have 1 request waiting in the interactive tier, across your keys" in error["message"]
    assert "_" not in error["message"]  # words for people, not the tier's field names


def test_waiting_too_long_gets_429_and_never_reaches_the_engine(gateway, cast, on_engine8, engine8):
    Tier.objects.filter(name="interactive").update(max_queue_wait_seconds=0.3)
    Tier.objects.get(name="interactive").save()
    bob = cast["bob"]

    async def scenario():
        async with httpx.AsyncClient(timeout=60) as client:
            running = await hold(client, gateway.url, bob, 2)
            late = await send(client, gateway.url, bob, chat_body(bob))
            await drop(running)
            return late

    late = asyncio.run(scenario())
    assert late.status_code == 429 and late.json()["error"]["code"] == "queue_timeout"
    assert "retry-after" in late.headers
    assert len(engine8.requests()) == 2


def test_the_tiers_engine_priority_reaches_a_priority_engine_only(gateway, cast, engine8, tiers):
    from enginesim.process import start_enginesim

    priority_args = ["--speed", "20", "--scheduling-policy", "priority"]
    with start_enginesim(model="prio", max_num_seqs=8, extra_args=priority_args) as prio:
        Replica.objects.create(name="fcfs", base_url=engine8.url, model=MODEL, max_num_seqs=8)
        Replica.objects.create(name="prio", base_url=prio.url, model="prio", max_num_seqs=8,
                               scheduling_policy=Replica.Policy.PRIORITY)
        for member in (cast["alice"], cast["carol"]):
            for model in (MODEL, "prio"):
                body = {**chat_body(member, max_tokens=2), "model": model, "priority": -50}
                response = httpx.post(gateway.url + "/v1/chat/completions", json=body,
                                      headers={"authorization": f"Bearer {member.secret}"})
                assert response.status_code == 200
        at_prio = {e["user"]: e["priority"] for e in prio.requests()}
        at_fcfs = {e["user"]: e["priority"] for e in engine8.requests()}
    assert at_prio == {"alice": tiers["interactive"].engine_priority, "carol": tiers["batch"].engine_priority}
    assert at_prio["alice"] < at_prio["carol"]
    assert at_fcfs == {"alice": 0, "carol": 0}  # a client's own priority never passes
