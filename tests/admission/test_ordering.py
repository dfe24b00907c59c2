"""Who goes next: ageing priority (enqueued_at - head_start, smallest first, ties by arrival),
and no head-of-line blocking by tickets whose key or pool is at its cap."""

from __future__ import annotations

import asyncio

from fairness.scheduling.admission import Admission, Grant
from tests.support.admission import GROUP, FakeClock, admitted, alice, bob, carol, dave, enqueue, granted, like, start

zed = like(alice, key_id="zed")  # holds the only slot while the others line up


async def grant_order(admission: Admission, tasks: dict[str, asyncio.Task[Grant]]) -> list[str]:
    """With one engine slot: release each grant as it arrives; the names in grant order."""
    order: list[str] = []
    pending = dict(tasks)
    while pending:
        done, _ = await asyncio.wait(pending.values(), timeout=5, return_when="FIRST_COMPLETED")
        assert len(done) == 1, "one slot, so one grant at a time"
        (name,) = [n for n, t in pending.items() if t in done]
        order.append(name)
        await admission.release(pending.pop(name).result())
    return order


async def test_interactive_goes_before_batch_that_arrived_earlier(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    tasks = {"carol": await enqueue(admission, carol)}
    clock.advance(10)
    tasks["alice"] = await enqueue(admission, alice)
    await admission.release(blocker)
    assert await grant_order(admission, tasks) == ["alice", "carol"]


async def test_batch_that_waited_the_head_start_wins_exactly_at_the_crossover(
    admission: Admission, clock: FakeClock
) -> None:
    # carol's score is T - 0, alice's is (T + 600) - 600: equal. Ties go by arrival, so the
    # request that has waited the whole head start goes first.
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    tasks = {"carol": await enqueue(admission, carol)}
    clock.advance(600)
    tasks["alice"] = await enqueue(admission, alice)
    await admission.release(blocker)
    assert await grant_order(admission, tasks) == ["carol", "alice"]


async def test_interactive_still_wins_just_before_the_crossover(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    tasks = {"carol": await enqueue(admission, carol)}
    clock.advance(599.5)
    tasks["alice"] = await enqueue(admission, alice)
    await admission.release(blocker)
    assert await grant_order(admission, tasks) == ["alice", "carol"]


async def test_equal_scores_go_by_arrival_across_keys(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    tasks = {name: await enqueue(admission, like(alice, key_id=name)) for name in "qpnmo"}
    await admission.release(blocker)
    assert await grant_order(admission, tasks) == list("qpnmo")


async def test_older_batch_outranks_fresh_interactive_long_after_head_start(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    tasks = {"carol": await enqueue(admission, carol)}
    clock.advance(900)
    tasks["alice"] = await enqueue(admission, alice)
    tasks["bob"] = await enqueue(admission, bob)
    await admission.release(blocker)
    assert await grant_order(admission, tasks) == ["carol", "alice", "bob"]


async def test_ticket_of_a_capped_key_is_skipped_not_waited_on(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 2)
    solo = like(alice, per_key_cap=1)
    first = await admitted(admission, solo)
    blocker = await admitted(admission, zed)
    second = await enqueue(admission, solo)  # older, but alice is at her cap
    clock.advance(5)
    bobs = await enqueue(admission, bob)
    await admission.release(blocker)
    await granted(bobs)
    assert not second.done()
    await admission.release(first)
    assert (await granted(second)).queued_seconds == 5.0


async def test_full_batch_pool_does_not_block_other_tiers(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 8)
    no_borrow = {"borrow": False}
    held = [await admitted(admission, like(carol, **no_borrow)),
            await admitted(admission, like(dave, **no_borrow))]
    erin = await enqueue(admission, like(carol, key_id="erin", **no_borrow))  # pool at 2
    assert (await granted(start(admission, alice))).queued_seconds == 0.0
    await admission.release(held[0])
    await granted(erin)


async def test_full_group_does_not_block_another_group(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 1)
    await admission.set_capacity("big-llm", 1)
    await admitted(admission, zed)
    waiting = await enqueue(admission, alice)
    await granted(start(admission, like(alice, group="big-llm")))
    assert not waiting.done()


async def test_key_at_cap_by_one_group_gets_its_other_group_ticket_when_it_releases(
    admission: Admission,
) -> None:
    await admission.set_capacity(GROUP, 4)
    await admission.set_capacity("big-llm", 4)
    solo = like(alice, per_key_cap=1)
    first = await admitted(admission, solo)
    other = await enqueue(admission, like(solo, group="big-llm"))
    await admission.release(first)
    assert (await granted(other)).demand.group == "big-llm"


async def test_time_behind_its_own_cap_does_not_age_a_ticket(
    admission: Admission, clock: FakeClock
) -> None:
    # alice's second request waits behind her own cap from t0; bob's is eligible from t0 + 100
    # and waits only for the card. When alice's cap opens at t0 + 200 her ticket counts from
    # then, so bob, who has waited longer for others, goes first.
    await admission.set_capacity(GROUP, 2)
    solo = like(alice, per_key_cap=1)
    first = await admitted(admission, solo)
    blocker = await admitted(admission, zed)
    second = await enqueue(admission, solo)
    clock.advance(100)
    bobs = await enqueue(admission, bob)
    clock.advance(100)
    await admission.release(first)
    await granted(bobs)
    assert not second.done()
    await admission.release(blocker)
    assert (await granted(second)).queued_seconds == 200.0


async def test_a_ticket_behind_its_own_keys_earlier_request_keeps_its_age(
    admission: Admission, clock: FakeClock
) -> None:
    # alice's cap (2) never holds her tickets back, only the one slot does: both keep their
    # age, so bob, who came later, goes after both.
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    tasks = {"alice-1": await enqueue(admission, alice), "alice-2": await enqueue(admission, alice)}
    clock.advance(10)
    tasks["bob"] = await enqueue(admission, bob)
    await admission.release(blocker)
    assert await grant_order(admission, tasks) == ["alice-1", "alice-2", "bob"]
