"""Batch API benchmark: a batch of N lines (default 2,000) runs while four interactive users chat,
side by side with the same lines sent by a well-behaved client at the batch tier's limits.

    .venv/bin/python -m bench.batch [--lines N] [--quick] [--speed X] [--redis-url URL]

The engines run at enginesim's own pace by default (--speed 1: a line of 64 tokens lasts about
0.7 s, as a short answer on a GPU); at --speed 3 the runner's few milliseconds per line weigh three
times as much. The whole run takes about 14 minutes, most of it the baseline client's.

One portal for the whole run: two enginesim replicas of 8 slots (16 in all), one gateway, one
Celery worker with beat that runs batches (queues celery,batches; GP_BATCH_POLL_SECONDS 0.5), a
private redis-server, a temporary SQLite file. alice, bob, dave and erin (interactive) chat in a
closed loop: streamed answers of 32 tokens, 1-2 s of think time (÷ speed). carol's key (batch
tier) submits the batch; frank's (batch tier too) is the baseline client. Every line asks for
the same fixed-size answer (ignore_eos) and names itself in the body's ``user``, which enginesim
records, so the engines' request logs tell batch work from interactive work.

Phases, one after another:
  idle      the four users alone, for a fixed window
  portal    the users chat; the batch goes in through POST /v1/files and /v1/batches, and the
            worker's runner sends its lines through the same admission as live requests
  baseline  the users chat; a closed-loop client sends the same lines through the gateway, 2 at a
            time (the batch tier's per-key and pool caps), waiting out Retry-After on a 429/503

Measures (engine times from enginesim's /sim/requests: each request's arrival and end on the
host's monotonic clock; the gateway keeps the engines' queues empty, so arrival to end is the time
a request held a slot; the engines' sampled ``waiting`` is reported to show it):
  batch window W     from the first batch line's arrival at an engine to the last one's end
  capacity used      batch slot-seconds ÷ (16 slots × |W| − interactive slot-seconds within W):
                     the share of the capacity the interactive users left idle that the batch got
  reachable          ∫_W max(0, 16 − reserve − interactive requests running) dt: what borrowing
                     can give while GP_RESERVE_SLOTS stay free; batch slot-seconds ÷ that is how
                     close the runner comes to the admission rule's own ceiling
  TTFT               client side, streamed, to the first content chunk; in a loaded phase over the
                     requests sent while the batch was running, in idle over the whole window
  completion time    portal: from POST /v1/batches to the client seeing "completed" (the upload
                     is reported apart); baseline: from the first line sent to the last answer

Targets: capacity used by the portal batch ≥ 90 %; interactive TTFT p95 with the portal batch
≤ 1.5 × idle. Writes bench/results/batch.json and batch.png.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import load, measures, report
from bench.batch_plot import plot
from bench.harness import EngineSpec, Portal, portal, setup_django
from bench.load import Call, Target

INTERACTIVE_USERS = ("alice", "bob", "dave", "erin")
BATCH_USER = "carol"  # submits the batch
CLIENT_USER = "frank"  # the baseline client
RESERVE = int(os.environ.get("GP_RESERVE_SLOTS", "3"))  # what the gateways and the worker read
TERMINAL = {"completed", "failed", "expired", "cancelled"}


@dataclass(frozen=True)
class Config:
    lines: int
    speed: float
    replicas: int
    slots: int  # per replica
    line_tokens: int
    chat_tokens: int
    think: tuple[float, float]  # wall seconds
    idle_window: float
    warmup: float  # users chatting before the batch goes in
    client_concurrency: int
    redis_url: str | None

    @property
    def total_slots(self) -> int:
        return self.replicas * self.slots

    @classmethod
    def make(cls, lines: int | None, quick: bool, speed: float | None, line_tokens: int | None,
             redis_url: str | None) -> Config:
        speed = speed or 1.0
        return cls(lines=lines or (200 if quick else 2000), speed=speed, replicas=2, slots=8,
                   line_tokens=line_tokens or 64, chat_tokens=32, think=(1.0 / speed, 2.0 / speed),
                   idle_window=(15.0 if quick else 30.0), warmup=2.0, client_concurrency=2,
                   redis_url=redis_url)


def batch_lines(cfg: Config) -> list[dict[str, Any]]:
    return [{"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": "sim", "max_tokens": cfg.line_tokens, "ignore_eos": True, "user": f"line-{n}",
                      "messages": [{"role": "user", "content": f"Summarise document {n} in one paragraph."}]}}
            for n in range(cfg.lines)]


# -- the two batch systems


async def portal_batch(client: httpx.AsyncClient, url: str, secret: str, lines: list[dict[str, Any]]) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {secret}"}
    jsonl = "".join(json.dumps(line) + "\n" for line in lines).encode()
    t_upload = load.now()
    resp = await client.post(f"{url}/v1/files", headers=auth, data={"purpose": "batch"},
                             files={"file": ("lines.jsonl", jsonl, "application/jsonl")})
    resp.raise_for_status()
    file_id = resp.json()["id"]
    started = load.now()
    resp = await client.post(
        f"{url}/v1/batches",
        headers=auth,
        json={"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"},
    )
    resp.raise_for_status()
    batch = resp.json()
    while batch["status"] not in TERMINAL:
        await asyncio.sleep(0.2)
        resp = await client.get(f"{url}/v1/batches/{batch['id']}", headers=auth)
        resp.raise_for_status()
        batch = resp.json()
    ended = load.now()
    answered = 0
    if batch.get("output_file_id"):
        resp = await client.get(f"{url}/v1/files/{batch['output_file_id']}/content", headers=auth)
        answered = sum(1 for row in resp.text.splitlines() if json.loads(row)["response"]["status_code"] == 200)
    return {"started": started, "ended": ended, "completion_s": ended - started,
            "upload_s": started - t_upload, "status": batch["status"], "answered_200": answered,
            "request_counts": batch.get("request_counts")}


async def client_batch(client: httpx.AsyncClient, url: str, secret: str, lines: list[dict[str, Any]],
                       concurrency: int) -> dict[str, Any]:
    """The well-behaved client: ``concurrency`` lines in flight, a 429 or 503 waited out."""
    auth = {"Authorization": f"Bearer {secret}"}
    todo = deque(line["body"] for line in lines)
    counts = {"answered_200": 0, "failed": 0, "retries": 0}

    async def sender() -> None:
        while todo:
            body = todo.popleft()
            while True:
                try:
                    resp = await client.post(f"{url}/v1/chat/completions", headers=auth, json=body)
                except httpx.HTTPError:
                    counts["retries"] += 1
                    await asyncio.sleep(1.0)
                    continue
                if resp.status_code in (429, 503):
                    counts["retries"] += 1
                    await asyncio.sleep(float(resp.headers.get("retry-after") or 1.0))
                    continue
                counts["answered_200" if resp.status_code == 200 else "failed"] += 1
                break

    started = load.now()
    await asyncio.gather(*(sender() for _ in range(concurrency)))
    ended = load.now()
    return {"started": started, "ended": ended, "completion_s": ended - started, "status": "completed", **counts}


# -- a phase: the users chatting, with or without a batch


async def chatter(client: httpx.AsyncClient, user: str, target: Target, cfg: Config, calls: list[Call],
                  stop: asyncio.Event, seed: int) -> None:
    rng = random.Random(seed)
    await asyncio.sleep(rng.uniform(0, cfg.think[1]))
    n = 0
    while not stop.is_set():
        body = load.chat_body("sim", f"{user} asks question {n}: how are you?", cfg.chat_tokens)
        body["user"] = user
        call = Call(user, "interactive")
        calls.append(call)
        await load.chat(client, target, n, body, call, keep_times=False)
        n += 1
        pause = max(rng.uniform(*cfg.think), 0.05 if call.error else 0.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), pause)


async def run_phase(name: str, p: Portal, cfg: Config, lines: list[dict[str, Any]], pids: dict[str, int]
                    ) -> dict[str, Any]:
    gateway = p.gateway_url()
    calls: list[Call] = []
    samples: dict[str, list[dict[str, Any]]] = {e.url: [] for e in p.engines}
    stop = asyncio.Event()
    async with load.make_client() as client:
        for engine in p.engines:
            await load.reset_peak(client, engine.url)  # also clears its request log
        samplers = [asyncio.create_task(load.sample_engine(client, url, 0.25, out)) for url, out in samples.items()]
        users = [asyncio.create_task(chatter(client, u, Target((gateway,), p.secret(u)), cfg, calls, stop, k))
                 for k, u in enumerate(INTERACTIVE_USERS)]
        job: dict[str, Any] = {}
        try:
            await asyncio.sleep(cfg.warmup)
            t0, m0 = load.now(), time.monotonic()
            cpu0 = {n: load.cpu_seconds(pid) for n, pid in pids.items()}
            if name == "idle":
                await asyncio.sleep(cfg.idle_window)
            elif name == "portal":
                job = await portal_batch(client, gateway, p.secret(BATCH_USER), lines)
            else:
                job = await client_batch(client, gateway, p.secret(CLIENT_USER), lines, cfg.client_concurrency)
            t1, m1 = load.now(), time.monotonic()
            cpu1 = {n: load.cpu_seconds(pid) for n, pid in pids.items()}
            stop.set()
            await asyncio.wait(users, timeout=30)
        finally:
            await load.cancel_all(users)
            await load.cancel_all(samplers)
        for engine in p.engines:
            await wait_idle(client, engine.url)
    log = [entry for engine in p.engines for entry in await asyncio.to_thread(engine.requests)]
    if job:  # the interactive requests that overlapped the batch's run
        t0, t1 = job["started"], job["ended"]
    result = summarize(name, cfg, calls, log, samples, (t0, t1), (m0, m1), job)
    # CPU seconds per second of the phase: two cores here, shared with whatever else runs
    result["cpu"] = {n: (b - a) / (m1 - m0) for n in pids if (a := cpu0[n]) is not None and (b := cpu1[n]) is not None}
    return result


async def wait_idle(client: httpx.AsyncClient, url: str, timeout: float = 60.0) -> None:
    deadline = load.now() + timeout
    while load.now() < deadline:
        stats = await load.engine_stats(client, url)
        if stats["running"] == 0 and stats["waiting"] == 0:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"engine {url} still busy after {timeout} s")


# -- measures


def overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def reachable(spans: list[tuple[float, float]], w0: float, w1: float, slots: int) -> float:
    """∫ max(0, slots − RESERVE − running(t)) dt over [w0, w1], running from interactive spans."""
    events = sorted([(max(a, w0), 1) for a, b in spans if b > w0 and a < w1]
                    + [(min(b, w1), -1) for a, b in spans if b > w0 and a < w1])
    total, running, at = 0.0, 0, w0
    for t, step in events:
        total += max(0, slots - RESERVE - running) * (t - at)
        running, at = running + step, t
    return total + max(0, slots - RESERVE - running) * (w1 - at)


def occupancy(spans: list[tuple[float, float]], w0: float, w1: float, step: float = 0.5) -> list[float]:
    """Mean requests running in each ``step`` of [w0, w1] (for the figure)."""
    out = []
    t = w0
    while t < w1:
        out.append(sum(overlap(a, b, t, t + step) for a, b in spans) / step)
        t += step
    return out


def summarize(name: str, cfg: Config, calls: list[Call], log: list[dict[str, Any]],
              samples: dict[str, list[dict[str, Any]]], window: tuple[float, float], mono: tuple[float, float],
              job: dict[str, Any]) -> dict[str, Any]:
    t0, t1 = window
    inter = [c for c in calls if t0 <= c.sent <= t1]
    done = [e for e in log if e["ended"] is not None]
    ispans = [(e["arrived"], e["ended"]) for e in done if e["user"] in INTERACTIVE_USERS]
    bspans = [(e["arrived"], e["ended"]) for e in done if str(e["user"]).startswith("line-")]
    slots = cfg.total_slots
    if bspans:
        w0, w1 = min(a for a, _ in bspans), max(b for _, b in bspans)
    else:
        w0, w1 = mono
    span = w1 - w0
    islot = sum(overlap(a, b, w0, w1) for a, b in ispans)
    bslot = sum(b - a for a, b in bspans)
    idle_left = slots * span - islot
    reach = reachable(ispans, w0, w1, slots)
    waiting = [s["waiting"] for out in samples.values() for s in out]
    return {
        "name": name,
        "window_s": span,
        "interactive": {
            "requests": len(inter),
            "errors": sorted({c.error for c in inter if c.error})[:5],
            "ttft": measures.summary(c.ttft for c in inter if c.ttft is not None),
            "slot_seconds": islot,
            "mean_slots": islot / span if span else None,
        },
        "batch": None
        if not bspans
        else {
            **{k: v for k, v in job.items() if k not in ("started", "ended")},
            "engine_requests": len(bspans),
            "aborted": sum(1 for e in done if str(e["user"]).startswith("line-") and e["outcome"] == "abort"),
            "engine_span_s": span,
            "slot_seconds": bslot,
            "mean_slots": bslot / span,
            "idle_slot_seconds": idle_left,
            "capacity_used": bslot / idle_left if idle_left > 0 else None,
            "reachable_slot_seconds": reach,
            "used_of_reachable": bslot / reach if reach > 0 else None,
            "reachable_share_of_idle": reach / idle_left if idle_left > 0 else None,
        },
        "engine": {"waiting_max": max(waiting, default=None), "capacity_slots": slots},
        "series": {
            "ttft": [(c.sent - t0, c.ttft) for c in inter if c.ttft is not None],
            "interactive_running": occupancy(ispans, w0, w1),
            "batch_running": occupancy(bspans, w0, w1),
        },
        "loadavg_1min_at_end": os.getloadavg()[0],
    }


# -- report


def targets(ph: dict[str, Any]) -> list[report.Target]:
    idle_p95 = ph["idle"]["interactive"]["ttft"]["p95"]
    out = [
        report.target("portal batch: share of the idle capacity used",
                      (ph["portal"]["batch"] or {}).get("capacity_used"),
                      ">=", 0.9, "", "batch slot-s ÷ (slots × window − interactive slot-s)"),
        report.target("interactive TTFT p95 with the portal batch / idle",
                      measures.ratio(ph["portal"]["interactive"]["ttft"]["p95"], idle_p95), "<=", 1.5, "x",
                      "portal ÷ idle"),
    ]
    return out


def print_tables(ph: dict[str, Any], cfg: Config) -> None:
    rows = []
    for name, s in ph.items():
        i, b, t = s["interactive"], s["batch"] or {}, s["interactive"]["ttft"]
        rows.append([name, i["requests"], t["p50"], t["p95"], t["max"], i["mean_slots"], b.get("completion_s"),
                     b.get("mean_slots"), b.get("capacity_used"), b.get("used_of_reachable"),
                     s["engine"]["waiting_max"], s["loadavg_1min_at_end"]])
    print(report.table(["phase", "int req", "TTFT p50 s", "p95 s", "max s", "int slots", "batch done s",
                        "batch slots", "of idle cap", "of reachable", "eng wait max", "load avg"],
                       rows, title=f"{cfg.lines} lines on {cfg.total_slots} slots (reserve {RESERVE}), "
                             f"speed {cfg.speed:g}"))
    portal_b, base_b = ph["portal"]["batch"] or {}, ph["baseline"]["batch"] or {}
    idle_p95 = ph["idle"]["interactive"]["ttft"]["p95"]
    print()
    print(report.table(["", "portal batch", "closed-loop client", "client ÷ portal"], [
        ["completion time s", portal_b.get("completion_s"), base_b.get("completion_s"),
         measures.ratio(base_b.get("completion_s"), portal_b.get("completion_s"))],
        ["lines answered 200", portal_b.get("answered_200"), base_b.get("answered_200"), None],
        ["batch slots in use (mean)", portal_b.get("mean_slots"), base_b.get("mean_slots"),
         measures.ratio(base_b.get("mean_slots"), portal_b.get("mean_slots"))],
        ["share of idle capacity", portal_b.get("capacity_used"), base_b.get("capacity_used"), None],
        ["interactive TTFT p95 ÷ idle", measures.ratio(ph["portal"]["interactive"]["ttft"]["p95"], idle_p95),
         measures.ratio(ph["baseline"]["interactive"]["ttft"]["p95"], idle_p95), None],
    ], title="Side by side"))
    names = sorted({n for s in ph.values() for n in s.get("cpu", {})})
    print()
    print(report.table(["phase", *names, "load avg"],
                       [[n, *(s.get("cpu", {}).get(c) for c in names), s["loadavg_1min_at_end"]]
                        for n, s in ph.items()],
                       title="CPU seconds per second by process (2 cores, shared: see the load average)"))


def worker_env(p: Portal, extra: dict[str, str]) -> dict[str, str]:
    # As the harness gives its gateways (bench/harness.py portal()).
    return {"DATABASE_URL": p.database_url, "REDIS_URL": p.redis_url, "CELERY_BROKER_URL": p.redis_url,
            "DJANGO_SETTINGS_MODULE": "gpuportal.settings", "GP_AUTH_EPOCH_CHECK_SECONDS": "0.25",
            "LOG_LEVEL": "WARNING", **extra}


def run_all(cfg: Config) -> dict[str, Any]:
    from bench.harness import LOGS
    from enginesim.process import pick_free_port
    from tests.support.polling import wait_for
    from tests.support.worker_process import WorkerProcess

    files_dir = Path(setup_django(cfg.redis_url).tmpdir) / "batch-files"
    files_dir.mkdir(exist_ok=True)
    env = {"GP_BATCH_FILES_DIR": str(files_dir), "GP_BATCH_POLL_SECONDS": "0.5"}
    members = {**{u: "interactive" for u in INTERACTIVE_USERS}, BATCH_USER: "batch", CLIENT_USER: "batch"}
    lines = batch_lines(cfg)
    phases: dict[str, Any] = {}
    engines = [EngineSpec(cfg.slots, cfg.speed)] * cfg.replicas
    with portal(members=members, engines=engines, redis_url=cfg.redis_url, gateway_env=env) as p:
        LOGS.mkdir(parents=True, exist_ok=True)
        worker = WorkerProcess(
            worker_env(p, env), LOGS / f"batch-worker-{pick_free_port()}.log", queues="celery,batches"
        )
        try:
            wait_for(lambda: "ready." in worker.log_tail(200), timeout=60, interval=0.2, what="the Celery worker")
            pids = {"bench": os.getpid(), "gateway": p.gateways[0].process.pid, "worker": worker.process.pid,
                    **{f"engine{i}": e.pid for i, e in enumerate(p.engines)}}
            for name in ("idle", "portal", "baseline"):
                started = time.monotonic()
                print(f"  phase {name} ...", flush=True)
                phases[name] = asyncio.run(run_phase(name, p, cfg, lines, pids))
                print(f"    done in {time.monotonic() - started:.1f} s", flush=True)
        finally:
            worker.stop()
    return phases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.batch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=None, help="lines in the batch (default 2000)")
    parser.add_argument("--quick", action="store_true", help="200 lines and a short idle window")
    parser.add_argument("--speed", type=float, default=None, help="enginesim speed (default 1)")
    parser.add_argument(
        "--line-tokens",
        type=int,
        default=None,
        help="tokens per line's answer (default 64; longer lines shrink the runner's "
        "per-line cost against engine time, and lengthen the baseline)",
    )
    parser.add_argument("--name", default="batch", help="results file name")
    parser.add_argument(
        "--redis-url", default=None, help="a Redis database to use and FLUSH (default: a private redis-server)"
    )
    args = parser.parse_args(argv)
    cfg = Config.make(args.lines, args.quick, args.speed, args.line_tokens, args.redis_url)
    print(f"batch benchmark: {cfg.lines} lines of {cfg.line_tokens} tokens, {cfg.replicas}×{cfg.slots} slots, "
          f"speed {cfg.speed:g}", flush=True)
    started = time.monotonic()
    phases = run_all(cfg)
    results: dict[str, Any] = {"config": asdict(cfg), "reserve_slots": RESERVE, "phases": phases,
                               "targets": targets(phases)}
    print()
    print_tables(phases, cfg)
    return report.finish(args.name, results, started, plot)


if __name__ == "__main__":
    sys.exit(main())
