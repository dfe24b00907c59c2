"""Fair-share benchmark: does the queue score's fair-share term share a tier's pool by weighted
tokens, by account shares, with memory, without idling slots or starving anyone?

    .venv/bin/python -m bench.fairshare [--quick] [--speed X] [--only 1,2,3,4,5,6,7]

Every scenario runs twice, each time on a fresh portal (private redis-server, fresh SQLite, one
gateway, one enginesim with 8 slots): "today" (the tier's fairshare_weight_seconds = 0, the
behaviour before fair share) and "fair share". The interactive tier's pool is the bottleneck:
pool_concurrency 4 < 8 engine slots, per-key cap 4 (2 in scenario 5). Users are closed loops
without think time (backlogged: twice the pool cap outstanding each). Durations are engine time
compressed by --speed (quick: 5, about 6 minutes; default 4, about 14). Weighted service = w_p x
prompt + w_c x completion tokens (1 and 2), what the gateway charges.

The weight W is wall-clock seconds of rank on the gateway's clock, while every duration here is
compressed: the fair-share runs use the default 300 s of engine time, i.e. W = 300 / speed wall
seconds, so W keeps its size against queue ages (--weight overrides it).

1. Request sizes, equal shares: A asks 1000 tokens, B 100. Weighted service A:B over the whole
   backlogged window (target 0.8-1.25) and Jain's index over weighted tokens per 30 s (engine
   time) window (target >= 0.95).
2. Shares 3 and 1: two accounts, one user each, equal sizes: served ratio 3.0 +- 10%.
3. Memory: "heavy" starts with seeded usage (75 s of engine time at the pool's nominal
   throughput), "fresh" with none; both backlogged, equal shares and sizes. The gateways run with
   a short half-life (GP_FAIRSHARE_HALF_LIFE_HOURS = 100 s of engine time) so decay shows. Equal
   shares: the factors meet when the decayed usages are equal; predicted, with the fresh user
   served at R_f and the heavy one at R_h meanwhile, t = h log2(1 + X ln2 / ((R_f - R_h) h)).
   The ideal prediction takes R_h = 0 and R_f = the pool's measured throughput (the heavy user
   waits until the factors meet); the target compares the measured crossover with the same
   formula at the rates each user was really served until then (ageing lets the heavy user
   through now and then), and reports the ideal beside it. The measured crossover is when the
   gateway's books (sampled from Redis) show the fresh user's usage reaching the heavy one's.
4. Work conservation: one backlogged user alone; one portal whose tier is switched between
   today and fair share every segment; throughput with fair share >= 95% of today's.
5. No starvation: "zed" (seeded usage 1e9 weighted tokens, one of seven top-level accounts:
   share 1/7, F ~ 0.008) keeps one request waiting among six users without history (two each,
   cap 2 each, pool 4). A ticket scores max(enq - head_start, floor) + W (1 - F), smallest first,
   so every ticket enqueued later than zed's enqueue time + W (1 - F_zed) <= W ranks behind it;
   ahead of it then are at most the Q = 6 x 2 - 4 = 8 tickets already waiting, granted as the
   pool's 4 slots free. Bound: W + ceil((Q + 1) / 4) x T_max, T_max the longest service time
   (grant to end) measured in the run. W here: 50 s of engine time (stated, not the default, so
   that several of zed's requests fit in the window).
6. Cached prompts: "hit" and "miss" send the same traffic (1,200-token prompts, 100 tokens
   back), but hit's prompts share a long prefix, which the engine finds in its prefix cache
   (enginesim with --enable-prompt-tokens-details), while each of miss's starts differently.
   Fair share on, run with GP_FAIRSHARE_WEIGHT_CACHED_PROMPT 1.0 (the baseline: a cached token
   charged as any prompt token) and 0.1 (the default), interleaved in rounds on fresh portals.
   Per run: hit:miss charged (the gateway's books) and hit:miss served (completion tokens
   received); the figure is the median over rounds of served(0.1) / served(1.0).
7. People behind a front end: "ann" and "ben" speak through ONE key, Open WebUI's (each request
   names its person in a freshly minted X-OpenWebUI-User-Jwt, exp 300 s; bench/front_end.py), and
   "cat" through a key of her own; the same traffic, all three backlogged, in one account (equal
   shares: the gateway adds ann and ben to the front end's account on first sight). Weighted
   service per person and every pair's ratio (target 0.8-1.25), and what the gateway's books
   charged each (the front end's own membership: nothing).

Writes bench/results/fairshare.json and fairshare.png; prints tables and PASS/FAIL targets. The
cost targets (admission with 10,000 waiting, added latency) are bench/admission_cost.py's and
bench/overhead.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from bench import fairshare_report as fs_report
from bench import fairshare_runs as fr
from bench import front_end, load, measures, report
from bench.fairshare_plot import plot
from bench.fairshare_runs import Run, User
from bench.front_end import FrontEndTarget
from bench.harness import EPOCH_CHECK_SECONDS, AccountSpec, EngineSpec, Portal, portal

SLOTS = 8
POOL = 4
DEFAULT_WEIGHT = 300.0  # Tier.fairshare_weight_seconds' default, in engine seconds here
FRESH5 = tuple(f"fresh{i}" for i in range(1, 7))
FRONT_END7 = "openwebui"  # the front end's service user, whose key speaks for PEOPLE7
PEOPLE7 = ("ann", "ben")
OWN7 = "cat"  # a key of her own


@dataclass(frozen=True)
class Config:
    speed: float
    weight: float  # W of the fair-share runs in scenarios 1-4 (wall s)
    jain_window: float  # wall s
    window1: float
    window2: float
    window3: float
    segment4: float  # each of four alternating segments
    window5: float
    half_life3: float  # wall s
    seed3: float  # weighted tokens seeded to heavy
    weight5: float  # wall s
    window6: float
    rounds6: int  # of interleaved runs, one per cached-prompt weight
    window7: float

    @classmethod
    def make(cls, speed: float | None, quick: bool, weight: float | None) -> Config:
        speed = speed or (5.0 if quick else 4.0)
        k = 1.0 if quick else 2.4  # engine seconds = k x quick's

        def wall(engine_seconds: float) -> float:
            return engine_seconds / speed

        return cls(speed=speed, weight=weight if weight is not None else wall(DEFAULT_WEIGHT),
                   jain_window=wall(30), window1=wall(180 * k), window2=wall(120 * k),
                   window3=wall(160 * k), segment4=wall(30 * k), window5=wall(130 * k),
                   half_life3=wall(100 * k), seed3=wall(75 * k) * nominal_rate(speed),
                   weight5=wall(50 * k), window6=wall(60 * k), rounds6=2 if quick else 3,
                   window7=wall(120 * k))


def nominal_rate(speed: float) -> float:
    """The pool's weighted completion tokens per wall second by enginesim's timing model with
    POOL sequences running (its default step a + c x batch)."""
    return POOL * speed / (0.0098 + 0.00019 * POOL) * fr.W_COMPLETION


def tiers(weight: float, per_key: int = POOL) -> dict[str, dict[str, Any]]:
    return {"interactive": {"pool_concurrency": POOL, "per_key_concurrency": per_key,
                            "fairshare_weight_seconds": weight}}


def modes(cfg: Config, weight: float | None = None) -> list[tuple[str, float]]:
    return [("today", 0.0), ("fair share", cfg.weight if weight is None else weight)]


def run_modes(cfg: Config, users: list[User], duration: float, *, weight: float | None = None,
              per_key: int = POOL, accounts: dict[str, AccountSpec] | None = None,
              seed: dict[str, float] | None = None, env: dict[str, str] | None = None
              ) -> dict[str, Run]:
    runs = {}
    for mode, w in modes(cfg, weight):
        with portal(members={u.name: "interactive" for u in users},
                    engines=[EngineSpec(SLOTS, cfg.speed)], tiers=tiers(w, per_key),
                    accounts=accounts, gateway_env=env) as p:
            started = time.monotonic()
            print(f"  {mode} (W = {w:g} s): {duration:.0f} s ...", flush=True)
            runs[mode] = asyncio.run(fr.drive(p, mode, w, users, duration, seed))
            print(f"    done in {time.monotonic() - started:.1f} s", flush=True)
    return runs


def _ratio(s: dict[str, float], a: str, b: str) -> float | None:
    return measures.ratio(s.get(a), s.get(b))


def _books_ratio(run: Run, a: str, b: str) -> float | None:
    if not run.books:
        return None
    usage = run.books[-1][1]
    return measures.ratio(usage.get(a, 0.0) - run.seeded.get(a, 0.0),
                          usage.get(b, 0.0) - run.seeded.get(b, 0.0))


def _series(run: Run, points: int = 60) -> dict[str, list[list[float]]]:
    """Cumulative weighted service per user, for the figure."""
    step = run.duration / points
    return {u: [[i * step, fr.served(run, 0.0, i * step)[u]] for i in range(1, points + 1)]
            for u in sorted({c.client for c in run.calls})}


def pair_summary(cfg: Config, run: Run, a: str, b: str, shares: dict[str, float] | None = None
                 ) -> dict[str, Any]:
    """``a`` against ``b``; Jain's index per window over service per share."""
    s = fr.served(run)
    rows = fr.windows(run, cfg.jain_window, shares)
    jain = [r["jain"] for r in rows if r["jain"] is not None]
    ratios = [measures.ratio(r["service"].get(a), r["service"].get(b)) for r in rows]
    known = [x for x in ratios if x is not None]
    return {
        "weight": run.weight, "duration": run.duration, "served": s, "ratio": _ratio(s, a, b),
        "charged_ratio": _books_ratio(run, a, b),
        "completed": {u: fr.completed(run, u) for u in (a, b)},
        "jain_mean": sum(jain) / len(jain) if jain else None, "jain_min": min(jain, default=None),
        "window_ratio_min": min(known, default=None),
        "window_ratio_max": max(known, default=None) if None not in ratios else math.inf,
        "windows": rows, "cumulative": _series(run), "prompt_tokens": run.prompt_tokens,
    }


