"""Alerts in words and figures for people: "KV cache 96% full", never kv_usage 0.9644….

The pages, the webhook and the admin mail all say an alert the same way. `public` leaves out the
keys (the capacity page shows the endpoint, never who uses it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def count(n: float) -> str:
    """Whole numbers with separators; a fraction (an average) to one place."""
    return f"{round(n):,}" if abs(n - round(n)) < 0.05 else f"{n:,.1f}"


def percent(fraction: float | None) -> str:
    return "unknown" if fraction is None else f"{100 * fraction:.0f}%"


def requests(n: float) -> str:
    return "1 request" if round(n) == 1 else f"{count(n)} requests"


def tiers_waiting(by_tier: Mapping[str, float]) -> str:
    """{"batch": 60, "interactive": 3} -> "batch 60, interactive 3" (largest first)."""
    ordered = sorted(((n, t) for t, n in by_tier.items() if n > 0), key=lambda p: (-p[0], p[1]))
    return ", ".join(f"{tier} {count(n)}" for n, tier in ordered)


def describe(kind: str, figures: Mapping[str, Any], *, public: bool = True) -> str:
    """One alert (kind and figures of a SaturationAlert row) in plain sentences. An open
    alert's figures carry "now", updated at every poll; the rest are its peak."""
    now = figures.get("now") or figures
    if kind == "queue":
        text = (
            f"{requests(now.get('waiting', 0))} waiting for {count(now.get('running', 0))} running, "
            "and every slot of the replicas taking new work is busy: the card is saturated."
        )
        by_tier = now.get("waiting_by_tier") or {}
        if by_tier:
            text += f" Waiting by tier: {tiers_waiting(by_tier)}."
        people = now.get("waiting_people") or {}
        if people and not public:
            named = ", ".join(f"{k}: {count(n)}" for k, n in sorted(people.items(), key=lambda p: -p[1])[:10])
            text += f" Who waits: {named}."
        keys = now.get("waiting_keys") or {}  # alerts recorded before people were counted
        if keys and not people and not public:
            named = ", ".join(f"{k} ({count(n)})" for k, n in sorted(keys.items(), key=lambda p: -p[1])[:10])
            text += f" Keys waiting: {named}."
        peak = figures.get("waiting")
        if figures.get("now") and peak is not None and peak > now.get("waiting", 0):
            text += f" At its worst {requests(peak)} waited."
        return text + (" Fairness only rations a shortage; adding capacity or capping demand is the "
                       "decision to make.")
    if kind == "kv":
        return (
            f"KV cache {percent(now.get('kv_usage'))} full (the engine's memory for the text it is "
            "working on) for a sustained period: longer requests are paused or turned away until "
            "it frees up."
        )
    if kind == "usage":
        return (
            f"{count(figures.get('dropped', 0))} usage events dropped: the queue the Celery worker "
            f"drains reached its cap ({count(figures.get('backlog_max', 0))}). Is the worker "
            "running? The usage pages miss those requests."
        )
    return "An alert of a kind this version does not know."
