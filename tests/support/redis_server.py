"""A private redis-server of a test's own, on a port that survives a restart."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import redis

from tests.support.polling import wait_for
from tests.support.processes import free_port


class PrivateRedis:
    def __init__(self, password: str | None = None) -> None:
        self.executable = shutil.which("redis-server")
        if self.executable is None:
            pytest.skip("redis-server is not installed")
        self.port = free_port()
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0, password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"redis://{':' + secret + '@' if secret else ''}127.0.0.1:{self.port}/{db}"

    def start(self) -> PrivateRedis:
        """Start it (again, empty) and return once it answers."""
        assert self.executable is not None
        command = [self.executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--loglevel", "warning"]
        if self.password:
            command += ["--requirepass", self.password]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._answers, timeout=10, what="the private redis-server to answer")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None

    def _answers(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, password=self.password).ping())
        except redis.exceptions.ConnectionError:
            return False
