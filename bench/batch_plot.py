"""The batch benchmark's figure: engine slots over each batch's run (interactive, batch, the
reserve) and interactive TTFT per phase."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import report

STEP = 0.5  # seconds per occupancy point (bench.batch.occupancy)


def plot(results: dict[str, Any], name: str) -> Path:
    phases = results["phases"]
    slots = results["config"]["replicas"] * results["config"]["slots"]
    fig, axes = report.figure(1, 3, width=16)
    for ax, phase in zip(axes[0][:2], ("portal", "baseline"), strict=True):
        s = phases.get(phase)
        if not s:
            continue
        inter, batch = s["series"]["interactive_running"], s["series"]["batch_running"]
        t = [i * STEP for i in range(len(inter))]
        ax.stackplot(t, inter, batch, labels=["interactive", "batch lines"], colors=["tab:blue", "tab:orange"],
                     step="post")
        ax.axhline(slots, color="black", lw=1, label="slots")
        ax.axhline(slots - results["reserve_slots"], color="gray", ls="--", lw=1, label="slots − reserve")
        ax.set(title=f"{phase}: engine slots in use", xlabel="s into the batch's run", ylabel="requests running",
               ylim=(0, slots + 1))
        ax.legend(fontsize=8, loc="lower right")
    names = [p for p in ("idle", "portal", "baseline") if phases.get(p) and phases[p]["series"]["ttft"]]
    box = axes[0][2]
    if names:
        box.boxplot([[pt[1] for pt in phases[p]["series"]["ttft"]] for p in names], whis=(5, 95))
        box.set_xticks(range(1, len(names) + 1), names)
    box.set(title="Interactive TTFT (whiskers p5-p95)", ylabel="TTFT (s)")
    return report.save_figure(fig, name)
