"""Load generation with httpx.AsyncClient: streaming chat requests timed from the client side.

Times are ``time.perf_counter()`` seconds. TTFT is the time from sending to the first chunk that
carries content (a chat stream's opening ``role`` chunk does not count). A request cancelled by
its caller (a phase deadline) keeps what it saw so far and is marked ``cancelled``; leaving the
``async with`` closes the connection, so the gateway and the engine see the client go away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from fairness.store import keyspace

QUEUED_HEADER = "x-gpuportal-queued-ms"
Body = dict[str, Any]


def now() -> float:
    return time.perf_counter()


@dataclass(frozen=True)
class Target:
    """Where requests go: the engine directly (no secret) or gateway URLs (round-robin)."""

    urls: tuple[str, ...]
    secret: str | None = None
    label: str = ""

    def url(self, n: int) -> str:
        return self.urls[n % len(self.urls)]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"} if self.secret else {}


@dataclass
class Call:
    client: str
    kind: str
    sent: float = 0.0
    headers_at: float | None = None
    first_token_at: float | None = None
    done_at: float | None = None
    tokens: int = 0
    status: int = 0
    error: str | None = None
    queued_ms: int | None = None  # the gateway's own account of the queue wait, when it sends one
    token_times: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.done_at is not None and self.error is None and self.status == 200

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.sent

    @property
    def latency(self) -> float | None:
        return None if self.done_at is None else self.done_at - self.sent

    def ttft_at_least(self, at: float) -> float:
        """TTFT, or a lower bound for a request still without a token at time ``at``."""
        ttft = self.ttft
        return ttft if ttft is not None else max(0.0, at - self.sent)


def make_client(connections: int = 256) -> httpx.AsyncClient:
    # trust_env=False: loopback only, whatever proxy the environment names.
    return httpx.AsyncClient(
        timeout=httpx.Timeout(600.0, connect=10.0),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        trust_env=False,
    )


def chat_body(model: str, text: str, max_tokens: int, stream: bool = True) -> Body:
    body: Body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "ignore_eos": True,  # exactly max_tokens tokens: fixed-size jobs
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def chat(client: httpx.AsyncClient, target: Target, n: int, body: Body, call: Call,
               keep_times: bool = True) -> Call:
    """Send one chat completion and fill ``call`` as the answer arrives."""
    call.sent = now()
    try:
        async with client.stream("POST", f"{target.url(n)}/v1/chat/completions", json=body,
                                 headers=target.headers()) as resp:
            call.headers_at = now()
            call.status = resp.status_code
            queued = resp.headers.get(QUEUED_HEADER)
            if queued is not None and queued.isdigit():
                call.queued_ms = int(queued)
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                call.error = f"HTTP {resp.status_code}: {text[:200]}"
                call.done_at = now()
                return call
            if not body.get("stream"):
                payload = json.loads(await resp.aread())
                call.first_token_at = call.done_at = now()
                call.tokens = int((payload.get("usage") or {}).get("completion_tokens") or 0)
                return call
            usage_tokens = None
            async for line in resp.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if event.get("usage"):
                    usage_tokens = int(event["usage"].get("completion_tokens") or 0)
                for choice in event.get("choices") or ():
                    if (choice.get("delta") or {}).get("content"):
                        t = now()
                        if call.first_token_at is None:
                            call.first_token_at = t
                        call.tokens += 1
                        if keep_times:
                            call.token_times.append(t)
            if usage_tokens is not None:
                call.tokens = usage_tokens
            call.done_at = now()
    except asyncio.CancelledError:
        call.error = "cancelled"
        raise
    except (httpx.HTTPError, ValueError) as exc:
        call.error = f"{type(exc).__name__}: {exc}"
        call.done_at = now()
    return call


async def closed_loop(
    client: httpx.AsyncClient,
    name: str,
    kind: str,
    target: Target,
    body: Callable[[int], Body],
    calls: list[Call],
    *,
    stop_at: float | None = None,
    think: Callable[[], float] = lambda: 0.0,
    start_delay: float = 0.0,
    keep_times: bool = True,
) -> None:
    """One user: send, wait for the whole answer, think, repeat until ``stop_at`` (or until
    cancelled). A failed request backs off briefly instead of spinning."""
    await asyncio.sleep(start_delay)
    n = 0
    while stop_at is None or now() < stop_at:
        call = Call(name, kind)
        calls.append(call)
        await chat(client, target, n, body(n), call, keep_times)
        n += 1
        pause = think()
        if call.error is not None:
            pause = max(pause, 0.05)
        if pause > 0:
            await asyncio.sleep(pause)


def uniform_think(low: float, high: float, seed: int) -> Callable[[], float]:
    rng = random.Random(seed)
    return lambda: rng.uniform(low, high)


async def cancel_all(tasks: list[asyncio.Task[Any]], timeout: float = 15.0) -> None:
    """Cancel and wait. A task can swallow one cancellation (redis-py's asyncio client has
    been seen to, mid-command), so cancel again until every task has ended, within a deadline."""
    deadline = now() + timeout
    pending = [t for t in tasks if not t.done()]
    while pending:
        for task in pending:
            task.cancel()
        _, still = await asyncio.wait(pending, timeout=0.5)
        pending = list(still)
        if pending and now() > deadline:
            raise RuntimeError(f"{len(pending)} task(s) ignored cancellation for {timeout}s")
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log it as never retrieved


async def sample_engine(client: httpx.AsyncClient, engine_url: str, period: float,
                        out: list[dict[str, Any]]) -> None:
    """Poll enginesim's /sim/stats until cancelled: running, waiting and the token counter."""
    while True:
        try:
            resp = await client.get(f"{engine_url}/sim/stats", timeout=2.0)
            stats = resp.json()
            out.append({
                "t": now(), "running": stats["running"], "waiting": stats["waiting"],
                "generation_tokens": stats["generation_tokens"],
                "peak_running": stats["peak_running"],
            })
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        await asyncio.sleep(period)


