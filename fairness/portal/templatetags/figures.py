"""Numbers as the pages print them; static/js/capacity.js formats the same way after each poll."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template
from django.utils import timezone
from django.utils.timesince import timesince

from fairness.telemetry import alert_words, gpu_metrics

register = template.Library()

NONE = "–"


@register.filter
def rate(value: float | None) -> str:
    """Tokens per second: whole numbers with separators; one decimal below ten, where it matters."""
    if value is None:
        return NONE
    return f"{value:,.0f}" if value >= 10 or value == 0 else f"{value:.1f}"


@register.filter
def count(value: float | None) -> str:
    """A gauge (requests running or waiting): averaged or shared out it can be fractional."""
    if value is None:
        return NONE
    return f"{round(value, 1):g}"


@register.filter
def percent(value: float | None) -> str:
    if value is None:
        return NONE
    return f"{100 * value:.0f}%"


@register.filter
def per_cent(value: float | None) -> str:
    """A figure already in per cent (a GPU's utilisation), where `percent` takes a fraction."""
    if value is None:
        return NONE
    return f"{value:.0f}%"


@register.filter
def gib_of(used_mib: float | None, total_mib: float | None) -> str:
    """GPU memory: "141 of 158 GiB", or "141 GiB" when the total is not known."""
    if used_mib is None:
        return NONE
    if not total_mib:
        return gpu_metrics.gib(used_mib)
    return f"{gpu_metrics.gib(used_mib, unit=False)} of {gpu_metrics.gib(total_mib)}"


@register.filter
def watts(value: float | None) -> str:
    return NONE if value is None else f"{value:,.0f} W"


@register.filter
def celsius(value: float | None) -> str:
    return NONE if value is None else f"{value:.0f} °C"


@register.filter
def whole(value: int | None) -> str:
    """Requests and tokens: whole numbers with separators."""
    if value is None:
        return NONE
    return f"{value:,}"


@register.filter
def wait(ms: int | None) -> str:
    """A queue-wait percentile from the rollup: a bucket's upper bound, so "at most"."""
    if ms is None:
        return NONE
    if ms == 0:
        return "none"
    return f"≤ {ms:,} ms" if ms < 1000 else f"≤ {ms / 1000:g} s"


@register.filter
def ago(moment: dt.datetime | None) -> str:
    """How long ago, to the second while it is recent: a poll 4 s ago and one 50 s ago differ."""
    if moment is None:
        return "never"
    seconds = max(0, int((timezone.now() - moment).total_seconds()))
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    return f"{timesince(moment)} ago"


@register.filter
def alert_in_words(alert: Any) -> str:
    """A SaturationAlert as staff read it: figures for people, the waiting keys named."""
    return alert_words.describe(alert.kind, alert.figures or {}, public=False)
