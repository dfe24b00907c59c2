"""Replica choice: conversation affinity by rendezvous hashing, bounded load, health.

Conversation key: the `X-Session-ID` header when given; otherwise derived from the body, so every
turn of one chat reaches the replica holding its prefix in cache without client changes:
  - chat: the model and every message up to and including the first `user` one (system prompts
    and the first question). Each turn resends the history and only appends, so this opening is
    the same in every turn. A string and a list of text parts with the same text count alike;
    non-text parts (images, audio) count by their JSON;
  - completions: the model and the prompt's first PROMPT_PREFIX_CHARS characters (or that many
    token ids); a batch counts by its first prompt. Prompts sharing that head share a key on
    purpose: they share a cacheable prefix too. An empty prompt has no key (least loaded wins).

Choice: the key ranks replicas by highest random weight (rendezvous hashing), so adding or
removing one of N moves only the ~1/N of conversations it takes or held. Bounded load (Mirrokni
et al.) skips a replica that would exceed ceil((1 + ε) · (in flight + 1) / N) or has no free slot
for the next in the key's order; all skipped, the least loaded by in_flight / max_num_seqs wins.

Load: each gateway process owns a hash (keyspace.load_counts: replica -> count) whose TTL its
heartbeat renews while it has anything in flight; keyspace.LOAD_PROCESSES lists the processes.
A snapshot sums the live hashes and forgets expired ones, so a SIGKILLed gateway's counts vanish
within one TTL with nobody cleaning up after it. The counts only steer; admission's leases are
the hard caps, so a transient miscount of one costs a slightly worse choice, nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from fairness.scheduling import health
from fairness.scheduling.directory import ReplicaInfo
from fairness.store import keyspace
from fairness.store.redis_lane import RedisLane, first_error

log = logging.getLogger(__name__)

PROMPT_PREFIX_CHARS = 256
DEFAULT_EPSILON = 0.25
DEFAULT_BOUND_FLOOR = 0.375
DEFAULT_LOAD_TTL = 10.0


# -- conversation key ---------------------------------------------------------------------------


def conversation_key(
    payload: Mapping[str, Any],
    session_id: str | None = None,
    prompt_chars: int = PROMPT_PREFIX_CHARS,
) -> str | None:
    """The affinity key of a chat or completions request body; None when it has none."""
    if session_id and session_id.strip():
        return "s:" + _digest(session_id.strip())
    model = payload.get("model")
    messages = payload.get("messages")
    if isinstance(messages, list):
        opening = _opening(messages)
        return "c:" + _digest(model, opening) if opening else None
    head = _prompt_head(payload.get("prompt"), prompt_chars)
    return "p:" + _digest(model, head) if head else None


def _digest(*parts: Any) -> str:
    canonical = json.dumps(parts, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


def _opening(messages: list[Any]) -> list[list[str]]:
    opening = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role", ""))
        opening.append([role, _text(message.get("content"))])
        if role == "user":
            break
    return opening


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else [content]
    return "\n".join(_part_text(part) for part in parts if part is not None)


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("type") == "text":
        return str(part.get("text", ""))
    return json.dumps(part, sort_keys=True, separators=(",", ":"))


def _prompt_head(prompt: Any, chars: int) -> list[Any] | None:
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        prompt = prompt[0]  # a batch: its first prompt stands for it
    if isinstance(prompt, str) and prompt:
        return ["text", prompt[:chars]]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt[:chars]):
        return ["tokens", prompt[:chars]]
    return None


# -- rendezvous order and bounded load ----------------------------------------------------------


def _weight(key: str, name: str) -> int:
    digest = hashlib.blake2b(f"{key}\x00{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def preference(replicas: Sequence[ReplicaInfo], key: str) -> list[ReplicaInfo]:
    """All replicas, the key's favourite first (highest random weight; name breaks a tie)."""
    return sorted(replicas, key=lambda r: (_weight(key, r.name), r.name), reverse=True)


