"""The chaos scenario: what the clients do and which faults strike when, all drawn from one seed.

The same seed gives the same requests (key, gateway pick, SDK or raw HTTP, stream or not,
length, whether and when the client gives up) and the same fault schedule, so a failing run can
be repeated. The test (tests/chaos/test_chaos.py) and the benchmark (bench/chaos.py) both build
their runs here; only the number of requests and the duration differ.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

# One fault cycle: every kind of fault once, at these fractions of the cycle (jittered by the seed).
CYCLE_SECONDS = 90.0
GATEWAY_KILL = "gateway SIGKILL"
REPLICA_KILL = "replica SIGKILL"
REDIS_KILL = "Redis SIGKILL"
REDIS_TERM = "Redis SIGTERM"
REDIS_EMPTY = "Redis empty under long streams"
BURST = "burst through both gateways"
_CYCLE = (
    (0.10, GATEWAY_KILL, 3.0),
    (0.26, REPLICA_KILL, 4.0),
    (0.42, REDIS_KILL, 2.0),
    (0.58, REDIS_EMPTY, 0.0),  # restarted at once: the long streams outlive the outage
    (0.74, REDIS_TERM, 2.0),
    (0.88, BURST, 0.0),
)
REDIS_FAULTS = (REDIS_KILL, REDIS_TERM, REDIS_EMPTY)


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the load starts
    kind: str
    target: int = 0  # which gateway or replica
    down_for: float = 0.0  # seconds between the kill and the restart


@dataclass(frozen=True)
class RequestPlan:
    index: int
    start: float  # seconds after the load starts
    key: str  # the key's label, also sent as the body's `user`: the engines log it
    gateway_pick: float  # in [0, 1): which of the gateways up at that moment
    sdk: bool  # the official openai SDK, or raw HTTP (httpx)
    stream: bool
    max_tokens: int
    abandon: str | None  # None, "queued" (after `abandon_after` seconds) or "stream" (after chunks)
    abandon_after: float  # seconds for "queued", chunks for "stream"
    prompt: str


@dataclass(frozen=True)
class Scenario:
    seed: int
    requests: int = 450  # over 90 s: two thirds of the slots busy, bursts fill them
    duration: float = 90.0  # seconds over which the requests start
    abandon_fraction: float = 0.3
    replicas: int = 2
    gateways: int = 2
    max_num_seqs: int = 8
    lease_ttl: float = 3.0
    step_ms: float = 50.0  # one token per stream every 50 ms: a stream of N tokens lasts N/20 s
    tokens: tuple[int, int] = (10, 90)  # a stream of 0.5-4.5 s
    long_tokens: int = 200  # 10 s: the streams in flight when Redis comes back empty
    interactive_keys: int = 10  # two at a time each
    batch_keys: int = 2  # two at a time in total, no borrowing: every cap is checkable
    per_key_cap: int = 2  # both tiers
    pool_cap: int = 2  # the batch tier's
    request_timeout: float = 60.0  # a call not over by then has hung
    allowance: float = 0.25  # how long a cap may be exceeded: an engine's abort (see docs/operations.md, "Reliability")
    recovery_limit: float = 2.0  # service back this long after Redis answers
    faults: tuple[Fault, ...] = field(default=())

    @classmethod
    def build(cls, seed: int | None = None, requests: int = 450, duration: float | None = None) -> Scenario:
        """A scenario for `requests` requests at the test's rate, with one fault cycle per 90 s."""
        seed = seed_from_env() if seed is None else seed
        duration = duration if duration is not None else max(CYCLE_SECONDS, requests / 450 * 90.0)
        scenario = cls(seed=seed, requests=requests, duration=duration)
        return cls(**{**scenario.__dict__, "faults": scenario.fault_schedule()})

    def fault_schedule(self) -> tuple[Fault, ...]:
        rng = random.Random(f"{self.seed}:faults")
        cycles = max(1, round(self.duration / CYCLE_SECONDS))
        length = self.duration / cycles
        faults = []
        for cycle in range(cycles):
            for fraction, kind, down_for in _CYCLE:
                at = cycle * length + (fraction + rng.uniform(-0.02, 0.02)) * length
                target = rng.randrange(self.gateways if kind == GATEWAY_KILL else self.replicas)
                faults.append(Fault(round(at, 2), kind, target, down_for))
        return tuple(faults)

    def plans(self) -> list[RequestPlan]:
        rng = random.Random(f"{self.seed}:requests")
        labels = self.load_keys()
        starts = sorted(rng.uniform(0, self.duration) for _ in range(self.requests))
        plans = []
        for index, start in enumerate(starts):
            stream = rng.random() < 0.75
            tokens = rng.randint(*self.tokens)
            abandon = None
            after = 0.0
            if rng.random() < self.abandon_fraction:
                if stream and rng.random() < 0.5:
                    abandon, after = "stream", float(rng.randint(1, tokens - 1))
                else:
                    abandon, after = "queued", rng.uniform(0.05, 3.0)
            plans.append(RequestPlan(
                index=index, start=start, key=rng.choice(labels), gateway_pick=rng.random(),
                sdk=rng.random() < 0.5, stream=stream, max_tokens=tokens, abandon=abandon,
                abandon_after=after, prompt=f"Chaos request {self.seed}-{index}: tell me something.",
            ))
        return plans

    def load_keys(self) -> list[str]:
        return [f"i{n}" for n in range(self.interactive_keys)] + [f"b{n}" for n in range(self.batch_keys)]

    def key_tiers(self) -> dict[str, str]:
        """Every key the run uses: the load's, and those of the long streams, bursts, probes and the
        final fill (their own, so the load's per-key caps do not hold them back)."""
        keys = {label: "batch" if label.startswith("b") else "interactive" for label in self.load_keys()}
        slots = self.replicas * self.max_num_seqs
        for label in (f"long{n}" for n in range(self.long_streams // 2)):
            keys[label] = "interactive"
        for label in (f"burst{n}" for n in range(slots // 2)):
            keys[label] = "interactive"
        for label in (f"fill{n}" for n in range(slots // 2)):
            keys[label] = "interactive"
        keys["probe"] = "interactive"
        return keys

    @property
    def long_streams(self) -> int:
        return self.max_num_seqs  # half the slots of two replicas

    def engine_args(self) -> list[str]:
        return ["--step-base-ms", str(self.step_ms), "--step-per-seq-ms", "0"]

    def seconds_for(self, tokens: int) -> float:
        return tokens * self.step_ms / 1000


def seed_from_env() -> int:
    """GP_CHAOS_SEED, or a fresh random seed (printed by the run, to repeat it)."""
    value = os.environ.get("GP_CHAOS_SEED", "")
    return int(value) if value else random.SystemRandom().randrange(1, 2**31)
