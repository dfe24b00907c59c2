"""A signed-in person's own pages: their keys (prefixes only), their usage, their tier's policy."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from fairness.accounting import usage_rollup
from fairness.accounting.key_expiry import session_key_prefixes
from fairness.actions import lab_managers
from fairness.models import ApiKey, Tier, UsageHourly
from fairness.portal.reports import tier_policy, usage_units
from fairness.portal.reports.budgets import lines_for_user
from fairness.portal.reports.fair_share import standing_of
from fairness.portal.reports.fair_share_words import half_life_in_words
from fairness.portal.reports.queries import EXPIRING_WITHIN, key_load, load_of_key, tokens_last_day
from fairness.portal.signed_in import SignedInRequest
from fairness.telemetry import latency

if TYPE_CHECKING:
    from django.contrib.auth.models import User

USAGE_DAYS = 30
# A person's own traffic is sparse: a day holds enough answered requests for a percentile.
TTFT_WINDOW = dt.timedelta(hours=24)


def home(request: HttpRequest) -> HttpResponse:
    """The public capacity page for visitors; one's own dashboard once signed in."""
    return redirect("me" if request.user.is_authenticated else "capacity")


def _get_keys_for_user(user: User) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(owner=user).select_related("tier")


def _get_usage_for_user(user: User, days: int = USAGE_DAYS) -> QuerySet[UsageHourly]:
    since = _today() - dt.timedelta(days=days - 1)
    return UsageHourly.objects.filter(person=user, hour__gte=since)


def _today() -> dt.datetime:
    return timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)


@login_required
def dashboard(request: SignedInRequest) -> HttpResponse:
    keys = list(_get_keys_for_user(request.user))
    load, tokens = key_load(), tokens_last_day()
    now = timezone.now()
    rows: list[dict[str, Any]] = [
        {"key": key, "live": key.revoked_at is None and not key.is_expired(now),
         "in_flight": load_of_key(key, load)[0], "queued": load_of_key(key, load)[1],
         "tokens_24h": tokens.get(key.pk, 0)}
        for key in keys
    ]
    soon = now + EXPIRING_WITHIN
    # The playground's keys end with their session by design: nothing to warn of.
    sessions = set(session_key_prefixes().filter(target__in=[key.prefix for key in keys]))
    expiring = [row["key"] for row in rows if row["live"] and row["key"].expires_at and row["key"].expires_at <= soon
                and row["key"].prefix not in sessions]
    live_tiers = Tier.objects.filter(pk__in={row["key"].tier_id for row in rows if row["live"]})
    budgets = lines_for_user(request.user, now.timestamp())
    return render(request, "me/dashboard.html", {
        "rows": rows,
        "expiring": sorted(expiring, key=lambda key: key.expires_at),
        "tiers": [{"tier": t, "sentences": tier_policy.in_words(t)} for t in live_tiers],
        "summary": usage_rollup.summary(_get_usage_for_user(request.user)),
        "days": USAGE_DAYS,
        # Only the user's own figures: the sentences compare their usage with their own share.
        "standings": standing_of(request.user),
        "half_life": half_life_in_words(),
        # Only budgets over the user's own keys; an account's shows only its total.
        "budgets": budgets,
        "budgets_near": [line for line in budgets if line.over_soft_limit],
        "managed": lab_managers.given_accounts(request.user),
    })


@login_required
def usage(request: SignedInRequest) -> HttpResponse:
    keys = list(_get_keys_for_user(request.user))
    ttft = latency.ttft_by_key([k.pk for k in keys], timezone.now() - TTFT_WINDOW)
    days = usage_units.days_of(request.user, USAGE_DAYS)
    return render(request, "me/usage.html", {
        # Raw tokens beside the weighted ones budgets and fair share count for them.
        "unit_days": days, "unit_total": usage_units.total(days), "weights": usage_units.weights(),
        "summary": usage_rollup.summary(_get_usage_for_user(request.user)),
        "today": usage_rollup.summary(_get_usage_for_user(request.user, days=1)),
        "days": USAGE_DAYS,
        "ttft_rows": [
            {"key": k, "requests": t.requests if t else 0,
             "p50": latency.ms_in_words(t.p50_ms if t else None), "p95": latency.ms_in_words(t.p95_ms if t else None)}
            for k in keys if (t := ttft.get(k.pk)) or (k.revoked_at is None and not k.is_expired(timezone.now()))
        ],
    })


@login_required
def usage_daily(request: SignedInRequest) -> JsonResponse:
    """The usage chart's series: every day of the window, zeros included, so gaps show as gaps."""
    by_day = {row["day"].date(): row for row in usage_rollup.per_day(_get_usage_for_user(request.user))}
    first = _today().date() - dt.timedelta(days=USAGE_DAYS - 1)
    days = [first + dt.timedelta(days=n) for n in range(USAGE_DAYS)]
    empty = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
    rows = [by_day.get(day, empty) for day in days]
    return JsonResponse({
        "days": [day.isoformat() for day in days],
        "requests": [row["requests"] for row in rows],
        "prompt_tokens": [row["prompt_tokens"] for row in rows],
        "completion_tokens": [row["completion_tokens"] for row in rows],
    })
