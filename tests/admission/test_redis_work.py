"""What one request costs Redis, counted by Redis itself (INFO commandstats) on a server of the
test's own, so that no other test's commands are counted. Every command run inside the two
function calls is counted: this is the deployment's ceiling (one Redis core admits for every
gateway), so a change that adds work per request shows here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aredis

from fairness.scheduling.admission import Admission
from fairness.scheduling.limits import BudgetWindow, RateLimit
from tests.support.admission import GROUP, alice, carol, like
from tests.support.redis_server import PrivateRedis

REQUESTS = 50


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis().start()
    yield server
    server.stop()


async def _commands_per_request(admission: Admission, client: aredis.Redis, demand: Any) -> dict[str, float]:
    for _ in range(5):  # the library loaded, the caps and shares stated
        await admission.release(await admission.acquire(demand), charge=120.0)
    await client.execute_command("CONFIG", "RESETSTAT")
    for _ in range(REQUESTS):
        await admission.release(await admission.acquire(demand), charge=120.0)
    stats = await client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): entry["calls"] / REQUESTS
        for name, entry in stats.items()
        if name.startswith("cmdstat_") and "config" not in name
    }


@pytest.mark.parametrize("demand", [
    like(alice, association="7", share=0.5, fairshare_weight=600.0, estimate=100.0, preference=("r1", "r2")),
    like(carol, association="8", share=0.5, fairshare_weight=600.0, estimate=100.0),
], ids=["within-its-cap", "borrowing"])
async def test_a_request_nobody_waits_behind_costs_two_calls_and_at_most_29_commands(
    private_redis: PrivateRedis, demand: Any,
) -> None:
    # 58 commands before queue work was skipped while nobody waits and the dead were reaped only
    # when a slot is needed.
    client = aredis.Redis.from_url(private_redis.url())
    async def state_capacity_again() -> None:  # as a gateway does (the group is known here)
        raise AssertionError("the group's capacity is known")

    admission = Admission(client, prefix="work", reserve_slots=2, on_unknown_group=state_capacity_again)
    try:
        await admission.set_capacity(GROUP, {"r1": 8, "r2": 8})
        per_request = await _commands_per_request(admission, client, demand)
    finally:
        await admission.close()
        await client.aclose()
    assert per_request.pop("fcall") == 2
    inner = sum(per_request.values())
    assert inner <= 29, per_request


LIMITS = {
    "budgets": (BudgetWindow(1, "k1-month", 1e15, window_start=0, resets_at=4e9),
                BudgetWindow(2, "a1-day", 1e15, window_start=0, resets_at=4e9)),
    "rate_limits": (RateLimit("p1|rpm", 1e9), RateLimit("p1|tpm", 1e12, tokens=True)),
}


async def test_budgets_and_rate_limits_far_from_their_limits_cost_at_most_12_commands_more(
    private_redis: PrivateRedis,
) -> None:
    # Two budgets and two rate limits: read, reserve and settle each. (16 while every budgeted
    # request reaped the dead first, and every reservation set its window's expiry again.)
    client = aredis.Redis.from_url(private_redis.url())
    admission = Admission(client, prefix="work", reserve_slots=2)
    plain = like(alice, association="7", share=0.5, fairshare_weight=600.0, estimate=100.0)
    try:
        await admission.set_capacity(GROUP, 8)
        without = await _commands_per_request(admission, client, plain)
        with_limits = await _commands_per_request(admission, client, like(plain, **LIMITS))
    finally:
        await admission.close()
        await client.aclose()
    more = sum(with_limits.values()) - sum(without.values())
    assert more <= 12, (without, with_limits)
