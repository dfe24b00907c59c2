"""Private prefix caches: what a tier's `isolate_prefix_cache` costs its users.

    .venv/bin/python -m bench.isolation [--quick] [--rounds N] [--users N]

The affinity bench measures what a prefix-cache hit is worth to one conversation; this one asks
what it costs to stop users sharing hits. One gateway, one enginesim replica and a tier of
``--users`` researchers, each with a key of their own. In every round they all use one long
system prompt (the lab's shared instructions, new each round so no round finds another's cache)
and each asks ``--turns`` short questions in a row, starting a little apart. Each round runs
both arms back to back on the same processes, in alternating order:

  shared    the tier shares the engine's prefix cache: the system prompt is prefilled once
  isolated  the tier sends each user's cache_salt: it is prefilled once per user

Figures are per-round ratios isolated / shared (median over rounds) of the median and p90
time to first token, of the first turn's TTFT (where the cost falls) and of the round's wall
time. Writes bench/results/isolation.json and isolation.png.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import load, report
from bench.harness import EngineSpec, portal
from bench.measures import ratio

ARMS = ("shared", "isolated")
WORDS = ("kernel", "cache", "tensor", "batch", "prefix", "replica", "token", "queue", "slot",
         "decode", "layer", "head", "shard", "model", "prompt", "block", "lease", "route")


def system_prompt(round_no: int, arm: str, tokens: int) -> str:
    # enginesim counts a token per 4 bytes; a fresh prompt per round and arm: caches start cold.
    rng = random.Random(f"{round_no}-{arm}")
    text = f"Lab instructions r{round_no} {arm}: "
    while len(text) < tokens * 4:
        text += rng.choice(WORDS) + " "
    return text


async def one_user(client: Any, target: load.Target, prompt: str, user: int, turns: int,
                   start_delay: float, calls: list[load.Call]) -> None:
    await asyncio.sleep(start_delay)  # arrivals a little apart, as people's are
    for turn in range(turns):
        body = load.chat_body("sim", f"question {turn} from user {user}?", max_tokens=16)
        body["messages"].insert(0, {"role": "system", "content": prompt})
        call = load.Call(client=f"u{user}", kind="first" if turn == 0 else "later")
        calls.append(await load.chat(client, target, 0, body, call, keep_times=False))


async def run_arm(p: Any, arm: str, round_no: int, args: argparse.Namespace) -> dict[str, Any]:
    prompt = system_prompt(round_no, arm, args.prompt_tokens)
    calls: list[load.Call] = []
    started = load.now()
    async with load.make_client(64) as client:
        await asyncio.gather(*(
            one_user(client, load.Target((p.gateway_url(),), p.secret(f"u{i}")), prompt, i,
                     args.turns, i * args.stagger, calls)
            for i in range(args.users)
        ))
    wall = load.now() - started
    failed = [c.error for c in calls if not c.ok]
    if failed:
        raise SystemExit(f"{arm} round {round_no}: {len(failed)} requests failed, e.g. {failed[0]}")
    ttfts = sorted(c.ttft or 0.0 for c in calls)
    firsts = [c.ttft or 0.0 for c in calls if c.kind == "first"]
    return {"ttft_p50_s": statistics.median(ttfts), "ttft_p90_s": ttfts[int(0.9 * (len(ttfts) - 1))],
            "first_turn_ttft_p50_s": statistics.median(firsts), "wall_s": wall}


def plot(results: dict[str, Any], name: str) -> Path:
    fig, axes = report.figure(1, 2)
    for ax, metric in zip(axes[0], ("ttft_p50_s", "first_turn_ttft_p50_s"), strict=True):
        for arm in ARMS:
            ax.plot([r[arm][metric] * 1000 for r in results["rounds"]], marker="o", label=arm)
        ax.set_title(metric.replace("_s", "") + " (ms) per round")
        ax.set_xlabel("round")
        ax.legend()
    return report.save_figure(fig, name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, 4 users")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=2000)
    parser.add_argument("--stagger", type=float, default=0.15, help="seconds between users' starts")
    parser.add_argument("--name", default="isolation")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.users = 3, 4
    started = time.monotonic()
    members = {f"u{i}": "lab" for i in range(args.users)}
    tier = {"per_key_concurrency": 4, "max_queued_per_key": 16, "max_queue_wait_seconds": 600.0,
            "isolate_prefix_cache": False}
    rounds: list[dict[str, Any]] = []
    with portal(members=members, tiers={"lab": tier}, engines=(EngineSpec(max_num_seqs=8),)) as p:
        for round_no in range(args.rounds):
            order = ARMS if round_no % 2 == 0 else ARMS[::-1]
            row: dict[str, Any] = {}
            for arm in order:
                p.set_tier("lab", isolate_prefix_cache=arm == "isolated")
                row[arm] = asyncio.run(run_arm(p, arm, round_no, args))
            rounds.append(row)
            print(f"round {round_no}: " + "  ".join(
                f"{arm} ttft p50 {row[arm]['ttft_p50_s'] * 1000:.0f} ms"
                f" first {row[arm]['first_turn_ttft_p50_s'] * 1000:.0f} ms"
                for arm in ARMS))
    ratios = {}
    for metric in ("ttft_p50_s", "ttft_p90_s", "first_turn_ttft_p50_s", "wall_s"):
        per_round = [ratio(r["isolated"][metric], r["shared"][metric]) for r in rounds]
        ratios[metric] = statistics.median(x for x in per_round if x is not None)
    print(report.table(["isolated / shared", "median of per-round ratios"],
                       [(k, f"{v:.2f}x") for k, v in ratios.items()], title="Cost of isolation"))
    targets = [report.target("isolation: median TTFT, isolated / shared", ratios["ttft_p50_s"], "<=", 3.0,
                             "x", "a user's later turns still hit their own cache")]
    results = {"config": vars(args), "rounds": rounds, "ratios": ratios, "targets": targets}
    return report.finish(args.name, results, started, plot)


if __name__ == "__main__":
    sys.exit(main())
