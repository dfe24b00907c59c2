"""Figures for bench/overhead.py: windows pooled per system and concurrency, "added" figures
against the direct baseline of the same run, the targets, and the printed tables."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from bench.measures import percentile, ratio, summary
from bench.overhead_client import PhaseResult, hist_percentile
from bench.report import Target, fmt, table, target

QS = (50, 90, 99, 99.9)
MB = 1024 * 1024


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def _per_1k(cpu: float, completed: int) -> float | None:
    return 1000.0 * cpu / completed if completed else None


def pool(outs: Sequence[dict[str, Any]], workers: int) -> dict[str, Any]:
    """Windows of one system at one concurrency, as one sample."""
    total = PhaseResult()
    seconds = 0.0
    cpu: Counter[str] = Counter()
    redis: Counter[str] = Counter()
    rss_peak = 0
    for out in outs:
        total.merge(out["result"])
        seconds += out["seconds"]
        cpu.update(out["cpu"])
        redis.update(out.get("redis", {}))
        rss_peak = max(rss_peak, out["rss_peak"])
    lat = list(total.latencies)
    rps = total.completed / seconds if seconds else 0.0
    row: dict[str, Any] = {
        "windows": len(outs), "seconds": seconds, "completed": total.completed,
        "rps": rps, "rps_per_worker": rps / workers,
        "rps_by_window": [o["result"].completed / o["seconds"] for o in outs],
        # Per round (windows are in round order for every system): what pairs two systems fairly.
        "cpu_ms_by_window": {name: [_per_1k(o["cpu"].get(name, 0.0), o["result"].completed) for o in outs]
                             for name in cpu},
        "redis_function_us_by_window": [o.get("redis", {}).get("function_usec", 0.0) / o["result"].completed
                                        if o["result"].completed else None for o in outs],
        "loadavg_by_window": [o.get("loadavg") for o in outs],
        "latency_ms": {k: _ms(v) if k != "n" else v for k, v in summary(lat).items()},
        "cpu_s_per_1k": {name: _per_1k(v, total.completed) for name, v in cpu.items()},
        "cores": {name: v / seconds for name, v in cpu.items()} if seconds else {},
        "rss_peak_mb": rss_peak / MB,
        # Redis' own account (INFO commandstats), per request completed
        "redis_function_us_per_request": redis["function_usec"] / total.completed if total.completed else None,
        "redis_commands_per_request": redis["commands"] / total.completed if total.completed else None,
        "redis_fcalls_per_request": redis["fcalls"] / total.completed if total.completed else None,
        "windows_under_a_core": sum(1 for out in outs if out.get("under_a_core")),
        "statuses": {str(k): v for k, v in sorted(total.statuses.items())},
        "non_200": sum(n for s, n in total.statuses.items() if s != 200),
        "errors": dict(total.errors),
    }
    if total.events:
        gaps_n = sum(total.gaps.values())
        row["stream"] = {
            "events_per_stream": sum(total.events) / len(total.events),
            "gap_us": {f"p{q:g}": _us(hist_percentile(total.gaps, q)) for q in QS},
            "gap_mean_us": 1e6 * total.gap_sum / gaps_n if gaps_n else None,
            "gaps_in_same_read": total.gaps.get(-1, 0) / gaps_n if gaps_n else None,
            "span_ms": {f"p{q:g}": _ms(percentile(list(total.stream_spans), q)) for q in QS},
            "ttft_ms": {f"p{q:g}": _ms(percentile(list(total.ttfts), q)) for q in QS},
        }
    return row


def _us(value: float | None) -> float | None:
    return None if value is None else value * 1e6


def pool_levels(runs: dict[str, dict[str, list[dict[str, Any]]]], systems: Sequence[Any]
                ) -> dict[str, dict[str, Any]]:
    """{concurrency: {system: pooled row}}, with "added" figures against direct."""
    workers = {s.name: s.workers for s in systems}
    levels: dict[str, dict[str, Any]] = {}
    for c, by_system in runs.items():
        rows = {name: pool(outs, workers[name]) for name, outs in by_system.items()}
        base = rows.get("direct")
        for name, row in rows.items():
            if base is None or name == "direct":
                continue
            for q in ("p50", "p95", "p99"):
                mine, theirs = row["latency_ms"][q], base["latency_ms"][q]
                row[f"added_{q}_ms"] = None if mine is None or theirs is None else mine - theirs
            # The median of the rounds' own ratios: a round's box load falls on both arms alike.
            per_round = [ratio(mine, theirs) for mine, theirs in zip(row["rps_by_window"], base["rps_by_window"],
                                                                     strict=False)]
            row["rps_vs_direct"] = _median(per_round)
            if "stream" in row and "stream" in base:
                s, b = row["stream"], base["stream"]
                for q in ("p50", "p99"):
                    mine, theirs = s["gap_us"][q], b["gap_us"][q]
                    s[f"added_gap_{q}_ms"] = (None if mine is None or theirs is None
                                              else (mine - theirs) / 1000.0)
                if s["gap_mean_us"] is not None and b["gap_mean_us"] is not None:
                    s["added_gap_mean_ms"] = (s["gap_mean_us"] - b["gap_mean_us"]) / 1000.0
                for q in ("p50", "p99"):
                    mine, theirs = s["ttft_ms"][q], b["ttft_ms"][q]
                    s[f"added_ttft_{q}_ms"] = None if mine is None or theirs is None else mine - theirs
        levels[c] = rows
    return levels


def paired_summary(result: PhaseResult, names: Sequence[str]) -> dict[str, Any]:
    """Latency of each of the systems a client called in turn (url 0, 1, ...: ``names``), and
    each one's added latency over "direct" when it is among them."""
    rows: dict[str, dict[str, Any]] = {
        name: {f"p{q:g}": _ms(percentile(list(result.by_url.get(i, ())), q)) for q in QS}
        | {"n": len(result.by_url.get(i, ()))} for i, name in enumerate(names)}
    if "direct" in rows:
        for row in rows.values():
            row["added_p50_ms"] = _difference(row["p50"], rows["direct"]["p50"])
            row["added_p99_ms"] = _difference(row["p99"], rows["direct"]["p99"])
    return {"systems": rows, "statuses": dict(result.statuses)}


