"""The numbers people schedule around: capacity per model, from the last hour's samples.

Estimates are refitted by the poll task and kept in Redis, so pages and the API only read.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections import defaultdict

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from fairness.models import EngineSample, Replica
from fairness.scheduling.live_counts import text
from fairness.store import keyspace
from fairness.store.redis_clients import redis_async
from fairness.telemetry.capacity_model import CapacityEstimate, Sample, estimate_capacity


def samples_by_model(since: dt.datetime) -> dict[str, list[Sample]]:
    """(Σ running, Σ generated tok/s) over each model's replicas at each poll. A poll where any
    replica of the model was down or had no rate yet is left out: it would sit off the curve."""
    replicas_of: dict[str, int] = defaultdict(int)
    model_of = {}
    for replica in Replica.objects.filter(enabled=True):
        replicas_of[replica.model] += 1
        model_of[replica.pk] = replica.model
    polls: dict[tuple[str, dt.datetime], list[EngineSample]] = defaultdict(list)
    rows = EngineSample.objects.filter(taken_at__gte=since, resolution_seconds=0, replica_id__in=model_of)
    for row in rows.only("replica_id", "taken_at", "running", "generation_tps", "healthy"):
        polls[(model_of[row.replica_id], row.taken_at)].append(row)
    found: dict[str, list[Sample]] = defaultdict(list)
    for (model, _), members in polls.items():
        rates = [m.generation_tps for m in members if m.healthy and m.generation_tps is not None]
        if len(members) == replicas_of[model] and len(rates) == len(members):
            found[model].append(Sample(sum(m.running for m in members), sum(rates)))
    return found


def refit(now: dt.datetime | None = None) -> dict[str, CapacityEstimate | None]:
    since = (now or timezone.now()) - dt.timedelta(minutes=settings.GP_CAPACITY_WINDOW_MINUTES)
    slots: dict[str, int] = defaultdict(int)
    for replica in Replica.objects.filter(enabled=True):
        slots[replica.model] += replica.max_num_seqs
    samples = samples_by_model(since)
    return {model: estimate_capacity(model, samples.get(model, []), total) for model, total in slots.items()}


async def refit_and_publish() -> dict[str, CapacityEstimate | None]:
    estimates = await sync_to_async(refit)()
    client = redis_async()
    async with client.pipeline(transaction=True) as pipe:
        pipe.delete(keyspace.CAPACITY_ESTIMATES)
        for model, estimate in estimates.items():
            pipe.hset(keyspace.CAPACITY_ESTIMATES, model, json.dumps(dataclasses.asdict(estimate)) if estimate else "")
        await pipe.execute()
    return estimates


async def read_estimates() -> dict[str, CapacityEstimate | None]:
    raw = await redis_async().hgetall(keyspace.CAPACITY_ESTIMATES)
    return {
        text(model): CapacityEstimate(**json.loads(value)) if value else None
        for model, value in raw.items()
    }
