"""A live gateway's /metrics: the latency histograms fill per tier and model, every answer is
counted by status and reason (refusals before admission too), and the exposition passes promtool."""

import ast
import asyncio
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aredis
import redis.exceptions

from fairness.gateway.process_counts import KNOWN_REASONS, ProcessCounts, reason_of
from fairness.models import Tier
from fairness.store import keyspace
from fairness.store.redis_lane import RedisLane
from tests.support.cast import MODEL
from tests.support.gateway_process import GatewayProcess
from tests.support.live_admission import chat_body, drop, hold, key_stats, send, wait_async
from tests.support.metrics import Samples, scrape, scrape_until, settled
from tests.support.polling import wait_for
from tests.support.processes import free_port, start_gateway

ANSWERS = "gpuportal_http_requests_total"
DURATION = "gpuportal_request_duration_seconds"
TTFT = "gpuportal_time_to_first_token_seconds"
TPOT = "gpuportal_time_per_output_token_seconds"


def test_a_whole_answer_and_a_stream_fill_the_latency_histograms_of_their_tier_and_model(gateway, cast, openai_for):
    whole = openai_for(cast["alice"]).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
    )
    assert whole.usage.completion_tokens >= 1
    chunks = list(openai_for(cast["carol"]).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "batch"}], max_tokens=6, stream=True,
        extra_body={"ignore_eos": True},
    ))
    assert chunks
    samples = scrape_until(
        gateway.url, lambda s: s.get(DURATION + "_count", tier="batch", model=MODEL) == 1, "the stream's duration"
    )
    assert samples.get(DURATION + "_count", tier="interactive", model=MODEL) == 1
    assert samples.get(DURATION + "_bucket", tier="interactive", model=MODEL, le="+Inf") == 1
    assert 0 < samples.get(DURATION + "_sum", tier="interactive", model=MODEL) < 30
    assert samples.get(TTFT + "_count", tier="interactive", stream="false", model=MODEL) == 1
    assert samples.get(TTFT + "_count", tier="batch", stream="true", model=MODEL) == 1
    # The first token comes before the end of the stream, and the pace is that of its 6 tokens.
    assert samples.get(TTFT + "_sum", tier="batch", stream="true", model=MODEL) <= samples.get(
        DURATION + "_sum", tier="batch", model=MODEL)
    assert samples.get(TPOT + "_count", tier="batch", model=MODEL) == 1
    assert samples.get(TPOT + "_count", tier="interactive", model=MODEL) == 0  # a whole answer has none
    for name in (DURATION, TTFT, TPOT):  # cumulative buckets that end at the count
        for labels, value in samples.series(name + "_count").items():
            assert samples.values[(name + "_bucket", labels | {("le", "+Inf")})] == value


def _post(url: str, body: bytes | dict, secret: str | None) -> httpx.Response:
    headers = {"authorization": f"Bearer {secret}"} if secret else {}
    if isinstance(body, dict):
        return httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
    return httpx.post(url + "/v1/chat/completions", content=body, headers={**headers, "content-type":
                                                                            "application/json"}, timeout=30)


def test_every_answer_is_counted_by_status_and_reason_refusals_before_admission_too(gateway, cast, replica):
    alice = cast["alice"]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    before = settled(gateway.url)
    answers = [
        _post(gateway.url, body, None),  # no key
        _post(gateway.url, body, "sk-not-a-key-of-ours"),
        _post(gateway.url, b"{not json", alice.secret),
        _post(gateway.url, {**body, "model": "a-model-nobody-serves"}, alice.secret),
        _post(gateway.url, body, alice.secret),
        httpx.get(gateway.url + "/v1/no-such-endpoint", timeout=30),
    ]
    assert [a.status_code for a in answers] == [401, 401, 400, 404, 200, 404]
    expected = {("401", "missing_api_key"): 1, ("401", "invalid_api_key"): 1, ("400", "invalid_json"): 1,
                ("404", "model_not_found"): 1, ("404", "unknown_url"): 1, ("200", "ok"): 1}

    def grew(samples: Samples) -> bool:
        return all(samples.get(ANSWERS, status=status, reason=reason)
                   - before.get(ANSWERS, status=status, reason=reason) == count
                   for (status, reason), count in expected.items())

    def served_counted(samples: Samples) -> bool:  # counted as it settled, after its answer
        return samples.get("gpuportal_requests_total", tier="interactive", status="200", endpoint="chat") == 1

    # Each process flushes its counts every second.
    after = scrape_until(gateway.url, lambda s: grew(s) and served_counted(s), "the answers' counts")
    assert {labels for labels in after.series(ANSWERS)} >= {
        frozenset({("status", s), ("reason", r)}) for s, r in expected}
    # The refused requests never reached admission: only the served one is in the per-tier counts.
    assert sum(after.series("gpuportal_requests_total").values()) == 1
    # A model nobody serves makes no series of its own.
    assert all(("model", "a-model-nobody-serves") not in labels
               for (name, labels) in after.values if name.startswith("gpuportal_"))


