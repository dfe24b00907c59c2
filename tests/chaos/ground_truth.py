"""Judging a chaos run from the ground truth: the engines' own request logs, the clients' outcomes
and the usage records in the database.

Which answers are allowed, and when (anything else is a failure, and a 500 always is):

- 200 with a whole answer, at any time; an abandoned call, whatever came back before;
- 429 (a queue limit), at any time;
- 503 `store_unavailable` for a call in flight between Redis going away and `recovery_limit`
  (2 s) after it answers PING again;
- 503 `no_healthy_replica`, 502 and 504 (and a stream cut off by an error event) for a call in
  flight while a replica was dead, until 3 s after it answers again (the health probe's interval
  and cool-down: the gateways must notice);
- no answer at all (refused, reset) or a stream ended early, for a call in flight on a gateway
  that was SIGKILLed, until 1 s after its restart; a stream ended early by a Redis outage.

A cap (a replica's `max_num_seqs`, a key's concurrency, the batch tier's pool) may be exceeded
only for `allowance` (250 ms): the time an engine takes to drop a request whose client has left,
so that the next one, admitted as the lease is released, may arrive before the old one is gone.
enginesim drops it within one event-loop turn; vLLM within one scheduler step (tens of ms).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tests.chaos import scenario as kinds
from tests.chaos.clients import Outcome
from tests.chaos.run import Evidence, Window
from tests.chaos.scenario import Scenario

GATEWAY_MARGIN = 1.0
REPLICA_MARGIN = 3.0


@dataclass
class Episode:
    level: str  # "replica chaos-0", "key i3", "pool batch"
    start: float  # seconds after the load began
    seconds: float
    peak: int
    cap: int
    during: str  # the fault window it began in, or "calm"


@dataclass
class Report:
    seed: int
    figures: dict[str, Any] = field(default_factory=dict)
    statuses: dict[str, dict[str, int]] = field(default_factory=dict)  # window kind -> label -> count
    episodes: list[Episode] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def judge(scenario: Scenario, evidence: Evidence) -> Report:
    report = Report(seed=scenario.seed)
    t0 = evidence.started
    _judge_outcomes(scenario, evidence, report)
    _judge_caps(scenario, evidence, report)
    _judge_recovery(scenario, evidence, report)
    fill = None if evidence.fill_full_at is None else evidence.fill_full_at - evidence.load_ended
    report.figures["slots all usable after load end (s)"] = fill
    if fill is None or fill > scenario.lease_ttl + 2.0:
        report.failures.append(
            f"not every slot usable one lease TTL ({scenario.lease_ttl} s) + 2 s after the load ended: "
            + ("never within the watch" if fill is None else f"after {fill:.2f} s"))
    missing = len(evidence.usage_missing)
    report.figures["usage records missing"] = missing
    if missing:
        report.failures.append(f"{missing} completed requests have no usage record, e.g. "
                               f"{evidence.usage_missing[:3]}")
    report.figures["unexpected errors in the gateways' logs"] = evidence.gateway_unexpected_errors
    report.figures["wall time (s)"] = evidence.wall_seconds
    report.figures["load duration (s)"] = evidence.load_ended - t0
    return report


def _overlaps(out: Outcome, start: float, end: float) -> bool:
    return out.sent_at <= end and (out.ended_at or math.inf) >= start


def _window_end(window: Window, scenario: Scenario) -> float:
    margin = {kinds.GATEWAY_KILL: GATEWAY_MARGIN, kinds.REPLICA_KILL: REPLICA_MARGIN}.get(
        window.kind, scenario.recovery_limit)
    return (window.ready or math.inf) + margin


def _label(out: Outcome) -> str:
    if out.hung:
        return "hung"
    if out.abandoned:
        return f"abandoned {out.abandoned}"
    if out.completed:
        return "200"
    if out.status is None:
        return f"no answer ({out.error or '?'})"
    if out.status == 200:
        return f"200 cut ({out.code or out.error or 'ended early'})"
    return f"{out.status} {out.code}".strip()


def _excuse(out: Outcome, label: str, windows: list[Window], scenario: Scenario) -> str | None:
    """"" for an answer allowed at any time, the fault window that allows it, or None: a failure."""
    if label == "200" or label.startswith("abandoned") or out.status == 429:
        return ""
    if label == "hung" or out.status == 500:
        return None
    for window in windows:
        end = _window_end(window, scenario)
        if window.kind in kinds.REDIS_FAULTS:
            # Sent just before Redis went, it may need Redis (to be admitted) only once it is gone.
            if out.status == 503 and out.code == "store_unavailable" and _overlaps(out, window.start, end):
                return window.kind
            if out.status == 200 and _overlaps(out, window.start, end):
                return window.kind  # a stream ended by the outage
        elif window.kind == kinds.REPLICA_KILL:
            elsewhere = out.replica not in ("", f"chaos-{window.target}")
            if out.status in (502, 503, 504, 200) and not elsewhere and _overlaps(out, window.start, end):
                return window.kind
        elif (window.kind == kinds.GATEWAY_KILL and out.gateway == window.target
              and out.status in (None, 200) and _overlaps(out, window.start, end)):
            return window.kind
    return None


def _during(moment: float, windows: list[Window], scenario: Scenario) -> str:
    for window in windows:
        if window.start <= moment <= _window_end(window, scenario):
            return window.kind
    return "calm"


def _judge_outcomes(scenario: Scenario, evidence: Evidence, report: Report) -> None:
    windows, t0 = evidence.windows, evidence.started
    statuses: dict[str, Counter[str]] = defaultdict(Counter)
    bad: Counter[str] = Counter()
    excused: Counter[str] = Counter()
    examples: dict[str, Outcome] = {}
    for out in evidence.outcomes:
        label = _label(out)
        statuses[_during(out.sent_at, windows, scenario)][label] += 1
        excuse = _excuse(out, label, windows, scenario)
        if excuse is None:
            bad[label] += 1
            examples.setdefault(label, out)
        elif excuse:
            excused[excuse] += 1
    report.statuses = {kind: dict(counter) for kind, counter in statuses.items()}
    for label, count in bad.items():
        out = examples[label]
        report.failures.append(
            f"{count} × {label} outside any fault window that allows it (first: {out.kind} #{out.index} via "
            f"gateway {out.gateway}, {'SDK' if out.sdk else 'raw HTTP'}, {'stream' if out.stream else 'whole'}, "
            f"sent at t={out.sent_at - t0:.2f} s, "
            + ("no headers" if out.headers_at is None else
               f"headers at t={out.headers_at - t0:.2f} s, {out.chunks} chunks")
            + (f", ended at t={out.ended_at - t0:.2f} s" if out.ended_at is not None else "")
            + (f" ({out.error_detail})" if out.error_detail else "")
            + f", replica {out.replica or '-'}, request id {out.request_id or '-'})")
    for kind in sorted(excused):
        report.figures[f"failed calls excused by {kind}"] = excused[kind]
    load = [o for o in evidence.outcomes if o.kind == "load"]
    latencies = sorted((o.ended_at or 0) - o.sent_at for o in load if o.completed)
    report.figures.update({
        "requests": len(load),
        "completed": sum(o.completed for o in load),
        "completed via the openai SDK / raw HTTP": f"{sum(o.completed and o.sdk for o in load)} / "
                                                   f"{sum(o.completed and not o.sdk for o in load)}",
        "abandoned while queued": sum(o.abandoned == "queued" for o in load),
        "abandoned mid-stream": sum(o.abandoned == "stream" for o in load),
        "other calls (long, burst, probe, fill)": len(evidence.outcomes) - len(load),
        "HTTP 500": sum(o.status == 500 for o in evidence.outcomes),
        "hung": sum(o.hung for o in evidence.outcomes),
        "latency p50 (s)": _percentile(latencies, 50),
        "latency p95 (s)": _percentile(latencies, 95),
    })


def _percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def over_cap(intervals: list[tuple[float, float]], cap: int) -> list[tuple[float, float, int]]:
    """(start, end, peak) of every stretch where more than `cap` intervals overlap."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])  # ends first at a tie
    stretches = []
    count, since, peak = 0, 0.0, 0
    for moment, delta in events:
        before = count
        count += delta
        if count > cap >= before:
            since, peak = moment, count
        elif count > cap:
            peak = max(peak, count)
        elif before > cap >= count:
            stretches.append((since, moment, peak))
    return stretches


