"""Fairness benchmark: does the gateway keep interactive users fast while a batch job floods
the card, and does ageing stop a batch request from starving?

    .venv/bin/python -m bench.fairness [--speed X] [--quick] [--rounds N] [--gateways N]
                                       [--only fairness|ageing]

Default speed 4 (about 4 minutes); --quick: speed 5 and shorter windows (about 1.5 minutes).
The batch flood runs in a process of its own (bench/flood.py); each phase gets a fresh portal
with a private redis-server unless --redis-url is given.

Scenario 1, one enginesim replica with 8 slots and the reference timing (an 8B model on one GPU)
sped up by --speed. carol (batch tier) keeps 64 long requests in flight (400 tokens, ignore_eos);
alice, bob, dave and erin (interactive) each send short streamed chats (32 tokens) with 1-2 s of think time (÷ speed).
Phases, run one after another in one process, with equal windows for the loaded ones:
  idle-direct / idle-gateway   interactive users alone (the baseline TTFT)
  batch-direct / batch-gateway the flood alone (the baseline batch throughput)
  ideal-direct                 slots-less-reserve batch + interactive straight to the engine:
                               perfect admission without a gateway (tells policy from overhead)
  fcfs                         flood + interactive straight to the engine (what vLLM alone does)
  gateway                      flood + interactive through the gateway
Scenario "mixed", the same engine: carol floods 32 wide with long answers, frank (interactive,
the users' own tier, cap 2) keeps 6 requests of 128 tokens going, and the four users chat as
above. Phases idle-direct (the idle card), mixed-floor-direct (frank at his cap, the flood in
the slots the users leave, all straight to the engine: the card as busy, nobody ever waiting for a
slot), mixed-fcfs (all straight to the engine) and mixed-gateway. A greedy key in the users' own
tier must not slow them either.
Scenario "whole", the same engine: carol's flood (32 wide, 400 tokens) asks for whole answers,
which the gateway can redo, so they borrow the reserve too and give a slot back when a chat comes.
Phases idle-direct, batch-direct / batch-gateway (the flood alone: the card's throughput with and
without the gateway), floor-direct (4 of the flood's requests and the users straight to the
engine), gateway (the flood and the four users).
A busy card's floor: a continuously batching engine admits a newcomer at the next step and runs
its prefill in a step shared with everyone running, so a chat on a busy card waits up to a step
longer than on an idle one, whatever admits it. The floor phases measure that with no gateway
and no slot ever short; "the gateway's part" is the figure over its floor.
Scenario 2 (bench/ageing.py): six interactive keys keep 12 requests in flight on 8 slots; one
batch request arrives at a time; its wait with ageing (head start H) and without (strict
priority, head start 1e9).

Writes bench/results/fairness.json and fairness.png and prints the tables and PASS/FAIL targets.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench import ageing, report
from bench.fairness_plot import plot
from bench.harness import EngineSpec, Portal, portal
from bench.load import Target
from bench.measures import ratio
from bench.phases import Plan, run, summarize

INTERACTIVE_USERS = ("alice", "bob", "dave", "erin")
BATCH_USER = "carol"
GREEDY_USER = "frank"  # an interactive key flooding past its cap, in scenario "mixed"
GREEDY_CAP = 2  # the interactive tier's per-key cap (fairness/demo/default_tiers.py)
SLOTS = 8


@dataclass(frozen=True)
class Config:
    speed: float
    window: float  # loaded phases' measurement window (wall seconds)
    idle_window: float
    batch_window: float
    warmup: float
    jain_window: float
    head_start: float
    arrivals: int
    gateways: int
    admission_prefix: str
    redis_url: str | None

    @classmethod
    def make(cls, speed: float | None, quick: bool, gateways: int, prefix: str,
             redis_url: str | None = None) -> Config:
        speed = speed or (5.0 if quick else 4.0)
        # A batch request lasts ~4.5 s / speed; FCFS makes a newcomer wait for ~8 of them.
        scale = 50.0 if quick else 120.0
        return cls(
            speed=speed,
            window=scale / speed,
            idle_window=scale / 3 / speed,
            batch_window=scale / 3 / speed,
            warmup=max(1.0, 8.0 / speed),
            jain_window=4.0 / speed,
            head_start=2.0 if quick else 5.0,
            arrivals=2 if quick else 3,
            gateways=gateways,
            admission_prefix=prefix,
            redis_url=redis_url,
        )


PHASES = ("idle-direct", "idle-gateway", "batch-direct", "batch-gateway", "ideal-direct", "fcfs",
          "gateway")
# ideal-direct: as many batch requests as the gateway lets the flood run (the slots less the
# reserve; the gateways read GP_RESERVE_SLOTS from this environment, default 3 as in settings.py)
# and the interactive users, all straight to the engine and nothing queued: perfect admission
# at zero gateway cost, to tell policy from overhead.
IDEAL_BATCH = SLOTS - int(os.environ.get("GP_RESERVE_SLOTS", "3"))


def make_plan(name: str, p: Portal, cfg: Config) -> Plan:
    """One phase's plan on portal ``p``: "-direct" and "fcfs" go straight to the engine."""
    engine = p.engines[0].url
    through = name.endswith("gateway")
    urls = tuple(p.gateway_urls()) if through else (engine,)

    def target(user: str) -> Target:
        return Target(urls, p.secret(user) if through else None, "gateway" if through else "direct")

    common: dict[str, Any] = {
        "engine_url": engine, "model": p.model, "window": cfg.jain_window,
        "think": (1.0 / cfg.speed, 2.0 / cfg.speed), "warmup": cfg.warmup,
        "processes": {"engine": p.engines[0].pid,
                      **{f"gateway{i}": g.process.pid for i, g in enumerate(p.gateways)}},
    }
    if through:
        common["admission"] = (p.redis_url, cfg.admission_prefix)
        common["key_names"] = {m.unit: m.username for m in p.members.values()}
    interactive = {u: target(u) for u in INTERACTIVE_USERS}
    if name.startswith("idle"):
        return Plan(name, interactive=interactive, duration=cfg.idle_window, drain=10, **common)
    if name.startswith("batch"):
        return Plan(name, batch=target(BATCH_USER), duration=cfg.batch_window, **common)
    if name.startswith("whole-"):
        whole = {"batch": target(BATCH_USER), "batch_concurrency": 32, "batch_stream": False}
        if name == "whole-batch-direct" or name == "whole-batch-gateway":
            return Plan(name, duration=cfg.window, **whole, **common)
        if name == "whole-floor-direct":
            whole["batch_concurrency"] = SLOTS - len(INTERACTIVE_USERS)
        return Plan(name, interactive=interactive, duration=cfg.window, drain=cfg.window, **whole, **common)
    if name == "mixed-floor-direct":
        # The card kept busy, the users never waiting for a slot: frank at his cap, the flood
        # in what is left beside the four users.
        return Plan(name, interactive=interactive, batch=target(BATCH_USER),
                    batch_concurrency=SLOTS - len(INTERACTIVE_USERS) - GREEDY_CAP,
                    greedy=target(GREEDY_USER), greedy_user=GREEDY_USER, greedy_concurrency=GREEDY_CAP,
                    duration=cfg.window, drain=cfg.window, **common)
    if name.startswith("mixed"):
        return Plan(name, interactive=interactive, batch=target(BATCH_USER), batch_concurrency=32,
                    greedy=target(GREEDY_USER), greedy_user=GREEDY_USER, duration=cfg.window,
                    drain=cfg.window, **common)
    if name == "ideal-direct":
        return Plan(name, interactive=interactive, batch=target(BATCH_USER),
                    batch_concurrency=IDEAL_BATCH, duration=cfg.idle_window, drain=10, **common)
    return Plan(name, interactive=interactive, batch=target(BATCH_USER), duration=cfg.window,
                drain=cfg.window, **common)


