"""One measured phase of the fairness benchmark: an optional batch flood and optional
interactive users, aimed at the engine directly or at the gateway, with the engine sampled.

The flood (its own process: bench/flood.py) starts first and runs for ``warmup`` seconds, so the
interactive users arrive at a card that is already full. Interactive users send until the window
closes; their last requests may finish during the drain (the flood keeps running so conditions do
not change), up to a hard deadline after which what is still open is cut off and counted with a
lower-bound TTFT.
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench import load, measures
from bench.flood import Flood
from bench.load import Call, Target
from fairness.store import keyspace


@dataclass(frozen=True)
class Plan:
    name: str
    engine_url: str
    interactive: dict[str, Target] = field(default_factory=dict)  # username -> target
    batch: Target | None = None
    batch_user: str = "carol"
    batch_concurrency: int = 64
    batch_max_tokens: int = 400
    batch_stream: bool = True  # False: the flood asks for whole answers
    interactive_max_tokens: int = 32
    # A greedy key in the interactive users' own tier, flooding past its cap (None: absent)
    greedy: Target | None = None
    greedy_user: str = "frank"
    greedy_concurrency: int = 6
    greedy_max_tokens: int = 128
    think: tuple[float, float] = (1.0, 2.0)  # wall seconds (already scaled by speed)
    warmup: float = 0.0
    duration: float = 30.0
    drain: float = 30.0  # hard deadline after the window for the last interactive requests
    window: float = 2.0  # Jain's index windows
    model: str = "sim"
    seed: int = 1
    # (redis_url, prefix) of the gateway's admission state, to sample its counters; key id -> name
    admission: tuple[str, str] | None = None
    key_names: dict[str, str] = field(default_factory=dict)
    processes: dict[str, int] = field(default_factory=dict)  # name -> pid, CPU use reported


@dataclass
class Outcome:
    plan: Plan
    calls: list[Call]
    samples: list[dict[str, Any]]
    admission: list[dict[str, Any]]
    t0: float  # window start (perf_counter)
    t1: float  # window end
    cut: float  # when whatever was still open got cut off
    stats_before: dict[str, Any]
    stats_after: dict[str, Any]
    leases_left: dict[str, Any] | None = None  # lease_audit() after the phase
    leases_at_start: dict[str, int] | None = None  # ... and held when it began (earlier leaks)
    loadavg: float | None = None
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per second, by process


async def wait_engine_idle(client: Any, engine_url: str, timeout: float = 30.0) -> None:
    deadline = load.now() + timeout
    while load.now() < deadline:
        stats = await load.engine_stats(client, engine_url)
        if stats["running"] == 0 and stats["waiting"] == 0:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"engine {engine_url} still busy after {timeout}s")


async def run(plan: Plan, sample_period: float = 0.1) -> Outcome:
    """Run the phase within a hard deadline (its windows plus a minute for setup and drains)."""
    budget = plan.warmup + plan.duration + plan.drain + 60.0
    return await asyncio.wait_for(_run(plan, sample_period), budget)


async def warm_up(client: httpx.AsyncClient, plan: Plan) -> None:
    """One short untimed request from each user to each address, direct and through the gateway
    alike. A key's first request meets cold caches (the key looked up in the database, new
    connections): a one-off that would otherwise be a tenth of a short phase's samples."""
    calls = [load.chat(client, target, n, load.chat_body(plan.model, f"{name} says hello", 4),
                       Call(name, "warm-up"), False)
             for name, target in plan.interactive.items() for n in range(len(target.urls))]
    for call in await asyncio.gather(*calls):
        if call.error:
            raise RuntimeError(f"warm-up request failed: {call.error}")


