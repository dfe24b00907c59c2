"""Writing results: JSON and a PNG to ``bench/results/<name>.*``, and tables on stdout."""

from __future__ import annotations

import json
import math
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.figure import Figure  # noqa: E402

from bench.harness import RESULTS  # noqa: E402


class Target(TypedDict):
    name: str
    measured: float | None
    limit: float
    unit: str
    rule: str  # "<=" or ">="
    ok: bool
    detail: str


def target(name: str, measured: float | None, rule: str, limit: float, unit: str = "",
           detail: str = "") -> Target:
    """A pass/fail check; a missing measurement fails."""
    if measured is None or (isinstance(measured, float) and math.isnan(measured)):
        ok = False
    else:
        ok = measured <= limit if rule == "<=" else measured >= limit
    return {"name": name, "measured": measured, "limit": limit, "unit": unit, "rule": rule,
            "ok": ok, "detail": detail}


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        if value == 0:
            return "0"
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}" if magnitude < 1 else f"{value:.{digits + 1}g}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> str:
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    lines = []
    if title:
        lines.append(title)
    lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    lines.append("  ".join("-" * w for w in widths))
    for row in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    return "\n".join(lines)


def targets_table(targets: Sequence[Target]) -> str:
    rows = [(("PASS" if t["ok"] else "FAIL"), t["name"],
             f"{fmt(t['measured'])}{t['unit']}", f"{t['rule']} {fmt(t['limit'])}{t['unit']}",
             t["detail"]) for t in targets]
    return table(["", "target", "measured", "limit", "from"], rows, title="Targets")


def environment() -> dict[str, Any]:
    import os

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),  # others' work on a shared box shows up in the latencies
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _clean(value: Any) -> Any:
    """JSON without NaN/Infinity (strict parsers reject them)."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(_clean({**data, "environment": environment()}), indent=1))
    return path


def finish(name: str, results: dict[str, Any], started: float, plot: Callable[[dict[str, Any], str], Path]) -> int:
    """A bench's ending: its targets table, the JSON report and the plot; the exit status (1 when a
    target failed)."""
    print()
    print(targets_table(results["targets"]))
    results["elapsed_s"] = time.monotonic() - started
    json_path = write_json(name, results)
    png_path = plot(results, name)
    print(f"\nwrote {json_path} and {png_path} ({results['elapsed_s']:.0f} s)")
    return 0 if all(t["ok"] for t in results["targets"]) else 1


def figure(rows: int, cols: int, width: float = 13.0, height_per_row: float = 3.4) -> tuple[Figure, Any]:
    fig, axes = plt.subplots(rows, cols, figsize=(width, height_per_row * rows), squeeze=False)
    return fig, axes


def save_figure(fig: Figure, name: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
