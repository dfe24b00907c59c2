"""With no worker draining it, the usage queue keeps the newest GP_USAGE_BACKLOG_MAX events; the
rest are counted, scraped as gpuportal_usage_events_dropped_total, and raise an alert."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis.asyncio

from fairness.accounting import usage
from fairness.gateway import accounting
from fairness.models import SaturationAlert, UsageRecord
from fairness.store import keyspace
from fairness.store.redis_lane import RedisLane, first_error
from fairness.telemetry import alert_words, alerts, gateway_metrics
from tests.support.metrics import Samples

pytestmark = pytest.mark.django_db(transaction=True)


def event(key_id: int, number: int) -> accounting.UsageEvent:
    return {
        "key_id": key_id, "tier": "interactive", "request_id": f"req-{number}", "endpoint": "chat",
        "model": "m", "replica": "r1", "status": 200, "stream": False, "prompt_tokens": 1,
        "completion_tokens": 2, "queued_ms": 0, "ttft_ms": 5, "latency_ms": 9, "at": time.time(),
    }


def finish_requests(redis_url: str, key_id: int, numbers: range) -> None:
    """What the gateway sends as each request ends, over its own kind of connection."""

    async def go() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        lane = RedisLane.like(client)
        try:
            for number in numbers:
                replies = await lane.execute(*accounting.commands(event(key_id, number)))
                assert first_error(replies) is None, replies
        finally:
            await lane.aclose()
            await client.aclose()

    asyncio.run(go())


def backlog(redis_url: str) -> usage.Backlog:
    async def go() -> usage.Backlog:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            return await usage.read_backlog(client)
        finally:
            await client.aclose()

    return asyncio.run(go())


def scrape() -> Samples:
    return Samples(asyncio.run(gateway_metrics.exposition()).decode())


def test_the_queue_keeps_the_newest_events_up_to_its_cap_and_counts_the_rest(settings, cast, redis_url, redis_client):
    settings.GP_USAGE_BACKLOG_MAX = 5
    alice = cast["alice"].key_id
    finish_requests(redis_url, alice, range(8))

    assert redis_client.llen(keyspace.USAGE_EVENTS) == 5
    queued = [json.loads(raw)["request_id"] for raw in redis_client.lrange(keyspace.USAGE_EVENTS, 0, -1)]
    assert queued == [f"req-{n}" for n in range(3, 8)]
    assert backlog(redis_url) == usage.Backlog(queued=5, dropped=3)
    samples = scrape()
    assert samples.get("gpuportal_usage_events_dropped_total") == 3
    assert samples.get("gpuportal_usage_backlog") == 5

    # What the flush writes is drained, not dropped.
    assert usage.flush(redis_client) == 5
    assert UsageRecord.objects.count() == 5
    assert backlog(redis_url) == usage.Backlog(queued=0, dropped=3)
    assert scrape().get("gpuportal_usage_events_dropped_total") == 3


def test_a_queue_below_its_cap_drops_nothing(settings, cast, redis_url, redis_client):
    settings.GP_USAGE_BACKLOG_MAX = 5
    finish_requests(redis_url, cast["bob"].key_id, range(5))
    assert usage.flush(redis_client) == 5
    finish_requests(redis_url, cast["bob"].key_id, range(5, 10))
    assert backlog(redis_url) == usage.Backlog(queued=5, dropped=0)
    assert asyncio.run(alerts.observe_usage_drops(time.time())) is None
    assert not SaturationAlert.objects.exists()


def test_dropped_events_open_an_alert_that_resolves_once_drops_stop(settings, cast, redis_url, redis_client):
    settings.GP_USAGE_BACKLOG_MAX = 5
    settings.GP_ALERT_RESOLVE_SECONDS = 30
    carol = cast["carol"].key_id
    finish_requests(redis_url, carol, range(8))
    now = time.time()

    assert asyncio.run(alerts.observe_usage_drops(now)) == "opened"
    alert = SaturationAlert.objects.get()
    assert (alert.kind, alert.resolved_at, alert.figures["dropped"]) == ("usage", None, 3)
    assert alert_words.describe(alert.kind, alert.figures).startswith("3 usage events dropped")

    finish_requests(redis_url, carol, range(8, 10))  # two more pushed out: the same alert counts them
    assert asyncio.run(alerts.observe_usage_drops(now + 10)) is None
    alert.refresh_from_db()
    assert alert.figures["dropped"] == 5 and alert.resolved_at is None

    assert asyncio.run(alerts.observe_usage_drops(now + 20)) is None  # quiet, but not for long enough
    assert asyncio.run(alerts.observe_usage_drops(now + 41)) == "resolved"
    alert.refresh_from_db()
    assert alert.resolved_at is not None
    # The public capacity API leaves it out: it is the operators' business, not the endpoint's.
    from django.test import Client

    assert Client().get("/api/alerts").json() == []
