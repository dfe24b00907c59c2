"""Scenario 2 of the fairness benchmark: a batch request under saturating interactive load.

Six interactive keys (cap 2 each: 12 admissible, 8 slots) each keep six requests outstanding
through the gateway: up to two running and the rest queued behind the key's cap, so whenever an
interactive request ends its key already has eligible tickets waiting (without that, the client's
own round trip would leave gaps the batch request slips through, and strict priority would look
like it does not starve anyone; with four per key, a load generator stalled for a few hundred
milliseconds on this busy box let the queue run dry). One batch request arrives at a time and we
measure its wait in the gateway's queue (the X-GPUPortal-Queued-Ms header: from its arrival to
its grant), with its time to first token beside it. With ageing the interactive tier's head
start is H: a batch ticket outranks every interactive ticket that became eligible later than its
own arrival plus H, so it should be granted within H plus one interactive service time (the time
a request holds its slot, grant to end: at most one must finish after the crossover, plus the few
eligible ones already ahead). Without ageing (head start 1e9: strict priority) it should not
start at all; we give up after 3 H and call it starved.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from bench import load, measures, report
from bench.harness import EngineSpec, Portal, portal
from bench.load import Call, Target
from bench.phases import wait_engine_idle
from fairness.store import keyspace

USERS = ("alice", "bob", "dave", "erin", "frank", "grace")
PER_USER = 6  # outstanding per key: its cap (2) running, four more queued
STRICT_HEAD_START = 1e9


async def _saturated(client: Any, engine_url: str, slots: int, timeout: float) -> bool:
    deadline = load.now() + timeout
    while load.now() < deadline:
        if (await load.engine_stats(client, engine_url))["running"] >= slots:
            return True
        await asyncio.sleep(0.02)
    return False


async def run_mode(p: Portal, cfg: Any, slots: int, head_start: float) -> dict[str, Any]:
    engine_url = p.engines[0].url
    names = {m.unit: m.username for m in p.members.values()}
    gateways = tuple(p.gateway_urls())
    horizon = 3 * cfg.head_start
    calls: list[Call] = []
    samples: list[dict[str, Any]] = []
    arrivals: list[dict[str, Any]] = []
    admission: list[dict[str, Any]] = []
    async with load.make_client() as client:
        await wait_engine_idle(client, engine_url)
        await load.reset_peak(client, engine_url)
        samplers = [asyncio.create_task(load.sample_engine(client, engine_url, 0.1, samples)),
                    asyncio.create_task(load.sample_admission(
                        p.redis_url, cfg.admission_prefix, 0.1, admission))]
        users = []
        for user in USERS:
            target = Target(gateways, p.secret(user))
            for j in range(PER_USER):
                def body(n: int, user: str = user, j: int = j) -> load.Body:
                    return load.chat_body(p.model, f"{user}/{j} asks question {n}", 32)
                users.append(asyncio.create_task(load.closed_loop(
                    client, user, "interactive", target, body, calls, keep_times=False)))
        try:
            saturated = await _saturated(client, engine_url, slots, 10.0)
            t0 = load.now()
            batch = Target(gateways, p.secret("carol"))
            for k in range(cfg.arrivals):
                call = Call("carol", "batch")
                task = asyncio.create_task(load.chat(
                    client, batch, k, load.chat_body(p.model, f"batch job {k}", 64), call,
                    keep_times=False))
                while call.first_token_at is None and not task.done():
                    if call.sent and load.now() - call.sent > horizon:
                        break
                    await asyncio.sleep(0.01)
                if call.first_token_at is None:
                    waited = load.now() - call.sent
                    await load.cancel_all([task])
                    arrivals.append({"at": call.sent - t0, "wait": None, "starved": True,
                                     "waited_at_least": waited, "error": call.error})
                    break
                await asyncio.wait_for(task, horizon)
                arrivals.append({"at": call.sent - t0, "wait": call.ttft, "starved": False,
                                 "queued_ms": call.queued_ms, "error": call.error})
                await asyncio.sleep(0.5 / cfg.speed)  # the next arrival finds a fresh queue
            t1 = load.now()
        finally:
            await load.cancel_all(users)
            await load.cancel_all(samplers)
        await wait_engine_idle(client, engine_url)
    leftover = await load.lease_audit(p.redis_url, cfg.admission_prefix)
    queue = [s["pq"].get("interactive", 0) for s in admission if t0 <= s["t"] <= t1]
    done = [c for c in calls if c.ok and c.first_token_at is not None and c.done_at is not None]
    window = [s for s in samples if t0 <= s["t"] <= t1]
    waits = [a["wait"] if a["wait"] is not None else a["waited_at_least"] for a in arrivals]
    queue_waits = [a["queued_ms"] / 1000 if a.get("queued_ms") is not None else a["waited_at_least"]
                   for a in arrivals]
    return {
        "head_start": head_start,
        "engine_reached_all_slots": saturated,
        # saturation as the gateway saw it: interactive tickets waiting (min > 0: never empty)
        "gateway_interactive_queue_mean": sum(queue) / len(queue) if queue else None,
        "gateway_interactive_queue_min": min(queue) if queue else None,
        "interactive_queued_ms": measures.summary(float(c.queued_ms) for c in done
                                                  if c.queued_ms is not None),
        "leases_left_after": leftover,
        "arrivals": arrivals,
        "starved": any(a["starved"] for a in arrivals),
        "max_wait": max(waits) if waits else None,
        "max_queue_wait": max(queue_waits) if queue_waits else None,
        "service_time": measures.summary((c.done_at or 0) - (c.first_token_at or 0) for c in done),
        # grant to end: how long an interactive request holds its slot
        "slot_time": measures.summary((c.done_at or 0) - c.sent - (c.queued_ms or 0) / 1000
                                      for c in done),
        "interactive_ttft": measures.summary(c.ttft for c in done if c.ttft is not None),
        "interactive_completed": len(done),
        "engine_waiting_mean": (sum(s["waiting"] for s in window) / len(window)) if window else None,
        "engine_running_mean": (sum(s["running"] for s in window) / len(window)) if window else None,
        "peak_admitted": measures.peaks_by_client(calls, "headers_at", t1),
        "gateway_peak_in_flight_per_key": _peaks(admission, keyspace.ADMISSION_IN_FLIGHT_BY_KEY, names),
        "gateway_peak_queued_per_tier": _peaks(admission, "pq", {}),
    }


def _peaks(samples: list[dict[str, Any]], counter: str, names: dict[str, str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for sample in samples:
        for k, v in sample[counter].items():
            found[names.get(k, k)] = max(found.get(names.get(k, k), 0), v)
    return dict(sorted(found.items()))


def run_both(cfg: Any, slots: int, idle_interactive: dict[str, Any] | None) -> dict[str, Any]:
    members = {**{u: "interactive" for u in USERS}, "carol": "batch"}
    modes = {}
    # A fresh portal per mode: a slot leaked by one mode must not shrink the other's card.
    for mode, head_start in (("ageing", cfg.head_start), ("strict", STRICT_HEAD_START)):
        tiers = {"interactive": {"head_start_seconds": head_start},
                 "batch": {"head_start_seconds": 0.0}}
        with portal(members=members, engines=[EngineSpec(slots, cfg.speed)], tiers=tiers,
                    gateways=cfg.gateways, redis_url=cfg.redis_url) as p:
            print(f"  {mode}: interactive head start {head_start:g} s ...", flush=True)
            budget = 10.0 + cfg.arrivals * (2 * 3 * cfg.head_start + 1.0) + 60.0
            # A full collection of what scenario 1 left in this process can stall every client
            # at once for long enough to drain the queue; keep those objects out of it.
            gc.collect()
            gc.freeze()
            try:
                modes[mode] = asyncio.run(asyncio.wait_for(
                    run_mode(p, cfg, slots, head_start), budget))
            finally:
                gc.unfreeze()
    # The batch request's own first token costs what an idle request's does (gateway + a step).
    overhead = (idle_interactive or {}).get("ttft", {}).get("p50") or 0.0
    service = modes["ageing"]["service_time"]["p95"] or 0.0
    slot = modes["ageing"]["slot_time"]["p95"] or 0.0
    backlog = (modes["ageing"]["interactive_queued_ms"]["p95"] or 0.0) / 1000
    return {"head_start": cfg.head_start, "horizon": 3 * cfg.head_start, "modes": modes,
            "limit": cfg.head_start + slot,
            "limit_parts": {"head_start": cfg.head_start, "slot_time_p95": slot},
            "ttft_limit": cfg.head_start + service + overhead,
            "ttft_limit_parts": {"head_start": cfg.head_start, "service_p95": service,
                                 "idle_ttft_p50": overhead},
            # Tickets already eligible at the crossover keep their (better) scores, so the batch
            # request also waits for them: add the interactive queue's own wait.
            "ordering_bound": cfg.head_start + slot + backlog}


def targets(s: dict[str, Any]) -> list[report.Target]:
    ageing, strict = s["modes"]["ageing"], s["modes"]["strict"]
    return [
        report.target("batch max queue wait with ageing (saturating interactive load)",
                      None if ageing["starved"] else ageing["max_queue_wait"], "<=", s["limit"],
                      " s", "H + interactive slot time p95 (grant to end)"),
        report.target("  (info) batch max time to first token with ageing",
                      None if ageing["starved"] else ageing["max_wait"], "<=", s["ttft_limit"],
                      " s", "H + interactive service p95 + idle TTFT p50"),
        report.target("  (info) the queue wait against H + slot time + interactive queue wait p95",
                      None if ageing["starved"] else ageing["max_queue_wait"], "<=",
                      s["ordering_bound"], " s", "what the ordering key implies under backlog"),
        report.target("batch wait without ageing reaches the horizon (starved)",
                      strict["max_wait"], ">=", s["horizon"], " s", "3 H: no first token by then = starved"),
    ]


def print_table(s: dict[str, Any]) -> None:
    rows = []
    for name, m in s["modes"].items():
        waits = ", ".join(
            ("starved>" + report.fmt(a["waited_at_least"])) if a["starved"] else report.fmt(a["wait"])
            for a in m["arrivals"])
        queue_waits = ", ".join(report.fmt(a["queued_ms"] / 1000) if a.get("queued_ms") is not None
                                else "-" for a in m["arrivals"])
        rows.append([name, m["head_start"], waits, queue_waits, m["max_wait"], m["starved"],
                     m["service_time"]["p95"], m["slot_time"]["p95"], m["interactive_ttft"]["p95"],
                     m["gateway_interactive_queue_mean"], m["gateway_interactive_queue_min"],
                     m["engine_waiting_mean"], m["engine_running_mean"]])
    print(report.table(
        ["mode", "head start s", "batch TTFT s", "batch queued s", "max TTFT s", "starved",
         "int service p95 s", "int slot p95 s", "int TTFT p95 s", "gw int queue mean", "min", "eng wait mean",
         "eng run mean"],
        rows, title=f"Scenario 2: one batch request vs 12 interactive in flight on 8 slots "
                    f"(limit with ageing {report.fmt(s['limit'])} s, horizon "
                    f"{report.fmt(s['horizon'])} s)"))
    for name, m in s["modes"].items():
        warn_leases(name, m["leases_left_after"])


def warn_leases(name: str, audit: dict[str, Any] | None) -> None:
    if audit and audit["held"]:
        print(f"WARNING: {name}: leases still held 10 s after every client left: "
              f"{audit['held']}; {audit['renewed']} of them still being renewed by the gateway "
              f"(lost until it exits)")
