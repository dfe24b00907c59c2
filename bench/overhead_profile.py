"""Sampling one gateway worker with py-spy while the benchmark loads it, and boiling the
samples down to where the per-request time goes.

py-spy attaches to the running process (no restart, no code change) and is installed into a
throwaway virtual environment under var/, never the project's. It samples every thread and
leaves out those that are idle (blocked in a system call); ``--threads`` tags each sample with
its thread. It pauses the worker for each sample (consistent stacks; the worker runs a few
per cent slower while sampled). The event-loop thread (MainThread under uvicorn) runs every request's async code,
so its busy share is the worker's capacity used, and a function's share of the loop's
wall-clock samples is what it costs that capacity. Waits that block the loop thread (a
thread joined on the loop, a lock) count as busy there: the loop can do nothing else
meanwhile. Other threads (Django's sync_to_async pool) are reported apart, without the
samples where a pool thread only waits for work or on a lock (py-spy does not always tell those
from running when it pauses the process).

"inclusive": samples where the function is anywhere in the stack (the server's start-up trunk,
runpy → click → uvicorn → asyncio.run, is left out); "self": the innermost frame; packages by
the innermost frame's file. A loop-thread sample with no Python frame is uvloop's own C code
(reading sockets, running callbacks) and is shown as "(uvloop / C)".
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from bench.harness import ROOT

PYSPY_VERSION = "0.4.3"
VENV = ROOT / "var" / "bench-pyspy"
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
_THREAD = re.compile(r"^thread \((?P<tid>[^)]*)\)(?::\s*(?P<name>.*))?$")
LOOP_THREAD = "MainThread"
NATIVE = "(uvloop / C)"
# Innermost frames of a non-loop thread that only waits (for work, on a lock, for a join).
IDLE_LEAVES = {("_worker", "concurrent/futures/thread.py"), ("Condition.wait", "threading.py"),
               ("Thread._wait_for_tstate_lock", "threading.py"), ("Event.wait", "threading.py")}
# The start-up chain every loop-thread sample sits under: not a cost of its own.
TRUNK_FILES = ("<frozen runpy>", "click/core.py", "uvicorn/main.py", "uvicorn/__main__.py",
               "uvicorn/_compat.py", "uvicorn/server.py", "asyncio/runners.py")


def ensure_pyspy() -> Path | None:
    """The py-spy executable (installed on first use), or None when it cannot be had."""
    executable = VENV / "bin" / "py-spy"
    if executable.exists():
        return executable
    try:
        base = getattr(sys, "_base_executable", None) or "python3"
        subprocess.run([base, "-m", "venv", str(VENV)], check=True, timeout=120)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "--quiet",
                        "--disable-pip-version-check", f"py-spy=={PYSPY_VERSION}"],
                       check=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"py-spy is not available ({exc}); no profile", flush=True)
        return None
    return executable if executable.exists() else None


def start_recording(executable: Path, pid: int, seconds: int, out: Path,
                    rate: int) -> subprocess.Popen[bytes]:
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [str(executable), "record", "--pid", str(pid), "--duration", str(seconds),
         "--rate", str(rate), "--format", "raw", "--output", str(out), "--threads"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def _short(path: str) -> str:
    root = str(ROOT) + "/"
    path = path.removeprefix(root)
    for marker in ("site-packages/", "/lib/python3."):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker.startswith("/lib/"):
                path = path.split("/", 1)[1] if "/" in path else path
    return path


def _package(path: str) -> str:
    """"django/core/handlers/base.py" -> "django"; "fairness/proxy.py" -> "fairness.proxy";
    a standard-library module stays itself ("asyncio", "json", "threading")."""
    if path.startswith("<"):
        return path
    parts = path.removesuffix(".py").split("/")
    if parts[0] in ("fairness", "gpuportal", "enginesim"):
        return ".".join(parts[:2])
    return parts[0]


def parse_frame(frame: str) -> tuple[str, str]:
    match = _FRAME.match(frame)
    if match is None:
        return frame, ""
    return match["func"], _short(match["file"])


def _shares(counter: Counter[str], denominator: float, top: int) -> list[dict[str, Any]]:
    if not denominator:
        return []
    return [{"name": name, "samples": n, "percent": 100.0 * n / denominator}
            for name, n in counter.most_common(top)]


class _ThreadTally:
    def __init__(self) -> None:
        self.samples = 0
        self.inclusive: Counter[str] = Counter()
        self.own: Counter[str] = Counter()
        self.packages: Counter[str] = Counter()

    def add(self, frames: list[tuple[str, str]], count: int) -> None:
        self.samples += count
        frames = [(func, path) for func, path in frames if path not in TRUNK_FILES]
        for name in {f"{func} ({path})" for func, path in frames}:
            self.inclusive[name] += count
        if frames:
            func, path = frames[-1]
            self.own[f"{func} ({path})"] += count
            self.packages[_package(path)] += count
        else:
            self.own[NATIVE] += count
            self.packages[NATIVE] += count

    def report(self, denominator: float, top: int) -> dict[str, Any]:
        inclusive = self.inclusive
        project = Counter({n: c for n, c in inclusive.items()
                           if "(fairness/" in n or "(gpuportal/" in n})
        return {
            "samples": self.samples,
            "busy_percent": 100.0 * self.samples / denominator if denominator else None,
            "self": _shares(self.own, denominator, top),
            "inclusive": _shares(inclusive, denominator, top),
            "project_inclusive": _shares(project, denominator, top),
            "packages_self": _shares(self.packages, denominator, top),
        }


def summarize(raw: Path, seconds: float, rate: int, top: int = 25) -> dict[str, Any]:
    """Shares of the sampled wall-clock time (``seconds`` × ``rate`` samples per thread):
    the event-loop thread's functions and packages, and the other threads' together."""
    loop, others = _ThreadTally(), _ThreadTally()
    threads: Counter[str] = Counter()
    distinct: dict[str, set[str]] = {}
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        parts = stack.split(";")
        name = "?"
        match = _THREAD.match(parts[0])
        if match is not None:
            name = (match["name"] or match["tid"]).strip()
            parts = parts[1:]
        frames = [parse_frame(f) for f in parts]
        kind = re.sub(r"\d+", "N", name)  # ThreadPoolExecutor-7178_0 -> ThreadPoolExecutor-N_N
        distinct.setdefault(kind, set()).add(name)
        if name != LOOP_THREAD and frames and frames[-1] in IDLE_LEAVES:
            continue
        threads[kind] += count
        (loop if name == LOOP_THREAD else others).add(frames, count)
    wall = seconds * rate
    return {
        "rate": rate, "seconds": seconds, "wall_samples_per_thread": wall,
        # Busy share per kind of thread, and how many threads of that kind were seen: a pool
        # whose thread names keep changing is one executor per request.
        "threads": {kind: {"busy_percent": 100.0 * n / wall, "distinct": len(distinct[kind])}
                    for kind, n in threads.most_common(10)},
        "thread_kinds_seen": {kind: len(names) for kind, names in distinct.items()},
        "loop": loop.report(wall, top),
        "other_threads": others.report(wall, top),
    }
