"""Start ``python -m enginesim`` as a subprocess, for tests and benchmarks.

    with start_enginesim(port=8101, model="tiny", max_num_seqs=8,
                         extra_args=["--speed", "10"]) as sim:
        httpx.post(f"{sim.url}/v1/completions", json={...})

The helper polls ``/health`` until the server answers (any status: ``--fail-health`` answers 503)
with a deadline, never a fixed sleep, and fails with the server's log if it dies or times out.
Only the standard library is used here; the one client-side module, load.py, uses httpx.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
# Talk to the local server directly even when the environment sets an HTTP proxy.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def pick_free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class EngineSimProcess:
    """A running enginesim server; stop it with ``stop()`` or by leaving the ``with`` block."""

    def __init__(self, popen: subprocess.Popen[bytes], host: str, port: int, model: str,
                 log_path: str) -> None:
        self.popen = popen
        self.host = host
        self.port = port
        self.model = model
        self.log_path = log_path
        self.url = f"http://{host}:{port}"
        self.base_url = f"{self.url}/v1"  # for the openai SDK's base_url

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")
        except OSError:
            return ""

    # -- small JSON helpers for the /sim/* controls

    def _request(self, method: str, path: str, payload: Any = None, timeout: float = 5.0) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                     headers={"content-type": "application/json"})
        with _opener.open(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", "/sim/stats")
        return result

    def reset_peak(self) -> dict[str, Any]:
        result: dict[str, Any] = self._request("POST", "/sim/reset-peak", {})
        return result

    def requests(self) -> list[dict[str, Any]]:
        """The request log since the last reset_peak(): user, priority, cache_salt, arrived, ended."""
        result: list[dict[str, Any]] = self._request("GET", "/sim/requests")
        return result

    def set_faults(self, **switches: bool | str) -> dict[str, bool | str]:
        """E.g. ``set_faults(health_fail=True)`` or ``set_faults(error_500_marker="boom")``;
        unnamed switches keep their value."""
        result: dict[str, bool | str] = self._request("POST", "/sim/faults", switches)
        return result

    def metrics_text(self) -> str:
        with _opener.open(f"{self.url}/metrics", timeout=5.0) as resp:
            return str(resp.read().decode())

    # -- lifecycle

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            if not self.alive():
                output = self.log()
                self._cleanup()
                raise RuntimeError(
                    f"enginesim exited with {self.popen.returncode} during start-up:\n{output}"
                )
            try:
                with _opener.open(f"{self.url}/health", timeout=1.0):
                    return
            except urllib.error.HTTPError:
                return  # it answered, e.g. 503 with --fail-health: the server is up
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                output = self.log()
                self.kill()
                raise TimeoutError(f"enginesim on {self.url} not ready after {timeout}s:\n{output}")
            time.sleep(delay)  # polling interval, backing off a little
            delay = min(delay * 1.5, 0.1)

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._cleanup()

    def kill(self) -> None:
        if self.alive():
            self.popen.kill()
            self.popen.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)

    def __enter__(self) -> EngineSimProcess:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def start_enginesim(
    port: int | None = None,
    model: str = "enginesim",
    max_num_seqs: int = 8,
    extra_args: Sequence[str] = (),
    host: str = "127.0.0.1",
    timeout: float = 20.0,
    env: dict[str, str] | None = None,
) -> EngineSimProcess:
    """Launch ``python -m enginesim`` (this interpreter) and return once it answers /health.

    ``port=None`` picks a free port (another, up to three times, if it is taken meanwhile).
    ``extra_args`` are further CLI flags, e.g. ``["--speed", "10", "--scheduling-policy", "priority"]``.
    """
    chosen = port
    for attempt in range(3):
        try:
            return _launch(chosen or pick_free_port(host), model, max_num_seqs, extra_args, host, timeout, env)
        except RuntimeError as exc:
            # A port picked free can be taken by another process before the simulator binds it.
            if chosen is not None or "address already in use" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _launch(port: int, model: str, max_num_seqs: int, extra_args: Sequence[str], host: str, timeout: float,
            env: dict[str, str] | None) -> EngineSimProcess:
    argv = [sys.executable, "-m", "enginesim", "--host", host, "--port", str(port),
            "--model", model, "--max-num-seqs", str(max_num_seqs), *extra_args]
    child_env = dict(os.environ if env is None else env)
    # Importable wherever the caller runs from.
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_PACKAGE_PARENT, child_env.get("PYTHONPATH", "")) if p
    )
    log_fd, log_path = tempfile.mkstemp(prefix="enginesim-", suffix=".log")
    try:
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_fd,
                                 stderr=subprocess.STDOUT, env=child_env)
    finally:
        os.close(log_fd)
    handle = EngineSimProcess(popen, host, port, model, log_path)
    handle.wait_ready(timeout)
    return handle
