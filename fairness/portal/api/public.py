"""The JSON API (django-ninja), documented at /api/docs. Public: capacity, replicas, alerts."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import NinjaAPI, Router, Schema
from ninja.errors import AuthenticationError

from fairness.batch import openapi as batch_openapi
from fairness.batch.progress import queued_work
from fairness.gateway import openapi as gateway_openapi
from fairness.gateway.errors import BEARER_CHALLENGE, ApiError
from fairness.models import EngineSample, Replica, SaturationAlert, Tier
from fairness.portal.api.admin.accounts import router as admin_accounts_router
from fairness.portal.api.admin.api import router as admin_router
from fairness.portal.api.admin.budgets import router as admin_budgets_router
from fairness.portal.api.admin.usage import router as admin_usage_router
from fairness.portal.api.me import router as me_router
from fairness.portal.api.my_requests import router as my_requests_router
from fairness.portal.reports import tier_policy
from fairness.scheduling.admission import admission_stats
from fairness.store.redis_clients import redis_async
from fairness.telemetry import alert_words, capacity_store, latency, polling, queue_state
from fairness.telemetry.capacity_model import NO_REPLICA_SERVING, USER_COUNTS, public_sentence
from fairness.telemetry.new_request_waits import TierAsks, new_request_waits


class PortalApi(NinjaAPI):
    """The portal's JSON API, whose document also describes the gateway's /v1/ endpoints: one
    place to read about everything a client can call."""

    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None
    ) -> Any:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        return batch_openapi.merge_into(gateway_openapi.merge_into(schema))


api = PortalApi(
    title="gpuportal API", version="1",
    description="The OpenAI-compatible endpoint (/v1, with an API key), and the capacity, replicas and "
                "alerts of a shared LLM endpoint.",
)
public = Router(tags=["public"])


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    """ninja's 401, naming the scheme the admin API takes (RFC 9110)."""
    response = api.create_response(request, {"detail": str(exc)}, status=exc.status_code)
    response["WWW-Authenticate"] = BEARER_CHALLENGE
    return response


@api.exception_handler(ApiError)
def _openai_shaped(request: HttpRequest, exc: ApiError) -> HttpResponse:
    """/api/me/ refuses a key as /v1/ does: the same OpenAI-shaped body, code and challenge."""
    return exc.response()


TTFT_WINDOW = dt.timedelta(hours=1)
# How fast slots came back lately: long enough to hold several finished requests of a slow tier.
FINISH_WINDOW = dt.timedelta(minutes=10)


class PerUser(Schema):
    users: int
    tokens_per_second: float


class ModelCapacity(Schema):
    model: str
    sentence: str
    serving_replicas: int  # enabled, not draining, not down: what the figures count
    total_tokens_per_second: float | None
    per_user: list[PerUser]
    basis: str | None
    samples: int


class GpuOut(Schema):
    """The replica's GPUs, from its DCGM exporter: one figure for all of them."""

    gpus: int  # how many GPUs the figures cover
    utilization_percent: float | None  # the mean over its GPUs
    memory_used_mib: float | None  # framebuffer, summed over its GPUs
    memory_total_mib: float | None
    power_watts: float | None  # summed
    temperature_c: float | None  # the hottest GPU's


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
    draining: bool
    polled_at: dt.datetime
    gpu: GpuOut | None = None  # null: it names no GPU exporter, or the exporter gave nothing usable


class ModelWaitOut(Schema):
    model: str
    seconds: float | None  # null: beyond the estimator's horizon
    words: str


class TierOut(Schema):
    name: str
    description: str
    policy: str
    policy_sentences: list[str]
    waiting: int  # requests of this tier in the gateway's queue now
    waiting_keys: int  # how many people they come from (admission counts a person's keys together)
    expected_wait_seconds: float | None  # for a new request now (the longest over its models): 0 none, null unknown
    expected_wait: str  # the same in words, per model when it may use several: "none", "about 3 min"
    waits: list[ModelWaitOut]  # per model it may use, from the wait estimate
    ttft_requests: int  # answered requests of the last hour
    ttft_p50_ms: int | None
    ttft_p95_ms: int | None


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
    replicas_serving: int
    generation_tps: float
    free_slots: int | None  # serving slots no request holds; null when no gateway has stated them
    queue_status: str  # "none", "backlog" (held by tier caps beside free slots) or "full"
    queue_note: str


class BatchWorkOut(Schema):
    requests: int  # batch requests waiting to run, or running, in batches that still run
    batches: int  # how many batches they belong to
    sentence: str  # the same in words: "Batch API work queued: 1,200 requests in 3 batches."