def scenario1(cfg: Config) -> dict[str, Any]:
    users = [User("A", 1000, 2 * POOL), User("B", 100, 2 * POOL)]
    runs = run_modes(cfg, users, cfg.window1)
    return {mode: pair_summary(cfg, run, "A", "B") for mode, run in runs.items()}


def scenario2(cfg: Config) -> dict[str, Any]:
    users = [User("p3", 200, 2 * POOL), User("p1", 200, 2 * POOL)]
    accounts = {"lab3": AccountSpec(3, ("p3",)), "lab1": AccountSpec(1, ("p1",))}
    runs = run_modes(cfg, users, cfg.window2, accounts=accounts)
    return {mode: pair_summary(cfg, run, "p3", "p1", {"p3": 3, "p1": 1})
            for mode, run in runs.items()}


def scenario3(cfg: Config) -> dict[str, Any]:
    users = [User("heavy", 200, 2 * POOL), User("fresh", 200, 2 * POOL)]
    env = {"GP_FAIRSHARE_HALF_LIFE_HOURS": repr(cfg.half_life3 / 3600)}
    runs = run_modes(cfg, users, cfg.window3, seed={"heavy": cfg.seed3}, env=env)
    out = {}
    for mode, run in runs.items():
        total = sum(fr.served(run).values()) / run.duration
        predicted = fr.predicted_crossing(cfg.seed3, total, 0.0, cfg.half_life3)
        books = fr.books_crossing(run, "fresh", "heavy")
        until = books if books is not None else run.duration
        before = fr.served(run, 0.0, until)
        after = fr.served(run, until) if books is not None else {}
        # The same formula with the rates each user really got until then (ageing lets the
        # heavy user through now and then): does the arithmetic of decay and factors hold?
        as_served = fr.predicted_crossing(cfg.seed3, before["fresh"] / until, before["heavy"] / until,
                                          cfg.half_life3) if until else None
        out[mode] = {
            "weight": run.weight, "duration": run.duration, "seeded": cfg.seed3,
            "half_life": cfg.half_life3, "rate": total, "predicted": predicted,
            "predicted_as_served": as_served,
            "crossing_books": books,
            "crossing_client": fr.client_crossing(run, "fresh", "heavy", cfg.half_life3),
            "heavy_held_back": fr.held_back(run, "heavy"),
            "fresh_part_before": measures.ratio(before["fresh"], sum(before.values())),
            "fresh_part_after": measures.ratio(after.get("fresh"), sum(after.values())),
            "rates_before": {u: v / until for u, v in before.items()},
            "books": [[t, u.get("fresh", 0.0), u.get("heavy", 0.0)] for t, u, _, _ in run.books],
            "cumulative": _series(run),
        }
    return out


