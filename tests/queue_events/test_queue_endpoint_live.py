"""GET /v1/queue with real processes: a person sees their own waiting requests (across their
keys), each with its place and estimate, and what a new request of theirs would wait now; never
anyone else's. A front end's key, a missing key and a wrong method get the errors they should."""

from __future__ import annotations

import threading

import httpx

from fairness.scheduling.live_counts import person_load
from fairness.store.redis_clients import redis_sync
from tests.support.cast import MODEL
from tests.support.engine_fill import fill_the_engine, free_the_engine
from tests.support.polling import wait_for
from tests.support.v1_calls import CHAT, assert_error


def queue_of(gateway, secret: str) -> dict:
    response = httpx.get(gateway.url + "/v1/queue", headers={"authorization": f"Bearer {secret}"}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def send(gateway, secret: str, ids: list[str]) -> threading.Thread:
    def run() -> None:
        response = httpx.post(gateway.url + "/v1/chat/completions", json=CHAT, timeout=60,
                              headers={"authorization": f"Bearer {secret}"})
        ids.append(response.headers.get("x-request-id", ""))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_person_sees_their_own_waiting_requests_and_nobody_elses(gateway, sim, two_slots, lab):
    from django.contrib.auth import get_user_model

    from fairness.actions.keys import issue_key

    user, tier, secret = lab
    _, second_secret = issue_key(user, tier, label="lena's other key")
    _, other_secret = issue_key(get_user_model().objects.create(username="omar"), tier, label="omar's key")
    omar = get_user_model().objects.get(username="omar")

    _, idle_secret = issue_key(user, tier, label="lena's key for a look at the idle queue")
    idle = queue_of(gateway, idle_secret)  # (a key's answer is kept for a second: a key of its own)
    assert idle["object"] == "queue" and idle["requests"] == []
    assert idle["models"] == [{"model": MODEL, "waiting": 0, "new_request_wait_ms": 0}]

    held = fill_the_engine(gateway, sim, secret, user, tier.name)
    ids: list[str] = []
    threads = []
    try:
        for n, key in enumerate((secret, other_secret, second_secret), start=1):
            threads.append(send(gateway, key, ids))
            wait_for(lambda n=n: sum(q for (_, t), (_, q) in person_load(redis_sync()).items() if t == "lab") == n,
                     what="the request queued")
        mine = queue_of(gateway, secret)
        # Places in admission's order, not arrival's: lena's two running requests count against her
        # fair share, so omar, who has used nothing, goes first though he came second.
        assert [(r["position"], r["model"], r["tier"]) for r in mine["requests"]] == [
            (1, MODEL, "lab"), (2, MODEL, "lab")]
        assert all(r["id"] and r["estimated_wait_ms"] is not None and r["waited_ms"] >= 0 for r in mine["requests"])
        assert mine["models"][0]["waiting"] == 3 and mine["models"][0]["new_request_wait_ms"] is not None
        same = queue_of(gateway, second_secret)["requests"]  # the person's, whichever key asks
        assert [(r["id"], r["position"]) for r in same] == [(r["id"], r["position"]) for r in mine["requests"]]
        theirs = queue_of(gateway, other_secret)
        assert [r["position"] for r in theirs["requests"]] == [0]
        assert not {r["id"] for r in theirs["requests"]} & {r["id"] for r in mine["requests"]}
        assert person_load(redis_sync()).get((omar.pk, "lab")) == (0, 1)
    finally:
        free_the_engine(sim, held)
    for thread in threads:
        thread.join(60)
    # The ids it named are the requests' own (X-Request-Id of their answers).
    assert {r["id"] for r in mine["requests"]} <= set(ids)


def test_the_queue_endpoint_refuses_what_it_should(gateway, two_slots, lab, cast):
    _, _, secret = lab
    assert_error(httpx.get(gateway.url + "/v1/queue", timeout=10), 401, None)
    wrong = httpx.post(gateway.url + "/v1/queue", headers={"authorization": f"Bearer {secret}"}, json={}, timeout=10)
    assert_error(wrong, 405, "method_not_allowed")
