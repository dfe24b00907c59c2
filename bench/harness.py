"""A throwaway portal for benchmarks: a temporary SQLite file, a dedicated Redis database,
enginesim replicas and real gateway processes (uvicorn), torn down on exit.

    with portal(members={"alice": "interactive", "carol": "batch"},
                engines=[EngineSpec(max_num_seqs=8, speed=4)]) as p:
        p.gateway_url()            # "http://127.0.0.1:PORT" of gateway 0
        p.engines[0].url           # straight to the engine, bypassing the gateway
        p.members["alice"].secret  # the key to send

Every member charges an account of their own (shares 1, at the top of the fair-share tree) unless
``accounts`` places them: ``accounts={"lab": AccountSpec(shares=3, members=("alice",))}``.

Django can be configured only once per process, so the first portal fixes the database file and
the Redis database for the whole run; every later portal wipes and re-seeds them. Redis is a
private redis-server on a free loopback port unless a ``redis_url`` is given (its database is
flushed: pick one nobody else uses; the test suites running beside us flush theirs per test). The harness
itself uses the ORM (keys, tiers, replicas); the gateways are child processes reading the same
file through ``DATABASE_URL``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from enginesim.process import EngineSimProcess, pick_free_port, start_enginesim

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
LOGS = RESULTS / "logs"
EPOCH_CHECK_SECONDS = 0.25  # how often gateways look for config changes (tier edits mid-run)


@dataclass(frozen=True)
class Member:
    username: str
    tier: str
    secret: str
    key_id: int
    association: str = ""  # the fair-share association its key charges (a Membership pk)
    user_id: int = 0

    @property
    def unit(self) -> str:
        """What admission's live counts are keyed by: the person in the tier (scheduling/units.py)."""
        return f"p{self.user_id}.{self.tier}"


@dataclass(frozen=True)
class AccountSpec:
    """A fair-share account: its shares among its siblings, its parent account's name (None: the
    top of the tree) and the members whose keys charge it (each member's default association)."""

    shares: int = 1
    members: tuple[str, ...] = ()
    parent: str | None = None


@dataclass(frozen=True)
class EngineSpec:
    max_num_seqs: int = 8
    speed: float = 1.0
    scheduling_policy: str = "fcfs"
    extra_args: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        return ["--speed", str(self.speed), "--scheduling-policy", self.scheduling_policy,
                *self.extra_args]


@dataclass
class _Workspace:
    tmpdir: str
    database_url: str
    redis_url: str


_workspace: _Workspace | None = None


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def cleanup_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt so ``with`` blocks stop the child processes."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