def scenario4(cfg: Config) -> dict[str, Any]:
    plan = [("today", 0.0), ("fair share", cfg.weight)] * 2
    settle = min(1.0, cfg.segment4 / 4)  # the previous mode's requests finish first
    with portal(members={"solo": "interactive"}, engines=[EngineSpec(SLOTS, cfg.speed)],
                tiers=tiers(0.0)) as p:

        async def switch(run: Run) -> None:
            for i in range(1, len(plan)):
                await asyncio.sleep(run.t0 + i * cfg.segment4 - load.now())
                await asyncio.to_thread(_set_weight, p, plan[i][1])

        print(f"  alternating today / fair share (W = {cfg.weight:g} s), "
              f"{len(plan)} x {cfg.segment4:.0f} s ...", flush=True)
        run = asyncio.run(fr.drive(p, "alternating", cfg.weight, [User("solo", 200, 2 * POOL)],
                                   len(plan) * cfg.segment4, during=switch))
    segments: list[dict[str, Any]] = []
    for i, (mode, w) in enumerate(plan):
        a, b = i * cfg.segment4 + settle, (i + 1) * cfg.segment4
        segments.append({"mode": mode, "weight": w, "from": a, "to": b,
                         "rate": fr.served(run, a, b).get("solo", 0.0) / (b - a)})
    mean = {mode: sum(s["rate"] for s in segments if s["mode"] == mode) / 2
            for mode in ("today", "fair share")}
    return {"segments": segments, "rate": mean, "nominal": nominal_rate(cfg.speed),
            "ratio": measures.ratio(mean["fair share"], mean["today"])}


