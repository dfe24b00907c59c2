"""How many requests one Redis core admits: Redis' work for each proxied request (admission's
acquire and release, and the usage event the release records in the same round trip), shaped as
the gateway sends it, on a redis-server of its own. (Each gateway process adds its counters up and
flushes them once a second, process_counts.py: a few dozen fields a second, whatever the traffic.)

    .venv/bin/python -m bench.redis_ceiling [--quick] [--rounds N] [--requests N]

Arms, interleaved every round (each pinned where the machine has two cores):
  own core   Redis alone on one core, this process's 64 concurrent requests on the other: Redis as
             deployed, shared by every gateway process and host, which is what makes its work per
             request the ceiling of scaling out.
  busy core  the same, with a process on Redis' core that churns 16 MiB in bursts between short
             naps, waking as a gateway does. This is bench.overhead's layout, where Redis shares
             the gateway's core: INFO commandstats times a call from its start to its end, so it
             also counts what the kernel gave the other process in between, and the caches Redis
             finds cold; Redis' own CPU (INFO cpu, getrusage of its main thread) counts only the
             latter.

Per request: time inside admission's functions (INFO commandstats), commands run, and Redis' own
CPU; from that CPU, the requests a second one Redis core could admit. The figures are medians of
the rounds. Target: function time at most 0.1 ms on a core of its own. Writes
bench/results/redis_ceiling.json and .png.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis
from redis.asyncio import Redis

from bench import report
from bench.harness import setup_django
from bench.overhead_sys import pin, redis_work

CONCURRENCY = 64
PEOPLE = 8  # persons of one tier, each its own association, as bench.overhead's keys
GROUP, REPLICA = "sim", "sim-0"
ESTIMATE, USED = 71.0, 55.0  # weighted tokens: a 16-token answer to a short prompt
REDIS_CORE, LOAD_CORE = 1, 0
CHURN_BYTES = 16 * 1024 * 1024
CHURN_BURST_S, CHURN_NAP_S = 0.0004, 0.0002


def churn(core: int) -> None:
    """The busy core arm's neighbour, until killed: on `core`, bursts of touching 16 MiB between
    short sleeps. Like a gateway it keeps waking up, so the kernel lets it in ahead of Redis (a
    process that never slept would only ever run when Redis waits)."""
    os.sched_setaffinity(0, {core})
    pages = [bytearray(4096) for _ in range(CHURN_BYTES // 4096)]
    i = 0
    while True:
        burst_end = time.perf_counter() + CHURN_BURST_S
        while time.perf_counter() < burst_end:
            for page in pages[i % 64::64]:
                page[i % 4096] ^= 1
            i += 1
        time.sleep(CHURN_NAP_S)


def demand(person: int) -> Any:
    from fairness.scheduling.admission import Demand

    return Demand(key_id=f"p{person}.bench", tier="bench", per_key_cap=128, pool_cap=None,
                  head_start_seconds=0.0, borrow=False, max_queued_per_key=1024, max_wait_seconds=600.0,
                  group=GROUP, preference=(REPLICA,), association=str(person), share=1 / PEOPLE,
                  fairshare_weight=300.0, estimate=ESTIMATE)


def usage_commands(person: int) -> list[Any]:
    from fairness.gateway import accounting

    event: accounting.UsageEvent = {
        "key_id": person, "person_id": person, "membership_id": person, "tier": "bench",
        "request_id": "req-" + os.urandom(16).hex(), "endpoint": "chat", "model": GROUP, "replica": REPLICA,
        "status": 200, "stream": False, "prompt_tokens": 23, "completion_tokens": 16, "cached_tokens": 0,
        "queued_ms": 0, "ttft_ms": 1, "latency_ms": 1, "at": time.time(),
        "prompt_count_source": "engine", "completion_count_source": "engine",
    }
    return accounting.commands(event)


async def load(url: str, requests: int) -> float:
    """`requests` acquire + release pairs, 64 at a time; the seconds they took."""
    from fairness.scheduling.admission import Admission

    client = Redis.from_url(url)
    admission = Admission(client)
    await admission.set_capacity(GROUP, {REPLICA: 1024})

    async def one(person: int) -> None:
        grant = await admission.acquire(demand(person))
        await admission.release(grant, also=usage_commands(person), charge=USED)

    async def worker(w: int) -> None:
        for i in range(requests // CONCURRENCY):
            await one((w + i) % PEOPLE)

    try:
        for person in range(PEOPLE):  # functions loaded, caps and shares stated
            await one(person)
        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
        return time.perf_counter() - started
    finally:
        await admission.close()
        await client.aclose()


def main_thread_cpu(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])


def measure(url: str, busy: bool, requests: int, pinned: bool) -> dict[str, Any]:
    neighbour = None
    if busy:
        neighbour = subprocess.Popen([sys.executable, "-m", "bench.redis_ceiling", "--churn", str(REDIS_CORE)])
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
        client.config_resetstat()
        cpu_before = main_thread_cpu(client)
        seconds = asyncio.run(load(url, requests))
        cpu = main_thread_cpu(client) - cpu_before
        work = redis_work(client.info("commandstats"))
    finally:
        client.close()
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    done = requests // CONCURRENCY * CONCURRENCY + PEOPLE
    return {"arm": "busy core" if busy else "own core", "requests": done, "rps": (done - PEOPLE) / seconds,
            "function_us": work["function_usec"] / done, "commands": work["commands"] / done,
            "fcalls": work["fcalls"] / done, "cpu_us": 1e6 * cpu / done, "pinned": pinned}


def pooled(runs: list[dict[str, Any]], arm: str) -> dict[str, Any]:
    mine = [r for r in runs if r["arm"] == arm]
    row = {k: statistics.median(r[k] for r in mine) for k in ("rps", "function_us", "commands", "fcalls", "cpu_us")}
    row["admitted_per_redis_core_s"] = 1e6 / row["cpu_us"]
    row["rounds"] = mine
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_ceiling", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer requests per window")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=None, help="requests per window")
    parser.add_argument("--churn", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.churn is not None:
        churn(args.churn)
        return 0
    started = time.monotonic()
    requests = args.requests or (6_400 if args.quick else 25_600)
    workspace = setup_django()
    url = workspace.redis_url.rsplit("/", 1)[0] + "/3"  # a database no gateway uses
    redis_pid = int(redis.Redis.from_url(url).info("server")["process_id"])
    pinned = (os.cpu_count() or 1) >= 2
    if pinned:
        pin([redis_pid], {REDIS_CORE})
        os.sched_setaffinity(0, {LOAD_CORE})
    runs = []
    for r in range(args.rounds):
        for busy in ((False, True) if r % 2 == 0 else (True, False)):
            run = measure(url, busy, requests, pinned)
            runs.append(run)
            print(f"  round {r + 1} {run['arm']:<9} {run['rps']:7.0f} req/s  functions {run['function_us']:6.1f} µs"
                  f"  Redis CPU {run['cpu_us']:6.1f} µs  {run['commands']:.1f} commands per request", flush=True)
    own, busy = pooled(runs, "own core"), pooled(runs, "busy core")
    print(report.table(
        ["arm", "functions µs/request", "Redis CPU µs/request", "commands/request", "requests/s per Redis core"],
        [[name, row["function_us"], row["cpu_us"], row["commands"], row["admitted_per_redis_core_s"]]
         for name, row in (("own core", own), ("busy core", busy))],
        title=f"Redis work per request, c={CONCURRENCY}, median of {args.rounds} rounds"))
    targets = [
        report.target("Redis time in admission's functions per request, c=64, Redis on a core of its own",
                      own["function_us"] / 1000, "<=", 0.1, " ms",
                      f"{own['fcalls']:.2f} function calls and {own['commands']:.1f} commands in all per "
                      f"request; Redis' own CPU {own['cpu_us'] / 1000:.3f} ms, so one Redis core admits about "
                      f"{own['admitted_per_redis_core_s']:,.0f} requests a second"),
        report.target("  (info) the same beside a busy core (bench.overhead's layout): functions / CPU",
                      busy["function_us"] / 1000, ">=", 0.0, " ms",
                      f"Redis' own CPU {busy['cpu_us'] / 1000:.3f} ms; functions ×"
                      f"{busy['function_us'] / own['function_us']:.2f} of own core, CPU ×"
                      f"{busy['cpu_us'] / own['cpu_us']:.2f}"),
    ]
    results = {"concurrency": CONCURRENCY, "requests_per_window": requests, "rounds": args.rounds,
               "pinned": pinned, "own_core": own, "busy_core": busy, "targets": targets}
    return report.finish("redis_ceiling", results, started, plot)


def plot(results: dict[str, Any], name: str) -> Path:
    """Each round's figures per request, by arm."""
    fig, axes = report.figure(1, 2, width=11, height_per_row=4)
    for ax, (field, title) in zip(axes[0], (("function_us", "time inside admission's functions"),
                                            ("cpu_us", "Redis' own CPU")), strict=True):
        for arm in ("own_core", "busy_core"):
            values = [r[field] for r in results[arm]["rounds"]]
            ax.plot(range(1, len(values) + 1), values, "o-", label=arm.replace("_", " "))
        ax.axhline(100, color="grey", linestyle=":", linewidth=1)
        ax.set(title=f"{title}, µs per request", xlabel="round", ylim=(0, None),
               xticks=range(1, results["rounds"] + 1))
        ax.legend()
    return report.save_figure(fig, name)


if __name__ == "__main__":
    sys.exit(main())
