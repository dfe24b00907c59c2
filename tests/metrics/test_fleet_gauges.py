"""The gauges the alert rules read: each replica up or down as the gateways route, its slots,
the gateway's queue per model, and when the engine poller last polled."""

import asyncio
import json

import pytest
import redis
import redis.asyncio

from fairness.gateway.replica_rows import replica_info
from fairness.models import Replica
from fairness.scheduling import health
from fairness.store import keyspace
from fairness.telemetry import gateway_metrics
from tests.support.metrics import Samples
from tests.support.redis_db import QUIET_REDIS_URL


def scrape() -> Samples:
    return Samples(asyncio.run(gateway_metrics.exposition()).decode())


def mark_down(redis_url: str, replica: Replica) -> None:
    async def go() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            await health.mark_down(client, replica_info(replica), cooldown=60)
        finally:
            await client.aclose()

    asyncio.run(go())


@pytest.fixture
def quiet_store(settings) -> str:
    """The scrape reads the quiet Redis database, which no live process writes to. In the shared
    one, a live gateway of this worker probing the replicas it has read could find 127.0.0.1:9
    refusing and write that verdict (two PostgreSQL runs read the "up" replica down)."""
    client = redis.Redis.from_url(QUIET_REDIS_URL)
    client.flushdb()
    client.close()
    settings.REDIS_URL = QUIET_REDIS_URL
    return QUIET_REDIS_URL


def test_a_replica_the_gateways_hold_out_reads_down_and_the_others_up(tiers, quiet_store):
    up = Replica.objects.create(name="gauge-up", base_url="http://127.0.0.1:9", model="m", max_num_seqs=8)
    down = Replica.objects.create(name="gauge-down", base_url="http://127.0.0.1:10", model="m", max_num_seqs=8)
    Replica.objects.create(name="gauge-off", base_url="http://127.0.0.1:11", model="m", max_num_seqs=8,
                           enabled=False)
    mark_down(quiet_store, down)

    samples = scrape()
    assert samples.get("gpuportal_replica_up", replica=up.name, model="m") == 1
    assert samples.get("gpuportal_replica_up", replica=down.name, model="m") == 0
    assert len(samples.series("gpuportal_replica_up")) == 2  # a disabled replica is no series
    assert samples.get("gpuportal_model_queued", model="m") == 0  # shown as zero, not missing
    assert ("gpuportal_replica_slots", frozenset({("replica", up.name), ("model", "m")})) in samples.values


def test_the_last_poll_is_the_newest_reading_and_absent_before_any(tiers, redis_url, redis_client):
    assert not scrape().series("gpuportal_engine_poll_last_timestamp_seconds")
    for name, at in (("sim-a", 1_700_000_000.0), ("sim-b", 1_700_000_002.5)):
        redis_client.hset(keyspace.TELEMETRY_LATEST, name, json.dumps({"name": name, "taken_at": at}))
    redis_client.hset(keyspace.TELEMETRY_LATEST, "garbled", "{not json")
    assert scrape().get("gpuportal_engine_poll_last_timestamp_seconds") == 1_700_000_002.5