def run_phases(cfg: Config, members: dict[str, str], names: tuple[str, ...]) -> dict[str, Any]:
    """Each phase gets a fresh portal (same configuration), so a slot leaked by one phase
    (reported as a warning) cannot skew the next one's figures."""
    phases = {}
    for name in names:
        with portal(members=members, engines=[EngineSpec(SLOTS, cfg.speed)],
                    gateways=cfg.gateways, redis_url=cfg.redis_url) as p:
            plan = make_plan(name, p, cfg)
            started = time.monotonic()
            print(f"  phase {name}: {plan.duration:.1f} s window ...", flush=True)
            phases[name] = summarize(asyncio.run(run(plan)))
            print(f"    done in {time.monotonic() - started:.1f} s", flush=True)
    return phases


def scenario_one(cfg: Config) -> dict[str, Any]:
    return run_phases(cfg, {**{u: "interactive" for u in INTERACTIVE_USERS}, BATCH_USER: "batch"}, PHASES)


MIXED_PHASES = ("idle-direct", "mixed-floor-direct", "mixed-fcfs", "mixed-gateway")


def scenario_mixed(cfg: Config) -> dict[str, Any]:
    members = {**{u: "interactive" for u in (*INTERACTIVE_USERS, GREEDY_USER)}, BATCH_USER: "batch"}
    return run_phases(cfg, members, MIXED_PHASES)


