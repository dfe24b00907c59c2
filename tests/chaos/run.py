"""Drives a chaos run: the load, the faults on schedule, probes through each Redis outage, and at
the end a fill of every slot; then collects the ground truth (engine logs, usage records).

    evidence = run(scenario, database_url=..., secret_key=..., log_dir=...)
    report = judge(scenario, evidence)        # tests/chaos/ground_truth.py

Django must be set up (the rows are created and the usage records read through the ORM); the
ORM is used only outside the event loop.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos import scenario as kinds
from tests.chaos.clients import Call, Clients, Outcome
from tests.chaos.scenario import Fault, Scenario
from tests.chaos.world import Key, World, create_rows

PROBE_INTERVAL = 0.1
USAGE_DEADLINE = 20.0  # seconds for the worker to write the last usage records


@dataclass
class Window:
    """A fault from its start until it is over (restarted and answering)."""

    kind: str
    target: int
    start: float
    ready: float = 0.0  # the process is back (Redis: answers PING)


@dataclass
class Evidence:
    started: float  # time.monotonic() when the load began
    outcomes: list[Outcome] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    engine_logs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    load_ended: float = 0.0
    fill_started: float = 0.0
    fill_full_at: float | None = None  # every slot of every replica running at once
    usage_missing: list[str] = field(default_factory=list)
    gateway_unexpected_errors: int = 0
    wall_seconds: float = 0.0


def run(scenario: Scenario, *, database_url: str, secret_key: str, log_dir: Path,
        say: Callable[[str], None] = print) -> Evidence:
    say(f"chaos: seed {scenario.seed} (GP_CHAOS_SEED={scenario.seed} repeats this run), "
        f"{scenario.requests} requests over {scenario.duration:.0f} s, {len(scenario.faults)} faults")
    began = time.monotonic()
    world = World(scenario, database_url, secret_key, log_dir)
    try:
        world.redis.start()
        keys = create_rows(scenario, world.start_engines())
        world.start_processes()
        evidence = asyncio.run(_drive(scenario, world, keys, say))
        evidence.engine_logs = world.engine_logs()
        # Before the worker stops: it writes the records.
        evidence.usage_missing = _usage_missing([o.request_id for o in evidence.outcomes if o.completed])
    finally:
        world.stop()
    evidence.gateway_unexpected_errors = world.unexpected_errors()
    evidence.wall_seconds = time.monotonic() - began
    return evidence


async def _drive(scenario: Scenario, world: World, keys: dict[str, Key], say: Callable[[str], None]) -> Evidence:
    clients = Clients(scenario.request_timeout)
    evidence = Evidence(started=time.monotonic())
    tasks: list[asyncio.Task[Outcome]] = []

    def launch(kind: str, key: str, pick: float, **call: Any) -> asyncio.Task[Outcome]:
        up = [i for i, alive in enumerate(world.gateway_up) if alive] or [0]
        gateway = up[int(pick * len(up))]
        out = Outcome(index=len(evidence.outcomes), kind=kind, key=key, gateway=gateway, sdk=call["sdk"],
                      stream=call["stream"], sent_at=time.monotonic())
        evidence.outcomes.append(out)
        task = asyncio.create_task(clients.run(
            Call(url=world.gateways[gateway].url, secret=keys[key].secret, key=key, **call), out))
        tasks.append(task)
        return task

    async def load() -> None:
        for plan in scenario.plans():
            await _until(evidence.started + plan.start)
            launch("load", plan.key, plan.gateway_pick, prompt=plan.prompt, max_tokens=plan.max_tokens,
                   stream=plan.stream, sdk=plan.sdk, abandon=plan.abandon, abandon_after=plan.abandon_after)

    async def faults() -> None:
        for fault in scenario.faults:
            await _until(evidence.started + fault.at)
            say(f"chaos: t={time.monotonic() - evidence.started:5.1f} s {fault.kind} ({fault.target})")
            await _strike(fault, scenario, world, evidence, launch)

    try:
        await asyncio.gather(load(), faults())
        await asyncio.gather(*tasks)
        evidence.load_ended = time.monotonic()
        say(f"chaos: load over after {evidence.load_ended - evidence.started:.1f} s; filling every slot")
        await _fill(scenario, world, evidence, launch)
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await clients.aclose()
    return evidence


Launch = Callable[..., "asyncio.Task[Outcome]"]


async def _strike(fault: Fault, scenario: Scenario, world: World, evidence: Evidence, launch: Launch) -> None:
    if fault.kind == kinds.GATEWAY_KILL:
        window = Window(fault.kind, fault.target, await asyncio.to_thread(world.kill_gateway, fault.target))
        evidence.windows.append(window)
        await asyncio.sleep(fault.down_for)  # the outage itself: how long the process stays dead
        window.ready = await asyncio.to_thread(world.restart_gateway, fault.target)
    elif fault.kind == kinds.REPLICA_KILL:
        window = Window(fault.kind, fault.target, await asyncio.to_thread(world.kill_engine, fault.target))
        evidence.windows.append(window)
        await asyncio.sleep(fault.down_for)
        window.ready = await asyncio.to_thread(world.restart_engine, fault.target)
    elif fault.kind in kinds.REDIS_FAULTS:
        if fault.kind == kinds.REDIS_EMPTY:
            # Long streams, admitted and running when Redis comes back with nothing in it.
            for n in range(scenario.long_streams):
                launch("long", f"long{n // 2}", n / scenario.long_streams, prompt=f"Long {fault.at} {n}",
                       max_tokens=scenario.long_tokens, stream=True, sdk=n % 2 == 0)
            await asyncio.sleep(scenario.seconds_for(scenario.long_tokens) / 3)
        how = signal.SIGTERM if fault.kind == kinds.REDIS_TERM else signal.SIGKILL
        window = Window(fault.kind, 0, time.monotonic())
        evidence.windows.append(window)
        prober = asyncio.create_task(_probe(scenario, window, launch))
        await asyncio.to_thread(world.redis.stop, how)
        await asyncio.sleep(fault.down_for)
        window.ready = await asyncio.to_thread(world.redis.start)
        await prober
    elif fault.kind == kinds.BURST:
        # Every slot asked for at the same moment, half through each gateway.
        slots = scenario.replicas * scenario.max_num_seqs
        for n in range(slots):
            launch("burst", f"burst{n // 2}", (n % 2 + 0.5) / 2, prompt=f"Burst {fault.at} {n}",
                   max_tokens=scenario.tokens[0] * 2, stream=n % 3 != 0, sdk=n % 2 == 1)


async def _probe(scenario: Scenario, window: Window, launch: Launch) -> None:
    """A short request every 0.1 s through each gateway in turn, until the limit after Redis
    answers again: the first to succeed tells when service came back."""
    n = 0
    while not window.ready or time.monotonic() < window.ready + scenario.recovery_limit + 1.0:
        launch("probe", "probe", (n % 2 + 0.5) / 2, prompt=f"Probe {window.start} {n}", max_tokens=1,
               stream=False, sdk=False)
        n += 1
        await asyncio.sleep(PROBE_INTERVAL)


async def _fill(scenario: Scenario, world: World, evidence: Evidence, launch: Launch) -> None:
    """Ask for every slot at once and watch the engines until all run together (or the limit)."""
    evidence.fill_started = time.monotonic()
    slots = scenario.replicas * scenario.max_num_seqs
    for n in range(slots):
        launch("fill", f"fill{n // 2}", (n % 2 + 0.5) / 2, prompt=f"Fill {n}", stream=True, sdk=False,
               max_tokens=int(scenario.lease_ttl * 2 * 1000 / scenario.step_ms))
    deadline = evidence.load_ended + scenario.lease_ttl + 2.0 + scenario.lease_ttl * 2
    while time.monotonic() < deadline:
        stats = await asyncio.gather(*(asyncio.to_thread(e.stats) for e in world.engines))
        if all(s["running"] >= scenario.max_num_seqs for s in stats):
            evidence.fill_full_at = time.monotonic()
            return
        await asyncio.sleep(0.05)


async def _until(moment: float) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)  # the schedule itself, not a wait for a condition


def _usage_missing(request_ids: list[str]) -> list[str]:
    """The completed requests with no usage record once the worker has had its deadline."""
    from fairness.models import UsageRecord

    wanted = set(request_ids)
    deadline = time.monotonic() + USAGE_DEADLINE
    while True:
        found: set[str] = set()
        ordered = sorted(wanted)
        for start in range(0, len(ordered), 500):
            found |= set(UsageRecord.objects.filter(request_id__in=ordered[start:start + 500])
                         .values_list("request_id", flat=True))
        wanted -= found
        if not wanted or time.monotonic() > deadline:
            return sorted(wanted)
        time.sleep(0.25)
