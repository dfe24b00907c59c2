"""Celery tasks: thin loops over the units that do the work."""

from celery import shared_task

from fairness import usage
from fairness.connections import redis_sync


@shared_task(name="fairness.flush_usage")
def flush_usage() -> int:
    written = 0
    while True:
        batch = usage.flush(redis_sync())
        written += batch
        if batch < 1000:
            return written
