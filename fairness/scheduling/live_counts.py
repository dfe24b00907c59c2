"""Admission's live counts, as the pages, /metrics and the poll task read them."""

from __future__ import annotations

from typing import Any, TypedDict

import redis

from fairness.scheduling.units import parse_unit
from fairness.store import keyspace


class GroupStats(TypedDict):
    capacity: int
    in_flight: int
    queued: int


class TierStats(TypedDict):
    in_flight: int
    borrowed: int
    queued: int
    longest_wait: float


class KeyStats(TypedDict):
    in_flight: int
    queued: int


class ReplicaStats(TypedDict):
    capacity: int  # slots it offers now: 0 while down
    in_flight: int  # leases running on it


class Stats(TypedDict):
    groups: dict[str, GroupStats]
    tiers: dict[str, TierStats]
    keys: dict[str, KeyStats]
    replicas: dict[str, ReplicaStats]
    longest_wait: float


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def pairs(flat: list[Any]) -> dict[str, str]:
    return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)}


def pinned_group(group: str, replica: str) -> str:
    """The admission group of the requests that must run on `replica` of `group` (a stored
    conversation lives in that engine's memory): lua/lib/replicas.lua's pin, "<group> <replica>"."""
    return f"{group} {replica}"


def group_of(group: str) -> str:
    """The capacity group a pin belongs to (itself for any other group)."""
    return group.partition(" ")[0]


def parse_stats(reply: list[Any], now: float) -> Stats:
    """The stats script's reply as counts per capacity group, tier and key."""
    cap, gq, kq, pq, rcap = (pairs(reply[i]) for i in (0, 2, 4, 7, 8))
    # The in-flight counters keep their zeros (lua/lib/state.lua): a name with nothing in flight is absent here.
    gin, kin, pin, pbin, rin = ({k: v for k, v in pairs(reply[i]).items() if v != "0"} for i in (1, 3, 5, 6, 9))
    oldest = {pool: now - float(at) for pool, at in pairs(reply[10]).items()}
    named = sorted({*cap, *(group_of(g) for g in (*gin, *gq))})  # a pin's leases and tickets are its group's
    groups: dict[str, GroupStats] = {
        g: {"capacity": int(cap.get(g, 0)), "in_flight": 0, "queued": 0} for g in named
    }
    for g, count in gin.items():
        groups[group_of(g)]["in_flight"] += int(count)
    for g, count in gq.items():
        groups[group_of(g)]["queued"] += int(count)
    tiers: dict[str, TierStats] = {
        p: {"in_flight": int(pin.get(p, 0)), "borrowed": int(pbin.get(p, 0)),
            "queued": int(pq.get(p, 0)), "longest_wait": max(0.0, oldest.get(p, 0.0))}
        for p in sorted({*pin, *pbin, *pq})
    }
    keys: dict[str, KeyStats] = {
        k: {"in_flight": int(kin.get(k, 0)), "queued": int(kq.get(k, 0))}
        for k in sorted({*kin, *kq})
    }
    replicas: dict[str, ReplicaStats] = {
        r: {"capacity": int(rcap.get(r, 0)), "in_flight": int(rin.get(r, 0))}
        for r in sorted({*rcap, *rin})
    }
    longest = max((t["longest_wait"] for t in tiers.values()), default=0.0)
    return {"groups": groups, "tiers": tiers, "keys": keys, "replicas": replicas, "longest_wait": longest}


def person_load(client: redis.Redis) -> dict[tuple[int, str], tuple[int, int]]:
    """(person id, tier) -> (in flight, queued) over all their keys, read without running a script
    (the pages are sync). A lease of a crashed gateway may show here until it is reaped: by the
    upkeep of any process still holding a lease or ticket, or the next request that needs its slot."""
    namespace = keyspace.ADMISSION_NAMESPACE
    with client.pipeline(transaction=False) as pipe:
        pipe.hgetall(namespace + keyspace.ADMISSION_IN_FLIGHT_BY_KEY)
        pipe.hgetall(namespace + keyspace.ADMISSION_QUEUED_BY_KEY)
        in_flight, queued = pipe.execute()
    load: dict[tuple[int, str], tuple[int, int]] = {}
    for raw in set(in_flight) | set(queued):
        unit = parse_unit(text(raw))
        counts = (int(in_flight.get(raw, 0)), int(queued.get(raw, 0)))
        if unit is not None and counts != (0, 0):  # in-flight counts keep their zeros
            load[unit] = counts
    return load
