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


def test_a_served_request_counts_itself_its_tokens_and_its_wait_and_latency_buckets():
    assert accounting.counter_increments(event(), admitted=True, refusal=None) == {
        "req|interactive|200|chat": 1,
        "tok|interactive|prompt": 12,
        "tok|interactive|completion": 34,
        "wait|interactive|0.5": 1,
        "waitsum|interactive": 0.3,
    }
    assert accounting.latency_increments(event()) == {  # counted in the process, flushed each second
        "dur|0.5|interactive|m": 1,
        "dursum|interactive|m": 500_000,
        "ttft|0.05|interactive|false|m": 1,
        "ttftsum|interactive|false|m": 40_000,
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


def test_the_record_goes_alone_in_its_round_trip_and_its_counters_are_counted_in_the_process(redis_url, redis_client):
    async def go():
        client = redis.asyncio.Redis.from_url(redis_url)
        pipe = client.pipeline(transaction=False)
        for command in accounting.commands(event()):
            pipe.execute_command(*command)
        await pipe.execute()
        await client.aclose()

    asyncio.run(go())
    assert redis_client.llen(keyspace.USAGE_EVENTS) == 1
    stored = {k.decode(): float(v) for k, v in redis_client.hgetall(keyspace.GATEWAY_COUNTERS).items()}
    assert stored == {"usage|pushed": 1}  # no request counter rides the release's round trip


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


def test_a_finished_stream_adds_its_time_per_output_token():
    # 40 ms to the first token, then 33 more tokens in 990 ms: 30 ms each.
    fields = accounting.latency_increments(event(stream=True, latency_ms=1030, ttft_ms=40))
    assert fields["ttft|0.05|interactive|true|m"] == 1
    assert fields["tpot|0.05|interactive|m"] == 1
    assert fields["tpotsum|interactive|m"] == 30_000
    assert fields["dur|2.5|interactive|m"] == 1


def test_only_a_finished_stream_of_two_tokens_or_more_has_a_time_per_output_token():
    for unfit in (event(stream=False), event(stream=True, completion_tokens=1),
                  event(stream=True, status=499), event(stream=True, status=502)):
        assert not any(f.startswith("tpot") for f in accounting.latency_increments(unfit))


def test_a_request_the_engine_never_answered_has_a_duration_and_no_first_token():
    fields = accounting.latency_increments(event(status=502, ttft_ms=None, latency_ms=7000))
    assert fields["dur|10.0|interactive|m"] == 1
    assert not any(f.startswith("ttft") for f in fields)


def test_a_request_refused_by_admission_adds_no_latency():
    refused = event(status=429, replica="", prompt_tokens=0, completion_tokens=0, queued_ms=0, ttft_ms=None)
    fields = accounting.counter_increments(refused, admitted=False, refusal="rate_limited")
    assert not any(f.split("|")[0] in ("dur", "ttft", "tpot", "dursum") for f in fields)


def test_the_scrape_makes_latency_histograms_per_tier_and_model_in_seconds():
    counters: dict[str, float] = {}
    for done in (event(stream=True, latency_ms=1030, ttft_ms=40), event(stream=True, latency_ms=3030, ttft_ms=2040),
                 event(model="org/other|odd", latency_ms=20, ttft_ms=20)):
        for field, amount in accounting.latency_increments(done).items():
            counters[field] = counters.get(field, 0.0) + amount
    counters["dur|0.333|interactive|m"] = 5.0  # a retired bound: skipped
    live = {"groups": {}, "tiers": {}, "keys": {}, "replicas": {}, "longest_wait": 0.0}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(gateway_metrics.GatewayCollector(gateway_metrics.Snapshot(counters, live, ["interactive"])))
    samples = Samples(generate_latest(registry).decode())
    ttft = "gpuportal_time_to_first_token_seconds"
    assert samples.get(ttft + "_bucket", tier="interactive", stream="true", model="m", le="0.05") == 1
    assert samples.get(ttft + "_bucket", tier="interactive", stream="true", model="m", le="2.0") == 1
    assert samples.get(ttft + "_bucket", tier="interactive", stream="true", model="m", le="5.0") == 2
    assert samples.get(ttft + "_count", tier="interactive", stream="true", model="m") == 2
    assert samples.get(ttft + "_sum", tier="interactive", stream="true", model="m") == 2.08
    duration = "gpuportal_request_duration_seconds"
    assert samples.get(duration + "_count", tier="interactive", model="m") == 2
    assert samples.get(duration + "_bucket", tier="interactive", model="m", le="+Inf") == 2
    assert samples.get(duration + "_sum", tier="interactive", model="m") == 4.06
    assert samples.get(duration + "_count", tier="interactive", model="org/other|odd") == 1
    tpot = "gpuportal_time_per_output_token_seconds"
    assert samples.get(tpot + "_count", tier="interactive", model="m") == 2
    assert samples.get(tpot + "_sum", tier="interactive", model="m") == 0.06
    assert samples.get("gpuportal_redis_up") == 1
