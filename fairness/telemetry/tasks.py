"""Celery tasks: thin loops over the units that do the work."""

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from fairness.accounting import fair_share_usage, key_expiry, usage, usage_rollup
from fairness.gateway import engine_client
from fairness.store import heartbeats, keyspace
from fairness.store.redis_clients import redis_async, redis_sync
from fairness.telemetry import alerts, budget_status, capacity_store, polling

if TYPE_CHECKING:
    # Celery ships no types: its decorator as the checker is to see it (the tasks stay Any to it).
    def shared_task(**options: Any) -> Callable[[Callable[..., Any]], Any]: ...
else:
    from celery import shared_task


@shared_task(name="fairness.flush_usage")
def flush_usage() -> int:
    written = 0
    while True:
        batch = usage.flush(redis_sync())
        written += batch
        if batch < 1000:
            return written


async def poll_and_publish(refit_every: float = 15.0) -> int:
    """One beat: poll every replica, update saturation alerts (and the dropped-usage one), and
    refit capacity now and then."""
    try:
        poll = await polling.poll_once()
        now = time.time()
        await alerts.observe(poll.readings, poll.gateway_queued, now)
        await alerts.observe_usage_drops(now)
        last = await redis_async().get(keyspace.CAPACITY_REFITTED_AT)
        if last is None or now - float(last) >= refit_every:
            await capacity_store.refit_and_publish()
            await redis_async().set(keyspace.CAPACITY_REFITTED_AT, now)
        return len(poll.readings)
    finally:
        # Each task run has its own event loop: close what was opened on it.
        await redis_async().aclose()
        await engine_client.aclose()


@shared_task(name="fairness.poll_engines", expires=10)
def poll_engines() -> int:
    # The most frequent periodic task: its heartbeat says beat and this worker are running.
    heartbeats.record(redis_sync(), heartbeats.PERIODIC)
    return asyncio.run(poll_and_publish())


@shared_task(name="fairness.compact_samples")
def compact_samples() -> int:
    return polling.compact_samples(
        timezone.now(),
        raw_for=dt.timedelta(hours=settings.GP_SAMPLES_RAW_HOURS),
        keep_for=dt.timedelta(days=settings.GP_SAMPLES_RETENTION_DAYS),
    )


@shared_task(name="fairness.prune_usage")
def prune_usage() -> tuple[int, int]:
    return usage_rollup.prune(
        timezone.now(),
        records_for=dt.timedelta(days=settings.GP_USAGE_RECORDS_DAYS),
        hourly_for=dt.timedelta(days=settings.GP_USAGE_HOURLY_DAYS),
    )


@shared_task(name="fairness.save_fair_share_usage", expires=30)
def save_fair_share_usage() -> int:
    async def run() -> int:
        try:
            return (await fair_share_usage.restore_and_save())[1]
        finally:
            await redis_async().aclose()

    return asyncio.run(run())


@shared_task(name="fairness.check_budgets", expires=30)
def check_budgets() -> int:
    """Budget counters back from the usage records if Redis lost them; the 80% notices."""
    budget_status.restore_if_lost()

    async def run() -> int:
        try:
            return await budget_status.send_notices()
        finally:
            await redis_async().aclose()
            await engine_client.aclose()

    return asyncio.run(run())


@shared_task(name="fairness.notify_expiring_keys", expires=600)
def notify_expiring_keys() -> int:
    """One e-mail to each key's owner a week before it expires."""
    return key_expiry.notify_expiring(timezone.now())
