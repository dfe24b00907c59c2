"""Cheap reads of live state for the staff pages (sync: the pages are plain Django views)."""

from __future__ import annotations

from fairness.store.redis_clients import redis_sync

ADMISSION_NS = "gp:{adm}:"  # admission.py's default prefix and hash tag


def key_load() -> dict[int, tuple[int, int]]:
    """Key id -> (in flight, queued) from admission's counters. A lease of a crashed gateway
    may show here until the next admission call reaps it (within one lease TTL)."""
    client = redis_sync()
    with client.pipeline(transaction=False) as pipe:
        pipe.hgetall(ADMISSION_NS + "kin")
        pipe.hgetall(ADMISSION_NS + "kq")
        in_flight, queued = pipe.execute()
    load: dict[int, tuple[int, int]] = {}
    for raw_id in set(in_flight) | set(queued):
        try:
            key_id = int(raw_id)
        except ValueError:
            continue
        load[key_id] = (int(in_flight.get(raw_id, 0)), int(queued.get(raw_id, 0)))
    return load
