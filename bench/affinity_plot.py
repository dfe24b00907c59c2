"""The affinity benchmark's read-out: what the engines, the gateway and the client's records
say, the measures and targets over them, the printed tables and the PNG.

Engines: /metrics counters (prefix cache, preemptions) and /sim/stats. Gateway: its own
in-flight counts per replica (the Redis hashes bounded load reads) and what it still holds once
the clients have left. Client: per turn, the replica, TTFT and requests in flight.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import load, measures, report
from bench.measures import ratio

if TYPE_CHECKING:
    from bench.affinity import Run
    from bench.harness import Portal

Samples = list[tuple[float, list[int]]]  # (perf_counter, in flight per replica in name order)


# -- what the engines and the gateway say -------------------------------------------------------


def scrape(p: Portal) -> dict[str, dict[str, float]]:
    """Per engine: the /metrics counters (prefix cache, preemptions) and /sim/stats figures."""
    from fairness.telemetry.metrics_parser import parse_metrics

    out = {}
    for i, sim in enumerate(p.engines):
        snap, stats = parse_metrics(sim.metrics_text(), "vllm", time.time()), sim.stats()
        out[f"sim-{i}"] = {"queries": snap.prefix_cache_queries or 0.0,
                           "hits": snap.prefix_cache_hits or 0.0,
                           "preemptions": snap.preemptions or 0.0,
                           "requests": float(stats["total_requests"]),
                           "peak_running": float(stats["peak_running"]),
                           "slipped_s": float(stats["slipped_seconds"])}
    return out


def engine_deltas(before: Mapping[str, Mapping[str, float]],
                  after: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    return {name: {k: v if k == "peak_running" else v - before[name][k] for k, v in row.items()}
            for name, row in after.items()}


async def sample_routing(redis_url: str, names: Sequence[str], out: Samples) -> None:
    """The gateway's in-flight counts per replica (what bounded load reads) every 20 ms."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        while True:
            counts = await client.hmget(_replica_counts_key(), list(names))
            out.append((load.now(), [int(c or 0) for c in counts]))
            await asyncio.sleep(0.02)
    finally:
        await client.aclose()


async def gateway_leftovers(p: Portal, names: Sequence[str]) -> dict[str, Any]:
    """Leases and routing counts still held after the last client left: both must be zero."""
    import redis.asyncio

    leases = await load.admission_settled(p.redis_url, "gp", timeout=5.0)
    client = redis.asyncio.Redis.from_url(p.redis_url)
    try:
        counts = await client.hmget(_replica_counts_key(), list(names))
    finally:
        await client.aclose()
    return {"leases": leases, "routing_in_flight": {n: int(c or 0) for n, c in zip(names, counts, strict=True)}}


def _replica_counts_key() -> str:
    from fairness.store import keyspace

    return keyspace.ADMISSION_NAMESPACE + keyspace.ADMISSION_IN_FLIGHT_BY_REPLICA


