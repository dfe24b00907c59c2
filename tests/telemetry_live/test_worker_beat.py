"""A real Celery worker with beat polls the engines and publishes the capacity figures."""

import httpx

from fairness.models import EngineSample
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
