"""Engine telemetry: scrape every replica's /metrics, keep the latest in Redis, sample to the DB.

`poll_once()` is the whole job of one beat of the poll task. It is a plain coroutine, so tests
call it directly; the Celery task only runs it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.models import Avg, Max

from fairness.gateway import engine_client
from fairness.gateway.errors import ApiError
from fairness.gateway.replica_rows import load_directory
from fairness.models import EngineSample
from fairness.scheduling.admission import admission_stats
from fairness.scheduling.directory import ReplicaInfo
from fairness.scheduling.live_counts import text
from fairness.store import keyspace
from fairness.store.redis_clients import redis_async
from fairness.telemetry import gpu_metrics
from fairness.telemetry.gpu_metrics import GpuFigures
from fairness.telemetry.metrics_parser import MetricsParseError, Rates, Snapshot, parse_metrics, rates_between

log = logging.getLogger(__name__)



@dataclass
class Poll:
    readings: list[Reading]
    gateway_queued: dict[str, float]  # model -> requests waiting in the gateway's queue


@dataclass
class Reading:
    """One replica at one poll."""

    replica: ReplicaInfo
    taken_at: float
    snapshot: Snapshot | None  # None: the scrape failed
    rates: Rates | None
    error: str = ""
    gpu: GpuFigures | None = None  # from its DCGM exporter, when it names one that answered

    @property
    def healthy(self) -> bool:
        return self.snapshot is not None

    def summary(self, gateway_waiting: float) -> dict[str, Any]:
        snap, rates = self.snapshot, self.rates
        return {
            "name": self.replica.name,
            "model": self.replica.model,
            "healthy": self.healthy,
            "error": self.error,
            "taken_at": self.taken_at,
            "running": snap.running if snap else None,
            "waiting": snap.waiting if snap else None,
            "gateway_waiting": gateway_waiting,
            "kv_usage": snap.kv_usage if snap else None,
            "generation_tps": rates.generation_tokens_per_s if rates else None,
            "prompt_tps": rates.prompt_tokens_per_s if rates else None,
            "prefix_hit_rate": rates.prefix_cache_hit_rate if rates else None,
            "max_num_seqs": self.replica.max_num_seqs,
            "gpu": self.gpu.as_json() if self.gpu else None,
        }


async def scrape(replica: ReplicaInfo, taken_at: float) -> tuple[Snapshot | None, str]:
    """The replica's metrics, or None and why. The reason names the status and a generic cause,
    never what the answer said: the pages show it, and an address pointed somewhere else (a
    cloud metadata service, an admin page) would show that service's secrets."""
    try:
        response = await engine_client.get(replica, "/metrics", settings.GP_POLL_TIMEOUT_SECONDS)
    except ApiError as exc:
        return None, exc.message  # the gateway's own words: unreachable, timed out
    except Exception as exc:  # anything odd: the replica reads as down
        return None, f"/metrics could not be read ({type(exc).__name__})"
    if not response.is_success:
        return None, f"/metrics answered HTTP {response.status_code}"
    try:
        return parse_metrics(response.text, replica.engine_kind, taken_at, model=replica.model), ""
    except MetricsParseError:
        return None, (f"/metrics answered HTTP {response.status_code} with no {replica.engine_kind} "
                      "load gauges in Prometheus text format")
    except Exception as exc:
        return None, f"/metrics answered HTTP {response.status_code} but could not be read ({type(exc).__name__})"


async def gateway_queued_by_model() -> dict[str, float]:
    """Requests waiting in the gateway's own queue, per model: the engine's gauge alone
    under-reports demand because the gateway keeps the engine's queue short."""
    stats = await admission_stats(redis_async())
    queued: dict[str, float] = defaultdict(float)
    for group, figures in stats["groups"].items():
        queued[group.split("@")[0]] += figures["queued"]
    return dict(queued)


