"""A real Celery worker with beat polls the engines and publishes the capacity figures, and says
it is alive (the staff home's "Background work")."""

import asyncio
import time

import httpx
import redis.asyncio

from fairness.models import EngineSample
from fairness.store import heartbeats, keyspace
from fairness.telemetry import worker_health
from tests.support.polling import wait_for
from tests.support.telemetry import load_on


def test_beat_polls_every_replica_and_the_api_shows_them(worker, gateway, engine):
    load = load_on(engine.url, users=4)
    try:
        wait_for(lambda: EngineSample.objects.filter(replica__name="sim-cap", running=4).count() >= 3,
                 timeout=30, what=f"samples from the worker\n{worker.log_tail()}")
    finally:
        load.stop()
    capacity = httpx.get(gateway.url + "/api/capacity").json()
    assert [r["name"] for r in capacity["replicas"]] == ["sim-cap"]
    assert capacity["replicas"][0]["healthy"] is True
    assert capacity["totals"]["replicas_healthy"] == 1


def test_a_running_worker_keeps_its_heartbeat_fresh_and_the_staff_home_calls_it_running(worker, redis_url,
                                                                                       redis_client):
    started = time.time()

    def beat() -> float:
        seen = redis_client.hget(keyspace.WORKER_HEARTBEATS, heartbeats.PERIODIC)
        return float(seen) if seen is not None else 0.0

    first = wait_for(lambda: beat() >= started and beat(), timeout=30, what="the worker's first heartbeat",
                     evidence=worker.log_tail)
    # Not a mark left at start-up: each poll beats again while the worker runs.
    wait_for(lambda: beat() > first, timeout=10, what="a later heartbeat", evidence=worker.log_tail)

    async def periodic() -> worker_health.Finding:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            return (await worker_health.findings(client))[0]
        finally:
            await client.aclose()

    finding = asyncio.run(periodic())
    assert finding.topic == "Periodic tasks" and finding.state == "ok", finding.words
