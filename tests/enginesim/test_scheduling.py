"""Queueing seen from outside: priority order, KV budget waits, preemption, many connections."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.support.enginesim import MODEL, astats, async_wait_until, launch


async def completion_order(policy: str, priorities: list[int]) -> list[int]:
    """Queue requests behind a blocker in a one-slot engine; return priorities in finish order."""
    with launch(1, "--speed", "4", "--scheduling-policy", policy) as sim:
        async with httpx.AsyncClient(timeout=60) as client:
            url = f"{sim.url}/v1/completions"
            blocker = asyncio.create_task(client.post(url, json={
                "model": MODEL, "prompt": "block", "max_tokens": 4000, "ignore_eos": True}))

            async def running() -> bool:
                return (await astats(client, sim))["running"] == 1

            await async_wait_until(running, what="the blocker to run")

            async def queued(priority: int) -> None:
                response = await client.post(url, json={
                    "model": MODEL, "prompt": f"p{priority}", "max_tokens": 10,
                    "ignore_eos": True, "priority": priority})
                assert response.status_code == 200

            tasks = []
            for count, priority in enumerate(priorities, start=1):
                tasks.append(asyncio.create_task(queued(priority)))

                async def enqueued(n: int = count) -> bool:
                    return (await astats(client, sim))["waiting"] == n

                await async_wait_until(enqueued, what=f"{count} waiting")
            blocker.cancel()  # frees the only slot; the queue drains one at a time
            await asyncio.gather(blocker, return_exceptions=True)
            await asyncio.gather(*tasks)
        # The engine's own log orders them: responses read by one client may surface together.
        log = sim.requests()[1:]  # after the blocker
        return [entry["priority"] for entry in sorted(log, key=lambda entry: entry["ended"])]


async def test_priority_policy_serves_lower_priority_values_first() -> None:
    assert await completion_order("priority", [5, 1, 3, 1]) == [1, 1, 3, 5]


async def test_fcfs_policy_serves_in_arrival_order_whatever_the_priority() -> None:
    assert await completion_order("fcfs", [5, 1, 3]) == [5, 1, 3]


async def test_a_request_waits_while_the_kv_budget_cannot_hold_it() -> None:
    # 16 blocks of 16 tokens: the first request grows to all 16, the second needs 7 more.
    with launch(4, "--max-model-len", "256", "--num-gpu-blocks", "16", "--speed", "0.5") as sim:
        async with httpx.AsyncClient(timeout=60) as client:
            url = f"{sim.url}/v1/completions"
            big = asyncio.create_task(client.post(url, json={
                "model": MODEL, "prompt": "b" * 800, "max_tokens": 56, "ignore_eos": True}))

            async def running() -> bool:
                return (await astats(client, sim))["running"] == 1

            await async_wait_until(running, what="the big request to run")
            small = asyncio.create_task(client.post(url, json={
                "model": MODEL, "prompt": "s" * 400, "max_tokens": 2, "ignore_eos": True}))

            async def blocked() -> dict | None:  # type: ignore[type-arg]
                s = await astats(client, sim)
                return s if s["waiting"] == 1 and s["running"] == 1 else None

            seen = await async_wait_until(blocked, what="the small request to wait for KV")
            assert seen is not None
            assert seen["kv_cache_usage"] > 0.8
            assert (await big).json()["usage"]["completion_tokens"] == 56
            assert (await small).json()["usage"]["completion_tokens"] == 2


async def test_kv_pressure_preempts_and_every_request_still_completes() -> None:
    with launch(4, "--max-model-len", "256", "--num-gpu-blocks", "16", "--speed", "20") as sim:
        async with httpx.AsyncClient(timeout=60) as client:
            body = {"model": MODEL, "max_tokens": 150, "ignore_eos": True}
            responses = await asyncio.gather(*[
                client.post(f"{sim.url}/v1/completions", json={**body, "prompt": f"{i}" * 256})
                for i in range(4)])
            assert [r.json()["usage"]["completion_tokens"] for r in responses] == [150] * 4
            stats = await astats(client, sim)
            assert stats["preemptions"] > 0
            assert stats["running"] == 0 and stats["kv_cache_usage"] == 0


async def raw_post(port: int, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    """A bare HTTP/1.1 POST on its own connection.

    httpx's pool is itself slow with hundreds of simultaneous connections; a raw client puts all
    of them on the server at once, which is what this test is about.
    """
    payload = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
        status = int(head.split()[1])
        if "transfer-encoding: chunked" in head:
            parts = []
            while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                parts.append((await reader.readexactly(size + 2))[:-2])
            await reader.readexactly(2)
            return status, b"".join(parts)
        length = int(head.split("content-length:")[1].split()[0])
        return status, await reader.readexactly(length)
    finally:
        writer.close()


@pytest.mark.parametrize("stream", [False, True])
async def test_it_serves_250_concurrent_connections(stream: bool) -> None:
    with launch(64, "--speed", "2") as sim:
        body = {"model": MODEL, "max_tokens": 20, "ignore_eos": True, "stream": stream}

        async def one(i: int) -> int:
            status, data = await raw_post(sim.port, "/v1/completions",
                                          {**body, "prompt": f"request {i}"})
            assert status == 200
            if stream:
                return data.count(b'"text"')
            return int(json.loads(data)["usage"]["completion_tokens"])

        counts = await asyncio.gather(*[one(i) for i in range(250)])
        assert counts == [20] * 250
        async with httpx.AsyncClient(timeout=10) as client:
            stats = await astats(client, sim)
            assert stats["peak_running"] == 64  # the slot limit held, and was reached
            assert stats["total_requests"] == 250
            assert stats["running"] == 0 and stats["waiting"] == 0
            reset = (await client.post(f"{sim.url}/sim/reset-peak")).json()
            assert reset["peak_running"] == 0
