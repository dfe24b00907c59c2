"""The shared Redis clients survive a Redis restart: a pooled connection that died with the server
is replaced, and the command it carried is not lost."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from fairness.store import redis_clients
from tests.support.redis_server import PrivateRedis


@pytest.fixture
def store(settings) -> Iterator[PrivateRedis]:
    server = PrivateRedis().start()
    settings.REDIS_URL = server.url()
    yield server
    server.stop()


def test_the_async_client_answers_on_the_first_command_after_redis_restarts(store):
    async def scenario() -> bytes | None:
        client = redis_clients.redis_async()
        await client.set("kept", "1")  # a connection now sits in the pool
        store.stop()
        store.start()  # empty: the pooled connection is dead
        value = await client.get("kept")
        await client.aclose()
        return value

    assert asyncio.run(scenario()) is None  # answered (by the empty server), not ConnectionError


def test_the_sync_client_answers_on_the_first_command_after_redis_restarts(store):
    client = redis_clients.redis_sync()
    client.set("kept", "1")
    store.stop()
    store.start()
    assert client.get("kept") is None
