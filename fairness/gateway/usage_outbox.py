"""Usage events Redis has not safely got yet, kept in the gateway process until it has.

A finished request's accounting goes to Redis in the round trip that gives its lease back
(lifecycle.py). It can be lost two ways, and this module answers both:

- That round trip fails (Redis down or restarting). The event is kept here and pushed again, a
  batch per round trip with a short backoff, until Redis takes it, with its release sent again as
  a retry: it gives the lease back if Redis still holds it (else it expired within its TTL) and
  charges the request's fair share and budgets, unless the first try ran there and only its reply
  was lost (release.lua tells: a lease gone but never reaped was released). Beyond
  GP_USAGE_OUTBOX_MAX events the oldest are dropped and counted.
- Redis took it but restarted empty (it runs without persistence) before the flush task drained
  it into the database. So every event Redis took is remembered for GP_USAGE_RETAIN_SECONDS, many
  flush intervals. A restarted Redis always breaks the lane's connection, so whenever the lane has
  opened a new one, one round trip reads the store's boot id (keyspace.STORE_BOOT, SET NX): a new
  id means Redis lost its data, and the events remembered from before are pushed again (behind
  Sentinel so does a new master: a promoted replica may lack the latest events). Watching
  the lane's connection count costs the request path nothing: no extra command, no extra reply
  (a release's replies stay inside admission). An event is forgotten only once the connection it
  went over has stayed up a whole retention window after it, so an outage never ages it out.

Pushing an event twice is harmless: the flush writes one row per request id (accounting/usage.py).
A request's counters never ride here: the process counted them as it settled (process_counts.py),
which keeps what Redis could not take, so an outage loses none of them and a retry counts none twice.

Counted in GATEWAY_COUNTERS, in the MULTI that pushes the events: usage|retried,
usage|outbox_dropped (drops are reported with the next batch Redis takes) and usage|repushed; and
what each process still holds after a batch, in USAGE_OUTBOX_WAITING. A process cannot report
while Redis is away, so these show an outage once it is over, which is when they can be true.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import redis.exceptions
from django.conf import settings

from fairness.gateway import accounting
from fairness.gateway.accounting import UsageEvent
from fairness.scheduling.admission import Admission, Demand
from fairness.store import keyspace
from fairness.store.cancelling import cancel_and_wait
from fairness.store.redis_lane import Command, RedisLane, first_error

log = logging.getLogger(__name__)

_UNKNOWN = -1  # pushed while the lane changed connections: which server took it is not known
_WAITING_TTL = 60


class _Kept(NamedTuple):
    event: UsageEvent
    # (demand, weighted tokens used, lease id) of the release that failed, which may have run
    charge: tuple[Demand, float, str] | None = None
    boot: Any = None  # the store's boot id known when it failed


# (when Redis took it, lane.connections_opened of the connection that carried it, the event)
_Recent = tuple[float, int, UsageEvent]


class UsageOutbox:
    """One gateway process's usage events on their way to Redis. Lives on the runtime's loop."""

    def __init__(
        self, lane: RedisLane, *, admission: Admission | None = None, max_events: int | None = None,
        retain_seconds: float | None = None,
        batch_size: int = 500, idle_seconds: float = 1.0, backoff: tuple[float, float] = (0.1, 2.0),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lane = lane
        self._admission = admission  # charges fair-share usage the failed releases did not
        self._max = max(1, settings.GP_USAGE_OUTBOX_MAX if max_events is None else max_events)
        self._retain = settings.GP_USAGE_RETAIN_SECONDS if retain_seconds is None else retain_seconds
        self._batch = batch_size
        self._idle = idle_seconds
        self._backoff = backoff
        self._clock = clock
        self._pending: deque[_Kept] = deque()
        self._recent: deque[_Recent] = deque(maxlen=self._max)
        self._dropped = 0  # dropped at the bound, not yet counted in Redis
        self._boot: Any = None  # the store's boot id when last read
        self._checked = 0  # lane.connections_opened when it was read
        self._process = uuid.uuid4().hex
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._stop = asyncio.Event()  # set by close(): the loop ends after the step it is taking

    @property
    def waiting(self) -> int:
        """Events Redis has not taken yet."""
        return len(self._pending)

    def pushed(self, event: UsageEvent, opened_before: int) -> None:
        """Redis took `event` in a round trip that started when the lane had opened
        `opened_before` connections."""
        opened = self._lane.connections_opened
        self._recent.append((self._clock(), opened if opened == opened_before else _UNKNOWN, event))
        self._wake()

    def keep(self, event: UsageEvent, *, charge: tuple[Demand, float, str] | None = None) -> None:
        """Redis could not take `event` (nor its release's `charge`): keep it and retry."""
        self._pending.append(_Kept(event, charge, self._boot))
        self._bound()
        self._wake()

    async def close(self, timeout: float = 2.0) -> None:
        """One last, bounded try; what Redis has not taken by then is lost (and logged). A push
        in flight is let finish, not cancelled: cancelled after Redis ran it, it would be kept
        and pushed a second time."""
        self._closed = True
        self._stop.set()
        try:
            async with asyncio.timeout(timeout):
                if self._task is not None:
                    await asyncio.wait({self._task})  # it ends after the step it is taking
                await self._check()
                await self._retry()
        except (redis.exceptions.RedisError, OSError, TimeoutError):
            log.warning("gateway shutdown: Redis unavailable")
        finally:
            if self._task is not None:
                await cancel_and_wait(self._task)
        if self._pending or self._dropped:
            log.error("gateway shutdown: %d usage events lost", len(self._pending) + self._dropped)

    def _wake(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        delay, longest = self._backoff
        failing = False
        try:
            while (self._pending or self._recent) and not self._closed:
                try:
                    await self._check()
                    await self._retry()
                    self._prune()
                except (redis.exceptions.RedisError, OSError):
                    if not failing:
                        log.warning("usage outbox: Redis unavailable; %d events kept", len(self._pending))
                    failing = True
                    await self._pause(delay)
                    delay = min(delay * 2, longest)
                    continue
                if failing:
                    log.warning("usage outbox: Redis is back")
                failing = False
                delay = self._backoff[0]
                await self._pause(self._idle)
        finally:
            self._task = None

    async def _pause(self, seconds: float) -> None:
        """A sleep that close() ends at once."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _check(self) -> None:
        """After a new connection, read the boot id; a new one means Redis restarted empty."""
        lane = self._lane
        if lane.connections_opened == self._checked and lane.connected and self._boot is not None:
            return
        if not self._recent and not self._pending:
            return
        # A new offer each time: one seen before could not tell a restart from no restart.
        offer = uuid.uuid4().hex
        boot = (await self._send(("SET", keyspace.STORE_BOOT, offer, "NX"), ("GET", keyspace.STORE_BOOT)))[1]
        current = lane.connections_opened  # the connection that answered
        if lane.server_id is not None:
            # Behind Sentinel: a promoted replica has the old master's boot id but perhaps not its
            # latest events (replication is asynchronous), so a new master counts as a new boot.
            boot = (boot, lane.server_id)
        if self._boot is not None and boot == self._boot:
            # Redis kept its data: what went over older connections is still there (or drained).
            self._recent = deque(
                ((at, current, event) for at, _, event in self._recent), maxlen=self._max
            )
        else:
            await self._repush(current)
        self._boot = boot
        self._checked = current

    async def _repush(self, current: int) -> None:
        """Push again what may have been in the Redis that was lost."""
        stale = [event for _, opened, event in self._recent if opened != current]
        if not stale:
            return
        self._recent = deque((entry for entry in self._recent if entry[1] == current), maxlen=self._max)
        log.warning("usage outbox: Redis restarted empty (or failed over); pushing %d recent usage events again",
                    len(stale))
        for start in range(0, len(stale), self._batch):
            chunk = stale[start:start + self._batch]
            try:
                opened = await self._push(chunk, {accounting.USAGE_REPUSHED: len(chunk)})
            except BaseException:
                # Tried again at the next check, whichever connection carries it.
                unsent = [(self._clock(), _UNKNOWN, event) for event in stale[start:]]
                self._recent = deque([*unsent, *self._recent], maxlen=self._max)
                raise
            self._remember(chunk, opened)

    async def _retry(self) -> None:
        pending = self._pending
        while pending:
            chunk = [pending.popleft() for _ in range(min(self._batch, len(pending)))]
            dropped = self._dropped
            counts: dict[str, int | float] = {accounting.USAGE_RETRIED: len(chunk)}
            if dropped:
                counts[accounting.USAGE_OUTBOX_DROPPED] = dropped
            waiting: Command = (
                ("HSET", keyspace.USAGE_OUTBOX_WAITING, self._process, len(pending)) if pending
                else ("HDEL", keyspace.USAGE_OUTBOX_WAITING, self._process)
            )
            charges = [self._settle(kept) for kept in chunk if kept.charge and self._admission]
            try:
                opened = await self._push(
                    [kept.event for kept in chunk], counts,
                    waiting, ("EXPIRE", keyspace.USAGE_OUTBOX_WAITING, _WAITING_TTL), *charges,
                )
            except BaseException:
                pending.extendleft(reversed(chunk))
                self._bound()
                raise
            self._dropped -= dropped
            self._remember([kept.event for kept in chunk], opened)

    def _settle(self, kept: _Kept) -> Command:
        """The failed release again: in the Redis that kept its data, a retry that charges
        nothing if the first try ran there (its reply lost); in one that lost it, or when which
        one is not known, a charge alone (the first try's work, if any, was lost with it)."""
        assert kept.charge is not None and self._admission is not None
        demand, used, lease_id = kept.charge
        same_store = kept.boot is not None and kept.boot == self._boot
        return self._admission.settle_command(demand, used, lease_id if same_store else None)

    async def _push(self, events: Sequence[UsageEvent], counts: dict[str, int | float], *after: Command) -> int:
        """Push `events` with these counter bumps in one MULTI; returns the connection's number
        (_UNKNOWN if the lane changed connections meanwhile)."""
        before = self._lane.connections_opened
        also = accounting.increment_commands(counts)
        await self._send(*accounting.usage_batch_commands(events, settings.GP_USAGE_BACKLOG_MAX, also), *after)
        opened = self._lane.connections_opened
        return opened if opened == before else _UNKNOWN

    async def _send(self, *commands: Command) -> list[Any]:
        if self._admission is not None:  # it reloads the scripts a restarted Redis forgot
            return await self._admission.send(*commands)
        replies = await self._lane.execute(*commands)
        error = first_error(replies)
        if error is not None:
            raise error
        return replies

    def _remember(self, events: Sequence[UsageEvent], opened: int) -> None:
        now = self._clock()
        self._recent.extend((now, opened, event) for event in events)

    def _bound(self) -> None:
        pending = self._pending
        while len(pending) > self._max:
            pending.popleft()
            self._dropped += 1

    def _prune(self) -> None:
        """Forget events whose connection has stayed up a whole retention window since: the
        flush task has had many turns to drain them."""
        lane = self._lane
        checked = self._checked
        if not lane.connected or lane.connections_opened != checked:
            return
        horizon = self._clock() - self._retain
        recent = self._recent
        while recent and recent[0][0] <= horizon and recent[0][1] == checked:
            recent.popleft()