class CapacityOut(Schema):
    models: list[ModelCapacity]
    totals: Totals
    batch_work: BatchWorkOut
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


def _replica(row: dict[str, Any], draining: set[str]) -> ReplicaOut:
    return ReplicaOut(polled_at=dt.datetime.fromtimestamp(row["taken_at"], tz=dt.UTC),
                      draining=row["name"] in draining, gpu=row.get("gpu"), **{
        k: row[k] for k in ("name", "model", "healthy", "running", "waiting", "kv_usage", "generation_tps",
                            "prefix_hit_rate", "max_num_seqs")
    })


def _alert(alert: SaturationAlert) -> AlertOut:
    return AlertOut(model=alert.model, kind=alert.kind, opened_at=alert.opened_at,
                    resolved_at=alert.resolved_at, summary=alert_words.describe(alert.kind, alert.figures or {}))


def _open_alerts() -> list[AlertOut]:
    # Dropped usage events are the operators' business, not the endpoint's capacity.
    alerts = SaturationAlert.objects.filter(resolved_at=None).exclude(kind=SaturationAlert.Kind.USAGE)
    return [_alert(a) for a in alerts]


def _draining() -> set[str]:
    return set(Replica.objects.filter(enabled=True, draining=True).values_list("name", flat=True))


def _tier_asks() -> tuple[list[TierAsks], list[str]]:
    """Every tier as a newcomer of it would come, and the models the enabled replicas serve."""
    tiers = [TierAsks(t.name, t.per_key_concurrency, t.head_start_seconds, t.borrow_idle_slots,
                      frozenset(t.allowed_models) if t.allowed_models else None) for t in Tier.objects.all()]
    return tiers, sorted(set(Replica.objects.filter(enabled=True).values_list("model", flat=True)))


def _waits_of(tier: str, waiting: int, waits: dict[tuple[str, str], float | None]) -> list[ModelWaitOut]:
    """The estimator's per-model waits of a tier. A wait of none while the tier has requests
    waiting is said as what it is: they are held by their own people's limits, a newcomer is not."""
    def words(seconds: float | None) -> str:
        said = "over an hour" if seconds is None else queue_state.wait_in_words(seconds)
        return "none for someone with nothing running" if said == "none" and waiting else said

    return [ModelWaitOut(model=model, seconds=seconds, words=words(seconds))
            for (name, model), seconds in sorted(waits.items()) if name == tier]


def _tiers(
    queues: dict[str, queue_state.TierQueue], free: int | None, waits: dict[tuple[str, str], float | None],
) -> list[TierOut]:
    now = timezone.now()
    ttft = latency.ttft_by_tier(now - TTFT_WINDOW)
    finishes = latency.finishes_per_second_by_tier(now - FINISH_WINDOW, now)
    tiers = list(Tier.objects.all())
    heads = {t.name: t.head_start_seconds for t in tiers}
    out = []
    for t in tiers:
        rule = queue_state.TierRule(t.name, t.pool_concurrency, t.borrow_idle_slots, t.head_start_seconds)
        # Held by its own pool cap, it waits for its pool's slots; otherwise for anyone's.
        pool_bound = free is not None and free > 0
        rate = finishes.get(t.name) if pool_bound else sum(finishes.values())
        q = queues.get(t.name)
        per_model = _waits_of(t.name, q.waiting if q else 0, waits)
        if per_model:  # the wait estimate's
            known = [w.seconds for w in per_model if w.seconds is not None]
            wait = max(known) if len(known) == len(per_model) else None
            said = per_model[0].words if len(per_model) == 1 else "; ".join(f"{w.model}: {w.words}" for w in per_model)
        else:  # admission could not be read: the rule of thumb over the live counts
            wait = queue_state.expected_wait(rule, queues, heads, free, settings.GP_RESERVE_SLOTS, rate)
            said = queue_state.wait_in_words(wait)
        lat = ttft.get(t.name)
        sentences = tier_policy.in_words(t)
        out.append(TierOut(
            name=t.name, description=t.description, policy=" ".join(sentences), policy_sentences=sentences,
            waiting=q.waiting if q else 0, waiting_keys=q.keys if q else 0,
            expected_wait_seconds=wait, expected_wait=said, waits=per_model,
            ttft_requests=lat.requests if lat else 0,
            ttft_p50_ms=lat.p50_ms if lat else None, ttft_p95_ms=lat.p95_ms if lat else None,
        ))
    return out


