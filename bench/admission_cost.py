"""Admission cost against queue length: take + release of a lease for a key nobody contends,
with 10 and with 10,000 tickets of other keys waiting. Target: ≤ 2× (the scripts only look at
queue heads, so the cost should not grow with the queue).

    .venv/bin/python -m bench.admission_cost [--quick] [--iterations N] [--redis-url URL]

The waiting tickets belong to 100 keys (fewer for a short queue) that each hold their one lease
(cap 1) and queue more behind it, so none of them can be granted; the group has slots to spare,
so only the key caps keep them waiting. They are queued by one Admission instance whose keeper
is slowed right down (it would otherwise heartbeat all of them every second and we would be
timing that); a second instance, as another gateway process would, takes and releases.
Every key charges an association of its own (the measured key shares one with a capped key, so
each of its releases also scores a waiting stream head again, as fair share does). Sizes are
measured in interleaved rounds (median per figure). Writes
bench/results/admission_cost.json and .png.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
import uuid
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis

from bench import measures, report
from bench.harness import private_redis
from fairness.scheduling.admission import Admission, Demand, Grant

GROUP = "bench-model"
CAPPED_KEYS = 100
CHARGE = 150.0  # weighted tokens each release charges (fair share)


def _demand(key_id: str, max_queued: int, cap: int, association: str) -> Demand:
    return Demand(key_id=key_id, tier="interactive", per_key_cap=cap, pool_cap=None,
                  head_start_seconds=600.0, borrow=False, max_queued_per_key=max_queued,
                  max_wait_seconds=3600.0, group=GROUP, association=association,
                  share=1 / CAPPED_KEYS, fairshare_weight=300.0)


def _client(url: str) -> Redis:
    # Bounded: ten thousand concurrent acquires must not open ten thousand connections.
    return Redis(connection_pool=BlockingConnectionPool.from_url(url, max_connections=64))


async def _queued(admission: Admission) -> int:
    return (await admission.stats())["groups"].get(GROUP, {"queued": 0})["queued"]


async def measure(url: str, waiting: int, iterations: int) -> dict[str, Any]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    queue_client, meter_client = _client(url), _client(url)
    queuer = Admission(queue_client, prefix=prefix, lease_ttl=3600.0, recheck_seconds=1000.0)
    meter = Admission(meter_client, prefix=prefix)
    tasks: list[asyncio.Task[Grant]] = []
    held: list[Grant] = []
    try:
        await meter.set_capacity(GROUP, 100_000)
        keys = min(CAPPED_KEYS, waiting)
        per_key = -(-waiting // keys)
        for k in range(keys):  # each capped key holds its one lease ...
            held.append(await queuer.acquire(_demand(f"capped{k}", per_key, 1, f"a{k}")))
        started = time.perf_counter()
        for i in range(waiting):  # ... and queues behind it
            tasks.append(asyncio.create_task(
                queuer.acquire(_demand(f"capped{i % keys}", per_key, 1, f"a{i % keys}"))))
            if len(tasks) % 500 == 0:
                await asyncio.sleep(0)
        deadline = time.monotonic() + 120
        while await _queued(queuer) < waiting:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {await _queued(queuer)} of {waiting} tickets queued")
            await asyncio.sleep(0.05)
        build = time.perf_counter() - started
        # The waiting acquires are objects in this process: keep the garbage collector from
        # walking them during the measurement (that would be our cost, not the admission's).
        gc.collect()
        gc.freeze()
        # Its association is also a capped key's, so every charge scores a waiting head again.
        free = _demand("uncontended", 1, 2, "a0")
        for _ in range(max(20, iterations // 10)):  # warm up: scripts loaded, pub/sub subscribed
            await meter.release(await meter.acquire(free), charge=CHARGE)
        total, take, give = [], [], []
        for _ in range(iterations):
            t0 = time.perf_counter()
            grant = await meter.acquire(free)
            t1 = time.perf_counter()
            await meter.release(grant, charge=CHARGE)
            t2 = time.perf_counter()
            total.append(t2 - t0)
            take.append(t1 - t0)
            give.append(t2 - t1)
        assert await _queued(queuer) == waiting, "the waiting tickets must still be waiting"
        return {"waiting": waiting, "capped_keys": keys, "iterations": iterations,
                "queue_build_s": build, "take_release_ms": _ms(total), "take_ms": _ms(take),
                "release_ms": _ms(give), "samples_ms": [round(x * 1000, 4) for x in total]}
    finally:
        gc.unfreeze()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for grant in held:
            await queuer.release(grant)
        await queuer.close()
        await meter.close()
        async for name in meter_client.scan_iter(match=f"{prefix}:*", count=1000):
            await meter_client.delete(name)
        await queue_client.aclose()
        await meter_client.aclose()


def _merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One size's rounds: the median of each round's figures; every sample for the plot."""
    if len(runs) == 1:
        return runs[0]
    merged = dict(runs[0])
    for part in ("take_release_ms", "take_ms", "release_ms"):
        merged[part] = {k: statistics.median(r[part][k] for r in runs)
                        for k in ("p50", "p95", "p99", "max", "mean")}
        merged[part]["n"] = sum(r[part]["n"] for r in runs)
        merged[part]["rounds"] = [r[part] for r in runs]
    merged["queue_build_s"] = statistics.median(r["queue_build_s"] for r in runs)
    merged["samples_ms"] = [x for r in runs for x in r["samples_ms"]]
    return merged


