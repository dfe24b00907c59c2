"""Redis behind Sentinel on loopback: a master, one replica and sentinels (three by default),
each a real redis-server. `stop(SIGKILL)` kills the master; `start()` returns once a sentinel
names a master that answers as one (the first time: once the sentinels watch it together).
`remonitor()` moves the sentinels to another master at once, with no election."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from enginesim.process import pick_free_port
from tests.support.polling import wait_for

MASTER_NAME = "gp"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000


class SentinelRedis:
    def __init__(self, sentinels: int = 3, quorum: int = 2) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RuntimeError("redis-server is not installed")
        self.executable = executable
        self.directory = Path(tempfile.mkdtemp(prefix="sentinels-"))  # Sentinel rewrites its config
        self.nodes = [pick_free_port(), pick_free_port()]  # the master first, then the replica
        self.sentinel_ports = [pick_free_port() for _ in range(sentinels)]
        self.quorum = quorum
        self.master = self.nodes[0]
        self.port = self.master  # names the run's log files, as ChaosRedis's port does
        self.url = f"redis://127.0.0.1:{self.master}/0"  # its database only: the address comes from the sentinels
        self.sentinels = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.killed: int | None = None

    def start(self) -> float:
        """Start what is missing; the moment (time.monotonic) the sentinels named a master that
        answers as one, other than the one killed."""
        if not self.processes:
            self._node(self.nodes[0])
            self._node(self.nodes[1], replica_of=self.nodes[0])
            wait_for(lambda: self._info(self.nodes[1], "master_link_status") == "up", timeout=10,
                     what="the replica to sync")
            for port in self.sentinel_ports:
                self._sentinel(port)
            wait_for(self._watched_together, timeout=20, what="the sentinels to know each other and the replica")
        at = float(wait_for(self._promoted_at, timeout=30, interval=0.01, what="a master the sentinels name"))
        if self.killed is not None:  # back as a replica of the new master, as an operator would
            self._node(self.killed, replica_of=self.master)
            self.killed = None
        return at

    def stop(self, how: signal.Signals = signal.SIGTERM) -> None:
        """Stop the current master (as a crash with SIGKILL)."""
        process = self.processes.pop(self.master, None)
        if process is not None:
            process.send_signal(how)
            process.wait(10)
            self.killed = self.master

    def stop_all(self) -> None:
        for process in self.processes.values():
            with contextlib.suppress(Exception):
                process.terminate()
                process.wait(10)
        self.processes.clear()
        shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", port) for port in self.sentinel_ports]

    def remonitor(self) -> int:
        """Promote the replica by hand and point every sentinel at it (no election, no waiting
        for down-after); the old master becomes its replica with its clients still connected,
        as a demoted master is. Returns the new master's port."""
        old, new = self.master, next(port for port in self.nodes if port != self.master)
        replica = redis.Redis(port=new)
        wait_for(lambda: replica.info("replication")["master_repl_offset"]
                 >= redis.Redis(port=old).info("replication")["master_repl_offset"], timeout=10,
                 what="the replica to catch up")
        replica.execute_command("REPLICAOF", "NO", "ONE")
        redis.Redis(port=old).execute_command("REPLICAOF", "127.0.0.1", str(new))
        for port in self.sentinel_ports:
            sentinel = redis.Redis(port=port)
            sentinel.execute_command("SENTINEL", "REMOVE", MASTER_NAME)
            sentinel.execute_command("SENTINEL", "MONITOR", MASTER_NAME, "127.0.0.1", str(new), str(self.quorum))
        self.master = new
        return new

    def _node(self, port: int, replica_of: int | None = None) -> None:
        # In a directory of its own: a replica keeps what it synced as dump.rdb there, which a
        # server started in the same directory would load.
        command = [self.executable, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                   "--loglevel", "warning", "--dir", str(self.directory)]
        if replica_of is not None:
            command += ["--replicaof", "127.0.0.1", str(replica_of)]
        self.processes[port] = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self._answers(port), timeout=10, interval=0.01, what=f"redis-server on {port}")

    def _sentinel(self, port: int) -> None:
        conf = self.directory / f"sentinel-{port}.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.nodes[0]} {self.quorum}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
        )
        self.processes[port] = subprocess.Popen(
            [self.executable, str(conf), "--sentinel"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self._answers(port), timeout=10, interval=0.01, what=f"sentinel on {port}")

    def _watched_together(self) -> bool:
        for port in self.sentinel_ports:
            state = redis.Redis(port=port, decode_responses=True).sentinel_master(MASTER_NAME)
            if int(state["num-other-sentinels"]) < len(self.sentinel_ports) - 1 or int(state["num-slaves"]) < 1:
                return False
        return True

    def _promoted_at(self) -> float | None:
        """Now, if any sentinel names a master that answers as one (the first to learn of the
        promotion does so up to a hello interval before the others)."""
        for port in self.sentinel_ports:
            try:
                address = redis.Redis(port=port, socket_timeout=0.5).sentinel_get_master_addr_by_name(MASTER_NAME)
                if not address or address[1] == self.killed:
                    continue
                role = redis.Redis(port=address[1], socket_timeout=0.5).execute_command("ROLE")
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                continue
            if role[0] in (b"master", "master"):
                self.master = address[1]
                return time.monotonic()
        return None

    def _info(self, port: int, field: str) -> str | None:
        with contextlib.suppress(redis.exceptions.ConnectionError):
            return str(redis.Redis(port=port, decode_responses=True).info("replication").get(field))
        return None

    @staticmethod
    def _answers(port: int) -> bool:
        client = redis.Redis(port=port, socket_connect_timeout=0.2)
        try:
            return bool(client.ping())
        except redis.exceptions.ConnectionError:
            return False
        finally:
            client.close()
