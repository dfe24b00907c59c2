"""A pinned demand (a conversation stored in one engine's memory) runs only on its replica: it
waits while that replica is full even when another has room, takes the replica's next free slot at
once (no recheck needed), and counts on the same slots as its group, so no replica is ever given
more than it has. Its leases and tickets are its group's in the stats."""

from __future__ import annotations

import asyncio
from collections import Counter

from fairness.scheduling.live_counts import group_of, pinned_group
from tests.support.admission import admitted, alice, bob, carol, enqueue, eventually, granted, like, start

GROUP = alice.group
PINNED = pinned_group(GROUP, "r0")
OPEN = dict(per_key_cap=1000, max_queued_per_key=1000)
SLOW_RECHECK = 30.0  # far beyond the tests' waits: a grant must come from the release itself


async def test_a_pinned_demand_waits_for_its_replica_while_another_has_room(make_admission):
    admission = await make_admission(recheck_seconds=SLOW_RECHECK)
    await admission.set_capacity(GROUP, {"r0": 1, "r1": 1})
    on_r0 = await admitted(admission, like(alice, preference=("r0",)))
    assert on_r0.replica == "r0"

    pinned = await enqueue(admission, like(bob, group=PINNED))  # r1 is free, and not its replica
    elsewhere = await admitted(admission, like(carol, group=GROUP))
    assert elsewhere.replica == "r1"
    assert not pinned.done()

    await admission.release(on_r0)
    grant = await granted(pinned)
    assert grant.replica == "r0"


async def test_a_slot_a_pinned_lease_frees_goes_to_its_groups_queue_at_once(make_admission):
    admission = await make_admission(recheck_seconds=SLOW_RECHECK)
    await admission.set_capacity(GROUP, {"r0": 1})
    pinned = await admitted(admission, like(alice, group=PINNED))
    waiting = await enqueue(admission, like(bob, group=GROUP))
    await admission.release(pinned)
    assert (await granted(waiting)).replica == "r0"


async def test_a_pins_leases_and_tickets_are_its_groups_in_the_stats(make_admission):
    admission = await make_admission()
    await admission.set_capacity(GROUP, {"r0": 1, "r1": 1})
    await admitted(admission, like(alice, group=PINNED))
    await enqueue(admission, like(bob, group=PINNED))
    groups = (await admission.stats())["groups"]
    assert set(groups) == {GROUP}
    assert groups[GROUP] == {"capacity": 2, "in_flight": 1, "queued": 1}
    assert group_of(PINNED) == GROUP and group_of(GROUP) == GROUP


async def test_pinned_and_free_demands_from_two_processes_never_overfill_a_replica(make_admission):
    here, there = await make_admission(), await make_admission()
    await here.set_capacity(GROUP, {"r0": 2, "r1": 2})
    demands = [like(alice, key_id=f"p{i}", group=PINNED, **OPEN) for i in range(6)]
    demands += [like(alice, key_id=f"f{i}", **OPEN) for i in range(6)]
    owners = [(here, there)[i % 2] for i in range(len(demands))]
    tasks = [start(owner, demand) for owner, demand in zip(owners, demands, strict=True)]
    owner_of = dict(zip(tasks, owners, strict=True))  # each grant is given back by its own process
    await asyncio.sleep(0)
    for _round in range(8):  # release what runs, a round at a time, until everyone has run
        done = [t for t in tasks if t.done()]
        running = Counter(t.result().replica for t in done if not getattr(t, "released", False))
        assert running["r0"] <= 2 and running["r1"] <= 2, running
        counted = {name: r["in_flight"] for name, r in (await here.stats())["replicas"].items()}
        assert all(count <= 2 for count in counted.values()), counted
        for task in done:
            if not getattr(task, "released", False):
                grant = task.result()
                if grant.demand.group == PINNED:
                    assert grant.replica == "r0"
                await owner_of[task].release(grant)
                task.released = True  # type: ignore[attr-defined]
        if all(getattr(t, "released", False) for t in tasks):
            break
        await asyncio.wait([t for t in tasks if not t.done()] or tasks, timeout=5,
                           return_when=asyncio.FIRST_COMPLETED)
    assert all(getattr(t, "released", False) for t in tasks)


async def test_a_pinned_demand_has_a_borrower_on_its_replica_asked_back_and_no_other(make_admission):
    gateway, runner = await make_admission(), await make_admission()
    heard: list[str] = []
    runner.on_revoke = heard.append
    await gateway.set_capacity(GROUP, {"r0": 2, "r1": 2})
    batch = like(carol, revocable=True, per_key_cap=1000, max_queued_per_key=1000)
    lines = [await admitted(runner, batch) for _ in range(4)]  # nobody chats: redoable work fills both
    on_r0 = {g.lease_id: g for g in lines if g.replica == "r0"}
    assert len(on_r0) == 2

    pinned = await enqueue(gateway, like(alice, group=PINNED))
    await eventually(lambda: heard, what="a lease asked back")
    assert len(heard) == 1 and heard[0] in on_r0  # one, and on the pin's replica
    await runner.release(on_r0[heard[0]])
    assert (await granted(pinned)).replica == "r0"
    await gateway.stats()  # pumps again: nothing more is asked once the pin has its slot
    assert len(heard) == 1
