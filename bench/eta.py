"""Wait-estimate accuracy: how true is the wait the gateway estimates when a request queues, under
the fairness bench's mixed load (interactive users, a batch flood, a greedy interactive key) with a
Batch API job running its lines into the same card?

    .venv/bin/python -m bench.eta [--quick] [--speed X] [--window S] [--warmup S] [--tail S]
                                  [--lines N] [--redis-url URL]

Default about 4 minutes (speed 2, a 150 s measured window); --quick under 2 minutes (a 45 s one).

One portal: one enginesim replica with 8 slots and the reference timing (an 8B model on one GPU)
sped up by --speed (default 2: slow enough that the interactive tier's queue waits pass a second),
one gateway, one Celery worker with beat that runs batches (queues celery,batches), a private
redis-server, a temporary SQLite file. The load, all through the gateway, all at once:
  carol (batch tier)        32 streamed requests in flight, 400 tokens each (bench/flood.py)
  frank (interactive tier)  6 requests of 128 tokens in flight, past his cap of 2 (the greedy key)
  alice, bob, dave, erin    interactive, streamed chats of 32 tokens, 1-2 s of think time (÷ speed)
  grace (batch tier)        a Batch API job (POST /v1/files, /v1/batches): lines of 64 tokens that
                            the worker's runner sends through the same admission (revocable
                            borrowers); cancelled when the load stops if not done by then
A thread polls admission's queued-per-group hash (keyspace ADMISSION_QUEUED_BY_GROUP) every 50 ms.

Measures, from the UsageRecord rows (usage.flush after the load; they hold the Batch API lines too):
every request that waited over a second (queued_ms > 1000) and carries the estimate it queued with
(queue_estimate_ms), among those that arrived in the measured window: from ``--warmup`` seconds
after the load began (the pace is not measured at first) to ``--tail`` seconds before it stopped,
so that they are granted before the load is cut (one still queued then leaves with no wait to
judge: those are counted as "cut in queue"). Per tier and per source of load:
  relative error      |estimate − actual| ÷ actual; its median (target ≤ 0.25)
  within a factor 2   share with estimate ÷ actual in [0.5, 2] (target ≥ 0.90)
  ratio               estimate ÷ actual: its median tells a bias (below 1: estimates too short)
Beside them, a naive baseline from the same run: the group's queue length when the request
arrived (the latest sample at or before its created_at) × the mean service time of the run's
completed requests on the group (latency − queued) ÷ the group's slots.
To tell where the estimate goes wrong, the same figures by the wait actually had and by the queue
at arrival, example rows, and what the estimate worked from beside what each source of load did:
the hold time lib/pace.lua measured per tier (and the queued arrival rate), each source's real
hold time, the slots it held, the age and fair-share delay of its head ticket (the sampler reads
admission's pace, queue, in-flight and stream hashes every 0.5 s).

Writes bench/results/eta.json and eta.png and prints the tables and PASS/FAIL targets. Exits 0
even when a target fails (the targets table says which).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import load, report
from bench.flood import Flood
from bench.harness import ROOT, EngineSpec, Portal, portal, setup_django
from bench.load import Call, Target
from bench.measures import percentile, ratio

INTERACTIVE_USERS = ("alice", "bob", "dave", "erin")
BATCH_USER = "carol"  # the flood
GREEDY_USER = "frank"  # an interactive key flooding past its cap
JOB_USER = "grace"  # submits the Batch API job
SLOTS = 8
WAITED = 1000  # ms: the requests the estimate is judged on waited longer than this
TERMINAL = {"completed", "failed", "expired", "cancelled"}
SOURCES = {  # key owner -> the load it is part of
    **{u: "chatters" for u in INTERACTIVE_USERS},
    GREEDY_USER: "frank (greedy)",
    BATCH_USER: "carol (flood)",
    JOB_USER: "Batch API lines",
}
SOURCE_ORDER = ("chatters", "frank (greedy)", "carol (flood)", "Batch API lines")
TIERS = ("interactive", "batch")
_T0 = time.monotonic()


def note(message: str) -> None:
    print(f"  [{time.monotonic() - _T0:5.0f} s] {message}", flush=True)
WAIT_BUCKETS = ((1, 2), (2, 5), (5, 15), (15, 60), (60, float("inf")))  # seconds actually waited
QUEUE_BUCKETS = ((0, 5), (5, 10), (10, 20), (20, 40), (40, float("inf")))  # group queue at arrival


@dataclass(frozen=True)
class Config:
    speed: float
    slots: int
    warmup: float  # load before the measured window (s)
    window: float  # arrivals measured (s)
    tail: float  # load after the measured window, so its arrivals can be granted (s)
    think: tuple[float, float]  # chatters' think time, wall seconds
    chat_tokens: int
    batch_concurrency: int
    batch_tokens: int
    greedy_concurrency: int
    greedy_tokens: int
    lines: int
    line_tokens: int
    job_after: float  # the Batch API job goes in this long after the load starts (s)
    sample_period: float
    reserve_slots: int
    queue_events_after_ms: int
    redis_url: str | None

    @property
    def duration(self) -> float:
        return self.warmup + self.window + self.tail

    @classmethod
    def make(cls, args: argparse.Namespace) -> Config:
        speed = args.speed or 2.0
        quick = args.quick
        return cls(
            speed=speed, slots=SLOTS,
            warmup=args.warmup if args.warmup is not None else (8.0 if quick else 12.0),
            window=args.window or (45.0 if quick else 150.0),
            tail=args.tail if args.tail is not None else (40.0 if quick else 60.0),
            think=(1.0 / speed, 2.0 / speed), chat_tokens=32,
            batch_concurrency=32, batch_tokens=400, greedy_concurrency=6, greedy_tokens=128,
            lines=args.lines or (400 if quick else 1500), line_tokens=64, job_after=3.0,
            sample_period=0.05,
            reserve_slots=int(os.environ.get("GP_RESERVE_SLOTS", "3")),
            queue_events_after_ms=int(os.environ.get("GP_QUEUE_EVENTS_AFTER_MS", "1000")),
            redis_url=args.redis_url,
        )


# -- the queue sampler


# What the estimate reads, sampled more slowly to tell where it goes wrong: the pace measured per
# "pool|group" (lib/pace.lua), the arrival rates, and who is queued and in flight.
SLOW_HASHES = {"service_s": "svc", "arrivals": "arr", "queued_by_pool": "pgq",
               "queued_by_key": "kq", "in_flight_by_key": "kin"}


class QueueSampler(threading.Thread):
    """Polls admission's queued-per-group hash every ``period`` s: (wall time, {group: queued}),
    a pin's tickets counted in its group. Wall clock (time.time), as UsageRecord.created_at.
    Every ``slow_every`` polls it also reads SLOW_HASHES, and the head ticket of each of
    ``streams`` (name -> "key|pool|group"): its score, place in line and head start, as
    "score|enqueued_at|head_start" under "heads" (the score less enqueued_at − head start is the
    fair-share delay, or the stream's floor, that admission ranks it by)."""

    def __init__(self, redis_url: str, period: float, streams: dict[str, str], slow_every: int = 10) -> None:
        super().__init__(name="eta-queue-sampler", daemon=True)
        self.redis_url = redis_url
        self.streams = streams
        self.period = period
        self.slow_every = slow_every
        self.times: list[float] = []
        self.counts: list[dict[str, int]] = []
        self.slow_times: list[float] = []
        self.slow: list[dict[str, dict[str, str]]] = []
        self.errors = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        import redis

        from fairness.scheduling.live_counts import group_of, text
        from fairness.store import keyspace

        ns = keyspace.ADMISSION_NAMESPACE
        name = ns + keyspace.ADMISSION_QUEUED_BY_GROUP
        client = redis.Redis.from_url(self.redis_url, decode_responses=True)
        polls = 0
        try:
            while not self._stop_event.is_set():
                before = time.time()
                try:
                    reply = client.hgetall(name)
                    if polls % self.slow_every == 0:
                        with client.pipeline(transaction=False) as pipe:
                            for suffix in SLOW_HASHES.values():
                                pipe.hgetall(ns + suffix)
                            slow = pipe.execute()
                        sample = {label: {text(k): text(v) for k, v in hash_.items()}
                                  for label, hash_ in zip(SLOW_HASHES, slow, strict=True)}
                        sample["heads"] = self._heads(client, ns)
                        self.slow_times.append(time.time())
                        self.slow.append(sample)
                except (redis.RedisError, OSError):
                    self.errors += 1
                else:
                    counts: dict[str, int] = defaultdict(int)
                    for group, queued in reply.items():
                        counts[group_of(text(group))] += int(queued)
                    self.times.append((before + time.time()) / 2)
                    self.counts.append(dict(counts))
                polls += 1
                self._stop_event.wait(self.period)
        finally:
            client.close()

    def _heads(self, client: Any, ns: str) -> dict[str, str]:
        from fairness.store import keyspace

        with client.pipeline(transaction=False) as pipe:
            for stream in self.streams.values():
                pipe.zrange(ns + keyspace.ADMISSION_STREAM + stream, 0, 0, withscores=True)
            heads = pipe.execute()
        found = {name: head[0] for name, head in zip(self.streams, heads, strict=True) if head}
        with client.pipeline(transaction=False) as pipe:
            for member, _ in found.values():
                pipe.hmget(ns + keyspace.ADMISSION_TICKET + str(member).split(":", 1)[1], "enq", "hs")
            tickets = pipe.execute()
        pairs = zip(found.items(), tickets, strict=True)
        return {name: f"{score}|{enq}|{hs}" for (name, (_, score)), (enq, hs) in pairs if enq is not None}

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5.0)

    def slow_at(self, at: float) -> dict[str, dict[str, str]]:
        """The latest slow sample at or before ``at`` (empty before the first)."""
        i = bisect.bisect_right(self.slow_times, at) - 1
        return {} if i < 0 else self.slow[i]

    def queued_at(self, at: float, group: str) -> int | None:
        """The group's queue in the latest sample at or before ``at`` (None: before the first)."""
        i = bisect.bisect_right(self.times, at) - 1
        return None if i < 0 else self.counts[i].get(group, 0)


