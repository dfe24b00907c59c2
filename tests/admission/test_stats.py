"""Observability: live counts per key, tier and group, the longest wait; and the key layout
(one hash tag, a configurable prefix)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import redis.asyncio as aredis

from fairness.scheduling.admission import Admission
from tests.support.admission import GROUP, FakeClock, admitted, alice, bob, carol, enqueue, granted, like

Make = Callable[..., Awaitable[Admission]]


async def test_stats_count_in_flight_and_queued_per_key_and_tier(
    admission: Admission, clock: FakeClock
) -> None:
    await admission.set_capacity(GROUP, 2)
    await admitted(admission, alice)
    await admitted(admission, carol)
    await enqueue(admission, carol)
    clock.advance(30)
    await enqueue(admission, bob)
    clock.advance(12)
    stats = await admission.stats()
    assert stats["groups"] == {GROUP: {"capacity": 2, "in_flight": 2, "queued": 2}}
    assert stats["keys"] == {
        "alice": {"in_flight": 1, "queued": 0},
        "bob": {"in_flight": 0, "queued": 1},
        "carol": {"in_flight": 1, "queued": 1},
    }
    assert stats["tiers"] == {
        "batch": {"in_flight": 1, "borrowed": 0, "queued": 1, "longest_wait": 42.0},
        "interactive": {"in_flight": 1, "borrowed": 0, "queued": 1, "longest_wait": 12.0},
    }
    assert stats["longest_wait"] == 42.0


async def test_every_key_shares_one_hash_tag_under_the_prefix(
    admission: Admission, redis_url: str, prefix: str
) -> None:
    await admission.set_capacity(GROUP, 1)
    await admitted(admission, alice)
    await enqueue(admission, bob)
    client = aredis.Redis.from_url(redis_url)
    try:
        keys = [k if isinstance(k, str) else k.decode() for k in await client.keys(f"{prefix}*")]
        assert len(keys) > 10
        assert all(k.startswith(f"{prefix}:{{adm}}:") for k in keys)
    finally:
        await client.aclose()


async def test_prefixes_isolate_admission_state(make_admission: Make) -> None:
    first = await make_admission(prefix="one")
    second = await make_admission(prefix="two")
    await first.set_capacity(GROUP, 1)
    await second.set_capacity(GROUP, 1)
    await admitted(first, alice)
    await admitted(second, like(alice, per_key_cap=1))
    assert (await second.stats())["keys"] == {"alice": {"in_flight": 1, "queued": 0}}


async def test_it_works_with_a_client_that_decodes_responses(
    redis_url: str, prefix: str, clock: FakeClock
) -> None:
    client = aredis.Redis.from_url(redis_url, decode_responses=True)
    admission = Admission(client, prefix=prefix, clock=clock, recheck_seconds=0.05)
    try:
        await admission.set_capacity(GROUP, 1)
        blocker = await admitted(admission, alice)
        task = await enqueue(admission, bob)
        clock.advance(3)
        await admission.release(blocker)
        assert (await granted(task)).queued_seconds == 3.0
        assert (await admission.stats())["keys"] == {"bob": {"in_flight": 1, "queued": 0}}
    finally:
        await admission.close()
        await client.aclose()