def choose(
    candidates: Sequence[ReplicaInfo],
    key: str | None,
    load: Mapping[str, int],
    epsilon: float = DEFAULT_EPSILON,
    floor: float = DEFAULT_BOUND_FLOOR,
) -> list[ReplicaInfo]:
    """Every candidate in the order to try: the first is the choice, the second the retry.

    The bound never falls below `floor` × a replica's slots: while a replica is that lightly
    loaded, another sequence barely slows its batch, and moving a conversation would re-prefill
    its whole history elsewhere — the prefix cache is worth more than the balance.
    """

    def busy(replica: ReplicaInfo) -> int:
        return max(0, load.get(replica.name, 0))

    def utilisation(replica: ReplicaInfo) -> float:
        return busy(replica) / max(1, replica.max_num_seqs)

    if key is None:
        return sorted(candidates, key=lambda r: (utilisation(r), r.name))
    if not candidates:
        return []
    total = sum(busy(r) for r in candidates)
    # The tolerance keeps float noise from lifting an exact product to the next integer.
    bound = math.ceil((1 + epsilon) * (total + 1) / len(candidates) - 1e-9)
    order = preference(candidates, key)
    fits = [
        r for r in order
        if busy(r) + 1 <= max(bound, math.floor(floor * r.max_num_seqs)) and busy(r) < r.max_num_seqs
    ]
    taken = {r.name for r in fits}
    # sorted() is stable: among equally loaded replicas the key's own order still decides.
    rest = sorted((r for r in order if r.name not in taken), key=utilisation)
    return fits + rest


async def plan(
    book: LoadBook,
    replicas: Sequence[ReplicaInfo],
    key: str | None,
    epsilon: float = DEFAULT_EPSILON,
    floor: float = DEFAULT_BOUND_FLOOR,
) -> list[ReplicaInfo]:
    """`choose` over the healthy replicas with the shared load, in one Redis round trip.
    All marked down, all are tried: the marks may be stale (a probe timing out under load).

    This process's own counts come from memory, not from its published copy: requests that
    arrive together must see each other, or a burst would all pick the same replica."""
    names = [r.name for r in replicas]
    if not names:
        return []
    # EVAL, not EVALSHA: the script would have to be loaded first after every Redis restart, and
    # Redis caches the compiled script by its text anyway.
    marks, counts = await book.lane.execute(
        ("MGET", *(health.key(r) for r in replicas)),
        ("EVAL", SNAPSHOT_LUA, 1, keyspace.ROUTING_NAMESPACE, book.process_id, *names),
    )
    error = first_error([marks, counts])
    if error is not None:
        raise error
    up = health.from_marks(replicas, marks)
    candidates = [r for r in replicas if r.name in up] or list(replicas)
    load = {name: int(count) + book.local[name] for name, count in zip(names, counts, strict=True)}
    return choose(candidates, key, load, epsilon, floor)


# -- shared in-flight counts --------------------------------------------------------------------

# KEYS[1] the routing namespace (keyspace.ROUTING_NAMESPACE); ARGV[1] a process id to leave out ("" for none), ARGV[2..]
# the replica names. Returns each name's in-flight count summed over the other live processes,
# and drops the expired ones from KEYS[1].."inflight-procs".
SNAPSHOT_LUA = """
local procs = KEYS[1] .. 'inflight-procs'
local names = {unpack(ARGV, 2)}
local totals = {}
for i = 1, #names do totals[i] = 0 end
for _, proc in ipairs(redis.call('SMEMBERS', procs)) do
  local hash = KEYS[1] .. 'inflight:' .. proc
  if redis.call('EXISTS', hash) == 0 then
    redis.call('SREM', procs, proc)
  elseif proc ~= ARGV[1] then
    local counts = redis.call('HMGET', hash, unpack(names))
    for i = 1, #names do totals[i] = totals[i] + (tonumber(counts[i]) or 0) end
  end
end
for i = 1, #names do totals[i] = math.max(totals[i], 0) end
return totals
"""


