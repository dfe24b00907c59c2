"""The wait estimate over real Redis: the pace admission measures, the snapshot the estimate
replays, its positions against the order of real grants, and a client's bound refused at once
when the estimate says it would be missed. (The replay itself: tests/wait_estimate/.)"""

from __future__ import annotations

import asyncio
import logging
import math

import pytest

from fairness.scheduling.admission import Admission, QueueFull, QueueTimeout, WillNotStartInTime, new_handle
from tests.support.admission import (
    GROUP,
    FakeClock,
    admitted,
    alice,
    bob,
    carol,
    enqueue,
    eventually,
    granted,
    like,
    queued,
    until_queued,
)

zed = like(alice, key_id="zed")


async def hold_for(admission: Admission, clock: FakeClock, seconds: float, n: int = 1) -> None:
    """n requests of the interactive tier, each holding the slot `seconds` of the clock while the
    next one waits for it (the pace is measured while anyone waits); the group has one slot."""
    holder = await admitted(admission, like(alice, key_id="pacer-0"))
    for i in range(1, n + 1):
        task = await enqueue(admission, like(alice, key_id=f"pacer-{i}"))
        clock.advance(seconds)
        await admission.release(holder)
        holder = await granted(task)
    await admission.release(holder)


async def test_the_pace_is_measured_per_tier_at_release(admission: Admission, clock: FakeClock) -> None:
    await admission.set_capacity(GROUP, 1)
    await hold_for(admission, clock, 10.0, n=3)
    lone = await admitted(admission, zed)  # nobody waits for it: not measured
    clock.advance(100.0)
    await admission.release(lone)
    clock.advance(-100.0)
    view = await admission.queue_view(GROUP)
    assert view.service["interactive"] == pytest.approx(10.0)
    assert "batch" not in view.service
    # Per person too: the three released while the next waited; the last, and zed, with nobody waiting.
    assert view.service_by_key == {f"pacer-{i}": pytest.approx(10.0) for i in range(3)}
    # pacer-1..3 queued once each, 30, 20 and 10 s ago: counts decayed with a 30 s time constant.
    for i, age in ((1, 30), (2, 20), (3, 10)):
        coming = view.arrivals[f"pacer-{i}"]
        assert coming.rate == pytest.approx(math.exp(-age / 30) / 30, rel=0.01)
        assert (coming.head_start, coming.pool) == (600.0, "interactive")
    assert "pacer-0" not in view.arrivals  # granted at once: it never waited


async def test_a_persons_grants_from_the_queue_are_measured_as_their_drain(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 1)
    holder = await admitted(admission, zed)
    for _ in range(7):  # grace's requests wait, and are let through one a second
        task = await enqueue(admission, like(carol, key_id="grace"))
        clock.advance(1.0)
        await admission.release(holder)
        holder = await granted(task)
    view = await admission.queue_view(GROUP)
    assert view.drain["grace"] == pytest.approx(1.0, rel=0.05)
    assert "zed" not in view.drain  # granted at once, not from the queue
    # Work given back to wait again (asked back for a chat, or its replica failed it) and granted
    # again is no progress: not counted.
    clock.advance(1.0)
    dave = await enqueue(admission, like(carol, key_id="dave"))
    moving = asyncio.get_running_loop().create_task(admission.move(holder, avoid=""))
    dave_grant = await granted(dave)  # the slot given back went to dave, and grace waits again
    await until_queued(admission, "grace")
    await admission.release(dave_grant)
    holder = await granted(moving)  # granted from the queue, but not for the first time
    assert (await admission.queue_view(GROUP)).drain["grace"] < view.drain["grace"]  # a second on, none counted
    clock.advance(11.0)
    assert "grace" not in (await admission.queue_view(GROUP)).drain  # none for 11 s: no current run
    await admission.release(holder)


async def test_positions_follow_admissions_order_and_grants_come_in_that_order(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 1)
    await hold_for(admission, clock, 10.0)
    blocker = await admitted(admission, zed)
    clock.advance(4.0)
    handles = {"carol": new_handle(), "bob": new_handle()}
    carol_task = asyncio.get_running_loop().create_task(admission.acquire(carol, handles["carol"]))
    await until_queued(admission, "carol")
    clock.advance(1.0)
    bob_task = asyncio.get_running_loop().create_task(admission.acquire(bob, handles["bob"]))
    await until_queued(admission, "bob")
    bob_wait = await admission.ticket_wait(GROUP, handles["bob"])
    carol_wait = await admission.ticket_wait(GROUP, handles["carol"])
    # bob arrived later but his head start puts him first; zed's lease has 5 s of its 10 left.
    assert bob_wait == (0, pytest.approx(5.0, abs=0.01))
    # carol waits for bob's 10 s too, and for chats expected meanwhile (they overtake her).
    assert carol_wait is not None and carol_wait[0] == 1 and carol_wait[1] is not None
    assert carol_wait[1] >= 15.0 - 0.01
    await admission.release(blocker)
    first = await granted(bob_task)
    assert not carol_task.done()
    assert await admission.ticket_wait(GROUP, handles["bob"]) is None  # no longer waiting
    await admission.release(first)
    await admission.release(await granted(carol_task))


