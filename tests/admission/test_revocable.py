"""Revocable borrowing (work that can be redone: a batch runner's lines, an answer not streamed):
such a borrower may take the reserve too, every slot while nobody chats and all but a spare while
chats come (one slot, one more for each chat that still had to wait, easing back by one every
30 s none did); a chat takes the spare at once, and the newest revocable lease is asked back,
once, on its own process's channel, so that the next chat finds a spare again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fairness.scheduling.admission import Admission, Grant
from tests.support.admission import GROUP, alice, bob, carol, enqueue, eventually, granted, like, start, until_queued

runner_carol = like(carol, revocable=True)


async def fill(admission: Admission, demand, n: int, clock=None) -> list[Grant]:
    """n grants, a second apart on `clock` when given."""
    grants = []
    for _ in range(n):
        grants.append(await granted(start(admission, demand)))
        if clock is not None:
            clock.advance(1.0)
    return grants


def asks(admission: Admission) -> list[str]:
    heard: list[str] = []
    admission.on_revoke = heard.append
    return heard


async def test_a_revocable_borrower_fills_every_slot_until_chats_come_then_leaves_them_a_spare(
    admission: Admission, clock,
) -> None:
    heard = asks(admission)
    await admission.set_capacity(GROUP, 8)
    grants = await fill(admission, runner_carol, 8, clock)  # nobody has chatted: the card is full of them
    assert sum(g.borrowed for g in grants) == 7  # one within carol's cap, seven borrowed

    chat = await enqueue(admission, alice)  # no slot: one is asked back for it, one for the spare
    await eventually(lambda: len(heard) == 2, what="two leases asked back")
    assert heard == [grants[-1].lease_id, grants[-2].lease_id]  # the newest first
    by_id = {g.lease_id: g for g in grants}
    for lease_id in heard:
        await admission.release(by_id.pop(lease_id))
    await granted(chat)
    later = await enqueue(admission, runner_carol)  # chats come now: the last slot stays spare
    clock.advance(61.0)  # and nobody chats for a minute: it is borrowed again
    await admission.stats()  # (any call pumps; a process's upkeep does it every recheck)
    await granted(later)


async def test_a_plain_borrower_leaves_the_whole_reserve(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 8)
    tasks = [start(admission, like(carol, key_id="dave")) for _ in range(8)]
    await eventually(lambda: sum(t.done() for t in tasks) == 6, what="six granted")  # 8 - the reserve of 2
    await until_queued(admission, "dave", 2)
    counts = (await admission.stats())["keys"]["dave"]  # (which pumps again) and no more are
    assert (counts["in_flight"], counts["queued"]) == (6, 2)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_chat_takes_the_spare_at_once_and_the_newest_lease_is_asked_back_once(
    make_admission: Callable[..., Awaitable[Admission]], clock,
) -> None:
    gateway, runner = await make_admission(), await make_admission()
    heard = asks(runner)
    await gateway.set_capacity(GROUP, 4)
    lines = await fill(runner, runner_carol, 3, clock)

    chat = await granted(start(gateway, alice))
    assert chat.queued_seconds == 0.0 and not chat.borrowed
    await eventually(lambda: heard, what="a lease asked back")
    assert heard == [lines[-1].lease_id]  # the newest: the least work lost
    await gateway.stats()  # calls pump again: nothing more is asked while the ask is outstanding
    assert heard == [lines[-1].lease_id]

    await runner.release(lines[-1])  # the spare is back: the next chat has it at once, and so on
    assert (await granted(start(gateway, bob))).queued_seconds == 0.0
    await eventually(lambda: len(heard) == 2, what="the next lease asked back")
    assert heard[1] == lines[-2].lease_id


async def test_chats_arriving_together_wait_only_for_leases_asked_back(
    make_admission: Callable[..., Awaitable[Admission]],
) -> None:
    gateway, runner = await make_admission(), await make_admission()
    heard = asks(runner)
    await gateway.set_capacity(GROUP, 4)
    lines = {g.lease_id: g for g in await fill(runner, runner_carol, 3)}
    await granted(start(gateway, alice))  # the spare
    waiting = await enqueue(gateway, bob)  # no slot: one more is asked for bob
    await eventually(lambda: len(heard) == 2, what="two leases asked back")
    for lease_id in heard:
        await runner.release(lines[lease_id])
    await granted(waiting)


async def test_plain_borrowers_are_never_asked_and_a_chat_waits_for_an_end(
    make_admission: Callable[..., Awaitable[Admission]],
) -> None:
    gateway, runner = await make_admission(reserve_slots=0), await make_admission(reserve_slots=0)
    heard = asks(runner)
    await gateway.set_capacity(GROUP, 2)
    plain = await fill(runner, carol, 2)
    waiting = await enqueue(gateway, alice)
    await gateway.stats()
    assert heard == [] and not waiting.done()
    await runner.release(plain[0])
    await granted(waiting)


async def test_a_chat_that_had_to_wait_makes_borrowers_keep_one_more_slot_spare_until_none_waits_for_30_s(
    make_admission: Callable[..., Awaitable[Admission]], clock,
) -> None:
    gateway, runner = await make_admission(), await make_admission()
    heard = asks(runner)
    await gateway.set_capacity(GROUP, 4)
    lines = {g.lease_id: g for g in await fill(runner, runner_carol, 4, clock)}  # 1 within carol's cap
    first = await enqueue(gateway, alice)  # after a quiet spell the first chat waits, by design
    await eventually(lambda: len(heard) == 2, what="a lease asked back for alice and one for the spare")
    for lease_id in heard:
        await runner.release(lines.pop(lease_id))
    chats = [await granted(first), await granted(start(gateway, bob))]  # bob has the spare at once
    await eventually(lambda: len(heard) == 3, what="the last borrowed lease asked back")
    erin = like(alice, key_id="erin")
    waiting = await enqueue(gateway, erin)  # while chats come, erin must wait: the spare becomes 2
    await runner.release(lines.pop(heard[2]))
    chats.append(await granted(waiting))
    for chat in chats:
        await gateway.release(chat)

    # Three slots free: a borrower takes one and leaves two, and two chats together start at once.
    borrowed = await granted(start(runner, runner_carol))
    assert borrowed.borrowed
    borrower = await enqueue(runner, runner_carol)
    await runner.stats()
    assert not borrower.done()
    together = [await granted(start(gateway, erin)), await granted(start(gateway, bob))]
    assert [g.queued_seconds for g in together] == [0.0, 0.0]
    for grant in together:
        await gateway.release(grant)

    clock.advance(29.0)  # no chat has waited since: the spare is still 2 ...
    await runner.stats()
    assert not borrower.done()
    clock.advance(2.0)  # ... until 30 s have passed: then 1, and the borrower has the other slot
    await runner.stats()
    assert (await granted(borrower)).borrowed
    last = await enqueue(runner, runner_carol)
    clock.advance(61.0)  # nobody chats for a minute: every slot may be borrowed again
    await runner.stats()
    await granted(last)


async def test_redoable_work_within_its_caps_is_no_chat_and_leaves_no_spare(admission: Admission, clock) -> None:
    await admission.set_capacity(GROUP, 8)
    runner_dave = like(runner_carol, key_id="dave", tier="bulk")  # another tier's pool
    grants = await fill(admission, runner_carol, 4, clock)  # carol's own slot, then three borrowed
    grants += await fill(admission, runner_dave, 4, clock)  # dave's own slot while carol borrows, ...
    assert sum(not g.borrowed for g in grants) == 2  # ... and all eight granted: no spare kept
