"""The batch runner as a Celery task, on a queue of its own ("batches"): a runner holds its
worker process for a slice of time (GP_BATCH_SLICE_SECONDS), which must not hold up telemetry's
polling. Beat starts one every GP_BATCH_POLL_SECONDS; it returns at once when nothing waits.
Retention's pruning runs hourly, on the default queue."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from fairness.batch import retention
from fairness.batch.runner import BatchRunner
from fairness.gateway.runtime import GatewayRuntime
from fairness.models import Batch
from fairness.store import heartbeats
from fairness.store.redis_clients import redis_sync

if TYPE_CHECKING:
    # Celery ships no types: its decorator as the checker is to see it (the tasks stay Any to it).
    def shared_task(**options: Any) -> Callable[[Callable[..., Any]], Any]: ...
else:
    from celery import shared_task

log = logging.getLogger(__name__)


@shared_task(name="fairness.run_batches")
def run_batches() -> int:
    heartbeats.record(redis_sync(), heartbeats.BATCHES)  # a batch worker is consuming its queue
    close_old_connections()
    if not Batch.objects.unfinished().exists():
        return 0  # the common case: no runtime to build
    held = asyncio.run(_run())
    close_old_connections()
    if held and Batch.objects.unfinished().exists():
        run_batches.apply_async(expires=settings.GP_BATCH_POLL_SECONDS * 2)  # the next slice, now
    return held


async def _run() -> int:
    runtime = GatewayRuntime.from_settings()
    await runtime.start()
    try:
        return await BatchRunner(runtime).run()
    finally:
        await runtime.close()


@shared_task(name="fairness.prune_batch_storage")
def prune_batch_storage() -> dict[str, int]:
    """Hourly: what the batch lane has kept its time goes (fairness/batch/retention.py)."""
    close_old_connections()
    freed = retention.prune(timezone.now())
    if freed.batches or freed.files or freed.reservations:
        log.info("retention deleted %d batches, %d files (%d bytes), %d stale upload reservations",
                 freed.batches, freed.files, freed.bytes, freed.reservations)
    return dataclasses.asdict(freed)
