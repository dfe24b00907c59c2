"""The staff home, /staff/: what needs attention now, each item linked to the page that handles it."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from fairness.portal.pages.common import staff_required
from fairness.portal.reports.budgets import near_limit
from fairness.portal.reports.queries import attention
from fairness.portal.signed_in import SignedInRequest
from fairness.scheduling.admission import admission_stats
from fairness.scheduling.live_counts import Stats
from fairness.store.redis_clients import redis_async
from fairness.telemetry import polling, worker_health


@async_to_sync
async def _live() -> tuple[list[dict[str, Any]], Stats, list[worker_health.Finding]]:
    # One trip into async for all three: the readings, admission's counts and the workers'
    # heartbeats live in Redis.
    client = redis_async()
    return await polling.latest_readings(), await admission_stats(client), await worker_health.findings(client)


@staff_required
@require_safe
def home(request: SignedInRequest) -> HttpResponse:
    readings, stats, background = _live()
    now = timezone.now()
    return render(request, "staff/home.html", {
        "attention": attention(now, {r["name"]: r for r in readings}, stats),
        "now": now,
        "budgets_near": near_limit(now.timestamp()),
        "background": background,
        "background_problems": any(f.problem for f in background),
    })
