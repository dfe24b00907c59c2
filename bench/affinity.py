"""Affinity benchmark: does sending a conversation back to the replica that holds its prefix
cache pay, and does bounded load keep one hot session from piling onto one replica?

    .venv/bin/python -m bench.affinity [--quick] [--speed X] [--only main|skewed]

Three enginesim replicas, 16-token blocks, each with KV for a third of the conversations at
full length (11 of 32), so a router that scatters turns thrashes the prefix caches.
Main run: 32 conversations of 8 turns, started within one engine-second; each turn adds ~690
tokens of user text, is answered with 32 tokens (ignore_eos) that join the history, and is
followed by 1-3 engine-seconds of thinking; the last prompt is ~6,000 tokens. Each strategy
runs on fresh engines (cold caches):
  round-robin     client-side, straight to the engines
  least-loaded    client-side, fewest requests this client has in flight
  rendezvous      client-side, the gateway's own key and hash, no bound: affinity's ceiling
  ours            through one gateway process (one key, caps far above the load)
  ours-unbounded  the same gateway with GP_ROUTING_EPSILON=1e6: the bound's cost, isolated
Skewed run (closed loops, no thinking, a fixed window; conversations restart after 8 turns):
16 ordinary users with one conversation each and 4 hot users keeping 5 conversations each
under one shared team X-Session-ID (20 of 36 streams on one key): ours against rendezvous.

Writes bench/results/affinity.json and affinity.png, prints tables and PASS/FAIL targets.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from bench import affinity_plot as readout
from bench import load, report
from bench.harness import EngineSpec, Portal, portal
from enginesim.tokens import render_chat

REPLICA_HEADER = "x-gpuportal-replica"
SESSION_HEADER = "X-Session-ID"
BLOCK_BYTES = 64  # an enginesim block: 16 tokens of 4 bytes
VOCAB = ("kernel", "cache", "tensor", "batch", "prefix", "replica", "token", "queue", "slot",
         "decode", "layer", "head", "shard", "model", "prompt", "block", "lease", "route")
MAIN = ("round-robin", "least-loaded", "rendezvous", "ours", "ours-unbounded")
SKEWED = ("rendezvous", "ours")
Body = dict[str, Any]
Choose = Callable[[Body, "str | None", Mapping[str, int]], str]
Samples = readout.Samples


@dataclass(frozen=True)
class Config:
    speed: float
    conversations: int = 32
    turns: int = 8
    opening_tokens: int = 700
    followup_tokens: int = 690
    reply_tokens: int = 32
    replicas: int = 3
    max_num_seqs: int = 32  # slots are not what is short here; KV is
    max_model_len: int = 8192
    epsilon: float = 0.25  # the gateway's GP_ROUTING_EPSILON
    stagger: float = 1.0  # engine-seconds over which conversations start
    think: tuple[float, float] = (1.0, 3.0)  # engine-seconds between turns (main run)
    ordinary: int = 16  # skewed run
    hot_users: int = 4
    hot_streams: int = 5
    skew_window: float = 60.0  # engine-seconds measured, after skew_warmup
    skew_warmup: float = 10.0

    def wall(self, seconds: float) -> float:
        return seconds / self.speed


# -- the workload -------------------------------------------------------------------------------


def prose(rng: random.Random, tokens: int) -> str:
    """ASCII text of exactly ``tokens`` enginesim tokens (4 bytes each)."""
    out = ""
    while len(out) < 4 * tokens:
        out += rng.choice(VOCAB) + " "
    return out[: 4 * tokens]


@dataclass
class Conversation:
    name: str  # opens the first block, so no two conversations share a cached prefix
    cfg: Config
    session: str | None = None
    messages: list[dict[str, str]] = field(default_factory=list)
    prev_bytes: int = 0  # the previous turn's rendered prompt

    def next_body(self, model: str) -> Body:
        rng = random.Random(f"{self.name}/{len(self.messages)}")
        first = not self.messages
        text = f"[{self.name}] {'Some context' if first else 'Next question'}:\n" + prose(
            rng, self.cfg.opening_tokens if first else self.cfg.followup_tokens)
        self.messages.append({"role": "user", "content": text})
        return {"model": model, "messages": list(self.messages), "stream": True,
                "max_tokens": self.cfg.reply_tokens, "ignore_eos": True,
                "stream_options": {"include_usage": True}}

    def cacheable(self) -> int:
        """Tokens of this turn's prompt a replica holding the previous turn's prompt would hit:
        that prompt's full blocks (the reply is never cached), leaving one token to compute."""
        size = len(render_chat(self.messages))
        blocks = min(self.prev_bytes // BLOCK_BYTES, (-(-size // 4) - 1) // 16)
        self.prev_bytes = size
        return blocks * 16

    def answer(self, reply: str) -> None:
        self.messages.append({"role": "assistant", "content": reply})


def final_prompt_tokens(cfg: Config) -> int:
    conv = Conversation("probe-000", cfg)
    for _ in range(cfg.turns):
        conv.next_body("m")
        conv.answer(" ".join(["lorem"] * cfg.reply_tokens))
    conv.messages.pop()
    return -(-len(render_chat(conv.messages)) // 4)


def engine_spec(cfg: Config) -> EngineSpec:
    """KV for a replica's share of the conversations at full length, and no more."""
    blocks = -(-(final_prompt_tokens(cfg) + cfg.reply_tokens) // 16)
    per_replica = -(-cfg.conversations // cfg.replicas)
    return EngineSpec(cfg.max_num_seqs, cfg.speed, extra_args=(
        "--max-model-len", str(cfg.max_model_len), "--block-size", "16",
        "--num-gpu-blocks", str(per_replica * blocks)))


# -- routes: where a turn goes, and the client that sends it ------------------------------------


@dataclass
class Turn:
    conversation: str
    turn: int
    sent: float
    cacheable: int
    replica: str = ""
    favourite: str = ""  # the replica pure rendezvous picks
    headers_at: float | None = None
    queued_ms: int | None = None  # the gateway's admission wait, as it reports it
    first_token_at: float | None = None
    done_at: float | None = None
    prompt_tokens: int = 0
    error: str | None = None
    # This client's requests in flight when it was sent: all, and on the favourite (what
    # bounded load decides on, as the client sees it).
    total_at_send: int = 0
    favourite_at_send: int = 0

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.sent


@dataclass
class Route:
    """Client-side choice over ``engines`` (name -> url), or the gateway when ``choose`` is None."""

    label: str
    engines: dict[str, str]
    favourite: Choose
    choose: Choose | None = None
    gateway: str = ""
    secret: str = ""
    in_flight: Counter[str] = field(default_factory=Counter)  # "": replica not known yet

    def target(self, body: Body, session: str | None) -> tuple[str, str, dict[str, str]]:
        if self.choose is None:
            headers = {"Authorization": f"Bearer {self.secret}"}
            return self.gateway, "", {**headers, SESSION_HEADER: session} if session else headers
        name = self.choose(body, session, self.in_flight)
        return self.engines[name], name, {}


def round_robin(names: Sequence[str]) -> Choose:
    turn = itertools.cycle(names)
    return lambda body, session, busy: next(turn)


def least_loaded(names: Sequence[str]) -> Choose:
    start = itertools.count()  # ties rotate, or the first name would win every idle moment

    def choose(body: Body, session: str | None, busy: Mapping[str, int]) -> str:
        k = next(start) % len(names)
        return min([*names[k:], *names[:k]], key=lambda n: busy.get(n, 0))

    return choose


def rendezvous(p: Portal) -> Choose:
    """The gateway's conversation key and rendezvous order; always the first choice."""
    from fairness.gateway.replica_rows import replica_info
    from fairness.models import Replica
    from fairness.scheduling import routing

    replicas = [replica_info(r) for r in Replica.objects.order_by("name")]
    return lambda body, session, busy: routing.preference(
        replicas, routing.conversation_key(body, session) or "")[0].name


def make_route(label: str, p: Portal) -> Route:
    engines = {f"sim-{i}": e.url for i, e in enumerate(p.engines)}  # the harness's names
    names, favourite = sorted(engines), rendezvous(p)
    if label.startswith("ours"):
        return Route(label, engines, favourite, None, p.gateway_url(), p.secret("bench"))
    choose = {"round-robin": round_robin(names), "least-loaded": least_loaded(names),
              "rendezvous": favourite}[label]
    return Route(label, engines, favourite, choose)


async def send(client: httpx.AsyncClient, route: Route, session: str | None, turn: Turn,
               body: Body) -> str:
    """One streamed turn; fills ``turn`` and returns the reply's text."""
    url, turn.replica, headers = route.target(body, session)
    turn.favourite = route.favourite(body, session, {})
    turn.total_at_send = sum(route.in_flight.values())
    turn.favourite_at_send = route.in_flight[turn.favourite]
    route.in_flight[turn.replica] += 1
    pieces: list[str] = []
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body,
                                 headers=headers) as resp:
            turn.headers_at = load.now()
            queued = resp.headers.get(load.QUEUED_HEADER, "")
            turn.queued_ms = int(queued) if queued.isdigit() else None
            if not turn.replica:
                route.in_flight[""] -= 1
                turn.replica = resp.headers.get(REPLICA_HEADER, "?")
                route.in_flight[turn.replica] += 1
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                turn.error = f"HTTP {resp.status_code}: {text[:200]}"
                return ""
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if event.get("usage"):
                    turn.prompt_tokens = int(event["usage"].get("prompt_tokens") or 0)
                for choice in event.get("choices") or ():
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        turn.first_token_at = turn.first_token_at or load.now()
                        pieces.append(piece)
        turn.done_at = load.now()
    except (httpx.HTTPError, ValueError) as exc:
        turn.error = f"{type(exc).__name__}: {exc}"
    finally:
        route.in_flight[turn.replica] -= 1
    return "".join(pieces)


async def converse(client: httpx.AsyncClient, route: Route, conv: Conversation, model: str,
                   turns: list[Turn], stop_at: float = math.inf,
                   think: Callable[[], float] = lambda: 0.0) -> bool:
    """The conversation's turns in order, ``think`` wall seconds apart; False if one failed."""
    for k in range(1, conv.cfg.turns + 1):
        if k > 1:
            await asyncio.sleep(think())
        if load.now() >= stop_at:
            return True
        body = conv.next_body(model)
        turn = Turn(conv.name, k, load.now(), conv.cacheable())
        turns.append(turn)
        reply = await send(client, route, conv.session, turn, body)
        if turn.error is not None:
            return False
        conv.answer(reply)
    return True


# -- runs ---------------------------------------------------------------------------------------


@dataclass
class Run:
    label: str
    turns: list[Turn]
    t0: float  # the measured window (perf_counter)
    t1: float
    engines: dict[str, dict[str, float]]
    routing: Samples  # the gateway's counts, when there is a gateway
    host: dict[str, float]  # CPU seconds per wall second; the host's load average
    gateway: dict[str, Any] | None = None
    burst: dict[str, int] | None = None


def bench_portal(cfg: Config, label: str) -> Any:
    # One key for every conversation with caps far above the load: admission is not measured.
    tier = {"per_key_concurrency": 64, "max_queued_per_key": 64, "max_queue_wait_seconds": 600.0}
    env = {"GP_ROUTING_EPSILON": "1e6"} if label == "ours-unbounded" else {}
    return portal(members={"bench": "bench"}, tiers={"bench": tier}, gateway_env=env,
                  gateways=1 if label.startswith("ours") else 0,
                  engines=[engine_spec(cfg)] * cfg.replicas)


def _users(cfg: Config, skewed: bool) -> list[Callable[[int], Conversation]]:
    """Who talks: one conversation factory per stream (argument: the conversation's number)."""
    if not skewed:
        return [lambda n, i=i: Conversation(f"conv-{i:03d}", cfg) for i in range(cfg.conversations)]
    users: list[Callable[[int], Conversation]] = [
        lambda n, i=i: Conversation(f"user-{i:02d}-{n:03d}", cfg) for i in range(cfg.ordinary)]
    for u, s in itertools.product(range(cfg.hot_users), range(cfg.hot_streams)):
        users.append(lambda n, u=u, s=s: Conversation(f"hot-{u}-{s}-{n:03d}", cfg, "team-hot"))
    return users


async def _talk(cfg: Config, route: Route, model: str, turns: list[Turn], stop_at: float) -> None:
    """Main run (stop_at infinite): each conversation once, with thinking. Skewed run: closed
    loops that start a new conversation when one ends, until stop_at, then cut off."""
    skewed = stop_at < math.inf
    users = _users(cfg, skewed)
    delays = random.Random(len(users)).sample(range(1000), len(users))
    low, high = (cfg.wall(t) for t in cfg.think)
    async with load.make_client() as client:

        async def one(i: int) -> None:
            await asyncio.sleep(cfg.wall(cfg.stagger) * delays[i] / 1000)
            if not skewed:
                think = load.uniform_think(low, high, seed=i)
                await converse(client, route, users[i](0), model, turns, think=think)
                return
            for n in itertools.count():
                if load.now() >= stop_at or not await converse(
                        client, route, users[i](n), model, turns, stop_at):
                    return

        tasks = [asyncio.ensure_future(one(i)) for i in range(len(users))]
        # A skewed run's turns still open at the deadline get a while to finish, then are cut.
        await asyncio.wait(tasks, timeout=stop_at - load.now() + cfg.wall(10.0) if skewed else None)
        await load.cancel_all(tasks)
        for task in tasks:
            error = None if task.cancelled() else task.exception()
            if error is not None:
                raise error


async def burst(route: Route, model: str, n: int = 24) -> dict[str, int]:
    """``n`` simultaneous requests on one X-Session-ID at an idle gateway, each long enough
    (400 tokens) to outlast the burst: taken one after another, bounded load would put at most
    ceil((1 + ε) · n / replicas) on one replica."""
    cfg = Config(speed=1.0, turns=1, opening_tokens=16, reply_tokens=400)
    turns: list[Turn] = []
    async with load.make_client() as client:
        await asyncio.gather(*(converse(client, route, Conversation(f"burst-{i:03d}", cfg,
                                                                    "burst-probe"), model, turns)
                               for i in range(n)))
    return dict(sorted(Counter(t.replica for t in turns).items()))


async def _observed(work: Coroutine[Any, Any, None], p: Portal, route: Route,
                    samples: Samples) -> None:
    sampler = None
    if route.choose is None:
        names = sorted(route.engines)
        sampler = asyncio.ensure_future(readout.sample_routing(p.redis_url, names, samples))
    try:
        await work
    finally:
        if sampler is not None:
            await load.cancel_all([sampler])


def run_strategy(cfg: Config, label: str, skewed: bool = False) -> Run:
    with bench_portal(cfg, label) as p:
        route = make_route(label, p)  # the ORM before the event loop
        probe = asyncio.run(burst(route, p.model)) if skewed and route.choose is None else None
        before, cpu = readout.scrape(p), readout.cpu_seconds(p)
        turns: list[Turn] = []
        samples: Samples = []
        t0 = started = load.now()
        stop_at = t0 + cfg.wall(cfg.skew_warmup + cfg.skew_window) if skewed else math.inf
        asyncio.run(_observed(_talk(cfg, route, p.model, turns, stop_at), p, route, samples))
        t0, t1 = (t0 + cfg.wall(cfg.skew_warmup), stop_at) if skewed else (t0, load.now())
        wall = load.now() - started
        host = readout.host_use(p, cpu, wall)
        time.sleep(0.5)  # let the engines see the last disconnects
        engines = readout.engine_deltas(before, readout.scrape(p))
        run = Run(label, turns, t0, t1, engines, samples, host, burst=probe)
        if label.startswith("ours"):
            run.gateway = asyncio.run(readout.gateway_leftovers(p, sorted(route.engines)))
        return run


# -- the command line ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.affinity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="speed 3, a shorter skew window")
    parser.add_argument("--speed", type=float, default=None, help="enginesim speed (default 2)")
    parser.add_argument("--only", choices=("main", "skewed"), default=None)
    args = parser.parse_args(argv)
    quick = {"skew_window": 30.0, "skew_warmup": 6.0} if args.quick else {}
    cfg = Config(speed=args.speed or (3.0 if args.quick else 2.0), **quick)
    spec = engine_spec(cfg)
    print(f"affinity benchmark: speed {cfg.speed:g}, engines {' '.join(spec.argv())}", flush=True)
    started = time.monotonic()
    results: dict[str, Any] = {"config": asdict(cfg), "engine_args": spec.argv(),
                               "final_prompt_tokens": final_prompt_tokens(cfg),
                               "main": {}, "skewed": {}}
    runs = [(label, False) for label in MAIN if args.only in (None, "main")]
    runs += [(label, True) for label in SKEWED if args.only in (None, "skewed")]
    for label, skewed in runs:
        began = time.monotonic()
        print(f"  {'skewed' if skewed else 'main'} / {label} ...", end=" ", flush=True)
        run = run_strategy(cfg, label, skewed)
        results["skewed" if skewed else "main"][label] = readout.summarize(run, cfg.epsilon)
        print(f"{time.monotonic() - began:.1f} s", flush=True)
    results["targets"] = readout.targets(results, cfg.epsilon)
    print()
    readout.print_tables(results)
    print()
    print(report.targets_table(results["targets"]))
    results["elapsed_s"] = time.monotonic() - started
    json_path = report.write_json("affinity", results)
    png_path = readout.plot(results, "affinity")
    print(f"\nwrote {json_path} and {png_path} ({results['elapsed_s']:.0f} s)")
    return 0 if all(t["ok"] for t in results["targets"]) else 1


if __name__ == "__main__":
    sys.exit(main())
