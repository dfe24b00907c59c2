"""A live gateway's pages kept busy from the test process: what Celery beat does (poll the
replicas, record samples, refit the capacity estimate) and the demo's traffic generator, each in a
thread, and the capacity JSON they feed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from fairness.demo import traffic_generator
from fairness.telemetry import tasks
from tests.support.cast import MODEL, Member


@contextmanager
def polling(interval: float = 0.25) -> Iterator[None]:
    """What Celery beat does in production, in a thread of the test process: poll the replicas,
    record samples and refit the capacity estimate, again and again."""
    from django.db import connection

    stop = threading.Event()
    errors: list[Exception] = []

    def loop() -> None:
        try:
            while not stop.is_set():
                asyncio.run(tasks.poll_and_publish(refit_every=0))
                stop.wait(interval)  # the beat's period, not a wait for a condition
        except Exception as exc:  # noqa: BLE001 - raised again in the test's own thread
            errors.append(exc)
        finally:
            connection.close()  # this thread's own connection to the test database

    thread = threading.Thread(target=loop, name="poller", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
    if errors:
        raise errors[0]


@contextmanager
def running_traffic(plan: traffic_generator.TrafficPlan) -> Iterator[None]:
    """The demo's traffic generator in a thread; leaving the block cancels it, as Ctrl-C would."""
    ready = threading.Event()
    handle: dict = {}
    errors: list[Exception] = []

    async def main() -> None:
        handle["loop"] = asyncio.get_running_loop()
        handle["task"] = asyncio.current_task()
        ready.set()
        await traffic_generator.run(plan)

    def target() -> None:
        try:
            asyncio.run(main())
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - raised again in the test's own thread
            errors.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=target, name="traffic", daemon=True)
    thread.start()
    ready.wait(timeout=10)
    try:
        yield
    finally:
        if "task" in handle:
            handle["loop"].call_soon_threadsafe(handle["task"].cancel)
        thread.join(timeout=30)
        assert not thread.is_alive(), "the traffic generator did not stop when cancelled"
    if errors:
        raise errors[0]


def traffic_plan(gateway_url: str, cast: dict[str, Member]) -> traffic_generator.TrafficPlan:
    """The demo's mix, sped up like the test engine: two people chatting and carol's batch job,
    which submits more than her tier runs at once, so the gateway's queue is seen too."""
    return traffic_generator.TrafficPlan(
        url=gateway_url, model=MODEL,
        interactive_keys=(cast["alice"].secret, cast["bob"].secret),
        batch_keys=(cast["carol"].secret,), batch_concurrency=4, batch_quiet_seconds=0,
        chat_max_tokens=400, batch_max_tokens=3000, think_seconds=(0.05, 0.3), seed=7,
    )


def capacity_json(gateway_url: str) -> dict:
    response = httpx.get(gateway_url + "/api/capacity", timeout=10)
    response.raise_for_status()
    return response.json()
