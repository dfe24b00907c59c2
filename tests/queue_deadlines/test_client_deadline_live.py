"""X-GPUPortal-Max-Queue-Ms: a client bounds its own wait in the queue. A request still queued at its
bound leaves the queue then, with 429 queue_timeout (the tier's own bound, minutes, would have held
it); one admitted within it runs as ever; a malformed value is a 400 naming the header."""

from __future__ import annotations

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
