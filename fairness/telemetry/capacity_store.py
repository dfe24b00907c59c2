"""The numbers people schedule around: capacity per model, from the last hour's samples.

The poll task refits one replica's curve per model now and then and keeps it in Redis; every read
scales it to the replicas that take new work at that moment (enabled, not draining, not down), so
a replica going down or draining changes the figures at once and a new one adds to them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections import defaultdict
from collections.abc import Collection

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from fairness.models import EngineSample, Replica
from fairness.scheduling.admission import admission_stats
from fairness.scheduling.live_counts import text
from fairness.store import keyspace
from fairness.store.redis_clients import redis_async
from fairness.telemetry.capacity_model import CapacityEstimate, Sample, estimate_capacity, for_replicas


def samples_by_model(since: dt.datetime) -> dict[str, list[Sample]]:
    """Each enabled replica's own (running, generated tok/s) at each poll where it answered with
    a rate: one replica down at a poll costs only its own sample, and a replica added later
    adds its samples to the others' instead of starting the history again."""
    model_of = dict(Replica.objects.filter(enabled=True).values_list("pk", "model"))
    found: dict[str, list[Sample]] = defaultdict(list)
    rows = EngineSample.objects.filter(
        taken_at__gte=since, resolution_seconds=0, replica_id__in=model_of, healthy=True,
        generation_tps__isnull=False,
    ).values_list("replica_id", "running", "generation_tps")
    for replica_id, running, tps in rows:
        if tps is not None:  # filtered out already; the stubs cannot tell
            found[model_of[replica_id]].append(Sample(running, tps))
    return found


def fit_curves(now: dt.datetime | None = None) -> dict[str, CapacityEstimate | None]:
    """One replica's curve per model of the enabled replicas (slots: the largest max_num_seqs)."""
    since = (now or timezone.now()) - dt.timedelta(minutes=settings.GP_CAPACITY_WINDOW_MINUTES)
    slots: dict[str, int] = defaultdict(int)
    for model, seqs in Replica.objects.filter(enabled=True).values_list("model", "max_num_seqs"):
        slots[model] = max(slots[model], seqs)
    samples = samples_by_model(since)
    return {model: estimate_capacity(model, samples.get(model, []), n) for model, n in slots.items()}


def serving_slots(down: Collection[str] = ()) -> dict[str, list[int]]:
    """model -> max_num_seqs of each replica taking new work: enabled, not draining, not in
    `down`. Every model of an enabled replica is listed, with [] when none of them serves."""
    serving: dict[str, list[int]] = {}
    for name, model, seqs, draining in Replica.objects.filter(enabled=True).values_list(
        "name", "model", "max_num_seqs", "draining"
    ):
        serving.setdefault(model, [])
        if not draining and name not in down:
            serving[model].append(seqs)
    return serving


def scaled(
    curves: dict[str, CapacityEstimate | None], serving: dict[str, list[int]]
) -> dict[str, CapacityEstimate | None]:
    return {
        model: None if curve is None else for_replicas(curve, serving.get(model, []))
        for model, curve in curves.items()
    }


def refit(now: dt.datetime | None = None, down: Collection[str] = ()) -> dict[str, CapacityEstimate | None]:
    """The figures for the replicas serving now (`down`: names known to be down)."""
    return scaled(fit_curves(now), serving_slots(down))


async def refit_and_publish() -> dict[str, CapacityEstimate | None]:
    curves = await sync_to_async(fit_curves)()
    client = redis_async()
    async with client.pipeline(transaction=True) as pipe:
        pipe.delete(keyspace.CAPACITY_ESTIMATES)
        for model, curve in curves.items():
            pipe.hset(keyspace.CAPACITY_ESTIMATES, model, json.dumps(dataclasses.asdict(curve)) if curve else "")
        await pipe.execute()
    return curves


async def down_replicas() -> set[str]:
    """Replicas the last poll could not read, or whose slots admission withdrew (health probes
    and failures mark a replica down before the next poll does)."""
    client = redis_async()
    latest = await client.hgetall(keyspace.TELEMETRY_LATEST)
    down = {text(name) for name, raw in latest.items() if not json.loads(raw).get("healthy", True)}
    stats = await admission_stats(client)
    down |= {name for name, figures in stats["replicas"].items() if figures["capacity"] == 0}
    return down


async def read_estimates() -> dict[str, CapacityEstimate | None]:
    """Per model, the published figures for the replicas serving now; None when there is no
    curve yet or no replica takes new work (`read_published` tells the two apart)."""
    return (await read_published())[0]


async def read_published() -> tuple[dict[str, CapacityEstimate | None], dict[str, int]]:
    """The figures per model, and how many of its replicas take new work now."""
    raw = await redis_async().hgetall(keyspace.CAPACITY_ESTIMATES)
    curves = {text(model): CapacityEstimate(**json.loads(value)) if value else None for model, value in raw.items()}
    serving = await sync_to_async(serving_slots)(await down_replicas())
    return scaled(curves, serving), {model: len(slots) for model, slots in serving.items()}
