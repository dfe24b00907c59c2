"""Runs a real Celery worker (with beat) as a separate OS process for tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.gateway_process import ROOT


class WorkerProcess:
    def __init__(self, env: dict[str, str], log_path: Path, queues: str = "celery", beat: bool = True) -> None:
        """`queues`: "celery,batches" for a worker that also runs batches (fairness/batch/tasks.py);
        `beat`: False for a worker alone, or `celery beat` by itself (see BeatProcess)."""
        self.log_path = log_path
        # Beat's schedule in a directory of its own: a file left by a killed worker is never read.
        self._beat_dir = tempfile.mkdtemp(prefix="beat-")
        self._log = open(log_path, "wb")  # noqa: SIM115 -- the process writes to it until stop()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "gpuportal", *self._command(queues, beat),
             "--schedule", os.path.join(self._beat_dir, "schedule")],
            cwd=ROOT, env={**os.environ, **env}, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @staticmethod
    def _command(queues: str, beat: bool) -> list[str]:
        return ["worker", *(["-B"] if beat else []), "--loglevel", "INFO", "--concurrency", "1", "--pool", "solo",
                "--queues", queues]

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
        self._end_group()

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is given back, nothing is flushed."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self._end_group()

    def _end_group(self) -> None:
        """No child (beat's) outlives the worker to send tasks into the next test's broker."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self._log.close()
        shutil.rmtree(self._beat_dir, ignore_errors=True)


class BeatProcess(WorkerProcess):
    """`celery beat` alone, as a host that runs only the scheduler would: it sends the periodic
    tasks to the broker and runs none of them."""

    @staticmethod
    def _command(queues: str, beat: bool) -> list[str]:
        return ["beat", "--loglevel", "INFO"]

    def sent(self, entry: str) -> int:
        """How many times this beat has sent the schedule's `entry` (its log says each)."""
        return self.log_path.read_text(errors="replace").count(f"Sending due task {entry} ")
