"""When each kind of Celery worker last started a task, for the staff home's "Background work"
(telemetry/worker_health.py). Beat sends the poll task every few seconds and the batch runner's
task every few more, so a heartbeat that goes stale means beat, or the worker on that queue, is
not running."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio

from fairness.store import keyspace

PERIODIC = "periodic"  # a worker on Celery's default queue, running beat's poll task
BATCHES = "batches"  # a worker on the batches queue, running the batch runner

log = logging.getLogger(__name__)


def record(client: redis.Redis, worker: str, clock: Callable[[], float] = time.time) -> None:
    """Say that `worker` is running a task now. Never raises: a heartbeat that cannot be written
    must not stop the work it announces (Redis being away shows on the pages anyway)."""
    try:
        client.hset(keyspace.WORKER_HEARTBEATS, worker, repr(clock()))
    except redis.RedisError as exc:
        log.warning("could not record the %s worker's heartbeat: %s", worker, exc)


async def read(client: redis.asyncio.Redis) -> dict[str, float]:
    """Worker -> when it last started a task (epoch seconds); a worker never seen is absent."""
    raw: dict[Any, Any] = await client.hgetall(keyspace.WORKER_HEARTBEATS)
    seen = {}
    for worker, at in raw.items():
        try:
            seen[worker.decode() if isinstance(worker, bytes) else str(worker)] = float(at)
        except ValueError:
            continue  # not a time: as if never seen, rather than a page that fails
    return seen
