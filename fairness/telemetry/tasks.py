"""Celery tasks: thin loops over the units that do the work.

A second Celery beat must be harmless, so each task either is idempotent or runs alone
(store/task_locks.py): the usage flush drains under a lock of its own; the poll runs alone and at
most once per poll period (its samples, rates, alerts and refit are per period); compaction runs
alone (two would both average the same rows); pruning, the fair-share save (a restore marked
done in Redis, an upsert), the budget check (its restore is SET NX, each notice claimed in the
database before it goes) and the expiry notices (claimed per key) are idempotent.
"""

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from fairness.accounting import fair_share_usage, key_expiry, usage, usage_rollup
from fairness.gateway import engine_client
from fairness.gateway.database_outage import DATABASE_ERRORS, OUTAGE_LOG
from fairness.store import heartbeats, keyspace, task_locks
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
        try:
            batch = usage.flush(redis_sync())
        except DATABASE_ERRORS as exc:
            # A batch leaves Redis only once its rows are committed: the events wait there (up to
            # GP_USAGE_BACKLOG_MAX) and the next run, a few seconds on, writes them.
            OUTAGE_LOG.report(exc, "the usage flush; its events wait in Redis")
            return written
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


# The longest a poll may run (every replica's deadline is GP_POLL_TIMEOUT_SECONDS, at once): past
# it another run may start. Short, so a worker killed mid-poll stalls the polls only this long.
POLL_LOCK_SECONDS = 30.0
# A run keeps the poll's lock this share of GP_POLL_SECONDS after its start: a second beat's send
# within the period finds it held, and one beat's next send, a period later, does not.
POLL_SPACING_SHARE = 0.75


@shared_task(name="fairness.poll_engines", expires=10)
def poll_engines() -> int:
    # The most frequent periodic task: its heartbeat says beat and this worker are running.
    heartbeats.record(redis_sync(), heartbeats.PERIODIC)
    lifetime = max(POLL_LOCK_SECONDS, 2 * settings.GP_POLL_TIMEOUT_SECONDS)
    spacing = POLL_SPACING_SHARE * settings.GP_POLL_SECONDS
    with task_locks.run_alone(redis_sync(), "poll_engines", lifetime, spacing) as mine:
        try:
            return asyncio.run(poll_and_publish()) if mine else 0
        except DATABASE_ERRORS as exc:  # every GP_POLL_SECONDS: one line for many, not a traceback each
            OUTAGE_LOG.report(exc, "the engine poll")
            return 0


@shared_task(name="fairness.compact_samples")
def compact_samples() -> int:
    # Its lock outlives the longest compaction (the schedule's 5 minutes of samples, or an hour's
    # backlog after a stop); a run after it finds nothing left to average.
    with task_locks.run_alone(redis_sync(), "compact_samples", lifetime=900.0) as mine:
        if not mine:
            return 0
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
