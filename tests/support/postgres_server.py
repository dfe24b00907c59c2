"""A private PostgreSQL server of a test's own, that the test may stop and start again: a data
directory made with initdb in a temporary directory, trust authentication, listening on a free
loopback port (the same one after a restart) and on a socket in that directory. The suite's own
server (DATABASE_URL, port 5432 in CI) is never touched."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from tests.support.gateway_process import ROOT
from tests.support.processes import free_port

BIN = Path(os.environ.get("GP_TEST_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))
DATABASE = "gpuportal"


class PrivatePostgres:
    def __init__(self) -> None:
        if not (BIN / "initdb").is_file():
            pytest.skip(f"PostgreSQL's server binaries are not in {BIN} (GP_TEST_POSTGRES_BIN names them)")
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="gp-postgres-"))
        self.data = self.dir / "data"
        self.log_path = self.dir / "server.log"
        # PostgreSQL will not run as root: there, its binaries run as the postgres user.
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user is not None:
            owner = pwd.getpwnam(self._user)
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
        self._run(BIN / "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")
        self.running = False

    def url(self, database: str = DATABASE) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> PrivatePostgres:
        """Start it (again) and return once it accepts connections (pg_ctl -w waits for that)."""
        options = (f"-k {self.dir} -c listen_addresses=127.0.0.1 -p {self.port} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        self._run(BIN / "pg_ctl", "-D", str(self.data), "-l", str(self.log_path), "-w", "-t", "30",
                  "-o", options, "start")
        self.running = True
        return self

    def stop(self) -> None:
        """Stop it as an operator's fast shutdown does: its sessions are ended, no new one is taken."""
        self._run(BIN / "pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")
        self.running = False

    def create_database(self, name: str = DATABASE) -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')

    def migrate(self, env: dict[str, str]) -> None:
        """The portal's migrations, run as a deployment runs them, into the database `env` names."""
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT,
                       env={**os.environ, **env}, check=True, capture_output=True, timeout=300)

    def rows(self, sql: str) -> list[tuple]:
        with psycopg.connect(self.url(), connect_timeout=5) as connection:
            return connection.execute(sql).fetchall()  # type: ignore[arg-type]

    def destroy(self) -> None:
        if self.running:
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _run(self, *command: str | Path) -> None:
        result = subprocess.run([str(part) for part in command], user=self._user, cwd=self.dir,
                                capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, command))} failed:\n{result.stdout}{result.stderr}")