def private_redis(timeout: float = 10.0) -> str:
    """Start a redis-server of our own on a free loopback port (stopped when this process
    exits) and return its URL. Shared Redis databases get flushed by concurrent test runs."""
    import redis

    executable = shutil.which("redis-server")
    if executable is None:
        raise RuntimeError("redis-server is not installed; pass --redis-url instead")
    port = pick_free_port()
    process = subprocess.Popen(
        [executable, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--protected-mode", "yes", "--loglevel", "warning"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )

    def stop() -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    atexit.register(stop)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                if client.ping():
                    return url
            except redis.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                stop()
                raise RuntimeError(f"redis-server on port {port} did not start")
            time.sleep(0.05)
    finally:
        client.close()


def setup_django(redis_url: str | None = None) -> _Workspace:
    """Point this process (and its children) at a fresh database and a Redis database we may
    flush (``redis_url``, or a private redis-server when None); once per process."""
    global _workspace
    if _workspace is not None:
        if redis_url is not None and redis_url != _workspace.redis_url:
            raise RuntimeError("the harness is already set up with another Redis database")
        return _workspace
    cleanup_on_sigterm()
    tmpdir = tempfile.mkdtemp(prefix="gpuportal-bench-")
    atexit.register(shutil.rmtree, tmpdir, True)
    workspace = _Workspace(
        tmpdir=tmpdir,
        database_url=f"sqlite:///{tmpdir}/bench.sqlite3",
        redis_url=redis_url or private_redis(),
    )
    # Before django.setup(): settings read these once. Children inherit them.
    os.environ["DATABASE_URL"] = workspace.database_url
    os.environ["REDIS_URL"] = workspace.redis_url
    os.environ["CELERY_BROKER_URL"] = workspace.redis_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "gpuportal.settings"
    # The settings refuse to start without a key; a throwaway one fits a throwaway database.
    os.environ.setdefault("SECRET_KEY", secrets.token_hex(32))
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
                   cwd=ROOT, check=True)
    import django

    django.setup()
    _workspace = workspace
    return workspace


def flush_redis(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()


def _reset_tables(tiers: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from fairness.demo.default_tiers import DEFAULT_TIERS
    from fairness.models import Account, ApiKey, Replica, Tier, UsageRecord

    UsageRecord.objects.all().delete()
    ApiKey.objects.all().delete()
    Replica.objects.all().delete()
    get_user_model().objects.all().delete()  # their memberships go with them
    # An earlier portal's accounts would stay in the tree and dilute every normalised share.
    # Parents are protected: unhook them first.
    Account.objects.exclude(parent=None).update(parent=None)
    Account.objects.all().delete()
    Tier.objects.all().delete()
    rows = {}
    for fields in DEFAULT_TIERS:
        rows[fields["name"]] = Tier.objects.create(**{**fields, **tiers.get(fields["name"], {})})
    for name, fields in tiers.items():
        if name not in rows:
            rows[name] = Tier.objects.create(name=name, **fields)
    for row in rows.values():
        row.full_clean()
    return rows


def _issue_keys(members: Mapping[str, str], tiers: Mapping[str, Any],
                accounts: Mapping[str, AccountSpec]) -> dict[str, Member]:
    from django.contrib.auth import get_user_model

    from fairness.actions.keys import issue_key
    from fairness.models import Account, Membership

    rows = {name: Account.objects.create(name=name, shares=spec.shares)
            for name, spec in accounts.items()}
    for name, spec in accounts.items():  # parents once every account exists
        if spec.parent is not None:
            rows[name].parent = rows[spec.parent]
            rows[name].full_clean()
            rows[name].save(update_fields=["parent"])
    placed = {user: name for name, spec in accounts.items() for user in spec.members}
    issued = {}
    for username, tier_name in members.items():
        user = get_user_model().objects.create(username=username)
        if username in placed:
            Membership.objects.create(account=rows[placed[username]], user=user, is_default=True)
        # Unplaced members get an account of their own (default_membership).
        key, secret = issue_key(user, tiers[tier_name], label=f"bench {username}")
        issued[username] = Member(username, tier_name, secret, key.pk, str(key.membership_id), key.owner_id)
    return issued


@dataclass
class Portal:
    model: str
    members: dict[str, Member]
    engines: list[EngineSimProcess]
    gateways: list[Any]  # tests.support.gateway_process.GatewayProcess
    redis_url: str
    database_url: str
    notes: list[str] = field(default_factory=list)

    def gateway_url(self, index: int = 0) -> str:
        return str(self.gateways[index].url)

    def gateway_urls(self) -> list[str]:
        return [str(g.url) for g in self.gateways]

    def secret(self, username: str) -> str:
        return self.members[username].secret

    def set_tier(self, name: str, **fields: Any) -> None:
        """Edit a tier mid-run; returns once every gateway has had time to see the change."""
        from fairness.models import Tier

        tier = Tier.objects.get(name=name)
        for attr, value in fields.items():
            setattr(tier, attr, value)
        tier.full_clean()
        tier.save(update_fields=list(fields))  # the post_save signal bumps the config epoch
        time.sleep(EPOCH_CHECK_SECONDS * 2 + 0.1)

    def logs(self, lines: int = 20) -> str:
        return "\n".join(f"--- {g.log_path}\n{g.log_tail(lines)}" for g in self.gateways)


def _start_gateway(env: Mapping[str, str], name: str) -> Any:
    from tests.support.gateway_process import GatewayProcess

    LOGS.mkdir(parents=True, exist_ok=True)
    port = pick_free_port()
    return GatewayProcess(port, dict(env), LOGS / f"{name}-{port}.log")


@contextlib.contextmanager
def portal(
    *,
    members: Mapping[str, str],
    engines: Sequence[EngineSpec] = (EngineSpec(),),
    gateways: int = 1,
    tiers: Mapping[str, Mapping[str, Any]] | None = None,
    model: str = "sim",
    redis_url: str | None = None,
    redis_db: int | None = None,
    gateway_env: Mapping[str, str] | None = None,
    worker: bool = False,
    accounts: Mapping[str, AccountSpec] | None = None,
) -> Iterator[Portal]:
    """A portal with ``members`` (username -> tier name), default tiers edited by ``tiers``
    (tier name -> field overrides; unknown names create tiers), fair-share ``accounts`` (name ->
    spec; members not placed in one get their own), one enginesim per spec and
    ``gateways`` gateway processes. ``worker`` adds a Celery worker with beat. Redis:
    ``redis_url``, or database ``redis_db`` of the Redis on 6379, or (neither) a private
    redis-server; whichever, it is flushed."""
    if redis_url is None and redis_db is not None:
        redis_url = f"redis://127.0.0.1:6379/{redis_db}"
    workspace = setup_django(redis_url)
    flush_redis(workspace.redis_url)
    from fairness.models import Replica

    rows = _reset_tables(tiers or {})
    issued = _issue_keys(members, rows, accounts or {})
    env = {
        "DATABASE_URL": workspace.database_url,
        "REDIS_URL": workspace.redis_url,
        "CELERY_BROKER_URL": workspace.redis_url,
        "DJANGO_SETTINGS_MODULE": "gpuportal.settings",
        "GP_AUTH_EPOCH_CHECK_SECONDS": str(EPOCH_CHECK_SECONDS),
        "LOG_LEVEL": "WARNING",
        **(gateway_env or {}),
    }
    with contextlib.ExitStack() as stack:
        stack.callback(flush_redis, workspace.redis_url)  # runs last: after the processes stop
        sims: list[EngineSimProcess] = []
        for i, spec in enumerate(engines):
            sim = start_enginesim(model=model, max_num_seqs=spec.max_num_seqs,
                                  extra_args=spec.argv())
            stack.callback(sim.stop)
            sims.append(sim)
            Replica.objects.create(name=f"sim-{i}", base_url=sim.url, model=model,
                                   max_num_seqs=spec.max_num_seqs,
                                   scheduling_policy=spec.scheduling_policy)
        procs = []
        for i in range(gateways):
            gateway = _start_gateway(env, f"gateway{i}")
            stack.callback(gateway.stop)
            procs.append(gateway)
        if worker:
            from tests.support.worker_process import WorkerProcess

            LOGS.mkdir(parents=True, exist_ok=True)
            process = WorkerProcess(env, LOGS / f"worker-{pick_free_port()}.log")
            stack.callback(process.stop)
        yield Portal(model=model, members=issued, engines=sims, gateways=procs,
                     redis_url=workspace.redis_url, database_url=workspace.database_url)
