"""Redis restarted empty under running requests: their leases are counted again before anyone
else is granted, so no replica and no key goes over its slots or cap for the restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aredis

from fairness.scheduling.admission import RESTART_HOLD_SECONDS, Admission
from tests.support.admission import alice, bob, eventually, like
from tests.support.redis_server import PrivateRedis


@pytest.fixture
def store() -> AsyncIterator[PrivateRedis]:
    server = PrivateRedis().start()
    yield server
    server.stop()


async def test_grants_wait_until_the_running_requests_count_again(store: PrivateRedis) -> None:
    client = aredis.Redis.from_url(store.url())
    # Upkeep (and so renewal) only every 10 s: what counts the leases again is the reconnection.
    holder = Admission(client, lease_ttl=30, recheck_seconds=1)
    newcomer_client = aredis.Redis.from_url(store.url())
    newcomer = Admission(newcomer_client, lease_ttl=30, recheck_seconds=1)
    try:
        await holder.set_capacity("g", {"r0": 2})
        running = [await holder.acquire(like(alice, group="g", per_key_cap=2, key_id=f"k{i}")) for i in range(2)]
        await newcomer.set_capacity("g", {"r0": 2})
        store.stop()
        store.start()  # empty: the two running requests' leases are gone
        await eventually(lambda: not newcomer._lane.connected, what="the old connection's close to be read")

        await newcomer.set_capacity("g", {"r0": 2})  # over a new connection: Redis lost the group
        waiting = asyncio.ensure_future(newcomer.acquire(like(bob, group="g")))

        async def counted_again() -> bool:
            return (await newcomer.stats())["replicas"].get("r0", {}).get("in_flight") == 2

        await eventually(counted_again, timeout=RESTART_HOLD_SECONDS, what="the running leases to count again")
        # Without the hold bob would have had one of the slots the running requests still use.
        assert (await newcomer.stats())["keys"]["bob"] == {"in_flight": 0, "queued": 1}
        await holder.release(running[0])
        assert (await asyncio.wait_for(waiting, 5)).replica == "r0"
    finally:
        await holder.close()
        await newcomer.close()
        await client.aclose()
        await newcomer_client.aclose()


async def test_a_request_queued_during_the_hold_is_granted_as_it_ends(store: PrivateRedis) -> None:
    client = aredis.Redis.from_url(store.url())
    # Rechecks every 5 s: only the upkeep at the hold's end can grant bob sooner.
    holder = Admission(client, lease_ttl=30, recheck_seconds=5)
    newcomer_client = aredis.Redis.from_url(store.url())
    newcomer = Admission(newcomer_client, lease_ttl=30, recheck_seconds=5)
    try:
        await holder.set_capacity("g", {"r0": 2})
        running = await holder.acquire(like(alice, group="g"))
        await newcomer.set_capacity("g", {"r0": 2})
        store.stop()
        store.start()
        await eventually(lambda: not newcomer._lane.connected, what="the old connection's close to be read")
        await newcomer.set_capacity("g", {"r0": 2})
        queued_at = asyncio.get_running_loop().time()
        grant = await asyncio.wait_for(newcomer.acquire(like(bob, group="g")), RESTART_HOLD_SECONDS + 1)
        assert asyncio.get_running_loop().time() - queued_at >= RESTART_HOLD_SECONDS * 0.9
        assert grant.replica == "r0"
        assert (await newcomer.stats())["replicas"]["r0"]["in_flight"] == 2  # alice's, counted again
        await holder.release(running)
    finally:
        await holder.close()
        await newcomer.close()
        await client.aclose()
        await newcomer_client.aclose()
