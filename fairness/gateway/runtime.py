"""One gateway process's runtime: the key cache, the replica directory, admission and the health
loop, with a lifecycle.

The ASGI lifespan makes it when the server starts and closes it when the server stops: by then
the server has let the requests in flight finish (uvicorn's graceful shutdown), and closing gives
back at once whatever this process still holds (leases, tickets) instead of
leaving it to expire with the lease TTL, then closes the pools.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis.asyncio
import redis.exceptions
from django.conf import settings

from fairness.gateway import engine_client, health_probes, process_counts, tracing
from fairness.gateway.api_keys import KeyCache
from fairness.gateway.context_lengths import ContextLengths
from fairness.gateway.database_outage import DATABASE_ERRORS, OUTAGE_LOG
from fairness.gateway.front_end_people import FrontEndPeople
from fairness.gateway.large_bodies import LargeBodyGate
from fairness.gateway.replica_rows import load_directory
from fairness.gateway.usage_outbox import UsageOutbox
from fairness.scheduling import health
from fairness.scheduling.admission import Admission, Demand, Grant, OnHold
from fairness.scheduling.directory import ReplicaDirectory, ReplicaInfo
from fairness.store.cancelling import cancel_and_wait
from fairness.store.config_epoch import EpochWatch
from fairness.store.redis_clients import redis_async
from fairness.store.redis_lane import Command, RedisLane

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeSettings:
    key_cache_seconds: float
    epoch_check_seconds: float
    lease_ttl: float
    reserve_slots: int
    routing_epsilon: float
    routing_bound_floor: float
    health_interval: float
    health_timeout: float
    health_cooldown: float
    fairshare_half_life_seconds: float = 168 * 3600.0
    max_queued_total: int | None = None

    @classmethod
    def from_django(cls) -> RuntimeSettings:
        return cls(
            key_cache_seconds=settings.GP_KEY_CACHE_SECONDS,
            epoch_check_seconds=settings.GP_AUTH_EPOCH_CHECK_SECONDS,
            lease_ttl=settings.GP_LEASE_TTL_SECONDS,
            reserve_slots=settings.GP_RESERVE_SLOTS,
            routing_epsilon=settings.GP_ROUTING_EPSILON,
            routing_bound_floor=settings.GP_ROUTING_BOUND_FLOOR,
            health_interval=settings.GP_HEALTH_INTERVAL_SECONDS,
            health_timeout=settings.GP_HEALTH_TIMEOUT_SECONDS,
            health_cooldown=settings.GP_HEALTH_COOLDOWN_SECONDS,
            fairshare_half_life_seconds=settings.GP_FAIRSHARE_HALF_LIFE_HOURS * 3600,
            max_queued_total=settings.GP_MAX_QUEUED_TOTAL,
        )


class Admits(Protocol):
    """What a request's lifecycle asks of admission: the runtime's Admission itself, or a watch
    over it that sees each grant (the batch runner's GrantWatch)."""

    async def acquire(self, demand: Demand, handle: str | None = None, on_hold: OnHold | None = None) -> Grant: ...

    async def move(self, grant: Grant, avoid: str, on_hold: OnHold | None = None) -> Grant: ...

    async def release(self, grant: Grant, also: Sequence[Command] = (), charge: float = 0.0) -> None: ...

    def when_revoked(self, lease_id: str, callback: Callable[[], None] | None) -> None: ...


class GatewayRuntime:
    """Everything one gateway process shares between its requests. Made and used on one event
    loop (its connections and tasks belong to that loop)."""

    def __init__(self, config: RuntimeSettings, client: redis.asyncio.Redis) -> None:
        self.config = config
        self.redis = client
        # One multiplexed connection for every per-request round trip: admission's scripts (which
        # also choose the replica) and the accounting.
        self.lane = RedisLane.like(client)
        self.keys = KeyCache(config.key_cache_seconds)
        self.people = FrontEndPeople(config.key_cache_seconds)  # whom front ends' keys speak for
        self.epoch = EpochWatch(config.epoch_check_seconds)
        ttl = config.lease_ttl
        self.admission = Admission(
            client, lane=self.lane, lease_ttl=ttl, reserve_slots=config.reserve_slots,
            recheck_seconds=min(1.0, ttl / 3), routing_epsilon=config.routing_epsilon,
            routing_floor=config.routing_bound_floor, on_unknown_group=self.restate_capacity,
            half_life_seconds=config.fairshare_half_life_seconds, max_queued_total=config.max_queued_total,
        )
        # The requests' way in: `admission` itself unless a batch runner watches its grants.
        self.admits: Admits = self.admission
        # Usage events Redis could not take yet, or might lose if it restarts empty.
        self.usage_outbox = UsageOutbox(self.lane, admission=self.admission)
        self.large_bodies = LargeBodyGate()
        self.directory: ReplicaDirectory | None = None
        self.context_lengths = ContextLengths()
        self._capacity: dict[str, int] = {}
        self._up: set[str] = set()  # the replicas healthy at the last sync_capacity
        self._reload_lock = asyncio.Lock()
        self._capacity_lock = asyncio.Lock()
        self._capacity_stated = 0  # how many times sync_capacity has stated it
        self._reload_due = False  # a statement was refused as stale: reload at the next refresh
        self._health_task: asyncio.Task[None] | None = None
        self._counts_task: asyncio.Task[None] | None = None  # flushes the answer counts
        self._background: set[asyncio.Task[Any]] = set()
        self._closed = False
        # Set when shutdown cuts off the requests still running (asgi.py): a request cancelled
        # from then on ended because the gateway stopped, not because its client left.
        self.cutting_off = False

    @classmethod
    def from_settings(cls) -> GatewayRuntime:
        return cls(RuntimeSettings.from_django(), redis_async())

    async def start(self) -> None:
        """Load the directory and start probing. Redis or the database may be down at start-up:
        the first request tries again."""
        # Before the server takes requests: the outbound client's imports (httpcore, h11, anyio)
        # once took 2 s on two cores busy with their engines, and done at the first probe,
        # they held the event loop, and every request on it, that long.
        await engine_client.prepare()
        tracing.start()  # once per process, when the environment names a collector
        self._ensure_counts_flushed()
        try:
            await self.refresh()
        except (redis.exceptions.RedisError, OSError):
            log.warning("gateway start-up: Redis unavailable; retrying on the first request")
        except DATABASE_ERRORS as exc:
            OUTAGE_LOG.report(exc, "gateway start-up (retried on the first request)")

    async def close(self) -> None:
        """Give back what this process holds, at once, and close its connections."""
        if self._closed:
            return
        self._closed = True
        if self._health_task is not None:
            await cancel_and_wait(self._health_task)
        if self._background:  # usage and releases on their way to Redis
            await asyncio.wait(self._background, timeout=5)
        if self._counts_task is not None:
            await cancel_and_wait(self._counts_task)
            await process_counts.flush_at_exit(self.lane)
        await self.usage_outbox.close()  # a last, bounded try at usage Redis has not taken
        try:
            await self.admission.close()
        except (redis.exceptions.RedisError, OSError):
            log.warning("gateway shutdown: Redis unavailable; what this process held expires")
        finally:
            await self.lane.aclose()
            await engine_client.aclose()
            await self.redis.aclose()
            await tracing.stop()  # the spans still buffered, exported within a bound

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` to its end even if the request that started it is cancelled; shutdown
        waits for it."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def refresh(self) -> ReplicaDirectory:
        """The current directory; reloads it (once, others waiting) when the config changed."""
        async with self._reload_lock:
            if await self.epoch.changed(self.lane) or self.directory is None or self._reload_due:
                self._reload_due = False
                self.keys.clear()
                self.people.clear()
                try:
                    self.directory = await load_directory()
                except BaseException:
                    # The epoch was seen: without this, a reload the database failed (or a
                    # cancelled one) would wait for the next change, on the old replicas.
                    self._reload_due = True
                    raise
                await self.sync_capacity()
                self._ensure_health_loop()
        return self.directory

    async def sync_capacity(self) -> None:
        """Offer each replica's slots to admission, a down replica's as 0."""
        if self.directory is None:
            return
        async with self._capacity_lock:
            groups = self.directory.groups()
            up = await health.healthy(self.redis, self.directory.all)
            self._up = set(up)
            capacity = {
                group: {r.name: r.max_num_seqs if r.name in up else 0 for r in members}
                for group, members in groups.items()
            }
            for group in set(self._capacity) - set(capacity):
                capacity[group] = {}  # a deployment that no longer exists offers nothing
            stale = False
            for group, replicas in capacity.items():
                stale |= not await self.admission.set_capacity(group, replicas, self.epoch.seen)
            # This process's own view stands either way (it answers 503 when every replica is down).
            self._capacity = {g: sum(r.values()) for g, r in capacity.items() if g in groups}
            if stale:  # the replicas changed again while this process read them: reload next time
                self._reload_due = True
                return
            self._capacity_stated += 1

    async def restate_capacity(self) -> None:
        """Admission found a group's capacity missing (Redis restarted empty): state it again.
        Requests that find it missing together wait for one restatement, not one each."""
        seen = self._capacity_stated
        async with self._capacity_lock:
            if self._capacity_stated != seen:
                return  # stated by someone else while this one waited
        await self.sync_capacity()

    def replica_up(self, name: str) -> bool:
        """False when the replica is known to be down (before the first health look: up)."""
        return not self._capacity or name in self._up

    def has_capacity(self, group: str) -> bool:
        """False when every replica of the deployment is known to be down."""
        return self._capacity.get(group, 1) > 0

    async def replica_failed(self, replica: ReplicaInfo) -> None:
        """Passive health: no new requests for one cooldown, and its slots withdrawn."""
        await health.mark_down(self.redis, replica, self.config.health_cooldown)
        await self.sync_capacity()

    async def request_failed(self, replica: ReplicaInfo, caller: str) -> None:
        """A request of `caller` got a 5xx or a timeout from the replica: that request's error,
        unless enough different callers failed there lately (health.record_failure); then as
        `replica_failed`."""
        if await health.record_failure(self.redis, replica, caller, self.config.health_cooldown):
            await self.sync_capacity()

    def _ensure_counts_flushed(self) -> None:
        if not self._closed and (self._counts_task is None or self._counts_task.done()):
            self._counts_task = asyncio.get_running_loop().create_task(process_counts.flush_forever(self.lane))

    def _ensure_health_loop(self) -> None:
        if self._closed:
            return
        self._ensure_counts_flushed()  # also for a runtime made without the lifespan
        if self._health_task is None or self._health_task.done():
            self._health_task = asyncio.get_running_loop().create_task(self._health_loop())

    async def _health_loop(self) -> None:
        """Probe every replica's /health (one process per interval does it for all) and keep
        admission's capacity in step with the verdicts."""
        interval = self.config.health_interval
        while True:
            try:
                if self.directory is not None:
                    await self.refresh()  # an idle process follows replica changes too
                    await health_probes.probe_if_due(
                        self.redis, self.directory.all, interval, self.config.health_timeout
                    )
                    await self.sync_capacity()
                    await self.context_lengths.learn(self.directory.all, self._up, self.config.health_timeout)
            except (redis.exceptions.RedisError, OSError):
                log.warning("health loop: Redis unavailable", exc_info=True)
            except DATABASE_ERRORS as exc:  # a reload it asked for: the loop goes on with the replicas it has
                OUTAGE_LOG.report(exc, "the health loop's reload")
            await asyncio.sleep(interval)
