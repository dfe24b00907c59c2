"""The capacity page's "a new request waits" comes from the wait estimate, per tier and model,
with real processes: behind a full engine it names a wait, longer for a tier that waits behind
the others than for one with a head start; and while a tier's requests wait only behind their
own person's cap, it says a newcomer would not wait, rather than "none"."""

from __future__ import annotations

import threading

import httpx

from fairness.scheduling.live_counts import person_load
from fairness.store.redis_clients import redis_sync
from tests.support.cast import MODEL
from tests.support.engine_fill import fill_the_engine, free_the_engine
from tests.support.polling import wait_for
from tests.support.v1_calls import CHAT, hanging_chat


def tier_waits(gateway) -> dict[str, dict]:
    body = httpx.get(gateway.url + "/api/capacity", timeout=10).json()
    return {t["name"]: t for t in body["tiers"]}


def waiting_in(tier: str) -> int:
    return sum(q for (_, t), (_, q) in person_load(redis_sync()).items() if t == tier)


def send(gateway, secret: str) -> threading.Thread:
    thread = threading.Thread(target=lambda: httpx.post(
        gateway.url + "/v1/chat/completions", json=CHAT, timeout=60, headers={"authorization": f"Bearer {secret}"}),
        daemon=True)
    thread.start()
    return thread


def test_a_new_requests_wait_is_the_estimates_per_tier_and_model(gateway, sim, two_slots, tiers):
    from django.contrib.auth import get_user_model

    from fairness.actions.keys import issue_key
    from fairness.models import Tier

    # No fair share in this tier: a newcomer waits behind its four (with it, a newcomer who has used
    # nothing would rightly go first).
    tier = Tier.objects.create(name="fifo", per_key_concurrency=20, fairshare_weight_seconds=0)
    user = get_user_model().objects.create(username="fay")
    _, secret = issue_key(user, tier, label="fay's key")
    held = fill_the_engine(gateway, sim, secret, user, tier.name)
    threads = [send(gateway, secret) for _ in range(4)]
    try:
        wait_for(lambda: waiting_in("fifo") == 4, what="four waiting")
        page = wait_for(lambda: (t := tier_waits(gateway)) and t["fifo"]["waiting"] == 4 and t, what="the page")
        fifo = page["fifo"]["waits"]
        assert [w["model"] for w in fifo] == [MODEL] and fifo[0]["seconds"] > 0
        assert page["fifo"]["expected_wait"] == fifo[0]["words"] != "none"
        # The interactive tier's head start puts a newcomer of it before fay's four.
        assert page["interactive"]["waits"][0]["seconds"] < fifo[0]["seconds"]
    finally:
        free_the_engine(sim, held)
    for thread in threads:
        thread.join(60)


def test_requests_held_by_their_own_cap_beside_free_slots_are_no_wait_for_a_newcomer(gateway, sim, two_slots, tiers):
    from django.contrib.auth import get_user_model

    from fairness.actions.keys import issue_key
    from fairness.models import Tier

    narrow = Tier.objects.create(name="narrow", per_key_concurrency=1)
    user = get_user_model().objects.create(username="nina")
    _, secret = issue_key(user, narrow, label="nina's key")
    sim.set_faults(stall=True)
    held = [hanging_chat(gateway, secret) for _ in range(2)]
    try:
        wait_for(lambda: person_load(redis_sync()).get((user.pk, "narrow")) == (1, 1), what="one running, one held")
        # (Once only nina's lease runs: the last test's may take a moment to be given back.)
        said = wait_for(lambda: (t := tier_waits(gateway)["narrow"])["waits"][0]["seconds"] == 0 and t,
                        what="a newcomer's wait of none")
        assert said["waiting"] == 1
        assert said["expected_wait"] == "none for someone with nothing running"
    finally:
        free_the_engine(sim, held)
