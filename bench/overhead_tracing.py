"""What OpenTelemetry tracing costs a request: `python -m bench.overhead --tracing [--quick]`.

Two gateway processes over the same database, Redis and --instant enginesim: gateway×1 as shipped
(tracing off: no OTEL_* variables), traced×1 with OTEL_EXPORTER_OTLP_TRACES_ENDPOINT naming a
receiver on loopback that takes every OTLP/HTTP export and drops it (the spans are encoded and
posted by the BatchSpanProcessor's thread, as against a real collector). One client at c=1 sends
its requests in turn to the engine directly, gateway×1, the engine again and traced×1 (the order
rotated every round), non-streaming chats and then streamed ones; each arm's added latency is its
p50 / p99 less direct's in the same round, and tracing's cost is traced×1's less gateway×1's
(medians of the rounds). Target: at most 0.1 ms at p50, non-streaming. Pinned as bench.overhead
pins: both gateways and Redis on one core, the engine, the client and this process on the other.
Run with OTEL_SDK_DISABLED=true in its environment, it is an A/A run (traced×1 starts untraced).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench import overhead_report, report
from bench.harness import EPOCH_CHECK_SECONDS, LOGS, EngineSpec, cleanup_on_sigterm, portal
from bench.overhead_client import LoadGenerators, PhaseResult, PhaseSpec, chat_body
from bench.overhead_sys import find_process, pin
from enginesim.process import pick_free_port

PATH = "/v1/chat/completions"
MODEL = "sim"
KEY = "bench0"
# Each gateway's request follows one straight to the engine: a request's settlement (its lease
# back, its usage) runs after its answer, on the core both gateways share, and would otherwise
# fall on whichever gateway came next (an A/A run read the second +0.31 ms that way).
ARMS = ("direct", "gateway×1", "direct again", "traced×1")
TARGET_MS = 0.1
TIER = {"per_key_concurrency": 128, "pool_concurrency": None, "head_start_seconds": 0.0,
        "max_queue_wait_seconds": 600.0, "max_queued_per_key": 1024, "engine_priority": 0,
        "borrow_idle_slots": False, "isolate_prefix_cache": False}


class DropReceiver:
    """Takes OTLP/HTTP exports on loopback, answers 200 and keeps only a count."""

    def __init__(self) -> None:
        self.exports = 0
        self.bytes = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # the exporter keeps its connection

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                size = int(self.headers.get("content-length", "0"))
                self.rfile.read(size)
                receiver.exports += 1
                receiver.bytes += size
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _bodies(stream: bool) -> tuple[bytes, ...]:
    return tuple(chat_body(MODEL, n, 256 if stream else 16, stream) for n in range(64))


@contextlib.contextmanager
def _systems(receiver: DropReceiver) -> Iterator[tuple[dict[str, str], str, list[int]]]:
    """The arms' URLs, the key's secret and the proxies' pids (the gateways and Redis)."""
    from tests.support.gateway_process import GatewayProcess

    with portal(members={KEY: "bench"}, tiers={"bench": TIER}, model=MODEL, gateways=1,
                engines=[EngineSpec(max_num_seqs=1024, extra_args=("--instant",))]) as p:
        env = {"DATABASE_URL": p.database_url, "REDIS_URL": p.redis_url, "CELERY_BROKER_URL": p.redis_url,
               "DJANGO_SETTINGS_MODULE": "gpuportal.settings", "GP_AUTH_EPOCH_CHECK_SECONDS": str(EPOCH_CHECK_SECONDS),
               "LOG_LEVEL": "WARNING", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url,
               "OTEL_SERVICE_NAME": "gpuportal-bench"}
        port = pick_free_port()
        traced = GatewayProcess(port, env, LOGS / f"traced-{port}.log")
        try:
            plain = p.gateways[0]
            urls = {"direct": p.engines[0].url, "direct again": p.engines[0].url, "gateway×1": str(plain.url),
                    "traced×1": str(traced.url)}
            proxies = [plain.process.pid, traced.process.pid]
            redis_port = p.redis_url.split("//", 1)[1].split("/", 1)[0].split(":")[1]
            redis_pid = find_process("redis-server", f":{redis_port}")
            yield urls, p.members[KEY].secret, proxies + ([redis_pid] if redis_pid else []) + [p.engines[0].pid]
        finally:
            traced.stop()


