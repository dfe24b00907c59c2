"""What a gateway process does before it takes its first request."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio

from fairness.gateway import engine_client
from fairness.gateway.runtime import GatewayRuntime, RuntimeSettings

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_outbound_client_is_made_at_start_not_at_the_first_probe(redis_url):
    """Making it imports the HTTP stack, which once held a busy host's event loop for 2 s: done
    at the first probe, every request that came in meanwhile waited that long, before its key was
    even checked."""

    async def scenario() -> bool:
        runtime = GatewayRuntime(RuntimeSettings.from_django(), redis.asyncio.Redis.from_url(redis_url))
        try:
            await runtime.start()  # no replica yet, so nothing has probed
            return await engine_client.prepare()
        finally:
            await runtime.close()

    made_by_prepare = asyncio.run(scenario())
    assert made_by_prepare is False, "the runtime started without making its outbound client"