async def _run(plan: Plan, sample_period: float) -> Outcome:
    calls: list[Call] = []
    samples: list[dict[str, Any]] = []
    admission: list[dict[str, Any]] = []
    async with load.make_client() as client:
        await wait_engine_idle(client, plan.engine_url)
        await warm_up(client, plan)
        await wait_engine_idle(client, plan.engine_url)
        leases_at_start = None
        if plan.admission is not None:
            leases_at_start = await load.admission_settled(*plan.admission, timeout=5.0)
        await load.reset_peak(client, plan.engine_url)
        before = await load.engine_stats(client, plan.engine_url)
        sampler = asyncio.create_task(load.sample_engine(client, plan.engine_url, sample_period,
                                                         samples))
        samplers = [sampler]
        if plan.admission is not None:
            samplers.append(asyncio.create_task(load.sample_admission(
                *plan.admission, sample_period, admission)))
        floods: list[Flood] = []
        users: list[asyncio.Task[None]] = []
        try:
            if plan.batch is not None:
                floods.append(Flood(plan.batch, plan.batch_user, plan.batch_concurrency,
                                    model=plan.model, max_tokens=plan.batch_max_tokens,
                                    stream=plan.batch_stream))
            if plan.greedy is not None:
                floods.append(Flood(plan.greedy, plan.greedy_user, plan.greedy_concurrency,
                                    model=plan.model, max_tokens=plan.greedy_max_tokens,
                                    kind="greedy"))
            for flood in floods:
                await asyncio.to_thread(flood.start)
            if floods:
                await asyncio.sleep(plan.warmup)
            pids = {**plan.processes, "bench": os.getpid()}
            for flood in floods:
                if flood.pid is not None:
                    pids[f"flood-{flood.spec.kind}"] = flood.pid
            cpu0 = {name: load.cpu_seconds(pid) for name, pid in pids.items()}
            t0 = load.now()
            t1 = t0 + plan.duration
            rng = random.Random(plan.seed)
            for k, (name, target) in enumerate(sorted(plan.interactive.items())):
                def ibody(n: int, name: str = name) -> load.Body:
                    return load.chat_body(plan.model, f"{name} asks question {n}: how are you?",
                                          plan.interactive_max_tokens)
                users.append(asyncio.create_task(load.closed_loop(
                    client, name, "interactive", target, ibody, calls, stop_at=t1,
                    think=load.uniform_think(*plan.think, seed=plan.seed * 100 + k),
                    start_delay=rng.uniform(0, plan.think[1]))))
            if users:
                await asyncio.wait(users, timeout=max(0.0, t1 + plan.drain - load.now()))
            else:
                await asyncio.sleep(max(0.0, t1 - load.now()))
            cut = load.now()
            cpu1 = {name: load.cpu_seconds(pid) for name, pid in pids.items()}
            after = await load.engine_stats(client, plan.engine_url)
        finally:
            await load.cancel_all(users)
            for flood in floods:
                calls += await flood.stop()
            await load.cancel_all(samplers)
        await wait_engine_idle(client, plan.engine_url)
    leftover = None
    if plan.admission is not None:
        # Every slot taken must be given back once the clients have gone.
        leftover = await load.lease_audit(*plan.admission)
    cpu = {name: (cpu1[name] - cpu0[name]) / (cut - t0)  # type: ignore[operator]
           for name in cpu0 if cpu0[name] is not None and cpu1.get(name) is not None}
    return Outcome(plan, calls, samples, admission, t0, t1, cut, before, after, leftover,
                   leases_at_start, os.getloadavg()[0], cpu)


