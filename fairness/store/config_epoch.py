"""A config epoch in Redis: bumped on every change to keys, tiers or replicas.

Gateway processes cache those rows in memory and read the epoch at most every
GP_AUTH_EPOCH_CHECK_SECONDS; a changed epoch drops their caches. That makes a
revocation effective everywhere within about a second without a per-request query.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import redis.asyncio

from fairness.store import keyspace
from fairness.store.redis_clients import redis_sync
from fairness.store.redis_lane import RedisLane

_UNSEEN = object()  # the first look always counts as a change
# What a process states its replicas under when it read no epoch (Redis lost it or none was ever
# set): any epoch set since makes that statement stale. (Stating "any epoch" instead, such a
# process undid the newer statement of one that had reloaded, for as long as it did not look again.)
NO_EPOCH = "-"


def bump_epoch() -> None:
    # A fresh random value rather than a counter: a counter restarted by a Redis flush could
    # land on the very value a gateway saw last and hide the change.
    redis_sync().set(keyspace.CONFIG_EPOCH, uuid.uuid4().hex)


class EpochWatch:
    """Tells a process when its caches are stale, reading Redis at most once per interval."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._seen: object = _UNSEEN
        self._checked_at = float("-inf")

    @property
    def seen(self) -> str | None:
        """The epoch as last read: NO_EPOCH when none was set, None before the first read."""
        seen = self._seen
        if isinstance(seen, bytes):
            return seen.decode()
        if seen is None:
            return NO_EPOCH
        return seen if isinstance(seen, str) else None

    async def changed(self, client: redis.asyncio.Redis | RedisLane) -> bool:
        """Whether the epoch changed since the last look, if a look is due. (A gateway reads it
        through its lane: one write and one wake-up, where redis-py's client took several turns
        of a busy event loop.)"""
        now = self.clock()
        if now - self._checked_at < self.interval:
            return False
        self._checked_at = now
        current = await client.get(keyspace.CONFIG_EPOCH)
        if current != self._seen:
            self._seen = current
            return True
        return False
