"""POST /tokenize and /detokenize through a live gateway (enginesim): the key checked, the model
found for its tier, a requests-per-minute limit counted; no engine slot held, so they answer at
once while the key's every slot is taken; bad input refused in OpenAI's shape."""

from __future__ import annotations

import socket

import httpx

from fairness.models import Tier
from fairness.scheduling.live_counts import person_load
from fairness.store.redis_clients import redis_sync
from tests.support.cast import MODEL
from tests.support.polling import wait_for
from tests.support.v1_calls import assert_error, hanging_chat, post


def test_a_text_goes_to_tokens_and_back(cast, gateway, replica):
    alice = cast["alice"].secret
    counted = post(gateway, alice, {"model": MODEL, "prompt": "Herons wade in shallow water."}, path="/tokenize")
    assert counted.status_code == 200, counted.text
    tokens = counted.json()["tokens"]
    assert counted.json()["count"] == len(tokens) > 3
    back = post(gateway, alice, {"model": MODEL, "tokens": tokens}, path="/detokenize")
    assert back.status_code == 200 and back.json()["prompt"] == "Herons wade in shallow water."
    chat = post(gateway, alice, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}, path="/tokenize")
    assert chat.status_code == 200 and chat.json()["count"] > 1


def test_they_hold_no_slot_and_answer_while_every_slot_of_the_key_is_taken(cast, gateway, replica, sim):
    alice = cast["alice"]  # interactive: two at a time
    sim.set_faults(stall=True)
    held = [hanging_chat(gateway, alice.secret) for _ in range(2)]
    try:
        wait_for(lambda: person_load(redis_sync()).get((alice.user_id, alice.tier), (0, 0))[0] == 2,
                 what="alice's two slots taken")
        sim.set_faults(stall=False)
        counted = post(gateway, alice.secret, {"model": MODEL, "prompt": "hello there"}, path="/tokenize")
        assert counted.status_code == 200, counted.text
        assert "x-gpuportal-queued-ms" not in counted.headers
        assert person_load(redis_sync()).get((alice.user_id, alice.tier)) == (2, 0)  # nothing taken, nothing queued
    finally:
        for conn in held:
            conn.shutdown(socket.SHUT_RDWR)
            conn.close()


def test_a_requests_per_minute_limit_counts_them(cast, gateway, replica):
    Tier.objects.filter(name="interactive").update(key_requests_per_minute=60)
    Tier.objects.get(name="interactive").save()  # a saved change: the gateways reload
    bob = cast["bob"].secret
    body = {"model": MODEL, "prompt": "count me"}
    refused = wait_for(lambda: (r := post(gateway, bob, body, path="/tokenize")).status_code == 429 and r,
                       what="the limit refusing")
    assert assert_error(refused, 429, "rate_limited")["message"].startswith("Rate limit reached")
    assert 1 <= int(refused.headers["retry-after"]) <= 2  # a request's worth at 60 a minute
    assert post(gateway, cast["carol"].secret, body, path="/tokenize").status_code == 200  # another tier's key


def test_bad_requests_are_refused_in_openai_shape(cast, gateway, replica):
    alice = cast["alice"].secret
    assert_error(post(gateway, None, {"model": MODEL, "prompt": "x"}, path="/tokenize"), 401)
    assert_error(post(gateway, alice, {"prompt": "x"}, path="/tokenize"), 400, "missing_required_parameter")
    assert_error(post(gateway, alice, {"model": MODEL}, path="/tokenize"), 400, "missing_required_parameter")
    assert_error(post(gateway, alice, {"model": MODEL, "tokens": ["a"]}, path="/detokenize"), 400, "invalid_type")
    assert_error(post(gateway, alice, b"{", path="/detokenize"), 400, "invalid_json")
    assert_error(post(gateway, alice, {"model": "nowhere", "prompt": "x"}, path="/tokenize"), 404, "model_not_found")
    headers = {"authorization": f"Bearer {alice}"}
    assert_error(httpx.get(gateway.url + "/tokenize", headers=headers, timeout=30), 405)