def summarize(out: Outcome) -> dict[str, Any]:
    """The figures of one phase, with series (times relative to the window start) for plots."""
    plan, t0, t1 = out.plan, out.t0, out.t1
    inter = [c for c in out.calls if c.kind == "interactive"]
    batch = [c for c in out.calls if c.kind == "batch"]
    ttft = [c.ttft_at_least(out.cut) for c in inter]
    window_samples = [s for s in out.samples if t0 <= s["t"] <= t1]
    gen = [s["generation_tokens"] for s in window_samples]
    span = (window_samples[-1]["t"] - window_samples[0]["t"]) if len(window_samples) > 1 else 0
    rows = measures.window_service(inter, t0, t1, plan.window, sorted(plan.interactive))
    # Streamed answers count token by token; whole ones when they arrive within the window.
    batch_tokens = measures.tokens_between(batch, t0, t1) + sum(
        c.tokens for c in batch if c.ok and not c.token_times and c.done_at is not None and t0 <= c.done_at < t1)
    batch_done = [c for c in batch if c.ok and c.done_at is not None and c.done_at <= out.cut]
    result: dict[str, Any] = {
        "name": plan.name,
        "duration": plan.duration,
        "loadavg_1min_at_end": out.loadavg,  # the box is shared: read the figures beside it
        "cpu": out.cpu,  # CPU seconds per second over the phase, per process
        "interactive": {
            "requests": len(inter),
            "completed": sum(1 for c in inter if c.ok),
            "cut_off": sum(1 for c in inter if c.first_token_at is None),
            "errors": sorted({c.error for c in inter if c.error and c.error != "cancelled"})[:5],
            "ttft": measures.summary(ttft),
            "ttft_by_user": {u: measures.summary(c.ttft_at_least(out.cut) for c in inter
                                                 if c.client == u)
                             for u in sorted(plan.interactive)},
            "tokens_per_s": measures.tokens_between(inter, t0, t1) / plan.duration,
            # TTFT in two parts: until the response headers (through the gateway: auth, queue,
            # routing, the engine's headers), then until the first token (engine + relay)
            "to_headers": measures.summary((c.headers_at or 0) - c.sent for c in inter
                                           if c.headers_at is not None
                                           and c.first_token_at is not None),
            "headers_to_first_token": measures.summary(
                (c.first_token_at or 0) - (c.headers_at or 0) for c in inter
                if c.headers_at is not None and c.first_token_at is not None),
            # the gateway's X-GPUPortal-Queued-Ms: how much of the TTFT was its own queue
            "gateway_queued_ms": measures.summary(float(c.queued_ms) for c in inter
                                                  if c.queued_ms is not None),
            "jain": measures.jain_summary(rows),
            "jain_whole_window": measures.jain([
                float(measures.tokens_between([c for c in inter if c.client == u], t0, t1))
                for u in sorted(plan.interactive)]),
        },
        "batch": None,
        "engine": {
            "waiting_mean": (sum(s["waiting"] for s in window_samples) / len(window_samples)
                             if window_samples else None),
            "waiting_max": max((s["waiting"] for s in window_samples), default=None),
            "running_mean": (sum(s["running"] for s in window_samples) / len(window_samples)
                             if window_samples else None),
            "peak_running": out.stats_after.get("peak_running"),
            "tokens_per_s": (gen[-1] - gen[0]) / span if span else None,
        },
        "peak_in_flight": {
            # admitted: from response headers (the gateway answers only once admitted)
            "admitted": measures.peaks_by_client(out.calls, "headers_at", out.cut),
            "generating": measures.peaks_by_client(out.calls, "first_token_at", out.cut),
        },
        "series": {
            "ttft": [[round(c.sent - t0, 4), round(c.ttft_at_least(out.cut), 5),
                      c.first_token_at is None] for c in inter],
            "engine": [[round(s["t"] - t0, 3), s["running"], s["waiting"]] for s in out.samples],
            "jain": [[r["t0"], r["jain"], len(r["service"])] for r in rows],
            "batch_rate": measures.rate_series(batch, t0, t1, plan.window),
        },
    }
    if out.admission:
        result["gateway_admission"] = admission_summary(out, plan.key_names)
        result["gateway_admission"]["leases_left_after_phase"] = out.leases_left
        result["gateway_admission"]["leases_held_at_start"] = out.leases_at_start
    greedy = [c for c in out.calls if c.kind == "greedy"]
    if plan.greedy is not None:
        result["greedy"] = {
            "tokens_per_s": measures.tokens_between(greedy, t0, t1) / plan.duration,
            "completed": sum(1 for c in greedy if c.ok and c.done_at is not None and c.done_at <= out.cut),
            "errors": sorted({c.error for c in greedy if c.error and c.error != "cancelled"})[:5],
        }
    if plan.batch is not None:
        result["batch"] = {
            "tokens_per_s": batch_tokens / plan.duration,
            "completed": len(batch_done),
            "errors": sorted({c.error for c in batch if c.error and c.error != "cancelled"})[:5],
            "completion_time": measures.summary(c.latency or 0.0 for c in batch_done),
            "generation_time": measures.summary(
                (c.done_at or 0.0) - (c.first_token_at or 0.0) for c in batch_done),
            "queued_ms_header": measures.summary(float(c.queued_ms) for c in batch_done
                                                 if c.queued_ms is not None),
        }
    return result


def admission_summary(out: Outcome, names: dict[str, str]) -> dict[str, Any]:
    """The gateway's own counters, sampled (peaks are lower bounds: a sample can miss one)."""
    window = [s for s in out.admission if out.t0 <= s["t"] <= out.t1] or out.admission

    def peak(counter: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for sample in out.admission:
            for k, v in sample[counter].items():
                label = names.get(k, k)
                found[label] = max(found.get(label, 0), v)
        return dict(sorted(found.items()))

    def mean(counter: str) -> dict[str, float]:
        labels = {k for s in window for k in s[counter]}
        return {names.get(k, k): sum(s[counter].get(k, 0) for s in window) / len(window)
                for k in sorted(labels)}

    return {
        "samples": len(out.admission),
        "peak_in_flight_per_key": peak(keyspace.ADMISSION_IN_FLIGHT_BY_KEY),
        "peak_queued_per_key": peak("kq"),
        "peak_in_flight_per_tier": peak("pin"),
        "peak_borrowed_per_tier": peak("pbin"),
        "mean_in_flight_per_tier": mean("pin"),
        "mean_queued_per_tier": mean("pq"),
        "peak_in_flight_per_group": peak("gin"),
    }
