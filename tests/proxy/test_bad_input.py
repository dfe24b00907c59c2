"""Every kind of bad input gets an OpenAI-shaped error with the right status, never a 500."""

import asyncio
import datetime as dt
import threading
import time

import httpx
import pytest
from django.utils import timezone

from fairness.actions.keys import mint_secret
from fairness.models import ApiKey, Replica
from fairness.store import keyspace
from fairness.store.redis_clients import redis_sync
from tests.support.cast import MODEL
from tests.support.polling import wait_for
from tests.support.processes import free_port, start_gateway
from tests.support.v1_calls import CHAT, assert_error, post


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (None, "missing_api_key"),
        ("Token abc", "invalid_api_key"),
        ("Bearer sk-someone-elses-key-format", "invalid_api_key"),
        # A fixed id: a random one differs between pytest-xdist's workers, which then refuse to run.
        pytest.param("Bearer " + mint_secret(), "invalid_api_key", id="Bearer gp-unknown-invalid_api_key"),
    ],
)
def test_bad_credentials_get_401(gateway, replica, header, code):
    headers = {"authorization": header} if header else {}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=CHAT, headers=headers)
    assert_error(response, 401, code)
    assert response.headers["www-authenticate"] == 'Bearer realm="gpuportal"'


def test_revoked_and_expired_keys_get_401_saying_which(gateway, replica, cast):
    ApiKey.objects.filter(pk=cast["alice"].key_id).update(revoked_at=timezone.now())
    ApiKey.objects.filter(pk=cast["bob"].key_id).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    # update() bypasses signals, so save one row to bump the config epoch for the gateway.
    ApiKey.objects.get(pk=cast["carol"].key_id).save()
    wait_for(lambda: post(gateway, cast["alice"].secret, CHAT).status_code == 401, what="revocation")
    assert_error(post(gateway, cast["alice"].secret, CHAT), 401, "revoked_api_key")
    assert_error(post(gateway, cast["bob"].secret, CHAT), 401, "expired_api_key")


def test_a_revoked_key_stops_working_within_a_second(live_db_url, redis_url, replica, cast):
    # A gateway with the production setting: it looks for changes at most every 0.5 s.
    production_like = start_gateway(live_db_url, name="epoch", GP_AUTH_EPOCH_CHECK_SECONDS="0.5")
    try:
        assert post(production_like, cast["alice"].secret, CHAT).status_code == 200
        ApiKey.objects.get(pk=cast["alice"].key_id).revoke()
        revoked_at = time.monotonic()
        wait_for(lambda: post(production_like, cast["alice"].secret, CHAT).status_code == 401, timeout=3, interval=0.05)
        assert time.monotonic() - revoked_at < 1.0
    finally:
        production_like.stop()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{this is not json", None),
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": ["sim"], "messages": []}, "model"),
        ({"model": MODEL, "messages": "hi"}, "messages"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": "please"}, "stream"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": -3}, "max_tokens"),
        (b'{"model": "sim", "messages": [{"role": "user", "content": "\\ud800 half an emoji"}]}', None),
        (b'{"model": "sim", "prompt": ["fine", {"x": "\\udfff"}]}', None),
        (b'{"model": "sim", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None),
    ],
    ids=["not-json", "no-model", "model-list", "messages-string", "stream-string", "negative-max-tokens",
         "lone-surrogate", "lone-surrogate-nested", "nested-too-deep"],
)
def test_malformed_bodies_get_400(gateway, replica, cast, sim, body, param):
    path = "/v1/completions" if isinstance(body, bytes) and b'"prompt"' in body else "/v1/chat/completions"
    seen = len(sim.requests())
    error = assert_error(post(gateway, cast["alice"].secret, body, path=path), 400)
    assert error["param"] == param
    assert len(sim.requests()) == seen  # refused by the gateway before it queued or forwarded anything


def test_a_properly_paired_escaped_emoji_is_text(gateway, replica, cast):
    body = b'{"model": "sim", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}], "max_tokens": 4}'
    assert post(gateway, cast["alice"].secret, body).status_code == 200


def test_an_unknown_model_gets_404(gateway, replica, cast):
    error = assert_error(post(gateway, cast["alice"].secret, {**CHAT, "model": "gpt-99"}), 404, "model_not_found")
    assert "gpt-99" in error["message"]


def test_an_oversized_body_gets_413_stating_the_limit_in_mib(gateway, replica, cast):
    huge = {**CHAT, "messages": [{"role": "user", "content": "x" * (5 * 1024 * 1024)}]}
    error = assert_error(post(gateway, cast["alice"].secret, huge), 413, "request_too_large")
    assert "4 MiB" in error["message"] and "4194304" not in error["message"]


