"""Behind Redis Sentinel, a promoted replica may lack the last leases its old master granted
(replication is asynchronous): reaching a new master holds every group's grants, as a Redis
restarted empty does, so the running requests' leases count again before anyone else is granted."""

from __future__ import annotations

import asyncio

import redis

from fairness.scheduling.admission import RESTART_HOLD_SECONDS, Admission
from fairness.store import keyspace, redis_sentinel
from tests.support.admission import alice, bob, eventually, like
from tests.support.sentinel_redis import MASTER_NAME, SentinelRedis

URL = "redis://127.0.0.1:1/0"  # the sentinels give the address


def hold_on(port: int, group: str) -> float | None:
    held = redis.Redis(port=port).hget(keyspace.admission_namespace() + "hold", group)
    return None if held is None else float(held)


async def test_a_promoted_replica_grants_nothing_until_the_running_leases_count_again(
    sentinels: SentinelRedis,
) -> None:
    clients = [redis_sentinel.async_master(URL, sentinels.addresses, MASTER_NAME) for _ in range(2)]
    # Renewal only every 10 s: what counts a missing lease again is the upkeep on the new master.
    holder, newcomer = (Admission(client, lease_ttl=30, recheck_seconds=1) for client in clients)
    try:
        await holder.set_capacity("g", {"r0": 2})
        running = [await holder.acquire(like(alice, group="g", per_key_cap=2, key_id=f"k{i}")) for i in range(2)]
        await newcomer.stats()  # both processes have met the first master
        new = await asyncio.to_thread(sentinels.remonitor)
        # One running lease the old master never passed on before it went.
        redis.Redis(port=new).delete(keyspace.admission_namespace() + keyspace.ADMISSION_LEASE + running[1].lease_id)

        waiting = asyncio.ensure_future(newcomer.acquire(like(bob, group="g")))
        # The first process on the new master began the hold there, before its own acquire.
        assert await eventually(lambda: hold_on(new, "g"), what="the hold on the new master")
        began = hold_on(new, "g")

        async def counted_again() -> bool:
            # The holder reaches the new master too (its upkeep), finds its lease missing, retakes it.
            await holder.stats()
            return (await newcomer.stats())["replicas"].get("r0", {}).get("in_flight") == 2

        await eventually(counted_again, timeout=RESTART_HOLD_SECONDS, what="the running leases to count again")
        assert (await newcomer.stats())["keys"]["bob"] == {"in_flight": 0, "queued": 1}
        assert hold_on(new, "g") in (began, None)  # the second process to arrive did not extend it
        await holder.release(running[0])
        assert (await asyncio.wait_for(waiting, 5)).replica == "r0"
    finally:
        await holder.close()
        await newcomer.close()
        for client in clients:
            await client.aclose()
