"""A gateway's published load counts expire no later than its leases: a dead process must not
keep steering the routers of the living after admission has given its slots back."""

from __future__ import annotations

import asyncio

import httpx
import redis

from enginesim.process import start_enginesim
from fairness.models import Replica
from fairness.store import keyspace
from tests.conftest import MODEL, TEST_REDIS_URL, start_gateway
from tests.fair_sharing.conftest import drop, hold
from tests.polling import wait_for


def test_load_counts_live_no_longer_than_a_short_lease(live_db_url, tiers, cast, redis_url):
    sims = [start_enginesim(model=MODEL, max_num_seqs=8, extra_args=["--speed", "20"]) for _ in range(2)]
    for index, sim in enumerate(sims):
        Replica.objects.create(name=f"rep-{index}", base_url=sim.url, model=MODEL, max_num_seqs=8)
    gateway = start_gateway(live_db_url, name="short-lease", GP_LEASE_TTL_SECONDS="2")
    client = redis.Redis.from_url(TEST_REDIS_URL)
    try:
        async def published_ttls() -> list[int]:
            async with httpx.AsyncClient(timeout=60) as http:
                streams = await hold(http, gateway.url, cast["alice"], 2)
                try:
                    def published() -> list[int]:  # the counts are written just after the grant
                        processes = [p.decode() for p in client.smembers(keyspace.LOAD_PROCESSES)]
                        return [client.pttl(keyspace.load_counts(p)) for p in processes]

                    return wait_for(published, timeout=5, what="the gateway to publish its load")
                finally:
                    await drop(streams)

        ttls = asyncio.run(published_ttls())
        assert ttls and all(0 < ttl <= 2000 for ttl in ttls), ttls
    finally:
        gateway.stop()
        client.close()
        for sim in sims:
            sim.stop()
