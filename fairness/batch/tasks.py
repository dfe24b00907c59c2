"""The batch runner as a Celery task, on a queue of its own ("batches"): a runner holds its
worker process for a slice of time (GP_BATCH_SLICE_SECONDS), which must not hold up telemetry's
polling. Beat starts one every GP_BATCH_POLL_SECONDS; it returns at once when nothing waits."""

from __future__ import annotations

import asyncio

from celery import shared_task
from django.conf import settings
from django.db import close_old_connections

from fairness.batch.runner import BatchRunner
from fairness.gateway.runtime import GatewayRuntime
from fairness.models import Batch


@shared_task(name="fairness.run_batches")
def run_batches() -> int:
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
