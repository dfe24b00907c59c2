"""A read-through cache for the rows the request path needs (keys, the people a front end speaks
for), so that no request waits for the database once what it needs is known.

- Requests that need an entry not yet known share one lookup: a batch job that opens 32
  connections at once reads its key's row once, not 32 times in turn.
- An entry older than the TTL (a backstop for changes that bump no config epoch) is read again in
  the background while requests go on with it. If that read fails (the database away), the entry
  is kept and a request `retry` seconds later tries again: not every request of an outage, each
  with a connection attempt and a line in the log.
- `clear` (the config epoch changed) forgets every entry. A lookup under way may have read its
  row before the change that cleared the cache (a revocation committing meanwhile): it answers the
  requests that joined it, but is not kept, and requests after the clear start one of their own.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from fairness.gateway.database_outage import DATABASE_ERRORS, OUTAGE_LOG

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

RETRY_SECONDS = 5.0  # after a failed refresh, the least time before the next


class ReadThrough(Generic[K, V]):
    def __init__(self, what: str, ttl: float, clock: Callable[[], float] = time.monotonic,
                 max_entries: int = 50_000, retry: float = RETRY_SECONDS) -> None:
        self.what = what  # names it in the log
        self.ttl = ttl
        self.retry = retry
        self.clock = clock
        self.max_entries = max_entries  # unknown keys are kept too: bound what a guessing client fills
        self._entries: dict[K, tuple[float, V]] = {}
        self._lookups: dict[K, asyncio.Task[V]] = {}  # under way
        self._generation = 0  # counts clears: a lookup that saw one is stale

    @property
    def lookups_under_way(self) -> int:
        return len(self._lookups)

    def clear(self) -> None:
        self._entries.clear()
        self._lookups.clear()  # lookups under way still answer their own waiters; nobody joins them
        self._generation += 1

    async def get(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        """The entry for `key`, read with `load` if it is not known."""
        cached = self._entries.get(key)
        if cached is None:
            # Shielded: a waiter whose client leaves does not cancel the others' lookup.
            return await asyncio.shield(self._lookup(key, load))
        if self.clock() - cached[0] > self.ttl:
            self._lookup(key, load)  # read again in the background
        return cached[1]

    def _lookup(self, key: K, load: Callable[[], Awaitable[V]]) -> asyncio.Task[V]:
        """The lookup of `key` under way, or a new one."""
        task = self._lookups.get(key)
        if task is None:
            task = asyncio.ensure_future(self._read(key, load))
            self._lookups[key] = task
            task.add_done_callback(functools.partial(self._lookup_done, key))
        return task

    async def _read(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        generation, read_at = self._generation, self.clock()
        try:
            value = await load()
        except Exception:
            cached = self._entries.get(key)
            if cached is not None and generation == self._generation:  # a refresh: due again after `retry`
                self._entries[key] = (self.clock() - self.ttl + self.retry, cached[1])
            raise
        if generation == self._generation:  # not cleared while it loaded: still current
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[key] = (read_at, value)
        return value

    def _lookup_done(self, key: K, task: asyncio.Task[V]) -> None:
        if self._lookups.get(key) is task:  # not a newer one, started after a clear
            del self._lookups[key]
        if not task.cancelled() and (error := task.exception()) is not None:
            # Its waiters see it too; an entry being read again is kept and read again after `retry`.
            if isinstance(error, DATABASE_ERRORS):  # one line for many during an outage
                OUTAGE_LOG.report(error, f"reading a {self.what}")
            else:
                log.warning("reading a %s failed: %s", self.what, error.__class__.__name__)
