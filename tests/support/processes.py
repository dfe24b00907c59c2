"""Starting the suite's processes: a free loopback port, the directory their logs go to, the
environment a gateway (or a worker) runs with, and a gateway over the test database."""

from __future__ import annotations

import socket
from pathlib import Path

from django.conf import settings

from tests.support.gateway_process import GatewayProcess
from tests.support.redis_db import TEST_REDIS_URL

LOG_DIR = Path(settings.BASE_DIR) / "var" / "test-logs"
# The suite's SECRET_KEY (tests/settings.py), read before any test can override it: every process
# the suite starts signs and checks sessions with this one, as the test process does.
SUITE_SECRET_KEY = settings.SECRET_KEY


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gateway_env(db_url: str, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": db_url,
        "REDIS_URL": TEST_REDIS_URL,
        # Every request sees the latest config, so a test never races the gateway's caches.
        "GP_AUTH_EPOCH_CHECK_SECONDS": "0",
        "GP_HEALTH_INTERVAL_SECONDS": "0.5",
        "DJANGO_SETTINGS_MODULE": "gpuportal.settings",
        # Production settings refuse to start without one (tests/settings.py sets ours); and a
        # key file the test process's environment names must not take its place.
        "SECRET_KEY": SUITE_SECRET_KEY,
        "SECRET_KEY_FILE": "",
        **extra,
    }


def start_gateway(db_url: str, name: str = "gateway", **extra: str) -> GatewayProcess:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        port = free_port()
        try:
            return GatewayProcess(port, gateway_env(db_url, **extra), LOG_DIR / f"{name}-{port}.log")
        except AssertionError as exc:
            # The free port can be taken by another test's process before the gateway binds it.
            if "address already in use" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")
