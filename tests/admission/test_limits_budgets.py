"""Budgets and rate limits in admission's round trip: a request that would start over a budget is
refused, reservations come back whichever way a request ends, the real count settles, windows
roll over; rate limits hold to their rate with a true Retry-After."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aredis

from fairness.scheduling.admission import BudgetExceeded, RateLimited
from fairness.scheduling.limits import BudgetWindow, RateLimit
from fairness.store import keyspace
from tests.support.admission import GROUP, FakeClock, admitted, alice, bob, enqueue, like

MONTH = BudgetWindow(budget_id=7, counter="a1-month", limit=1000, window_start=1_699_000_000, resets_at=1_702_000_000,
                     words="project nlp has used its 1,000 tokens for November")


def spending(estimate: float, *windows: BudgetWindow, key: str = "alice"):
    return like(alice, key_id=key, estimate=estimate, budgets=windows or (MONTH,))


async def test_requests_start_until_the_budget_is_reserved_then_get_refused_until_settled(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 10)
    demand = like(spending(300), per_key_cap=10)
    grants = [await admitted(admission, demand) for _ in range(4)]  # 0, 300, 600, 900 < 1000
    assert [g.budget_left for g in grants] == [700, 400, 100, 0]
    with pytest.raises(BudgetExceeded) as refused:
        await admission.acquire(demand)
    assert refused.value.window == MONTH and "1,000 tokens" in refused.value.message
    assert refused.value.retry_after == MONTH.resets_at - 1_700_000_000
    await admission.release(grants[0], charge=100)  # used 100, reserved 900: still full
    with pytest.raises(BudgetExceeded):
        await admission.acquire(demand)
    await admission.release(grants[1], charge=100)  # used 200, reserved 600
    assert (await admitted(admission, demand)).budget_left == pytest.approx(0)  # 200 + 900 -> 1100


async def test_a_request_that_leaves_the_queue_gives_its_reservation_back(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 1)
    first = await admitted(admission, spending(400))
    waiting = await enqueue(admission, spending(400, key="bob"))
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await admission.release(first, charge=0)
    # Nothing is reserved or used now: a 999 estimate fits.
    grant = await admitted(admission, spending(999))
    assert grant.budget_left == pytest.approx(1)


async def test_a_dead_processs_lease_gives_its_reservation_back(make_admission, clock: FakeClock) -> None:
    doomed = await make_admission(lease_ttl=30.0, recheck_seconds=1.0)
    await doomed.set_capacity(GROUP, 4)
    await admitted(doomed, spending(900))
    doomed._held.clear()  # as if the process died: nobody renews or releases it
    clock.advance(31)
    other = await make_admission()
    assert (await admitted(other, spending(900, key="bob"))).budget_left == pytest.approx(100)


async def test_a_windows_counters_always_expire(make_admission, redis_url: str, prefix: str) -> None:
    # A reservation in a window with no settled use yet sets the expiry; once use is settled the
    # hash keeps it, and later reservations set none.
    admission = await make_admission()
    await admission.set_capacity(GROUP, 4)
    counters = aredis.Redis.from_url(redis_url)
    window = keyspace.admission_namespace(prefix) + keyspace.ADMISSION_BUDGET_WINDOW + MONTH.field
    try:
        first = await admitted(admission, spending(100))
        assert await counters.ttl(window) > 0
        await admission.release(first, charge=50)
        second = await admitted(admission, spending(100))
        assert await counters.ttl(window) > 0
        await admission.release(second, charge=50)
        settled = await counters.hget(window, keyspace.ADMISSION_FIELD_BUDGET_SETTLED)
        assert settled == b"100" and await counters.ttl(window) > 0
    finally:
        await counters.aclose()


async def test_a_new_window_starts_empty(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 4)
    await admission.release(await admitted(admission, spending(100)), charge=1000)
    with pytest.raises(BudgetExceeded):
        await admission.acquire(spending(100))
    december = BudgetWindow(7, "a1-month", 1000, window_start=MONTH.resets_at, resets_at=MONTH.resets_at + 2_678_400)
    assert (await admitted(admission, spending(100, december))).budget_left == pytest.approx(900)


async def test_a_rolling_window_forgets_what_slid_out_of_it(make_admission, clock: FakeClock) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 4)
    day = BudgetWindow(8, "k1-r24", 1000, window_start=0, resets_at=0, rolling_seconds=86_400)
    await admission.release(await admitted(admission, spending(100, day)), charge=1000)
    with pytest.raises(BudgetExceeded):
        await admission.acquire(spending(100, day))
    clock.advance(12 * 3600)
    with pytest.raises(BudgetExceeded):
        await admission.acquire(spending(100, day))
    clock.advance(12 * 3600 + 3600)  # a bucket past the window
    assert (await admitted(admission, spending(100, day))).budget_left == pytest.approx(900)


async def test_every_budget_of_a_request_is_checked_and_the_tightest_is_reported(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 4)
    key_budget = BudgetWindow(9, "k1-month", 150, window_start=MONTH.window_start, resets_at=MONTH.resets_at,
                              words="key")
    grant = await admitted(admission, spending(100, MONTH, key_budget))
    assert grant.budget_left == pytest.approx(50)  # the key's 150 less 100, not the month's 900
    await admitted(admission, spending(60, MONTH, key_budget))  # 100 < 150: it may start
    with pytest.raises(BudgetExceeded) as refused:  # 160 >= 150
        await admission.acquire(spending(10, MONTH, key_budget))
    assert refused.value.window == key_budget


async def test_requests_per_minute_hold_to_the_rate_with_a_true_retry_after(make_admission, clock: FakeClock) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 1000)
    rpm = RateLimit("kalice|rpm", 60, words="this key's 60 requests a minute")
    demand = like(alice, per_key_cap=1000, rate_limits=(rpm,))
    granted = 0
    for _ in range(3):  # the burst: a twentieth of the minute's rate
        await admission.release(await admitted(admission, demand))
        granted += 1
    with pytest.raises(RateLimited) as refused:
        await admission.acquire(demand)
    assert refused.value.retry_after == 1 and "60 requests a minute" in refused.value.message
    clock.advance(refused.value.retry_after)
    await admission.release(await admitted(admission, demand))
    # Three minutes of a client trying ten times a second: the rate, plus the burst.
    for _ in range(1800):
        clock.advance(0.1)
        try:
            await admission.release(await admission.acquire(demand))
            granted += 1
        except RateLimited:
            pass
    assert 180 <= granted <= 180 + 4


async def test_a_tokens_per_minute_limit_counts_the_estimate_and_settles_the_real_count(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 10)
    tpm = RateLimit("kalice|tpm", 6000, tokens=True)
    demand = like(alice, per_key_cap=10, estimate=3000, rate_limits=(tpm,))
    first = await admitted(admission, demand)
    await admitted(admission, demand)
    with pytest.raises(RateLimited):
        await admission.acquire(demand)
    await admission.release(first, charge=2000)  # 1,000 fewer than estimated: 10 s of the limiter back
    with pytest.raises(RateLimited) as refused:
        await admission.acquire(demand)
    assert refused.value.retry_after == 20  # 50 s ahead + 30 s for this one - the minute's burst
    await admission.release(first, charge=0)  # a second release of one lease gives nothing back
    with pytest.raises(RateLimited):
        await admission.acquire(demand)


async def test_limits_of_one_key_do_not_touch_another(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 10)
    await admission.release(await admitted(admission, spending(100)), charge=1000)
    with pytest.raises(BudgetExceeded):
        await admission.acquire(spending(100))
    assert (await admitted(admission, like(bob, estimate=100))).budget_left is None
    rpm = RateLimit("kalice|rpm", 1)
    await admission.release(await admitted(admission, like(alice, rate_limits=(rpm,))))
    with pytest.raises(RateLimited):
        await admission.acquire(like(alice, rate_limits=(rpm,)))
    await admission.release(await admitted(admission, like(bob, rate_limits=(RateLimit("kbob|rpm", 1),))))
