"""bench/results/overhead.png: the overhead benchmark's figures in six panels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import figure, save_figure

COLORS = {"direct": "#7f7f7f", "gateway×1": "#1f77b4", "gateway×2": "#17becf",
          "litellm×1": "#d62728", "before×1": "#9467bd"}


def _bars(ax: Any, groups: list[str], series: dict[str, list[float | None]], ylabel: str,
          log: bool = False) -> None:
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [v if v is not None and v > 0 else 0 for v in values], width,
               label=name, color=COLORS.get(name.split(" ")[0]),
               hatch="//" if name.endswith("p99") else None, edgecolor="white")
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)


def plot(results: dict[str, Any], name: str) -> Path:
    fig, axes = figure(3, 2, width=13.0, height_per_row=3.6)
    plain = results.get("non_streaming", {})
    levels = list(plain)
    gateways = ["gateway×1", "gateway×2", "litellm×1"]

    series = {}
    for system in gateways:
        for q in ("p50", "p99"):
            series[f"{system} {q}"] = [plain[c].get(system, {}).get(f"added_{q}_ms") for c in levels]
    _bars(axes[0][0], [f"c={c}" for c in levels], series, "added latency vs direct (ms)", log=True)
    axes[0][0].set_title("Added latency, non-streaming")

    series = {s: [plain[c].get(s, {}).get("rps_per_worker") for c in levels]
              for s in ["direct", *gateways]}
    _bars(axes[0][1], [f"c={c}" for c in levels], series, "requests/s per worker process", log=True)
    axes[0][1].set_title("Throughput per worker process")

    top = levels[-1] if levels else None
    if top is not None:
        ax = axes[1][0]
        own = [plain[top].get(s, {}).get("cpu_s_per_1k", {}).get("server") or 0 for s in gateways]
        redis = [plain[top].get(s, {}).get("cpu_s_per_1k", {}).get("redis") or 0 for s in gateways]
        ax.bar(gateways, own, color=[COLORS[s] for s in gateways], label="gateway processes")
        ax.bar(gateways, redis, bottom=own, color="#bcbd22", label="redis-server")
        ax.set_ylabel("CPU seconds per 1,000 requests")
        ax.set_title(f"CPU per 1,000 requests at c={top}")
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)

    groups, series = [], {s: [] for s in ["direct", *gateways]}
    for section, label in (("streaming", "instant"), ("paced_streaming", "paced")):
        for c, rows in results.get(section, {}).items():
            groups.append(f"{label} c={c}")
            for system in series:
                gap = rows.get(system, {}).get("stream", {}).get("gap_us", {}).get("p99")
                series[system].append(None if gap is None else gap / 1000.0)
    series = {f"{name} p99": values for name, values in series.items()}
    _bars(axes[1][1], groups, series, "gap between chunks at the client, p99 (ms)")
    axes[1][1].set_title("Streaming: inter-chunk gap p99 (instant: 256 chunks in one write; "
                         "paced: ~10 ms apart)", fontsize=9)

    ax = axes[2][0]
    mem = results.get("memory", {})
    samples = mem.get("samples", [])
    if samples:
        ax.plot([s["requests"] for s in samples], [s["rss_mb"] for s in samples],
                color=COLORS["gateway×1"])
        warm = mem.get("warmup_requests")
        if warm:
            ax.axvline(warm, color="#999", linestyle="--", linewidth=1)
        if mem.get("rss_at_warmup_mb"):
            ax.axhline(mem["rss_at_warmup_mb"] * 1.1, color="#d62728", linestyle=":", linewidth=1,
                       label="+10 % over warm-up")
            ax.legend(fontsize=7)
        ax.set_ylim(0, max(s["rss_mb"] for s in samples) * 1.25)
    ax.set_xlabel("requests through one gateway worker")
    ax.set_ylabel("RSS (MB)")
    ax.set_title("Memory flatness")
    ax.grid(alpha=0.3)

    ax = axes[2][1]
    prof = results.get("profile", {})
    items = prof.get("loop", {}).get("packages_self", [])[:12]
    if items:
        ax.barh([i["name"] for i in items][::-1], [i["percent"] for i in items][::-1],
                color=COLORS["gateway×1"])
        ax.set_xlabel("% of the event-loop thread's wall time (innermost frame)")
        ax.set_title(f"One gateway worker at c=16 (py-spy): loop busy "
                     f"{prof['loop']['busy_percent']:.0f} %")
    else:
        ax.set_title("No profile")
    return save_figure(fig, name)
