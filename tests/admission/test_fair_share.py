"""Fair share in the queue: usage charged at release decays with its half-life, the factor
F = 2^(-U/S) ranks a heavy association's requests later within their tier by up to the tier's
weight, a charge re-scores only that association's stream heads, and ageing still bounds it."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aredis

from fairness.scheduling import fair_share
from fairness.scheduling.admission import Admission
from fairness.store import keyspace
from tests.support.admission import GROUP, FakeClock, admitted, alice, bob, enqueue, eventually, granted, like

from .test_ordering import grant_order

HOUR = 3600.0
WEIGHT = 300.0  # seconds of rank that a whole lot of usage can cost
heavy = like(alice, key_id="heavy", association="1", share=0.5, fairshare_weight=WEIGHT)
light = like(bob, key_id="light", association="2", share=0.5, fairshare_weight=WEIGHT)
zed = like(alice, key_id="zed")  # holds the only slot while the others line up


async def usage(admission: Admission) -> dict[str, float]:
    return (await admission.fair_share_usage())[0]


async def charge(admission: Admission, association: str, amount: float) -> None:
    await admission.send(admission.charge_command(association, amount))


async def test_usage_halves_after_one_half_life(make_admission, clock: FakeClock) -> None:
    admission = await make_admission(half_life_seconds=HOUR)
    await admission.set_capacity(GROUP, 4)
    grant = await admitted(admission, heavy)  # states the half-life and the share
    await admission.release(grant, charge=1000.0)
    assert (await usage(admission))["1"] == pytest.approx(1000.0)
    clock.advance(HOUR)
    assert (await usage(admission))["1"] == pytest.approx(500.0)
    await charge(admission, "1", 100.0)
    clock.advance(HOUR)
    used, total, shares = await admission.fair_share_usage()
    assert used["1"] == pytest.approx(300.0) and total == pytest.approx(300.0)
    assert shares == {"1": 0.5}


async def test_a_heavy_user_waits_behind_a_light_one_who_came_later(
    make_admission, clock: FakeClock
) -> None:
    admission = await make_admission(half_life_seconds=168 * HOUR)
    await admission.set_capacity(GROUP, 1)
    for demand in (heavy, light):  # each states its association's share
        await admission.release(await admitted(admission, demand))
    await charge(admission, "1", 9000.0)
    await charge(admission, "2", 1000.0)
    blocker = await admitted(admission, zed)
    tasks = {"heavy": await enqueue(admission, heavy)}
    clock.advance(10)
    tasks["light"] = await enqueue(admission, light)
    await admission.release(blocker)
    assert await grant_order(admission, tasks) == ["light", "heavy"]


async def test_equal_factors_keep_the_order_of_arrival(make_admission, clock: FakeClock) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 1)
    for demand in (heavy, light):
        await admission.release(await admitted(admission, demand))
    await charge(admission, "1", 500.0)
    await charge(admission, "2", 500.0)
    blocker = await admitted(admission, zed)
    tasks = {"heavy": await enqueue(admission, heavy)}
    clock.advance(1)
    tasks["light"] = await enqueue(admission, light)
    await admission.release(blocker)
    assert await grant_order(admission, tasks) == ["heavy", "light"]


async def test_ageing_bounds_the_wait_of_an_association_far_over_its_share(
    make_admission, clock: FakeClock
) -> None:
    # F ~ 0 costs at most WEIGHT seconds of rank: a fresh user who arrives more than that later
    # goes after it, one who arrives sooner goes before.
    admission = await make_admission()
    await admission.set_capacity(GROUP, 1)
    tiny = like(heavy, share=0.05)  # all the usage on a twentieth of the shares: F = 2^-20
    for demand in (tiny, light):
        await admission.release(await admitted(admission, demand))
    await charge(admission, "1", 1e9)
    blocker = await admitted(admission, zed)
    tasks = {"heavy": await enqueue(admission, tiny)}
    clock.advance(WEIGHT - 5)
    tasks["light"] = await enqueue(admission, light)
    clock.advance(10)
    tasks["late"] = await enqueue(admission, like(light, key_id="late"))
    await admission.release(blocker)
    assert await grant_order(admission, tasks) == ["light", "heavy", "late"]


async def test_a_charge_rescores_only_its_own_associations_stream_heads(
    make_admission, redis_url: str, prefix: str
) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 1)
    for demand in (heavy, light):
        await admission.release(await admitted(admission, demand))
    blocker = await admitted(admission, zed)
    await enqueue(admission, heavy)
    await enqueue(admission, light)
    client = aredis.Redis.from_url(redis_url)
    ns = keyspace.admission_namespace(prefix)
    eligible = ns + keyspace.ADMISSION_STREAM_HEADS + f"{heavy.tier}|{GROUP}"
    heavy_head = await client.hget(ns + keyspace.ADMISSION_HEAD_INDEX, f"K|heavy|{heavy.tier}|{GROUP}")
    light_head = await client.hget(ns + keyspace.ADMISSION_HEAD_INDEX, f"K|light|{light.tier}|{GROUP}")
    before = dict(await client.zrange(eligible, 0, -1, withscores=True))
    await charge(admission, "1", 1000.0)
    after = dict(await client.zrange(eligible, 0, -1, withscores=True))
    await client.aclose()
    # heavy now holds all usage: U = 1, S = 0.5, F = 1/4, so it ranks 3/4 of WEIGHT later.
    assert after[heavy_head] - before[heavy_head] == pytest.approx(0.75 * WEIGHT, abs=1e-3)
    assert after[light_head] == before[light_head]
    await admission.release(blocker)


async def test_the_saved_usage_is_added_back_once(make_admission, clock: FakeClock) -> None:
    admission = await make_admission()
    await charge(admission, "1", 10.0)  # charged after a restart, before the restore
    assert await admission.restore_usage({"1": 100.0, "2": 50.0}) is True
    assert await admission.restore_usage({"1": 100.0, "2": 50.0}) is False
    used, total, _ = await admission.fair_share_usage()
    assert used == pytest.approx({"1": 110.0, "2": 50.0}) and total == pytest.approx(160.0)


async def test_a_release_without_an_association_charges_nobody(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 1)
    await admission.release(await admitted(admission, alice), charge=500.0)
    assert await admission.fair_share_usage() == ({}, 0.0, {})


def test_normalised_shares_split_down_the_tree() -> None:
    nodes = {
        "lab": fair_share.Node(None, 3),
        "other": fair_share.Node(None, 1),
        "nlp": fair_share.Node("lab", 1),
        "vision": fair_share.Node("lab", 2),
        "ann": fair_share.Node("nlp", 1),
        "bob": fair_share.Node("nlp", 3),
    }
    shares = fair_share.normalised_shares(nodes)
    assert shares["lab"] == pytest.approx(0.75) and shares["other"] == pytest.approx(0.25)
    assert shares["vision"] == pytest.approx(0.5) and shares["nlp"] == pytest.approx(0.25)
    assert shares["ann"] == pytest.approx(0.0625) and shares["bob"] == pytest.approx(0.1875)


def test_the_factor_is_slurms_classic_formula() -> None:
    assert fair_share.factor(0, 0, 0.5) == 1.0  # nobody used anything
    assert fair_share.factor(50, 100, 0.5) == pytest.approx(0.5)  # exactly its share
    assert fair_share.factor(100, 100, 0.25) == pytest.approx(2**-4)
    assert fair_share.factor(10, 100, 0.0) == 0.0
    assert fair_share.decayed(1000, 0, 7200, 3600) == pytest.approx(250)


async def test_a_user_alone_gets_everything_their_caps_allow(make_admission) -> None:
    # Work conservation: however far over its share, a free slot nobody else waits for is its.
    admission = await make_admission()
    await admission.set_capacity(GROUP, 2)
    await charge(admission, "1", 1e9)
    grants = [await admitted(admission, heavy), await admitted(admission, heavy)]
    assert [g.queued_seconds for g in grants] == [0, 0]
    waiting = await enqueue(admission, heavy)
    await admission.release(grants[0])
    assert (await granted(waiting)).demand.key_id == "heavy"


async def test_a_grant_charges_its_estimate_and_the_release_settles_the_real_count(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 2)
    grant = await admitted(admission, like(heavy, estimate=1000.0))
    assert (await usage(admission))["1"] == pytest.approx(1000.0)  # running work counts at once
    await admission.release(grant, charge=300.0)
    assert (await usage(admission))["1"] == pytest.approx(300.0)


async def test_a_request_moved_to_another_replica_is_charged_its_estimate_once(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, {"r1": 1, "r2": 1})
    grant = await admitted(admission, like(heavy, estimate=1000.0))
    moved = await asyncio.wait_for(admission.move(grant, avoid=grant.replica), 5)
    assert moved.replica != grant.replica
    assert (await usage(admission))["1"] == pytest.approx(1000.0)
    await admission.release(moved, charge=1000.0)
    assert (await usage(admission))["1"] == pytest.approx(1000.0)


async def test_upkeep_scores_every_waiting_association_again_once_a_second(
    make_admission, redis_url: str, prefix: str, clock: FakeClock
) -> None:
    # light waits with the delay of a moment when it held all the usage; then someone else's
    # usage grows tenfold. Its own factor rose, and the next upkeep after a second shows it.
    admission = await make_admission()
    await admission.set_capacity(GROUP, 1)
    other = like(alice, key_id="other", association="3", share=0.5, fairshare_weight=WEIGHT)
    for demand in (light, other):
        await admission.release(await admitted(admission, demand))
    blocker = await admitted(admission, zed)
    await charge(admission, "2", 1000.0)
    await enqueue(admission, light)
    client = aredis.Redis.from_url(redis_url)
    ns = keyspace.admission_namespace(prefix)
    head = await client.hget(ns + keyspace.ADMISSION_HEAD_INDEX, f"K|light|{light.tier}|{GROUP}")

    async def score() -> float:
        return float(await client.zscore(ns + keyspace.ADMISSION_STREAM_HEADS + f"{light.tier}|{GROUP}", head))

    stale = await score()
    await charge(admission, "3", 9000.0)  # light is not charged, so not scored again yet
    assert await score() == stale
    clock.advance(1.0)

    async def rescored() -> bool:
        return await score() < stale - 100

    await eventually(rescored, what="the upkeep to score light's head again")
    # F went from 2^-2 to 2^-0.2: its delay fell from 0.75 W to about 0.13 W.
    assert await score() == pytest.approx(stale - (0.75 - (1 - 2**-0.2)) * WEIGHT, abs=1.0)
    await client.aclose()
    await admission.release(blocker)
