"""Idle capacity is not wasted: a borrowing tier may exceed its caps out of idle engine slots,
leaving `reserve_slots` free, and caps bind again as soon as eligible requests wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fairness.scheduling.admission import Admission, Grant
from tests.support.admission import (
    GROUP,
    admitted,
    alice,
    bob,
    carol,
    enqueue,
    eventually,
    granted,
    like,
    queued,
    start,
)


async def lone_carol(admission: Admission, n: int) -> tuple[list[Grant], list[asyncio.Task[Grant]]]:
    """carol fires n requests at an idle card: the ones granted, and the ones still waiting."""
    tasks = [start(admission, carol) for _ in range(n)]

    async def settled() -> bool:
        return sum(t.done() for t in tasks) + await queued(admission, "carol") == n

    await eventually(settled, what="carol's requests granted or queued")
    return [t.result() for t in tasks if t.done()], [t for t in tasks if not t.done()]


async def test_lone_batch_key_uses_every_slot_but_the_reserve(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 8)
    grants, waiting = await lone_carol(admission, 8)
    assert len(grants) == 6 and len(waiting) == 2  # 8 slots - 2 reserve
    assert sorted(g.borrowed for g in grants) == [False] + [True] * 5  # her cap is 1
    stats = await admission.stats()
    assert stats["groups"][GROUP] == {"capacity": 8, "in_flight": 6, "queued": 2}
    assert stats["tiers"]["batch"]["borrowed"] == 5


async def test_interactive_arrival_gets_a_reserve_slot_at_once(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 8)
    await lone_carol(admission, 8)
    assert (await granted(start(admission, alice))).queued_seconds == 0.0
    assert (await granted(start(admission, bob))).queued_seconds == 0.0


async def test_borrowed_slots_come_back_and_are_not_reborrowed_while_others_wait(
    admission: Admission,
) -> None:
    await admission.set_capacity(GROUP, 8)
    carols, carol_waiting = await lone_carol(admission, 8)  # 6 running, 2 waiting
    alices = [await granted(start(admission, alice)) for _ in range(2)]  # card full
    bobs = await enqueue(admission, bob)  # eligible, arrived after carol's waiting ones
    await admission.release(carols.pop())
    await granted(bobs)  # the freed borrowed slot goes to bob, not back to carol
    await admission.release(carols.pop())  # 7 busy: lending would eat into the reserve
    assert not any(t.done() for t in carol_waiting)
    for grant in alices:
        await admission.release(grant)  # 5 busy: carol may borrow one more (6 = 8 - 2)
    done, pending = await asyncio.wait(carol_waiting, timeout=5, return_when="FIRST_COMPLETED")
    assert len(done) == 1 and done.pop().result().borrowed
    stats = await admission.stats()
    assert stats["groups"][GROUP]["in_flight"] == 6 and len(pending) == 1


async def test_borrowers_never_jump_an_eligible_waiter_even_with_no_reserve(
    make_admission: Callable[..., Awaitable[Admission]],
) -> None:
    admission = await make_admission(reserve_slots=0)
    await admission.set_capacity(GROUP, 4)
    carols, carol_waiting = await lone_carol(admission, 5)
    assert len(carols) == 4 and len(carol_waiting) == 1  # no reserve: the whole card
    alices = await enqueue(admission, alice)  # younger than carol's waiting ticket
    await admission.release(carols.pop())
    assert not (await granted(alices)).borrowed
    assert not carol_waiting[0].done()


async def test_non_borrowing_tier_stays_within_its_caps_on_an_idle_card(
    admission: Admission,
) -> None:
    await admission.set_capacity(GROUP, 8)
    strict = like(carol, borrow=False)
    first = await admitted(admission, strict)
    second = await enqueue(admission, strict)
    stats = await admission.stats()
    assert stats["groups"][GROUP]["in_flight"] == 1
    await admission.release(first)
    assert not (await granted(second)).borrowed


async def test_batch_pool_cap_is_borrowed_past_too(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 8)
    keys = [like(carol, key_id=f"batch-{i}") for i in range(5)]
    grants = [await granted(start(admission, d)) for d in keys]  # one each: the pool cap is 2
    assert [g.borrowed for g in grants] == [False, False, True, True, True]
    assert (await admission.stats())["tiers"]["batch"] == {
        "in_flight": 5, "borrowed": 3, "queued": 0, "longest_wait": 0.0,
    }
