"""Replicas to route over, an async client of the test Redis, and a real /health server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio

from fairness.gateway import engine_client
from fairness.scheduling.directory import ReplicaInfo
from tests.support.health_server import HealthServer
from tests.support.redis_db import QUIET_REDIS_URL
from tests.support.replicas import replica


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


@pytest.fixture
async def health_server() -> AsyncIterator[HealthServer]:
    server = HealthServer()
    await server.start()
    yield server
    await server.stop()
    await engine_client.aclose()  # the seam's pooled client belongs to this test's loop
