"""Runs the whole portal on one machine: two simulated engines, a Celery worker, the gateway."""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from fairness.demo.default_tiers import ensure_default_tiers
from fairness.models import Replica, Tier
from fairness.portal import actions

CAST = (("alice", "interactive"), ("bob", "interactive"), ("carol", "batch"))


class Command(BaseCommand):
    help = "Start two enginesim replicas, a Celery worker with beat, and the gateway."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000, help="The gateway's port.")
        parser.add_argument("--engine-ports", default="8101,8102")
        parser.add_argument("--model", default="demo")
        parser.add_argument("--speed", type=float, default=1.0, help="enginesim speed factor")
        parser.add_argument("--traffic", action=argparse.BooleanOptionalAction, default=True,
                            help="Run demo traffic (alice and bob chat, carol runs a batch job) "
                                 "so the capacity page moves; --no-traffic for a quiet portal.")

    def handle(self, *args, port, engine_ports, model, speed, traffic, **options):
        call_command("migrate", verbosity=0)
        log_dir = Path(settings.BASE_DIR) / "var" / "demo-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        children: list[subprocess.Popen] = []

        def start(name: str, command: list[str], env: dict[str, str] | None = None) -> None:
            log = open(log_dir / f"{name}.log", "ab")  # noqa: SIM115  (the child writes to it until stopped)
            children.append(subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **(env or {})},
            ))

        try:
            for index, engine_port in enumerate(int(p) for p in engine_ports.split(",")):
                name = f"sim-{chr(ord('a') + index)}"
                start(name, [sys.executable, "-m", "enginesim", "--port", str(engine_port),
                             "--model", model, "--max-num-seqs", "8", "--speed", str(speed)])
                self._register(name, f"http://127.0.0.1:{engine_port}", model)
            start("celery", [sys.executable, "-m", "celery", "-A", "gpuportal", "worker", "-B",
                             "--loglevel", "INFO", "--concurrency", "2",
                             "--schedule", str(log_dir / "celerybeat-schedule")])
            start("gateway", [sys.executable, "-m", "uvicorn", "gpuportal.asgi:application",
                              "--host", "127.0.0.1", "--port", str(port), "--lifespan", "on"])
            self._wait_until_up(f"http://127.0.0.1:{port}/v1/models", children)
            keys = self._introduce(port, model, log_dir)
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
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            while all(child.poll() is None for child in children):
                time.sleep(1)
            raise CommandError(f"A demo process exited; see the logs in {log_dir}")
        except KeyboardInterrupt:
            self.stdout.write("\nStopping the demo ...")
        finally:
            for child in children:
                if child.poll() is None:
                    os.killpg(child.pid, signal.SIGTERM)
            for child in children:
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, signal.SIGKILL)

    def _register(self, name: str, url: str, model: str) -> None:
        Replica.objects.update_or_create(
            name=name, defaults={"base_url": url, "model": model, "max_num_seqs": 8, "enabled": True}
        )

    def _wait_until_up(self, url: str, children: list[subprocess.Popen]) -> None:
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

    def _introduce(self, port: int, model: str, log_dir: Path) -> dict[str, str]:
        tiers = ensure_default_tiers(Tier)
        User = get_user_model()
        actor = actions.command_line_actor()  # this process's own command line: manage.py demo
        keys = {}
        for username, tier in CAST:
            user = User.objects.filter(username=username).first() or actions.create_user(actor, username)
            _, keys[username] = actions.issue(actor, user, tiers[tier], label="demo")
        admin_password = secrets.token_urlsafe(12)
        admin, _ = User.objects.get_or_create(username="admin", defaults={"is_staff": True, "is_superuser": True})
        admin.is_staff = admin.is_superuser = True
        admin.set_password(admin_password)
        admin.save()
        base = f"http://127.0.0.1:{port}"
        self.stdout.write(self.style.SUCCESS(f"\ngpuportal is running at {base}/"))
        self.stdout.write(f"  Capacity page    {base}/capacity/")
        self.stdout.write(f"  OpenAI endpoint  {base}/v1   (model '{model}')")
        self.stdout.write(f"  Staff pages      {base}/staff/keys/   user admin, password {admin_password}")
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