def test_a_full_queue_and_a_client_that_left_while_queued_are_counted_by_their_reasons(gateway, cast, replica):
    Tier.objects.filter(name="interactive").update(max_queued_per_key=1)
    Tier.objects.get(name="interactive").save()  # bump the config epoch
    bob = cast["bob"]

    async def scenario() -> int:
        async with httpx.AsyncClient(timeout=60) as client:
            running = await hold(client, gateway.url, bob, 2)
            waiting = asyncio.create_task(send(client, gateway.url, bob, chat_body(bob)))
            await wait_async(lambda: key_stats(bob)["queued"] == 1)
            refused = await send(client, gateway.url, bob, chat_body(bob))
            await drop([waiting])  # it leaves while the two streams still hold bob's slots
            await wait_async(lambda: key_stats(bob)["queued"] == 0)
            await drop(running)
            return refused.status_code

    before = settled(gateway.url)
    assert asyncio.run(scenario()) == 429

    def grown(samples: Samples, status: str, reason: str) -> float:
        return samples.get(ANSWERS, status=status, reason=reason) - before.get(ANSWERS, status=status, reason=reason)

    after = scrape_until(gateway.url, lambda s: grown(s, "499", "client_closed") == 1, "the departed client")
    assert grown(after, "429", "queue_full") == 1
    assert grown(after, "200", "ok") == 2  # the streams: their status went out before their clients left


@pytest.fixture
def strict_pace(live_db_url, gateway) -> Iterator[GatewayProcess]:
    """A gateway whose HTTP layer answers a stalled body itself, long before the app would."""
    process = start_gateway(live_db_url, name="gateway-strict-pace", GP_CLIENT_BODY_GRACE_SECONDS="0.3",
                            GP_CLIENT_BODY_TIMEOUT_SECONDS="30")
    yield process
    process.stop()


def test_a_body_the_http_layer_refuses_as_too_slow_counts_once_as_408(gateway, strict_pace, cast):
    before = settled(gateway.url)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {cast['alice'].secret}\r\ncontent-length: 1000\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", strict_pace.port), timeout=10) as sock:
        sock.sendall(head + b'{"model": "sim", ')
        assert sock.recv(65536).startswith(b"HTTP/1.1 408 ")

    def grown(samples: Samples, status: str, reason: str) -> float:
        return samples.get(ANSWERS, status=status, reason=reason) - before.get(ANSWERS, status=status, reason=reason)

    after = scrape_until(strict_pace.url, lambda s: grown(s, "408", "request_timeout") == 1, "the 408")
    assert settled(strict_pace.url)  # its app, which saw the client gone, has flushed too
    after = scrape(strict_pace.url)
    assert grown(after, "408", "request_timeout") == 1
    assert grown(after, "499", "client_closed") == 0


def test_a_reason_outside_the_gateways_own_codes_counts_as_other():
    assert reason_of(200, None) == "ok"
    assert reason_of(429, "rate_limited") == "rate_limited"
    assert reason_of(400, "context_length_exceeded") == "other"  # an engine's own code
    assert reason_of(400, None) == "other"


def test_the_known_reasons_cover_every_code_the_gateway_raises():
    raised: set[str] = set()
    for path in Path("fairness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "ApiError":
                code = node.args[2] if len(node.args) > 2 else None
                if isinstance(code, ast.Constant) and isinstance(code.value, str):
                    raised.add(code.value)
    assert raised, "no ApiError codes found: the scan is broken"
    assert raised <= KNOWN_REASONS, sorted(raised - KNOWN_REASONS)


async def test_counts_redis_could_not_take_are_kept_for_the_next_flush(redis_url):
    counts = ProcessCounts()
    counts.count(401, "missing_api_key")
    counts.count(401, "missing_api_key")
    nobody_listens = RedisLane({"host": "127.0.0.1", "port": free_port()}, aredis.Connection, timeout=1.0)
    with pytest.raises((redis.exceptions.RedisError, OSError)):
        await counts.flush(nobody_listens)
    assert counts.pending() == {"http|401|missing_api_key": 2}

    client = aredis.Redis.from_url(redis_url)
    lane = RedisLane.like(client)
    try:
        assert await counts.flush(lane) == 1  # one field, added 2
        assert counts.pending() == {}
        assert int(await client.hget(keyspace.GATEWAY_COUNTERS, "http|401|missing_api_key")) == 2
    finally:
        await lane.aclose()
        await client.aclose()


def test_a_real_scrape_passes_promtool_check_metrics(gateway, cast, openai_for):
    assert shutil.which("promtool"), "promtool is missing: scripts/ensure-system.sh installs it (Debian's prometheus)"
    openai_for(cast["alice"]).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3,
    )
    assert httpx.get(gateway.url + "/v1/models", timeout=30).status_code == 401

    def histograms_flushed() -> str | None:  # each process adds them to Redis once a second
        text = httpx.get(gateway.url + "/metrics", timeout=10).text
        return text if "gpuportal_request_duration_seconds_bucket" in text else None

    text = wait_for(histograms_flushed, what="the latency histograms in the scrape")
    assert "gpuportal_replica_up" in text
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                             timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