def _set_weight(p: Any, weight: float) -> None:
    from django.db import connection

    try:
        p.set_tier("interactive", fairshare_weight_seconds=weight)
    finally:
        connection.close()  # this worker thread's own


def scenario5(cfg: Config) -> dict[str, Any]:
    users = [User("zed", 100, 1), *(User(n, 100, 2) for n in FRESH5)]
    runs = run_modes(cfg, users, cfg.window5, weight=cfg.weight5, per_key=2,
                     seed={"zed": 1e9})
    queued = sum(u.outstanding for u in users if u.name != "zed") - POOL
    out = {}
    for mode, run in runs.items():
        waits = [_wait(c, run.end) for c in run.of("zed")]
        fresh = [_wait(c, run.end) for c in run.calls if c.client != "zed"]
        service = [c.done_at - c.headers_at for c in run.calls
                   if c.ok and c.headers_at is not None and c.done_at is not None]
        t_max = max(service, default=0.0)
        bound = cfg.weight5 + math.ceil((queued + 1) / POOL) * t_max
        usage, total, shares = (run.books[-1][1:] if run.books else ({}, 0.0, {}))
        f_zed = (2 ** (-(usage.get("zed", 0.0) / total) / shares["zed"])
                 if total and shares.get("zed") else None)
        out[mode] = {
            "weight": run.weight, "duration": run.duration, "zed_requests": len(waits),
            "zed_served": fr.completed(run, "zed"), "zed_wait": measures.summary(waits),
            "zed_waits": [[c.sent - run.t0, w] for c, w in zip(run.of("zed"), waits, strict=True)],
            "fresh_wait": measures.summary(fresh), "t_max": t_max, "queued_ahead": queued,
            "bound": bound, "f_zed": f_zed,
        }
    return out


def _wait(call: load.Call, end: float) -> float:
    """Queue wait: the gateway's header; a request cut off unadmitted waited at least until then."""
    if call.queued_ms is not None:
        return call.queued_ms / 1000.0
    admitted: float = call.headers_at if call.headers_at is not None else end
    return admitted - call.sent


