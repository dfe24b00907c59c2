"""A client that goes away is aborted in the engine at once: slot and KV blocks come back."""

from __future__ import annotations

import asyncio

import httpx

from tests.support.enginesim import MODEL, astats, async_wait_until, launch, stats, wait_until

LONG = {"model": MODEL, "prompt": "Write forever.", "max_tokens": 3000, "ignore_eos": True}


def test_it_releases_the_slot_when_a_client_drops_a_stream_midway() -> None:
    with launch(4) as sim, httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{sim.url}/v1/completions",
                           json={**LONG, "stream": True}) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            assert stats(sim)["running"] == 1
            assert stats(sim)["kv_cache_usage"] > 0
        # Leaving the block closes the connection mid-stream.
        after = wait_until(lambda: (s := stats(sim))["running"] == 0 and s, timeout=5,
                           what="the running count to return to 0")
        assert after["finished"]["abort"] == 1
        assert after["kv_cache_usage"] == 0


async def test_it_releases_the_slot_when_a_non_streaming_client_gives_up() -> None:
    with launch(4) as sim:
        async with httpx.AsyncClient(timeout=30) as client:
            request = asyncio.create_task(client.post(f"{sim.url}/v1/completions", json=LONG))

            async def running() -> bool:
                return (await astats(client, sim))["running"] == 1

            await async_wait_until(running, timeout=5, what="the request to run")
            request.cancel()
            await asyncio.gather(request, return_exceptions=True)

            async def idle() -> bool:
                return (await astats(client, sim))["running"] == 0

            await async_wait_until(idle, timeout=5, what="the running count to return to 0")


async def test_it_drops_a_waiting_request_whose_client_left() -> None:
    with launch(1) as sim:
        async with httpx.AsyncClient(timeout=30) as client:
            url = f"{sim.url}/v1/completions"
            blocker = asyncio.create_task(client.post(url, json=LONG))
            queued = asyncio.create_task(client.post(url, json=LONG))

            async def queued_up() -> bool:
                s = await astats(client, sim)
                return s["running"] == 1 and s["waiting"] == 1

            await async_wait_until(queued_up, timeout=5, what="one running, one waiting")
            queued.cancel()
            await asyncio.gather(queued, return_exceptions=True)

            async def left_queue() -> bool:
                s = await astats(client, sim)
                return s["waiting"] == 0 and s["running"] == 1

            await async_wait_until(left_queue, timeout=5, what="the waiting count to drop")
            blocker.cancel()
            await asyncio.gather(blocker, return_exceptions=True)

            async def idle() -> bool:
                return (await astats(client, sim))["running"] == 0

            await async_wait_until(idle, timeout=5, what="the engine to go idle")
            assert (await astats(client, sim))["finished"]["abort"] == 2
