"""The processes of a chaos run: a private redis-server, enginesim replicas, gateway processes
and a Celery worker, each of which can be killed and started again on the same port.

Nothing here imports tests.conftest (it repoints Django's Redis at the test database on
import): bench/chaos.py runs the same world under the benchmark harness's settings.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from enginesim.process import EngineSimProcess, pick_free_port, start_enginesim
from tests.chaos.scenario import Scenario
from tests.support.gateway_process import GatewayProcess
from tests.support.polling import wait_for
from tests.support.worker_process import WorkerProcess

MODEL = "sim"


class ChaosRedis:
    """A redis-server without persistence: every restart is an empty one."""

    def __init__(self) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RuntimeError("redis-server is not installed")
        self.executable = executable
        self.port = pick_free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start it and return the moment (time.monotonic) it first answered PING."""
        self.process = subprocess.Popen(
            [self.executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--loglevel", "warning"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        return float(wait_for(self._answered_at, timeout=10, interval=0.005, what="redis-server to answer"))

    def _answered_at(self) -> float | None:
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        try:
            return time.monotonic() if client.ping() else None
        except redis.exceptions.ConnectionError:
            return None
        finally:
            client.close()

    def stop(self, how: signal.Signals = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(how)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None


@dataclass
class Key:
    label: str
    tier: str
    secret: str


def create_rows(scenario: Scenario, engine_urls: list[str]) -> dict[str, Key]:
    """Tiers, keys and replicas in the database the gateways will read (Django is set up)."""
    from django.contrib.auth import get_user_model

    from fairness.actions.keys import issue_key
    from fairness.demo.default_tiers import ensure_default_tiers
    from fairness.models import Replica, Tier

    tiers = ensure_default_tiers(Tier)
    # Borrowing lets batch exceed its pool while nobody waits; off, the pool is a cap to check.
    Tier.objects.filter(name="batch").update(borrow_idle_slots=False, pool_concurrency=scenario.pool_cap)
    Tier.objects.update(per_key_concurrency=scenario.per_key_cap)
    tiers = {name: Tier.objects.get(pk=tier.pk) for name, tier in tiers.items()}
    keys = {}
    for label, tier_name in scenario.key_tiers().items():
        user, _ = get_user_model().objects.get_or_create(username=f"chaos-{label}")
        _, secret = issue_key(user, tiers[tier_name], label=label)
        keys[label] = Key(label, tier_name, secret)
    for index, url in enumerate(engine_urls):
        Replica.objects.create(name=replica_name(index), base_url=url, model=MODEL,
                               max_num_seqs=scenario.max_num_seqs)
    return keys


def replica_name(index: int) -> str:
    return f"chaos-{index}"


class World:
    """Every process of the run; `archive` keeps the request logs of engines that were killed."""

    def __init__(self, scenario: Scenario, database_url: str, secret_key: str, log_dir: Path) -> None:
        self.scenario = scenario
        self.log_dir = log_dir
        self.redis = ChaosRedis()
        self.engines: list[EngineSimProcess] = []
        self.gateways: list[GatewayProcess] = []
        self.gateway_up: list[bool] = []
        self.gateway_logs: list[Path] = []
        self.worker: WorkerProcess | None = None
        self.archive: dict[str, list[dict[str, Any]]] = {}
        self.env = {
            "DATABASE_URL": database_url,
            "REDIS_URL": self.redis.url,
            "CELERY_BROKER_URL": self.redis.url,
            "DJANGO_SETTINGS_MODULE": "gpuportal.settings",
            "SECRET_KEY": secret_key,
            "GP_LEASE_TTL_SECONDS": str(scenario.lease_ttl),
            "GP_AUTH_EPOCH_CHECK_SECONDS": "0.5",
            "GP_HEALTH_INTERVAL_SECONDS": "0.5",
            "GP_HEALTH_COOLDOWN_SECONDS": "1",
            "GP_SHUTDOWN_GRACE_SECONDS": "2",
            "GP_USAGE_FLUSH_SECONDS": "0.5",
            "GP_POLL_SECONDS": "1",
        }

    def start_engines(self) -> list[str]:
        for _ in range(self.scenario.replicas):
            self.engines.append(self._engine())
        for index in range(len(self.engines)):
            self.archive[replica_name(index)] = []
        return [engine.url for engine in self.engines]

    def _engine(self, port: int | None = None) -> EngineSimProcess:
        return start_enginesim(port=port, model=MODEL, max_num_seqs=self.scenario.max_num_seqs,
                               extra_args=self.scenario.engine_args())

    def start_processes(self) -> None:
        """The worker and the gateways, once the rows exist (Redis and the engines run already)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.worker = WorkerProcess(self.env, self.log_dir / f"chaos-worker-{self.redis.port}.log")
        for _ in range(self.scenario.gateways):
            self.gateways.append(self._gateway(pick_free_port()))
            self.gateway_up.append(True)

    def _gateway(self, port: int) -> GatewayProcess:
        # A log per incarnation: the restarted process would truncate its predecessor's.
        path = self.log_dir / f"chaos-gateway-{port}-{len(self.gateway_logs)}.log"
        self.gateway_logs.append(path)
        return GatewayProcess(port, self.env, path)

    def unexpected_errors(self) -> int:
        """What the gateways logged as unexpected (not a Redis outage, which logs tracebacks too):
        a failure no client need have seen."""
        marks = ("unexpected gateway error", "proxy request")
        return sum(line.count(mark) for path in self.gateway_logs if path.exists()
                   for line in path.read_text(errors="replace").splitlines() for mark in marks)

    # -- faults (blocking: the driver runs them in a thread)

    def kill_gateway(self, index: int) -> float:
        self.gateway_up[index] = False  # the load balancer stops sending it new requests
        killed_at = time.monotonic()
        self.gateways[index].kill()
        return killed_at

    def restart_gateway(self, index: int) -> float:
        port = self.gateways[index].port
        self.gateways[index].stop()  # closes its log
        self.gateways[index] = self._gateway(port)
        self.gateway_up[index] = True
        return time.monotonic()

    def kill_engine(self, index: int) -> float:
        """SIGKILL, keeping its request log: what it held at the kill ended with the kill."""
        engine = self.engines[index]
        log = engine.requests()  # just before: a killed engine's log dies with it
        killed_at = time.monotonic()
        engine.kill()
        for entry in log:
            if entry["ended"] is None:
                entry["ended"] = killed_at
                entry["outcome"] = "killed"
        self.archive[replica_name(index)] += log
        return killed_at

    def restart_engine(self, index: int) -> float:
        self.engines[index] = self._engine(self.engines[index].port)
        return time.monotonic()

    def engine_logs(self) -> dict[str, list[dict[str, Any]]]:
        """Every request each replica has seen, across its restarts."""
        now = time.monotonic()
        logs = {}
        for index, engine in enumerate(self.engines):
            name = replica_name(index)
            current = engine.requests() if engine.alive() else []
            for entry in current:
                if entry["ended"] is None:
                    entry["ended"] = now  # still running: counts until now
            logs[name] = self.archive[name] + current
        return logs

    def stop(self) -> None:
        for gateway in self.gateways:
            with contextlib.suppress(Exception):
                gateway.stop()
        if self.worker is not None:
            with contextlib.suppress(Exception):
                self.worker.stop()
        for engine in self.engines:
            with contextlib.suppress(Exception):
                engine.stop()
        self.redis.stop()