CACHED_WEIGHTS = (1.0, 0.1)  # the baseline, and the default GP_FAIRSHARE_WEIGHT_CACHED_PROMPT
# 4,800 bytes: 1,200 enginesim tokens, 75 of its 16-token blocks.
SHARED6 = "".join(f"Section {n:02} of the lab's long shared instructions for every question asked....\n"
                  for n in range(60))


def cached_bodies(model: str, max_tokens: int) -> dict[str, Callable[[int], load.Body]]:
    """hit's prompts share SHARED6 as their prefix; each of miss's starts with its own number.
    One counter per user (its closed loops share it), so no two of miss's prompts are alike."""
    numbers = {"hit": itertools.count(), "miss": itertools.count()}

    def hit(_: int) -> load.Body:
        return load.chat_body(model, f"{SHARED6}Question {next(numbers['hit'])}?", max_tokens)

    def miss(_: int) -> load.Body:
        return load.chat_body(model, f"Case {next(numbers['miss'])}.\n{SHARED6}", max_tokens)

    return {"hit": hit, "miss": miss}


def cached_run(cfg: Config, cached_weight: float) -> dict[str, Any]:
    users = [User("hit", 100, 2 * POOL), User("miss", 100, 2 * POOL)]
    engine = EngineSpec(SLOTS, cfg.speed, extra_args=("--enable-prompt-tokens-details",))
    with portal(members={u.name: "interactive" for u in users}, engines=[engine], tiers=tiers(cfg.weight),
                gateway_env={"GP_FAIRSHARE_WEIGHT_CACHED_PROMPT": repr(cached_weight)}) as p:
        print(f"  cached prompt weight {cached_weight:g}: {cfg.window6:.0f} s ...", flush=True)
        run = asyncio.run(fr.drive(p, f"cached x{cached_weight:g}", cfg.weight, users, cfg.window6,
                                   bodies=cached_bodies(p.model, 100)))
    charged = run.books[-1][1] if run.books else {}
    served = {u.name: measures.tokens_between(run.of(u.name), run.t0, run.end) for u in users}
    done = {u.name: fr.completed(run, u.name) for u in users}
    return {
        "cached_weight": cached_weight, "duration": run.duration, "charged": charged, "served": served,
        "completed": done, "charged_ratio": _ratio(charged, "hit", "miss"),
        "served_ratio": _ratio(served, "hit", "miss"),
        "charge_per_request": {u: measures.ratio(charged.get(u), done[u]) for u in done},
    }


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def scenario6(cfg: Config) -> dict[str, Any]:
    rounds = []
    for n in range(cfg.rounds6):
        order = CACHED_WEIGHTS if n % 2 == 0 else CACHED_WEIGHTS[::-1]  # neither always runs first
        runs = {f"{w:g}": cached_run(cfg, w) for w in order}
        base, cheap = runs[f"{CACHED_WEIGHTS[0]:g}"], runs[f"{CACHED_WEIGHTS[1]:g}"]
        rounds.append({"runs": runs, "served_gain": measures.ratio(cheap["served_ratio"], base["served_ratio"]),
                       "charged_gain": measures.ratio(cheap["charged_ratio"], base["charged_ratio"])})
    median = {f"{w:g}": {figure: _median([r["runs"][f"{w:g}"][figure] for r in rounds])
                         for figure in ("charged_ratio", "served_ratio")} for w in CACHED_WEIGHTS}
    return {"weights": list(CACHED_WEIGHTS), "rounds": rounds, "median": median,
            "served_gain": _median([r["served_gain"] for r in rounds]),
            "charged_gain": _median([r["charged_gain"] for r in rounds])}


def _introduce(p: Portal, targets: dict[str, load.Target]) -> None:
    """One short request each, so the gateway adds the front end's people before the load
    starts; then long enough for every gateway to see the account's new members."""

    async def first_requests() -> None:
        async with load.make_client() as client:
            for name, target in targets.items():
                body = load.chat_body(p.model, "Hello.", 1)
                call = await load.chat(client, target, 0, body, load.Call(name, "hello"))
                if not call.ok:
                    raise RuntimeError(f"{name}'s first request failed: {call.error}\n{p.logs()}")

    asyncio.run(first_requests())
    time.sleep(EPOCH_CHECK_SECONDS * 2 + 0.1)


