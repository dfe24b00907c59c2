"""Start and stop real vLLM (CPU build) OpenAI servers as subprocesses, for the engine test tier.

    from tests.engine.vllm_server import VLLMServer, start_all, stop_all

    with VLLMServer(model_dir, log_path="/tmp/vllm-a.log") as srv:   # start() + wait_ready()
        httpx.get(srv.base_url + "/v1/models")

    a = VLLMServer(model_dir, cpus="0")
    b = VLLMServer(model_dir, cpus="1", scheduling_policy="priority")
    start_all([a, b])            # launch both, then wait for both to answer /health
    ...
    stop_all([a, b])

Each server runs `python -m vllm.entrypoints.openai.api_server` with the engine venv's python
(scripts/engine-venv.sh; $ENGINE_VENV or <repo>/.venv-engine, or $ENGINE_PYTHON), in its own
process group, logging to a file. Ready means GET /health == 200 and GET /v1/models listing our
model directory (so another server on the port cannot pass for ours), polled until a deadline; a
process that exits or a deadline that passes raises EngineStartError with the tail of the log.
stop() signals only that process group: SIGTERM, then SIGKILL after a grace period. Servers
still running when the interpreter exits are stopped by an atexit hook, and (Linux) the server
gets SIGTERM if the thread that started it dies, so a killed test run leaves no engine behind.

On the 2-core machines two servers share the cores best with cpus="0" and cpus="1" (each engine
worker pinned to its own core); by default vLLM pins every worker to core 0.

Nothing here imports Django or vLLM; only the standard library is used, so the module works from
the project's venv as well as the engine's.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVED_MODEL_NAME = "tiny"
DEFAULT_START_TIMEOUT = 240.0  # measured here: one start 30-55 s, two at once 50-70 s

# Environment every server gets (on top of the caller's environment).
BASE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
    # Responses API turns (previous_response_id) need the engine to keep what it answered.
    "VLLM_ENABLE_RESPONSES_API_STORE": "1",
}


# Local servers only: never route these probes through a proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class EngineStartError(RuntimeError):
    """The server exited or did not become healthy in time; the message has the log tail."""


def engine_python() -> str:
    """The python of the engine venv: $ENGINE_PYTHON, else $ENGINE_VENV/bin/python."""
    explicit = os.environ.get("ENGINE_PYTHON")
    if explicit:
        return explicit
    venv = REPO_ROOT / os.environ.get("ENGINE_VENV", ".venv-engine")  # relative: to the repo
    return str(venv / "bin" / "python")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


_LIVE: set[VLLMServer] = set()


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_LIVE):
        server.stop()


class VLLMServer:
    """One vLLM OpenAI-compatible server serving `model_dir` as `served_model_name`."""

    def __init__(
        self,
        model_dir: str | os.PathLike,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        served_model_name: str = SERVED_MODEL_NAME,
        max_model_len: int = 1024,
        max_num_seqs: int = 8,
        scheduling_policy: str | None = None,  # None: vLLM's default (fcfs); or "priority"
        enable_prefix_caching: bool = True,
        cpus: str | None = None,  # e.g. "0" or "1": VLLM_CPU_OMP_THREADS_BIND for the worker
        kv_cache_gib: int = 1,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike | None = None,
        python: str | None = None,
        die_with_parent: bool = True,
    ) -> None:
        self.model_dir = str(Path(model_dir).resolve())
        self.host = host
        self.port = port or free_port(host)
        self.served_model_name = served_model_name
        self.python = python or engine_python()
        self.args = [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model_dir,
            "--served-model-name", served_model_name,
            "--host", host,
            "--port", str(self.port),
            "--max-model-len", str(max_model_len),
            "--max-num-seqs", str(max_num_seqs),
            "--dtype", "float32",
            "--enable-prompt-tokens-details",  # usage reports the cached prompt tokens, charged less
        ]
        self.args.append("--enable-prefix-caching" if enable_prefix_caching
                         else "--no-enable-prefix-caching")
        if scheduling_policy:
            self.args += ["--scheduling-policy", scheduling_policy]
        self.args += list(extra_args)
        self.env = {**os.environ, **BASE_ENV, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}
        if cpus is not None:
            self.env["VLLM_CPU_OMP_THREADS_BIND"] = cpus
        if env:
            self.env.update(env)
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix=f"vllm-{self.port}-", suffix=".log")
            os.close(fd)
        self.log_path = Path(log_path)
        self.die_with_parent = die_with_parent
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None
        self.ready_after: float | None = None  # seconds from start() to the first healthy answer

    # -- addresses ------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def openai_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> VLLMServer:
        """Launch the process (does not wait; see wait_ready)."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"server on port {self.port} is already running")
        if not Path(self.python).exists():
            raise EngineStartError(
                f"engine python {self.python} not found: run scripts/engine-venv.sh first"
            )
        if port_in_use(self.port, self.host):
            # Another server answering there would pass the health check in our place.
            raise EngineStartError(f"port {self.host}:{self.port} is already in use")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.args)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=tempfile.gettempdir(),  # keep the repo out of the engine's sys.path
                start_new_session=True,  # own process group: stop() kills exactly this tree
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )
        self.started_at = time.monotonic()
        self.ready_after = None
        _LIVE.add(self)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def health(self, timeout: float = 2.0) -> int | None:
        """The status of GET /health, or None when nothing answers."""
        try:
            with _OPENER.open(self.base_url + "/health", timeout=timeout) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (OSError, ValueError):
            return None

    def _serves_our_model(self) -> bool:
        """GET /v1/models lists our served name with our model directory as its root."""
        try:
            with _OPENER.open(self.base_url + "/v1/models", timeout=5) as resp:
                models = json.loads(resp.read()).get("data", [])
        except (OSError, ValueError):
            return False
        return any(
            m.get("id") == self.served_model_name and m.get("root") == self.model_dir
            for m in models
        )

    def check_ready(self) -> bool:
        """One readiness probe: True once /health is 200 and /v1/models shows our model.

        Raises EngineStartError (after clearing the process group) if the process has exited.
        """
        if self.proc is None or self.started_at is None:
            raise RuntimeError("start() first")
        if self.ready_after is not None:
            return True
        if self.proc.poll() is not None:
            code = self.proc.returncode
            self.stop()  # the leader is gone; clear whatever it left in its group
            raise EngineStartError(
                f"vLLM on port {self.port} exited with {code} before it was ready;"
                f" log {self.log_path}:\n{self.log_tail()}"
            )
        if self.health() == 200 and self._serves_our_model():
            self.ready_after = time.monotonic() - self.started_at
            return True
        return False

    def wait_ready(self, timeout: float = DEFAULT_START_TIMEOUT, poll: float = 0.5) -> float:
        """Poll until ready; return the seconds since start(). Raise EngineStartError."""
        _wait_all([self], timeout, poll)
        assert self.ready_after is not None
        return self.ready_after

    def stop(self, grace: float = 15.0) -> int | None:
        """SIGTERM the server's process group, SIGKILL it after `grace` s; return the exit code."""
        _LIVE.discard(self)
        proc = self.proc
        if proc is None:
            return None
        pgid = proc.pid  # start_new_session: the group id is the leader's pid
        if proc.poll() is None:
            _signal_group(pgid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
        # The engine core and other children live in the same group; make sure none survive.
        _signal_group(pgid, signal.SIGKILL if _group_alive(pgid) else 0)
        if proc.poll() is None:
            proc.wait(timeout=10)
        return proc.returncode

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def metrics_text(self, timeout: float = 5.0) -> str:
        with _OPENER.open(self.base_url + "/metrics", timeout=timeout) as resp:
            return resp.read().decode()

    def __enter__(self) -> VLLMServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive() else "stopped"
        return f"<VLLMServer {self.base_url} pid={self.pid} {state}>"


def start_all(
    servers: Iterable[VLLMServer], timeout: float = DEFAULT_START_TIMEOUT, poll: float = 0.5
) -> list[float]:
    """Launch every server, then wait for all of them (polled side by side, so each one's
    start-up time is its own); return those times. On any failure stop them all and raise."""
    servers = list(servers)
    try:
        for server in servers:
            server.start()
        _wait_all(servers, timeout, poll)
    except BaseException:
        stop_all(servers)
        raise
    return [s.ready_after for s in servers]  # type: ignore[misc]


def _wait_all(servers: list[VLLMServer], timeout: float, poll: float) -> None:
    deadline = time.monotonic() + timeout
    pending = list(servers)
    while True:
        pending = [s for s in pending if not s.check_ready()]
        if not pending:
            return
        if time.monotonic() >= deadline:
            for s in pending:
                s.stop()
            raise EngineStartError(
                "\n\n".join(
                    f"vLLM on port {s.port} not healthy after {timeout:.0f} s;"
                    f" log {s.log_path}:\n{s.log_tail()}"
                    for s in pending
                )
            )
        time.sleep(poll)


def stop_all(servers: Iterable[VLLMServer]) -> None:
    for server in servers:
        server.stop()


def _die_with_parent() -> None:
    """In the child before exec: ask Linux for SIGTERM when the starting thread dies."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _signal_group(pgid: int, sig: int) -> None:
    if sig == 0:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
