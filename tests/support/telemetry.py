"""Capacity telemetry against live engines: one poll of the replicas as the beat runs it, closed-loop
load straight at an engine (`enginesim.load.ClosedLoopUsers`), and waiting for what the engine runs."""

from __future__ import annotations

import asyncio

from enginesim.load import ClosedLoopUsers
from enginesim.process import EngineSimProcess
from fairness.gateway import engine_client
from fairness.store.redis_clients import redis_async
from fairness.telemetry import polling
from tests.support.cast import MODEL
from tests.support.polling import wait_for


def run(coro_fn, *args):
    """Run one async unit in a fresh loop, closing the clients it opened on that loop."""

    async def wrapped():
        try:
            return await coro_fn(*args)
        finally:
            await redis_async().aclose()
            await engine_client.aclose()

    return asyncio.run(wrapped())


def poll() -> polling.Poll:
    return run(polling.poll_once)


def load_on(url: str, users: int, max_tokens: int = 2000) -> ClosedLoopUsers:
    """`users` clients each keeping one long request in flight straight at an engine."""
    return ClosedLoopUsers(url, MODEL, users, max_tokens)


def running_is(engine: EngineSimProcess, n: int) -> None:
    wait_for(lambda: engine.stats()["running"] == n, timeout=10, what=f"{n} sequences running")
