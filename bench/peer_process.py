"""A peer gateway's process for the benchmarks: started in a process group of its own, its output
in a log file, stopped (the whole group) when the benchmark is done."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Self


class PeerProcess:
    """Subclasses start ``self.process`` (``start_new_session=True``) writing to ``self.log_path``
    through ``self._log``."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")  # noqa: SIM115  (closed in stop())

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        process = getattr(self, "process", None)
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            except ProcessLookupError:
                pass
        self._log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def installed_version(venv: Path, distribution: str) -> str | None:
    """The version of `distribution` in the virtual environment `venv`, or None."""
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    found = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({distribution!r}))"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    return found.stdout.strip() if found.returncode == 0 else None


def ensure_installed(venv: Path, distribution: str, version: str, requirement: str) -> None:
    """`requirement` (pinning `distribution` to `version`) installed into its own virtual
    environment `venv`, never into the project's."""
    if installed_version(venv, distribution) == version:
        return
    print(f"setting up {distribution} {version} in {venv} (once)", flush=True)
    base = getattr(sys, "_base_executable", None) or shutil.which("python3") or "python3"
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", requirement],
                   check=True, timeout=1800)
    if installed_version(venv, distribution) != version:
        raise RuntimeError(f"{distribution} {version} did not install into {venv}")
