"""A release sent again after its reply never came charges once: the retry gives back a lease
still held, settles one reaped after its holder stopped renewing it, and charges nothing where the
first try ran (only its reply was lost)."""

from __future__ import annotations

import pytest

from fairness.scheduling.admission import Admission, Grant
from fairness.scheduling.limits import BudgetWindow
from tests.support.admission import GROUP, FakeClock, admitted, alice, bob, in_flight, like

MONTH = BudgetWindow(budget_id=7, counter="a1-month", limit=1000, window_start=1_699_000_000,
                     resets_at=1_702_000_000, words="project nlp has used its 1,000 tokens for November")
payer = like(alice, association="1", share=0.5, estimate=100, budgets=(MONTH,))
USED = 300.0  # weighted tokens the request really used; its grant charged the estimate, 100


async def charged(admission: Admission) -> tuple[float, float]:
    """(association 1's fair-share usage, what the month's budget has left for a new request)."""
    usage = (await admission.fair_share_usage())[0]["1"]
    probe = await admitted(admission, like(bob, estimate=0, budgets=(MONTH,)))
    await admission.release(probe)
    assert probe.budget_left is not None
    return usage, probe.budget_left


async def retry(admission: Admission, grant: Grant) -> None:
    await admission.send(admission.settle_command(grant.demand, USED, grant.lease_id))


async def test_a_retry_after_the_release_ran_charges_nothing_more(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 4)
    grant = await admitted(admission, payer)
    await admission.release(grant, charge=USED)  # it ran; say its reply was lost
    await retry(admission, grant)
    await retry(admission, grant)
    assert await charged(admission) == (pytest.approx(USED), pytest.approx(1000 - USED))


async def test_a_retry_of_a_release_that_never_ran_gives_the_lease_back_and_charges_once(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 4)
    grant = await admitted(admission, payer)
    admission._held.pop(grant.lease_id)  # what a release does first, before its round trip failed
    assert await in_flight(admission, "alice") == 1
    await retry(admission, grant)
    assert await in_flight(admission, "alice") == 0
    await retry(admission, grant)
    assert await charged(admission) == (pytest.approx(USED), pytest.approx(1000 - USED))


async def test_a_retry_after_the_lease_expired_charges_once(make_admission, clock: FakeClock) -> None:
    admission = await make_admission(lease_ttl=30.0, recheck_seconds=1.0)
    await admission.set_capacity(GROUP, 4)
    grant = await admitted(admission, payer)
    admission._held.clear()  # nobody renews it: Redis was away longer than its TTL
    clock.advance(31)
    await admission.release(await admitted(admission, like(bob, estimate=0)))  # any call reaps it
    assert await in_flight(admission, "alice") == 0
    await retry(admission, grant)
    await retry(admission, grant)
    assert await charged(admission) == (pytest.approx(USED, rel=1e-3), pytest.approx(1000 - USED))  # 31 s decayed


async def test_a_charge_alone_for_a_redis_that_lost_the_release_charges_it(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 4)
    grant = await admitted(admission, payer)  # charges the estimate, 100, as a fresh Redis would hold
    await admission.send(admission.settle_command(grant.demand, USED, None))
    usage, _ = await charged(admission)
    assert usage == pytest.approx(USED)
