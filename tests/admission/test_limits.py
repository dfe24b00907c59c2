"""Queue limits: QueueFull (max_queued_per_key), QueueTimeout (max_wait_seconds), and the time a
grant reports having queued."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from fairness.scheduling.admission import Admission, QueueFull, QueueTimeout
from tests.support.admission import GROUP, FakeClock, admitted, alice, bob, enqueue, eventually, granted, like, queued

zed = like(bob, key_id="zed")


async def test_it_refuses_a_request_beyond_max_queued_per_key(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 1)
    await admitted(admission, zed)
    limited = like(alice, max_queued_per_key=2, max_wait_seconds=20)
    await enqueue(admission, limited)
    clock.advance(4)
    await enqueue(admission, limited)
    clock.advance(0.5)
    with pytest.raises(QueueFull) as refused:
        await admitted(admission, limited)
    # A place frees at the latest when alice's oldest ticket times out: 20 - 4.5 s from now.
    assert refused.value.retry_after == 16
    assert "have 2 requests waiting" in refused.value.message and "_" not in refused.value.message
    assert await queued(admission, "alice") == 2
    await enqueue(admission, bob)  # other keys still queue


async def test_zero_max_queued_refuses_at_once_when_it_cannot_run(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 1)
    no_queue = like(alice, max_queued_per_key=0)
    grant = await admitted(admission, no_queue)  # runs: queueing limits only apply to waiting
    with pytest.raises(QueueFull) as refused:
        await admitted(admission, no_queue)
    assert refused.value.retry_after == 1
    await admission.release(grant)


async def test_it_times_out_a_ticket_after_max_wait_and_it_leaves_the_queue(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 1)
    await admitted(admission, zed)
    task = await enqueue(admission, like(alice, max_wait_seconds=12))
    clock.advance(11.9)
    assert await queued(admission, "alice") == 1 and not task.done()
    clock.advance(0.1)
    with pytest.raises(QueueTimeout) as refused:
        await granted(task)
    assert refused.value.retry_after == 12
    assert "within 12 s" in refused.value.message and "_" not in refused.value.message
    assert await queued(admission, "alice") == 0


async def test_long_waits_give_a_bounded_retry_after(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 1)
    await admitted(admission, zed)
    patient = like(alice, max_wait_seconds=3600, max_queued_per_key=1)
    task = await enqueue(admission, patient)
    with pytest.raises(QueueFull) as full:
        await admitted(admission, patient)
    assert full.value.retry_after == 30
    clock.advance(3600)
    with pytest.raises(QueueTimeout) as timed_out:
        await granted(task)
    assert timed_out.value.retry_after == 30


async def test_a_grant_at_the_deadline_is_kept_not_thrown_away(
    make_admission: Callable[..., Awaitable[Admission]], clock: FakeClock
) -> None:
    # The waiter only looks at its deadline every recheck; a grant that lands first wins.
    admission = await make_admission(recheck_seconds=3600)
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    task = await enqueue(admission, like(alice, max_wait_seconds=10))
    clock.advance(10)
    await admission.release(blocker)
    assert (await granted(task)).queued_seconds == 10.0


async def test_grant_reports_the_time_spent_queued(admission: Admission, clock: FakeClock) -> None:
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    assert blocker.queued_seconds == 0.0
    task = await enqueue(admission, alice)
    clock.advance(12.25)
    await admission.release(blocker)
    assert (await granted(task)).queued_seconds == 12.25


async def test_no_capacity_means_waiting_not_running(admission: Admission) -> None:
    task = await enqueue(admission, alice)  # group never given any slots
    await admission.set_capacity(GROUP, 1)
    await granted(task)
    await eventually(lambda: task.done())
