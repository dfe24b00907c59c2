"""What the gateway costs per request, beside going straight to the engine and beside LiteLLM's
proxy (per-key max_parallel_requests, Redis), all against one enginesim in --instant mode.

    .venv/bin/python -m bench.overhead [--quick] [--rounds N] [--load-processes N] [--no-profile]
                                       [--baseline TREE]
    .venv/bin/python -m bench.overhead --tracing [--quick]   (tracing off against on: overhead_tracing.py)

Systems, measured in turn (rotated every round, so the box's other work hits all alike):
  direct        straight to the engine
  gateway×1     our gateway, one uvicorn worker process
  limits×1      the same worker, with keys held to a budget, rate limits (per key and per tier,
                requests and tokens) and a model list, all set far above what the run uses
  gateway×2     two gateway processes (each worker spreads its requests over both)
  litellm×1     LiteLLM's proxy (bench/overhead_litellm.py), one worker
  smg×1         SMG's router (Rust; bench/overhead_smg.py), routing and relaying only
  before×1      with --baseline TREE: the gateway of an earlier checkout (bench/overhead_baseline.py),
                one worker, its keys in the same tier: what the code since then costs
  now×1         with --baseline: today's tree started exactly as before×1 is, and compared with it
                (gateway×1's worker also serves limits×1 and the front end's keys, which cost it)
Paired, c=1: one client sends its requests in turn to direct, gateway×1 with a plain key, gateway×1
with a front end's key ("front end×1": Open WebUI's, each request naming its person in a JWT minted
afresh, as Open WebUI does, and checked by the gateway; bench/front_end.py), the same with no token
ever sent twice ("front end×1 new tokens": Open WebUI's iat is in whole seconds, so at c=1 most of
its tokens repeat one sent within the same second) and, with --baseline, before×1 with the plain
key (an earlier tree knows no front ends). Each arm's added latency is its
p50 / p99 less direct's, per round (the arms' order rotated every round); the figures are medians
of the rounds, beside before×1's. Right after each round's chats, the same client sends
/v1/embeddings in turn to an --instant embedding enginesim and through gateway×1: embeddings' added
latency, and its excess over chat's in the same round (target: at most 0.1 ms, one path for both).
Phases: non-streaming chats (16 tokens) at concurrency 1, 16, 64; streamed chats of 256 chunks at
concurrency 1 and 16 (enginesim --instant writes a whole stream at once, so any gap between
chunks at the client is the proxy's doing); "paced" streams from a timed enginesim (about 10 ms
per token, 64 tokens, concurrency 4) through direct, gateway×1 and litellm×1, where chunks
arrive one by one and the proxy's per-chunk path and TTFT show; a per-key cap of 4 with 16
clients of that key while 48 others load the same gateway (ours queues, LiteLLM answers 429);
py-spy on one gateway worker under concurrency 16; 100,000 requests through one gateway worker
for memory flatness.

Pinned (where the machine has two or more cores, unless --no-pin): every proxy under test (our
gateway processes, LiteLLM, SMG) and Redis (part of ours' work, and LiteLLM's) on one core, the
engines, the load generators and this process on another, so the arm measured (one at a time) has
a core to itself and the fixed parts cannot take it. A
window at concurrency 16 or more whose proxy got under 0.9 of a core is flagged: its figures are
the box's, not the proxy's. Redis' own account of each window (INFO commandstats: time inside
admission's functions, commands run, function calls) is read per request, beside the Redis
process's CPU.

Every benchmark key's tier allows 128 at a time per key, no pool (LiteLLM: max_parallel_requests
128), so nothing is throttled at concurrency 64. The load comes from separate processes with a
lean HTTP client (bench/overhead_client.py). Writes bench/results/overhead.json and .png, prints
tables and the targets. The setup step installs LiteLLM into var/bench-litellm, SMG into
var/bench-smg and py-spy into var/bench-pyspy (never project dependencies).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import (
    front_end,
    overhead_baseline,
    overhead_litellm,
    overhead_profile,
    overhead_report,
    overhead_smg,
    report,
)
from bench.harness import LOGS, ROOT, EngineSpec, Portal, cleanup_on_sigterm, portal, setup_django
from bench.overhead_client import LoadGenerators, PhaseResult, PhaseSpec, chat_body
from bench.overhead_sys import Accounts, find_process, pin, redis_work, rss_bytes, with_descendants
from enginesim.process import EngineSimProcess, pick_free_port, start_enginesim

PATH = "/v1/chat/completions"
MODEL, TIMED_MODEL = "sim", "timed"
EMBEDDINGS_PATH, EMBEDDING_MODEL = "/v1/embeddings", "embed"
BENCH_KEYS = ("bench0", "bench1", "bench2", "bench3")
LIMITED_KEYS = ("limited0", "limited1", "limited2", "limited3")
NEVER = 2_000_000_000  # a limit the run never reaches
CAPPED_KEY = "capped"
FRONT_END_KEY = "frontend"  # becomes Open WebUI's key (bench tier), speaking for FORWARDED
FORWARDED = front_end.ForwardedUser("owui-1", "someone@bench.invalid", "Someone")
HIGH_CAP, LOW_CAP = 128, 4
LITELLM_REDIS_DB = 9  # LiteLLM's limiter shares our private redis-server in a database of its own
# Every field given, isolate_prefix_cache too: an earlier tree (--baseline) makes its tier with its
# own defaults, and the two gateways should differ only in code.
TIERS = {
    "bench": {"per_key_concurrency": HIGH_CAP, "pool_concurrency": None, "head_start_seconds": 0.0,
              "max_queue_wait_seconds": 600.0, "max_queued_per_key": 1024, "engine_priority": 0,
              "borrow_idle_slots": False, "isolate_prefix_cache": False},
    "limited": {"per_key_concurrency": HIGH_CAP, "pool_concurrency": None, "head_start_seconds": 0.0,
                "max_queue_wait_seconds": 600.0, "max_queued_per_key": 1024, "engine_priority": 0,
                "borrow_idle_slots": False, "isolate_prefix_cache": False,
                "key_requests_per_minute": NEVER, "key_tokens_per_minute": NEVER,
                "requests_per_minute": NEVER, "tokens_per_minute": NEVER,
                "allowed_models": [MODEL, TIMED_MODEL]},
    "capped": {"per_key_concurrency": LOW_CAP, "pool_concurrency": None, "head_start_seconds": 0.0,
               "max_queue_wait_seconds": 600.0, "max_queued_per_key": 1024, "engine_priority": 0,
               "borrow_idle_slots": False, "isolate_prefix_cache": False},
}


@dataclass(frozen=True)
class Config:
    rounds: int
    window: float  # measured seconds per system, concurrency and round
    warmup: float
    concurrency: tuple[int, ...]
    stream_concurrency: tuple[int, ...]
    stream_tokens: int
    cap_clients: int
    cap_background: int
    cap_seconds: float
    memory_requests: int
    memory_warmup: int
    memory_concurrency: int
    profile_seconds: int
    paced_tokens: int
    paced_concurrency: int
    load_processes: int
    pin: bool = True

    @classmethod
    def make(cls, quick: bool, load_processes: int) -> Config:
        if quick:
            return cls(rounds=3, window=3.0, warmup=1.0, concurrency=(1, 16, 64),
                       stream_concurrency=(1, 16), stream_tokens=256, cap_clients=16,
                       cap_background=48, cap_seconds=3.0, memory_requests=10_000,
                       memory_warmup=1_000, memory_concurrency=16, profile_seconds=5,
                       paced_tokens=64, paced_concurrency=4, load_processes=load_processes)
        return cls(rounds=3, window=6.0, warmup=1.0, concurrency=(1, 16, 64),
                   stream_concurrency=(1, 16), stream_tokens=256, cap_clients=16,
                   cap_background=48, cap_seconds=10.0, memory_requests=100_000,
                   memory_warmup=10_000, memory_concurrency=16, profile_seconds=15,
                   paced_tokens=64, paced_concurrency=4, load_processes=load_processes)


@dataclass(frozen=True)
class System:
    name: str
    kind: str  # "direct", "ours", "litellm" or "smg"
    urls: tuple[str, ...]
    secrets: tuple[str, ...]
    pids: tuple[int, ...]
    workers: int


@dataclass(frozen=True)
class Arm:
    """One of the paired comparison's destinations: a URL, the key sent there ("" none) and the
    front end's user each request names (None: none)."""

    name: str
    url: str
    secret: str
    user: front_end.ForwardedUser | None = None


