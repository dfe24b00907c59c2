"""The published figures follow the replicas that take new work (real gateway and engine
processes, the real poll task): a replica down leaves the others' figures standing, a draining one
leaves the headline."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.models import Replica
from fairness.telemetry import tasks
from fairness.telemetry.capacity_model import NOT_ENOUGH_DATA
from tests.support.cast import MODEL
from tests.support.polling import wait_for
from tests.support.processes import free_port
from tests.support.telemetry import load_on, running_is


def engine(name: str) -> tuple[EngineSimProcess, Replica]:
    process = start_enginesim(model=MODEL, max_num_seqs=8,
                              extra_args=["--speed", "4", "--step-per-seq-ms", "2"])
    return process, Replica.objects.create(name=name, base_url=process.url, model=MODEL, max_num_seqs=8)


@pytest.fixture
def engines(gateway) -> Iterator[list[EngineSimProcess]]:
    started: list[EngineSimProcess] = []
    yield started
    for process in started:
        process.stop()


def publish() -> None:
    """One beat of the poll task, refitting every time."""
    asyncio.run(tasks.poll_and_publish(refit_every=0))


def capacity(gateway_url: str) -> dict:
    return httpx.get(gateway_url + "/api/capacity", timeout=10).json()


def model_figures(gateway_url: str) -> dict | None:
    models = [m for m in capacity(gateway_url)["models"] if m["model"] == MODEL]
    return models[0] if models else None


def published_after_polling(gateway_url: str, serving: int) -> dict:
    """Poll until the gateway's API publishes figures for `serving` replicas."""
    def ready() -> dict | None:
        publish()
        figures = model_figures(gateway_url)
        ok = figures and figures["per_user"] and figures["serving_replicas"] == serving
        return figures if ok else None

    return wait_for(ready, timeout=90, interval=0.1, what=f"figures for {serving} serving replicas")


def test_an_unreachable_replica_leaves_the_figures_of_the_one_that_serves(gateway, engines):
    process, _ = engine("sim-up")
    engines.append(process)
    load = load_on(process.url, users=6)
    try:
        running_is(process, 6)
        before = published_after_polling(gateway.url, serving=1)
        Replica.objects.create(name="sim-gone", base_url=f"http://127.0.0.1:{free_port()}", model=MODEL,
                               max_num_seqs=8)
        for _ in range(3):  # polls in which the new replica is down
            publish()
        after = model_figures(gateway.url)
    finally:
        load.stop()

    assert after is not None
    assert after["sentence"] != NOT_ENOUGH_DATA and after["sentence"].startswith("This endpoint serves roughly")
    assert after["serving_replicas"] == 1
    # The history stands and grows: the polls with a replica down still count the one that served.
    assert after["samples"] > before["samples"]
    assert after["total_tokens_per_second"] == pytest.approx(before["total_tokens_per_second"], rel=0.25)
    rows = {r["name"]: r for r in capacity(gateway.url)["replicas"]}
    assert rows["sim-gone"]["healthy"] is False and rows["sim-up"]["healthy"] is True


def test_a_draining_replica_leaves_the_headline(gateway, engines):
    first, _ = engine("sim-one")
    second, draining = engine("sim-two")
    engines += [first, second]
    loads = [load_on(first.url, users=6), load_on(second.url, users=6)]
    try:
        running_is(first, 6)
        running_is(second, 6)
        both = published_after_polling(gateway.url, serving=2)
        draining.draining = True
        draining.save(update_fields=["draining"])
        one = model_figures(gateway.url)  # no refit: the figures follow the replicas at once
    finally:
        for load in loads:
            load.stop()

    assert one is not None and one["serving_replicas"] == 1
    assert one["total_tokens_per_second"] == pytest.approx(both["total_tokens_per_second"] / 2, rel=0.01)
    eight = {p["users"]: p["tokens_per_second"] for p in one["per_user"]}[8]
    assert eight < {p["users"]: p["tokens_per_second"] for p in both["per_user"]}[8]
    page = httpx.get(gateway.url + "/capacity/", timeout=10).text
    assert "Counts the 1 replica taking new requests now." in page
    assert 'class="health draining">draining<' in page
