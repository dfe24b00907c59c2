"""Real traffic through a live gateway shows up in its /metrics with the right counts."""

import asyncio

import httpx
import pytest

from enginesim.process import start_enginesim
from fairness.models import Replica, Tier
from tests.support.cast import MODEL
from tests.support.live_admission import chat_body, drop, hold, key_stats, send, wait_async
from tests.support.metrics import Samples, counting_from_zero, scrape, scrape_until

REQUESTS = "gpuportal_requests_total"


def test_it_counts_requests_tokens_and_queue_waits_by_tier(gateway, cast, openai_for, redis_url):
    counting_from_zero(gateway.url, redis_url)
    alice = openai_for(cast["alice"])
    replies = [
        alice.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"q{i}"}], max_tokens=4)
        for i in range(3)
    ]
    streamed = list(openai_for(cast["carol"]).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "batch"}], max_tokens=6, stream=True,
        extra_body={"ignore_eos": True},
    ))
    assert streamed
    # A stream is recorded as it closes, a moment after the client read its end.
    samples = scrape_until(
        gateway.url, lambda s: s.get(REQUESTS, tier="batch", status="200", endpoint="chat") == 1, "the stream's count"
    )

    assert samples.get(REQUESTS, tier="interactive", status="200", endpoint="chat") == 3
    assert sum(samples.series(REQUESTS).values()) == 4
    assert samples.get("gpuportal_tokens_total", tier="interactive", kind="completion") == sum(
        r.usage.completion_tokens for r in replies)
    assert samples.get("gpuportal_tokens_total", tier="interactive", kind="prompt") == sum(
        r.usage.prompt_tokens for r in replies)
    assert samples.get("gpuportal_tokens_total", tier="batch", kind="completion") == 6
    assert samples.get("gpuportal_queue_wait_seconds_count", tier="interactive") == 3
    assert samples.get("gpuportal_queue_wait_seconds_bucket", tier="interactive", le="+Inf") == 3
    assert samples.get("gpuportal_queue_wait_seconds_count", tier="batch") == 1
    for tier in ("interactive", "batch"):  # all given back, and shown as zero rather than missing
        assert ("gpuportal_in_flight", frozenset({("tier", tier)})) in samples.values
        assert samples.get("gpuportal_in_flight", tier=tier) == 0
        assert samples.get("gpuportal_queued", tier=tier) == 0
    assert samples.get("gpuportal_slots", model=MODEL) == 8
    assert not samples.series("gpuportal_rejections_total")


def test_it_shows_what_runs_and_waits_and_counts_a_429_by_its_reason(gateway, cast, replica, redis_url):
    counting_from_zero(gateway.url, redis_url)
    Tier.objects.filter(name="interactive").update(max_queued_per_key=1)
    Tier.objects.get(name="interactive").save()  # bump the config epoch
    bob = cast["bob"]

    async def scenario() -> tuple[httpx.Response, Samples]:
        async with httpx.AsyncClient(timeout=60) as client:
            running = await hold(client, gateway.url, bob, 2)
            waiting = asyncio.create_task(send(client, gateway.url, bob, chat_body(bob)))
            await wait_async(lambda: key_stats(bob)["queued"] == 1)
            during = await asyncio.to_thread(scrape, gateway.url)
            refused = await send(client, gateway.url, bob, chat_body(bob))
            await drop([*running, waiting])
            return refused, during

    refused, during = asyncio.run(scenario())
    assert refused.status_code == 429
    assert during.get("gpuportal_in_flight", tier="interactive") == 2
    assert during.get("gpuportal_queued", tier="interactive") == 1
    assert during.get("gpuportal_oldest_wait_seconds", tier="interactive") > 0

    # Dropped clients are counted as the gateway lets them go: the two streams as 499s, the
    # waiting one as a 499 too unless a freed slot let it finish first.
    after = scrape_until(
        gateway.url, lambda s: sum(s.series(REQUESTS).values()) == 4, "the dropped requests' counts"
    )
    assert after.get(REQUESTS, tier="interactive", status="499", endpoint="chat") >= 2
    assert after.get("gpuportal_rejections_total", tier="interactive", reason="queue_full") == 1
    assert after.get(REQUESTS, tier="interactive", status="429", endpoint="chat") == 1
    assert after.get("gpuportal_in_flight", tier="interactive") == 0
    assert after.get("gpuportal_queued", tier="interactive") == 0
    assert after.get("gpuportal_queue_wait_seconds_count", tier="interactive") in (2, 3)


@pytest.fixture
def broken(gateway):
    with start_enginesim(model=MODEL, max_num_seqs=8, extra_args=["--speed", "20"]) as engine:
        engine.set_faults(error_500=True)
        Replica.objects.create(name="broken", base_url=engine.url, model=MODEL, max_num_seqs=8)
        yield engine


def test_an_engine_failure_counts_as_an_upstream_error_of_its_replica(gateway, cast, broken, redis_url):
    counting_from_zero(gateway.url, redis_url)
    response = httpx.post(
        gateway.url + "/v1/chat/completions", json=chat_body(cast["alice"], max_tokens=3),
        headers={"authorization": f"Bearer {cast['alice'].secret}"}, timeout=30,
    )
    assert response.status_code == 502
    # Counted in the gateway process and flushed to Redis within a second.
    samples = scrape_until(
        gateway.url, lambda s: s.get("gpuportal_upstream_errors_total", replica="broken") == 1, "the 502's count"
    )
    assert samples.get(REQUESTS, tier="interactive", status="502", endpoint="chat") == 1
    assert not samples.series("gpuportal_tokens_total")