@dataclass
class Bench:
    cfg: Config
    gens: LoadGenerators
    systems: list[System]
    engine: EngineSimProcess
    timed: EngineSimProcess
    redis_pid: int | None
    capped_secret: str
    bench_secrets: tuple[str, ...]
    front_end_secret: str
    redis: Any = None  # a client of the portal's Redis, for its commandstats
    embedder: EngineSimProcess | None = None  # an --instant embedding model, for the paired embeddings
    flagged: list[str] = dataclasses.field(default_factory=list)  # windows whose proxy lacked a core

    def system(self, name: str) -> System:
        return next(s for s in self.systems if s.name == name)

    def accounts(self, system: System) -> Accounts:
        groups = {"server": list(system.pids), "engine": [self.engine.pid, self.timed.pid],
                  "loadgen": self.gens.pids}
        if self.redis_pid is not None:
            groups["redis"] = [self.redis_pid]
        return Accounts(groups)

    def window(self, system: System, specs: Sequence[PhaseSpec], t0: float, t1: float
               ) -> dict[str, Any]:
        """Run ``specs`` side by side; CPU and memory of ``system`` over [t0, t1]."""
        accounts = self.accounts(system)
        self.gens.start(*specs)
        _sleep_until(t0)
        load = os.getloadavg()[0]  # the box's other work, for reading noisy windows
        before = accounts.snapshot()
        redis_before = self._redis_work()
        peak = 0
        while time.perf_counter() < t1:
            peak = max(peak, rss_bytes(with_descendants(system.pids)))
            time.sleep(min(0.2, max(0.0, t1 - time.perf_counter())))
        after = accounts.snapshot()
        redis_after = self._redis_work()
        results = self.gens.collect(timeout=t1 - time.perf_counter() + 300)
        cpu = Accounts.delta(before, after)
        out = {"results": results, "seconds": t1 - t0, "cpu": cpu, "rss_peak": peak, "loadavg": load,
               "redis": {k: redis_after[k] - redis_before[k] for k in redis_after}}
        concurrency = sum(spec.concurrency for spec in specs)
        cores = cpu.get("server", 0.0) / (t1 - t0)
        if system.kind != "direct" and concurrency >= 16 and cores < 0.9:
            out["under_a_core"] = True
            self.flagged.append(f"{system.name} at c={concurrency}: {cores:.2f} of a core")
            print(f"  ! {system.name} got {cores:.2f} of a core at c={concurrency}", flush=True)
        return out

    def _redis_work(self) -> dict[str, float]:
        if self.redis is None:
            return {"function_usec": 0.0, "commands": 0.0, "fcalls": 0.0}
        return redis_work(self.redis.info("commandstats"))

    def closed_loop(self, system: System, concurrency: int, bodies: tuple[bytes, ...],
                    stream: bool, window: float) -> dict[str, Any]:
        t0 = time.perf_counter() + self.cfg.warmup + 0.1
        spec = PhaseSpec(urls=system.urls, path=PATH, bodies=bodies, secrets=system.secrets,
                         concurrency=concurrency, measure_from=t0, measure_until=t0 + window,
                         stream=stream)
        out = self.window(system, [spec], t0, t0 + window)
        out["result"] = out.pop("results")[0]
        return out

    def sweep(self, bodies: tuple[bytes, ...], stream: bool, levels: Sequence[int],
              label: str, systems: Sequence[System] | None = None
              ) -> dict[str, dict[str, list[dict[str, Any]]]]:
        """Every system at every level, ``rounds`` times, the order rotated each round."""
        systems = list(systems or self.systems)
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for r in range(self.cfg.rounds):
            for c in levels:
                order = systems[r % len(systems):] + systems[:r % len(systems)]
                for system in order:
                    out = self.closed_loop(system, c, bodies, stream, self.cfg.window)
                    runs.setdefault(str(c), {}).setdefault(system.name, []).append(out)
                    res: PhaseResult = out["result"]
                    print(f"  {label} round {r + 1} c={c:<3} {system.name:<10} "
                          f"{res.completed / out['seconds']:8.0f}/s  non-200 "
                          f"{sum(n for s, n in res.statuses.items() if s != 200)}"
                          f"  errors {sum(res.errors.values())}", flush=True)
        return runs

    def paced_systems(self) -> list[System]:
        direct = System("direct", "direct", (self.timed.url,), (), (self.timed.pid,), 1)
        return [direct, self.system("gateway×1"), self.system("litellm×1"), self.system("smg×1")]

    def paired_arms(self) -> list[Arm]:
        direct, ours = self.system("direct"), self.system("gateway×1")
        arms = [Arm("direct", direct.urls[0], ""), Arm("gateway×1", ours.urls[0], self.bench_secrets[0]),
                Arm("front end×1", ours.urls[0], self.front_end_secret, FORWARDED),
                Arm("front end×1 new tokens", ours.urls[0], self.front_end_secret,
                    dataclasses.replace(FORWARDED, new_tokens=True))]
        if any(s.name == "before×1" for s in self.systems):
            arms.append(Arm("before×1", self.system("before×1").urls[0], self.bench_secrets[0]))
            arms.append(Arm("now×1", self.system("now×1").urls[0], self.bench_secrets[0]))
        arms.append(Arm("smg×1", self.system("smg×1").urls[0], self.bench_secrets[0]))
        return arms

    def paired(self, arms: Sequence[Arm], seconds: float) -> dict[str, Any]:
        """One client at c=1 sending its requests to ``arms`` in turn (the single-worker
        gateways): whatever else the box does falls on all alike, request by request."""
        t0 = time.perf_counter() + self.cfg.warmup + 0.1
        spec = PhaseSpec(urls=tuple(a.url for a in arms), path=PATH, bodies=_bodies(MODEL, 16, False),
                         secrets=(), concurrency=1, measure_from=t0, measure_until=t0 + seconds,
                         url_secrets=tuple(a.secret for a in arms), url_users=tuple(a.user for a in arms))
        result: PhaseResult = self.window(self.system("gateway×1"), [spec], t0, t0 + seconds)["results"][0]
        return overhead_report.paired_summary(result, [a.name for a in arms])

    def paired_embeddings(self, seconds: float) -> dict[str, Any]:
        """The same at c=1 for /v1/embeddings: straight to the embedding engine and through gateway×1,
        in turn."""
        assert self.embedder is not None
        t0 = time.perf_counter() + self.cfg.warmup + 0.1
        ours = self.system("gateway×1")
        spec = PhaseSpec(urls=(self.embedder.url, ours.urls[0]), path=EMBEDDINGS_PATH, bodies=_embedding_bodies(),
                         secrets=(), concurrency=1, measure_from=t0, measure_until=t0 + seconds,
                         url_secrets=("", self.bench_secrets[0]))
        result: PhaseResult = self.window(ours, [spec], t0, t0 + seconds)["results"][0]
        return overhead_report.paired_summary(result, ["direct", "gateway×1"])

    def paired_rounds(self, seconds: float) -> dict[str, Any]:
        arms = self.paired_arms()
        self.paired(arms, 1.0)  # the front end's person is added on its first request: not measured
        rounds, embeddings = [], []
        for r in range(self.cfg.rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            rounds.append(self.paired(order, seconds))
            embeddings.append(self.paired_embeddings(seconds / 2))
            embedded = embeddings[-1]["systems"]["gateway×1"].get("added_p50_ms")
            print(f"  paired round {r + 1}: " + ", ".join(
                f"{name} +{report.fmt(row.get('added_p50_ms'))} ms" for name, row in rounds[-1]["systems"].items()
                if name != "direct") + f"; embeddings +{report.fmt(embedded)} ms", flush=True)
        paired = overhead_report.paired_rounds(rounds, [a.name for a in arms])
        paired["embeddings"] = overhead_report.paired_embeddings(embeddings, rounds)
        return paired

    def warm(self) -> None:
        bodies = _bodies(MODEL, 16, False)
        for system in self.systems:
            self.closed_loop(system, 4, bodies, False, 1.0)

    def caps(self, system: System) -> dict[str, Any]:
        """16 clients of one key capped at 4 (timed engine, so requests last ~0.1 s) while 48
        clients of the high-cap keys load the same gateway."""
        self.timed.reset_peak()
        t0 = time.perf_counter() + self.cfg.warmup + 0.1
        t1 = t0 + self.cfg.cap_seconds
        url = system.urls[:1]
        capped = PhaseSpec(urls=url, path=PATH, bodies=_bodies(TIMED_MODEL, 8, False),
                           secrets=(self.capped_secret,), concurrency=self.cfg.cap_clients,
                           measure_from=t0, measure_until=t1)
        background = PhaseSpec(urls=url, path=PATH, bodies=_bodies(MODEL, 16, False),
                               secrets=self.bench_secrets, concurrency=self.cfg.cap_background,
                               measure_from=t0, measure_until=t1)
        out = self.window(system, [capped, background], t0, t1)
        stats = self.timed.stats()
        return overhead_report.caps_summary(out, stats["peak_running"], LOW_CAP,
                                            self.cfg.cap_clients, self.cfg.cap_background)

    def memory(self, system: System) -> dict[str, Any]:
        """``memory_requests`` requests (1 in 4 streamed) through one worker; RSS against the
        engine's request count."""
        bodies = tuple(chat_body(MODEL, n, 16, n % 4 == 3) for n in range(64))
        start = time.perf_counter()
        spec = PhaseSpec(urls=system.urls, path=PATH, bodies=bodies, secrets=system.secrets,
                         concurrency=self.cfg.memory_concurrency, measure_from=start,
                         measure_until=start + 1800, max_requests=self.cfg.memory_requests,
                         keep_latencies=False)
        base = self.engine.stats()["total_requests"]
        accounts = Accounts({"server": list(system.pids)})
        cpu0 = accounts.snapshot()
        samples = []
        self.gens.start(spec)
        while True:
            finished = self.gens.finished()
            samples.append({"t": time.perf_counter() - start,
                            "requests": self.engine.stats()["total_requests"] - base,
                            "rss": rss_bytes(with_descendants(system.pids))})
            if finished or time.perf_counter() - start > 1800:
                break
            time.sleep(0.5)
        result = self.gens.collect(timeout=120)[0]
        cpu = Accounts.delta(cpu0, accounts.snapshot())
        return overhead_report.memory_summary(samples, result, self.cfg.memory_warmup,
                                              time.perf_counter() - start, cpu["server"])

    def profile(self, system: System, pyspy: Path, rate: int = 200) -> dict[str, Any]:
        seconds = self.cfg.profile_seconds
        t0 = time.perf_counter() + self.cfg.warmup + 0.1
        spec = PhaseSpec(urls=system.urls[:1], path=PATH, bodies=_bodies(MODEL, 16, False),
                         secrets=system.secrets, concurrency=16, measure_from=t0,
                         measure_until=t0 + seconds + 1.5)
        raw = LOGS / f"overhead-profile-{system.name.replace('×', 'x')}.txt"
        self.gens.start(spec)
        _sleep_until(t0)
        recorder = overhead_profile.start_recording(pyspy, system.pids[0], seconds, raw, rate)
        try:
            _, err = recorder.communicate(timeout=seconds + 120)
        finally:
            if recorder.poll() is None:
                recorder.kill()
                recorder.wait()
        result = self.gens.collect(timeout=120)[0]
        if recorder.returncode != 0 or not raw.exists():
            return {"error": err.decode(errors="replace")[-500:]}
        summary = overhead_profile.summarize(raw, seconds, rate)
        summary.update({"system": system.name, "pid": system.pids[0], "seconds": seconds,
                        "concurrency": 16, "rps_while_sampled": result.completed / (seconds + 1.5),
                        "raw": str(raw)})
        return summary


def _bodies(model: str, max_tokens: int, stream: bool) -> tuple[bytes, ...]:
    return tuple(chat_body(model, n, max_tokens, stream) for n in range(64))


def _embedding_bodies() -> tuple[bytes, ...]:
    """One short passage each, as long as the chat bodies' message."""
    return tuple(json.dumps({"model": EMBEDDING_MODEL, "input": f"Passage {n}: something about overheads."}).encode()
                 for n in range(64))


def _sleep_until(t: float) -> None:
    delay = t - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


@contextlib.contextmanager
def setup(cfg: Config, litellm: Path, smg: Path, baseline: Path | None) -> Iterator[Bench]:
    members = {name: "bench" for name in BENCH_KEYS} | {name: "limited" for name in LIMITED_KEYS} | {
        CAPPED_KEY: "capped", FRONT_END_KEY: "bench"}
    with contextlib.ExitStack() as stack:
        p: Portal = stack.enter_context(portal(
            members=members, tiers=TIERS, model=MODEL, gateways=2,
            # Admission's slots: far more than concurrency 64, so only the key caps matter.
            engines=[EngineSpec(max_num_seqs=1024, extra_args=("--instant",))],
        ))
        timed = stack.enter_context(start_enginesim(model=TIMED_MODEL, max_num_seqs=64,
                                                    extra_args=["--speed", "1"]))
        embedder = stack.enter_context(start_enginesim(model=EMBEDDING_MODEL, max_num_seqs=1024,
                                                       extra_args=["--runner", "pooling", "--instant"]))
        from fairness.models import Replica

        Replica.objects.create(name="timed-0", base_url=timed.url, model=TIMED_MODEL,
                               max_num_seqs=64)  # bumps the config epoch: gateways reload
        Replica.objects.create(name="embed-0", base_url=embedder.url, model=EMBEDDING_MODEL, max_num_seqs=1024,
                               model_kind=Replica.ModelKind.EMBEDDING)
        from fairness.models import ApiKey, Budget

        front_end.make_front_end(p.members[FRONT_END_KEY].key_id)

        for name in LIMITED_KEYS:  # a budget per key and one on its account: two windows each
            key = ApiKey.objects.select_related("membership").get(pk=p.members[name].key_id)
            Budget.objects.create(key=key, tokens=10**15, period=Budget.Period.MONTH)
            Budget.objects.create(account_id=key.membership.account_id, tokens=10**15, period=Budget.Period.DAY)
        redis_host, redis_port = p.redis_url.split("//", 1)[1].split("/", 1)[0].split(":")
        secrets = {m.username: m.secret for m in p.members.values()}
        bench_secrets = tuple(secrets[k] for k in BENCH_KEYS)
        limited_secrets = tuple(secrets[k] for k in LIMITED_KEYS)
        keys = {secrets[k]: HIGH_CAP for k in BENCH_KEYS} | {secrets[CAPPED_KEY]: LOW_CAP}
        print("starting LiteLLM's proxy ...", flush=True)
        ll = stack.enter_context(overhead_litellm.LiteLLMProxy(
            litellm, pick_free_port(), keys=keys, sim_api_base=p.engines[0].base_url,
            timed_api_base=timed.base_url, redis_host=redis_host, redis_port=int(redis_port),
            redis_db=LITELLM_REDIS_DB,
        ))
        print("starting SMG's router ...", flush=True)
        router = stack.enter_context(overhead_smg.SmgRouter(smg, pick_free_port(), [p.engines[0].url, timed.url]))
        gens = stack.enter_context(LoadGenerators(cfg.load_processes))
        engine = p.engines[0]
        g0, g1 = p.gateways
        systems = [
            System("direct", "direct", (engine.url,), (), (engine.pid,), 1),
            System("gateway×1", "ours", (str(g0.url),), bench_secrets, (g0.process.pid,), 1),
            System("limits×1", "ours", (str(g0.url),), limited_secrets, (g0.process.pid,), 1),
            System("gateway×2", "ours", (str(g0.url), str(g1.url)), bench_secrets,
                   (g0.process.pid, g1.process.pid), 2),
            System("litellm×1", "litellm", (ll.url,), bench_secrets, (ll.pid,), 1),
            System("smg×1", "smg", (router.url,), bench_secrets, (router.pid,), 1),
        ]
        if baseline is not None:
            print(f"starting the baseline gateway from {baseline} ...", flush=True)
            before = stack.enter_context(overhead_baseline.baseline_gateway(
                baseline, workdir=setup_django().tmpdir, redis_url=p.redis_url.rsplit("/", 1)[0] + "/2",
                tier=TIERS["bench"], replicas=[(MODEL, engine.url, 1024), (TIMED_MODEL, timed.url, 64)],
                keys={name: secrets[name] for name in BENCH_KEYS},
            ))
            systems.append(System("before×1", "ours", (str(before.url),), bench_secrets, (before.process.pid,), 1))
            # Today's tree started the same way, so that the pair differs only in code.
            now_dir = Path(setup_django().tmpdir) / "now"
            now_dir.mkdir(exist_ok=True)
            now = stack.enter_context(overhead_baseline.baseline_gateway(
                ROOT, workdir=str(now_dir), redis_url=p.redis_url.rsplit("/", 1)[0] + "/3",
                tier=TIERS["bench"], replicas=[(MODEL, engine.url, 1024), (TIMED_MODEL, timed.url, 64)],
                keys={name: secrets[name] for name in BENCH_KEYS},
            ))
            systems.append(System("now×1", "ours", (str(now.url),), bench_secrets, (now.process.pid,), 1))
        redis_pid = find_process("redis-server", f":{redis_port}")
        if cfg.pin and (os.cpu_count() or 1) >= 2:
            # Redis is part of our gateway's work (and LiteLLM's): it shares the proxies' core.
            proxies = {pid for system in systems if system.kind != "direct" for pid in system.pids}
            proxies |= {redis_pid} if redis_pid else set()
            rest = [engine.pid, timed.pid, embedder.pid, *gens.pids, os.getpid()]
            print(f"pinned: proxies and Redis to core 1 ({pin(proxies, {1})} threads), the engines, "
                  f"the load and this process to core 0 ({pin(rest, {0})} threads)", flush=True)
        import redis

        client = stack.enter_context(redis.Redis.from_url(p.redis_url))
        yield Bench(cfg, gens, systems, engine, timed, redis_pid, secrets[CAPPED_KEY], bench_secrets,
                    secrets[FRONT_END_KEY], client, embedder=embedder)


def _commit(tree: Path = ROOT) -> str:
    """The gateway code measured: HEAD, marked when the work tree differs from it."""
    import subprocess

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True,
                              check=False)
        return done.stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" (modified)" if dirty else "")