def cpu_seconds(p: Portal) -> dict[str, float]:
    """CPU time so far of this client, the gateways and the engines (Linux /proc)."""
    pids = {"client": os.getpid(), **{f"gateway{i}": g.process.pid for i, g in enumerate(p.gateways)},
            **{f"sim-{i}": e.pid for i, e in enumerate(p.engines)}}
    out = {}
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        out[name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def host_use(p: Portal, before: Mapping[str, float], wall: float) -> dict[str, float]:
    """CPU seconds per wall second since ``before`` (a gateway near 1.0 measures its own
    saturation, not its routing), and the host's load average (other work on the box)."""
    use = {name: (v - before[name]) / wall for name, v in cpu_seconds(p).items()}
    return {**use, "load_average_1m": os.getloadavg()[0], "cpus": float(os.cpu_count() or 0),
            "wall_s": wall}


# -- measures -----------------------------------------------------------------------------------


def cache(run: Run) -> dict[str, Any]:
    queries = sum(e["queries"] for e in run.engines.values())
    hits = sum(e["hits"] for e in run.engines.values())
    done = [t for t in run.turns if t.done_at is not None and t.error is None]
    prompts, cacheable = sum(t.prompt_tokens for t in done), sum(t.cacheable for t in done)
    # The ceiling: every turn hits its whole previous prompt (raw hit rate can be no higher).
    return {"queries": queries, "hits": hits, "hit_rate": ratio(hits, queries),
            "computed": queries - hits, "client_prompt_tokens": prompts, "cacheable": cacheable,
            "ceiling": ratio(cacheable, prompts),
            "share_of_cacheable": ratio(hits, cacheable),
            "preemptions": sum(e["preemptions"] for e in run.engines.values())}


def ttft(run: Run) -> dict[str, Any]:
    by_turn = {k: measures.summary(t.ttft for t in run.turns if t.turn == k and t.ttft is not None)
               for k in sorted({t.turn for t in run.turns})}
    warm = measures.summary(t.ttft for t in run.turns if t.turn >= 2 and t.ttft is not None)
    headers = measures.summary(t.headers_at - t.sent for t in run.turns if t.headers_at)
    queued = measures.summary(t.queued_ms / 1000 for t in run.turns if t.queued_ms is not None)
    return {"by_turn": by_turn, "warm": warm, "headers": headers, "queued": queued}


def spread(per_replica: Mapping[str, float]) -> dict[str, float | None]:
    values = list(per_replica.values())
    mean = sum(values) / len(values) if values else 0.0
    return {"max": max(values, default=0.0), "mean": mean,
            "max_over_mean": ratio(max(values, default=0.0), mean)}


def replica_load(run: Run) -> dict[str, Any]:
    """Per replica, over the window: requests sent, peak and time-averaged requests in flight
    (client side: from send to the end of the stream, or the window's end)."""
    names = sorted(run.engines)
    width = run.t1 - run.t0
    spans: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for t in run.turns:
        a, b = max(t.sent, run.t0), min(t.done_at or run.t1, run.t1)
        if t.replica in spans and b > a:
            spans[t.replica].append((a, b))
    requests = {n: float(sum(1 for t in run.turns if t.replica == n and run.t0 <= t.sent < run.t1))
                for n in names}
    peak = {n: float(measures.peak_concurrency(s)) for n, s in spans.items()}
    mean = {n: sum(b - a for a, b in s) / width for n, s in spans.items()}
    return {"requests": requests, "peak": peak, "in_flight": mean,
            "requests_spread": spread(requests), "peak_spread": spread(peak),
            "in_flight_spread": spread(mean)}


def moved(run: Run) -> int:
    """Turns after the first that ran on another replica than their conversation's last turn."""
    last: dict[str, str] = {}
    count = 0
    for t in sorted(run.turns, key=lambda t: (t.conversation, t.turn)):
        if t.turn > 1 and last.get(t.conversation) not in (None, t.replica):
            count += 1
        last[t.conversation] = t.replica
    return count


def gateway_view(run: Run) -> dict[str, Any] | None:
    """The gateway's own counts over the window (a check on the client's): mean and peak per
    replica."""
    rows = [c for t, c in run.routing if run.t0 <= t < run.t1]
    if not rows:
        return None
    names = sorted(run.engines)
    mean = {name: sum(c[i] for c in rows) / len(rows) for i, name in enumerate(names)}
    return {"samples": len(rows), "in_flight": mean, "in_flight_spread": spread(mean),
            "peak": {name: max(c[i] for c in rows) for i, name in enumerate(names)}}


def off_favourite(run: Run, epsilon: float) -> dict[str, Any]:
    """Turns not sent to their rendezvous favourite, by turn, and the client's view of the load
    when they were sent: did the bound (rather than health or a race) move them?"""
    off = [t for t in run.turns if t.favourite and t.replica != t.favourite]
    n = len(run.engines)
    bound = [t for t in off if t.favourite_at_send + 1
             > math.ceil((1 + epsilon) * (t.total_at_send + 1) / n - 1e-9)]
    return {"count": len(off), "by_turn": dict(sorted(Counter(t.turn for t in off).items())),
            "over_bound_at_send": len(bound),
            "favourite_busy": measures.summary(float(t.favourite_at_send) for t in off),
            "total_in_flight": measures.summary(float(t.total_at_send) for t in off)}


def summarize(run: Run, epsilon: float) -> dict[str, Any]:
    """Everything the tables, targets and JSON use. Load figures cover the measured window;
    cache and TTFT figures the whole run (a skewed run's warm-up included)."""
    hot = Counter(t.replica for t in run.turns if t.conversation.startswith("hot-"))
    return {"cache": cache(run), "ttft": ttft(run), "load": replica_load(run),
            "moved_turns": moved(run), "turns": len(run.turns),
            "off_favourite": off_favourite(run, epsilon), "gateway_view": gateway_view(run),
            "errors": [t.error for t in run.turns if t.error][:5],
            "error_count": sum(1 for t in run.turns if t.error),
            "hot_turns_by_replica": dict(hot), "engines": run.engines,
            "gateway_leftovers": run.gateway, "window_s": run.t1 - run.t0, "host": run.host,
            "gateway_cpu_ms_per_request": gateway_cpu_ms(run), "burst": run.burst}


def gateway_cpu_ms(run: Run) -> float | None:
    """The gateway's CPU time per request it handled: its cost, apart from the engines'."""
    if "gateway0" not in run.host:
        return None
    return ratio(1000 * run.host["gateway0"] * run.host["wall_s"], len(run.turns))


def targets(results: dict[str, Any], epsilon: float) -> list[report.Target]:
    main, skew = results["main"], results["skewed"]

    def share(label: str) -> str:
        return report.fmt(main[label]["cache"]["share_of_cacheable"]) if label in main else "-"

    def warm_p50(label: str) -> float | None:
        return main[label]["ttft"]["warm"]["p50"] if label in main else None

    def faster(label: str) -> float | None:
        return ratio(warm_p50("round-robin"), warm_p50(label))

    def busiest(label: str) -> float | None:
        return skew[label]["load"]["in_flight_spread"]["max_over_mean"] if label in skew else None

    ours = main.get("ours", {}).get("cache", {})
    return [
        report.target("ours: prefix-cache hits / cacheable prompt tokens",
                      ours.get("share_of_cacheable"), ">=", 0.9, "",
                      f"raw {report.fmt(ours.get('hit_rate'))} of a ceiling "
                      f"{report.fmt(ours.get('ceiling'))}; round-robin {share('round-robin')}, "
                      f"rendezvous {share('rendezvous')}, unbounded {share('ours-unbounded')}"),
        report.target("TTFT p50, turns >= 2: round-robin / ours", faster("ours"), ">=", 3.0, "x",
                      f"least-loaded {report.fmt(faster('least-loaded'))}x, rendezvous "
                      f"{report.fmt(faster('rendezvous'))}x, unbounded "
                      f"{report.fmt(faster('ours-unbounded'))}x"),
        report.target("skewed, ours: busiest replica / mean (time-averaged in flight)",
                      busiest("ours"), "<=", 1 + epsilon, "x",
                      f"pure rendezvous: {report.fmt(busiest('rendezvous'))}x"),
    ]


# -- tables and the figure ----------------------------------------------------------------------

COLOURS = {"round-robin": "tab:red", "least-loaded": "tab:orange", "rendezvous": "tab:purple",
           "ours": "tab:blue", "ours-unbounded": "tab:cyan"}


def print_tables(results: dict[str, Any]) -> None:
    main, skew = results["main"], results["skewed"]
    if main:
        _print_main(main)
        print()
        _print_replicas(main)
        print()
        _print_turns(main)
        print()
        _print_moves(main, "main")
    if skew:
        print()
        _print_skew(skew, results["config"]["epsilon"])
        print()
        _print_moves(skew, "skewed")
        _print_bursts(skew, results["config"]["epsilon"])


def _print_main(main: dict[str, Any]) -> None:
    base = main.get("round-robin")
    rows = []
    for label, s in main.items():
        c, w, ld, host = s["cache"], s["ttft"]["warm"], s["load"], s["host"]
        rows.append([
            label, c["hit_rate"], c["ceiling"], c["share_of_cacheable"], int(c["computed"]),
            base and ratio(c["computed"], base["cache"]["computed"]), w["p50"], w["p95"],
            base and ratio(base["ttft"]["warm"]["p50"], w["p50"]), s["ttft"]["headers"]["p50"],
            ld["requests_spread"]["max_over_mean"], ld["peak_spread"]["max"], s["moved_turns"],
            s["off_favourite"]["count"], int(c["preemptions"]), s["error_count"],
            host.get("gateway0"), s["gateway_cpu_ms_per_request"], host["load_average_1m"],
        ])
    print(report.table(
        ["strategy", "hit rate", "ceiling", "hits/cacheable", "prompt tok computed", "x RR",
         "TTFT p50 t>=2", "p95", "RR/this", "headers p50", "req max/mean", "peak max",
         "moved", "off fav", "preempt", "errors", "gw CPU", "gw CPU ms/req", "load avg"], rows,
        title="Main run: 32 conversations x 8 turns, fresh engines per strategy (times in s; "
              "ceiling = every turn hits its whole previous prompt)"))


def _print_replicas(main: dict[str, Any]) -> None:
    rows = []
    for label, s in main.items():
        ld = s["load"]
        for name in sorted(ld["requests"]):
            e = s["engines"][name]
            rows.append([label, name, int(ld["requests"][name]), int(ld["peak"][name]),
                         ld["in_flight"][name], int(e["peak_running"]),
                         ratio(e["hits"], e["queries"]), e["slipped_s"]])
    print(report.table(["strategy", "replica", "requests", "peak in flight", "mean in flight",
                        "engine peak running", "hit rate", "engine slipped s"], rows,
                       title="Per replica (in flight: client side, send to end of stream)"))


def _print_moves(runs: dict[str, Any], title: str) -> None:
    for label, s in runs.items():
        off = s["off_favourite"]
        if not label.startswith("ours") or not off["count"]:
            continue
        print(f"{title} / {label}: {off['count']} of {s['turns']} turns off their rendezvous "
              f"favourite (by turn {off['by_turn']}); {off['over_bound_at_send']} sent while the "
              f"client's own counts put the favourite over the bound; at send the favourite had "
              f"p50 {report.fmt(off['favourite_busy']['p50'])} requests in flight (of "
              f"p50 {report.fmt(off['total_in_flight']['p50'])} in all)")


def _print_bursts(skew: dict[str, Any], epsilon: float) -> None:
    for label, s in skew.items():
        if s["burst"]:
            n, k = sum(s["burst"].values()), len(s["engines"])
            print(f"skewed / {label}: {n} simultaneous requests on one X-Session-ID at the idle "
                  f"gateway went {s['burst']}; one at a time, bounded load would put at most "
                  f"{math.ceil((1 + epsilon) * n / k - 1e-9)} on one replica")


def _print_turns(main: dict[str, Any]) -> None:
    turns = sorted({int(k) for s in main.values() for k in s["ttft"]["by_turn"]})
    rows = []
    for q in ("p50", "p95"):
        for label, s in main.items():
            by = s["ttft"]["by_turn"]
            rows.append([f"{label} {q}", *(by.get(k, by.get(str(k), {})).get(q) for k in turns)])
    print(report.table(["TTFT (s)", *(f"turn {k}" for k in turns)], rows, title="TTFT by turn"))


def _print_skew(skew: dict[str, Any], epsilon: float) -> None:
    rows = []
    for label, s in skew.items():
        ld, gw = s["load"], s["gateway_view"]
        rows.append([
            label, ld["in_flight_spread"]["max_over_mean"],
            " ".join(f"{n}:{v:.1f}" for n, v in sorted(ld["in_flight"].items())),
            ld["peak_spread"]["max"], ld["requests_spread"]["max_over_mean"],
            gw and gw["in_flight_spread"]["max_over_mean"], gw and max(gw["peak"].values()),
            s["cache"]["hit_rate"], s["cache"]["share_of_cacheable"], s["ttft"]["warm"]["p50"],
            s["ttft"]["warm"]["p95"], s["ttft"]["headers"]["p50"], s["error_count"],
            s["host"].get("gateway0"),
        ])
    print(report.table(
        ["strategy", "busiest/mean", "mean in flight per replica", "peak", "req max/mean",
         "gw count: busiest/mean", "gw peak", "hit rate", "hits/cacheable", "TTFT p50 t>=2",
         "p95", "headers p50", "errors", "gw CPU"], rows,
        title=f"Skewed run: 20 of 36 closed-loop streams share one X-Session-ID (1 + e = "
              f"{1 + epsilon:g}; times in s)"))


def plot(results: dict[str, Any], name: str) -> Path:
    fig, axes = report.figure(2, 2)
    by_turn, hits, replicas, skewed = axes[0][0], axes[0][1], axes[1][0], axes[1][1]
    main, skew = results["main"], results["skewed"]
    for label, s in main.items():
        turns = sorted(s["ttft"]["by_turn"], key=int)
        p50 = [s["ttft"]["by_turn"][k]["p50"] for k in turns]
        p95 = [s["ttft"]["by_turn"][k]["p95"] for k in turns]
        xs = [int(k) for k in turns]
        by_turn.plot(xs, p50, marker="o", color=COLOURS[label], label=f"{label} p50")
        by_turn.plot(xs, p95, linestyle="--", color=COLOURS[label], label=f"{label} p95")
    by_turn.set_yscale("log")
    by_turn.set(title="TTFT by turn (client side)", xlabel="turn", ylabel="TTFT (s)")
    by_turn.legend(fontsize=7)

    labels = list(main)
    if labels:
        xs = range(len(labels))
        hits.bar(xs, [main[k]["cache"]["hit_rate"] or 0 for k in labels],
                 color=[COLOURS[k] for k in labels])
        ceiling = main[labels[0]]["cache"]["ceiling"]
        if ceiling:
            hits.axhline(ceiling, color="black", linestyle="--", label="workload ceiling")
            hits.legend(fontsize=8)
        hits.set_xticks(list(xs), labels)
    hits.set_ylim(0, 1)
    hits.set(title="Prefix-cache hit rate (engine /metrics)", ylabel="hits / queries")

    _grouped(replicas, {k: s["load"]["requests"] for k, s in main.items()})
    replicas.set(title="Main run: requests per replica", ylabel="requests")
    _grouped(skewed, {k: s["load"]["in_flight"] for k, s in skew.items()})
    if skew:
        mean = next(iter(skew.values()))["load"]["in_flight_spread"]["mean"]
        eps = results["config"]["epsilon"]
        skewed.axhline(mean, color="black", linestyle=":", label="mean")
        skewed.axhline(mean * (1 + eps), color="black", linestyle="--", label=f"(1+{eps:g}) mean")
        skewed.legend(fontsize=8)
    skewed.set(title="Skewed run: mean requests in flight per replica", ylabel="in flight")
    return report.save_figure(fig, name)


def _grouped(ax: Any, series: dict[str, dict[str, float]]) -> None:
    if not series:
        return
    width = 0.8 / max(1, len(series))
    names = sorted({n for per in series.values() for n in per})
    for i, (label, per) in enumerate(series.items()):
        ax.bar([j + i * width for j in range(len(names))], [per.get(n, 0) for n in names],
               width=width, color=COLOURS.get(label), label=label)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(names))], names)
    ax.legend(fontsize=8)
