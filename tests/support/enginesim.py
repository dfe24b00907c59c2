"""The simulator's own tests: real enginesim servers on free ports, their stats, a chat body, and
waiting for a condition (no fixed sleeps)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from enginesim.process import EngineSimProcess, start_enginesim
from tests.support.processes import free_port

T = TypeVar("T")
MODEL = "sim-model"


def launch(max_num_seqs: int = 8, *extra: str, model: str = MODEL) -> EngineSimProcess:
    return start_enginesim(port=free_port(), model=model, max_num_seqs=max_num_seqs,
                           extra_args=list(extra))


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something truthy, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


async def async_wait_until(predicate: Callable[[], Awaitable[T]], timeout: float = 10.0,
                           what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


def stats(sim: EngineSimProcess) -> dict[str, Any]:
    return httpx.get(f"{sim.url}/sim/stats").json()


async def astats(client: httpx.AsyncClient, sim: EngineSimProcess) -> dict[str, Any]:
    return (await client.get(f"{sim.url}/sim/stats")).json()


def chat_body(content: str = "Hello there", max_tokens: Any = 8, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, **extra}
