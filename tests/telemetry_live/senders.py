"""Requests held open through a gateway, for tests that need a queue: each sender starts one long
streaming completion with its member's key and keeps it until stopped (a cancelled stream is a
client gone, so the gateway gives its slot or its place in line back)."""

from __future__ import annotations

import asyncio
import threading

import httpx

from tests.support.cast import MODEL, Member


class HeldRequests:
    def __init__(self, gateway_url: str, member: Member, n: int, max_tokens: int = 4000) -> None:
        self.loop = asyncio.new_event_loop()
        body = {"model": MODEL, "prompt": "hold", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
        headers = {"Authorization": f"Bearer {member.secret}"}

        self.failures: list[str] = []  # what ended a request early, for the test's messages

        async def one(client: httpx.AsyncClient) -> None:
            try:
                async with client.stream("POST", gateway_url + "/v1/completions", json=body, headers=headers) as r:
                    if r.status_code != 200:
                        self.failures.append(f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
                    async for _ in r.aiter_bytes():
                        pass
            except httpx.HTTPError as exc:
                self.failures.append(repr(exc))

        async def start() -> None:
            self.client = httpx.AsyncClient(timeout=600)
            self.tasks = [asyncio.create_task(one(self.client)) for _ in range(n)]

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
