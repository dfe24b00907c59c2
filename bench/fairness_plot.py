"""The fairness benchmark's figure: one PNG with TTFT, engine queue, batch rate, Jain, ageing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import report

COLOURS = {"fcfs": "tab:red", "gateway": "tab:blue", "idle-direct": "tab:gray",
           "ideal-direct": "tab:olive",
           "idle-gateway": "tab:green", "batch-direct": "tab:orange", "batch-gateway": "tab:purple"}


def plot(results: dict[str, Any], name: str) -> Path:
    fig, axes = report.figure(3, 2)
    phases = results.get("scenario1", {})
    ttft, ttft_box, queue, rate, jain, age = (axes[0][0], axes[0][1], axes[1][0], axes[1][1],
                                              axes[2][0], axes[2][1])
    for phase in ("fcfs", "gateway", "idle-direct", "idle-gateway", "ideal-direct"):
        s = phases.get(phase)
        if not s or not s["series"]["ttft"]:
            continue
        points = s["series"]["ttft"]
        ttft.scatter([p[0] for p in points], [p[1] for p in points], s=8,
                     color=COLOURS[phase], label=phase, alpha=0.7)
    ttft.set_yscale("log")
    ttft.set(title="Interactive TTFT per request", xlabel="sent at (s into window)",
             ylabel="TTFT (s)")
    ttft.legend(fontsize=8)

    names = [p for p in ("idle-direct", "idle-gateway", "ideal-direct", "gateway", "fcfs")
             if phases.get(p) and phases[p]["series"]["ttft"]]
    if names:
        ttft_box.boxplot([[pt[1] for pt in phases[p]["series"]["ttft"]] for p in names],
                         whis=(5, 95), showfliers=True)
        ttft_box.set_xticks(range(1, len(names) + 1), names)
        ttft_box.set_yscale("log")
    ttft_box.set(title="Interactive TTFT (whiskers p5-p95)", ylabel="TTFT (s)")

    for phase in ("fcfs", "gateway", "batch-direct", "batch-gateway"):
        s = phases.get(phase)
        if not s:
            continue
        series = s["series"]["engine"]
        queue.plot([p[0] for p in series], [p[2] for p in series], color=COLOURS[phase],
                   label=f"{phase} waiting")
    queue.set(title="Engine waiting queue (polled /sim/stats)", xlabel="s into window",
              ylabel="requests waiting in engine")
    queue.legend(fontsize=8)

    for phase in ("batch-direct", "batch-gateway", "fcfs", "gateway"):
        s = phases.get(phase)
        if not s or not s["series"]["batch_rate"]:
            continue
        width = s["duration"] / max(1, len(s["series"]["batch_rate"]))
        xs = [i * width for i in range(len(s["series"]["batch_rate"]))]
        rate.step(xs, s["series"]["batch_rate"], where="post", color=COLOURS[phase], label=phase)
    rate.set_ylim(bottom=0)
    rate.set(title="Batch tokens/s received per window", xlabel="s into window", ylabel="tok/s")
    rate.legend(fontsize=8)

    for phase in ("fcfs", "gateway"):
        s = phases.get(phase)
        if not s:
            continue
        rows = [r for r in s["series"]["jain"] if r[1] is not None and r[2] >= 2]
        jain.plot([r[0] for r in rows], [r[1] for r in rows], marker=".", color=COLOURS[phase],
                  label=phase)
        # Windows where every backlogged user got nothing have no index: mark them at 0.
        empty = [r[0] for r in s["series"]["jain"] if r[1] is None and r[2] >= 1]
        jain.scatter(empty, [0.02] * len(empty), marker="x", color=COLOURS[phase],
                     label=f"{phase}: backlogged, nothing served")
    jain.set_ylim(0, 1.05)
    jain.set(title="Jain's index among backlogged interactive users, per window",
             xlabel="s into window", ylabel="Jain's index")
    jain.legend(fontsize=8)

    s2 = results.get("scenario2")
    if s2:
        x, ticks, labels = 0, [], []
        for mode, m in s2["modes"].items():
            first = x
            for a in m["arrivals"]:
                queued = a.get("queued_ms")
                value = a["waited_at_least"] if a["starved"] or queued is None else queued / 1000
                age.bar(x, value, color="tab:red" if a["starved"] else "tab:blue")
                age.text(x, value, "starved" if a["starved"] else f"{value:.2f}", ha="center",
                         va="bottom", fontsize=8)
                x += 1
            ticks.append((first + x - 1) / 2)
            labels.append(f"{mode} (H={m['head_start']:g} s)")
            x += 1
        age.axhline(s2["limit"], color="black", linestyle="--", label="H + one slot time (p95)")
        age.axhline(s2["horizon"], color="tab:red", linestyle=":", label="horizon 3 H")
        age.set_xticks(ticks, labels)
        age.legend(fontsize=8)
    age.set(title="Batch request queue wait under saturating interactive load", ylabel="queued (s)")
    return report.save_figure(fig, name)
