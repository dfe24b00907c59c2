"""What a server process costs, read from Linux's /proc: CPU time and resident memory of a
process and everything it started (uvicorn workers, LiteLLM's children), without psutil."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces; fields resume after the last ")".
    return text.rsplit(")", 1)[1].split()


def children_map() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def with_descendants(pids: Iterable[int]) -> list[int]:
    tree = children_map()
    found: list[int] = []
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.append(pid)
            todo.extend(tree.get(pid, ()))
    return found


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU of these processes (their threads included), gone ones counting 0."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def rss_bytes(pids: Iterable[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    return total


def peak_rss_bytes(pids: Iterable[int]) -> int:
    """The sum of each process's high-water mark (VmHWM) since it started."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, ValueError):
            pass
    return total


def find_process(name: str, needle: str) -> int | None:
    """The first process whose command line holds both ``name`` and ``needle`` (redis-server
    rewrites its title to "redis-server 127.0.0.1:PORT", so the port finds it)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if name.encode() in cmdline and needle.encode() in cmdline:
            return int(entry.name)
    return None


@dataclass
class Accounts:
    """Named groups of processes whose CPU is read together at a window's edges."""

    groups: dict[str, list[int]]

    def snapshot(self) -> dict[str, float]:
        return {name: cpu_seconds(with_descendants(pids)) for name, pids in self.groups.items()}

    @staticmethod
    def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {name: after[name] - before.get(name, 0.0) for name in after}


def pin(pids: Iterable[int], cpus: set[int]) -> int:
    """Hold these processes, their descendants and every thread of each to ``cpus`` (a thread's
    affinity is its own: a process's threads must each be set; threads they start later inherit
    it). Returns how many threads were pinned."""
    pinned = 0
    for pid in with_descendants(pids):
        try:
            threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in threads:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)
                pinned += 1
    return pinned


def redis_work(stats: dict[str, dict[str, float]]) -> dict[str, float]:
    """What a Redis server did, from ``INFO commandstats``: microseconds inside function calls
    (admission's: their time holds that of the commands they run), function calls, and commands
    run, inside functions or not (a command a function runs is counted on its own line too). The
    bench's own INFO calls are left out."""
    function_usec = commands = fcalls = 0.0
    for name, entry in stats.items():
        command = name.removeprefix("cmdstat_")
        if command in ("info", "config|resetstat"):
            continue
        if command in ("fcall", "fcall_ro"):
            fcalls += entry["calls"]
            function_usec += entry["usec"]
        else:
            commands += entry["calls"]
    return {"function_usec": function_usec, "commands": commands, "fcalls": fcalls}