def busy_card_targets(p95: dict[str, float], scenario: str, when: str) -> list[report.Target]:
    """The users' TTFT p95 on the loaded card against the idle card, and against the busy card's
    own floor (see the module's docstring): the gateway's part."""
    loaded, floor = f"{scenario}-gateway", f"{scenario}-floor-direct"
    return [
        report.target(f"users' TTFT p95 {when} / idle card", ratio(p95.get(loaded), p95.get("idle-direct")),
                      "<=", 1.2, "x", f"{loaded} ÷ idle-direct"),
        report.target("  (info) the engine alone as busy, the users never waiting for a slot / idle card",
                      ratio(p95.get(floor), p95.get("idle-direct")), ">=", 1.0, "x",
                      f"{floor} ÷ idle-direct: a busy card's own floor"),
        report.target(f"users' TTFT p95 {when} / the busy card's floor: the gateway's part",
                      ratio(p95.get(loaded), p95.get(floor)), "<=", 1.2, "x", f"{loaded} ÷ {floor}"),
    ]


def scenario_mixed_targets(ph: dict[str, Any]) -> list[report.Target]:
    p95 = {name: ph[name]["interactive"]["ttft"]["p95"] for name in ph}
    return [
        *busy_card_targets(p95, "mixed", "under a mixed flood (batch + a greedy interactive key)"),
        report.target("  (info) the same straight to the engine (FCFS) / idle card",
                      ratio(p95.get("mixed-fcfs"), p95.get("idle-direct")), ">=", 1.0, "x",
                      "mixed-fcfs ÷ idle-direct"),
    ]


def print_mixed(ph: dict[str, Any]) -> None:
    rows = []
    for name, s in ph.items():
        i = s["interactive"]
        rows.append([name, i["requests"] or None, i["ttft"]["p50"], i["ttft"]["p95"], i["ttft"]["max"],
                     i["gateway_queued_ms"]["p95"] if i["gateway_queued_ms"]["n"] else None,
                     i["to_headers"]["p95"], i["headers_to_first_token"]["p95"],
                     s["batch"] and s["batch"]["tokens_per_s"],
                     s.get("greedy") and s["greedy"]["tokens_per_s"], s["engine"]["peak_running"]])
    print(report.table(["phase", "user req", "TTFT p50 s", "p95 s", "max s", "queued ms p95",
                        "to headers p95 s", "headers→1st token p95 s", "batch tok/s", "greedy tok/s",
                        "eng peak run"], rows, title="Scenario mixed: batch flood + a greedy interactive key"))


WHOLE_PHASES = ("idle-direct", "whole-batch-direct", "whole-batch-gateway", "whole-floor-direct", "whole-gateway")


def scenario_whole(cfg: Config) -> dict[str, Any]:
    return run_phases(cfg, {**{u: "interactive" for u in INTERACTIVE_USERS}, BATCH_USER: "batch"}, WHOLE_PHASES)


def scenario_whole_targets(ph: dict[str, Any]) -> list[report.Target]:
    rate = {name: ph[name]["batch"]["tokens_per_s"] for name in ph if ph[name]["batch"]}
    p95 = {name: ph[name]["interactive"]["ttft"]["p95"] for name in ph if ph[name]["interactive"]["requests"]}
    errors = sum(len(ph[name]["batch"]["errors"]) for name in ph if ph[name]["batch"])
    return [
        report.target("whole answers borrowing alone: throughput through the gateway / the engine alone",
                      ratio(rate.get("whole-batch-gateway"), rate.get("whole-batch-direct")), ">=", 0.97, "x",
                      "whole-batch-gateway ÷ whole-batch-direct"),
        *busy_card_targets(p95, "whole", "while whole answers fill the card"),
        report.target("batch requests that failed (a slot given back is redone, not lost)",
                      float(errors), "<=", 0.0, "", "error kinds over the phases"),
    ]