async def test_a_client_bound_below_the_estimate_is_refused_at_once(admission: Admission, clock: FakeClock) -> None:
    await admission.set_capacity(GROUP, 1)
    await hold_for(admission, clock, 10.0)
    blocker = await admitted(admission, zed)
    hasty = like(alice, max_wait_seconds=2.0, refuse_if_late=True)
    with pytest.raises(WillNotStartInTime) as refused:
        await asyncio.wait_for(admission.acquire(hasty), 5)
    assert refused.value.estimate == pytest.approx(10.0, abs=0.01)
    assert refused.value.retry_after == 10
    assert await queued(admission, "alice") == 0  # it left the queue
    # A bound the estimate fits waits in the queue as usual, and is granted when the slot frees.
    patient = like(alice, max_wait_seconds=30.0, refuse_if_late=True)
    task = await enqueue(admission, patient)
    await admission.release(blocker)
    await admission.release(await granted(task))


async def test_a_fault_in_the_estimate_fails_no_request_and_refuses_no_bound(
    admission: Admission, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await admission.set_capacity(GROUP, 1)
    await hold_for(admission, clock, 10.0)
    blocker = await admitted(admission, zed)

    def broken(*_: object, **__: object) -> None:
        raise ValueError("a snapshot the replay cannot read")

    monkeypatch.setattr("fairness.scheduling.admission.replay", broken)
    caplog.set_level(logging.ERROR, logger="fairness.scheduling.admission")
    # A bound the estimate would refuse (as the test above): with no estimate, it waits instead.
    task = await enqueue(admission, like(alice, max_wait_seconds=2.0, refuse_if_late=True))
    await eventually(lambda: "the wait estimate failed" in caplog.text, what="the estimate tried")
    assert not task.done()
    await admission.release(blocker)
    grant = await granted(task)
    assert grant.queue_estimate is None
    await admission.release(grant)


async def test_without_a_client_bound_nobody_is_refused_for_the_estimate(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 1)
    await hold_for(admission, clock, 10.0)
    blocker = await admitted(admission, zed)
    task = await enqueue(admission, like(alice, max_wait_seconds=2.0))  # the tier's own bound
    await admission.release(blocker)
    await admission.release(await granted(task))


async def test_a_new_requests_wait_is_estimated_for_its_tier(admission: Admission, clock: FakeClock) -> None:
    await admission.set_capacity(GROUP, 1)
    await hold_for(admission, clock, 10.0)
    blocker = await admitted(admission, zed)
    waiting = await enqueue(admission, carol)
    assert (await admission.wait_for_new(alice)).newcomer_eta == pytest.approx(10.0, abs=0.01)
    later = (await admission.wait_for_new(like(carol, key_id="dave"))).newcomer_eta
    assert later is not None and later >= 20.0 - 0.01  # behind carol, and chats may come
    waiting.cancel()
    await admission.release(blocker)


async def test_a_grant_carries_the_estimate_its_request_queued_with(admission: Admission, clock: FakeClock) -> None:
    await admission.set_capacity(GROUP, 1)
    await hold_for(admission, clock, 10.0)
    at_once = await admitted(admission, zed)
    assert at_once.queue_estimate is None  # it never queued
    handle = new_handle()
    task = asyncio.get_running_loop().create_task(admission.acquire(alice, handle))
    # Its estimate is made by the group's next replay (at most one a quarter second): once a
    # replay has it, the request has its estimate too (it waited for that replay first).
    await eventually(lambda: admission.ticket_wait(GROUP, handle), what="the ticket estimated")
    clock.advance(3.0)
    await admission.release(at_once)
    grant = await granted(task)
    assert grant.queue_estimate == pytest.approx(10.0, abs=0.01)  # zed's lease, at the pace measured
    assert grant.queued_seconds == pytest.approx(3.0, abs=0.01)  # what it really waited
    await admission.release(grant)


async def test_a_full_queue_says_when_the_first_of_those_filling_it_will_start(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 1)
    await hold_for(admission, clock, 10.0)
    blocker = await admitted(admission, zed)
    clock.advance(6.0)
    limited = like(alice, max_queued_per_key=1)
    waiting = await enqueue(admission, limited)
    with pytest.raises(QueueFull) as refused:
        await admitted(admission, limited)
    # alice's waiting request starts when zed's lease ends: 4 s of its 10 left.
    assert refused.value.retry_after == 4
    waiting.cancel()
    await admission.release(blocker)


async def test_a_timeout_says_what_a_request_like_it_would_wait_now(admission: Admission, clock: FakeClock) -> None:
    await admission.set_capacity(GROUP, 1)
    await hold_for(admission, clock, 40.0)
    blocker = await admitted(admission, zed)
    task = await enqueue(admission, like(alice, max_wait_seconds=5.0))
    clock.advance(5.0)
    with pytest.raises(QueueTimeout) as timed_out:
        await granted(task)
    assert timed_out.value.retry_after == 35  # zed's lease: 35 s of its 40 left
    clock.advance(1000.0)
    task = await enqueue(admission, like(alice, max_wait_seconds=0.5))
    clock.advance(0.5)
    with pytest.raises(QueueTimeout) as again:
        await granted(task)
    assert again.value.retry_after == 10  # zed's lease is overdue: a quarter of the pace is its due
    await admission.release(blocker)


async def test_retry_after_from_the_estimate_is_at_most_a_minute(admission: Admission, clock: FakeClock) -> None:
    await admission.set_capacity(GROUP, 1)
    await hold_for(admission, clock, 600.0)
    blocker = await admitted(admission, zed)
    limited = like(alice, max_queued_per_key=1)
    waiting = await enqueue(admission, limited)
    with pytest.raises(QueueFull) as refused:
        await admitted(admission, limited)
    assert refused.value.retry_after == 60
    waiting.cancel()
    await admission.release(blocker)