def _ms(values: list[float]) -> dict[str, Any]:
    return {k: (v * 1000 if isinstance(v, float) else v)
            for k, v in measures.summary(values).items()}


def plot(results: dict[str, Any], name: str) -> None:
    fig, axes = report.figure(1, 1, width=8, height_per_row=4)
    ax = axes[0][0]
    for run in results["runs"]:
        data = sorted(run["samples_ms"])
        ax.plot(data, [i / len(data) for i in range(len(data))],
                label=f"{run['waiting']:,} tickets waiting")
    ax.set_xscale("log")
    ax.set(title="Take + release latency, uncontended key", xlabel="ms", ylabel="fraction ≤ x")
    ax.legend()
    report.save_figure(fig, name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.admission_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--redis-url", default=None,
                        help="a Redis to use (keys under a fresh prefix, removed afterwards; "
                             "default: a private redis-server on a free loopback port)")
    parser.add_argument("--sizes", default="10,10000", help="queue lengths, comma-separated")
    parser.add_argument("--rounds", type=int, default=2,
                        help="interleaved repetitions; figures are medians over them")
    args = parser.parse_args(argv)
    iterations = args.iterations or (300 if args.quick else 2000)
    url = args.redis_url or private_redis()
    sizes = [int(s) for s in args.sizes.split(",")]
    every = []
    for r in range(args.rounds):  # interleaved, so drift on a shared box hits every size
        for size in sizes:
            print(f"  round {r + 1}: {size:,} tickets waiting, {iterations} take+release ...",
                  flush=True)
            every.append(asyncio.run(measure(url, size, iterations)))
    runs = [_merge([run for run in every if run["waiting"] == size]) for size in sizes]
    rows = [[r["waiting"], r["take_release_ms"]["p50"], r["take_release_ms"]["p95"],
             r["take_release_ms"]["p99"], r["take_ms"]["p50"], r["release_ms"]["p50"],
             r["queue_build_s"]] for r in runs]
    print(report.table(["tickets waiting", "take+release p50 ms", "p95 ms", "p99 ms",
                        "take p50 ms", "release p50 ms", "queue built in s"], rows,
                       title="Admission cost vs queue length"))
    small, large = runs[0], runs[-1]
    targets = [
        report.target(f"take+release p50, {large['waiting']:,} vs {small['waiting']:,} waiting",
                      measures.ratio(large["take_release_ms"]["p50"],
                                     small["take_release_ms"]["p50"]), "<=", 2.0, "x",
                      "p50 ratio"),
        report.target(f"take+release p95, {large['waiting']:,} vs {small['waiting']:,} waiting",
                      measures.ratio(large["take_release_ms"]["p95"],
                                     small["take_release_ms"]["p95"]), "<=", 2.0, "x",
                      "p95 ratio"),
    ]
    print()
    print(report.targets_table(targets))
    results = {"runs": runs, "targets": targets}
    plot(results, "admission_cost")
    path = report.write_json("admission_cost", results)
    print(f"\nwrote {path}")
    return 0 if all(t["ok"] for t in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
