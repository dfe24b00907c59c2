"""X-GPUPortal-Max-Queue-Ms: a client bounds its own wait in the queue. A request still queued at its
bound leaves the queue then, with 429 queue_timeout (the tier's own bound, minutes, would have held
it); one admitted within it runs as ever; a malformed value is a 400 naming the header."""

from __future__ import annotations

import contextlib
import socket

import httpx

from fairness.scheduling.live_counts import person_load
from fairness.store.redis_clients import redis_sync
from tests.support.polling import wait_for
from tests.support.v1_calls import CHAT, assert_error, hanging_chat

HEADER = "X-GPUPortal-Max-Queue-Ms"


def chat(gateway, secret: str, bound: str | None) -> httpx.Response:
    headers = {"authorization": f"Bearer {secret}"} | ({HEADER: bound} if bound is not None else {})
    return httpx.post(gateway.url + "/v1/chat/completions", json=CHAT, headers=headers, timeout=60)


def test_a_request_queued_past_its_own_bound_leaves_with_429_and_one_within_it_runs(cast, gateway, replica, sim):
    alice = cast["alice"]  # interactive: two at a time, queued for up to the tier's 300 s
    assert chat(gateway, alice.secret, "5000").status_code == 200  # admitted at once: the bound is moot
    sim.set_faults(stall=True)
    held = [hanging_chat(gateway, alice.secret) for _ in range(2)]
    try:
        wait_for(lambda: person_load(redis_sync()).get((alice.user_id, alice.tier), (0, 0))[0] == 2,
                 what="alice's two slots taken")
        refused = chat(gateway, alice.secret, "300")
        error = assert_error(refused, 429, "queue_timeout")
        assert int(refused.headers["retry-after"]) >= 1 and error["message"]
        assert person_load(redis_sync()).get((alice.user_id, alice.tier)) == (2, 0)  # it left the queue
        assert_error(chat(gateway, alice.secret, "0"), 429, "queue_timeout")  # no wait at all
    finally:
        sim.set_faults(stall=False)
        for conn in held:
            conn.shutdown(socket.SHUT_RDWR)
            conn.close()


def test_a_malformed_bound_is_a_400_naming_the_header(cast, gateway, replica):
    for bad in ("-1", "1.5", "soon", "86400001", ""):
        error = assert_error(chat(gateway, cast["bob"].secret, bad), 400, "invalid_value")
        assert error["param"] == HEADER


def test_a_bound_below_the_wait_estimate_is_refused_at_once_and_a_longer_one_waits(gateway, sim, replica, tiers):
    from django.contrib.auth import get_user_model

    from fairness.actions.keys import issue_key
    from fairness.models import Replica, Tier

    Replica.objects.filter(name=replica.name).update(max_num_seqs=2)
    tier = Tier.objects.create(name="lab", per_key_concurrency=20, max_queued_per_key=64)
    user = get_user_model().objects.create(username="lena")
    _, secret = issue_key(user, tier, label="lena's key")

    def load() -> tuple[int, int]:
        return person_load(redis_sync()).get((user.pk, "lab"), (0, 0))

    sim.set_faults(stall=True)
    held: list[socket.socket] = []
    try:
        # The pace: two requests hold the slots while two wait, then give them up.
        held += [hanging_chat(gateway, secret) for _ in range(4)]
        wait_for(lambda: load() == (2, 2), what="two running, two waiting")
        for conn in held[:2]:
            conn.shutdown(socket.SHUT_RDWR)
        wait_for(lambda: load() == (2, 0), what="the waiting two running")
        # Six more wait now: a new request would wait for three rounds of the slots at least.
        held += [hanging_chat(gateway, secret) for _ in range(6)]
        wait_for(lambda: load() == (2, 6), what="six waiting")
        # (A bound of 1 ms: whatever pace this box measured above, three rounds of it take longer.)
        refused = chat(gateway, secret, "1")
        error = assert_error(refused, 429, "queue_timeout")
        estimate = int(refused.headers["x-gpuportal-queue-estimate-ms"])
        assert estimate >= 1 and "longer than the 1 ms" in error["message"]
        assert int(refused.headers["retry-after"]) >= 1
        assert load() == (2, 6)  # it never stayed in the queue
        # A bound the estimate fits: it waits in the queue like the rest.
        patient = hanging_chat(gateway, secret, headers={HEADER: "600000"})
        held.append(patient)
        wait_for(lambda: load() == (2, 7), what="the patient request waiting")
    finally:
        sim.set_faults(stall=False)
        for conn in held:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
