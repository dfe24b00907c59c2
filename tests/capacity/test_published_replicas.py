"""The published figures count the replicas that take new work now, from every replica's own
samples: one down, draining or disabled leaves the others' figures standing, a new one adds."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from fairness.models import EngineSample, Replica
from fairness.telemetry import capacity_store
from fairness.telemetry.capacity_model import CapacityEstimate, for_replicas

pytestmark = pytest.mark.django_db

A, C = 0.01, 0.0005  # one replica: 1/(a + c·n) per sequence


def g(n: float) -> float:
    return n / (A + C * n)


def replica(name: str, **fields) -> Replica:
    return Replica.objects.create(name=name, base_url=f"http://127.0.0.1:9/{name}", model="m", max_num_seqs=8, **fields)


def polls(now: dt.datetime, *replicas: Replica, healthy: bool = True, start: int = 0) -> None:
    """Forty polls at loads 1..8 of each replica, two seconds apart."""
    for i in range(start, start + 40):
        n = 1 + i % 8
        at = now - dt.timedelta(seconds=200 - 2 * i)
        for r in replicas:
            EngineSample.objects.create(
                replica=r, taken_at=at, healthy=healthy, running=n if healthy else 0,
                generation_tps=g(n) if healthy else None,
            )


def test_a_replica_down_at_every_poll_spoils_none_of_the_others_samples():
    now = timezone.now()
    up, down = replica("up"), replica("down")
    polls(now, up)
    polls(now, down, healthy=False)

    estimate = capacity_store.refit(now, down={"down"})["m"]

    assert estimate is not None and estimate.samples == 40
    assert estimate.slots == 8
    assert estimate.total_tokens_per_second == pytest.approx(g(8), rel=0.02)


def test_a_new_replica_adds_to_the_figures_instead_of_resetting_them():
    now = timezone.now()
    old = replica("old")
    polls(now, old)
    before = capacity_store.refit(now)["m"]
    replica("new")  # no samples yet

    after = capacity_store.refit(now)["m"]

    assert before is not None and after is not None
    assert after.samples == before.samples == 40
    assert after.slots == 16
    assert after.total_tokens_per_second == pytest.approx(2 * before.total_tokens_per_second, rel=0.01)
    # Eight users over two replicas run four each: faster than eight on one.
    assert after.per_user(8) == pytest.approx(1 / (A + C * 4), rel=0.02)


def test_draining_and_disabled_replicas_leave_the_headline():
    now = timezone.now()
    first, second, third = replica("first"), replica("second"), replica("third")
    polls(now, first, second, third)
    three = capacity_store.refit(now)["m"]
    second.draining = True
    second.save(update_fields=["draining"])
    third.enabled = False
    third.save(update_fields=["enabled"])

    one = capacity_store.refit(now)["m"]

    assert three is not None and one is not None
    assert one.slots == 8
    assert one.total_tokens_per_second == pytest.approx(three.total_tokens_per_second / 3, rel=0.01)
    # The draining replica's samples still measure the card: they stay in the fit.
    assert one.samples == 80


def test_no_replica_taking_work_publishes_no_figures():
    now = timezone.now()
    only = replica("only", draining=True)
    polls(now, only)
    assert capacity_store.refit(now)["m"] is None
    assert capacity_store.serving_slots() == {"m": []}


def test_scaling_one_replicas_curve_divides_its_per_sequence_cost():
    curve = CapacityEstimate("m", a=A, c=C, slots=8, samples=10, running_min=1, running_max=8, basis="curve")
    two = for_replicas(curve, [8, 8])
    assert two is not None and (two.c, two.slots) == (C / 2, 16)
    assert for_replicas(curve, []) is None
