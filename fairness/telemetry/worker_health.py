"""The workers' own health, for the staff home's "Background work": does beat still start the
periodic tasks, does a batch worker take the batches that wait, does the usage flush keep up.

Each finding is ok, not seen yet, or a problem, in words that say what to do. The readings are
cheap (one Redis hash, the head of the usage list, one aggregate over unfinished batches), and
the judgement is a pure function of them and the clock, so tests age heartbeats without sleeping.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import redis.asyncio
from django.conf import settings
from django.db.models import Count, Max, Min

from fairness.accounting import usage
from fairness.models import Batch
from fairness.store import heartbeats, keyspace

# "Has not run a task for a minute": long enough that a worker busy with one slow poll is not
# called dead, short enough that staff hear of it before anyone's usage or batch is an hour late.
STALE_SECONDS = 60.0
# The usage flush runs every couple of seconds: an event a minute old means it is not keeping up.
USAGE_BEHIND_SECONDS = 60.0
# A fresh install has seen no worker yet: no alarm until this process has been up for a minute.
STARTED_AT = time.time()

State = Literal["ok", "waiting", "problem"]


@dataclass(frozen=True)
class Finding:
    topic: str
    state: State
    words: str

    @property
    def problem(self) -> bool:
        return self.state == "problem"


@dataclass(frozen=True)
class Readings:
    heartbeats: dict[str, float]  # worker -> when it last started a task
    batches_waiting: int  # unfinished batches
    oldest_batch_at: float | None  # when the oldest of them was created
    runner_seen_at: float | None  # the latest claim a batch runner renewed on one of them
    backlog: usage.Backlog  # what /metrics exports as gpuportal_usage_backlog
    oldest_usage_at: float | None  # when the oldest unflushed usage event was pushed, about


async def read(client: redis.asyncio.Redis) -> Readings:
    seen = await heartbeats.read(client)
    backlog = await usage.read_backlog(client)
    head = await client.lindex(keyspace.USAGE_EVENTS, 0) if backlog.queued else None
    batches = await Batch.objects.unfinished().aaggregate(
        n=Count("pk"), oldest=Min("created_at"), seen=Max("runner_seen_at"))
    return Readings(seen, batches["n"], _epoch(batches["oldest"]), _epoch(batches["seen"]), backlog,
                    _pushed_at(head))


async def findings(client: redis.asyncio.Redis, clock: Callable[[], float] = time.time,
                   started: float = STARTED_AT) -> list[Finding]:
    readings = await read(client)
    return assess(readings, clock(), started)


def assess(r: Readings, now: float, started: float) -> list[Finding]:
    return [_periodic(r, now, started), _batches(r, now, started), _usage_flush(r, now)]


def _periodic(r: Readings, now: float, started: float) -> Finding:
    topic = "Periodic tasks"
    every = settings.GP_POLL_SECONDS
    stale = max(STALE_SECONDS, 3 * every)
    seen = r.heartbeats.get(heartbeats.PERIODIC)
    fix = ("Start Celery beat and a worker (celery -A gpuportal beat, celery -A gpuportal worker), "
           "or read their logs if they run.")
    if seen is None:
        if now - started < stale:
            return Finding(topic, "waiting", f"Not seen yet: the first is due within {_span(stale)} "
                                             "of the worker starting.")
        return Finding(topic, "problem", f"No periodic task has been seen running in the {_span(now - started)} "
                       "this portal has been up: the engines are not polled, usage is not written to the "
                       f"database and no batch starts. {fix}")
    if now - seen > stale:
        return Finding(topic, "problem", f"No periodic task has run for {_span(now - seen)} (more than "
                       f"{_span(stale)}; the poll task should run every {every:g} s): Celery beat or its "
                       "worker is not running, so the engines are not polled, usage is not written to the "
                       f"database and no batch starts. {fix}")
    return Finding(topic, "ok", f"Running: the last one started {_span(now - seen)} ago.")


def _batches(r: Readings, now: float, started: float) -> Finding:
    topic = "Batch worker"
    stale = max(STALE_SECONDS, 3 * settings.GP_BATCH_POLL_SECONDS)
    # A runner busy with a long slice starts no task, but it renews its batches' claims.
    times = [t for t in (r.heartbeats.get(heartbeats.BATCHES), r.runner_seen_at) if t is not None]
    seen = max(times) if times else None
    if not r.batches_waiting:
        since = f" (one last checked for work {_span(now - seen)} ago)" if seen is not None else ""
        return Finding(topic, "ok", f"No batch waits{since}.")
    waiting = _count(r.batches_waiting, "unfinished batch", "unfinished batches")
    if r.oldest_batch_at is not None:
        the = "the oldest " if r.batches_waiting > 1 else ""
        waiting += f", {the}created {_span(now - r.oldest_batch_at)} ago"
    if seen is not None and now - seen <= stale:
        return Finding(topic, "ok", f"{waiting}; a batch worker checked for work {_span(now - seen)} ago.")
    if seen is None and now - started < stale:
        return Finding(topic, "waiting", f"{waiting}; no batch worker seen yet, one is due within "
                                         f"{_span(stale)} of starting.")
    silent = f"has been seen in the {_span(now - started)} this portal has been up" if seen is None \
        else f"has checked for work for {_span(now - seen)} (more than {_span(stale)})"
    return Finding(topic, "problem", f"{waiting}, and no batch worker {silent}: "
                   "start a worker on the batches queue (celery -A gpuportal worker --queues batches "
                   "--pool solo) or read its log. Without Celery beat (above) it is sent no work either.")


def _usage_flush(r: Readings, now: float) -> Finding:
    topic = "Usage flush"
    queued = r.backlog.queued
    if not queued:
        return Finding(topic, "ok", "Every usage event has been written to the database.")
    cap = settings.GP_USAGE_BACKLOG_MAX
    age = max(0.0, now - r.oldest_usage_at) if r.oldest_usage_at is not None else None
    waiting = _count(queued, "usage event waits", "usage events wait")
    oldest = f", the oldest for {_span(age)}" if age is not None else ""
    if (age is None or age <= USAGE_BEHIND_SECONDS) and queued * 2 < cap:
        return Finding(topic, "ok", f"{waiting} to be written to the database{oldest}: keeping up.")
    dropped = f" {_count(r.backlog.dropped, 'event has', 'events have')} been dropped so far." \
        if r.backlog.dropped else ""
    return Finding(topic, "problem", f"{waiting} to be written to the database{oldest}: behind (the flush "
                   f"keeps every event under {_span(USAGE_BEHIND_SECONDS)} old and fewer than {cap // 2:,}, "
                   "half of GP_USAGE_BACKLOG_MAX, waiting). "
                   "Usage pages and budgets lag until the flush catches up, and past the cap the oldest "
                   "events are dropped. Check that the worker runs (celery -A gpuportal worker) and read its "
                   f"log.{dropped}")


def _pushed_at(raw: bytes | str | None) -> float | None:
    """When an event reached the list, about: it carries its request's start and length."""
    if raw is None:
        return None
    try:
        event = json.loads(raw)
        return float(event["at"]) + float(event.get("latency_ms") or 0) / 1000
    except (ValueError, TypeError, KeyError):
        return None  # the flush sets such an event aside; its age is unknown, not an alarm


def _epoch(moment: dt.datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def _count(n: int, one: str, many: str) -> str:
    return f"1 {one}" if n == 1 else f"{n:,} {many}"


def _span(seconds: float) -> str:
    """45 -> "45 s", 150 -> "2 min", 7500 -> "2 h 5 min", 200000 -> "2 days"."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min"
    if whole < 172800:
        hours, rest = divmod(whole // 60, 60)
        return f"{hours} h" + (f" {rest} min" if rest else "")
    return f"{whole // 86400} days"
