"""Is the published figure true? The capacity model's per-user estimate against what N users
measurably get from enginesim, at N = 1, 2, 4, 8, as a table of ratios (target 0.9-1.1).

    .venv/bin/python -m bench.capacity_truth [--quick]

Two engine profiles: the reference calibration (an 8B model on one GPU: step = 9.8 ms + 0.19 ms
per sequence) and a steeper one (2 ms per sequence), where the per-user figure falls visibly with
load. For each N the engine is loaded with N closed-loop users, the real poll unit samples it,
and the per-user rate is measured from the engine's own token counter; then the model is fitted to the samples of all
phases, exactly as the Celery task does, and its per-user figure is compared with each phase.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from bench.harness import EngineSpec, portal
from bench.report import figure, save_figure, table, target, targets_table, write_json
from enginesim.load import ClosedLoopUsers

USERS = (1, 2, 4, 8)
PROFILES = {"seed": (), "steep": ("--step-per-seq-ms", "2")}


def poll() -> None:
    from fairness.gateway import engine_client
    from fairness.store.redis_clients import redis_async
    from fairness.telemetry import polling

    async def once() -> None:
        try:
            await polling.poll_once()
        finally:
            await redis_async().aclose()
            await engine_client.client().aclose()

    asyncio.run(once())


def until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def run_profile(name: str, extra: tuple[str, ...], speed: float, polls: int) -> dict[str, Any]:
    with portal(members={}, engines=[EngineSpec(max_num_seqs=8, speed=speed, extra_args=extra)], gateways=0) as p:
        from fairness.telemetry import capacity_store  # Django is set up by the portal

        engine = p.engines[0]
        measured: dict[int, float] = {}
        for n in USERS:
            users = ClosedLoopUsers(engine.url, p.model, n)
            try:
                until(lambda n=n: engine.stats()["running"] == n, 30, f"{n} running")
                poll()  # this phase's first rate would span the change of load
                start = engine.stats()
                for _ in range(polls):
                    done = engine.stats()["generation_tokens"] + 60 * n  # polls spaced by work
                    until(lambda done=done: engine.stats()["generation_tokens"] >= done, 30, "tokens")
                    poll()
                end = engine.stats()
            finally:
                users.stop()
            until(lambda: engine.stats()["running"] == 0, 30, "drain")
            rate = (end["generation_tokens"] - start["generation_tokens"]) / (end["clock"] - start["clock"])
            measured[n] = rate / n
        estimate = capacity_store.refit()[p.model]
        assert estimate is not None, "no estimate: too few samples"
        rows = [{"users": n, "measured": measured[n], "published": estimate.per_user(n),
                 "ratio": estimate.per_user(n) / measured[n]} for n in USERS]
        return {"profile": name, "a_ms": estimate.a * 1000, "c_ms": estimate.c * 1000,
                "basis": estimate.basis, "samples": estimate.samples, "sentence": estimate.sentence(),
                "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--speed", type=float, default=4.0)
    args = parser.parse_args(argv)
    polls = 5 if args.quick else 10
    results = [run_profile(name, extra, args.speed, polls) for name, extra in PROFILES.items()]

    targets = []
    for result in results:
        print(table(["users", "measured tok/s each", "published", "ratio"],
                    [(r["users"], r["measured"], r["published"], r["ratio"]) for r in result["rows"]],
                    title=f"profile {result['profile']}: a = {result['a_ms']:.2f} ms, c = {result['c_ms']:.3f} ms "
                          f"({result['basis']}, {result['samples']} samples)"))
        print(f"  {result['sentence']}\n")
        worst = max(result["rows"], key=lambda r: abs(r["ratio"] - 1))
        ratios = [r["ratio"] for r in result["rows"]]
        targets.append(target(f"{result['profile']}: every ratio >= 0.9", min(ratios), ">=", 0.9))
        targets.append(target(f"{result['profile']}: every ratio <= 1.1", max(ratios), "<=", 1.1,
                              detail=f"worst at {worst['users']} users"))
    print(targets_table(targets))

    fig, axes = figure(1, len(results))
    for ax, result in zip(axes[0], results, strict=True):
        ns = [r["users"] for r in result["rows"]]
        ax.plot(ns, [r["measured"] for r in result["rows"]], "o-", label="measured per user")
        ax.plot(ns, [r["published"] for r in result["rows"]], "s--", label="published per user")
        ax.set_title(f"{result['profile']} engine")
        ax.set_xlabel("concurrent users")
        ax.set_ylabel("tok/s each")
        ax.legend()
    save_figure(fig, "capacity_truth")
    write_json("capacity_truth", {"speed": args.speed, "results": results, "targets": targets})
    return 0 if all(t["ok"] for t in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