@pytest.mark.parametrize(
    ("param", "value", "path"),
    [
        ("temperature", "hot", "/v1/chat/completions"),
        ("top_p", [0.9], "/v1/chat/completions"),
        ("presence_penalty", True, "/v1/chat/completions"),
        ("frequency_penalty", {"x": 1}, "/v1/completions"),
        ("seed", 1.5, "/v1/chat/completions"),
        ("stop", 7, "/v1/completions"),
        ("stop", ["ok", 7], "/v1/chat/completions"),
        ("logit_bias", [1], "/v1/chat/completions"),
    ],
)
def test_a_mistyped_sampling_parameter_gets_400_naming_it_before_it_queues(
    gateway, replica, cast, sim, param, value, path
):
    base = CHAT if path.endswith("chat/completions") else {"model": MODEL, "prompt": "hi"}
    body = {**base, param: value}
    seen = len(sim.requests())
    error = assert_error(post(gateway, cast["alice"].secret, body, path=path), 400, "invalid_type")
    assert error["param"] == param and f"'{param}'" in error["message"]
    assert len(sim.requests()) == seen


def test_well_typed_sampling_parameters_pass(gateway, replica, cast):
    body = {**CHAT, "temperature": 0, "top_p": 0.9, "seed": 3, "stop": ["\n"], "presence_penalty": 0.5,
            "logprobs": False, "user": "me"}
    assert post(gateway, cast["alice"].secret, body).status_code == 200


def test_the_wrong_method_gets_405(gateway, replica, cast):
    headers = {"authorization": f"Bearer {cast['alice'].secret}"}
    response = httpx.get(gateway.url + "/v1/chat/completions", headers=headers)
    assert_error(response, 405)


def test_an_engine_client_error_passes_through_with_its_status(gateway, replica, cast):
    long_prompt = {**CHAT, "messages": [{"role": "user", "content": "word " * 6000}], "max_tokens": 100}
    error = assert_error(post(gateway, cast["alice"].secret, long_prompt), 400)
    assert "context length" in error["message"]
    # OpenAI's type for the status, and a code that is OpenAI's kind of value: a string naming
    # the problem or null, never the engine's exception name or its echo of the status.
    assert error["type"] == "invalid_request_error"
    assert error["code"] is None or (isinstance(error["code"], str) and not error["code"].isdigit())


def test_an_unreachable_engine_gets_502_then_503_while_it_is_down(gateway, replica, cast):
    # Hold the health prober's turn, so the request, not a probe, is first to find the fault.
    redis_sync().set(keyspace.HEALTH_PROBE_LOCK, b"test", px=30_000)
    Replica.objects.filter(pk=replica.pk).update(base_url=f"http://127.0.0.1:{free_port()}")
    Replica.objects.get(pk=replica.pk).save()
    assert_error(post(gateway, cast["alice"].secret, CHAT), 502, "upstream_unreachable")
    redis_sync().delete(keyspace.HEALTH_PROBE_LOCK)
    # Now known to be down, its slots are withdrawn: no waiting in a queue nobody serves.
    response = post(gateway, cast["alice"].secret, CHAT)
    assert_error(response, 503, "no_healthy_replica")
    assert int(response.headers["retry-after"]) > 0


def test_an_engine_failure_gets_502(gateway, replica, cast, sim):
    sim.set_faults(error_500=True)
    assert_error(post(gateway, cast["alice"].secret, CHAT), 502, "upstream_error")


class GarbledEngine:
    """Answers every request with a 200 whose body is not JSON a reader can use."""

    def __init__(self, body: bytes = b"<garbage>") -> None:
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        async def serve():
            async def answer(reader, writer):
                await reader.readuntil(b"\r\n\r\n")
                head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
                writer.write(head.encode() + body)
                await writer.drain()
                writer.close()

            self.server = await asyncio.start_server(answer, "127.0.0.1", self.port)
            started.set()

        threading.Thread(
            target=lambda: (self.loop.run_until_complete(serve()), self.loop.run_forever()), daemon=True
        ).start()
        started.wait(5)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)


# Nested past any parser's depth: the standard library's json raises RecursionError, not ValueError.
@pytest.mark.parametrize("body", [b"<garbage>", b"[" * 100_000 + b"]" * 100_000], ids=["not-json", "too-deep"])
def test_a_garbled_engine_answer_gets_502(gateway, replica, cast, body):
    engine = GarbledEngine(body)
    try:
        Replica.objects.filter(pk=replica.pk).update(base_url=f"http://127.0.0.1:{engine.port}")
        Replica.objects.get(pk=replica.pk).save()
        wait_for(lambda: post(gateway, cast["alice"].secret, CHAT).status_code == 502, what="the garbled replica")
        assert_error(post(gateway, cast["alice"].secret, CHAT), 502, "upstream_garbled")
    finally:
        engine.close()


def test_a_stalled_engine_gets_504(live_db_url, redis_url, tiers, cast, sim):
    Replica.objects.create(name="sim-a", base_url=sim.url, model=MODEL, max_num_seqs=8)
    sim.set_faults(stall=True)
    impatient = start_gateway(live_db_url, name="impatient", GP_UPSTREAM_READ_TIMEOUT="0.5")
    try:
        assert_error(post(impatient, cast["alice"].secret, CHAT), 504, "upstream_timeout")
    finally:
        impatient.stop()
        sim.set_faults(stall=False)


def test_an_unknown_endpoint_under_v1_gets_an_openai_shaped_404(gateway, replica, cast):
    assert_error(post(gateway, cast["alice"].secret, CHAT, path="/v1/moderations"), 404, "unknown_url")
