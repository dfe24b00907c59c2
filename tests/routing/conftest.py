"""Replicas to route over, an async client of the test Redis, and a real /health server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio

from fairness.gateway import engine_client
from fairness.scheduling.directory import ReplicaInfo
from tests.support.redis_db import QUIET_REDIS_URL


def replica(name: str, max_num_seqs: int = 8, base_url: str = "http://127.0.0.1:9") -> ReplicaInfo:
    return ReplicaInfo(
        id=0,
        name=name,
        base_url=base_url,
        model="m",
        engine_kind="vllm",
        max_num_seqs=max_num_seqs,
        priority_policy=False,
        api_key="",
    )


@pytest.fixture
def make_replicas() -> Callable[..., list[ReplicaInfo]]:
    def make(count: int, max_num_seqs: int = 8) -> list[ReplicaInfo]:
        return [replica(f"r{i}", max_num_seqs) for i in range(count)]

    return make


@pytest.fixture
async def aredis() -> AsyncIterator[redis.asyncio.Redis]:
    """An empty Redis database that no gateway process writes to."""
    client = redis.asyncio.Redis.from_url(QUIET_REDIS_URL)
    await client.flushdb()
    yield client
    await client.aclose()


class HealthServer:
    """A minimal HTTP/1.1 server whose /health answers `status`; counts the probes it saw."""

    def __init__(self) -> None:
        self.status = 200
        self.probes = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await reader.readline()
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # headers: not needed
            parts = request_line.split()
            status = self.status if len(parts) > 1 and parts[1] == b"/health" else 404
            self.probes += 1
            head = f"HTTP/1.1 {status} Status\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            writer.write(head.encode())
            await writer.drain()
        finally:
            writer.close()


@pytest.fixture
async def health_server() -> AsyncIterator[HealthServer]:
    server = HealthServer()
    await server.start()
    yield server
    await server.stop()
    await engine_client.aclose()  # the seam's pooled client belongs to this test's loop