def _judge_caps(scenario: Scenario, evidence: Evidence, report: Report) -> None:
    tiers = scenario.key_tiers()
    by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
    pool: list[tuple[float, float]] = []
    levels: dict[str, tuple[list[tuple[float, float]], int]] = {}
    for replica, log in evidence.engine_logs.items():
        spans = [(e["arrived"], e["ended"]) for e in log]
        levels[f"replica {replica}"] = (spans, scenario.max_num_seqs)
        for entry in log:
            by_key[entry["user"]].append((entry["arrived"], entry["ended"]))
            if tiers.get(entry["user"]) == "batch":
                pool.append((entry["arrived"], entry["ended"]))
    for key, spans in by_key.items():
        levels[f"key {key}"] = (spans, scenario.per_key_cap)
    levels["pool batch"] = (pool, scenario.pool_cap)
    for level, (spans, cap) in levels.items():
        for start, end, peak in over_cap(spans, cap):
            report.episodes.append(Episode(level, start - evidence.started, end - start, peak, cap,
                                           _during(start, evidence.windows, scenario)))
    report.episodes.sort(key=lambda e: -e.seconds)
    for prefix in ("replica", "key", "pool"):
        worst = next((e for e in report.episodes if e.level.startswith(prefix)), None)
        report.figures[f"worst over-cap, {prefix} (s)"] = worst.seconds if worst else 0.0
        if worst and worst.seconds > scenario.allowance:
            count = sum(e.level.startswith(prefix) and e.seconds > scenario.allowance for e in report.episodes)
            report.failures.append(
                f"{prefix} cap exceeded longer than {scenario.allowance} s {count} time(s); worst: {worst.level} "
                f"held {worst.peak} > {worst.cap} for {worst.seconds:.2f} s from t={worst.start:.1f} s "
                f"(during {worst.during})")
    # What the allowance is for: outside the faults, only the abort race (a lease released as the
    # client leaves, the next request arriving before the engine has dropped the old one).
    calm = [e.seconds for e in report.episodes if e.during == "calm"]
    report.figures["worst over-cap outside fault windows (s)"] = max(calm, default=0.0)
    waiting = _waiting_while_free(scenario, evidence)
    report.figures["engine waiting while the other replica had a free slot (s)"] = waiting
    if waiting:
        report.failures.append(f"an engine queued requests of its own for {waiting:.2f} s in all while another "
                               f"replica had a free slot (stretches over {scenario.allowance} s)")
    report.figures["replica peak in engine"] = max(
        (max((p for _, _, p in over_cap(s, 0)), default=0) for s, _ in
         (levels[f"replica {r}"] for r in evidence.engine_logs)), default=0)


