"""Admission: Redis leases and the ageing priority queue in front of the engines.

Every in-flight request holds one lease that counts against three limits at once: its key's cap,
its tier's pool cap (if any) and its capacity group's engine slots. A request that cannot run yet
waits as a ticket ordered by ``enqueued_at - head_start_seconds`` (linear ageing). Equal scores go
by arrival, so at the exact crossover the request that has waited the whole head start goes first.
A ticket whose key or pool is at its cap is skipped, not waited on; and time spent behind its own
key's cap does not age it: when that cap opens, the key's waiting tickets count from then (else a
key that queues many requests would outrank everyone each time one of its own finished). All
decisions are Lua functions (``lua/``, one Redis round trip each), so any number of gateway
processes share one consistent state; the key layout is documented in ``lua/lib/state.lua``.

Per process there is one pub/sub channel (grants are pushed to it and dispatched to the waiting
coroutine by handle) and, only while this process holds a lease or a ticket, one keeper task that
renews leases, heartbeats tickets and re-pumps every ``recheck_seconds``: that covers lost messages
and the expired leases of dead processes. Idle, the process sends nothing. Script calls share one
multiplexed connection (``redis_lane``): taking and giving back a lease is one round trip each,
at a fraction of a pooled client's CPU.

Pure Python + redis.asyncio: no Django imports, so it is tested on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from pathlib import Path
from typing import Any, NamedTuple

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError, ResponseError

from fairness.scheduling import fair_share
from fairness.scheduling.limits import BudgetWindow, CompletionAsk, RateLimit, budget_spec, rate_spec
from fairness.scheduling.live_counts import Stats, pairs, parse_stats, text
from fairness.scheduling.wait_estimate import Newcomer, QueueView, Replay, parse_view, replay
from fairness.store import keyspace
from fairness.store.cancelling import cancel_and_wait
from fairness.store.redis_lane import Command, Exchange, RedisLane, SentinelLane, first_error

logger = logging.getLogger(__name__)

Arg = str | int | float  # a script argument, as Redis takes it

_LUA_DIR = Path(__file__).with_name("lua")
_SCRIPTS = (
    "acquire", "release", "leave", "tick", "capacity", "stats", "retake", "restore", "rate", "queue_view",
    "failover",
)
_LIB_PARTS = ("state", "replicas", "fair_share", "limits", "pace", "queue", "revocable", "upkeep")
# The long entry scripts' own arguments, in order from ARGV[5] (ARGV[1..4] are every call's: see
# _args). Named once, here: calls pass them by name, and each script reads them by name too
# (ARGV[ACQUIRE.key]), from the Lua table library_head() makes of its tuple.
ACQUIRE_ARGUMENTS = (
    "handle", "key", "pool", "group", "key_cap", "pool_cap", "head_start", "borrow", "max_queued_per_key",
    "enqueued_at", "deadline", "channel", "preference", "avoid", "moving", "report_unknown_capacity",
    "association", "share", "fair_share_weight", "half_life", "estimate", "budgets", "rate_limits",
    "revocable", "max_queued_per_tier", "max_queued_total", "completion", "repeated",
)
RELEASE_ARGUMENTS = (
    "handle", "association", "used", "estimate", "budgets", "rate_limits", "half_life", "retried",
)
RETAKE_ARGUMENTS = ("handle", "key", "pool", "group", "replica", "borrowed", "enqueued_at")
NAMED_ARGUMENTS = {"acquire": ACQUIRE_ARGUMENTS, "release": RELEASE_ARGUMENTS, "retake": RETAKE_ARGUMENTS}
_FIRST_ARGUMENT = 5
# Clients (the OpenAI SDK among them) stop honouring Retry-After beyond a minute or so.
_MAX_RETRY_AFTER = 30
_MOST_RETRY_AFTER = 60  # where the wait estimate says when
# Handles per upkeep call: one script call must not block Redis for long (~1.5 ms per 500).
_TICK_BATCH = 500
# After Redis restarted empty, grants wait this long (s) so that every gateway process can count
# its running requests' leases again first: their pub/sub connections broke with Redis, and each
# upkeeps at once on reconnecting. What a process takes to get there is its retry interval below
# plus however long a busy host keeps its loop from running: 0.3 s was seen on two loaded cores,
# and a process that comes late lets the others grant slots its running requests hold.
RESTART_HOLD_SECONDS = 0.75
# An upkeep or pub/sub read that failed (Redis away) is tried again this soon (s), not a whole
# interval later: a refused connection costs nothing, and the sooner a process is back the less of
# the restart hold it uses.
_UPKEEP_RETRY_SECONDS = 0.05


# A process replays a group's queue for its waiting requests' estimates at most this often (s).
_REPLAY_MAX_AGE = 0.5
# ... and replays it at most this often whoever asks (s): a replay's work is bounded (about 20 ms
# of CPU at most, wait_estimate._MOST_WORK), so a busy gateway spends a few percent of a core on it.
_REPLAY_SPACING = 0.5
_NOT_WAITING = -1.0  # _first_estimate: the ticket was granted before its estimate was made
_UNMEASURED = -2.0  # _first_estimate: no pace was measured on its group yet, or no estimate was made


def new_handle() -> str:
    """A lease id (and its ticket's handle)."""
    return os.urandom(16).hex()


def retry_after_seconds(estimate: float | None) -> int:
    """A wait estimate as a Retry-After: whole seconds, at least 1, at most a minute (clients
    stop honouring longer ones; the queue may also move faster than estimated)."""
    if estimate is None:
        return _MOST_RETRY_AFTER
    return max(1, min(_MOST_RETRY_AFTER, math.ceil(estimate)))


class Reply(IntEnum):
    """The first field of acquire.lua's reply (lua/lib/state.lua's REPLY; a test holds the two together)."""

    GRANTED = 1
    QUEUED = 0
    QUEUE_FULL = -1
    CAPACITY_UNKNOWN = -2  # Redis lost the group's capacity: state it and call again
    OVER_BUDGET = -3
    RATE_LIMITED = -4


# Where a granted or queued reply carries the budget left and the completion limit.
_BUDGET_LEFT_AT = {Reply.GRANTED: 4, Reply.QUEUED: 3}
_COMPLETION_LIMIT_AT = {Reply.GRANTED: 5, Reply.QUEUED: 4}
_HELD_BY_AT = 5  # where a queued reply says what keeps the request waiting (HELD_BY names them)
# What held a waiting request (acquire.lua answers it with every queued reply): its person's cap,
# its tier's pool, no free slot with nothing ahead of it, or others ahead of it in the order.
HELD_BY = ("person_cap", "tier_pool", "no_slot", "fair_share_order")
OnHold = Callable[[str], None]


class _Library(NamedTuple):
    """The admission scripts as one Redis function library (Redis 7+): lua/lib/ runs once when it
    is loaded, not on every call as it would at the head of each EVAL'd script. Its name carries
    a hash of its text, so processes running different versions each call their own."""

    code: str
    functions: dict[str, str]  # script name -> function name


def library_head() -> str:
    """lua/lib/'s parts joined in their order, then the argument positions of the scripts that
    take theirs by name: the helpers every entry script is registered after."""
    parts = "".join((_LUA_DIR / "lib" / f"{part}.lua").read_text() for part in _LIB_PARTS)
    return parts + "".join(_argument_table(script, names) for script, names in NAMED_ARGUMENTS.items())


def _argument_table(script: str, names: tuple[str, ...]) -> str:
    """`local ACQUIRE = {handle = 5, key = 6, ...}`: a local of the library, read by its script."""
    if len(set(names)) != len(names) or not all(name.isidentifier() for name in names):
        raise ValueError(f"{script}: argument names must be distinct identifiers: {names!r}")
    positions = ", ".join(f"{name} = {at}" for at, name in enumerate(names, _FIRST_ARGUMENT))
    return f"local {script.upper()} = {{{positions}}}\n"


def _in_order(script: str, values: Mapping[str, Arg]) -> tuple[Arg, ...]:
    """The script's arguments in the order it reads them. A missing or unknown name raises: the
    script would read nil in its place, not fail."""
    names = NAMED_ARGUMENTS[script]
    try:
        ordered = tuple([values[name] for name in names])
    except KeyError as missing:
        raise TypeError(f"{script}: missing argument {missing}") from None
    if len(values) != len(names):
        raise TypeError(f"{script}: unknown arguments {sorted(set(values) - set(names))}")
    return ordered


def _library() -> _Library:
    lib = library_head()
    entries = {entry: (_LUA_DIR / f"{entry}.lua").read_text() for entry in _SCRIPTS}
    name = "gp_" + hashlib.sha1((lib + "".join(entries.values())).encode()).hexdigest()[:16]
    functions = {entry: f"{name}_{entry}" for entry in entries}
    code = [f"#!lua name={name}", lib]
    for entry, source in entries.items():
        code += [f"redis.register_function('{functions[entry]}', function(KEYS, ARGV)",
                 "begin(KEYS, ARGV)", source, "end)"]
    return _Library(resolve_names("\n".join(code), lua_names()), functions)


# The scripts spell keys, fields and arguments by name (NS .. KEY.in_flight_by_key,
# ARGV[ACQUIRE.moving]); loading writes each name's value in its place, so a call pays no table
# lookup for them. The tables stay in the library, as the documentation of the layout.
_NAMED = re.compile(r"\b(KEY|FIELD|ACQUIRE|RELEASE|RETAKE)\.([A-Za-z_]\w*)")
_LUA_ENTRY = re.compile(r"^\s*(\w+) = '([^']*)',?\s*(?:--.*)?$")


def lua_names() -> dict[str, dict[str, str]]:
    """Each named table's entries as Lua literals: state.lua's KEY and FIELD, and the argument
    positions of the scripts that take theirs by name."""
    state = (_LUA_DIR / "lib" / "state.lua").read_text()
    tables: dict[str, dict[str, str]] = {}
    for table in ("KEY", "FIELD"):
        body = re.search(rf"^local {table} = \{{\n(.*?)^\}}", state, re.M | re.S)
        if body is None:
            raise ValueError(f"state.lua defines no {table} table")
        entries = [_LUA_ENTRY.match(line) for line in body.group(1).splitlines() if line.strip()]
        tables[table] = {m.group(1): f"'{m.group(2)}'" for m in entries if m}
    for script, names in NAMED_ARGUMENTS.items():
        tables[script.upper()] = {name: str(at) for at, name in enumerate(names, _FIRST_ARGUMENT)}
    return tables


def resolve_names(source: str, tables: dict[str, dict[str, str]]) -> str:
    """`source` with every TABLE.name in its code (not its comments) replaced by its value. An
    unknown name raises: in Lua it would read nil, and the script would go on with it."""
    def value(match: re.Match[str]) -> str:
        table, name = match.groups()
        if name not in tables[table]:
            raise ValueError(f"the admission scripts use {table}.{name}, which {table} does not define")
        return tables[table][name]

    lines = []
    for line in source.splitlines():
        code, dashes, comment = line.partition("--")
        lines.append(_NAMED.sub(value, code) + dashes + comment)
    return "\n".join(lines)


_LIBRARY = _library()


def _function_missing(reply: Any) -> bool:
    """Redis does not know the library: it restarted empty, or its functions were flushed."""
    return isinstance(reply, ResponseError) and "function not found" in str(reply).lower()


@dataclass(frozen=True)
class Demand:
    """What one request needs. Names must not contain "|" (the scripts' separator)."""

    key_id: str  # the unit its caps count (units.unit_of: a person within a tier)
    tier: str  # tier name = pool name
    per_key_cap: int
    pool_cap: int | None
    head_start_seconds: float
    borrow: bool  # may use idle engine slots beyond the key's and pool's caps
    max_queued_per_key: int
    max_wait_seconds: float
    group: str  # capacity group (model name) whose engine slots it needs
    # The group's replicas in this request's order of preference (its conversation's rendezvous
    # order; empty: none, the least loaded wins), and one to take only if no other has a slot.
    preference: tuple[str, ...] = ()
    avoid: str = ""
    # Fair share: the association its work is charged to ("" for none), that association's
    # normalised share S, and how many seconds of rank its tier lets usage cost at most.
    association: str = ""
    share: float = 0.0
    fairshare_weight: float = 0.0
    # Weighted tokens charged to the association when granted (running work counts from its
    # start) and reserved in its budgets; the release settles the real count.
    estimate: float = 0.0
    budgets: tuple[BudgetWindow, ...] = ()
    rate_limits: tuple[RateLimit, ...] = ()
    # A borrower whose work can be redone (a batch runner's line): it may borrow the reserve too,
    # and is asked to give the slot back (Admission.on_revoke) when an eligible request finds none.
    revocable: bool = False
    # Requests the tier lets wait across all its keys (None: no bound but the deployment's).
    max_queued_per_tier: int | None = None
    # With budgets: its completion, limited to what they leave (the grant's completion_limit), and
    # the estimate reserved is then that limit's (the grant's demand carries it).
    completion: CompletionAsk | None = None
    # The client bounded its wait itself (max_wait_seconds is its bound): when the wait estimate
    # says it will not start in time, it is refused at once (WillNotStartInTime), not at its bound.
    refuse_if_late: bool = False


@dataclass(frozen=True)
class Grant:
    lease_id: str
    demand: Demand
    queued_seconds: float
    borrowed: bool  # taken beyond a cap, out of otherwise idle slots
    replica: str  # the replica whose slot the lease holds: the request goes there
    enqueued_at: float  # its place in line, kept when it moves to another replica
    budget_left: float | None = None  # the least any of its budgets had left once it was admitted
    completion_limit: int | None = None  # the completion limit its budgets left it (demand.completion)
    # The wait estimate made when it queued (s), or None: it never queued, or none could be made.
    queue_estimate: float | None = None
    # What held it in the queue when it was last told (HELD_BY), or "": it never waited.
    held_by: str = ""


class AdmissionRefused(Exception):
    """Not admitted. ``retry_after`` is whole seconds, ready for a 429 ``Retry-After`` header."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class QueueFull(AdmissionRefused):
    """The queue is full for this request: its person (in its tier) already has
    ``max_queued_per_key`` requests waiting, its tier ``max_queued_per_tier``, or the deployment
    its ``max_queued_total`` (``bound``: "key", "tier" or "total"). ``retry_after``: when the wait
    estimate grants the first of those waiting requests (without one: when the oldest of them must
    have left the queue), at most 60 s."""

    def __init__(self, message: str, retry_after: int, bound: str) -> None:
        super().__init__(message, retry_after)
        self.bound = bound


def _plural(n: int) -> str:
    return f"{n} request{'' if n == 1 else 's'}"


def _queue_full(demand: Demand, total: int | None, bound: str, retry_after: int) -> QueueFull:
    if bound == "total":
        message = (f"The gateway already has {_plural(total or 0)} waiting, the most it queues at "
                   "once for everyone; retry shortly.")
    elif bound == "tier":
        message = (f"The {demand.tier} tier already has {_plural(demand.max_queued_per_tier or 0)} waiting "
                   "across its keys, the most it allows to queue at once; retry when one of them has started.")
    elif demand.max_queued_per_key:
        message = (f"You already have {_plural(demand.max_queued_per_key)} waiting in the {demand.tier} tier, "
                   "across your keys, the most it allows one person to queue at once; retry when one of them "
                   "has started.")
    else:
        message = "No slot is free and this key's tier does not let requests wait; retry shortly."
    return QueueFull(message, min(_MOST_RETRY_AFTER, retry_after), bound)


class BudgetExceeded(AdmissionRefused):
    """One of the demand's budgets is used up (``window``); ``retry_after``: until it resets."""

    def __init__(self, message: str, retry_after: int, window: BudgetWindow) -> None:
        super().__init__(message, retry_after)
        self.window = window


class RateLimited(AdmissionRefused):
    """One of the demand's rate limits (``limit``) refuses it; ``retry_after``: when it would pass."""

    def __init__(self, message: str, retry_after: int, limit: RateLimit) -> None:
        super().__init__(message, retry_after)
        self.limit = limit


class QueueTimeout(AdmissionRefused):
    """No slot within ``max_wait_seconds``; the ticket has left the queue. ``retry_after``: the
    wait estimate of one like it arriving now, at most 60 s (without one: as long as it waited,
    at most 30 s)."""


class WillNotStartInTime(QueueTimeout):
    """The wait estimate says the request would still be waiting at the client's own bound
    (``estimate``: seconds, None beyond the estimator's horizon); it never queued for long."""

    def __init__(self, message: str, retry_after: int, estimate: float | None) -> None:
        super().__init__(message, retry_after)
        self.estimate = estimate


class _Turn(NamedTuple):
    granted: bool  # False: the ticket vanished (expired while this process stalled); queue again
    borrowed: bool
    queued_seconds: float
    replica: str


_GONE = _Turn(False, False, 0.0, "")


def _turn(borrowed: Any, queued: Any, replica: Any) -> _Turn:
    return _Turn(True, int(borrowed) == 1, float(text(queued)), text(replica))


def _budget_left(reply: list[Any], state: Reply, before: float | None) -> float | None:
    """An acquire reply's budget left ('' for no budget; absent from the replies to a repeated
    call); a moved request keeps what it learnt first."""
    at = _BUDGET_LEFT_AT.get(state)
    left = text(reply[at]) if at is not None and len(reply) > at else ""
    return float(left) if left else before


def _completion_limit(reply: list[Any], state: Reply, before: int | None) -> int | None:
    """An acquire reply's completion limit, like its budget left."""
    at = _COMPLETION_LIMIT_AT.get(state)
    limit = text(reply[at]) if at is not None and len(reply) > at else ""
    return int(limit) if limit else before


def _limit_refusal(
    budgets: tuple[BudgetWindow, ...], rate_limits: tuple[RateLimit, ...], reply: list[Any], now: float
) -> AdmissionRefused:
    index = int(reply[1]) - 1
    if int(reply[0]) == Reply.OVER_BUDGET:
        window = budgets[index]
        retry = max(1, math.ceil(window.resets_at - now))
        return BudgetExceeded(window.words or "This key's token budget is used up.", retry, window)
    limit = rate_limits[index]
    retry = max(1, math.ceil(float(text(reply[2]))))
    return RateLimited(
        f"Rate limit reached: {limit.words or limit.name}. Retry after {retry} s.", retry, limit
    )


def _check(demand: Demand) -> None:
    for name in (demand.key_id, demand.tier, demand.group):
        if not name or "|" in name:
            raise ValueError(f"admission names must be non-empty and without '|': {name!r}")
    tier_bound = demand.max_queued_per_tier
    if min(demand.per_key_cap, demand.max_queued_per_key, demand.max_wait_seconds, tier_bound or 0) < 0:
        raise ValueError(f"negative limit in {demand!r}")


async def admission_stats(redis: Redis) -> Stats:
    """Live counts read by a process that does not admit (pages, /metrics, the poll task)."""
    admission = Admission(redis)
    try:
        return await admission.stats()
    finally:
        await admission.close()


class Admission:
    """One per gateway process (it owns a pub/sub connection and, while busy, a keeper task)."""

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = keyspace.PREFIX,
        lease_ttl: float = 30.0,
        reserve_slots: int = 3,
        clock: Callable[[], float] = time.time,
        recheck_seconds: float = 1.0,
        lane: RedisLane | None = None,
        routing_epsilon: float = 0.25,
        routing_floor: float = 0.375,
        on_unknown_group: Callable[[], Awaitable[None]] | None = None,
        half_life_seconds: float = 168 * 3600.0,
        max_queued_total: int | None = None,
    ) -> None:
        if not 0 < recheck_seconds <= lease_ttl / 3:
            # Waiting tickets are heartbeated every recheck; they must not expire in between.
            raise ValueError("recheck_seconds must be positive and at most lease_ttl / 3")
        self._redis = redis
        self._ns = keyspace.admission_namespace(prefix)
        self._channel = keyspace.grant_channel(self._ns, uuid.uuid4().hex)
        self._ttl = lease_ttl
        self._reserve = reserve_slots
        self._clock = clock
        self._recheck = recheck_seconds
        self._routing = f"{routing_epsilon!r}|{routing_floor!r}"
        self._half_life = repr(float(half_life_seconds))
        # Requests waiting in the whole namespace (every gateway process, tier and model): each
        # holds a client connection, so this keeps them below the connections a gateway takes.
        if max_queued_total is not None and max_queued_total < 0:
            raise ValueError("max_queued_total must be at least 0")
        self._max_queued_total = max_queued_total
        # Redis lost the capacities (restarted empty): this states them again, then acquire retries.
        self._on_unknown_group = on_unknown_group
        # Called with a lease id when admission asks a revocable lease of this process back,
        # unless a callback was registered for that lease (when_revoked).
        self.on_revoke: Callable[[str], None] | None = None
        self._revocations: dict[str, Callable[[], None]] = {}
        # Leases asked back before anyone watched them (the ask can overtake the grant's reply).
        self._asked_early: dict[str, None] = {}
        # Tickets live one lease TTL past their last heartbeat, and a lease granted to a ticket
        # starts with the ticket's expiry (the keeper renews it within TTL / 3). Shorter ticket
        # TTLs would drop a dead process's tickets sooner but break that renewal margin.
        self._ticket_ttl = lease_ttl
        # Scripts and leases go over one multiplexed connection (the per-request round trips),
        # shared with the rest of the process when it passes one in; pub/sub over redis-py's.
        self._lane = lane or RedisLane.like(redis)
        self._owns_lane = lane is None
        if isinstance(self._lane, SentinelLane):  # behind Sentinel: a new master holds like a restart
            self._lane.on_new_server = self._on_new_master
        self._waiters: dict[str, asyncio.Future[_Turn]] = {}  # pub/sub dispatch targets
        self._queued: set[str] = set()  # tickets known to be in Redis: the keeper heartbeats them
        self._held: dict[str, Grant] = {}  # leases the keeper renews
        self._keeper: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._due = False  # upkeep at once (Redis came back), not at the end of the interval
        self._hold_upkeep = False  # an upkeep is scheduled for the end of a restart hold
        self._stated_on: dict[str, int] = {}  # group -> the lane connection that last stated it
        self._pubsub: PubSub | None = None
        self._listener: asyncio.Task[None] | None = None
        self._listen_lock = asyncio.Lock()
        self._background: set[asyncio.Task[Any]] = set()
        self._replays: dict[str, tuple[float, Replay]] = {}  # group -> (when, its latest replay)
        self._replaying: dict[str, asyncio.Task[Replay]] = {}  # group -> the replay under way
        self._replayed_at: dict[str, float] = {}  # group -> when its last replay began (monotonic)

    # -- public API -----------------------------------------------------------------------------

    async def set_capacity(
        self, group: str, replicas: Mapping[str, int] | int, epoch: str | None = None
    ) -> bool:
        """The engine slots of ``group``, per replica (max_num_seqs; 0 while it is down). A plain
        number stands for one replica named after the group. ``epoch``: the config epoch the
        caller read its replicas under (NO_EPOCH: it read none), or None for any; False (and
        nothing changed) when the epoch has moved on."""
        slots = {group: replicas} if isinstance(replicas, int) else dict(replicas)
        bad = not group or "|" in group or any(
            n < 0 or not name or "|" in name or "," in name for name, n in slots.items()
        )
        if bad:
            raise ValueError(f"bad capacity {group!r}={replicas!r}")
        pairs = [part for name in sorted(slots) for part in (name, int(slots[name]))]
        # Stated before, and now over a new connection (or one that broke, so the call opens
        # one): if Redis lost the group (restarted empty), the script holds its grants.
        lane = self._lane
        stated_on = self._stated_on.get(group)
        restarted = stated_on is not None and (not lane.connected or lane.connections_opened != stated_on)
        hold = RESTART_HOLD_SECONDS if restarted else 0
        reply = await self._call(
            "capacity", group, self._routing, keyspace.CONFIG_EPOCH, epoch or "", hold, *pairs
        )
        self._stated_on[group] = self._lane.connections_opened  # the connection that carried it
        return int(reply) >= 0

    async def acquire(self, demand: Demand, handle: str | None = None, on_hold: OnHold | None = None) -> Grant:
        """Wait for a lease on one of the group's replicas. Cancelling the caller removes its
        ticket at once (or releases the lease it was granted meanwhile). Raises QueueFull (its
        key's, its tier's or the deployment's queue is full), QueueTimeout (WillNotStartInTime
        among them), BudgetExceeded or RateLimited. `handle`: the lease id to use (new_handle()),
        for a caller that asks about its ticket (ticket_wait) while this waits. `on_hold`: told
        what holds the request (HELD_BY) each time it is queued, so a caller whose request never
        gets its grant (it timed out, or its client left) still knows."""
        _check(demand)
        return await self._wait_for_lease(demand, handle or new_handle(), self._clock(), moving=False,
                                          on_hold=on_hold)

    # -- wait estimates -------------------------------------------------------------------------

    def now(self) -> float:
        """Admission's clock (injected): the time its estimates count from."""
        return self._clock()

    async def queue_view(self, group: str, key: str = "", association: str = "", weight: float = 0.0) -> QueueView:
        """The group's admission state for the wait estimate (queue_view.lua); `key`'s caps and
        the fair-share delay of `association` at `weight` included."""
        reply = await self._call("queue_view", group, key, association, repr(float(weight)))
        return parse_view(reply, group, self._clock(), self._reserve)

    async def wait_for_new(self, demand: Demand) -> Replay:
        """The replay of the demand's group with a request like `demand` arriving now: its
        newcomer_eta is how long it would wait."""
        view = await self.queue_view(demand.group, demand.key_id, demand.association, demand.fairshare_weight)
        newcomer = Newcomer(demand.key_id, demand.tier, demand.head_start_seconds, demand.per_key_cap, view.delay,
                            demand.borrow)
        return await asyncio.to_thread(replay, view, self._clock(), newcomer)

    async def group_replay(self, group: str, max_age: float = _REPLAY_MAX_AGE) -> Replay:
        """Every waiting ticket's estimate in `group`, from a replay at most `max_age` seconds
        old; callers that ask while one is under way share it."""
        kept = self._replays.get(group)
        if kept is not None and self._clock() - kept[0] < max_age:
            return kept[1]
        running = self._replaying.get(group)
        if running is None:
            running = asyncio.get_running_loop().create_task(self._replay(group))
            self._replaying[group] = running
            running.add_done_callback(lambda _: self._replaying.pop(group, None))
        return await asyncio.shield(running)

    async def _replay(self, group: str) -> Replay:
        # At most one replay of a group per _REPLAY_SPACING (real time: it bounds the CPU spent);
        # whoever asks meanwhile waits for this one, which then holds their tickets too.
        wait = self._replayed_at.get(group, -math.inf) + _REPLAY_SPACING - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self._replayed_at[group] = time.monotonic()
        view = await self.queue_view(group)
        now = self._clock()
        # In a thread: a long replay (tens of ms) must not hold up the event loop's other work,
        # leases' renewals among it.
        result = await asyncio.to_thread(replay, view, now)
        self._replays[group] = (now, result)
        return result

    async def ticket_wait(self, group: str, handle: str) -> tuple[int, float | None] | None:
        """(requests ahead, seconds still to wait) of this process's waiting ticket `handle`, or
        None when it is not waiting (granted, gone, or not queued yet)."""
        if handle not in self._queued:
            return None
        result = await self.group_replay(group)
        if handle not in result.position:  # queued after that replay
            result = await self.group_replay(group, max_age=0)
        if handle not in result.position:
            return None
        return result.position[handle], result.eta[handle]

    async def move(self, grant: Grant, avoid: str, on_hold: OnHold | None = None) -> Grant:
        """The replica of `grant` failed its request before answering: give its slot back and
        wait for one on another replica (`avoid` only if none other has a slot), in the place in
        line the request had. It waits like any other request: no replica gets more than its
        slots, and the wait has the demand's full max_wait_seconds."""
        self._held.pop(grant.lease_id, None)
        self._asked_early.pop(grant.lease_id, None)  # the handle's next lease is not the one asked
        demand = replace(grant.demand, avoid=avoid)
        return await self._wait_for_lease(demand, grant.lease_id, grant.enqueued_at, moving=True,
                                          completion_limit=grant.completion_limit, on_hold=on_hold)

    async def _wait_for_lease(
        self, demand: Demand, handle: str, enqueued_at: float, *, moving: bool,
        completion_limit: int | None = None, on_hold: OnHold | None = None,
    ) -> Grant:
        await self._ensure_listener()
        deadline = self._clock() + demand.max_wait_seconds
        bounded = not moving  # a moved request was admitted: no queue bound refuses it now
        preference = ",".join(demand.preference)
        stated = False  # whether the group's capacity was stated again during this call
        in_redis = False
        budget_left: float | None = None
        repeat = 0  # calls again after the first may find the handle queued or leased already
        first_queued = not moving  # a new request's first time in the queue: its wait is estimated
        queue_estimate: float | None = None
        held_by = ""  # the last reason a queued reply gave
        try:
            while True:
                future = asyncio.get_running_loop().create_future()
                self._waiters[handle] = future  # before the script: its grant may come at once
                in_redis = True
                tier_bound, total_bound = self._queue_bounds(demand, bounded)
                reply = await self._call(
                    "acquire", handle=handle, key=demand.key_id, pool=demand.tier, group=demand.group,
                    key_cap=demand.per_key_cap, pool_cap="" if demand.pool_cap is None else demand.pool_cap,
                    head_start=demand.head_start_seconds, borrow=int(demand.borrow),
                    max_queued_per_key=demand.max_queued_per_key if bounded else -1, enqueued_at=enqueued_at,
                    deadline=deadline, channel=self._channel, preference=preference, avoid=demand.avoid,
                    moving=int(moving),
                    report_unknown_capacity=int(self._on_unknown_group is not None and not stated),
                    association=demand.association, share=repr(float(demand.share)),
                    fair_share_weight=demand.fairshare_weight, half_life=self._half_life,
                    estimate=demand.estimate, budgets=budget_spec(demand.budgets, self._clock()),
                    rate_limits=rate_spec(demand.rate_limits), revocable=int(demand.revocable and demand.borrow),
                    max_queued_per_tier=tier_bound, max_queued_total=total_bound,
                    completion=demand.completion.spec() if demand.completion is not None and demand.budgets else "",
                    repeated=repeat,
                )
                repeat = 1
                state = Reply(int(reply[0]))
                if state == Reply.CAPACITY_UNKNOWN:
                    assert self._on_unknown_group is not None
                    await self._on_unknown_group()
                    stated = True
                    continue
                if state in (Reply.OVER_BUDGET, Reply.RATE_LIMITED):
                    in_redis = False
                    raise _limit_refusal(demand.budgets, demand.rate_limits, reply, self._clock())
                moving = False  # the old lease is given back: a call again must not repeat it
                budget_left = _budget_left(reply, state, budget_left)
                completion_limit = _completion_limit(reply, state, completion_limit)
                if state == Reply.GRANTED:
                    turn = _turn(reply[1], reply[2], reply[3])
                    break
                if state == Reply.QUEUE_FULL:
                    in_redis = False
                    bound = text(reply[2])
                    retry = await self._room_in(demand, bound)
                    if retry is None:  # no estimate: when the oldest must have left, within 30 s
                        retry = min(_MAX_RETRY_AFTER, int(reply[1]))
                    raise _queue_full(demand, self._max_queued_total, bound, retry)
                if len(reply) > _HELD_BY_AT:
                    held_by = text(reply[_HELD_BY_AT])
                    if on_hold is not None:
                        on_hold(held_by)
                self._queued.add(handle)
                if first_queued:
                    first_queued = False
                    queue_estimate = await self._estimate_unless_granted(demand.group, handle, enqueued_at, future)
                    if demand.refuse_if_late:
                        self._refuse_if_late(demand, queue_estimate)
                self._wake_keeper(sooner=len(self._queued) == 1)
                self._upkeep_after_hold(float(text(reply[2])) if len(reply) > 2 else 0.0)
                waited = await self._wait_turn(handle, future, deadline)
                if waited is None:
                    in_redis = False
                    raise QueueTimeout(
                        f"No capacity came free within {demand.max_wait_seconds:g} s, the longest its "
                        f"tier lets a request wait in the queue; the request was not started.",
                        await self._retry_for(demand),
                    )
                if waited.granted:
                    turn = waited
                    break
                bounded = False  # our own ticket expired under us: queue again, same place in line
        except BaseException:
            self._forget(handle)
            if in_redis:
                try:
                    await self._shielded(self._call("leave", handle, 0))
                except (RedisError, OSError):  # keep the original error; the ticket expires
                    logger.warning("admission: could not withdraw ticket %s", handle, exc_info=True)
            raise
        self._forget(handle)
        if completion_limit is not None and demand.completion is not None:
            # What acquire reserved and charged: the release settles against the same.
            demand = replace(demand, estimate=demand.completion.estimate(completion_limit))
        grant = Grant(handle, demand, turn.queued_seconds, turn.borrowed, turn.replica, enqueued_at, budget_left,
                      completion_limit, None if queue_estimate in (_NOT_WAITING, _UNMEASURED) else queue_estimate,
                      held_by)
        self._held[handle] = grant
        self._wake_keeper()
        return grant

    async def _room_in(self, demand: Demand, bound: str) -> int | None:
        """Retry-After for a full queue: when the wait estimate grants the first of the requests
        that fill it (the person's, the tier's or anyone's, by `bound`), so that one more fits;
        None when there is no estimate."""
        try:
            view = await self.queue_view(demand.group)
        except (RedisError, OSError):
            return None
        filling = {w.handle for w in view.waiting
                   if bound == "total" or (w.key == demand.key_id if bound == "key" else w.pool == demand.tier)}
        result = await asyncio.to_thread(replay, view, self._clock())
        etas = [eta for handle, eta in result.eta.items() if handle in filling and eta is not None]
        return retry_after_seconds(min(etas)) if etas and result.measured else None

    async def _retry_for(self, demand: Demand) -> int:
        """Retry-After for a request that timed out in the queue: the wait estimate of one like it
        arriving now (what a retry would wait, at most a minute)."""
        try:
            result = await self.wait_for_new(demand)
        except (RedisError, OSError):
            result = None
        if result is None or not result.measured:
            return max(1, min(_MAX_RETRY_AFTER, math.ceil(demand.max_wait_seconds)))
        return retry_after_seconds(result.newcomer_eta)

    async def _estimate_unless_granted(
        self, group: str, handle: str, enqueued_at: float, granted: asyncio.Future[_Turn]
    ) -> float | None:
        """_first_estimate, unless the ticket's turn comes first: a grant is never held up by it."""
        estimating = asyncio.get_running_loop().create_task(self._first_estimate(group, handle, enqueued_at))
        try:
            either: set[asyncio.Future[Any]] = {estimating, granted}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not estimating.done():
                await cancel_and_wait(estimating)  # (the replay it waited for goes on for others)
        return estimating.result() if not estimating.cancelled() else _NOT_WAITING

    async def _first_estimate(self, group: str, handle: str, enqueued_at: float) -> float | None:
        """The wait estimate of a ticket just queued, from when it queued: what it waited until
        the replay, and what the replay says is left (None: beyond the horizon; _UNMEASURED: no
        pace measured yet, or no estimate could be made: the request waits on regardless;
        _NOT_WAITING: granted meanwhile)."""
        try:
            result = await self.group_replay(group, max_age=0)
            if handle not in result.eta:  # that replay began before it queued
                result = await self.group_replay(group, max_age=0)
        except (RedisError, OSError):
            logger.warning("admission: no wait estimate for %s", handle, exc_info=True)
            return _UNMEASURED  # not known: a deadline is not refused on it
        except Exception:  # an estimate only informs: a fault in it must never fail the request
            logger.exception("admission: the wait estimate failed for %s", handle)
            return _UNMEASURED
        if not result.measured:
            return _UNMEASURED
        if handle not in result.eta:
            return _NOT_WAITING
        left = result.eta[handle]
        return None if left is None else left + max(0.0, result.at - enqueued_at)

    def _refuse_if_late(self, demand: Demand, estimate: float | None) -> None:
        """The client's bound is shorter than the wait estimate: refuse now, with the estimate
        (not on a guess: with no pace measured yet, it waits for its bound)."""
        if estimate in (_NOT_WAITING, _UNMEASURED) or (estimate is not None and estimate <= demand.max_wait_seconds):
            return
        said = "over an hour" if estimate is None else f"about {estimate:.1f} s"
        raise WillNotStartInTime(
            f"This request would wait {said} for a slot, longer than the {demand.max_wait_seconds * 1000:.0f} ms "
            "its X-GPUPortal-Max-Queue-Ms allows; it was not queued.",
            retry_after_seconds(estimate), estimate,
        )

    def _queue_bounds(self, demand: Demand, bounded: bool) -> tuple[int, int]:
        """acquire's tier and total bounds (-1: none)."""
        if not bounded:
            return -1, -1
        tier, total = demand.max_queued_per_tier, self._max_queued_total
        return (-1 if tier is None else tier), (-1 if total is None else total)

    def when_revoked(self, lease_id: str, callback: Callable[[], None] | None) -> None:
        """Call `callback` once if admission asks this (revocable, borrowed) lease back; None stops
        watching. A lease asked back before it was watched calls back at once."""
        if callback is None:
            self._revocations.pop(lease_id, None)
        elif lease_id in self._asked_early:
            del self._asked_early[lease_id]
            callback()
        else:
            self._revocations[lease_id] = callback

    def _revoke(self, lease_id: str) -> None:
        watcher = self._revocations.pop(lease_id, None)
        if watcher is not None:
            watcher()
        elif self.on_revoke is not None:
            self.on_revoke(lease_id)
        else:  # perhaps before its grant's reply was read: kept for when_revoked
            self._asked_early[lease_id] = None
            while len(self._asked_early) > _TICK_BATCH:  # bounded: released leases are never watched
                del self._asked_early[next(iter(self._asked_early))]

    async def renew(self, grant: Grant) -> bool:
        """Push the lease's expiry out by one TTL (the keeper does this for every held lease);
        False if it had already expired."""
        lost, _ = await self._call("tick", 1, grant.lease_id)
        return not lost

    async def release(self, grant: Grant, also: Sequence[Command] = (), charge: float = 0.0) -> None:
        """Give the lease back (idempotent) and settle the demand's association's charge: the
        request really used ``charge`` weighted tokens, its grant charged the estimate (not
        idempotent: once). Survives the caller being cancelled meanwhile. If Redis cannot be
        reached this raises, but the lease is no longer renewed either. ``also`` adds the
        caller's own commands (its accounting) to the same round trip."""
        self._held.pop(grant.lease_id, None)
        self._asked_early.pop(grant.lease_id, None)
        self._stop_keeper_if_idle()
        demand = grant.demand
        release = self._eval(
            "release", handle=grant.lease_id, association=demand.association, used=charge,
            estimate=demand.estimate, budgets=budget_spec(demand.budgets, self._clock()),
            rate_limits=rate_spec(demand.rate_limits), half_life=self._half_life, retried="",
        )
        await self._shielded(self._send(release, *also))

    def charge_command(self, association: str, amount: float) -> Command:
        """A fair-share charge on its own (negative: a refund); send it with `send`."""
        return self._eval(
            "release", handle="", association=association, used=amount, estimate=0, budgets="", rate_limits="",
            half_life=self._half_life, retried="",
        )

    def settle_command(self, demand: Demand, used: float, lease_id: str | None) -> Command:
        """The release of lease `lease_id` sent again, its reply never read: it gives the lease
        back if still held and charges `used` weighted tokens (less the estimate its grant charged)
        to the demand's association and budgets, unless the first try ran (release.lua). With
        no lease id (the Redis that had it lost its data since), a charge alone. Send it with `send`."""
        return self._eval(
            "release", handle=lease_id or "", association=demand.association, used=used,
            estimate=demand.estimate, budgets=budget_spec(demand.budgets, self._clock()),
            rate_limits=rate_spec(demand.rate_limits) if lease_id else "", half_life=self._half_life,
            retried="1" if lease_id else "",
        )

    async def send(self, *commands: Command) -> list[Any]:
        """One round trip of these commands; functions Redis has forgotten are loaded again."""
        return await self._send(*commands)

    async def restore_usage(self, usage: Mapping[str, float]) -> bool:
        """Add the saved fair-share usage (association -> usage decayed to now) back into a
        Redis that lost it; False when this Redis already has it."""
        pairs = [part for association, amount in usage.items() for part in (association, repr(amount))]
        return int(await self._call("restore", *pairs)) == 1

    async def fair_share_usage(self) -> tuple[dict[str, float], float, dict[str, float]]:
        """Everyone's decayed usage now: (association -> usage, the total, association -> S)."""
        ns = self._ns
        stored_usage, stored_shares = await self._lane.execute(
            ("HGETALL", ns + keyspace.ADMISSION_FAIR_SHARE_USAGE), ("HGETALL", ns + keyspace.ADMISSION_FAIR_SHARES)
        )
        usage, shares = pairs(stored_usage), pairs(stored_shares)
        total, half_life = usage.pop("*", None), shares.pop("*", None)
        life = float(half_life) if half_life else float(self._half_life)
        now = self._clock()

        def value(stored: Any) -> float:
            amount, at = text(stored).split("|")
            return fair_share.decayed(float(amount), float(at), now, life)

        return (
            {name: value(kept) for name, kept in usage.items()},
            value(total) if total else 0.0,
            {name: float(share) for name, share in shares.items()},
        )

    @contextlib.asynccontextmanager
    async def held(self, demand: Demand) -> AsyncIterator[Grant]:
        """Acquire; the lease is renewed while the block runs and released however it ends."""
        grant = await self.acquire(demand)
        try:
            yield grant
        finally:
            try:
                await self.release(grant)
            except (RedisError, OSError):  # no longer renewed, so it expires within one TTL
                logger.warning(
                    "admission: could not release lease %s", grant.lease_id, exc_info=True
                )

    async def count_request(self, rate_limits: tuple[RateLimit, ...]) -> None:
        """Count a request that holds no engine slot (tokenize) against its rate limits alone;
        RateLimited when one refuses it."""
        if not rate_limits:
            return
        reply = await self._call("rate", rate_spec(rate_limits))
        if int(reply[0]) == Reply.RATE_LIMITED:
            raise _limit_refusal((), rate_limits, reply, self._clock())

    async def stats(self) -> Stats:
        """Live counts per capacity group, tier and key, and the longest current wait (seconds).
        Reaps dead processes' leases first, so it is also the place to watch them vanish."""
        return parse_stats(await self._call("stats"), self._clock())

    async def close(self) -> None:
        """Stop background work, fail pending acquires, give back leases still held."""
        held = list(self._held.values())
        self._held.clear()
        self._queued.clear()
        for task in (self._keeper, self._listener):
            if task is not None:
                await cancel_and_wait(task)
        self._keeper = self._listener = None
        for future in self._waiters.values():
            if not future.done():
                future.set_exception(RuntimeError("admission closed"))
        for grant in held:
            with contextlib.suppress(RedisError, OSError):
                await self.release(grant)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._pubsub is not None:
            await self._pubsub.aclose()  # type: ignore[no-untyped-call]
            self._pubsub = None
        if self._owns_lane:
            await self._lane.aclose()

    # -- waiting --------------------------------------------------------------------------------

    async def _wait_turn(
        self, handle: str, future: asyncio.Future[_Turn], deadline: float
    ) -> _Turn | None:
        """The grant (or _GONE), or None after leaving the queue at the deadline. The deadline is
        on the injected clock, so it is re-read at least every recheck."""
        while not future.done():
            remaining = deadline - self._clock()
            if remaining <= 0:
                self._queued.discard(handle)
                reply = await self._shielded(self._call("leave", handle, 1))
                if int(reply[0]) == 1:  # granted just before the deadline: keep it
                    return _turn(reply[1], reply[2], reply[3])
                return None
            await asyncio.wait([future], timeout=min(remaining, self._recheck))
        return future.result()

    def _forget(self, handle: str) -> None:
        self._waiters.pop(handle, None)
        self._queued.discard(handle)
        self._stop_keeper_if_idle()

    # -- pub/sub --------------------------------------------------------------------------------

    async def _ensure_listener(self) -> None:
        if self._listener is not None and not self._listener.done():
            return
        async with self._listen_lock:
            if self._listener is not None and not self._listener.done():
                return
            if self._pubsub is None:
                self._pubsub = self._redis.pubsub()
            subscribed = asyncio.Event()
            await self._pubsub.subscribe(self._channel)
            self._listener = asyncio.get_running_loop().create_task(self._listen(subscribed))
            # Queue only once subscribed, or the first grant could be published to nobody (the
            # recheck would still find it, a second later).
            # (asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation.)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5.0):
                    await subscribed.wait()

    async def _listen(self, subscribed: asyncio.Event) -> None:
        assert self._pubsub is not None
        reconnecting = False
        while True:
            try:
                message = await self._pubsub.get_message(timeout=None)
            except asyncio.CancelledError:
                raise
            except Exception:  # redis-py reconnects and resubscribes on the next read
                if not reconnecting:
                    logger.warning("admission pub/sub read failed; retrying", exc_info=True)
                reconnecting = True
                await asyncio.sleep(_UPKEEP_RETRY_SECONDS)
                continue
            if reconnecting:
                # Redis is back, perhaps empty: upkeep now, so that this process's leases count
                # again (retake) within the restart hold, and its lost tickets queue again.
                reconnecting = False
                self._upkeep_now()
            if message is None:
                continue
            if message["type"] == "subscribe":
                subscribed.set()
            elif message["type"] == "message":
                data = text(message["data"])
                if data.startswith("revoke|"):
                    self._revoke(data.removeprefix("revoke|"))
                    continue
                handle, queued, borrowed, replica = data.split("|")
                self._queued.discard(handle)
                future = self._waiters.get(handle)
                if future is not None and not future.done():
                    future.set_result(_turn(borrowed, queued, replica))

    # -- keeper ---------------------------------------------------------------------------------

    # The keeper is woken only when its interval must change: for the first waiting ticket (the
    # short recheck) and when nothing is left to keep (it stops). Waking it on every request
    # cost a task switch and a timer each time.

    def _wake_keeper(self, sooner: bool = False) -> None:
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.get_running_loop().create_task(self._keep())
        elif sooner:
            self._kick.set()

    def _stop_keeper_if_idle(self) -> None:
        if not self._held and not self._queued:
            self._kick.set()

    def _upkeep_after_hold(self, until: float) -> None:
        """The group holds its grants until `until` (after a Redis restart): upkeep then, which
        pumps, so this process's waiters are granted at its end, not at their next recheck."""
        delay = until - self._clock()
        if until and delay > 0 and not self._hold_upkeep:
            self._hold_upkeep = True
            asyncio.get_running_loop().call_later(delay, self._after_hold)

    def _after_hold(self) -> None:
        self._hold_upkeep = False
        self._upkeep_now()

    def _upkeep_now(self) -> None:
        if self._held or self._queued:
            self._due = True
            self._wake_keeper(sooner=True)

    async def _keep(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        failing = False
        while self._queued or self._held:
            interval = self._recheck if self._queued else self._ttl / 3
            delay = 0.0 if self._due else last + interval - loop.time()
            if delay > 0:
                self._kick.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._kick.wait()
                continue
            self._due = False
            last = loop.time()
            try:
                await self._tick()
            except (RedisError, OSError):
                if not failing:  # once per outage: it retries every _UPKEEP_RETRY_SECONDS
                    logger.warning("admission upkeep failed; retrying", exc_info=True)
                failing = True
                last = loop.time() - interval + _UPKEEP_RETRY_SECONDS
            else:
                failing = False

    async def _tick(self) -> None:
        leases, tickets = list(self._held), list(self._queued)
        while True:
            some_leases, leases = leases[:_TICK_BATCH], leases[_TICK_BATCH:]
            room = _TICK_BATCH - len(some_leases)
            some_tickets, tickets = tickets[:room], tickets[room:]
            await self._tick_batch(some_leases, some_tickets)
            if not leases and not tickets:
                return

    async def _tick_batch(self, leases: list[str], tickets: list[str]) -> None:
        lost, news = await self._call("tick", len(leases), *leases, *tickets)
        if lost:
            await self._retake([text(handle) for handle in lost])
        for i in range(0, len(news), 5):
            handle = text(news[i])
            if handle not in self._queued:
                continue  # settled meanwhile
            self._queued.discard(handle)
            future = self._waiters.get(handle)
            if future is not None and not future.done():
                granted = int(news[i + 1]) == 1
                future.set_result(_turn(news[i + 2], news[i + 3], news[i + 4]) if granted else _GONE)

    async def _retake(self, handles: list[str]) -> None:
        """Leases found missing at renewal whose requests still run: Redis restarted empty, or
        this process stalled past the TTL. The engine is still busy with them, so they count
        again (even above a cap) until they end, and the next grants wait for them."""
        grants = [self._held[handle] for handle in handles if handle in self._held]
        if not grants:
            return
        logger.warning("%d lease(s) were missing at renewal; counting them again", len(grants))
        await self._send(*(
            self._eval(
                "retake", handle=g.lease_id, key=g.demand.key_id, pool=g.demand.tier, group=g.demand.group,
                replica=g.replica, borrowed=int(g.borrowed), enqueued_at=g.enqueued_at,
            )
            for g in grants
        ))

    async def _on_new_master(self, run_id: str, exchange: Exchange) -> None:
        """The lane reached a master it had not met (Sentinel promoted a replica): before anything
        else goes there, hold every group's grants as after a restart (failover.lua; the first
        process to get there does), loading the functions first if this master lacks them, and
        upkeep at once so this process's leases the master lacks count again (retake)."""
        call = self._eval("failover", run_id, RESTART_HOLD_SECONDS)
        (reply,) = await exchange(call)
        if _function_missing(reply):
            reply = (await exchange(("FUNCTION", "LOAD", "REPLACE", _LIBRARY.code), call))[1]
        if isinstance(reply, Exception):  # not worth refusing the master for: its grants go on unheld
            logger.warning("admission: could not hold grants on the new Redis master: %s", reply)
        self._upkeep_now()

    # -- plumbing -------------------------------------------------------------------------------

    async def _call(self, name: str, *args: Arg, **named: Arg) -> Any:
        return (await self._send(self._eval(name, *args, **named)))[0]

    def _eval(self, name: str, *args: Arg, **named: Arg) -> Command:
        """The call of script `name`: its arguments by name if NAMED_ARGUMENTS has it, else in order."""
        if name in NAMED_ARGUMENTS:
            if args:
                raise TypeError(f"{name} takes its arguments by name")
            args = _in_order(name, named)
        elif named:
            raise TypeError(f"{name} takes its arguments in order")
        return ("FCALL", _LIBRARY.functions[name], 1, self._ns, *self._args(*args))

    async def _send(self, *commands: Command) -> list[Any]:
        """One round trip. If Redis does not know the functions (restarted empty, flushed), the
        library is loaded and only the commands that missed are sent again; any other error reply
        is raised."""
        replies = await self._lane.execute(*commands)
        forgotten = [i for i, reply in enumerate(replies) if _function_missing(reply)]
        if forgotten:
            error = first_error(await self._lane.execute(("FUNCTION", "LOAD", "REPLACE", _LIBRARY.code)))
            if error is not None:
                raise error
            again = await self._lane.execute(*(commands[i] for i in forgotten))
            for i, reply in zip(forgotten, again, strict=True):
                replies[i] = reply
        error = first_error(replies)
        if error is not None:
            raise error
        return replies

    def _args(self, *args: Arg) -> list[Arg]:
        return [self._clock(), self._ttl, self._ticket_ttl, self._reserve, *args]

    async def _shielded(self, call: Coroutine[Any, Any, Any]) -> Any:
        """Run ``call`` to completion even if our caller is cancelled meanwhile (cleanup must
        reach Redis: a disconnecting client cancels the coroutine doing it)."""
        task = asyncio.get_running_loop().create_task(call)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return await asyncio.shield(task)