async def reset_peak(client: httpx.AsyncClient, engine_url: str) -> dict[str, Any]:
    resp = await client.post(f"{engine_url}/sim/reset-peak", json={}, timeout=5.0)
    result: dict[str, Any] = resp.json()
    return result


async def engine_stats(client: httpx.AsyncClient, engine_url: str) -> dict[str, Any]:
    resp = await client.get(f"{engine_url}/sim/stats", timeout=5.0)
    result: dict[str, Any] = resp.json()
    return result


ADMISSION_COUNTERS = (
    keyspace.ADMISSION_IN_FLIGHT_BY_GROUP, keyspace.ADMISSION_QUEUED_BY_GROUP, keyspace.ADMISSION_IN_FLIGHT_BY_KEY,
    keyspace.ADMISSION_QUEUED_BY_KEY, keyspace.ADMISSION_IN_FLIGHT_BY_POOL, keyspace.ADMISSION_BORROWED_BY_POOL,
    keyspace.ADMISSION_QUEUED_BY_POOL,
)


async def admission_counts(client: Any, prefix: str) -> dict[str, dict[str, int]]:
    """The gateway's admission counters: in flight and queued per group, tier ("pool") and key.
    Read-only HGETALLs of the hashes ``fairness/scheduling/lua/lib/state.lua`` documents (the stats script would
    also reap and pump, which an observer should not do). ``client`` decodes responses."""
    ns = f"{prefix}:{{adm}}:"
    async with client.pipeline(transaction=False) as pipe:
        for name in ADMISSION_COUNTERS:
            pipe.hgetall(ns + name)
        replies = await pipe.execute()
    return {name: {k: int(v) for k, v in reply.items()}
            for name, reply in zip(ADMISSION_COUNTERS, replies, strict=True)}


async def sample_admission(redis_url: str, prefix: str, period: float,
                           out: list[dict[str, Any]]) -> None:
    """Poll ``admission_counts`` until cancelled."""
    import redis
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    try:
        while True:
            with contextlib.suppress(OSError, ValueError, redis.RedisError):
                out.append({"t": now(), **await admission_counts(client, prefix)})
            await asyncio.sleep(period)
    finally:
        await client.aclose()


async def admission_settled(redis_url: str, prefix: str, timeout: float) -> dict[str, int]:
    """Wait until no lease is held in any group; what is still held after ``timeout``."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    try:
        deadline = now() + timeout
        while True:
            held = (await admission_counts(client, prefix))["gin"]
            if not held or now() > deadline:
                return held
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux /proc), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def lease_audit(redis_url: str, prefix: str, settle: float = 10.0,
                      renew_window: float = 12.0) -> dict[str, Any]:
    """After the clients have gone: are all leases back? If some are still held after
    ``settle`` seconds, watch their expiries for ``renew_window`` (longer than the gateway's
    renewal interval, TTL / 3): an expiry that moves forward is a lease a live gateway keeps
    renewing for a request that no longer exists, i.e. a slot lost until that process exits."""
    import redis.asyncio

    held = await admission_settled(redis_url, prefix, settle)
    if not held:
        return {"held": {}, "renewed": 0}
    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    ns = f"{prefix}:{{adm}}:"
    try:
        before = dict(await client.zrange(ns + keyspace.ADMISSION_LEASE_EXPIRY, 0, -1, withscores=True))
        await asyncio.sleep(renew_window)
        after = dict(await client.zrange(ns + keyspace.ADMISSION_LEASE_EXPIRY, 0, -1, withscores=True))
        leases = [await client.hgetall(ns + keyspace.ADMISSION_LEASE + h) for h in list(after)[:10]]
    finally:
        await client.aclose()
    renewed = sum(1 for h, at in after.items() if h in before and at > before[h])
    return {"held": held, "renewed": renewed, "leases": leases}

