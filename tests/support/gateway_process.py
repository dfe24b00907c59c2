"""Runs the real gateway (uvicorn + Django ASGI) as a separate OS process for tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]


def database_url(settings_dict: dict) -> str:
    """The URL of the database Django is connected to (the test database in tests)."""
    if settings_dict["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    user = settings_dict.get("USER") or ""
    password = settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{settings_dict['NAME']}"


class GatewayProcess:
    def __init__(
        self, port: int, env: dict[str, str], log_path: Path, workers: int = 1, root: Path = ROOT,
        limit_concurrency: int = 1024,
    ) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 -- the process writes to it until stop()
        command = [
            sys.executable, "-m", "uvicorn", "gpuportal.asgi:application",
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
            "--no-access-log", "--lifespan", "on",
            # As in production (docs/operations.md): header deadline and size limit, a cap on
            # connections, idle ones closed after GP_CLIENT_IDLE_TIMEOUT_SECONDS.
            "--http", "fairness.gateway.http_server:GatewayHttpProtocol",
            "--limit-concurrency", str(limit_concurrency),
        ]
        if workers > 1:
            command += ["--workers", str(workers)]
        self.process = subprocess.Popen(
            command,
            cwd=root,  # another checkout's, for a benchmark's baseline
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(self._ready, timeout=30, what=f"gateway on port {port}")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"gateway exited early:\n{self.log_tail()}")
        try:
            return httpx.get(self.url + "/v1/models", timeout=1).status_code == 401
        except httpx.HTTPError:
            return False

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL, as a crash would: no cleanup runs."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def terminate(self) -> None:
        """SIGTERM, as an orchestrator's rolling restart sends it; returns without waiting."""
        os.killpg(self.process.pid, signal.SIGTERM)

    def wait_exit(self, timeout: float) -> int:
        """The exit status once the process has ended on its own; fails after `timeout`."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"gateway still running {timeout}s later:\n{self.log_tail()}") from None

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._log.close()
