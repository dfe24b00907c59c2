"""Aggregate decode throughput follows the step-time model a + c * batch.

Measured inside a steady state: once ``batch`` long requests are all running, the test takes two
/sim/stats snapshots about two seconds of tokens apart and divides the token delta by the delta
of the server's clock reported with them. Start-up, arrival spread, HTTP overhead and the test
process's own scheduling delays on a busy machine stay out of the figure.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from enginesim.engine import TimingModel
from enginesim.process import EngineSimProcess
from tests.support.enginesim import MODEL, astats, async_wait_until, launch

WINDOW_S = 2.0


async def measure_tokens_per_second(sim: EngineSimProcess, batch: int, speed: float = 1.0) -> float:
    limits = httpx.Limits(max_connections=batch + 8)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        body = {"model": MODEL, "prompt": "Tell me a long story.", "max_tokens": 4000,
                "ignore_eos": True}
        requests = [asyncio.create_task(client.post(f"{sim.url}/v1/completions", json=body))
                    for _ in range(batch)]
        try:
            async def all_running() -> bool:
                return (await astats(client, sim))["running"] == batch

            await async_wait_until(all_running, timeout=15, what=f"{batch} running")
            start = await astats(client, sim)
            # Two seconds of wall time at any speed: the engine may run up to MAX_LAG_S behind its
            # schedule at either snapshot, so a shorter window would magnify that.
            goal = start["generation_tokens"] + WINDOW_S * TimingModel(speed=speed).tokens_per_second(batch)

            async def produced() -> dict[str, Any] | None:
                now = await astats(client, sim)
                return now if now["generation_tokens"] >= goal else None

            end = await async_wait_until(produced, timeout=30, what="the window's tokens")
            assert end is not None
            assert end["running"] == batch  # still steady
            tokens = end["generation_tokens"] - start["generation_tokens"]
            # Schedule time the engine gave up after a host stall produced nothing by design.
            slipped = end["slipped_seconds"] - start["slipped_seconds"]
            return tokens / (end["clock"] - start["clock"] - slipped)
        finally:
            for request in requests:
                request.cancel()
            await asyncio.gather(*requests, return_exceptions=True)


@pytest.mark.parametrize("batch", [1, 32])
async def test_aggregate_tokens_per_second_match_the_timing_model(batch: int) -> None:
    with launch(32) as sim:
        measured = await measure_tokens_per_second(sim, batch)
    expected = TimingModel().tokens_per_second(batch)  # ~100 at 1, ~2,015 at 32
    assert abs(measured - expected) / expected < 0.10, (measured, expected)


async def test_speed_divides_every_duration() -> None:
    with launch(8, "--speed", "5") as sim:
        measured = await measure_tokens_per_second(sim, 8, speed=5)
    expected = 5 * TimingModel().tokens_per_second(8)
    assert abs(measured - expected) / expected < 0.10, (measured, expected)
