"""The scaling signal on a live gateway's /metrics: the expected wait of a new request per model is
0 while nothing waits, grows with the queue in front of it, and falls back to 0 once it is gone."""

from __future__ import annotations

import socket

from fairness.scheduling.live_counts import person_load
from fairness.store.redis_clients import redis_sync
from tests.support.cast import MODEL
from tests.support.engine_fill import fill_the_engine, free_the_engine
from tests.support.metrics import Samples, scrape, scrape_until
from tests.support.polling import wait_for
from tests.support.v1_calls import hanging_chat

WAIT = "gpuportal_model_expected_wait_seconds"


def expected(samples: Samples) -> float:
    assert ("model", MODEL) in next(iter(samples.series(WAIT))), samples.series(WAIT)  # present, not defaulted
    return samples.get(WAIT, model=MODEL)


def queue(gateway, secret: str, user, tier: str, held: list[socket.socket], until: int) -> None:
    """More of the person's requests, waiting behind the full engine, until `until` wait."""
    while person_load(redis_sync()).get((user.pk, tier), (0, 0))[1] < until:
        held.append(hanging_chat(gateway, secret))
        count = len(held) - 2  # the first two hold the slots
        wait_for(lambda count=count: person_load(redis_sync()).get((user.pk, tier), (0, 0))[1] == count,
                 what=f"{count} requests queued")


def test_the_expected_wait_is_zero_when_idle_and_rises_with_the_queue(gateway, sim, two_slots, lab):
    user, tier, secret = lab
    assert expected(scrape(gateway.url)) == 0

    held = fill_the_engine(gateway, sim, secret, user, tier.name)
    try:
        # Both slots busy and nothing waiting: a new request would take the next slot to free, and
        # the gauge, a queue signal, still says 0.
        assert expected(scrape(gateway.url)) == 0
        queue(gateway, secret, user, tier.name, held, until=1)
        one = expected(scrape_until(gateway.url, lambda s: s.get(WAIT, model=MODEL) > 0, "a wait behind one"))
        queue(gateway, secret, user, tier.name, held, until=6)
        six = expected(scrape_until(gateway.url, lambda s: s.get(WAIT, model=MODEL) > one, "a longer wait"))
        assert six > one > 0
    finally:
        free_the_engine(sim, held)
    wait_for(lambda: person_load(redis_sync()).get((user.pk, tier.name), (0, 0)) == (0, 0),
             timeout=20, what="every request gone")
    scrape_until(gateway.url, lambda s: expected(s) == 0, "the wait back to 0")


def test_requests_held_by_their_own_cap_beside_a_free_slot_do_not_raise_it(gateway, sim, two_slots, tiers):
    from django.contrib.auth import get_user_model

    from fairness.actions.keys import issue_key
    from fairness.models import Tier

    tier = Tier.objects.create(name="one-at-a-time", per_key_concurrency=1, max_queued_per_key=8)
    user = get_user_model().objects.create(username="nora")
    _, secret = issue_key(user, tier)
    sim.set_faults(stall=True)
    held: list[socket.socket] = []
    try:
        for n in range(4):
            held.append(hanging_chat(gateway, secret))
            wait_for(lambda n=n: person_load(redis_sync()).get((user.pk, tier.name), (0, 0)) == (1, n),
                     what=f"nora's first running, {n} held by her cap")
        samples = scrape(gateway.url)
        assert samples.get("gpuportal_model_queued", model=MODEL) == 3
        assert expected(samples) == 0  # the engine's other slot is free: more replicas would not help
    finally:
        free_the_engine(sim, held)