def queue_note(status: str, queues: dict[str, queue_state.TierQueue], free: int | None) -> str:
    """The queue in a sentence: who waits, and whether a full card or their own caps hold them."""
    waiting = [q for q in sorted(queues.values(), key=lambda q: -q.waiting) if q.waiting]
    if status == "none":
        return "Nobody is waiting."
    who = "; ".join(
        f"{q.tier}: {q.waiting:,} {'request' if q.waiting == 1 else 'requests'} from "
        f"{q.keys:,} {'person' if q.keys == 1 else 'people'}" for q in waiting
    )
    if status == "backlog":
        return (f"Waiting behind their own tier's limits, not for a full card ({free} "
                f"{'slot' if free == 1 else 'slots'} free): {who}. More capacity would not shorten this queue.")
    return f"Every slot is busy and requests wait for one: {who}."


@public.get("/capacity", response=CapacityOut, summary="What the endpoint serves now, and what to expect")
async def capacity(request: HttpRequest) -> CapacityOut:
    estimates, serving = await capacity_store.read_published()
    rows = await polling.latest_readings()
    stats = await admission_stats(redis_async())
    models = []
    for model, estimate in sorted(estimates.items()):
        none_serving = serving.get(model, 0) == 0
        models.append(ModelCapacity(
            model=model,
            sentence=NO_REPLICA_SERVING if none_serving else public_sentence(estimate),
            serving_replicas=serving.get(model, 0),
            total_tokens_per_second=estimate.total_tokens_per_second if estimate else None,
            per_user=(
                [PerUser(users=n, tokens_per_second=estimate.per_user(n)) for n in USER_COUNTS] if estimate else []
            ),
            basis=estimate.basis if estimate else None,
            samples=estimate.samples if estimate else 0,
        ))
    queues = queue_state.tier_queues(stats)
    # Every replica admission counts slots on (a draining one has left its groups).
    free = queue_state.free_slots(stats, list(stats["replicas"]))
    waiting_gateway = sum(q.waiting for q in queues.values())
    status = queue_state.status(waiting_gateway, free)
    healthy = [r for r in rows if r["healthy"]]
    draining = await sync_to_async(_draining)()
    totals = Totals(
        running=sum(r["running"] or 0 for r in healthy),
        waiting_engine=sum(r["waiting"] or 0 for r in healthy),
        # Admission's live count, so the total and its split by tier agree.
        waiting_gateway=waiting_gateway,
        replicas=len(rows),
        replicas_healthy=len(healthy),
        replicas_serving=sum(serving.values()),
        generation_tps=sum(r["generation_tps"] or 0 for r in healthy),
        free_slots=free, queue_status=status, queue_note=queue_note(status, queues, free),
    )
    work = await sync_to_async(queued_work)()
    asks, served = await sync_to_async(_tier_asks)()
    waits = await new_request_waits(redis_async(), asks, served)
    return CapacityOut(
        models=models, totals=totals,
        batch_work=BatchWorkOut(requests=work.requests, batches=work.batches, sentence=work.sentence),
        replicas=[_replica(r, draining) for r in rows],
        tiers=await sync_to_async(_tiers)(queues, free, waits), alerts=await sync_to_async(_open_alerts)(),
        updated_at=timezone.now(),
    )


@public.get("/capacity/series", response=SeriesOut, summary="Queue depth and throughput over time, all replicas")
async def series(request: HttpRequest, window: Literal["hour", "day"] = "hour") -> SeriesOut:
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
async def replicas(request: HttpRequest) -> list[ReplicaOut]:
    draining = await sync_to_async(_draining)()
    return [_replica(r, draining) for r in await polling.latest_readings()]


@public.get("/alerts", response=list[AlertOut], summary="Saturation alerts open now, and those of the last day")
async def alerts(request: HttpRequest) -> list[AlertOut]:
    def recent() -> list[AlertOut]:
        since = timezone.now() - dt.timedelta(days=1)
        rows = SaturationAlert.objects.filter(resolved_at=None) | SaturationAlert.objects.filter(resolved_at__gte=since)
        rows = rows.exclude(kind=SaturationAlert.Kind.USAGE)
        return [_alert(a) for a in rows.order_by("-opened_at")[:50]]

    return await sync_to_async(recent)()


api.add_router("/", public)
api.add_router("/admin", admin_router)
api.add_router("/admin", admin_accounts_router)
api.add_router("/admin", admin_usage_router)
api.add_router("/admin", admin_budgets_router)
api.add_router("/me", me_router)
api.add_router("/me", my_requests_router)
