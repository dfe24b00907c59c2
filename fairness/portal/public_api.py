"""The JSON API (django-ninja), documented at /api/docs. Public: capacity, replicas, alerts."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Literal

from asgiref.sync import sync_to_async
from django.utils import timezone
from ninja import NinjaAPI, Router, Schema

from fairness.models import EngineSample, SaturationAlert, Tier
from fairness.portal.admin_api import router as admin_router
from fairness.telemetry import capacity_store, polling
from fairness.telemetry.capacity_model import USER_COUNTS, public_sentence

api = NinjaAPI(title="gpuportal", version="1", description="Capacity, replicas and alerts of a shared LLM endpoint.")
public = Router(tags=["public"])


class PerUser(Schema):
    users: int
    tokens_per_second: float


class ModelCapacity(Schema):
    model: str
    sentence: str
    total_tokens_per_second: float | None
    per_user: list[PerUser]
    basis: str | None
    samples: int


class ReplicaOut(Schema):
    name: str
    model: str
    healthy: bool
    running: float | None
    waiting: float | None
    kv_usage: float | None
    generation_tps: float | None
    prefix_hit_rate: float | None
    max_num_seqs: int
    polled_at: dt.datetime


class TierOut(Schema):
    name: str
    description: str
    policy: str


class AlertOut(Schema):
    model: str
    kind: str
    opened_at: dt.datetime
    resolved_at: dt.datetime | None
    summary: str


class Totals(Schema):
    running: float
    waiting_engine: float
    waiting_gateway: float
    replicas: int
    replicas_healthy: int
    generation_tps: float


class CapacityOut(Schema):
    models: list[ModelCapacity]
    totals: Totals
    replicas: list[ReplicaOut]
    tiers: list[TierOut]
    alerts: list[AlertOut]
    updated_at: dt.datetime


class SeriesOut(Schema):
    window: str
    t: list[dt.datetime]
    running: list[float]
    waiting: list[float]
    generation_tps: list[float]


def _replica(row: dict) -> ReplicaOut:
    return ReplicaOut(polled_at=dt.datetime.fromtimestamp(row["taken_at"], tz=dt.UTC), **{
        k: row[k] for k in ("name", "model", "healthy", "running", "waiting", "kv_usage", "generation_tps",
                            "prefix_hit_rate", "max_num_seqs")
    })


def _alert(alert: SaturationAlert) -> AlertOut:
    return AlertOut(model=alert.model, kind=alert.kind, opened_at=alert.opened_at,
                    resolved_at=alert.resolved_at, summary=alert.describe())


def _open_alerts() -> list[AlertOut]:
    # Dropped usage events are the operators' business, not the endpoint's capacity.
    alerts = SaturationAlert.objects.filter(resolved_at=None).exclude(kind=SaturationAlert.Kind.USAGE)
    return [_alert(a) for a in alerts]


def _tiers() -> list[TierOut]:
    return [TierOut(name=t.name, description=t.description, policy=t.policy_sentence()) for t in Tier.objects.all()]


@public.get("/capacity", response=CapacityOut, summary="What the endpoint serves now, and what to expect")
async def capacity(request):
    estimates = await capacity_store.read_estimates()
    rows = await polling.latest_readings()
    models = []
    for model, estimate in sorted(estimates.items()):
        models.append(ModelCapacity(
            model=model,
            sentence=public_sentence(estimate),
            total_tokens_per_second=estimate.total_tokens_per_second if estimate else None,
            per_user=(
                [PerUser(users=n, tokens_per_second=estimate.per_user(n)) for n in USER_COUNTS] if estimate else []
            ),
            basis=estimate.basis if estimate else None,
            samples=estimate.samples if estimate else 0,
        ))
    healthy = [r for r in rows if r["healthy"]]
    totals = Totals(
        running=sum(r["running"] or 0 for r in healthy),
        waiting_engine=sum(r["waiting"] or 0 for r in healthy),
        waiting_gateway=sum(r["gateway_waiting"] or 0 for r in rows),
        replicas=len(rows),
        replicas_healthy=len(healthy),
        generation_tps=sum(r["generation_tps"] or 0 for r in healthy),
    )
    return CapacityOut(
        models=models, totals=totals, replicas=[_replica(r) for r in rows],
        tiers=await sync_to_async(_tiers)(), alerts=await sync_to_async(_open_alerts)(), updated_at=timezone.now(),
    )


@public.get("/capacity/series", response=SeriesOut, summary="Queue depth and throughput over time, all replicas")
async def series(request, window: Literal["hour", "day"] = "hour"):
    return await sync_to_async(_series)(window)


def _series(window: str) -> SeriesOut:
    span, bucket = (dt.timedelta(hours=1), 10) if window == "hour" else (dt.timedelta(days=1), 300)
    since = timezone.now() - span
    # Sum over replicas within a poll, then average the polls within a bucket.
    polls: dict[dt.datetime, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    rows = EngineSample.objects.filter(taken_at__gte=since).values_list(
        "taken_at", "running", "waiting", "gateway_waiting", "generation_tps"
    )
    for taken_at, running, waiting, gateway_waiting, tps in rows:
        totals = polls[taken_at]
        totals[0] += running
        totals[1] += waiting + gateway_waiting
        totals[2] += tps or 0.0
    buckets: dict[int, list[list[float]]] = defaultdict(list)
    for taken_at, totals in polls.items():
        buckets[int(taken_at.timestamp()) // bucket].append(totals)
    out = SeriesOut(window=window, t=[], running=[], waiting=[], generation_tps=[])
    for slot in sorted(buckets):
        members = buckets[slot]
        out.t.append(dt.datetime.fromtimestamp(slot * bucket, tz=dt.UTC))
        for index, name in enumerate(("running", "waiting", "generation_tps")):
            getattr(out, name).append(round(sum(m[index] for m in members) / len(members), 3))
    return out


@public.get("/replicas", response=list[ReplicaOut], summary="Every replica as of the last poll")
async def replicas(request):
    return [_replica(r) for r in await polling.latest_readings()]


@public.get("/alerts", response=list[AlertOut], summary="Saturation alerts open now, and those of the last day")
async def alerts(request):
    def recent() -> list[AlertOut]:
        since = timezone.now() - dt.timedelta(days=1)
        rows = SaturationAlert.objects.filter(resolved_at=None) | SaturationAlert.objects.filter(resolved_at__gte=since)
        rows = rows.exclude(kind=SaturationAlert.Kind.USAGE)
        return [_alert(a) for a in rows.order_by("-opened_at")[:50]]

    return await sync_to_async(recent)()


api.add_router("/", public)
api.add_router("/admin", admin_router)