PAIRED_BASELINE = "before×1"
# With --baseline, today's tree started exactly as before×1 is (its own process, database and Redis
# database, the same keys, nothing else sent to it): gateway×1's worker also serves limits×1 and
# front end keys, and so ran 1-9 % dearer than a same-code before×1 in an A/A run.
PAIRED_NOW = "now×1"


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def paired_rounds(rounds: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """Per arm, the median over rounds of its added p50 and p99; beside before×1 (when measured)
    and the plain key, the medians of the per-round differences and ratios of added latency."""
    def per_round(name: str, field: str) -> list[float | None]:
        return [r["systems"][name].get(field) for r in rounds]

    arms: dict[str, dict[str, Any]] = {}
    for name in names:
        if name == "direct":
            continue
        row: dict[str, Any] = {"n": sum(r["systems"][name]["n"] for r in rounds)}
        for q in ("p50", "p99"):
            mine = per_round(name, f"added_{q}_ms")
            row[f"added_{q}_ms"] = _median(mine)
            for other, label in ((PAIRED_BASELINE, "baseline"), ("gateway×1", "plain")):
                if other in names and other != name:
                    pairs = list(zip(mine, per_round(other, f"added_{q}_ms"), strict=True))
                    row[f"{q}_over_{label}_ms"] = _median([_difference(a, b) for a, b in pairs])
                    row[f"{q}_ratio_to_{label}"] = _median([ratio(a, b) for a, b in pairs])
        arms[name] = row
    direct = {q: _median(per_round("direct", q)) for q in ("p50", "p99")} if "direct" in names else {}
    return {"arms": arms, "direct_ms": direct, "rounds": list(rounds)}


def paired_embeddings(rounds: Sequence[dict[str, Any]], chats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """gateway×1's added latency on /v1/embeddings, and over chat's in the same round (the
    embeddings window runs right after the chat one): medians of the rounds."""
    def added(round_: dict[str, Any], q: str) -> float | None:
        return round_["systems"]["gateway×1"].get(f"added_{q}_ms")  # type: ignore[no-any-return]

    return {
        "added_p50_ms": _median([added(r, "p50") for r in rounds]),
        "added_p99_ms": _median([added(r, "p99") for r in rounds]),
        "p50_over_chat_ms": _median([_difference(added(e, "p50"), added(c, "p50"))
                                     for e, c in zip(rounds, chats, strict=True)]),
        "n": sum(r["systems"]["gateway×1"]["n"] for r in rounds),
        "rounds": list(rounds),
    }


def calibration(out: dict[str, Any], processes: int) -> dict[str, Any]:
    res: PhaseResult = out["result"]
    cores = out["cpu"].get("loadgen", 0.0) / out["seconds"]
    return {"rps": res.completed / out["seconds"], "loadgen_cores": cores,
            "loadgen_processes": processes, "engine_cores": out["cpu"]["engine"] / out["seconds"],
            "note": "the load generator is not the bottleneck while it uses well under one core "
                    "per process and this rate is several times any gateway's"}


def caps_summary(out: dict[str, Any], peak: int, cap: int, clients: int, background: int
                 ) -> dict[str, Any]:
    capped, load = out["results"]
    attempts = sum(capped.statuses.values())
    lat = list(capped.latencies)
    return {
        "cap": cap, "clients": clients, "background_clients": background,
        "seconds": out["seconds"], "completed": capped.completed,
        "rps": capped.completed / out["seconds"],
        "rejected_429": capped.statuses.get(429, 0),
        "rejected_share": capped.statuses.get(429, 0) / attempts if attempts else None,
        "other_non_200": sum(n for s, n in capped.statuses.items() if s not in (200, 429)),
        "errors": dict(capped.errors),
        "peak_in_engine": peak,
        "latency_ms": {k: _ms(v) if k != "n" else v for k, v in summary(lat).items()},
        "background_rps": load.completed / out["seconds"],
        "background_non_200": sum(n for s, n in load.statuses.items() if s != 200),
    }


def memory_summary(samples: list[dict[str, Any]], result: PhaseResult, warm: int,
                   seconds: float, cpu: float) -> dict[str, Any]:
    after = [s for s in samples if s["requests"] >= warm]
    at_warm = after[0]["rss"] if after else None
    peak_after = max((s["rss"] for s in after), default=None)
    final = samples[-1]["rss"] if samples else None
    return {
        "requests": sum(result.statuses.values()), "ok": result.statuses.get(200, 0),
        "non_200": sum(n for s, n in result.statuses.items() if s != 200),
        "errors": dict(result.errors), "seconds": seconds,
        "rps": sum(result.statuses.values()) / seconds if seconds else None,
        "cpu_s_per_1k": _per_1k(cpu, result.completed), "warmup_requests": warm,
        "rss_at_warmup_mb": None if at_warm is None else at_warm / MB,
        "rss_peak_after_warmup_mb": None if peak_after is None else peak_after / MB,
        "rss_final_mb": None if final is None else final / MB,
        "growth_after_warmup": (None if not at_warm or peak_after is None
                                else (peak_after - at_warm) / at_warm),
        "final_growth": None if not at_warm or final is None else (final - at_warm) / at_warm,
        "samples": [{"t": round(s["t"], 2), "requests": s["requests"],
                     "rss_mb": round(s["rss"] / MB, 2)} for s in samples],
    }


def _get(results: dict[str, Any], section: str, c: int, system: str) -> dict[str, Any]:
    return results.get(section, {}).get(str(c), {}).get(system, {})


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _embeddings_target(results: dict[str, Any]) -> list[Target]:
    """/v1/embeddings costs no more than a chat on the way through: one path for both."""
    embeddings = results.get("paired", {}).get("embeddings")
    if not embeddings:
        return []
    chat = results.get("paired", {}).get("arms", {}).get("gateway×1", {})
    return [target(
        "embeddings: added latency p50, c=1, over chat's (gateway×1, the same rounds)",
        embeddings.get("p50_over_chat_ms"), "<=", 0.1, " ms",
        f"embeddings +{fmt(embeddings.get('added_p50_ms'))} ms (p99 +{fmt(embeddings.get('added_p99_ms'))}), "
        f"chat +{fmt(chat.get('added_p50_ms'))} ms; median of rounds")]


def _baseline_targets(results: dict[str, Any]) -> list[Target]:
    """With --baseline: what the code since that commit adds to a request at c=1 (the fair-share
    and budget work's own target, measured from the commit before it began)."""
    arms = results.get("paired", {}).get("arms", {})
    base = arms.get(PAIRED_BASELINE)
    if not base:
        return []
    commit = results.get("baseline", {}).get("commit")
    out = []
    plain = PAIRED_NOW if PAIRED_NOW in arms else "gateway×1"
    for name, limit, what in ((plain, 0.1, "plain key"), ("front end×1", 0.2, "front end's key, a JWT each")):
        arm = arms.get(name, {})
        out.append(target(
            f"added latency p50, c=1, since {commit}: {what} ({name} − before×1, requests in turn)",
            arm.get("p50_over_baseline_ms"), "<=", limit, " ms",
            f"added p50 {fmt(arm.get('added_p50_ms'))} ms vs {fmt(base.get('added_p50_ms'))} ms "
            f"(×{fmt(arm.get('p50_ratio_to_baseline'))}); p99 {fmt(arm.get('added_p99_ms'))} vs "
            f"{fmt(base.get('added_p99_ms'))} ms; median of rounds"))
    return out


def _cpu_since_baseline(results: dict[str, Any]) -> list[Target]:
    """now×1 against before×1, per concurrency: the medians of the rounds' own ratios of gateway
    CPU and of Redis function time per request."""
    out = []
    commit = results.get("baseline", {}).get("commit")
    for c, rows in sorted(results.get("non_streaming", {}).items(), key=lambda item: int(item[0])):
        now, before = rows.get(PAIRED_NOW), rows.get(PAIRED_BASELINE)
        if not now or not before:
            continue
        cpu = _median([ratio(a, b) for a, b in zip(now["cpu_ms_by_window"].get("server", []),
                                                   before["cpu_ms_by_window"].get("server", []), strict=False)])
        redis = _median([ratio(a, b) for a, b in zip(now["redis_function_us_by_window"],
                                                     before["redis_function_us_by_window"], strict=False)])
        out.append(target(
            f"gateway CPU per request since {commit}, c={c} ({PAIRED_NOW} / {PAIRED_BASELINE}, median of rounds)",
            cpu, "<=", 1.05, "×",
            f"{fmt(_per_request_ms(now, 'server'))} vs {fmt(_per_request_ms(before, 'server'))} ms pooled; "
            f"Redis function time ×{fmt(redis)}"))
    return out


def _rounds_ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """The median of the rounds' own req/s ratios of two systems at one level."""
    return _median([ratio(x, y) for x, y in zip(a.get("rps_by_window", []), b.get("rps_by_window", []),
                                                  strict=False)])


def _per_request_ms(row: dict[str, Any], *groups: str) -> float | None:
    """CPU milliseconds per request of these process groups (CPU s per 1k requests = ms each)."""
    values = [row.get("cpu_s_per_1k", {}).get(g) for g in groups]
    return None if any(v is None for v in values) else sum(values)  # type: ignore[arg-type]


def _peer_targets(results: dict[str, Any]) -> list[Target]:
    """Redis' work per request, the gateway's CPU, and SMG beside us."""
    ours64 = _get(results, "non_streaming", 64, "gateway×1")
    smg64 = _get(results, "non_streaming", 64, "smg×1")
    arms = results.get("paired", {}).get("arms", {})
    ours_cpu, smg_cpu = _per_request_ms(ours64, "server", "redis"), _per_request_ms(smg64, "server")
    flagged = results.get("windows_under_a_core", [])
    return [
        # Informational here: Redis shares the gateway's core, and INFO commandstats counts the
        # time the gateway took it from within a call. bench.redis_ceiling holds the target.
        target("  (info) Redis time in admission's functions per request, c=64 (gateway×1, INFO commandstats)",
               _ms(ours64["redis_function_us_per_request"] / 1e6)
               if ours64.get("redis_function_us_per_request") is not None else None, ">=", 0.0, " ms",
               f"{fmt(ours64.get('redis_fcalls_per_request'))} function calls and "
               f"{fmt(ours64.get('redis_commands_per_request'))} commands in all per request; the Redis "
               f"process's CPU {fmt(_per_request_ms(ours64, 'redis'))} ms; Redis on the gateway's core "
               "(bench.redis_ceiling measures it on a core of its own)"),
        target("gateway + Redis CPU per request, c=64 (gateway×1)", ours_cpu, "<=", 0.4, " ms",
               f"SMG {fmt(smg_cpu)} ms; gateway {fmt(_per_request_ms(ours64, 'server'))}, "
               f"Redis {fmt(_per_request_ms(ours64, 'redis'))}"),
        target("added latency p50, c=1, requests in turn (gateway×1 − direct)",
               arms.get("gateway×1", {}).get("added_p50_ms"), "<=", 0.5, " ms",
               f"SMG {fmt(arms.get('smg×1', {}).get('added_p50_ms'))} ms; p99 "
               f"{fmt(arms.get('gateway×1', {}).get('added_p99_ms'))} vs SMG "
               f"{fmt(arms.get('smg×1', {}).get('added_p99_ms'))} ms; median of rounds"),
        target("  (info) req/s at c=64: gateway×1 / smg×1, one core each",
               _rounds_ratio(ours64, smg64), ">=", 0.0, "×",
               f"{fmt(ours64.get('rps'))} vs {fmt(smg64.get('rps'))} req/s; vs direct "
               f"{fmt(ours64.get('rps_vs_direct'))} and {fmt(smg64.get('rps_vs_direct'))}"),
        target("  (info) windows at c>=16 whose proxy got under 0.9 of a core", float(len(flagged)), ">=", 0.0,
               "", "; ".join(flagged[:6]) + (" ..." if len(flagged) > 6 else "") or "none"),
    ]


def targets(results: dict[str, Any]) -> list[Target]:
    ours1 = _get(results, "non_streaming", 1, "gateway×1")
    limits1 = _get(results, "non_streaming", 1, "limits×1")
    direct1 = _get(results, "non_streaming", 1, "direct")
    base = (f"direct p50 {fmt(direct1.get('latency_ms', {}).get('p50'))} ms, "
            f"p99 {fmt(direct1.get('latency_ms', {}).get('p99'))} ms")
    ours64 = _get(results, "non_streaming", 64, "gateway×1")
    two64 = _get(results, "non_streaming", 64, "gateway×2")
    ll64 = _get(results, "non_streaming", 64, "litellm×1")
    st = _get(results, "streaming", 1, "gateway×1").get("stream", {})
    st_direct = _get(results, "streaming", 1, "direct").get("stream", {})
    caps = results.get("caps", {}).get("gateway×1", {})
    mem = results.get("memory", {})
    return [
        target("added latency p50, c=1 (gateway×1 − direct)", ours1.get("added_p50_ms"), "<=", 2.0,
               " ms", base),
        target("added latency p99, c=1 (gateway×1 − direct)", ours1.get("added_p99_ms"), "<=", 6.0,
               " ms", base),
        target("budget + rate limits + model list: added latency p50, c=1 (limits×1 − gateway×1)",
               _difference(limits1.get("latency_ms", {}).get("p50"), ours1.get("latency_ms", {}).get("p50")),
               "<=", 0.1, " ms", f"gateway×1 p50 {fmt(ours1.get('latency_ms', {}).get('p50'))} ms"),
        *_embeddings_target(results),
        *_baseline_targets(results),
        *_cpu_since_baseline(results),
        *_peer_targets(results),
        target("req/s per worker at c=64: gateway×1 / litellm×1 (median of rounds)",
               _rounds_ratio(ours64, ll64), ">=", 5.0, "×",
               f"{fmt(ours64.get('rps_per_worker'))} vs {fmt(ll64.get('rps_per_worker'))} req/s; "
               f"gateway×2 {fmt(two64.get('rps_per_worker'))} per worker"),
        target("streaming: added inter-chunk delay p99, c=1", st.get("added_gap_p99_ms"), "<=",
               1.0, " ms", f"direct gap p99 {fmt(st_direct.get('gap_us', {}).get('p99'))} µs"),
        target(f"cap {caps.get('cap')} holds under load: peak in engine", caps.get("peak_in_engine"),
               "<=", float(caps.get("cap") or 0), "",
               f"{caps.get('clients')} clients of the key + {caps.get('background_clients')} others"),
        target("capped key queued, not rejected: 429s", caps.get("rejected_429"), "<=", 0.0, "",
               f"LiteLLM: {results.get('caps', {}).get('litellm×1', {}).get('rejected_429')} 429s"),
        target("RSS growth after warm-up (one worker)",
               None if mem.get("growth_after_warmup") is None else 100 * mem["growth_after_warmup"],
               "<=", 10.0, " %",
               f"{fmt(mem.get('requests'))} requests, {fmt(mem.get('rss_at_warmup_mb'))} MB at "
               f"{fmt(mem.get('warmup_requests'))}"),
    ]


def tables(results: dict[str, Any]) -> str:
    out = []
    ll_cpu = {c: rows.get("litellm×1", {}).get("cpu_s_per_1k", {}).get("server")
              for c, rows in results.get("non_streaming", {}).items()}
    rows = []
    for c, by_system in results.get("non_streaming", {}).items():
        for name, r in by_system.items():
            cpu = r["cpu_s_per_1k"].get("server")
            rows.append((c, name, r["rps"], r.get("rps_vs_direct"), r["rps_per_worker"],
                         r["latency_ms"]["p50"], r["latency_ms"]["p99"], r.get("added_p50_ms"),
                         r.get("added_p99_ms"), cpu,
                         None if name == "direct" else ratio(cpu, ll_cpu.get(c)),
                         r["cpu_s_per_1k"].get("redis"), r.get("redis_function_us_per_request"),
                         r.get("redis_commands_per_request"), r["rss_peak_mb"],
                         r["non_200"] + sum(r["errors"].values()), r.get("windows_under_a_core") or None))
    out.append(table(["c", "system", "req/s", "×direct", "req/s/worker", "p50 ms", "p99 ms",
                      "+p50 ms", "+p99 ms", "CPU s/1k", "×litellm CPU", "redis s/1k", "redis fn µs/req",
                      "redis cmds/req", "peak RSS MB", "failed", "<0.9 core"], rows,
                     title="Non-streaming chats (16 tokens); CPU = the system's own processes "
                           "(direct: the engine)"))
    out.append(_stream_table(results.get("streaming", {}),
                             "Streamed chats (256 chunks, enginesim --instant: the whole stream "
                             "in one write); gap = time between SSE events at the client"))
    out.append(_stream_table(results.get("paced_streaming", {}),
                             "Paced streams (timed enginesim, ~10 ms per token): chunks arrive "
                             "one by one"))
    rows = []
    for name, r in results.get("caps", {}).items():
        rows.append((name, r["cap"], r["clients"], r["rps"], r["rejected_429"], r["rejected_share"],
                     r["peak_in_engine"], r["latency_ms"]["p50"], r["latency_ms"]["p99"],
                     r["background_rps"], r["other_non_200"] + sum(r["errors"].values())))
    out.append(table(["system", "cap", "clients", "done/s", "429s", "429 share", "peak in engine",
                      "p50 ms", "p99 ms", "others' req/s", "other failures"], rows,
                     title="Per-key cap under load (ours queues; LiteLLM rejects)"))
    out.append(paired_table(results.get("paired", {})))
    mem = results.get("memory")
    if mem:
        out.append(
            f"Memory: {fmt(mem['requests'])} requests ({fmt(mem['rps'])}/s, {mem['non_200']} non-200) "
            f"through one worker: RSS {fmt(mem['rss_at_warmup_mb'])} MB after "
            f"{fmt(mem['warmup_requests'])}, peak {fmt(mem['rss_peak_after_warmup_mb'])} MB, "
            f"final {fmt(mem['rss_final_mb'])} MB (growth "
            f"{fmt(100 * (mem['growth_after_warmup'] or 0))} %)")
    out.append(profile_tables(results.get("profile")))
    return "\n\n".join(o for o in out if o)


def paired_table(paired: dict[str, Any]) -> str:
    arms = paired.get("arms", {})
    rows = [(name, a["n"], a["added_p50_ms"], a["added_p99_ms"], a.get("p50_over_baseline_ms"),
             a.get("p50_ratio_to_baseline"), a.get("p99_over_baseline_ms"), a.get("p99_ratio_to_baseline"),
             a.get("p50_over_plain_ms"), a.get("p99_over_plain_ms")) for name, a in arms.items()]
    if not rows:
        return ""
    direct = paired.get("direct_ms", {})
    return table(["arm", "requests", "+p50 ms", "+p99 ms", "p50 − before ms", "×before p50", "p99 − before ms",
                  "×before p99", "p50 − plain ms", "p99 − plain ms"], rows,
                 title=f"Paired at c=1, requests in turn (+: over direct, p50 {fmt(direct.get('p50'))} ms, "
                       f"p99 {fmt(direct.get('p99'))} ms); medians of {len(paired.get('rounds', []))} rounds")


def _stream_table(levels: dict[str, dict[str, Any]], title: str) -> str:
    rows = []
    for c, by_system in levels.items():
        for name, r in by_system.items():
            s = r.get("stream", {})
            rows.append((c, name, r["rps"], r.get("rps_vs_direct"), s.get("events_per_stream"),
                         s.get("gap_us", {}).get("p50"), s.get("gap_us", {}).get("p99"),
                         s.get("gap_mean_us"), s.get("added_gap_p99_ms"),
                         s.get("added_gap_mean_ms"), s.get("ttft_ms", {}).get("p50"),
                         s.get("added_ttft_p99_ms"), r["cpu_s_per_1k"].get("server"),
                         r["non_200"] + sum(r["errors"].values())))
    if not rows:
        return ""
    return table(["c", "system", "streams/s", "×direct", "events", "gap p50 µs", "gap p99 µs",
                  "gap mean µs", "+gap p99 ms", "+gap mean ms", "TTFT p50 ms", "+TTFT p99 ms",
                  "CPU s/1k", "failed"], rows, title=title)


def profile_tables(prof: dict[str, Any] | None) -> str:
    if not prof:
        return ""
    if "loop" not in prof:
        return f"Profile failed: {prof.get('error')}"
    loop, others = prof["loop"], prof["other_threads"]
    out = [
        f"Profile: {prof['system']} at c={prof['concurrency']} for {prof['seconds']} s "
        f"({fmt(prof['rps_while_sampled'])} req/s while sampled). Event-loop thread busy "
        f"{fmt(loop['busy_percent'])} % of wall time; other threads together "
        f"{fmt(others['busy_percent'])} % ("
        + ", ".join(f"{n} threads named {kind}" for kind, n in prof["thread_kinds_seen"].items()
                    if kind != "MainThread")
        + "). Shares below: % of the loop thread's wall time.",
        table(["our functions (inclusive)", "% loop"],
              [(i["name"], i["percent"]) for i in loop["project_inclusive"][:12]]),
        table(["function (inclusive)", "% loop"],
              [(i["name"], i["percent"]) for i in loop["inclusive"][:20]]),
        table(["function (self)", "% loop"], [(i["name"], i["percent"]) for i in loop["self"][:15]]),
        table(["package (self)", "% loop"],
              [(i["name"], i["percent"]) for i in loop["packages_self"][:12]]),
        table(["other threads: function (self)", "% wall"],
              [(i["name"], i["percent"]) for i in others["self"][:8]]),
    ]
    return "\n\n".join(out)
