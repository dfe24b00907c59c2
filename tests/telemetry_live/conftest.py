from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import httpx
import pytest

from enginesim.process import EngineSimProcess, start_enginesim
from fairness import polling, upstream
from fairness.connections import redis_async
from fairness.models import Replica
from tests.conftest import MODEL
from tests.polling import wait_for


def run(coro_fn, *args):
    """Run one async unit in a fresh loop, closing the clients it opened on that loop."""

    async def wrapped():
        try:
            return await coro_fn(*args)
        finally:
            await redis_async().aclose()
            await upstream.aclose()

    return asyncio.run(wrapped())


def poll() -> polling.Poll:
    return run(polling.poll_once)


class Load:
    """`users` clients each keeping one long request in flight straight at an engine."""

    def __init__(self, url: str, users: int, max_tokens: int = 2000) -> None:
        self.loop = asyncio.new_event_loop()
        self.tasks: list[asyncio.Task] = []
        body = {"model": MODEL, "prompt": "load", "max_tokens": max_tokens, "ignore_eos": True}

        async def user(client: httpx.AsyncClient) -> None:
            while True:
                await client.post(url + "/v1/completions", json=body)

        async def start() -> None:
            self.client = httpx.AsyncClient(timeout=600)
            self.tasks = [asyncio.create_task(user(self.client)) for _ in range(users)]

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(start(), self.loop).result(5)

    def stop(self) -> None:
        async def stop() -> None:
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await self.client.aclose()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def engine(transactional_db, redis_url) -> Iterator[EngineSimProcess]:
    """A registered replica whose per-sequence step cost is large enough to shape the curve."""
    process = start_enginesim(model=MODEL, max_num_seqs=8,
                              extra_args=["--speed", "4", "--step-per-seq-ms", "2"])
    Replica.objects.create(name="sim-cap", base_url=process.url, model=MODEL, max_num_seqs=8)
    yield process
    process.stop()


def running_is(engine: EngineSimProcess, n: int) -> None:
    wait_for(lambda: engine.stats()["running"] == n, timeout=10, what=f"{n} sequences running")
