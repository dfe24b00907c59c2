"""Every lease holds a slot on one replica, chosen in the same atomic step as the grant: no
replica is ever given more than its slots, however many processes admit at once."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from fairness.scheduling.routing import choose, preference
from fairness.store import keyspace
from tests.support.admission import (
    admitted,
    alice,
    bob,
    enqueue,
    eventually,
    granted,
    like,
    queued,
    start,
    until_queued,
)
from tests.support.replicas import replica

GROUP = alice.group
OPEN = dict(per_key_cap=1000, max_queued_per_key=1000)


async def replica_counts(admission) -> dict[str, int]:
    """Leases running per replica (replicas running none left out)."""
    return {name: r["in_flight"] for name, r in (await admission.stats())["replicas"].items() if r["in_flight"]}


async def test_simultaneous_grants_from_two_processes_never_overfill_a_replica(make_admission):
    here, there = await make_admission(), await make_admission()
    await here.set_capacity(GROUP, {"r0": 8, "r1": 8})
    # Every request prefers r0, and the bound would let it take all it can.
    demand = like(alice, preference=("r0", "r1"), **OPEN)
    tasks = [start(process, demand) for process in (here, there) for _ in range(10)]
    await asyncio.sleep(0)  # all twenty in flight together
    done, pending = await asyncio.wait(tasks, timeout=5)
    placed = Counter(task.result().replica for task in done)
    assert placed == {"r0": 8, "r1": 8} and len(pending) == 4
    assert await replica_counts(here) == {"r0": 8, "r1": 8}
    # A slot freed on r1 goes to a waiting request, on r1.
    r1_grant = next(t.result() for t in done if t.result().replica == "r1")
    await there.release(r1_grant)
    finished, _ = await asyncio.wait(pending, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    assert [t.result().replica for t in finished] == ["r1"]
    for task in pending:
        task.cancel()


async def test_the_choice_is_the_bounded_load_rule_of_routing_choose(admission, redis_url):
    """The script and routing.choose (its specification) pick the same replica for random loads,
    conversations and slot counts, including down replicas (0 slots)."""
    import redis.asyncio

    rng = random.Random(1729)
    client = redis.asyncio.Redis.from_url(redis_url)
    in_flight = admission._ns + keyspace.ADMISSION_IN_FLIGHT_BY_REPLICA  # the leases per replica the script reads
    try:
        for trial in range(300):
            count = rng.randint(1, 5)
            replicas = [replica(f"r{i}", rng.choice([1, 2, 4, 8, 16])) for i in range(count)]
            slots = {r.name: r.max_num_seqs for r in replicas}
            for r in replicas:
                if rng.random() < 0.15:
                    slots[r.name] = 0  # down
            load = {r.name: rng.randint(0, slots[r.name]) for r in replicas}
            if all(load[n] >= slots[n] for n in slots):
                continue  # no free slot: nothing to grant
            await admission.set_capacity(GROUP, slots)
            await client.delete(in_flight)
            await client.hset(in_flight, mapping={n: c for n, c in load.items() if c} or {"none": 0})
            key = None if rng.random() < 0.2 else f"conversation-{trial}"
            order = () if key is None else tuple(r.name for r in preference(replicas, key))
            grant = await admitted(admission, like(alice, key_id=f"k{trial}", preference=order, **OPEN))
            serving = [r for r in replicas if slots[r.name] > 0]
            expected = choose(serving, key, load)[0].name
            assert grant.replica == expected, (trial, slots, load, key)
            await admission.release(grant)
    finally:
        await client.aclose()


async def test_a_request_whose_replica_failed_waits_for_a_slot_in_its_old_place(admission, clock):
    await admission.set_capacity(GROUP, {"r0": 1, "r1": 1})
    holder = await admitted(admission, like(alice, key_id="holder", preference=("r1", "r0")))
    moved = await admitted(admission, like(bob, preference=("r0", "r1")))
    assert (holder.replica, moved.replica) == ("r1", "r0")
    clock.advance(1)
    later = await enqueue(admission, like(alice, key_id="later"))  # arrives after bob
    await admission.set_capacity(GROUP, {"r0": 0, "r1": 1})  # r0 went down
    moving = asyncio.ensure_future(admission.move(moved, avoid="r0"))
    await until_queued(admission, "bob")  # r1 is full: it waits instead of overfilling r1
    assert await replica_counts(admission) == {"r1": 1}
    await admission.release(holder)
    regained = await granted(moving)
    assert regained.replica == "r1" and regained.lease_id == moved.lease_id
    assert not later.done()  # it arrived after the moved request
    later.cancel()


async def test_a_moved_request_avoids_the_replica_that_failed_it_while_another_has_a_slot(admission):
    await admission.set_capacity(GROUP, {"r0": 4, "r1": 4})
    grant = await admitted(admission, like(alice, preference=("r0", "r1")))
    assert grant.replica == "r0"
    moved = await asyncio.wait_for(admission.move(grant, avoid="r0"), 5)
    assert moved.replica == "r1"
    assert await replica_counts(admission) == {"r1": 1}


async def test_after_capacity_shrinks_nothing_is_granted_there_until_it_is_back_under(admission):
    await admission.set_capacity(GROUP, {"r0": 4})
    grants = [await admitted(admission, like(alice, key_id=f"k{i}")) for i in range(4)]
    await admission.set_capacity(GROUP, {"r0": 2})  # e.g. max_num_seqs lowered
    waiting = await enqueue(admission, like(alice, key_id="next"))
    await admission.release(grants[0])
    await admission.release(grants[1])
    assert await queued(admission, "next") == 1  # 2 still run on 2 slots: no room yet
    await admission.release(grants[2])
    assert (await granted(waiting)).replica == "r0"


async def test_a_lease_lost_with_redis_s_data_is_counted_again_while_its_request_runs(
    make_admission, redis_url
):
    import redis.asyncio

    admission = await make_admission(lease_ttl=0.9, recheck_seconds=0.05)
    await admission.set_capacity(GROUP, {"r0": 4})
    capped = like(alice, per_key_cap=1)
    running = await admitted(admission, capped)
    client = redis.asyncio.Redis.from_url(redis_url)
    try:  # Redis restarted empty: every admission key is gone
        await client.delete(*[k async for k in client.scan_iter(admission._ns + "*")])
    finally:
        await client.aclose()
    await admission.set_capacity(GROUP, {"r0": 4})  # the gateway states its capacity again

    async def counted_again() -> bool:
        stats = await admission.stats()
        return stats["keys"].get("alice", {}).get("in_flight") == 1

    await eventually(counted_again, what="the lost lease to be counted again")
    assert (await admission.stats())["replicas"]["r0"]["in_flight"] == 1
    second = await enqueue(admission, capped)  # alice is at her cap: she waits
    await admission.release(running)
    assert (await granted(second)).replica == "r0"


async def test_a_group_whose_capacity_redis_lost_is_stated_again_before_the_grant(make_admission, redis_url):
    import redis.asyncio

    stated: list[int] = []

    async def restate() -> None:
        stated.append(1)
        await admission.set_capacity(GROUP, {"r0": 2})

    admission = await make_admission(on_unknown_group=restate)
    grant = await admitted(admission, alice)  # the group is unknown yet: stated on demand
    assert grant.replica == "r0" and stated == [1]
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        await client.delete(*[k async for k in client.scan_iter(admission._ns + "*")])
    finally:
        await client.aclose()
    assert (await admitted(admission, bob)).replica == "r0" and stated == [1, 1]


async def test_a_process_that_has_not_reloaded_the_replicas_cannot_undo_one_that_has(admission, redis_url):
    import redis.asyncio

    from fairness.store import keyspace

    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        await client.set(keyspace.CONFIG_EPOCH, "after-the-change")
        assert await admission.set_capacity(GROUP, {"new": 4}, epoch="after-the-change")
        assert not await admission.set_capacity(GROUP, {"removed": 4}, epoch="before-the-change")
    finally:
        await client.aclose()
    assert (await admission.stats())["groups"][GROUP]["capacity"] == 4
    assert (await admitted(admission, alice)).replica == "new"


async def test_a_process_that_read_no_epoch_cannot_undo_one_that_read_the_new_one(admission, redis_url):
    # Redis lost the epoch (restarted empty, flushed): every process reads none and its statement
    # stands, until a change sets one; then a process that has not looked again is stale.
    import redis.asyncio

    from fairness.store import keyspace
    from fairness.store.config_epoch import NO_EPOCH

    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        await client.delete(keyspace.CONFIG_EPOCH)
        assert await admission.set_capacity(GROUP, {"old": 8, "removed": 8}, epoch=NO_EPOCH)
        await client.set(keyspace.CONFIG_EPOCH, "after-the-change")
        assert await admission.set_capacity(GROUP, {"old": 8}, epoch="after-the-change")
        assert not await admission.set_capacity(GROUP, {"old": 8, "removed": 8}, epoch=NO_EPOCH)
    finally:
        await client.delete(keyspace.CONFIG_EPOCH)
        await client.aclose()
    assert (await admission.stats())["groups"][GROUP]["capacity"] == 8