async def poll_once(clock: Callable[[], float] = time.time) -> Poll:
    directory = await load_directory(include_draining=True)
    client = redis_async()
    taken_at = clock()
    # The GPU exporters beside the engines, at the same time: a slow one costs no more than its deadline.
    results, gpus = await asyncio.gather(
        asyncio.gather(*(scrape(r, taken_at) for r in directory.all)),
        asyncio.gather(*(gpu_metrics.scrape(r.gpu_metrics_url) for r in directory.all)),
    )
    previous = await client.mget([keyspace.telemetry_snapshot(r.name) for r in directory.all]) if directory.all else []

    readings = []
    for replica, (snapshot, error), gpu, prev_raw in zip(directory.all, results, gpus, previous, strict=True):
        rates = None
        if snapshot is not None and prev_raw:
            rates = rates_between(Snapshot(**json.loads(prev_raw)), snapshot)
        readings.append(Reading(replica, taken_at, snapshot, rates, error, gpu))

    queued = await gateway_queued_by_model()
    share = _queued_share(readings, queued)
    async with client.pipeline(transaction=False) as pipe:
        for reading in readings:
            replica_name = reading.replica.name
            if reading.snapshot is not None:
                pipe.set(keyspace.telemetry_snapshot(replica_name), json.dumps(dataclasses.asdict(reading.snapshot)))
            pipe.hset(keyspace.TELEMETRY_LATEST, replica_name, json.dumps(reading.summary(share[replica_name])))
        known = {r.name for r in directory.all}
        stale = [name for name in await client.hkeys(keyspace.TELEMETRY_LATEST) if text(name) not in known]
        if stale:
            pipe.hdel(keyspace.TELEMETRY_LATEST, *stale)
        await pipe.execute()
    await sync_to_async(_store_samples)(readings, share)
    return Poll(readings, queued)


def _queued_share(readings: list[Reading], queued: dict[str, float]) -> dict[str, float]:
    """Split each model's gateway queue evenly over its replicas, for per-replica samples."""
    counts: dict[str, int] = defaultdict(int)
    for reading in readings:
        counts[reading.replica.model] += 1
    return {
        r.replica.name: queued.get(r.replica.model, 0.0) / counts[r.replica.model] for r in readings
    }


def _store_samples(readings: list[Reading], share: dict[str, float]) -> None:
    if not readings:
        return
    at = dt.datetime.fromtimestamp(readings[0].taken_at, tz=dt.UTC)
    EngineSample.objects.bulk_create(
        EngineSample(
            replica_id=r.replica.id,
            taken_at=at,
            healthy=r.healthy,
            running=r.snapshot.running if r.snapshot else 0,
            waiting=r.snapshot.waiting if r.snapshot else 0,
            gateway_waiting=share[r.replica.name],
            kv_usage=r.snapshot.kv_usage if r.snapshot else None,
            generation_tps=r.rates.generation_tokens_per_s if r.rates else None,
            prompt_tps=r.rates.prompt_tokens_per_s if r.rates else None,
            prefix_hit_rate=r.rates.prefix_cache_hit_rate if r.rates else None,
            **(r.gpu.sample_fields() if r.gpu else {}),
        )
        for r in readings
    )


async def latest_readings() -> list[dict[str, Any]]:
    """What the last poll saw of every replica, for the pages and the API."""
    raw = await redis_async().hgetall(keyspace.TELEMETRY_LATEST)
    return sorted((json.loads(v) for v in raw.values()), key=lambda r: r["name"])


def compact_samples(now: dt.datetime, raw_for: dt.timedelta, keep_for: dt.timedelta, bucket: int = 60) -> int:
    """Average raw samples older than `raw_for` into `bucket`-second rows; delete rows older
    than `keep_for`. Returns the rows removed. Keeps a day of charts small in the DB."""
    EngineSample.objects.filter(taken_at__lt=now - keep_for).delete()
    old = EngineSample.objects.filter(resolution_seconds=0, taken_at__lt=now - raw_for)
    groups: dict[tuple[int, int], list[EngineSample]] = defaultdict(list)
    for sample in old.only("replica_id", "taken_at", "healthy"):
        groups[(sample.replica_id, int(sample.taken_at.timestamp()) // bucket)].append(sample)
    removed = 0
    for (replica_id, slot), members in groups.items():
        ids = [m.pk for m in members]
        averages = EngineSample.objects.filter(pk__in=ids).aggregate(
            running=Avg("running"), waiting=Avg("waiting"), gateway_waiting=Avg("gateway_waiting"),
            kv_usage=Avg("kv_usage"), generation_tps=Avg("generation_tps"), prompt_tps=Avg("prompt_tps"),
            prefix_hit_rate=Avg("prefix_hit_rate"), gpu_util=Avg("gpu_util"),
            gpu_mem_used_mib=Avg("gpu_mem_used_mib"), gpu_mem_total_mib=Avg("gpu_mem_total_mib"),
            gpu_power_w=Avg("gpu_power_w"), gpu_temp_c=Avg("gpu_temp_c"), gpu_count=Max("gpu_count"),
        )
        EngineSample.objects.create(
            replica_id=replica_id,
            taken_at=dt.datetime.fromtimestamp(slot * bucket, tz=dt.UTC),
            resolution_seconds=bucket,
            healthy=all(m.healthy for m in members),
            **averages,
        )
        removed += EngineSample.objects.filter(pk__in=ids).delete()[0]
    return removed