def _waiting_while_free(scenario: Scenario, evidence: Evidence) -> float:
    """Seconds during which one replica queued requests of its own while another had a free slot
    (and was alive), beyond `allowance` at a stretch."""
    names = sorted(evidence.engine_logs)
    events = sorted((t, name, d) for name in names for e in evidence.engine_logs[name]
                    for t, d in ((e["arrived"], 1), (e["ended"], -1)))
    dead = [(w.start, w.ready or math.inf, f"chaos-{w.target}") for w in evidence.windows
            if w.kind == kinds.REPLICA_KILL]
    count = dict.fromkeys(names, 0)
    total, since, previous = 0.0, None, None
    cap = scenario.max_num_seqs
    for moment, name, delta in events:
        if previous is not None:
            alive = [n for n in names if not any(s <= previous <= e and n == who for s, e, who in dead)]
            bad = any(count[n] > cap for n in alive) and any(count[n] < cap for n in alive)
            if bad and since is None:
                since = previous
            if not bad and since is not None:
                if previous - since > scenario.allowance:
                    total += previous - since
                since = None
        count[name] += delta
        previous = moment
    return total


def _by_policy(outcome: Outcome) -> bool:
    """Answered as the portal's policy says, Redis or not: served, or refused by a queue limit.
    (Service is back when admission decides again. Restarted under load, the card is still full of
    the requests that ran through the outage, so a new request may rightly wait for a slot.)"""
    return outcome.status == 200 or (outcome.status == 429 and outcome.code in ("queue_full", "queue_timeout"))