def print_whole(ph: dict[str, Any]) -> None:
    rows = []
    for name, s in ph.items():
        i, b = s["interactive"], s["batch"]
        rows.append([name, i["requests"] or None, i["ttft"]["p50"], i["ttft"]["p95"],
                     b and b["tokens_per_s"], b and b["completed"], b and ", ".join(b["errors"]) or None,
                     s["engine"]["running_mean"], s["engine"]["peak_running"]])
    print(report.table(["phase", "user req", "TTFT p50 s", "p95 s", "batch tok/s", "batch done", "batch errors",
                        "eng running mean", "eng peak run"], rows,
                       title="Scenario whole: a flood of whole answers, redone when a chat takes their slot"))


def scenario_one_targets(ph: dict[str, Any]) -> list[report.Target]:
    p95 = {name: (ph[name]["interactive"]["ttft"]["p95"]) for name in ph
           if ph[name]["interactive"]["requests"]}
    rate = {name: ph[name]["batch"]["tokens_per_s"] for name in ph if ph[name]["batch"]}
    return [
        report.target("interactive TTFT p95, gateway under flood / idle card (direct)",
                      ratio(p95.get("gateway"), p95.get("idle-direct")), "<=", 1.5, "x",
                      "gateway ÷ idle-direct"),
        report.target("interactive TTFT p95, gateway under flood / idle gateway",
                      ratio(p95.get("gateway"), p95.get("idle-gateway")), "<=", 1.5, "x",
                      "gateway ÷ idle-gateway (same path, isolates the flood)"),
        report.target("  (info) gateway under flood / ideal admission without a gateway",
                      ratio(p95.get("gateway"), p95.get("ideal-direct")), "<=", 1.5, "x",
                      f"gateway ÷ ideal-direct ({IDEAL_BATCH} batch running, nothing queued)"),
        report.target("interactive TTFT p95 improvement over FCFS direct",
                      ratio(p95.get("fcfs"), p95.get("gateway")), ">=", 10.0, "x",
                      "fcfs ÷ gateway"),
        report.target("batch throughput with interactive users / batch alone (direct)",
                      ratio(rate.get("gateway"), rate.get("batch-direct")), ">=", 0.6, "x",
                      "gateway ÷ batch-direct"),
    ]


def median_targets(per_round: list[list[report.Target]]) -> list[report.Target]:
    """Each target's median over the rounds (a shared box makes single runs noisy)."""
    if len(per_round) == 1:
        return per_round[0]
    merged = []
    for i, first in enumerate(per_round[0]):
        values = [r[i]["measured"] for r in per_round if r[i]["measured"] is not None]
        middle = statistics.median(values) if values else None
        listing = ", ".join(report.fmt(v) for v in values)
        merged.append(report.target(first["name"], middle, first["rule"], first["limit"],
                                    first["unit"], f"{first['detail']}; median of {listing}"))
    return merged


def print_rounds(rounds: list[dict[str, Any]]) -> None:
    rows = []
    for i, ph in enumerate(rounds, 1):
        p95 = {n: ph[n]["interactive"]["ttft"]["p95"] for n in ph}
        rows.append([i, p95["idle-direct"], p95["idle-gateway"], p95["ideal-direct"],
                     p95["gateway"], p95["fcfs"], ph["gateway"]["batch"]["tokens_per_s"],
                     ph["batch-direct"]["batch"]["tokens_per_s"],
                     ph["gateway"].get("loadavg_1min_at_end")])
    print(report.table(["round", "TTFT p95 idle-direct", "idle-gateway", "ideal-direct",
                        "gateway", "fcfs", "batch tok/s gateway", "batch alone", "load avg"],
                       rows, title="Rounds (the tables above are the last round's)"))