def run(cfg: Config, litellm: Path, smg: Path, pyspy: Path | None, baseline: Path | None) -> dict[str, Any]:
    results: dict[str, Any] = {"config": cfg.__dict__, "commit": _commit()}
    print(f"measuring the gateway at {results['commit']}", flush=True)
    if baseline is not None:
        results["baseline"] = {"tree": str(baseline), "commit": _commit(baseline)}
        print(f"beside the baseline at {results['baseline']['commit']}", flush=True)
    with setup(cfg, litellm, smg, baseline) as bench:
        results["systems"] = {s.name: {"kind": s.kind, "workers": s.workers, "urls": s.urls}
                              for s in bench.systems}
        results["litellm_version"] = overhead_litellm.LITELLM_VERSION
        results["smg_version"] = overhead_smg.SMG_VERSION
        bench.warm()
        direct = bench.system("direct")
        print("calibration: straight to the engine at concurrency 64 ...", flush=True)
        results["calibration"] = overhead_report.calibration(
            bench.closed_loop(direct, 64, _bodies(MODEL, 16, False), False, cfg.window),
            cfg.load_processes)
        print(f"  {results['calibration']['rps']:.0f} req/s; load generator "
              f"{results['calibration']['loadgen_cores']:.2f} cores", flush=True)
        print("non-streaming ...", flush=True)
        plain = bench.sweep(_bodies(MODEL, 16, False), False, cfg.concurrency, "plain")
        results["non_streaming"] = overhead_report.pool_levels(plain, bench.systems)
        seconds = cfg.window * 4
        print(f"paired, c=1: {', '.join(a.name for a in bench.paired_arms())} in turn, "
              f"{cfg.rounds} x {seconds:.0f} s ...", flush=True)
        results["paired"] = bench.paired_rounds(seconds)
        print(f"streaming {cfg.stream_tokens} chunks ...", flush=True)
        streamed = bench.sweep(_bodies(MODEL, cfg.stream_tokens, True), True,
                               cfg.stream_concurrency, "stream")
        results["streaming"] = overhead_report.pool_levels(streamed, bench.systems)
        print(f"paced streams ({cfg.paced_tokens} tokens at ~10 ms) ...", flush=True)
        paced_systems = bench.paced_systems()
        paced = bench.sweep(_bodies(TIMED_MODEL, cfg.paced_tokens, True), True,
                            (cfg.paced_concurrency,), "paced", paced_systems)
        results["paced_streaming"] = overhead_report.pool_levels(paced, paced_systems)
        print(f"per-key cap {LOW_CAP}, {cfg.cap_clients} clients, under load ...", flush=True)
        results["caps"] = {name: bench.caps(bench.system(name))
                           for name in ("gateway×1", "litellm×1")}
        if pyspy is not None:
            print(f"profiling gateway×1 for {cfg.profile_seconds:.0f} s ...", flush=True)
            results["profile"] = bench.profile(bench.system("gateway×1"), pyspy)
            if baseline is not None:
                print(f"profiling before×1 for {cfg.profile_seconds:.0f} s ...", flush=True)
                results["profile_baseline"] = bench.profile(bench.system("before×1"), pyspy)
        print(f"memory: {cfg.memory_requests:,} requests through one gateway worker ...",
              flush=True)
        results["memory"] = bench.memory(bench.system("gateway×1"))
        results["windows_under_a_core"] = bench.flagged
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short windows")
    parser.add_argument("--load-processes", type=int, default=1,
                        help="load-generator processes (default 1: it is not the bottleneck; "
                             "see the calibration line)")
    parser.add_argument("--no-profile", action="store_true", help="skip py-spy")
    parser.add_argument("--name", default="overhead", help="results file name")
    parser.add_argument("--rounds", type=int,
                        help="rounds of every phase (default 3; ratios are the median of the rounds' own)")
    parser.add_argument("--no-pin", action="store_true", help="leave every process free to use any core")
    parser.add_argument("--baseline", type=Path, metavar="TREE",
                        help="also measure the gateway of this earlier checkout (git worktree add TREE COMMIT)")
    parser.add_argument("--tracing", action="store_true",
                        help="instead, tracing off against on (OTLP to a loopback receiver that drops it), "
                             "paired at c=1: bench/overhead_tracing.py")
    args = parser.parse_args(argv)
    if args.tracing:
        from bench import overhead_tracing

        name = "overhead-tracing" if args.name == "overhead" else args.name
        return overhead_tracing.main(args.quick, args.rounds, not args.no_pin, name)
    cleanup_on_sigterm()
    cfg = Config.make(args.quick, args.load_processes)
    if args.rounds:
        cfg = dataclasses.replace(cfg, rounds=args.rounds)
    cfg = dataclasses.replace(cfg, pin=not args.no_pin)
    litellm = overhead_litellm.ensure_venv()
    smg = overhead_smg.ensure_venv()
    pyspy = None if args.no_profile else overhead_profile.ensure_pyspy()
    started = time.monotonic()
    results = run(cfg, litellm, smg, pyspy, args.baseline)
    results["targets"] = overhead_report.targets(results)
    results["elapsed_s"] = time.monotonic() - started
    print()
    print(overhead_report.tables(results))
    print()
    print(report.targets_table(results["targets"]))
    json_path = report.write_json(args.name, results)
    from bench.overhead_plot import plot

    png_path = plot(results, args.name)
    print(f"\nwrote {json_path} and {png_path} ({results['elapsed_s']:.0f} s)")
    return 0 if all(t["ok"] for t in results["targets"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
