"""LiteLLM's proxy as the peer gateway of bench/overhead.py: its own virtual environment
(var/bench-litellm, never a project dependency), a rendered config and a process to start
and stop.

No database: ``bench/litellm/custom_auth.py`` maps each benchmark key to its
``max_parallel_requests`` (read from ``BENCH_LITELLM_KEYS``), and the v3 parallel-request
limiter keeps its gauges in Redis (``general_settings.coordination_redis``, a database number
of our own), as a multi-instance deployment would.

The pin: 1.108.7 is the newest release whose ``[proxy]`` extra resolves from the package index
reachable here. Later ones pin post-releases of litellm-enterprise / litellm-proxy-extras that
it does not carry, and 1.110 moved the proxy into a ``litellm-proxy`` distribution it lacks.
(1.107.0 was the compromised release; stay clear of it.)
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import string
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.harness import LOGS, ROOT
from bench.peer_process import PeerProcess, ensure_installed

LITELLM_VERSION = "1.108.7"
VENV = ROOT / "var" / "bench-litellm"
TEMPLATE_DIR = ROOT / "bench" / "litellm"
READY_TIMEOUT = 180.0  # its imports alone take 10-20 s on a busy two-core box
# Settings of ours that LiteLLM would also read (DATABASE_URL would make it look for Prisma).
_NOT_FOR_LITELLM = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE",
                    "REDIS_HOST", "REDIS_PORT", "REDIS_PASSWORD", "REDIS_CLUSTER_NODES")
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def ensure_venv(venv: Path = VENV) -> Path:
    """The ``litellm`` executable, installing the pinned version first if need be."""
    ensure_installed(venv, "litellm", LITELLM_VERSION, f"litellm[proxy]=={LITELLM_VERSION}")
    return venv / "bin" / "litellm"


def render_config(directory: Path, *, sim_api_base: str, timed_api_base: str, redis_host: str,
                  redis_port: int, redis_db: int) -> Path:
    """config.yaml and custom_auth.py side by side (LiteLLM loads custom_auth from the
    config's directory)."""
    template = string.Template((TEMPLATE_DIR / "config.yaml.template").read_text())
    path = directory / "config.yaml"
    path.write_text(template.substitute(
        sim_api_base=sim_api_base, timed_api_base=timed_api_base,
        redis_host=redis_host, redis_port=redis_port, redis_db=redis_db,
    ))
    shutil.copy(TEMPLATE_DIR / "custom_auth.py", directory / "custom_auth.py")
    return path


class LiteLLMProxy(PeerProcess):
    """``litellm --config ...`` on a loopback port, in a process group of its own."""

    def __init__(self, executable: Path, port: int, *, keys: dict[str, int], workers: int = 1,
                 **config: object) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.workers = workers
        self._dir = Path(tempfile.mkdtemp(prefix="bench-litellm-"))
        config_path = render_config(self._dir, **config)  # type: ignore[arg-type]
        env = {k: v for k, v in os.environ.items() if k not in _NOT_FOR_LITELLM}
        env.update({
            "LITELLM_MASTER_KEY": "sk-" + secrets.token_urlsafe(24),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the price list at start-up
            "LITELLM_LOG": "ERROR",
            "BENCH_LITELLM_KEYS": json.dumps(keys),
            "NO_PROXY": "127.0.0.1,localhost",
        })
        super().__init__(LOGS / f"litellm-{port}.log")
        self.process = subprocess.Popen(
            [str(executable), "--config", str(config_path), "--host", "127.0.0.1",
             "--port", str(port), "--num_workers", str(workers)],
            cwd=self._dir, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"LiteLLM exited during start-up:\n{self.log_tail()}")
            try:
                with _opener.open(f"{self.url}/health/liveliness", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"LiteLLM did not answer within {READY_TIMEOUT:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self._dir, ignore_errors=True)
