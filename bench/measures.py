"""Measures over recorded calls: percentiles, Jain's index per window, concurrency peaks.

Jain's index of per-client service ``x`` is ``(Σx)² / (n·Σx²)``: 1 when everyone got the same,
1/n when one client got everything. It is computed per window over the clients that were
backlogged in it (had a request outstanding at some point of the window), with service = tokens
received in the window. A backlogged client that received nothing in a window is a starved window.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

from bench.load import Call


class Summary(TypedDict):
    n: int
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None
    mean: float | None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no data."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary(values: Iterable[float]) -> Summary:
    data = list(values)
    return {
        "n": len(data),
        "p50": percentile(data, 50),
        "p95": percentile(data, 95),
        "p99": percentile(data, 99),
        "max": max(data) if data else None,
        "mean": sum(data) / len(data) if data else None,
    }


def jain(service: Sequence[float]) -> float | None:
    if not service:
        return None
    total, squares = sum(service), sum(x * x for x in service)
    if squares == 0:
        return None  # nobody got anything: equal, but not service; leave it out
    return total * total / (len(service) * squares)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _outstanding(call: Call, a: float, b: float) -> bool:
    end = call.done_at if call.done_at is not None else math.inf
    return call.sent < b and end > a


def window_service(calls: Sequence[Call], start: float, end: float, width: float,
                   clients: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Per window of ``width`` seconds in [start, end): tokens per backlogged client, Jain's
    index over them, and which backlogged clients got nothing. Needs ``token_times``."""
    by_client: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        by_client[call.client].append(call)
    names = list(clients) if clients is not None else sorted(by_client)
    times = {name: sorted(t for c in by_client[name] for t in c.token_times) for name in names}
    rows = []
    a = start
    while a + width <= end + 1e-9:
        b = a + width
        service: dict[str, int] = {}
        for name in names:
            if any(_outstanding(c, a, b) for c in by_client[name]):
                ts = times[name]
                service[name] = bisect.bisect_left(ts, b) - bisect.bisect_left(ts, a)
        rows.append({
            "t0": a - start, "t1": b - start, "service": service,
            "jain": jain(list(service.values())),
            "starved": sorted(name for name, x in service.items() if x == 0),
        })
        a = b
    return rows


def jain_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    values = [r["jain"] for r in rows if r["jain"] is not None and len(r["service"]) >= 2]
    starved = sum(1 for r in rows if r["starved"])
    return {
        "windows": len(values),
        "mean": sum(values) / len(values) if values else None,
        "min": min(values) if values else None,
        "p5": percentile(values, 5),
        "windows_with_a_starved_client": starved,
    }


def peak_concurrency(intervals: Iterable[tuple[float, float]]) -> int:
    """The largest number of [begin, end) intervals open at once."""
    events = []
    for begin, end in intervals:
        events.append((begin, 1))
        events.append((end, -1))
    events.sort(key=lambda e: (e[0], e[1]))  # an end at t closes before a begin at t opens
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def peaks_by_client(calls: Sequence[Call], begin: str, horizon: float) -> dict[str, int]:
    """Peak concurrency per client, each call counted from its ``begin`` attribute
    ("headers_at": admitted by the gateway; "first_token_at": generating) to its end (or
    ``horizon`` for a call cut off)."""
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for call in calls:
        t0 = getattr(call, begin)
        if t0 is None:
            continue
        spans[call.client].append((t0, call.done_at if call.done_at is not None else horizon))
    return {name: peak_concurrency(s) for name, s in sorted(spans.items())}


def tokens_between(calls: Iterable[Call], a: float, b: float) -> int:
    """Tokens received in [a, b) (from ``token_times``)."""
    return sum(bisect.bisect_left(c.token_times, b) - bisect.bisect_left(c.token_times, a)
               for c in calls)


def rate_series(calls: Sequence[Call], start: float, end: float, width: float) -> list[float]:
    """Tokens per second received in consecutive windows of ``width`` from ``start``."""
    out = []
    a = start
    while a + width <= end + 1e-9:
        out.append(tokens_between(calls, a, a + width) / width)
        a += width
    return out
