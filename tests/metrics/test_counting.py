"""What one finished request adds to the counters, and how the scrape turns them into series."""

import asyncio
import json
import time

import redis.asyncio
from prometheus_client import CollectorRegistry, generate_latest

from fairness.accounting import usage
from fairness.gateway import accounting
from fairness.models import UsageRecord
from fairness.store import keyspace
from fairness.telemetry import gateway_metrics
from tests.support.metrics import Samples


def event(**overrides) -> accounting.UsageEvent:
    base: accounting.UsageEvent = {
        "key_id": 1, "tier": "interactive", "request_id": "req-1", "endpoint": "chat", "model": "m",
        "replica": "sim-a", "status": 200, "stream": False, "prompt_tokens": 12, "completion_tokens": 34,
        "queued_ms": 300, "ttft_ms": 40, "latency_ms": 500, "at": time.time(),
    }
    return {**base, **overrides}  # type: ignore[typeddict-item]


def test_a_served_request_counts_itself_its_tokens_and_its_wait_bucket():
    assert accounting.counter_increments(event(), admitted=True, refusal=None) == {
        "req|interactive|200|chat": 1,
        "tok|interactive|prompt": 12,
        "tok|interactive|completion": 34,
        "wait|interactive|0.5": 1,
        "waitsum|interactive": 0.3,
    }


def test_a_refused_request_counts_as_a_rejection_and_has_no_wait():
    refused = event(status=429, replica="", prompt_tokens=0, completion_tokens=0, queued_ms=0)
    assert accounting.counter_increments(refused, admitted=False, refusal="queue_full") == {
        "req|interactive|429|chat": 1,
        "rej|interactive|queue_full": 1,
    }
    assert accounting.counter_increments(event(status=429), admitted=True, refusal=None)["rej|interactive|engine"] == 1


def test_an_engine_failure_counts_against_the_replica_a_client_error_does_not():
    assert accounting.counter_increments(event(status=502), admitted=True, refusal=None)["uperr|sim-a"] == 1
    assert accounting.counter_increments(event(status=504), admitted=True, refusal=None)["uperr|sim-a"] == 1
    assert "uperr|sim-a" not in accounting.counter_increments(event(status=400), admitted=True, refusal=None)
    assert "uperr|sim-a" not in accounting.counter_increments(event(status=499), admitted=True, refusal=None)


def test_the_record_and_its_counters_share_one_pipeline(redis_url, redis_client):
    async def go():
        client = redis.asyncio.Redis.from_url(redis_url)
        done = event()
        pipe = client.pipeline(transaction=False)
        for command in accounting.commands(done, admitted=True, refusal=None):
            pipe.execute_command(*command)
        await pipe.execute()
        await client.aclose()

    asyncio.run(go())
    assert redis_client.llen(keyspace.USAGE_EVENTS) == 1
    stored = {k.decode(): float(v) for k, v in redis_client.hgetall(keyspace.GATEWAY_COUNTERS).items()}
    assert stored == {"req|interactive|200|chat": 1, "tok|interactive|prompt": 12,
                      "tok|interactive|completion": 34, "wait|interactive|0.5": 1, "waitsum|interactive": 0.3,
                      "usage|pushed": 1}


def test_the_flush_still_writes_events_that_carry_the_tier(cast, redis_url, redis_client):
    async def go():
        client = redis.asyncio.Redis.from_url(redis_url)
        await client.rpush(keyspace.USAGE_EVENTS, json.dumps(event(key_id=cast["alice"].key_id)))
        await client.aclose()

    asyncio.run(go())
    assert usage.flush(redis_client) == 1
    assert UsageRecord.objects.get().key_id == cast["alice"].key_id


def test_the_scrape_makes_buckets_cumulative_and_shows_idle_tiers_as_zero():
    counters = {"wait|batch|0.005": 2.0, "wait|batch|60.0": 1.0, "wait|batch|+Inf": 1.0,
                "waitsum|batch": 4000.0, "wait|batch|0.333": 7.0}  # the last: a retired bound, skipped
    live = {"groups": {"sim": {"capacity": 8, "in_flight": 1, "queued": 0}},
            "tiers": {"batch": {"in_flight": 1, "borrowed": 0, "queued": 3, "longest_wait": 2.5}},
            "keys": {}, "longest_wait": 2.5}
    registry = CollectorRegistry(auto_describe=False)
    snapshot = gateway_metrics.Snapshot(counters, live, ["batch", "interactive"])
    registry.register(gateway_metrics.GatewayCollector(snapshot))
    samples = Samples(generate_latest(registry).decode())
    bucket = "gpuportal_queue_wait_seconds_bucket"
    assert samples.get(bucket, tier="batch", le="0.005") == 2
    assert samples.get(bucket, tier="batch", le="30.0") == 2
    assert samples.get(bucket, tier="batch", le="60.0") == 3
    assert samples.get(bucket, tier="batch", le="+Inf") == 4
    assert samples.get("gpuportal_queue_wait_seconds_count", tier="batch") == 4
    assert samples.get("gpuportal_queue_wait_seconds_sum", tier="batch") == 4000
    assert samples.get("gpuportal_queued", tier="batch") == 3
    assert samples.get("gpuportal_oldest_wait_seconds", tier="batch") == 2.5
    assert (("gpuportal_in_flight", frozenset({("tier", "interactive")})) in samples.values)
    assert samples.get("gpuportal_in_flight", tier="interactive") == 0
    assert samples.get("gpuportal_slots", model="sim") == 8
