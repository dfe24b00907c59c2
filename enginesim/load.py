"""Closed-loop load on an engine, for tests and benchmarks: ``n`` clients each keeping one long
completion in flight, on an event loop of their own thread so synchronous code can drive it.

    users = ClosedLoopUsers(engine.url, "sim", 4)
    ...  # the engine now runs 4 sequences
    users.stop()

This is the client side, so unlike the simulator itself it uses httpx.
"""

from __future__ import annotations

import asyncio
import threading

import httpx


class ClosedLoopUsers:
    def __init__(self, url: str, model: str, n: int, max_tokens: int = 2000) -> None:
        self.loop = asyncio.new_event_loop()
        self.tasks: list[asyncio.Task[None]] = []
        body = {"model": model, "prompt": "load", "max_tokens": max_tokens, "ignore_eos": True}

        async def user(client: httpx.AsyncClient) -> None:
            while True:
                await client.post(url + "/v1/completions", json=body)

        async def start() -> None:
            self.client = httpx.AsyncClient(timeout=600)
            self.tasks = [asyncio.create_task(user(self.client)) for _ in range(n)]

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)

    def stop(self) -> None:
        async def stop() -> None:
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await self.client.aclose()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
