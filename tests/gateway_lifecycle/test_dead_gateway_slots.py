"""A SIGKILLed gateway's slots on each replica are free again within one lease TTL: the routing
counts are the leases themselves, so they cannot outlive them and steer the living gateways
around slots admission already gave back."""

from __future__ import annotations

import asyncio

import httpx

from enginesim.process import start_enginesim
from fairness.models import Replica
from tests.support.cast import MODEL
from tests.support.live_admission import admission_stats, hold
from tests.support.polling import wait_for
from tests.support.processes import start_gateway

LEASE_TTL = 2.0


def replica_counts() -> dict[str, int]:
    return {name: r["in_flight"] for name, r in admission_stats()["replicas"].items() if r["in_flight"]}


def test_a_dead_gateway_s_replica_counts_end_with_its_leases(live_db_url, tiers, cast, redis_url):
    sims = [start_enginesim(model=MODEL, max_num_seqs=8, extra_args=["--speed", "20"]) for _ in range(2)]
    for index, sim in enumerate(sims):
        Replica.objects.create(name=f"rep-{index}", base_url=sim.url, model=MODEL, max_num_seqs=8)
    gateway = start_gateway(live_db_url, name="short-lease", GP_LEASE_TTL_SECONDS=str(LEASE_TTL))
    try:
        async def hold_two() -> None:
            async with httpx.AsyncClient(timeout=60) as http:
                await hold(http, gateway.url, cast["alice"], 2)
                assert sum((await asyncio.to_thread(replica_counts)).values()) == 2
                gateway.kill()  # its clients' streams are cut with it

        asyncio.run(hold_two())
        wait_for(lambda: not replica_counts(), timeout=LEASE_TTL + 1.5, what="the dead gateway's slots back")
    finally:
        gateway.stop()
        for sim in sims:
            sim.stop()
