"""The two hand-written clients on the hot path, each beside the library it replaced: the lean
engine client (fairness/gateway/engine_http.py) against httpx, and the Redis lane
(fairness/store/redis_lane.py) against redis-py's asyncio client. The figure is the client's own
CPU per request (this process's CPU time over the requests it sent), which is what each costs the
gateway's event loop.

    .venv/bin/python -m bench.clients [--quick] [--rounds N]

The engine is an enginesim in --instant mode answering a small non-streaming chat, the Redis a
private redis-server answering GET; both are pinned to one core and this process to the other
(where the machine has two). Each hop is measured at concurrency 1 and 16. The arms alternate
within every round (their order swapped each
round), with the same number of requests each; the figure per arm is the median over rounds, and
the ratio is the median of the per-round ratios. Writes bench/results/clients.json and .png.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import redis.asyncio as aredis

from bench import report
from bench.harness import cleanup_on_sigterm, private_redis
from bench.overhead_sys import find_process, pin
from enginesim.process import start_enginesim
from fairness.gateway import engine_http
from fairness.store.redis_lane import RedisLane

PATH = "/v1/chat/completions"
BODY = b'{"model":"sim","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}'
HEADERS = {"Content-Type": "application/json"}

Send = Callable[[], Awaitable[None]]


async def cpu_per_request(send: Send, requests: int, concurrency: int) -> float:
    """This process's CPU seconds per request while `concurrency` senders share `requests`."""
    left = requests

    async def sender() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await send()

    started = time.process_time()
    await asyncio.gather(*(sender() for _ in range(concurrency)))
    return (time.process_time() - started) / requests


async def measure(arms: dict[str, Send], requests: int, concurrency: int, rounds: int) -> dict[str, Any]:
    names = list(arms)
    for name in names:  # warm: connections open, code paths loaded
        await cpu_per_request(arms[name], max(100, requests // 10), concurrency)
    per_round: list[dict[str, float]] = []
    for number in range(rounds):
        order = names if number % 2 == 0 else names[::-1]
        figures = {name: await cpu_per_request(arms[name], requests, concurrency) for name in order}
        per_round.append(figures)
        print("  round", number + 1, "  ".join(f"{n} {figures[n] * 1e6:.1f} µs" for n in names))
    ours, theirs = names
    return {
        "us_per_request": {n: statistics.median(r[n] for r in per_round) * 1e6 for n in names},
        "ratio": statistics.median(r[ours] / r[theirs] for r in per_round),
        "rounds": [{n: r[n] * 1e6 for n in names} for r in per_round],
    }


def engine_arms(url: str) -> tuple[dict[str, Send], Callable[[], Awaitable[None]]]:
    client = httpx.AsyncClient(timeout=30, trust_env=False)

    async def lean() -> None:
        response = await engine_http.post(url, PATH, BODY, HEADERS, connect_timeout=5, read_timeout=30)
        await response.aread()
        await response.aclose()

    async def with_httpx() -> None:
        response = await client.send(client.build_request("POST", url + PATH, content=BODY, headers=HEADERS),
                                     stream=True)
        await response.aread()
        await response.aclose()

    async def close() -> None:
        engine_http.close_pool()
        await client.aclose()

    return {"lean client": lean, "httpx": with_httpx}, close


def redis_arms(url: str) -> tuple[dict[str, Send], Callable[[], Awaitable[None]]]:
    client = aredis.Redis.from_url(url, max_connections=64)
    lane = RedisLane.like(client)

    async def on_lane() -> None:
        await lane.execute(("GET", "bench:clients"))

    async def with_redis_py() -> None:
        await client.get("bench:clients")

    async def close() -> None:
        await lane.aclose()
        await client.aclose()

    return {"lane": on_lane, "redis-py": with_redis_py}, close


CONCURRENCIES = (1, 16)


async def run(args: argparse.Namespace, engine_url: str, redis_url: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for title, make, requests in (
        ("engine", engine_arms, args.engine_requests),
        ("redis", redis_arms, args.redis_requests),
    ):
        for concurrency in CONCURRENCIES:
            arms, close = make(engine_url if title == "engine" else redis_url)
            print(f"{title}: {requests} requests per arm per round at concurrency {concurrency} ...")
            try:
                results[f"{title} c={concurrency}"] = await measure(arms, requests, concurrency, args.rounds)
            finally:
                await close()
    return results


def plot(results: dict[str, Any], name: str) -> Any:
    parts = [f"{hop} c={c}" for hop in ("engine", "redis") for c in CONCURRENCIES]
    fig, axes = report.figure(1, len(parts), width=14)
    for ax, part in zip(axes[0], parts, strict=True):
        figures = results[part]["us_per_request"]
        ax.bar(list(figures), list(figures.values()), color=["tab:blue", "tab:gray"])
        ax.set_title(f"{part}: client CPU per request (µs)")
    return report.save_figure(fig, name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    args.engine_requests = 1_000 if args.quick else 4_000
    args.redis_requests = 5_000 if args.quick else 20_000
    started = time.monotonic()
    cleanup_on_sigterm()
    redis_url = private_redis()
    engine = start_enginesim(model="sim", max_num_seqs=64, extra_args=["--instant"])
    try:
        if (os.cpu_count() or 1) >= 2:
            redis_pid = find_process("redis-server", redis_url.rsplit(":", 1)[1].split("/")[0])
            pin([engine.pid, *([redis_pid] if redis_pid else [])], {1})
            pin([os.getpid()], {0})
        results: dict[str, Any] = {"config": vars(args), **asyncio.run(run(args, engine.url, redis_url))}
    finally:
        engine.stop()
    names = {"engine": "engine (lean client / httpx)", "redis": "Redis (lane / redis-py)"}
    rows = []
    for hop, name in names.items():
        for concurrency in CONCURRENCIES:
            figures = results[f"{hop} c={concurrency}"]
            rows.append([name, concurrency, *figures["us_per_request"].values(), figures["ratio"]])
    print()
    print(report.table(["hop", "c", "ours µs", "library µs", "ours / library"], rows,
                       title="Client CPU per request, median of rounds"))
    results["targets"] = [
        report.target(f"{name}: CPU ratio at c={c}", results[f"{hop} c={c}"]["ratio"], "<=", 0.5)
        for hop, name in names.items() for c in CONCURRENCIES
    ]
    return report.finish("clients", results, started, plot)


if __name__ == "__main__":
    raise SystemExit(main())
