"""The gateway's queue now, told apart: a full card (more capacity would help) or a policy
backlog (requests held by their own tier's caps beside free slots), and what a new request of
each tier should expect to wait.

Pure functions over admission's live stats; no Django, so the tests feed them figures directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from fairness.scheduling.live_counts import Stats
from fairness.scheduling.units import parse_unit

Status = Literal["none", "backlog", "full"]


@dataclass(frozen=True)
class TierQueue:
    tier: str
    waiting: int
    keys: int  # keys with at least one request waiting
    running: int
    borrowed: int  # of `running`, slots borrowed beyond the tier's caps


@dataclass(frozen=True)
class TierRule:
    """What expected_wait needs of a tier's policy."""

    name: str
    pool_concurrency: int | None
    borrow_idle_slots: bool
    head_start_seconds: float


def free_slots(stats: Stats, replicas: Iterable[str]) -> int | None:
    """Slots no lease holds on these replicas (a down one offers none); None when admission
    knows none of them (no gateway has stated their capacity)."""
    known = [stats["replicas"][name] for name in replicas if name in stats["replicas"]]
    if not known:
        return None
    return sum(max(0, r["capacity"] - r["in_flight"]) for r in known)


def tier_queues(stats: Stats) -> dict[str, TierQueue]:
    """Per tier: requests waiting, the people they come from, requests running. (Admission
    counts a person's keys of a tier together: units.py.)"""
    keys: dict[str, int] = {}
    for unit, figures in stats["keys"].items():
        person = parse_unit(unit)
        if person is not None and figures["queued"] > 0:
            keys[person[1]] = keys.get(person[1], 0) + 1
    return {
        name: TierQueue(name, t["queued"], keys.get(name, 0), t["in_flight"], t["borrowed"])
        for name, t in stats["tiers"].items()
    }


def status(waiting: int, free: int | None) -> Status:
    """"full" only when requests wait and no serving slot is free: with a free slot, whatever
    waits is held by its tier's caps (a slot left for others is free by design)."""
    if waiting <= 0:
        return "none"
    return "backlog" if free is not None and free > 0 else "full"


def expected_wait(
    rule: TierRule,
    queues: Mapping[str, TierQueue],
    heads: Mapping[str, float],
    free: int | None,
    reserve: int,
    finishes_per_second: float | None,
) -> float | None:
    """Seconds a new request of a key with nothing in flight would wait now: 0 when it would
    start at once, None when it cannot be told (no slot known, or nothing finished lately).
    `heads`: every tier's head start; `finishes_per_second`: how fast the requests that stand
    between it and a slot finish (its pool's, when the pool cap holds it; everyone's otherwise)."""
    own = queues.get(rule.name, TierQueue(rule.name, 0, 0, 0, 0))
    pool_open = rule.pool_concurrency is None or own.running - own.borrowed < rule.pool_concurrency
    others_wait = any(q.waiting for name, q in queues.items() if name != rule.name)
    if free is not None and free > 0:
        if pool_open:
            return 0.0
        if rule.borrow_idle_slots and free - 1 >= reserve and not others_wait:
            return 0.0
        ahead = own.waiting  # the pool's own queue, served as its slots come back
    elif free is None:
        return None
    else:
        # Everyone with at least this head start is served first.
        ahead = sum(q.waiting for name, q in queues.items() if heads.get(name, 0.0) >= rule.head_start_seconds)
    if not finishes_per_second:
        return None
    return (ahead + 1) / finishes_per_second


def wait_in_words(seconds: float | None) -> str:
    """0 -> "none", 4 -> "a few seconds", 40 -> "about 40 s", 190 -> "about 3 min", None -> "unknown"."""
    if seconds is None:
        return "unknown"
    if seconds <= 0:
        return "none"
    if seconds < 10:
        return "a few seconds"
    if seconds < 60:
        return f"about {round(seconds, -1):.0f} s"
    if seconds < 5400:
        return f"about {round(seconds / 60)} min"
    return f"about {round(seconds / 3600)} h"
