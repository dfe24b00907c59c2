"""Queue bounds beyond one key's: a tier's across its keys (max_queued_per_tier) and the whole
deployment's (max_queued_total), checked in the call that would queue."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from fairness.scheduling.admission import Admission, QueueFull
from tests.support.admission import (
    GROUP,
    FakeClock,
    admitted,
    alice,
    bob,
    carol,
    dave,
    enqueue,
    granted,
    like,
    queued,
    until_queued,
)

zed = like(bob, key_id="zed", tier="other")  # holds the only slot


async def test_a_tier_bound_refuses_the_tiers_next_waiting_request_whichever_key_sends_it(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 1)
    await admitted(admission, zed)
    bounded = {"max_queued_per_tier": 3, "max_wait_seconds": 20.0}
    await enqueue(admission, like(carol, **bounded))
    clock.advance(5)
    await enqueue(admission, like(carol, **bounded))
    await enqueue(admission, like(dave, **bounded))
    with pytest.raises(QueueFull) as refused:
        await admitted(admission, like(dave, **bounded))
    assert refused.value.bound == "tier"
    # A place frees at the latest when the tier's oldest ticket times out: 20 - 5 s from now.
    assert refused.value.retry_after == 15
    assert "batch tier already has 3 requests waiting" in refused.value.message
    assert "_" not in refused.value.message
    assert await queued(admission, "dave") == 1
    await enqueue(admission, alice)  # another tier still queues


async def test_the_total_bound_refuses_every_tier_once_that_many_wait(
    make_admission: Callable[..., Awaitable[Admission]], clock: FakeClock
) -> None:
    # Two gateway processes share the one bound: it counts what waits in Redis, not per process.
    one, two = await make_admission(max_queued_total=3), await make_admission(max_queued_total=3)
    await one.set_capacity(GROUP, 1)
    await admitted(one, zed)
    await enqueue(one, carol)
    await enqueue(two, dave)
    first_alice = await enqueue(two, alice)
    for process, demand in ((one, bob), (two, carol), (one, like(alice, max_queued_per_tier=100))):
        with pytest.raises(QueueFull) as refused:
            await admitted(process, demand)
        assert refused.value.bound == "total"
        assert "gateway already has 3 requests waiting" in refused.value.message
        assert 1 <= refused.value.retry_after <= 30
    first_alice.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first_alice
    await enqueue(one, bob)  # a place came free


async def test_queue_bounds_do_not_refuse_a_request_that_runs_at_once(
    make_admission: Callable[..., Awaitable[Admission]],
) -> None:
    admission = await make_admission(max_queued_total=2)
    await admission.set_capacity(GROUP, 8)
    capped = like(alice, per_key_cap=1, max_queued_per_tier=2)
    await admitted(admission, capped)
    await enqueue(admission, capped)  # waits behind its own key's cap, slots stay free
    await enqueue(admission, capped)
    grant = await admitted(admission, like(bob, max_queued_per_tier=2))  # tier and total full: runs
    assert grant.replica == GROUP
    with pytest.raises(QueueFull):
        await admitted(admission, capped)


async def test_a_request_moved_off_a_failed_replica_keeps_its_place_past_full_bounds(
    make_admission: Callable[..., Awaitable[Admission]],
) -> None:
    # The process moving it has a lower total bound than what already waits (a setting changed).
    loose, strict = await make_admission(), await make_admission(max_queued_total=1)
    await strict.set_capacity(GROUP, {"a": 1, "b": 1})
    moved = await admitted(strict, alice)
    other = await admitted(strict, bob)
    await enqueue(loose, carol)
    await enqueue(loose, dave)
    task = asyncio.get_running_loop().create_task(strict.move(moved, avoid="a"))
    await until_queued(strict, "alice")  # carol took the slot it gave back; it waits, not refused
    assert not task.done()
    await strict.release(other)
    assert (await granted(task)).replica == "b"  # its old place is ahead of dave's
