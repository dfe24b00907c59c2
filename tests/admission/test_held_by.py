"""What held a waiting request: acquire.lua says it with every queued reply, and the grant (or the
timeout) carries the last reason given, for the request log."""

from __future__ import annotations

import asyncio

import pytest

from fairness.models import UsageRecord
from fairness.scheduling.admission import HELD_BY, Admission, QueueTimeout
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
    until_queued,
)

zed = like(alice, key_id="zed")  # holds the only slot while the others line up


async def test_a_request_granted_at_once_was_held_by_nothing(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 4)
    grant = await admitted(admission, alice)
    assert grant.held_by == ""


async def test_a_person_at_their_cap_is_held_by_their_cap(admission: Admission) -> None:
    # Slots are free: only alice's own cap (two at once) keeps her third request waiting.
    await admission.set_capacity(GROUP, 8)
    first, second = await admitted(admission, alice), await admitted(admission, alice)
    third = await enqueue(admission, alice)
    await admission.release(first)
    grant = await granted(third)
    assert grant.held_by == "person_cap"
    await admission.release(second)


async def test_a_full_tier_pool_holds_a_request_within_its_own_cap(admission: Admission) -> None:
    # The batch pool takes two at once; erin's own cap is open and a slot is free, but not
    # enough of them to borrow beyond the pool (the reserve of two stays for other tiers).
    await admission.set_capacity(GROUP, 3)
    held = [await admitted(admission, carol), await admitted(admission, dave)]
    erin = await enqueue(admission, like(carol, key_id="erin"))
    await admission.release(held[0])
    grant = await granted(erin)
    assert grant.held_by == "tier_pool"
    assert not grant.borrowed


async def test_a_request_first_in_line_with_every_slot_busy_is_held_by_no_slot(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    waiting = await enqueue(admission, alice)
    await admission.release(blocker)
    assert (await granted(waiting)).held_by == "no_slot"


async def test_fair_share_decides_who_is_ahead_and_so_what_held_a_request(
    make_admission, clock: FakeClock,
) -> None:
    # The heavy association queues first, the light one after: by fair share the light one goes
    # ahead, so nothing but the busy slot holds it, while a heavy newcomer waits behind it.
    admission = await make_admission(half_life_seconds=3600.0)
    await admission.set_capacity(GROUP, 1)
    heavy = like(alice, association="1", share=0.5, fairshare_weight=600.0)
    light = like(bob, association="2", share=0.5, fairshare_weight=600.0)
    await admission.release(await admitted(admission, heavy), charge=1e6)
    blocker = await admitted(admission, zed)
    heavy_waits = await enqueue(admission, heavy)
    clock.advance(1)
    light_waits = await enqueue(admission, light)
    another_heavy = await enqueue(admission, like(heavy, key_id="hank"))
    await admission.release(blocker)
    first = await granted(light_waits)
    assert first.held_by == "no_slot"
    assert not heavy_waits.done()
    await admission.release(first)
    second = await granted(heavy_waits)
    assert second.held_by == "no_slot"  # first in line when it queued
    await admission.release(second)
    assert (await granted(another_heavy)).held_by == "fair_share_order"


async def test_a_newcomer_behind_an_earlier_request_is_held_by_the_order(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    ahead = await enqueue(admission, bob)
    behind = await enqueue(admission, alice)  # same tier, same head start: bob came first
    await admission.release(blocker)
    bob_grant = await granted(ahead)
    assert bob_grant.held_by == "no_slot"
    await admission.release(bob_grant)
    assert (await granted(behind)).held_by == "fair_share_order"


async def test_the_caller_is_told_what_holds_a_request_that_never_gets_its_grant(
    admission: Admission, clock: FakeClock,
) -> None:
    await admission.set_capacity(GROUP, 1)
    await admitted(admission, zed)
    told: list[str] = []
    waiting = asyncio.get_running_loop().create_task(
        admission.acquire(like(alice, max_wait_seconds=5.0), on_hold=told.append))
    await until_queued(admission, "alice")
    assert told == ["no_slot"]
    clock.advance(6)
    with pytest.raises(QueueTimeout):
        await granted(waiting)
    assert told == ["no_slot"]


def test_the_request_log_names_every_reason_admission_gives() -> None:
    assert set(HELD_BY) == set(UsageRecord.HeldBy.values)
