"""Grants reach waiters in other processes at once (pub/sub), lost messages and dead holders are
covered by the recheck, and an idle process does no background work."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aredis

from fairness.scheduling.admission import Admission
from tests.support.admission import (
    GROUP,
    FakeClock,
    admitted,
    alice,
    bob,
    enqueue,
    eventually,
    granted,
    in_flight,
    like,
    start,
)

zed = like(bob, key_id="zed")
Make = Callable[..., Awaitable[Admission]]


async def test_release_in_one_process_wakes_a_waiter_in_another_at_once(
    make_admission: Make,
) -> None:
    gateway_a = await make_admission()
    gateway_b = await make_admission(recheck_seconds=3600)  # only pub/sub can be this quick
    await gateway_a.set_capacity(GROUP, 1)
    blocker = await admitted(gateway_a, zed)
    task = await enqueue(gateway_b, alice)
    await gateway_a.release(blocker)
    await granted(task, timeout=2)


async def test_a_lost_grant_message_is_found_by_the_recheck(make_admission: Make) -> None:
    gateway_a = await make_admission()
    gateway_b = await make_admission(recheck_seconds=0.05)
    await gateway_a.set_capacity(GROUP, 1)
    blocker = await admitted(gateway_a, zed)
    task = await enqueue(gateway_b, alice)
    await _deafen(gateway_b)
    await gateway_a.release(blocker)
    await granted(task, timeout=2)


async def test_disconnect_after_an_undelivered_grant_gives_the_lease_back(
    make_admission: Make,
) -> None:
    gateway_a = await make_admission()
    gateway_b = await make_admission(recheck_seconds=3600)
    await gateway_a.set_capacity(GROUP, 1)
    blocker = await admitted(gateway_a, zed)
    task = await enqueue(gateway_b, alice)
    await _deafen(gateway_b)
    await gateway_a.release(blocker)  # granted in Redis; b never hears of it
    assert await in_flight(gateway_a, "alice") == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await in_flight(gateway_a, "alice") == 0


async def test_a_dead_holders_lease_expires_and_the_waiter_gets_it(
    make_admission: Make, clock: FakeClock
) -> None:
    doomed = await make_admission(lease_ttl=30.0, recheck_seconds=1.0)
    survivor = await make_admission()
    await doomed.set_capacity(GROUP, 1)
    await admitted(doomed, zed)
    await _kill(doomed)
    task = await enqueue(survivor, alice)
    clock.advance(29.9)
    await asyncio.wait([task], timeout=0.2)  # a few rechecks: the lease is still valid
    assert not task.done()
    clock.advance(0.1)
    await granted(task)


async def test_an_idle_process_has_no_background_task(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    task = await enqueue(admission, alice)
    assert _keeper_running(admission)
    await admission.release(blocker)
    await admission.release(await granted(task))
    await eventually(lambda: not _keeper_running(admission), what="the keeper to stop")


async def _deafen(admission: Admission) -> None:
    """Lose this process's pub/sub deliveries (as a dropped connection would)."""
    listener = admission._listener
    assert listener is not None
    listener.cancel()
    await asyncio.wait([listener])


async def _kill(admission: Admission) -> None:
    """Stop renewing without releasing, as SIGKILL would (test_processes does the real thing)."""
    keeper = admission._keeper
    admission._held.clear()
    if keeper is not None:
        keeper.cancel()
        await asyncio.wait([keeper])


def _keeper_running(admission: Admission) -> bool:
    return admission._keeper is not None and not admission._keeper.done()


async def test_the_recheck_covers_more_waiters_than_one_upkeep_call_takes(
    redis_url: str, prefix: str, clock: FakeClock, make_admission: Make
) -> None:
    pool = aredis.BlockingConnectionPool.from_url(redis_url, max_connections=50)
    client = aredis.Redis(connection_pool=pool)  # a burst of acquires waits for a connection
    crowd = Admission(client, prefix=prefix, clock=clock, recheck_seconds=0.05)
    other = await make_admission()
    try:
        tasks = [start(crowd, like(alice, key_id=f"k{n}")) for n in range(1100)]

        async def all_queued() -> bool:
            return (await crowd.stats())["groups"].get(GROUP, {"queued": 0})["queued"] == 1100

        await eventually(all_queued, timeout=30, what="1,100 tickets to queue")
        await _deafen(crowd)
        await other.set_capacity(GROUP, 1100)
        done, pending = await asyncio.wait(tasks, timeout=10)
        assert not pending and all(not t.exception() for t in done)
    finally:
        await crowd.close()
        await client.aclose()
