"""No replica is sent more than its slots (max_num_seqs) by the gateways: not by simultaneous
bursts through two gateway processes, not by retries after a replica dies.

Each engine is started with room for far more sequences than the portal is told it has, so
whatever the gateways overfill shows in the engine's own peak of running sequences instead of
hiding in its waiting queue."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.models import Replica, Tier
from tests.support.cast import MODEL
from tests.support.live_admission import admission_stats, chat_body, send, wait_async
from tests.support.processes import start_gateway

SLOTS = 4  # what the portal is told each replica runs at once


@pytest.fixture
def pair(gateway, tiers) -> Iterator[dict[str, EngineSimProcess]]:
    # One key may run many requests at once: only the replicas' slots limit these tests.
    Tier.objects.filter(name="interactive").update(per_key_concurrency=32, max_queued_per_key=64)
    sims = {name: start_enginesim(model=MODEL, max_num_seqs=64, extra_args=["--speed", "20"])
            for name in ("rep-a", "rep-b")}
    for name, sim in sims.items():
        Replica.objects.create(name=name, base_url=sim.url, model=MODEL, max_num_seqs=SLOTS)
    yield sims
    for sim in sims.values():
        sim.stop()


def long_body(member, max_tokens: int = 2000) -> dict:
    return chat_body(member, max_tokens=max_tokens, stream=True)  # 2000: ~1 s at speed 20


def test_simultaneous_bursts_through_two_gateways_fill_each_replica_exactly(
    gateway, live_db_url, cast, pair
):
    second = start_gateway(live_db_url, name="second-gateway")
    alice = cast["alice"]
    # One conversation: every request prefers the same replica, the worst case for a miscount.
    headers = {"authorization": f"Bearer {alice.secret}", "x-session-id": "one-conversation"}

    async def bursts() -> list[int]:
        """Clients that each send one request after another: grants and routing decisions in
        both processes interleave all the time."""
        async with httpx.AsyncClient(timeout=60) as client:
            async def one(url: str) -> list[int]:
                statuses = []
                for _ in range(6):
                    async with client.stream("POST", url + "/v1/chat/completions", json=long_body(alice, 300),
                                             headers=headers) as response:
                        await response.aread()
                        statuses.append(response.status_code)
                return statuses

            runs = await asyncio.gather(*(one(url) for url in (gateway.url, second.url) for _ in range(8)))
            return [status for run in runs for status in run]

    try:
        for sim in pair.values():
            sim.reset_peak()
        statuses = asyncio.run(bursts())
    finally:
        second.stop()
    assert statuses == [200] * 96
    peaks = {name: sim.stats()["peak_running"] for name, sim in pair.items()}
    assert peaks == {"rep-a": SLOTS, "rep-b": SLOTS}, peaks


def test_after_a_replica_dies_its_requests_wait_for_the_survivor_s_slots(gateway, cast, pair):
    alice = cast["alice"]

    async def scenario() -> tuple[list[int], list[int]]:
        async with httpx.AsyncClient(timeout=60) as client:
            url = gateway.url
            # Fill both replicas; no conversation key, so the least loaded takes each.
            filling = [asyncio.create_task(send(client, url, alice, long_body(alice, 4000)))
                       for _ in range(2 * SLOTS)]
            await wait_async(lambda: admission_stats()["replicas"].get("rep-b", {}).get("in_flight") == SLOTS
                             and admission_stats()["replicas"].get("rep-a", {}).get("in_flight") == SLOTS)
            pair["rep-b"].reset_peak()
            pair["rep-a"].kill()
            # New requests: the first ones are granted rep-a's slots before anyone knows it is
            # dead; their retries must wait for rep-b instead of overfilling it.
            late = [asyncio.create_task(send(client, url, alice, chat_body(alice, max_tokens=20)))
                    for _ in range(2 * SLOTS)]
            late_statuses = [r.status_code for r in await asyncio.gather(*late)]
            filled = [getattr(r, "status_code", 0) for r in await asyncio.gather(*filling, return_exceptions=True)]
            return late_statuses, filled

    late, _ = asyncio.run(scenario())
    assert late == [200] * (2 * SLOTS)  # every retry was served, by rep-b, in turn
    assert pair["rep-b"].stats()["peak_running"] <= SLOTS