def front_end_run(cfg: Config, mode: str, weight: float) -> Run:
    users = [User(name, 200, 2 * POOL) for name in (*PEOPLE7, OWN7)]
    with portal(members={FRONT_END7: "interactive", OWN7: "interactive"}, engines=[EngineSpec(SLOTS, cfg.speed)],
                tiers=tiers(weight), accounts={"lab": AccountSpec(1, (FRONT_END7, OWN7))}) as p:
        service = p.members[FRONT_END7]
        front_end.make_front_end(service.key_id)
        time.sleep(EPOCH_CHECK_SECONDS * 2 + 0.1)  # every gateway reloads the key as a front end's
        named = front_end.people(PEOPLE7)
        targets: dict[str, load.Target] = {
            name: FrontEndTarget((p.gateway_url(),), service.secret, name, user) for name, user in named.items()}
        _introduce(p, {**targets, OWN7: load.Target((p.gateway_url(),), p.secret(OWN7), OWN7)})
        for name, user in named.items():
            p.members[name] = front_end.person(service, user, name)
        print(f"  {mode} (W = {weight:g} s): {cfg.window7:.0f} s ...", flush=True)
        return asyncio.run(fr.drive(p, mode, weight, users, cfg.window7, targets=targets))


def scenario7(cfg: Config) -> dict[str, Any]:
    people = (*PEOPLE7, OWN7)
    pairs = list(itertools.combinations(people, 2))
    out = {}
    for mode, w in modes(cfg):
        run = front_end_run(cfg, mode, w)
        s = fr.served(run)
        charged = run.books[-1][1] if run.books else {}
        ratios = {f"{a}:{b}": _ratio(s, a, b) for a, b in pairs}
        known = [r for r in ratios.values() if r]
        rows = fr.windows(run, cfg.jain_window)
        jain = [r["jain"] for r in rows if r["jain"] is not None]
        out[mode] = {
            "weight": w, "duration": run.duration, "served": s, "ratios": ratios,
            "spread": max((max(r, 1 / r) for r in known), default=None) if len(known) == len(pairs) else None,
            "charged": {name: charged.get(name, 0.0) for name in (*people, FRONT_END7)},
            "charged_ratios": {f"{a}:{b}": _ratio(charged, a, b) for a, b in pairs},
            "completed": {name: fr.completed(run, name) for name in people},
            "refused": {name: sum(1 for c in run.of(name) if c.status not in (0, 200)) for name in people},
            "jain_mean": sum(jain) / len(jain) if jain else None, "jain_min": min(jain, default=None),
            "cumulative": _series(run),
        }
    return out


SCENARIOS = {"1": scenario1, "2": scenario2, "3": scenario3, "4": scenario4, "5": scenario5,
             "6": scenario6, "7": scenario7}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairshare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short windows (about 5 minutes)")
    parser.add_argument("--speed", type=float, default=None, help="enginesim speed (quick 5, else 4)")
    parser.add_argument("--weight", type=float, default=None,
                        help="W of the fair-share runs in scenarios 1-4, wall seconds "
                             "(default 300 / speed)")
    parser.add_argument("--only", default="1,2,3,4,5,6,7", help="scenarios to run, e.g. 1,3")
    parser.add_argument("--name", default="fairshare", help="results file name")
    args = parser.parse_args(argv)
    cfg = Config.make(args.speed, args.quick, args.weight)
    chosen = [n.strip() for n in args.only.split(",") if n.strip()]
    print(f"fair-share benchmark: speed {cfg.speed:g}, W {cfg.weight:g} s (scenario 5: "
          f"{cfg.weight5:g} s), pool {POOL} of {SLOTS} slots", flush=True)
    started = time.monotonic()
    results: dict[str, Any] = {"config": asdict(cfg), "targets": []}
    for n in sorted(chosen):
        print(f"scenario {n}", flush=True)
        results[f"scenario{n}"] = SCENARIOS[n](cfg)
    for n in sorted(chosen):
        print()
        print(fs_report.TABLES[n](results[f"scenario{n}"]))
        results["targets"] += fs_report.TARGETS[n](results[f"scenario{n}"])
    return report.finish(args.name, results, started, plot)


if __name__ == "__main__":
    sys.exit(main())
