"""Shared fixtures: real Redis, the real test database, live gateway processes, the cast."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from asgiref.sync import SyncToAsync
from django.conf import settings
from django.db import connections

from enginesim.process import EngineSimProcess, start_enginesim
from tests.support import flush_retry, network_guard
from tests.support.cast import EMBEDDING_MODEL, MODEL, STAFF_IP, STAFF_PASSWORD, Member
from tests.support.gateway_process import GatewayProcess, database_url
from tests.support.processes import LOG_DIR, SUITE_SECRET_KEY, free_port, gateway_env, start_gateway
from tests.support.redis_db import TEST_REDIS_URL
from tests.support.sentinel_redis import SentinelRedis

TESTS = Path(__file__).parent

# Fixtures several folders use, defined once (a plugin's fixtures are seen by every test).
pytest_plugins = ["tests.support.browser_fixtures"]

# Fixtures that start processes (or a database that processes share): a test that uses any of them,
# however indirectly, is marked `process`, so `make test-quick` can leave it out.
PROCESS_FIXTURES = {"live_db_url", "sim", "gateway_session", "worker", "engine8"}
# Modules (or their folder's conftest.py) that start processes themselves, without those fixtures:
# the calls that do, among them the starters in tests/support (`launch(` starts an enginesim,
# `load_settings(` a Python process that loads the portal's settings).
PROCESS_MODULES = ("PrivateRedis(", "start_enginesim(", "subprocess.", "WorkerProcess(", "start_gateway(",
                   "private_redis(", "Popen(", "launch(", "load_settings(", "PrivatePostgres(")
# Fixtures that give a test the database: such a test is marked `database`. The suite's PostgreSQL
# pass runs those that start no process, and the process tests listed next.
DATABASE_FIXTURES = {"db", "transactional_db", "live_db_url", "django_db_reset_sequences",
                     "django_db_serialized_rollback"}
# Of the tests that start processes, those the PostgreSQL pass runs as well (marked `postgresql`):
# where processes contend for the same rows, so the backend's locks and transactions decide the
# outcome, or where hostile bytes reach the database, which PostgreSQL refuses where SQLite stores
# them, or where the processes are only an identity provider and the database work is this
# process's. The other process tests send the same queries through the same code as the in-process
# tests, which the PostgreSQL pass runs in full.
POSTGRESQL_PROCESS_TESTS = (
    "batches/",  # runners on several workers claim and finish the same lines
    "batch_files/test_hostile_input.py",  # NUL bytes and odd names in uploads
    "batch_files/test_storage_quota.py",  # uploads on several gateways lock their owner's row
    "usage/",  # the flush from several processes into the usage tables
    "people/test_front_end_live.py",  # gateways create the same person at once
    "admin_api/test_schemathesis.py",  # generated bodies, NUL bytes and over-long strings among them
    "oidc/",  # sign-in's accounts and identities; the processes are the provider and one gateway
    "ldap/",  # the directory sync's accounts; the process is slapd
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    sources: dict[Path, bool] = {}
    for item in items:
        path = Path(str(item.path))
        if path not in sources:
            conftest = path.with_name("conftest.py")
            text = path.read_text() + (conftest.read_text() if conftest.is_file() else "")
            sources[path] = any(needle in text for needle in PROCESS_MODULES)
        fixtures = set(getattr(item, "fixturenames", ()))
        if sources[path] or PROCESS_FIXTURES & fixtures:
            item.add_marker(pytest.mark.process)
        if DATABASE_FIXTURES & fixtures or item.get_closest_marker("django_db"):
            item.add_marker(pytest.mark.database)
        if path.is_relative_to(TESTS) and str(path.relative_to(TESTS)).startswith(POSTGRESQL_PROCESS_TESTS):
            item.add_marker(pytest.mark.postgresql)


# Before any test or fixture runs: nothing in this process reaches past loopback.
network_guard.install()
flush_retry.install()


@pytest.fixture(autouse=True)
def only_loopback() -> Iterator[None]:
    """Fails the test if anything in it tried to reach past loopback, even where the code under
    test swallowed the refusal (a probe that marks its engine down)."""
    yield
    network_guard.fail_if_refused()


@pytest.fixture(autouse=True)
def secret_key_put_back() -> Iterator[None]:
    """Fails a test that leaves settings.SECRET_KEY changed: the sessions later tests sign would
    no longer be readable by the gateways the suite started with its own key."""
    yield
    if settings.SECRET_KEY != SUITE_SECRET_KEY:
        leaked, settings.SECRET_KEY = settings.SECRET_KEY, SUITE_SECRET_KEY
        pytest.fail(f"the test left settings.SECRET_KEY changed (to {leaked[:12]}...)")


# The test process and every process it starts share this Redis database.
settings.REDIS_URL = TEST_REDIS_URL
settings.CELERY_BROKER_URL = TEST_REDIS_URL
settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": TEST_REDIS_URL}}


@pytest.fixture
def redis_url() -> str:
    """The URL of a real, empty Redis database for this test."""
    client = redis.Redis.from_url(TEST_REDIS_URL)
    client.flushdb()
    client.close()
    return TEST_REDIS_URL


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def sentinels() -> Iterator[SentinelRedis]:
    """A private Redis master, one replica and one sentinel (quorum 1) on loopback ports."""
    world = SentinelRedis(sentinels=1, quorum=1)
    try:
        world.start()
        yield world
    finally:
        world.stop_all()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """The test databases, dropped at the end without a session still open on them.

    Async code run outside a server (asyncio.run in a test) does its ORM work on asgiref's
    one shared thread, whose connections outlive the test; PostgreSQL will not drop a
    database while they are open.
    """
    yield
    SyncToAsync.single_thread_executor.submit(connections.close_all).result()


@pytest.fixture(scope="session")
def live_db_url(django_db_setup, django_db_blocker) -> str:
    from django.db import connection

    with django_db_blocker.unblock():
        return database_url(connection.settings_dict)


@pytest.fixture
def worker(live_db_url: str, redis_url: str, transactional_db):
    """A real Celery worker with beat, over the test database and Redis."""
    from tests.support.worker_process import WorkerProcess

    LOG_DIR.mkdir(parents=True, exist_ok=True)
    env = gateway_env(live_db_url, GP_USAGE_FLUSH_SECONDS="0.5", GP_POLL_SECONDS="0.5", GP_FAIRSHARE_SAVE_SECONDS="0.5")
    process = WorkerProcess(env, LOG_DIR / f"worker-{free_port()}.log")
    yield process
    process.stop()


@pytest.fixture(scope="session")
def gateway_session(live_db_url: str) -> Iterator[GatewayProcess]:
    process = start_gateway(live_db_url)
    yield process
    process.stop()


@pytest.fixture
def gateway(gateway_session: GatewayProcess, transactional_db, redis_url: str) -> GatewayProcess:
    """A live gateway over committed data; Redis and the tables are fresh for each test."""
    return gateway_session


@pytest.fixture
def tiers(transactional_db):
    """The seeded tiers (table flushes between live tests remove the migration's rows)."""
    from fairness.demo.default_tiers import ensure_default_tiers
    from fairness.models import Tier

    return ensure_default_tiers(Tier)


@pytest.fixture
def cast(tiers) -> dict[str, Member]:
    """alice and bob are interactive, carol runs batch jobs."""
    from django.contrib.auth import get_user_model

    from fairness.actions.keys import issue_key

    members = {}
    for username, tier_name in (("alice", "interactive"), ("bob", "interactive"), ("carol", "batch")):
        user, _ = get_user_model().objects.get_or_create(username=username)
        key, secret = issue_key(user, tiers[tier_name], label=f"{username}'s key")
        members[username] = Member(username, tier_name, secret, key.pk, key.owner_id)
    return members


@pytest.fixture(scope="session")
def sim() -> Iterator[EngineSimProcess]:
    """One fast simulated engine shared by the live tests (its faults reset per test)."""
    process = start_enginesim(model=MODEL, max_num_seqs=8, extra_args=["--speed", "20"])
    yield process
    process.stop()


@pytest.fixture(scope="session")
def embedding_sim() -> Iterator[EngineSimProcess]:
    """A simulated embedding model. Its prefill runs at 400 tokens a second, so an input of a
    hundred tokens is in the engine for a quarter second, long enough to be seen there."""
    process = start_enginesim(model=EMBEDDING_MODEL, max_num_seqs=8,
                              extra_args=["--runner", "pooling", "--prefill-tokens-per-second", "400"])
    yield process
    process.stop()


@pytest.fixture
def embedding_replica(embedding_sim: EngineSimProcess, gateway, replica):
    """An embedding replica beside the chat replica ("sim-a"); its engine's request log cleared."""
    from fairness.models import Replica

    embedding_sim.reset_peak()
    return Replica.objects.create(name="embed-a", base_url=embedding_sim.url, model=EMBEDDING_MODEL, max_num_seqs=8,
                                  model_kind=Replica.ModelKind.EMBEDDING)


@pytest.fixture
def engine8() -> Iterator[EngineSimProcess]:
    """A private 8-slot engine whose request log this test alone reads."""
    process = start_enginesim(model=MODEL, max_num_seqs=8, extra_args=["--speed", "20"])
    yield process
    process.stop()


@pytest.fixture
def on_engine8(gateway, engine8: EngineSimProcess):
    """engine8, registered as a replica the gateway routes to."""
    from fairness.models import Replica

    return Replica.objects.create(name="sim-8", base_url=engine8.url, model=MODEL, max_num_seqs=8)


@pytest.fixture
def replica(sim: EngineSimProcess, gateway):
    from fairness.models import Replica

    sim.set_faults(health_fail=False, error_500=False, stall=False, error_500_marker="")
    return Replica.objects.create(name="sim-a", base_url=sim.url, model=MODEL, max_num_seqs=8)


@pytest.fixture
def openai_for(gateway, replica):
    from openai import OpenAI

    def make(member: Member, **kwargs) -> OpenAI:
        return OpenAI(base_url=gateway.url + "/v1", api_key=member.secret, max_retries=0, **kwargs)

    return make


@pytest.fixture
def staff(tiers):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user("sam", password=STAFF_PASSWORD, is_staff=True)


@pytest.fixture
def admin_token(staff) -> str:
    """sam's token for the admin API."""
    from fairness.actions.audit import Actor
    from fairness.actions.tokens import issue_admin_token

    return issue_admin_token(Actor(staff), staff, "ci")[1]


@pytest.fixture
def staff_client(staff):
    """sam, signed in, from a known address (the audit log records it)."""
    from django.test import Client

    client = Client(REMOTE_ADDR=STAFF_IP)
    client.force_login(staff)
    return client


@pytest.fixture
def researcher_client(cast):
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username="alice"))
    return client
