"""Runs a real Celery worker (with beat) as a separate OS process for tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.gateway_process import ROOT


class WorkerProcess:
    def __init__(self, env: dict[str, str], log_path: Path, queues: str = "celery") -> None:
        """`queues`: "celery,batches" for a worker that also runs batches (fairness/batch/tasks.py)."""
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 -- the process writes to it until stop()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "gpuportal", "worker", "-B", "--loglevel", "INFO",
             "--concurrency", "1", "--pool", "solo", "--queues", queues,
             "--schedule", str(log_path.with_suffix(".beat"))],
            cwd=ROOT, env={**os.environ, **env}, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._log.close()

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is given back, nothing is flushed."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self._log.close()
