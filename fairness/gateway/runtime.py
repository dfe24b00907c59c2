"""The gateway process's shared state: caches, the replica directory, admission, load, health.

One `Gateway` per process. The pieces that own connections or tasks (admission's pub/sub, the
load book's heartbeat, the health loop) live per event loop, as asyncio objects must.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass

import redis.exceptions
from django.conf import settings

from fairness.scheduling import health
from fairness.scheduling import routing
from fairness.scheduling.admission import Admission
from fairness.store.redis_clients import redis_async
from fairness.store.config_epoch import EpochWatch
from fairness.gateway.api_keys import KeyCache
from fairness.scheduling.directory import ReplicaDirectory, ReplicaInfo

log = logging.getLogger(__name__)


@dataclass
class LoopState:
    admission: Admission
    load: routing.LoadBook
    health_task: asyncio.Task[None] | None = None


class Gateway:
    def __init__(self) -> None:
        self.keys = KeyCache(settings.GP_KEY_CACHE_SECONDS)
        self.epoch = EpochWatch(settings.GP_AUTH_EPOCH_CHECK_SECONDS)
        self.directory: ReplicaDirectory | None = None
        self._capacity: dict[str, int] = {}
        self._reload_lock = asyncio.Lock()
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopState] = (
            weakref.WeakKeyDictionary()
        )

    def loop_state(self) -> LoopState:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            client = redis_async()
            ttl = settings.GP_LEASE_TTL_SECONDS
            state = LoopState(
                admission=Admission(
                    client, lease_ttl=ttl, reserve_slots=settings.GP_RESERVE_SLOTS,
                    recheck_seconds=min(1.0, ttl / 3),
                ),
                load=routing.LoadBook(client),
            )
            self._loops[loop] = state
        return state

    def admission(self) -> Admission:
        return self.loop_state().admission

    async def refresh(self) -> ReplicaDirectory:
        """The current directory; reloads it (once, others waiting) when the config changed."""
        async with self._reload_lock:
            if await self.epoch.changed(redis_async()) or self.directory is None:
                self.keys.clear()
                self.directory = await ReplicaDirectory.load()
                await self.sync_capacity()
                self._ensure_health_loop()
        return self.directory

    async def sync_capacity(self) -> None:
        """Offer each deployment's healthy slots to admission: a down replica's are withheld."""
        if self.directory is None:
            return
        groups = self.directory.groups()
        up = await health.healthy(redis_async(), self.directory.all)
        capacity = {
            group: sum(r.max_num_seqs for r in members if r.name in up)
            for group, members in groups.items()
        }
        for group in set(self._capacity) - set(capacity):
            capacity[group] = 0  # a deployment that no longer exists offers nothing
        for group, slots in capacity.items():
            await self.admission().set_capacity(group, slots)
        self._capacity = {g: s for g, s in capacity.items() if g in groups}

    def has_capacity(self, group: str) -> bool:
        """False when every replica of the deployment is known to be down."""
        return self._capacity.get(group, 1) > 0

    async def plan(self, replicas: list[ReplicaInfo], key: str | None) -> list[ReplicaInfo]:
        if len(replicas) == 1:
            return replicas  # nothing to choose: spare the round trip
        return await routing.plan(
            self.loop_state().load, replicas, key, settings.GP_ROUTING_EPSILON, settings.GP_ROUTING_BOUND_FLOOR
        )

    async def replica_failed(self, replica: ReplicaInfo) -> None:
        """Passive health: no new requests for one cooldown, and its slots withdrawn."""
        await health.mark_down(redis_async(), replica, settings.GP_HEALTH_COOLDOWN_SECONDS)
        await self.sync_capacity()

    def _ensure_health_loop(self) -> None:
        state = self.loop_state()
        if state.health_task is None or state.health_task.done():
            state.health_task = asyncio.get_running_loop().create_task(self._health_loop())

    async def _health_loop(self) -> None:
        """Probe every replica's /health (one process per interval does it for all) and keep
        admission's capacity in step with the verdicts."""
        interval = settings.GP_HEALTH_INTERVAL_SECONDS
        while True:
            try:
                if self.directory is not None:
                    await health.probe_if_due(
                        redis_async(), self.directory.all, interval, settings.GP_HEALTH_TIMEOUT_SECONDS
                    )
                    await self.sync_capacity()
            except (redis.exceptions.RedisError, OSError):
                log.warning("health loop: Redis unavailable", exc_info=True)
            await asyncio.sleep(interval)


gateway = Gateway()
