"""`plan`: the choice over healthy replicas with the load every gateway process shares."""

from __future__ import annotations

from fairness.scheduling import health
from fairness.scheduling.routing import LoadBook, plan, preference


async def test_plan_follows_the_conversation_when_all_is_well(aredis, make_replicas):
    replicas = make_replicas(4)
    book = LoadBook(aredis)
    order = await plan(book, replicas, "k")
    assert order == preference(replicas, "k")


async def test_plan_routes_around_a_replica_marked_down(aredis, make_replicas):
    replicas = make_replicas(4)
    favourite, runner_up = preference(replicas, "k")[:2]
    await health.mark_down(aredis, favourite, cooldown=60)
    order = await plan(LoadBook(aredis), replicas, "k")
    assert order[0] == runner_up
    assert favourite not in order


async def test_plan_tries_everything_when_everything_is_marked_down(aredis, make_replicas):
    replicas = make_replicas(2)
    for r in replicas:
        await health.mark_down(aredis, r, cooldown=60)
    assert sorted(r.name for r in await plan(LoadBook(aredis), replicas, "k")) == ["r0", "r1"]


async def test_plan_sees_the_load_of_other_processes(aredis, make_replicas):
    replicas = make_replicas(2, max_num_seqs=2)
    favourite, other = preference(replicas, "k")
    elsewhere, here = LoadBook(aredis), LoadBook(aredis)
    try:
        for _ in range(2):
            elsewhere.add(favourite.name)  # another gateway filled it
        await elsewhere.settled()
        assert (await plan(here, replicas, "k"))[0] == other
    finally:
        await elsewhere.close()


async def test_plan_of_no_replicas_is_empty(aredis):
    assert await plan(LoadBook(aredis), [], "k") == []