def print_scenario_one(ph: dict[str, Any]) -> None:
    rows = []
    for name, s in ph.items():
        i, b, e = s["interactive"], s["batch"], s["engine"]
        t = i["ttft"]
        rows.append([
            name, i["requests"] or None, t["p50"], t["p95"], t["max"], i["cut_off"] or None,
            i["jain"]["mean"], i["jain"]["min"],
            f"{i['jain']['windows_with_a_starved_client']}/{len(s['series']['jain'])}"
            if i["requests"] else None, b and b["tokens_per_s"],
            b and b["completion_time"]["p50"], e["waiting_mean"], e["waiting_max"],
            e["peak_running"],
        ])
    print(report.table(
        ["phase", "int req", "TTFT p50 s", "p95 s", "max s", "cut", "Jain mean", "Jain min",
         "starved win", "batch tok/s", "batch done p50 s", "eng wait mean", "wait max", "eng peak run"],
        rows, title="Scenario 1: batch flood vs interactive users"))
    names = sorted({n for s in ph.values() for n in s.get("cpu", {})})
    print()
    print(report.table(["phase", *names, "load avg"],
                       [[name, *(s.get("cpu", {}).get(n) for n in names),
                         s.get("loadavg_1min_at_end")] for name, s in ph.items()],
                       title="CPU seconds per second by process (2 cores here; other sessions "
                             "share the box: see the load average)"))
    peak_rows = []
    for name, s in ph.items():
        gateway = s.get("gateway_admission") or {}
        for user, adm in s["peak_in_flight"]["admitted"].items():
            peak_rows.append([name, user, adm, s["peak_in_flight"]["generating"].get(user),
                              (gateway.get("peak_in_flight_per_key") or {}).get(user),
                              (gateway.get("peak_queued_per_key") or {}).get(user)])
    print()
    print(report.table(["phase", "key", "client: admitted (headers→end)",
                        "client: generating (1st token→end)", "gateway: in flight",
                        "gateway: queued"], peak_rows,
                       title="Peak in flight per key. Client side: a stream's tail can be read "
                             "after the engine has started the next request, so 'generating' may "
                             "overcount by one or two (the engine's peak_running is exact); "
                             "gateway counters sampled every 0.1 s"))
    for name, s in ph.items():
        gateway = s.get("gateway_admission") or {}
        if gateway.get("leases_held_at_start"):
            print(f"WARNING: {name}: gateway leases held before the phase began (an earlier "
                  f"phase's leak): {gateway['leases_held_at_start']}")
        ageing.warn_leases(name, gateway.get("leases_left_after_phase"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speed", type=float, default=None, help="enginesim speed (default 4)")
    parser.add_argument("--quick", action="store_true", help="short windows for iterating")
    parser.add_argument("--gateways", type=int, default=1, help="gateway processes")
    parser.add_argument("--only", choices=("fairness", "mixed", "whole", "ageing"), default=None)
    parser.add_argument("--name", default="fairness", help="results file name")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat scenario 1; targets use each figure's median")
    parser.add_argument("--admission-prefix", default="gp",
                        help="the gateway's admission key prefix (to sample its counters)")
    parser.add_argument("--redis-url", default=None,
                        help="a Redis database to use and FLUSH (default: a private "
                             "redis-server on a free loopback port)")
    args = parser.parse_args(argv)
    cfg = Config.make(args.speed, args.quick, args.gateways, args.admission_prefix,
                      args.redis_url)
    print(f"fairness benchmark: speed {cfg.speed:g}, window {cfg.window:.1f} s, "
          f"{cfg.gateways} gateway(s)", flush=True)
    started = time.monotonic()
    results: dict[str, Any] = {"config": cfg.__dict__, "targets": []}
    if args.only in (None, "fairness"):
        rounds = []
        for r in range(args.rounds):
            if args.rounds > 1:
                print(f" round {r + 1} of {args.rounds}", flush=True)
            rounds.append(scenario_one(cfg))
        results["scenario1"] = rounds[-1]
        results["scenario1_rounds"] = rounds
        results["targets"] += median_targets([scenario_one_targets(ph) for ph in rounds])
        print()
        print_scenario_one(results["scenario1"])
        if len(rounds) > 1:
            print()
            print_rounds(rounds)
    if args.only in (None, "mixed"):
        mixed_rounds = [scenario_mixed(cfg) for _ in range(args.rounds)]
        results["mixed"] = mixed_rounds[-1]
        results["mixed_rounds"] = mixed_rounds
        results["targets"] += median_targets([scenario_mixed_targets(ph) for ph in mixed_rounds])
        print()
        print_mixed(results["mixed"])
    if args.only in (None, "whole"):
        whole_rounds = [scenario_whole(cfg) for _ in range(args.rounds)]
        results["whole"] = whole_rounds[-1]
        results["whole_rounds"] = whole_rounds
        results["targets"] += median_targets([scenario_whole_targets(ph) for ph in whole_rounds])
        print()
        print_whole(results["whole"])
    if args.only in (None, "ageing"):
        idle = results.get("scenario1", {}).get("idle-gateway", {})
        results["scenario2"] = ageing.run_both(cfg, SLOTS, idle.get("interactive"))
        results["targets"] += ageing.targets(results["scenario2"])
        print()
        ageing.print_table(results["scenario2"])
    return report.finish(args.name, results, started, plot)


if __name__ == "__main__":
    sys.exit(main())