def _judge_recovery(scenario: Scenario, evidence: Evidence, report: Report) -> None:
    t0 = evidence.started
    recoveries = []
    outages = [w for w in evidence.windows if w.kind in kinds.REDIS_FAULTS]
    for n, window in enumerate(outages):
        until = outages[n + 1].start if n + 1 < len(outages) else math.inf
        firsts = [o.headers_at for o in evidence.outcomes
                  if _by_policy(o) and o.sent_at >= window.ready and o.headers_at is not None]
        recovery = (min(firsts) - window.ready) if firsts else None
        # Any failure sent after the limit (until the next outage) counts, not only Redis's own.
        # (Answered before the next outage began: a call it caught is that outage's to excuse.)
        late = [o for o in evidence.outcomes if window.ready + scenario.recovery_limit < o.sent_at
                and (o.ended_at or o.sent_at) < until
                and o.status is not None and o.status >= 500 and _excuse(o, _label(o), [], scenario) is None
                and not any(w.start <= o.sent_at <= _window_end(w, scenario) for w in evidence.windows
                            if w.kind not in kinds.REDIS_FAULTS)]
        recoveries.append(recovery)
        report.figures[f"recovery after {window.kind} at t={window.start - t0:.0f} s (s)"] = recovery
        if recovery is None or recovery > scenario.recovery_limit:
            report.failures.append(f"service not back within {scenario.recovery_limit} s of Redis answering after "
                                   f"{window.kind} at t={window.start - t0:.1f} s: {recovery}")
        if late:
            codes = sorted({f"{o.status} {o.code}" for o in late})
            report.failures.append(f"{len(late)} failed answers ({', '.join(codes)}) to calls sent more than "
                                   f"{scenario.recovery_limit} s after Redis answered ({window.kind} at "
                                   f"t={window.start - t0:.1f} s)")
    measured = [r for r in recoveries if r is not None]
    report.figures["worst recovery after Redis returns (s)"] = max(measured) if measured else None


def render(report: Report) -> str:
    """The figures, the answers per fault window, and the worst over-cap stretches, as text tables."""
    lines = [f"chaos run, seed {report.seed}", ""]
    width = max(len(name) for name in report.figures)
    for name, value in report.figures.items():
        lines.append(f"  {name.ljust(width)}  {_fmt(value)}")
    labels = sorted({label for counts in report.statuses.values() for label in counts})
    lines += ["", "answers by the fault window they were sent in:"]
    header = ["window", *labels]
    rows = [[kind, *(str(counts.get(label, 0)) for label in labels)] for kind, counts in report.statuses.items()]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    if report.episodes:
        lines += ["", "longest over-cap stretches:"]
        for e in report.episodes[:8]:
            lines.append(f"  {e.level}: {e.peak} > {e.cap} for {e.seconds:.3f} s at t={e.start:.1f} s ({e.during})")
    lines += ["", "FAILED:" if report.failures else "all assertions hold", *(f"  - {f}" for f in report.failures)]
    return "\n".join(lines)


def as_json(report: Report) -> dict[str, Any]:
    return {"seed": report.seed, "figures": report.figures, "statuses": report.statuses,
            "episodes": [e.__dict__ for e in report.episodes], "failures": report.failures}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
