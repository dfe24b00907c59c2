"""The fair-share benchmark's load and measures: backlogged users through the gateway, seeded
usage, the gateway's books sampled from Redis, and weighted service per user.

Weighted service is what fair share charges: w_p x prompt tokens + w_c x completion tokens (the
gateways' GP_FAIRSHARE_WEIGHT_PROMPT / _COMPLETION, read from this environment, which they
inherit). Client side, a completion token counts w_c when it arrives and a request's prompt w_p x
its prompt tokens at its first token; the gateway charges the whole request when it ends.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench import load, measures
from bench.harness import Portal
from bench.load import Call, Target

W_PROMPT = float(os.environ.get("GP_FAIRSHARE_WEIGHT_PROMPT", "1"))
W_COMPLETION = float(os.environ.get("GP_FAIRSHARE_WEIGHT_COMPLETION", "2"))
PROMPT = "Tell me a long story about a lighthouse keeper."


@dataclass(frozen=True)
class User:
    name: str
    max_tokens: int
    outstanding: int  # requests kept in flight or queued (closed loops without think time)


@dataclass
class Run:
    mode: str  # "today" or "fair share"
    weight: float  # the tier's fairshare_weight_seconds
    t0: float  # load started (perf_counter)
    end: float  # load cut off
    t0_wall: float  # time.time() at t0: the gateway's clock, for the books
    calls: list[Call]
    prompt_tokens: int
    seeded: dict[str, float]  # username -> weighted tokens charged before the load began
    # (seconds since t0, username -> decayed usage, total, username -> normalised share)
    books: list[tuple[float, dict[str, float], float, dict[str, float]]] = field(
        default_factory=list)

    @property
    def duration(self) -> float:
        return self.end - self.t0

    def of(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.client == name]


async def _prompt_tokens(client: httpx.AsyncClient, engine_url: str, model: str) -> int:
    """What the engine counts for PROMPT (straight to it: the gateway charges the same count)."""
    resp = await client.post(f"{engine_url}/v1/chat/completions", timeout=10.0,
                             json=load.chat_body(model, PROMPT, 1, stream=False))
    return int(resp.json()["usage"]["prompt_tokens"])


async def _sample_books(adm: Any, names: Mapping[str, str], t0: float, period: float,
                        out: list[tuple[float, dict[str, float], float, dict[str, float]]]) -> None:
    import redis

    while True:
        try:
            usage, total, shares = await adm.fair_share_usage()
            out.append((load.now() - t0, {names.get(a, a): u for a, u in usage.items()}, total,
                        {names.get(a, a): s for a, s in shares.items()}))
        except (OSError, ValueError, redis.RedisError):
            pass
        await asyncio.sleep(period)


async def drive(p: Portal, mode: str, weight: float, users: Sequence[User], duration: float,
                seed: Mapping[str, float] | None = None, books_period: float = 0.25,
                during: Any = None, bodies: Mapping[str, Callable[[int], load.Body]] | None = None,
                targets: Mapping[str, Target] | None = None) -> Run:
    """Charge ``seed`` (username -> weighted tokens, valued now), then keep every user
    backlogged through gateway 0 for ``duration`` wall seconds and cut off what is still open.
    ``during(run)``, if given, is a coroutine run beside the load (e.g. tier edits); ``bodies``
    (username -> the body of a user's n-th request) replaces PROMPT for those users; ``targets``
    (username -> where and how to send) replaces their own key on gateway 0 (a front end's)."""
    import redis.asyncio

    from fairness.scheduling.admission import Admission

    adm = Admission(redis.asyncio.Redis.from_url(p.redis_url))
    names = {m.association: m.username for m in p.members.values()}
    seeded = dict(seed or {})
    try:
        if seeded:
            await adm.send(*(adm.charge_command(p.members[name].association, amount)
                             for name, amount in seeded.items()))
        async with load.make_client() as client:
            prompt = await _prompt_tokens(client, p.engines[0].url, p.model)
            calls: list[Call] = []
            t0 = load.now()
            run = Run(mode, weight, t0, t0 + duration, time.time(), calls, prompt, seeded)
            tasks = [asyncio.create_task(_sample_books(adm, names, t0, books_period, run.books))]
            for user in users:
                target = (targets or {}).get(user.name) or Target((p.gateway_url(),), p.secret(user.name), user.name)
                body = load.chat_body(p.model, PROMPT, user.max_tokens)

                def same(n: int, body: load.Body = body) -> load.Body:
                    return body

                make = (bodies or {}).get(user.name, same)
                tasks += [asyncio.create_task(load.closed_loop(
                    client, user.name, "fairshare", target, make, calls))
                    for _ in range(user.outstanding)]
            if during is not None:
                tasks.append(asyncio.create_task(during(run)))
            await asyncio.sleep(duration)
            run.end = load.now()
            await load.cancel_all(tasks)
    finally:
        await adm.close()
    return run


def weighted_between(calls: Sequence[Call], a: float, b: float, prompt: int) -> float:
    """Weighted tokens received in [a, b)."""
    firsts = sum(1 for c in calls if c.first_token_at is not None and a <= c.first_token_at < b)
    return W_COMPLETION * measures.tokens_between(calls, a, b) + W_PROMPT * prompt * firsts


def served(run: Run, a: float = 0.0, b: float | None = None) -> dict[str, float]:
    """Weighted service per user in [a, b) seconds since the load began."""
    end = run.duration if b is None else b
    users = sorted({c.client for c in run.calls})
    return {u: weighted_between(run.of(u), run.t0 + a, run.t0 + end, run.prompt_tokens)
            for u in users}


def windows(run: Run, width: float, shares: Mapping[str, float] | None = None
            ) -> list[dict[str, Any]]:
    """Per whole window of ``width`` s: weighted service per user and Jain's index over service
    per share (every user here is backlogged throughout; no shares: equal)."""
    users = sorted({c.client for c in run.calls})
    rows = []
    a = 0.0
    while a + width <= run.duration + 1e-9:
        service = served(run, a, a + width)
        rows.append({"t0": a, "t1": a + width, "service": service,
                     "jain": measures.jain([service[u] / (shares or {}).get(u, 1.0)
                                            for u in users])})
        a += width
    return rows


def held_back(run: Run, name: str) -> tuple[float, float] | None:
    """The longest stretch (seconds since the start) in which none of ``name``'s requests
    started generating: (from, to), to = the first start after it."""
    starts = sorted(c.first_token_at - run.t0 for c in run.of(name) if c.first_token_at is not None)
    edges = [0.0, *starts, run.duration]
    gaps = [(b - a, a, b) for a, b in zip(edges, edges[1:], strict=False)]
    if not gaps:
        return None
    _, a, b = max(gaps)
    return a, b


def completed(run: Run, name: str) -> int:
    return sum(1 for c in run.of(name) if c.ok)


def first_crossing(series: Sequence[tuple[float, float, float]]) -> float | None:
    """The first time (linearly interpolated) at which x >= y in (t, x, y) samples where x
    started below y; None if it never does."""
    previous = None
    for t, x, y in series:
        if x >= y:
            if previous is None:
                return t
            pt, px, py = previous
            gap0, gap1 = py - px, y - x
            return pt + (t - pt) * gap0 / (gap0 - gap1) if gap0 != gap1 else t
        previous = (t, x, y)
    return None


def books_crossing(run: Run, low: str, high: str) -> float | None:
    """When the gateway's decayed usage of ``low`` first reached ``high``'s."""
    return first_crossing([(t, u.get(low, 0.0), u.get(high, 0.0)) for t, u, _, _ in run.books])


def client_crossing(run: Run, low: str, high: str, half_life: float, step: float = 0.1
                    ) -> float | None:
    """The same from what the clients received: seeded + received, decayed with the half-life."""
    rate = math.log(2) / half_life
    per_user: dict[str, list[tuple[float, float]]] = {}
    for name in (low, high):
        events = []
        for c in run.of(name):
            events += [(t - run.t0, W_COMPLETION) for t in c.token_times]
            if c.first_token_at is not None:
                events.append((c.first_token_at - run.t0, W_PROMPT * run.prompt_tokens))
        per_user[name] = sorted(events)
    series = []
    t = 0.0
    usage = {n: run.seeded.get(n, 0.0) for n in (low, high)}
    index = {n: 0 for n in (low, high)}
    while t <= run.duration:
        for n in (low, high):
            usage[n] *= math.exp(-rate * step)
            events = per_user[n]
            j = bisect.bisect_left(events, (t + step, -1.0), lo=index[n])
            usage[n] += sum(w for _, w in events[index[n]:j])
            index[n] = j
        t += step
        series.append((t, usage[low], usage[high]))
    return first_crossing(series)


def predicted_crossing(seeded: float, rate_fresh: float, rate_heavy: float, half_life: float
                       ) -> float | None:
    """When a fresh user's decayed usage reaches a heavy user's (equal shares, so equal usage
    means equal factors): R_f h/ln2 (1 - 2^(-t/h)) = X 2^(-t/h) + R_h h/ln2 (1 - 2^(-t/h)), so
    t = h log2(1 + X ln2 / ((R_f - R_h) h)); X / (R_f - R_h) without decay."""
    gain = rate_fresh - rate_heavy
    if gain <= 0:
        return None
    if math.isinf(half_life):
        return seeded / gain
    return half_life * math.log2(1 + seeded * math.log(2) / (gain * half_life))