def _paired(gens: LoadGenerators, urls: dict[str, str], secret: str, order: list[str], stream: bool,
            seconds: float, warmup: float) -> dict[str, Any]:
    t0 = time.perf_counter() + warmup
    spec = PhaseSpec(urls=tuple(urls[a] for a in order), path=PATH, bodies=_bodies(stream), secrets=(),
                     concurrency=1, measure_from=t0, measure_until=t0 + seconds, stream=stream,
                     url_secrets=tuple("" if a.startswith("direct") else secret for a in order))
    gens.start(spec)
    result: PhaseResult = gens.collect(timeout=warmup + seconds + 300)[0]
    return overhead_report.paired_summary(result, order)


def run(rounds: int, seconds: float, warmup: float = 1.0, pin_cores: bool = True) -> dict[str, Any]:
    receiver = DropReceiver()
    results: dict[str, Any] = {"config": {"rounds": rounds, "seconds": seconds, "concurrency": 1}}
    try:
        with _systems(receiver) as (urls, secret, pids), LoadGenerators(1) as gens:
            if pin_cores and (os.cpu_count() or 1) >= 2:
                *proxies, engine = pids
                print(f"pinned: gateways and Redis to core 1 ({pin(proxies, {1})} threads), the engine, "
                      f"the client and this process to core 0 ({pin([engine, *gens.pids, os.getpid()], {0})} "
                      "threads)", flush=True)
            _paired(gens, urls, secret, list(ARMS), False, 1.0, warmup)  # first requests: not measured
            for label, stream in (("non_streaming", False), ("streaming", True)):
                measured = []
                for r in range(rounds):
                    order = list(ARMS[r % len(ARMS):] + ARMS[:r % len(ARMS)])
                    measured.append(_paired(gens, urls, secret, order, stream, seconds, warmup))
                    added = measured[-1]["systems"]
                    print(f"  {label} round {r + 1}: gateway×1 +{report.fmt(added['gateway×1']['added_p50_ms'])} ms,"
                          f" traced×1 +{report.fmt(added['traced×1']['added_p50_ms'])} ms", flush=True)
                results[label] = overhead_report.paired_rounds(measured, list(ARMS))
    finally:
        receiver.close()
    results["exports"] = {"posts": receiver.exports, "bytes": receiver.bytes}
    return results


def targets(results: dict[str, Any]) -> list[report.Target]:
    plain = results["non_streaming"]["arms"]["traced×1"]
    stream = results["streaming"]["arms"]["traced×1"]
    return [
        report.target("tracing on: added p50 over tracing off, non-streaming c=1", plain.get("p50_over_plain_ms"),
                      "<=", TARGET_MS, " ms", "median of the rounds' traced×1 less gateway×1"),
        report.target("the traced gateway exported its spans", float(results["exports"]["posts"]), ">=", 1.0),
        report.target("tracing on: added p50 over tracing off, streamed c=1 (reported)",
                      stream.get("p50_over_plain_ms"), "<=", float("inf"), " ms", "256 chunks, no limit"),
    ]


def tables(results: dict[str, Any]) -> str:
    rows = []
    for label in ("non_streaming", "streaming"):
        paired = results[label]
        for arm in ("gateway×1", "traced×1"):
            row = paired["arms"][arm]
            rows.append((label, arm, report.fmt(paired["direct_ms"].get("p50")), report.fmt(row.get("added_p50_ms")),
                         report.fmt(row.get("added_p99_ms")), report.fmt(row.get("p50_over_plain_ms")),
                         report.fmt(row.get("p50_ratio_to_plain")), row["n"]))
    return report.table(["phase", "arm", "direct p50 ms", "added p50 ms", "added p99 ms",
                         "p50 over off ms", "added p50 / off's", "n"], rows, title="Tracing, paired at c=1")


def main(quick: bool, rounds: int | None, pin_cores: bool, name: str) -> int:
    cleanup_on_sigterm()
    started = time.monotonic()
    results = run(rounds or 3, 12.0 if quick else 24.0, pin_cores=pin_cores)
    results["targets"] = targets(results)
    results["elapsed_s"] = time.monotonic() - started
    print()
    print(tables(results))
    print()
    print(report.targets_table(results["targets"]))
    path = report.write_json(name, results)
    print(f"\nwrote {path} ({results['elapsed_s']:.0f} s)")
    return 0 if all(t["ok"] for t in results["targets"]) else 1
