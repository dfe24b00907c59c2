"""The fair-share benchmark's figure: one PNG, a panel per question, today beside fair share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import report

STYLE = {"today": "--", "fair share": "-"}
COLOURS = {"A": "tab:red", "B": "tab:blue", "p3": "tab:purple", "p1": "tab:green",
           "heavy": "tab:red", "fresh": "tab:blue"}


def _cumulative(ax: Any, scenario: dict[str, Any], title: str) -> None:
    for mode in ("today", "fair share"):
        for user, points in scenario.get(mode, {}).get("cumulative", {}).items():
            ax.plot([p[0] for p in points], [p[1] for p in points], STYLE[mode],
                    color=COLOURS.get(user), label=f"{user}, {mode}")
    ax.set(title=title, xlabel="s into the run (wall)", ylabel="weighted tokens received")
    ax.legend(fontsize=7)


def plot(results: dict[str, Any], name: str) -> Path:
    fig, axes = report.figure(3, 2)
    s1, s2, s3 = results.get("scenario1"), results.get("scenario2"), results.get("scenario3")
    s4, s5 = results.get("scenario4"), results.get("scenario5")
    if s1:
        _cumulative(axes[0][0], s1, "1. A (1000 tokens) vs B (100): cumulative service")
    if s2:
        _cumulative(axes[1][0], s2, "2. shares 3 (p3) and 1 (p1): cumulative service")
    jain = axes[0][1]
    for label, scenario, colour in (("1", s1, "black"), ("2, per share", s2, "tab:purple")):
        if not scenario:
            continue
        for mode in ("today", "fair share"):
            rows = [r for r in scenario[mode]["windows"] if r["jain"] is not None]
            jain.plot([r["t0"] for r in rows], [r["jain"] for r in rows], STYLE[mode],
                      marker="o", color=colour, label=f"{label}, {mode}")
    jain.axhline(0.95, color="gray", lw=0.8)
    jain.set_ylim(0.4, 1.02)
    jain.set(title="1 and 2: Jain's index over weighted tokens per window",
             xlabel="window start (s)", ylabel="Jain's index")
    jain.legend(fontsize=7)
    if s3:
        ax = axes[1][1]
        for mode in ("today", "fair share"):
            books = s3[mode]["books"]
            for i, user in ((1, "fresh"), (2, "heavy")):
                ax.plot([b[0] for b in books], [b[i] for b in books], STYLE[mode],
                        color=COLOURS[user], label=f"{user}, {mode}")
        fair = s3["fair share"]
        if fair["predicted"]:
            ax.axvline(fair["predicted"], color="gray", lw=0.8, label="predicted meeting")
        if fair["crossing_books"]:
            ax.axvline(fair["crossing_books"], color="black", lw=0.8, ls=":",
                       label="measured meeting")
        ax.set(title="3. memory: decayed usage in the gateway's books",
               xlabel="s into the run (wall)", ylabel="weighted tokens (decayed)")
        ax.legend(fontsize=7)
    if s4:
        ax = axes[2][0]
        segs = s4["segments"]
        ax.bar(range(1, len(segs) + 1), [s["rate"] for s in segs],
               color=["tab:gray" if s["mode"] == "today" else "tab:blue" for s in segs])
        ax.set_xticks(range(1, len(segs) + 1), [s["mode"] for s in segs])
        ax.set(title="4. one user alone: throughput per segment", ylabel="weighted tok/s")
    if s5:
        ax = axes[2][1]
        for mode in ("today", "fair share"):
            waits = s5[mode]["zed_waits"]
            ax.plot([w[0] for w in waits], [w[1] for w in waits], STYLE[mode], marker="o",
                    color="tab:red", label=f"zed, {mode}")
        ax.axhline(s5["fair share"]["bound"], color="gray", lw=0.8, label="bound (fair share)")
        ax.set(title="5. zed (F ~ 0): queue wait per request", xlabel="sent at (s into run)",
               ylabel="wait (s)")
        ax.legend(fontsize=7)
    return report.save_figure(fig, name)
