"""Saturation alerts: feed each model's demand to its detector, open and resolve alert rows,
and tell people (the pages read the rows; a webhook and admin email are optional). Dropped usage
events raise an alert of the same kind of row, told the same way."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections import defaultdict

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.mail import mail_admins

from fairness.gateway import engine_client
from fairness.models import SaturationAlert
from fairness.store import keyspace
from fairness.store.redis_clients import redis_async
from fairness.telemetry import usage
from fairness.telemetry.polling import Reading
from fairness.telemetry.saturation import SaturationDetector, Transition

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
    """One poll's worth of demand per model; returns the alerts opened or resolved by it."""
    demand: dict[str, dict[str, float]] = defaultdict(lambda: {"waiting": 0.0, "running": 0.0, "kv": -1.0})
    for reading in readings:
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
    changes = []
    for model, figures in demand.items():
        raw = await client.get(keyspace.saturation_state(model))
        detector = _restore(raw)
        waiting = figures["waiting"] + gateway_queued.get(model, 0.0)
        kv = figures["kv"] if figures["kv"] >= 0 else None
        for transition in detector.observe(now, waiting, figures["running"], kv):
            await sync_to_async(_record)(model, transition)
            await notify(model, transition)
            changes.append(transition)
        await client.set(keyspace.saturation_state(model), json.dumps(detector.to_state()))
    return changes


def _restore(raw: bytes | str | None) -> SaturationDetector:
    if raw:
        try:
            return SaturationDetector.from_state(json.loads(raw), **detector_settings())
        except ValueError:
            log.warning("unreadable saturation state; starting afresh")
    return SaturationDetector(**detector_settings())


def _record(model: str, transition: Transition) -> None:
    at = dt.datetime.fromtimestamp(transition.at, tz=dt.UTC)
    figures = {
        "waiting": transition.peak.waiting,
        "running": transition.peak.running,
        "ratio": round(transition.peak.ratio, 2),
        "kv_usage": transition.peak.kv_usage,
    }
    if transition.event == "opened":
        SaturationAlert.objects.create(model=model, kind=transition.kind, opened_at=at, figures=figures)
    else:
        SaturationAlert.objects.filter(model=model, kind=transition.kind, resolved_at=None).update(
            resolved_at=at, figures=figures
        )


async def notify(model: str, transition: Transition) -> None:
    message = (
        f"gpuportal: {model} {transition.kind} saturation {transition.event} "
        f"(waiting {transition.peak.waiting:g}, running {transition.peak.running:g})"
    )
    payload = {
        "event": transition.event, "model": model, "kind": transition.kind, "at": transition.at,
        "waiting": transition.peak.waiting, "running": transition.peak.running,
        "kv_usage": transition.peak.kv_usage, "text": message,
    }
    await _deliver(message, payload)


async def _deliver(message: str, payload: dict) -> None:
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
    if settings.ADMINS:
        await sync_to_async(mail_admins)(message, message, fail_silently=True)


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
