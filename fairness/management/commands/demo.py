"""Runs the whole portal on one machine: two simulated engines, a Celery worker, the gateway."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fairness.actions.audit import command_line_actor
from fairness.actions.keys import issue, revoke
from fairness.actions.users import create_user
from fairness.demo.default_tiers import ensure_default_tiers
from fairness.models import ApiKey, Replica, Tier

CAST = (("alice", "interactive"), ("bob", "interactive"), ("carol", "batch"))
DEMO_LABEL = "demo"
# Every demo process is gone this long after Ctrl-C or SIGTERM: first asked (SIGTERM), then,
# past STOP_PATIENCE_SECONDS, killed with its whole process group.
STOP_PATIENCE_SECONDS = 5.0
STOP_DEADLINE_SECONDS = 8.0


class _Stop(Exception):
    """Ctrl-C or SIGTERM: stop the demo."""


def _die_with_parent() -> None:
    """In a child, before exec: SIGTERM when the demo itself dies, even by SIGKILL (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def stop_all(children: list[subprocess.Popen[bytes]], patience: float = STOP_PATIENCE_SECONDS,
             deadline: float = STOP_DEADLINE_SECONDS) -> None:
    """Stop every child and everything it started (each child leads a process group of its own):
    SIGTERM to all groups at once, SIGKILL to those still there after `patience` seconds."""
    started = time.monotonic()
    for child in children:
        _signal_group(child.pid, signal.SIGTERM)
    killed = False
    while True:
        for child in children:
            child.poll()  # reaps an exited leader, which otherwise keeps its group alive as a zombie
        alive = [child for child in children if _group_alive(child.pid)]
        if not alive:
            return
        elapsed = time.monotonic() - started
        if elapsed > deadline:
            return
        if elapsed > patience and not killed:
            for child in alive:
                _signal_group(child.pid, signal.SIGKILL)
            killed = True
        time.sleep(0.05)


class Command(BaseCommand):
    help = "Start two enginesim replicas and an embedding one, a Celery worker with beat, and the gateway."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="The gateway's port.")
        parser.add_argument("--engine-ports", default="8101,8102")
        parser.add_argument("--model", default="demo")
        parser.add_argument("--embedding-port", type=int, default=8103, help="The embedding replica's port.")
        parser.add_argument("--embedding-model", default="demo-embed")
        parser.add_argument("--speed", type=float, default=1.0, help="enginesim speed factor")
        parser.add_argument("--log-dir", default=None, help="Where the processes log (default var/demo-logs).")
        parser.add_argument("--traffic", action=argparse.BooleanOptionalAction, default=True,
                            help="Run demo traffic (alice and bob chat, carol runs a batch job) "
                                 "so the capacity page moves; --no-traffic for a quiet portal.")

    def handle(self, *args: Any, port: int, engine_ports: str, model: str, speed: float, traffic: bool,
               log_dir: str | None, embedding_port: int, embedding_model: str, **options: Any) -> None:
        # Ctrl-C and SIGTERM stop the demo from here on, whether one arrives or several: `make`
        # passes a SIGTERM on to us, and a Ctrl-C reaches us and `make` together.
        stopping = False

        def on_signal(signum: int, frame: FrameType | None) -> None:
            nonlocal stopping
            if stopping:
                return  # a repeat while the demo stops: it is already stopping, as fast as it can
            stopping = True
            raise _Stop

        previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {
            signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        }
        children: list[subprocess.Popen[bytes]] = []
        try:
            self._run(children, port, engine_ports, model, speed, traffic, log_dir, (embedding_port, embedding_model))
        except _Stop:
            pass
        except KeyboardInterrupt:  # a Ctrl-C before our handler was in place
            pass
        finally:
            stopping = True  # from here on a signal changes nothing: the stopping must not be cut short
            if children:
                self.stdout.write("\nStopping the demo ...")
            stop_all(children)
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _run(self, children: list[subprocess.Popen[bytes]], port: int, engine_ports: str, model: str,
             speed: float, traffic: bool, log_dir_option: str | None, embedder: tuple[int, str]) -> None:
        call_command("migrate", verbosity=0)
        # Hashed, compressed static files, as in production: see gpuportal/static_storage.py.
        call_command("collectstatic", interactive=False, verbosity=0)
        log_dir = Path(log_dir_option or Path(settings.BASE_DIR) / "var" / "demo-logs")
        log_dir.mkdir(parents=True, exist_ok=True)

        def start(name: str, command: list[str], env: dict[str, str] | None = None) -> None:
            log = open(log_dir / f"{name}.log", "ab")  # noqa: SIM115  (the child writes to it until stopped)
            # A session of its own, so each child and whatever it starts (Celery's pool, uvicorn's
            # workers) is one process group to stop; and it dies with the demo should the demo die.
            children.append(subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=_die_with_parent,  # noqa: PLW1509  (no threads yet)
                env={**os.environ, **(env or {})},
            ))
            log.close()  # the child has its own copy

        for index, engine_port in enumerate(int(p) for p in engine_ports.split(",")):
            name = f"sim-{chr(ord('a') + index)}"
            start(name, [sys.executable, "-m", "enginesim", "--port", str(engine_port),
                         "--model", model, "--max-num-seqs", "8", "--speed", str(speed),
                         "--enable-prompt-tokens-details"])  # cached prompt tokens are charged less
            self._register(name, f"http://127.0.0.1:{engine_port}", model)
        embedding_port, embedding_model = embedder
        start("sim-embed", [sys.executable, "-m", "enginesim", "--port", str(embedding_port),
                            "--model", embedding_model, "--runner", "pooling", "--max-num-seqs", "8",
                            "--speed", str(speed)])
        self._register("sim-embed", f"http://127.0.0.1:{embedding_port}", embedding_model, Replica.ModelKind.EMBEDDING)
        start("celery", [sys.executable, "-m", "celery", "-A", "gpuportal", "worker", "-B",
                         "--loglevel", "INFO", "--concurrency", "2",
                         "--schedule", str(log_dir / "celerybeat-schedule")])
        # Batches (/v1/batches) on a worker of their own: a runner holds its process for a while.
        start("batch-worker", [sys.executable, "-m", "celery", "-A", "gpuportal", "worker", "--queues", "batches",
                               "--pool", "solo", "--concurrency", "1", "--loglevel", "INFO", "-n", "batches@%h"])
        # Requests in flight get a short grace when the demo stops (production's is 30 s). The
        # production protocol: its limits on slow and oversized requests hold in the demo too.
        start("gateway", [sys.executable, "-m", "uvicorn", "gpuportal.asgi:application",
                          "--host", "127.0.0.1", "--port", str(port), "--lifespan", "on",
                          "--http", "fairness.gateway.http_server:GatewayHttpProtocol",
                          "--limit-concurrency", "1024"],
              env={"GP_SHUTDOWN_GRACE_SECONDS": os.environ.get("GP_SHUTDOWN_GRACE_SECONDS", "2")})
        self._wait_until_up(f"http://127.0.0.1:{port}/v1/models", children)
        keys = self._introduce(port, model, embedding_model, log_dir)
        if traffic:
            # Keys travel in the environment, not the command line, so `ps` does not show them.
            manage = str(Path(settings.BASE_DIR) / "manage.py")
            start("traffic", [sys.executable, manage, "demo_traffic",
                              "--url", f"http://127.0.0.1:{port}", "--model", model],
                  env={"GP_TRAFFIC_KEYS": f"{keys['alice']},{keys['bob']}",
                       "GP_TRAFFIC_BATCH_KEYS": keys["carol"]})
            self.stdout.write(f"Demo traffic: alice and bob chat, carol runs a batch job "
                              f"({log_dir}/traffic.log); --no-traffic for a quiet portal.")
        self.stdout.write("Press Ctrl-C to stop.")
        self.stdout.flush()
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
        raise CommandError(f"A demo process exited; see the logs in {log_dir}")

    def _register(self, name: str, url: str, model: str, kind: str = Replica.ModelKind.CHAT) -> None:
        Replica.objects.update_or_create(
            name=name,
            defaults={"base_url": url, "model": model, "model_kind": kind, "max_num_seqs": 8, "enabled": True},
        )

    def _wait_until_up(self, url: str, children: list[subprocess.Popen[bytes]]) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(child.poll() is not None for child in children):
                raise CommandError("A demo process failed to start; see var/demo-logs/")
            try:
                if httpx.get(url, timeout=1).status_code == 401:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise CommandError("The gateway did not come up within 60 s; see var/demo-logs/gateway.log")

    def _introduce(self, port: int, model: str, embedding_model: str, log_dir: Path) -> dict[str, str]:
        tiers = ensure_default_tiers(Tier)
        User = get_user_model()
        actor = command_line_actor()  # this process's own command line: manage.py demo
        keys = {}
        for username, tier in CAST:
            user = User.objects.filter(username=username).first() or create_user(actor, username)
            # A re-run's keys replace the last run's: the demo's keys never pile up.
            for old in ApiKey.objects.filter(owner=user, label=DEMO_LABEL, revoked_at__isnull=True):
                revoke(actor, old)
            _, keys[username] = issue(actor, user, tiers[tier], label=DEMO_LABEL)
        admin, created = User.objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        admin_password = None
        if created or not admin.has_usable_password():
            # Only the first run sets it: a password changed since then is the user's own.
            admin_password = secrets.token_urlsafe(12)
            admin.is_staff = admin.is_superuser = True
            admin.set_password(admin_password)
            admin.save()
        signing_in = (f"user admin, password {admin_password}" if admin_password else
                      "user admin, password as set before (`manage.py changepassword admin` sets a new one)")
        base = f"http://127.0.0.1:{port}"
        self.stdout.write(self.style.SUCCESS(f"\ngpuportal is running at {base}/"))
        self.stdout.write(f"  Capacity page    {base}/capacity/")
        self.stdout.write(f"  OpenAI endpoint  {base}/v1   (model '{model}'; embeddings: '{embedding_model}')")
        self.stdout.write(f"  Staff pages      {base}/staff/   {signing_in}")
        self.stdout.write(f"  Django admin     {base}/admin/   (raw edits, same user)")
        self.stdout.write(f"  Logs             {log_dir}/")
        for username, tier in CAST:
            self.stdout.write(f"  {username:<6} {tier:<12} {keys[username]}")
        self.stdout.write("\nTry it:\n")
        self.stdout.write(
            f"  curl -s {base}/v1/chat/completions -H 'Authorization: Bearer {keys['alice']}' "
            f"-H 'Content-Type: application/json' "
            f"""-d '{{"model": "{model}", "messages": [{{"role": "user", "content": "Hello"}}]}}'\n"""
        )
        return keys