# -- the Batch API job


def job_lines(cfg: Config) -> bytes:
    rows = [{"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": "sim", "max_tokens": cfg.line_tokens, "ignore_eos": True, "user": f"line-{n}",
                      "messages": [{"role": "user", "content": f"Summarise document {n} in one paragraph."}]}}
            for n in range(cfg.lines)]
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


async def submit_job(client: httpx.AsyncClient, url: str, secret: str, jsonl: bytes) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {secret}"}
    resp = await client.post(f"{url}/v1/files", headers=auth, data={"purpose": "batch"},
                             files={"file": ("lines.jsonl", jsonl, "application/jsonl")})
    resp.raise_for_status()
    resp = await client.post(f"{url}/v1/batches", headers=auth, json={
        "input_file_id": resp.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    resp.raise_for_status()
    batch: dict[str, Any] = resp.json()
    return batch


async def job_status(client: httpx.AsyncClient, url: str, secret: str, batch_id: str) -> dict[str, Any]:
    resp = await client.get(f"{url}/v1/batches/{batch_id}", headers={"Authorization": f"Bearer {secret}"})
    resp.raise_for_status()
    batch: dict[str, Any] = resp.json()
    return batch


async def end_job(client: httpx.AsyncClient, url: str, secret: str, batch_id: str,
                  timeout: float = 30.0) -> dict[str, Any]:
    """Cancel the job unless it has ended, and wait for it to end (its running lines finish)."""
    batch = await job_status(client, url, secret, batch_id)
    if batch["status"] not in TERMINAL:
        resp = await client.post(f"{url}/v1/batches/{batch_id}/cancel",
                                 headers={"Authorization": f"Bearer {secret}"})
        if resp.status_code not in (200, 409):
            resp.raise_for_status()
    deadline = load.now() + timeout
    while batch["status"] not in TERMINAL and load.now() < deadline:
        await asyncio.sleep(0.25)
        batch = await job_status(client, url, secret, batch_id)
    return batch


# -- the load


async def warm_up(client: httpx.AsyncClient, p: Portal) -> None:
    """One short request per key that sends live requests: a key's first meets cold caches."""
    users = (*INTERACTIVE_USERS, GREEDY_USER, BATCH_USER)
    calls = [load.chat(client, Target((p.gateway_url(),), p.secret(u)), 0,
                       load.chat_body(p.model, f"{u} says hello", 4), Call(u, "warm-up"), False) for u in users]
    for call in await asyncio.gather(*calls):
        if call.error:
            raise RuntimeError(f"warm-up request failed: {call.error}")


async def drive(p: Portal, cfg: Config, sampler: QueueSampler) -> dict[str, Any]:
    """The mixed load for cfg.duration seconds; the wall-clock times that bound the analysis."""
    gateway = p.gateway_url()
    calls: list[Call] = []
    job: dict[str, Any] = {}
    jsonl = job_lines(cfg)
    async with load.make_client() as client:
        await warm_up(client, p)
        floods = [
            Flood(Target((gateway,), p.secret(BATCH_USER)), BATCH_USER, cfg.batch_concurrency, model=p.model,
                  max_tokens=cfg.batch_tokens, keep_times=False),
            Flood(Target((gateway,), p.secret(GREEDY_USER)), GREEDY_USER, cfg.greedy_concurrency, model=p.model,
                  max_tokens=cfg.greedy_tokens, keep_times=False, kind="greedy"),
        ]
        users: list[asyncio.Task[None]] = []
        try:
            started = time.time()
            for flood in floods:
                await asyncio.to_thread(flood.start)
            stop_at = load.now() + cfg.duration - (time.time() - started)
            rng = random.Random(1)
            for k, name in enumerate(INTERACTIVE_USERS):
                def body(n: int, name: str = name) -> load.Body:
                    return load.chat_body(p.model, f"{name} asks question {n}: how are you?", cfg.chat_tokens)
                users.append(asyncio.create_task(load.closed_loop(
                    client, name, "interactive", Target((gateway,), p.secret(name)), body, calls,
                    stop_at=stop_at, think=load.uniform_think(*cfg.think, seed=100 + k),
                    start_delay=rng.uniform(0, cfg.think[1]), keep_times=False)))
            await asyncio.sleep(cfg.job_after)
            batch = await submit_job(client, gateway, p.secret(JOB_USER), jsonl)
            job["submitted_at"] = time.time() - started
            next_note = load.now()
            while load.now() < stop_at:
                if load.now() >= next_note:
                    batch = await job_status(client, gateway, p.secret(JOB_USER), batch["id"])
                    queued = sampler.counts[-1] if sampler.counts else {}
                    print(f"    {time.time() - started:5.0f} s: queued {queued or 0}, job {batch['status']} "
                          f"{batch.get('request_counts')}", flush=True)
                    next_note += 15.0
                await asyncio.sleep(min(1.0, max(0.0, stop_at - load.now())))
            stopped = time.time()
            note("load stopped; cancelling the job")
            batch = await end_job(client, gateway, p.secret(JOB_USER), batch["id"])
            note(f"job {batch['status']}")
            job.update({"id": batch["id"], "status": batch["status"], "request_counts": batch.get("request_counts")})
            await asyncio.wait(users, timeout=30)
        finally:
            await load.cancel_all(users)
            flood_calls = [c for flood in floods for c in await flood.stop()]
        await wait_settled(client, p)
        note("settled")
    calls += flood_calls
    return {
        "started": started, "stopped": stopped,
        "window": (started + cfg.warmup, started + cfg.warmup + cfg.window),
        "job": job,
        "client_calls": {kind: {"sent": sum(1 for c in calls if c.kind == kind),
                                "ok": sum(1 for c in calls if c.kind == kind and c.ok),
                                "errors": sorted({c.error for c in calls if c.kind == kind and c.error
                                                  and c.error != "cancelled"})[:5]}
                         for kind in ("interactive", "greedy", "batch")},
    }


async def wait_settled(client: httpx.AsyncClient, p: Portal, timeout: float = 60.0) -> None:
    """The engine idle and every lease given back (so every request's usage event is pushed).
    Admission's in-flight counters keep their zeros: a group at 0 holds nothing."""
    import redis.asyncio

    deadline = load.now() + timeout
    while load.now() < deadline:
        stats = await load.engine_stats(client, p.engines[0].url)
        if stats["running"] == 0 and stats["waiting"] == 0:
            break
        await asyncio.sleep(0.1)
    counters = redis.asyncio.Redis.from_url(p.redis_url, decode_responses=True)
    try:
        while True:
            held = {group: n for group, n in (await load.admission_counts(counters, "gp"))["gin"].items() if n}
            if not held or load.now() > deadline:
                break
            await asyncio.sleep(0.05)
    finally:
        await counters.aclose()
    if held:
        print(f"WARNING: leases still held after the load: {held}")
    await asyncio.sleep(0.5)  # the release's accounting runs in the background


def flush_usage(redis_url: str, timeout: float = 120.0) -> int:
    """Drain the usage events into UsageRecord rows (the worker's beat may be flushing too: a
    flush that finds the lock taken writes nothing, so wait for the list to empty)."""
    import redis

    from fairness.accounting import usage
    from fairness.store import keyspace

    client = redis.Redis.from_url(redis_url)
    written = 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            n = usage.flush(client)
            written += n
            if n == 0:
                if client.llen(keyspace.USAGE_EVENTS) == 0:
                    break
                time.sleep(0.2)
    finally:
        client.close()
    return written


# -- the run


def run_all(cfg: Config) -> tuple[list[dict[str, Any]], QueueSampler, dict[str, Any], dict[str, int]]:
    from bench.batch import worker_env
    from bench.harness import LOGS
    from enginesim.process import pick_free_port
    from tests.support.polling import wait_for
    from tests.support.worker_process import WorkerProcess

    files_dir = Path(setup_django(cfg.redis_url).tmpdir) / "batch-files"
    files_dir.mkdir(exist_ok=True)
    env = {"GP_BATCH_FILES_DIR": str(files_dir), "GP_BATCH_POLL_SECONDS": "0.5"}
    members = {**{u: "interactive" for u in (*INTERACTIVE_USERS, GREEDY_USER)},
               BATCH_USER: "batch", JOB_USER: "batch"}
    with portal(members=members, engines=[EngineSpec(cfg.slots, cfg.speed)], redis_url=cfg.redis_url,
                gateway_env=env) as p:
        LOGS.mkdir(parents=True, exist_ok=True)
        worker = WorkerProcess(worker_env(p, env), LOGS / f"eta-worker-{pick_free_port()}.log",
                               queues="celery,batches")
        streams = {m.username: f"{m.unit}|{m.tier}|{p.model}" for m in p.members.values()
                   if m.username in (BATCH_USER, GREEDY_USER, JOB_USER)}
        sampler = QueueSampler(p.redis_url, cfg.sample_period, streams)
        try:
            note("portal up")
            wait_for(lambda: "ready." in worker.log_tail(200), timeout=60, interval=0.2, what="the Celery worker")
            sampler.start()
            note(f"worker ready; load: {cfg.duration:.0f} s (warm-up {cfg.warmup:g}, measured window "
                 f"{cfg.window:g}, tail {cfg.tail:g}) ...")
            timeline = asyncio.run(drive(p, cfg, sampler))
        finally:
            sampler.stop()
            worker.stop()
            note("worker stopped")
        written = flush_usage(p.redis_url)
        rows, slots = read_records()
        note(f"{written} usage events flushed by the bench, {len(rows)} UsageRecord rows")
        timeline["units"] = {m.unit: m.username for m in p.members.values()}
    note("portal down")
    return rows, sampler, timeline, slots


def read_records() -> tuple[list[dict[str, Any]], dict[str, int]]:
    from django.db.models import Sum

    from fairness.models import Replica, UsageRecord

    fields = ("request_id", "tier", "queued_ms", "queue_estimate_ms", "latency_ms", "status", "stream", "model",
              "endpoint", "replica")
    rows = [{**{f: getattr(r, f) for f in fields}, "at": r.created_at.timestamp(), "owner": r.key.owner.username}
            for r in UsageRecord.objects.select_related("key__owner").order_by("created_at")]
    slots = {r["model"]: int(r["slots"]) for r in Replica.objects.values("model").annotate(slots=Sum("max_num_seqs"))}
    return rows, slots


# -- measures


def accuracy(pairs: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """(actual, predicted) pairs: the median relative error, the share within a factor of two,
    and the spread of predicted ÷ actual."""
    errors = [abs(pred - actual) / actual for actual, pred in pairs]
    ratios = [pred / actual for actual, pred in pairs]
    return {
        "n": len(pairs),
        "median_rel_error": statistics.median(errors) if errors else None,
        "p90_rel_error": percentile(errors, 90),
        "within_2x": sum(1 for r in ratios if 0.5 <= r <= 2.0) / len(ratios) if ratios else None,
        "ratio_p10": percentile(ratios, 10),
        "ratio_median": statistics.median(ratios) if ratios else None,
        "ratio_p90": percentile(ratios, 90),
        "short": sum(1 for r in ratios if r < 0.5) / len(ratios) if ratios else None,  # < half the wait
        "long": sum(1 for r in ratios if r > 2.0) / len(ratios) if ratios else None,  # > twice the wait
    }


def analyse(rows: list[dict[str, Any]], sampler: QueueSampler, timeline: dict[str, Any],
            slots: dict[str, int]) -> dict[str, Any]:
    w0, w1 = timeline["window"]
    done = [r for r in rows if r["status"] == 200]
    service: dict[str, float] = {}
    for model in sorted({r["model"] for r in done}):
        spans = [max(0, r["latency_ms"] - r["queued_ms"]) for r in done if r["model"] == model]
        service[model] = sum(spans) / len(spans)
    units = timeline.get("units", {})
    for r in rows:
        r["source"] = SOURCES.get(r["owner"], r["owner"])
        r["queue_at_arrival"] = sampler.queued_at(r["at"], r["model"])
        slow = sampler.slow_at(r["at"])
        r["queued_by_key"] = {units.get(k, k): int(v) for k, v in slow.get("queued_by_key", {}).items() if int(v)}
        pace = slow.get("service_s", {}).get(f"{r['tier']}|{r['model']}")
        r["pace_s"] = None if pace is None else float(pace)
        group_slots = slots.get(r["model"])
        r["naive_ms"] = (None if r["queue_at_arrival"] is None or not group_slots or r["model"] not in service
                         else r["queue_at_arrival"] * service[r["model"]] / group_slots)
    measured = [r for r in rows if w0 <= r["at"] < w1]
    judged = [r for r in measured if r["queued_ms"] > WAITED and r["queue_estimate_ms"] is not None]

    def groups() -> list[tuple[str, str, Callable[[dict[str, Any]], bool]]]:
        """(key, label, which rows): everyone, each tier, each source of load within it."""
        def only(tier: str | None, source: str | None = None) -> Callable[[dict[str, Any]], bool]:
            return lambda r: (tier is None or r["tier"] == tier) and (source is None or r["source"] == source)

        out = [("all", "all", only(None))]
        for tier in TIERS:
            out.append((tier, tier, only(tier)))
            for source in SOURCE_ORDER:
                if any(r["tier"] == tier and r["source"] == source for r in measured):
                    out.append((f"{tier}/{source}", f"  {source}", only(tier, source)))
        return out

    per: dict[str, Any] = {}
    for key, label, match in groups():
        mine = [r for r in measured if match(r)]
        over = [r for r in mine if r["queued_ms"] > WAITED]
        est = [r for r in over if r["queue_estimate_ms"] is not None]
        naive = [r for r in est if r["naive_ms"] is not None]
        estimator = accuracy([(r["queued_ms"], float(r["queue_estimate_ms"])) for r in est])
        baseline = accuracy([(r["queued_ms"], float(r["naive_ms"])) for r in naive])
        per[key] = {
            "label": label,
            "records": len(mine),
            "ok": sum(1 for r in mine if r["status"] == 200),
            "with_estimate": sum(1 for r in mine if r["queue_estimate_ms"] is not None),
            "waited_over_1s": len(over),
            "waited_over_1s_with_estimate": len(est),
            "waited_over_1s_without_estimate": len(over) - len(est),
            # queued (a wait past 100 ms) without an estimate
            "queued_without_estimate": sum(1 for r in mine if r["queue_estimate_ms"] is None and r["queued_ms"] > 100),
            # arrived in the window, never granted: the load was cut while they waited
            "cut_in_queue": sum(1 for r in mine if r["status"] != 200 and not r["replica"] and r["queued_ms"] == 0),
            "actual_s": _spread([r["queued_ms"] / 1000 for r in est]),
            "estimator": estimator,
            "naive": baseline,
            "estimator_over_naive": ratio(estimator["median_rel_error"], baseline["median_rel_error"]),
            "by_wait": _buckets(est, WAIT_BUCKETS, lambda r: r["queued_ms"] / 1000),
            "by_queue": _buckets([r for r in est if r["queue_at_arrival"] is not None], QUEUE_BUCKETS,
                                 lambda r: r["queue_at_arrival"]),
        }
    return {
        "service_ms": service, "slots": slots,
        "pace": pace_table(rows, sampler, w0, w1, units),
        "window_wall": [w0, w1], "rows_total": len(rows), "rows_measured": len(measured),
        "queue_samples": len(sampler.times), "queue_sampler_errors": sampler.errors,
        "queue_max": {g: max((c.get(g, 0) for c in sampler.counts), default=0)
                      for g in sorted({g for c in sampler.counts for g in c})},
        "per": per,
        "examples": examples(judged),
        "judged": [[round(r["at"] - timeline["started"], 2), r["tier"], r["source"], r["queue_at_arrival"],
                    r["queued_ms"], r["queue_estimate_ms"], None if r["naive_ms"] is None else round(r["naive_ms"]),
                    r["status"], r["request_id"], r["pace_s"], r["queued_by_key"]] for r in judged],
    }


def pace_table(rows: list[dict[str, Any]], sampler: QueueSampler, w0: float, w1: float,
               units: dict[str, str]) -> list[dict[str, Any]]:
    """Per tier: the hold time the estimate used (lib/pace.lua's mean, averaged over the window's
    samples) and its arrival rate, beside each source's real hold (latency − queued of its completed
    requests that arrived in the window) and how many of its requests queued per second."""
    samples = [s for t, s in zip(sampler.slow_times, sampler.slow, strict=True) if w0 <= t < w1]
    out = []
    for tier in TIERS:
        fields = sorted({f for s in samples for f in s.get("service_s", {}) if f.startswith(f"{tier}|")})
        paces = [float(s["service_s"][f]) for s in samples for f in fields if f in s.get("service_s", {})]
        rates = []  # the tier's queued arrivals per second: the sum of its people's (lib/pace.lua)
        for t, s in zip(sampler.slow_times, sampler.slow, strict=True):
            if not w0 <= t < w1:
                continue
            total = 0.0
            for stored in s.get("arrivals", {}).values():
                count, at, _, pool = stored.split("|", 3)
                if pool == tier:
                    total += float(count) * math.exp(-max(0.0, t - float(at)) / 30.0) / 30.0
            rates.append(total)
        mine = [r for r in rows if r["tier"] == tier and w0 <= r["at"] < w1]
        real = {source: [(r["latency_ms"] - r["queued_ms"]) / 1000 for r in mine
                         if r["source"] == source and r["status"] == 200] for source in SOURCE_ORDER}
        in_flight: dict[str, float] = defaultdict(float)
        for sample in samples:
            for unit, n in sample.get("in_flight_by_key", {}).items():
                user = units.get(unit, unit)
                if user in SOURCES and unit.endswith(f".{tier}"):
                    in_flight[SOURCES[user]] += int(n) / len(samples)
        delays: dict[str, list[float]] = defaultdict(list)
        ages: dict[str, list[float]] = defaultdict(list)
        for t, sample in zip(sampler.slow_times, sampler.slow, strict=True):
            for user, head in sample.get("heads", {}).items():
                score, enq, hs = (float(x) for x in head.split("|"))
                if w0 <= t < w1 and SOURCES.get(user) in SOURCE_ORDER and sample_tier(user, units) == tier:
                    delays[SOURCES[user]].append(score - (enq - hs))
                    ages[SOURCES[user]].append(t - enq)
        out.append({
            "tier": tier,
            "mean_in_flight": dict(in_flight),
            "head_delay_s": {s: sum(v) / len(v) for s, v in delays.items()},
            "head_age_s": {s: sum(v) / len(v) for s, v in ages.items()},
            "pace_mean_s": sum(paces) / len(paces) if paces else None,
            "pace_p10_s": percentile(paces, 10), "pace_p90_s": percentile(paces, 90),
            "arrival_rate_per_s": sum(rates) / len(rates) if rates else None,
            "real_hold_s": {source: sum(v) / len(v) for source, v in real.items() if v},
            "completed_per_s": {source: len(v) / (w1 - w0) for source, v in real.items() if v},
            "queued_per_s": {source: sum(1 for r in mine if r["source"] == source and r["queued_ms"] > 100) / (w1 - w0)
                             for source in SOURCE_ORDER if any(r["source"] == source for r in mine)},
        })
    return out


def sample_tier(user: str, units: dict[str, str]) -> str | None:
    """The tier of ``user``'s key (its unit is "p<id>.<tier>")."""
    return next((unit.rsplit(".", 1)[1] for unit, name in units.items() if name == user), None)


def _spread(values: list[float]) -> dict[str, float | None]:
    return {"p10": percentile(values, 10), "p50": percentile(values, 50), "p90": percentile(values, 90),
            "max": max(values, default=None)}


def _buckets(rows: list[dict[str, Any]], edges: Sequence[tuple[float, float]],
             value: Callable[[dict[str, Any]], float]) -> list[dict[str, Any]]:
    out = []
    for low, high in edges:
        mine = [r for r in rows if low <= value(r) < high]
        if not mine:
            continue
        out.append({"from": low, "to": high,
                    "estimator": accuracy([(r["queued_ms"], float(r["queue_estimate_ms"])) for r in mine]),
                    "naive": accuracy([(r["queued_ms"], float(r["naive_ms"])) for r in mine
                                       if r["naive_ms"] is not None])})
    return out


def examples(judged: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A few rows per source at the 10th, 50th and 90th percentile of the wait, and the three the
    estimator missed most."""
    picked: list[tuple[str, dict[str, Any]]] = []
    for source in SOURCE_ORDER:
        mine = sorted((r for r in judged if r["source"] == source), key=lambda r: r["queued_ms"])
        if mine:
            for q in (0.1, 0.5, 0.9):
                picked.append((f"p{round(q * 100)} wait", mine[min(len(mine) - 1, int(q * len(mine)))]))
    worst = sorted(judged, key=lambda r: -abs(r["queue_estimate_ms"] - r["queued_ms"]) / r["queued_ms"])[:3]
    picked += [("worst miss", r) for r in worst]
    return [{"pick": pick, "request_id": r["request_id"], "tier": r["tier"], "source": r["source"],
             "queue_at_arrival": r["queue_at_arrival"], "pace_s": r["pace_s"],
             "queued_by_key": ", ".join(f"{k} {v}" for k, v in sorted(r["queued_by_key"].items())),
             "actual_s": r["queued_ms"] / 1000,
             "estimate_s": r["queue_estimate_ms"] / 1000,
             "naive_s": None if r["naive_ms"] is None else r["naive_ms"] / 1000} for pick, r in picked]


# -- report


def targets(per: dict[str, Any]) -> list[report.Target]:
    out = []
    for name in (*TIERS, "all"):
        s = per.get(name)
        if s is None:
            continue
        est, naive = s["estimator"], s["naive"]
        detail = f"{est['n']} requests that waited > 1 s, with an estimate"
        out.append(report.target(f"{name}: median |estimate − actual| ÷ actual", est["median_rel_error"], "<=", 0.25,
                                 "", f"{detail}; naive {report.fmt(naive['median_rel_error'])}"))
        out.append(report.target(f"{name}: share of estimates within a factor of 2", est["within_2x"], ">=", 0.90,
                                 "", f"{detail}; naive {report.fmt(naive['within_2x'])}"))
        out.append(report.target(f"  (info) {name}: estimator's median error ÷ the naive baseline's",
                                 s["estimator_over_naive"], "<=", 1.0, "x",
                                 "queue length × mean service ÷ slots, same run"))
    return out


def print_tables(analysis: dict[str, Any]) -> None:
    per = analysis["per"]
    rows = []
    for s in per.values():
        rows.append([s["label"], s["records"], s["with_estimate"], s["waited_over_1s"],
                     s["waited_over_1s_with_estimate"], s["waited_over_1s_without_estimate"],
                     s["queued_without_estimate"], s["cut_in_queue"], s["actual_s"]["p50"], s["actual_s"]["p90"]])
    print(report.table(["tier / source", "records", "with estimate", "waited > 1 s", "  with estimate",
                        "  without", "queued, no estimate", "cut in queue", "wait p50 s", "wait p90 s"], rows,
                       title="Requests that arrived in the measured window (UsageRecord rows)"))
    rows = []
    for s in per.values():
        e, n = s["estimator"], s["naive"]
        rows.append([s["label"], e["n"], e["median_rel_error"], e["within_2x"], e["ratio_median"],
                     e["ratio_p10"], e["ratio_p90"], n["median_rel_error"], n["within_2x"], n["ratio_median"],
                     s["estimator_over_naive"]])
    print()
    print(report.table(["tier / source", "n", "est med err", "est ×2", "est/act p50", "p10", "p90",
                        "naive med err", "naive ×2", "naive/act p50", "est÷naive err"], rows,
                       title="Wait estimate vs actual, requests that waited > 1 s (target: med err ≤ 0.25, "
                             "×2 ≥ 0.90)"))
    for key, title, unit in (("by_wait", "by the wait they actually had", "s"),
                             ("by_queue", "by the group's queue when they arrived", "queued")):
        rows = []
        for s in per.values():
            if s["label"].startswith("  "):
                continue
            for b in s[key]:
                e, n = b["estimator"], b["naive"]
                high = "+" if b["to"] == float("inf") else f"–{b['to']:g}"
                rows.append([s["label"], f"{b['from']:g}{high} {unit}", e["n"], e["median_rel_error"],
                             e["within_2x"], e["ratio_median"], n["median_rel_error"], n["ratio_median"]])
        print()
        print(report.table(["tier", "bucket", "n", "est med err", "est ×2", "est/act p50", "naive med err",
                            "naive/act p50"], rows, title=f"The same {title}"))
    print()
    print(report.table(["pick", "tier", "source", "queued at arrival", "by key (0.5 s sample)", "tier pace s",
                        "actual s", "estimate s", "naive s"],
                       [[x["pick"], x["tier"], x["source"], x["queue_at_arrival"], x["queued_by_key"], x["pace_s"],
                         x["actual_s"], x["estimate_s"], x["naive_s"]] for x in analysis["examples"]],
                       title="Examples (tier pace: the mean hold time the estimate used for the tier)"))
    rows = []
    for p in analysis["pace"]:
        for source, hold in p["real_hold_s"].items():
            rows.append([p["tier"], p["pace_mean_s"], p["pace_p10_s"], p["pace_p90_s"], p["arrival_rate_per_s"],
                         source, hold, p["completed_per_s"].get(source), p["queued_per_s"].get(source),
                         p["mean_in_flight"].get(source), p["head_age_s"].get(source),
                         p["head_delay_s"].get(source)])
    print()
    print(report.table(["tier", "pace used s (mean)", "p10", "p90", "queued arrivals/s used", "source",
                        "real hold s", "completed/s", "queued/s", "slots held (mean)", "head ticket age s",
                        "head's delay s"], rows,
                       title="What the estimate assumed per tier (lib/pace.lua, sampled) vs each source's own"))
    print(f"\nmean service per group (latency − queued, completed requests): "
          f"{ {g: round(ms) for g, ms in analysis['service_ms'].items()} } ms; slots {analysis['slots']}; "
          f"queue samples {analysis['queue_samples']} (peak {analysis['queue_max']})")


def plot(results: dict[str, Any], name: str) -> Path:
    fig, axes = report.figure(1, 2, width=13, height_per_row=5.5)
    colours = dict(zip(SOURCE_ORDER, ("tab:green", "tab:orange", "tab:blue", "tab:purple"), strict=True))
    judged = results["analysis"]["judged"]
    for ax, column, title in ((axes[0][0], 5, "gateway's estimate"), (axes[0][1], 6, "naive: queue × service ÷ slots")):
        for source in SOURCE_ORDER:
            points = [(r[4] / 1000, r[column] / 1000) for r in judged if r[2] == source and r[column] is not None]
            if points:
                ax.scatter([a for a, _ in points], [max(e, 0.01) for _, e in points], s=7, alpha=0.6,
                           color=colours[source], label=f"{source} ({len(points)})")
        values = [r[4] / 1000 for r in judged] or [1.0]
        low, high = 1.0, max(values) * 1.2
        ax.plot([low, high], [low, high], color="black", linewidth=1)
        ax.plot([low, high], [low * 2, high * 2], color="gray", linestyle="--", linewidth=1)
        ax.plot([low, high], [low / 2, high / 2], color="gray", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set(title=f"Queue wait: {title} vs actual (waited > 1 s)", xlabel="actual wait (s)",
               ylabel="predicted wait (s)")
        ax.legend(fontsize=8)
    return report.save_figure(fig, name)


def git_state() -> dict[str, Any]:
    """Which code was measured: HEAD and the files changed beside it (read-only git)."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        changed = subprocess.run(["git", "diff", "--name-only", "HEAD"], cwd=ROOT, env=env, capture_output=True,
                                 text=True, timeout=10).stdout.split()
        return {"head": head, "changed": changed}
    return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.eta", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 45 s measured window (under 2 minutes)")
    parser.add_argument("--speed", type=float, default=None, help="enginesim speed (default 2)")
    parser.add_argument("--window", type=float, default=None, help="measured window, s (default 150)")
    parser.add_argument("--warmup", type=float, default=None, help="load before the window, s (default 12; quick 8)")
    parser.add_argument("--tail", type=float, default=None, help="load after the window, s (default 60; quick 40)")
    parser.add_argument("--lines", type=int, default=None, help="lines in the Batch API job (default 1500; quick 400)")
    parser.add_argument("--name", default="eta", help="results file name")
    parser.add_argument("--redis-url", default=None,
                        help="a Redis database to use and FLUSH (default: a private redis-server)")
    args = parser.parse_args(argv)
    cfg = Config.make(args)
    print(f"wait-estimate benchmark: speed {cfg.speed:g}, {cfg.slots} slots, reserve {cfg.reserve_slots}, "
          f"measured window {cfg.window:g} s", flush=True)
    started = time.monotonic()
    rows, sampler, timeline, slots = run_all(cfg)
    analysis = analyse(rows, sampler, timeline, slots)
    results: dict[str, Any] = {"config": asdict(cfg), "code": git_state(), "timeline": timeline,
                               "analysis": analysis, "targets": targets(analysis["per"])}
    print()
    print(f"Batch API job: {timeline['job'].get('status')} {timeline['job'].get('request_counts')}; "
          f"client calls {timeline['client_calls']}")
    print()
    print_tables(analysis)
    report.finish(args.name, results, started, plot)
    return 0  # a missed target is reported, not an error


if __name__ == "__main__":
    sys.exit(main())
