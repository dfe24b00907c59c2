"""SMG (the Shepherd Model Gateway, Rust) as a peer of bench/overhead.py: its own virtual
environment (var/bench-smg, never a project dependency; the wheel carries the router binary) and a
router process to start and stop.

It routes by the request's model to the workers it was given, which it asks for their models at
start-up. Its traps, met here: its Prometheus endpoint binds every address unless
``--prometheus-host`` is given (it is: loopback); it logs each request at info (warn here, as a
deployment would); and its admission (``--max-concurrent-requests``) is left off, as ours lets
every benchmark key far past the concurrency used, so both only route and relay.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.harness import LOGS, ROOT
from bench.peer_process import PeerProcess, ensure_installed
from enginesim.process import pick_free_port

SMG_VERSION = "1.13.0"
VENV = ROOT / "var" / "bench-smg"
READY_TIMEOUT = 60.0
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def ensure_venv(venv: Path = VENV) -> Path:
    """The ``smg`` executable, installing the pinned version first if need be."""
    ensure_installed(venv, "smg", SMG_VERSION, f"smg=={SMG_VERSION}")
    return venv / "bin" / "smg"


class SmgRouter(PeerProcess):
    """``smg launch`` on a loopback port, in a process group of its own."""

    def __init__(self, executable: Path, port: int, workers: list[str]) -> None:
        super().__init__(LOGS / f"smg-{port}.log")
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        self.process = subprocess.Popen(
            [str(executable), "launch", "--host", "127.0.0.1", "--port", str(port),
             "--worker-urls", *workers, "--policy", "round_robin",
             "--prometheus-host", "127.0.0.1", "--prometheus-port", str(pick_free_port()),
             "--log-level", "warn"],
            env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            self._wait_ready(len(workers))
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, workers: int) -> None:
        """Until it lists the workers' models (it discovers them after it starts listening)."""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"SMG exited during start-up:\n{self.log_tail()}")
            try:
                with _opener.open(f"{self.url}/v1/models", timeout=2) as resp:
                    if resp.status == 200 and resp.read().count(b'"id"') >= workers:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"SMG did not list its workers within {READY_TIMEOUT:.0f} s:\n{self.log_tail()}")