class LoadBook:
    """One per gateway process: its in-flight forwards per replica, published for all of them.

    The in-memory counts are the truth; Redis holds a copy the other processes can read, written
    in the background after each change (coalesced) and renewed every ttl / 3 while anything
    is in flight; idle, it sends nothing.
    """

    def __init__(
        self, redis: Redis, *, ttl: float = DEFAULT_LOAD_TTL, process_id: str = "",
        lane: RedisLane | None = None,
    ) -> None:
        # Reads and writes go over the process's multiplexed connection when it passes one in.
        self.lane = lane or RedisLane.like(redis)
        self._owns_lane = lane is None
        self.ttl = ttl
        self.process_id = process_id or uuid.uuid4().hex
        self.hash = keyspace.load_counts(self.process_id)
        self.local: Counter[str] = Counter()
        self._heartbeat: asyncio.Task[None] | None = None
        self._publisher: asyncio.Task[None] | None = None
        self._dirty = False

    async def snapshot(self, names: Sequence[str]) -> dict[str, int]:
        """In-flight forwards per replica over all live gateway processes."""
        if not names:
            return {}
        (counts,) = await self.lane.execute(
            ("EVAL", SNAPSHOT_LUA, 1, keyspace.ROUTING_NAMESPACE, "", *names)
        )
        if isinstance(counts, Exception):
            raise counts
        return dict(zip(names, map(int, counts), strict=True))

    def add(self, name: str) -> None:
        self.local[name] += 1
        self._changed()

    def done(self, name: str) -> None:
        if self.local[name] <= 0:
            return  # released twice: the first release already counted
        self.local[name] -= 1
        if not self.local[name]:
            del self.local[name]
        self._changed()

    def _changed(self) -> None:
        """Publish soon, without making the request wait: changes made while a publish is on
        its way are coalesced into the next one, so a busy process writes far less often than
        it forwards."""
        self._dirty = True
        if self._publisher is None or self._publisher.done():
            self._publisher = asyncio.get_running_loop().create_task(self._publish())
        if self.local and (self._heartbeat is None or self._heartbeat.done()):
            self._heartbeat = asyncio.get_running_loop().create_task(self._beat_while_busy())

    async def _publish(self) -> None:
        while self._dirty:
            self._dirty = False
            try:
                await self.beat()
            except (RedisError, OSError):
                log.warning("could not publish the in-flight counts", exc_info=True)
                return  # the heartbeat retries

    async def beat(self) -> None:
        """Rewrite the copy from the in-memory counts and renew its TTL.

        Rewriting, not just renewing, heals what increments cannot: a copy that expired while
        the loop stalled, an add or done cancelled before it reached Redis, a Redis restarted
        empty. A write racing the rewrite can leave the copy one off until the next beat.
        """
        commands: list[tuple[Any, ...]] = [("MULTI",), ("DEL", self.hash)]
        if self.local:
            fields = [part for name, count in self.local.items() for part in (name, count)]
            commands += [
                ("HSET", self.hash, *fields),
                ("PEXPIRE", self.hash, _ms(self.ttl)),
                ("SADD", keyspace.LOAD_PROCESSES, self.process_id),
            ]
        replies = await self.lane.execute(*commands, ("EXEC",))
        error = first_error(replies)
        if error is not None:
            raise error

    async def close(self, *, withdraw: bool = False) -> None:
        """Stop publishing. `withdraw` removes the published counts at once (a clean shutdown);
        otherwise they expire within one TTL."""
        for task in (self._heartbeat, self._publisher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._heartbeat = self._publisher = None
        try:
            if withdraw:
                self.local.clear()
                await self.beat()
        finally:
            if self._owns_lane:
                await self.lane.aclose()

    async def settled(self) -> None:
        """Wait until the latest counts are published (tests and shutdown)."""
        while self._publisher is not None and not self._publisher.done():
            await self._publisher

    async def _beat_while_busy(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                await self.beat()
            except (RedisError, OSError):
                log.warning("could not refresh the in-flight counts; retrying", exc_info=True)
            if not self.local:
                return


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
