"""Saturation alerts: feed each model's demand to its detector, open and resolve alert rows,
and tell people (the pages read the rows; a webhook and admin email are optional). Dropped usage
events raise an alert of the same kind of row, told the same way."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import mail_admins

from fairness.accounting import usage
from fairness.gateway import engine_client
from fairness.models import SaturationAlert
from fairness.scheduling.admission import admission_stats
from fairness.scheduling.live_counts import Stats
from fairness.scheduling.units import parse_unit
from fairness.store import keyspace
from fairness.store.redis_clients import redis_async
from fairness.telemetry import alert_words, queue_state
from fairness.telemetry.polling import Reading
from fairness.telemetry.saturation import KINDS, SaturationDetector, Transition

log = logging.getLogger(__name__)


def detector_settings() -> dict[str, float]:
    return {
        "k": settings.GP_SATURATION_RATIO,
        "window_seconds": settings.GP_SATURATION_WINDOW_SECONDS,
        "kv_threshold": settings.GP_KV_ALERT_THRESHOLD,
        "kv_window_seconds": settings.GP_KV_ALERT_WINDOW_SECONDS,
        "resolve_window_seconds": settings.GP_ALERT_RESOLVE_SECONDS,
        "max_gap_seconds": max(6.0, 3 * settings.GP_POLL_SECONDS),
    }


async def observe(readings: list[Reading], gateway_queued: dict[str, float], now: float) -> list[Transition]:
    """One poll's worth of demand per model; returns the alerts opened or resolved by it. The
    queue alert needs the serving slots full (admission's live counts): a backlog beside free
    slots is held by its tier's caps, and more capacity would not shorten it."""
    demand: dict[str, dict[str, float]] = defaultdict(lambda: {"waiting": 0.0, "running": 0.0, "kv": -1.0})
    replicas: dict[str, list[str]] = defaultdict(list)
    for reading in readings:
        replicas[reading.replica.model].append(reading.replica.name)
        if reading.snapshot is None:
            continue
        figures = demand[reading.replica.model]
        # Requests the engine defers for other reasons (grammar compilation, KV transfer) are no
        # sign of too little capacity; engines that tell them apart say which wait for room.
        capacity = reading.snapshot.waiting_capacity
        figures["waiting"] += reading.snapshot.waiting if capacity is None else capacity
        figures["running"] += reading.snapshot.running
        if reading.snapshot.kv_usage is not None:  # one full replica is enough to flag
            figures["kv"] = max(figures["kv"], reading.snapshot.kv_usage)
    client = redis_async()
    stats = await admission_stats(client)
    who = await sync_to_async(_who_waits)(stats)
    changes = []
    for model, figures in demand.items():
        raw = await client.get(keyspace.saturation_state(model))
        detector = _restore(raw)
        waiting = figures["waiting"] + gateway_queued.get(model, 0.0)
        kv = figures["kv"] if figures["kv"] >= 0 else None
        # An engine's own queue means its slots are full, whatever admission counts (someone
        # reaches it directly, or it runs fewer sequences than its max_num_seqs says).
        free = 0 if figures["waiting"] > 0 else queue_state.free_slots(stats, replicas[model])
        current = {"waiting": waiting, "running": figures["running"], "kv_usage": kv, "free_slots": free, **who}
        for transition in detector.observe(now, waiting, figures["running"], kv, free_slots=free):
            await sync_to_async(_record)(model, transition, current)
            await notify(model, transition, current)
            changes.append(transition)
        open_kinds = [kind for kind in KINDS if detector.is_open(kind)]
        if open_kinds:  # an open alert's figures follow the queue until it resolves
            await sync_to_async(_update_open)(model, open_kinds, current)
        await client.set(keyspace.saturation_state(model), json.dumps(detector.to_state()))
    return changes


def _who_waits(stats: Stats) -> dict[str, dict[str, int]]:
    """Requests waiting per tier, and per person and tier (the staff pages name them)."""
    waiting: dict[tuple[int, str], int] = {}
    for unit, figures in stats["keys"].items():
        person = parse_unit(unit)
        if person is not None and figures["queued"] > 0:
            waiting[person] = figures["queued"]
    names = dict(get_user_model().objects.filter(pk__in={p for p, _ in waiting}).values_list("pk", "username"))
    return {
        "waiting_by_tier": {tier: t["queued"] for tier, t in stats["tiers"].items() if t["queued"] > 0},
        "waiting_people": {f"{names[p]} ({tier})": n for (p, tier), n in waiting.items() if p in names},
    }


def _restore(raw: bytes | str | None) -> SaturationDetector:
    if raw:
        try:
            return SaturationDetector.from_state(json.loads(raw), **detector_settings())
        except ValueError:
            log.warning("unreadable saturation state; starting afresh")
    return SaturationDetector(**detector_settings())


def _peak(transition: Transition) -> dict[str, Any]:
    return {
        "waiting": transition.peak.waiting,
        "running": transition.peak.running,
        "ratio": round(transition.peak.ratio, 2),
        "kv_usage": transition.peak.kv_usage,
    }


def _record(model: str, transition: Transition, current: dict[str, Any]) -> None:
    at = dt.datetime.fromtimestamp(transition.at, tz=dt.UTC)
    figures = {**_peak(transition), "now": current}
    if transition.event == "opened":
        SaturationAlert.objects.create(model=model, kind=transition.kind, opened_at=at, figures=figures)
    else:
        SaturationAlert.objects.filter(model=model, kind=transition.kind, resolved_at=None).update(
            resolved_at=at, figures=figures
        )


def _update_open(model: str, kinds: Sequence[str], current: dict[str, Any]) -> None:
    for alert in SaturationAlert.objects.filter(model=model, kind__in=kinds, resolved_at=None):
        figures = dict(alert.figures or {})
        figures["now"] = current
        # The peak grows with the episode; "now" is what the pages quote first.
        figures["waiting"] = max(float(figures.get("waiting", 0)), current["waiting"])
        alert.figures = figures
        alert.save(update_fields=["figures"])


async def notify(model: str, transition: Transition, current: dict[str, Any] | None = None) -> None:
    figures = {**_peak(transition), "now": current} if current else _peak(transition)
    event = "opened" if transition.event == "opened" else "resolved"
    message = f"gpuportal: {model}: {transition.kind} alert {event}. " + alert_words.describe(
        transition.kind, figures, public=False
    )
    payload = {
        "event": transition.event, "model": model, "kind": transition.kind, "at": transition.at,
        "waiting": transition.peak.waiting, "running": transition.peak.running,
        "kv_usage": transition.peak.kv_usage, "text": message,
    }
    await _deliver(message, payload)


async def _deliver(message: str, payload: dict[str, Any]) -> None:
    await deliver_webhook(payload)
    if settings.ADMINS:
        await sync_to_async(mail_admins)(message, message, fail_silently=True)


async def deliver_webhook(payload: dict[str, Any]) -> None:
    """POST `payload` to GP_ALERT_WEBHOOK_URL, if set; a failure is logged, never raised."""
    if settings.GP_ALERT_WEBHOOK_URL:
        try:
            await engine_client.post_json(settings.GP_ALERT_WEBHOOK_URL, payload, timeout=5.0)
        except httpx.HTTPError as exc:
            # The URL is a credential (Slack's and Discord's carry their secret in the path),
            # and httpx puts it in its messages: name the host and what went wrong, no more.
            host = httpx.URL(settings.GP_ALERT_WEBHOOK_URL).host
            failure = (f"HTTP {exc.response.status_code}" if isinstance(exc, httpx.HTTPStatusError)
                       else type(exc).__name__)
            log.warning("alert webhook to %s failed: %s", host, failure)


# -- dropped usage events -------------------------------------------------------------------------

USAGE_ALERT_MODEL = "gateway"  # the row's model: the alert is about the gateway, not an engine


async def observe_usage_drops(now: float) -> str | None:
    """Open an alert as soon as usage events have been dropped since the last check (any loss is
    worth telling), add later drops to it, and resolve it after GP_ALERT_RESOLVE_SECONDS without
    one. Returns "opened", "resolved" or None. Runs with each poll, so drops made while no worker
    ran are reported by the first poll of the next one."""
    client = redis_async()
    backlog = await usage.read_backlog(client)
    raw = await client.get(keyspace.USAGE_DROPS_SEEN)
    state = json.loads(raw) if raw else {}
    seen = min(int(state.get("seen", 0)), backlog.dropped)  # the count restarts with Redis
    last_drop_at = state.get("last_drop_at")
    event: str | None = None
    if backlog.dropped > seen:
        last_drop_at = now
        event = await sync_to_async(_record_drops)(now, backlog.dropped - seen)
    elif last_drop_at is not None and now - last_drop_at >= settings.GP_ALERT_RESOLVE_SECONDS:
        last_drop_at = None
        event = await sync_to_async(_resolve_drops)(now)
    await client.set(keyspace.USAGE_DROPS_SEEN, json.dumps({"seen": backlog.dropped, "last_drop_at": last_drop_at}))
    if event is not None:
        message = (
            f"gpuportal: usage events dropped ({backlog.dropped} since Redis started): the usage "
            f"queue reached GP_USAGE_BACKLOG_MAX ({settings.GP_USAGE_BACKLOG_MAX}); is the Celery worker running?"
            if event == "opened" else
            f"gpuportal: usage events no longer dropped ({backlog.dropped} since Redis started)"
        )
        payload = {"event": event, "model": USAGE_ALERT_MODEL, "kind": SaturationAlert.Kind.USAGE.value,
                   "at": now, "dropped": backlog.dropped, "queued": backlog.queued, "text": message}
        await _deliver(message, payload)
    return event


def _record_drops(now: float, dropped: int) -> str | None:
    open_alert = SaturationAlert.objects.filter(
        model=USAGE_ALERT_MODEL, kind=SaturationAlert.Kind.USAGE, resolved_at=None
    ).first()
    if open_alert is None:
        SaturationAlert.objects.create(
            model=USAGE_ALERT_MODEL, kind=SaturationAlert.Kind.USAGE,
            opened_at=dt.datetime.fromtimestamp(now, tz=dt.UTC),
            figures={"dropped": dropped, "backlog_max": settings.GP_USAGE_BACKLOG_MAX},
        )
        return "opened"
    open_alert.figures = {**open_alert.figures, "dropped": open_alert.figures.get("dropped", 0) + dropped}
    open_alert.save(update_fields=["figures"])
    return None


def _resolve_drops(now: float) -> str | None:
    resolved = SaturationAlert.objects.filter(
        model=USAGE_ALERT_MODEL, kind=SaturationAlert.Kind.USAGE, resolved_at=None
    ).update(resolved_at=dt.datetime.fromtimestamp(now, tz=dt.UTC))
    return "resolved" if resolved else None
