"""A budgeted request runs on no more than its budgets leave: admission lowers its completion limit
to the room left, in the same round trip that reserves it, so requests at once, from several
gateway processes, share one remainder; below the least worth running it is refused."""

from __future__ import annotations

import asyncio

import pytest

from fairness.scheduling.admission import BudgetExceeded, Demand
from fairness.scheduling.limits import BudgetWindow, CompletionAsk
from tests.support.admission import GROUP, admitted, alice, enqueue, like

DAY = BudgetWindow(budget_id=9, counter="k1-day", limit=3000, window_start=1_699_920_000, resets_at=1_700_006_400,
                   words="this key has used its 3,000 tokens for 14 Nov")


def asking(most: int, prompt: float = 100, key: str = "alice") -> Demand:
    """A request whose prompt weighs `prompt` and that would run to `most` tokens at 2 a token."""
    completion = CompletionAsk(prompt=prompt, weight=2, most=most, least=min(16, most))
    return like(alice, key_id=key, per_key_cap=50, max_queued_per_key=50, estimate=prompt + 2 * 256,
                budgets=(DAY,), completion=completion)


async def test_a_request_asking_more_than_is_left_runs_with_what_is_left(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 10)
    grant = await admitted(admission, asking(most=4000))
    # (3000 - 100 of prompt) / 2 a token: the whole remainder, reserved, and nothing left.
    assert grant.completion_limit == 1450
    assert grant.demand.estimate == 100 + 2 * 1450
    assert grant.budget_left == pytest.approx(0)
    with pytest.raises(BudgetExceeded) as refused:
        await admission.acquire(asking(most=100))
    assert refused.value.window == DAY


async def test_a_request_within_the_budget_keeps_its_own_limit(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 10)
    grant = await admitted(admission, asking(most=200))
    assert grant.completion_limit == 200
    assert grant.budget_left == pytest.approx(3000 - 100 - 400)


async def test_requests_at_once_from_two_processes_share_one_remainder(make_admission) -> None:
    first, second = await make_admission(), await make_admission()
    await first.set_capacity(GROUP, 40)

    async def one(n: int):
        try:
            return await (first if n % 2 else second).acquire(asking(most=600, key=f"k{n}"))
        except BudgetExceeded:
            return None

    grants = await asyncio.gather(*(one(n) for n in range(20)))
    served = [g for g in grants if g is not None]
    reserved = sum(g.demand.estimate for g in served)
    assert reserved <= DAY.limit
    # Two whole answers (1,300 each), one lowered to the 400 left: (400 - 100) / 2 = 150 tokens,
    # and then nothing at all is left for the other 17.
    assert sorted(g.completion_limit for g in served) == [150, 600, 600]
    assert len(served) == 3


async def test_a_request_refused_when_not_even_the_least_answer_fits(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 10)
    await admitted(admission, asking(most=1440))  # 100 + 2880: 20 left
    with pytest.raises(BudgetExceeded):
        await admission.acquire(asking(most=100, prompt=0))  # 10 tokens fit, 16 are the least
    assert (await admitted(admission, asking(most=8, prompt=0))).completion_limit == 8  # asks less than least


async def test_a_queued_request_holds_its_lowered_reservation_and_is_told_it(make_admission) -> None:
    admission = await make_admission()
    await admission.set_capacity(GROUP, 1)
    running = await admitted(admission, asking(most=1000))  # 2100 of 3000
    waiting = await enqueue(admission, asking(most=1000, key="bob"))
    with pytest.raises(BudgetExceeded):  # the queued one reserved the rest already
        await admission.acquire(asking(most=100, key="carl"))
    await admission.release(running, charge=2100)
    grant = await asyncio.wait_for(waiting, 5)
    assert grant.completion_limit == (3000 - 2100 - 100) // 2
