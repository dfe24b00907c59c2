"""Retry-After that tells the truth, with real processes: a queue-full 429 says when the first of
the requests that fill the queue will start, from the pace the gateway measured, and that is
within a factor of 2 of when the next request of that key was really admitted."""

from __future__ import annotations

import threading
import time

import httpx

from fairness.scheduling.live_counts import person_load
from fairness.store.redis_clients import redis_sync
from tests.support.polling import wait_for
from tests.support.v1_calls import CHAT, assert_error

# About two seconds on the shared engine (its steps are 0.5 ms at --speed 20).
LONG = CHAT | {"max_tokens": 4000, "ignore_eos": True}


def test_a_queue_full_retry_after_is_within_a_factor_of_two_of_the_next_admission(gateway, replica, tiers):
    from django.contrib.auth import get_user_model

    from fairness.actions.keys import issue_key
    from fairness.models import Tier

    tier = Tier.objects.create(name="paced", per_key_concurrency=1, max_queued_per_key=1)
    user = get_user_model().objects.create(username="pat")
    _, secret = issue_key(user, tier, label="pat's key")
    url = gateway.url + "/v1/chat/completions"

    def load() -> tuple[int, int]:
        return person_load(redis_sync()).get((user.pk, "paced"), (0, 0))

    def send(results: list[int]) -> threading.Thread:
        def run() -> None:
            response = httpx.post(url, json=LONG, headers={"authorization": f"Bearer {secret}"}, timeout=60)
            results.append(response.status_code)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    # The pace: one runs while one waits for it (the gateway measures a slot's hold while anyone waits).
    statuses: list[int] = []
    first = [send(statuses)]
    wait_for(lambda: load() == (1, 0), what="the first running")
    first.append(send(statuses))
    for thread in first:
        thread.join(60)
    assert statuses == [200, 200]

    # Now one runs, one waits, and a third finds the queue full.
    running = send(statuses)
    wait_for(lambda: load() == (1, 0), what="one running")
    waiting = send(statuses)
    wait_for(lambda: load() == (1, 1), what="one waiting")
    refused = httpx.post(url, json=LONG, headers={"authorization": f"Bearer {secret}"}, timeout=60)
    refused_at = time.monotonic()
    assert_error(refused, 429, "queue_full")
    retry_after = int(refused.headers["retry-after"])
    wait_for(lambda: load()[1] == 0, timeout=30, what="the waiting request admitted: room in the queue")
    admitted_after = time.monotonic() - refused_at
    assert 0.5 <= retry_after / max(admitted_after, 0.001) <= 2.0, (retry_after, admitted_after)
    for thread in (running, waiting):
        thread.join(60)
