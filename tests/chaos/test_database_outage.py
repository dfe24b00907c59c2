"""The database stops under load and comes back, the gateway and the worker running throughout: a
private PostgreSQL (tests/support/postgres_server.py), a gateway and a Celery worker over it, the
session's enginesim. Keys in use keep answering from the gateway's cache; a key it has not read
gets 503 `database_unavailable` at once; pages answer a 503 page, the JSON API a JSON 503; usage
waits in Redis and, once the database is back, every completed request's row is written once.

The outage lasts GP_DATABASE_OUTAGE_SECONDS (30 by default, as an operator's restart or a failover
might): set it lower for a quicker run."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis

from enginesim.process import EngineSimProcess
from fairness.store import keyspace
from tests.support.cast import MODEL
from tests.support.gateway_process import ROOT, GatewayProcess
from tests.support.polling import async_wait_for, wait_for
from tests.support.postgres_server import PrivatePostgres
from tests.support.processes import LOG_DIR, free_port, gateway_env, start_gateway
from tests.support.worker_process import WorkerProcess

pytestmark = pytest.mark.chaos

OUTAGE_SECONDS = float(os.environ.get("GP_DATABASE_OUTAGE_SECONDS", "30"))
CONNECT_TIMEOUT = 2  # the processes' GP_DATABASE_CONNECT_TIMEOUT here
ANSWER_BOUND = CONNECT_TIMEOUT + 2.0  # the longest a request may take to be told the database is away
WARM = ("alice", "bob")  # interactive keys, two requests at once each (their tier's cap)
COLD = "carol"  # not used until the database is away
REVOKED = "dave"  # used, then revoked before the outage: its cached answer went with the revocation
PROBE_EVERY = 1.0  # seconds between the outage's probes of the cold key and the pages


@dataclass(frozen=True)
class Answer:
    who: str
    status: int
    code: str | None
    request_id: str
    started: float  # time.monotonic()
    ended: float
    retry_after: str | None = None


@dataclass
class World:
    postgres: PrivatePostgres
    gateway: GatewayProcess
    worker: WorkerProcess
    env: dict[str, str]  # the processes' environment
    secrets: dict[str, str]  # the cast's keys, and alice's session under "session"

    def seed(self, *args: str) -> str:
        """tests/chaos/outage_seed.py run over the private database: its output."""
        return subprocess.run([sys.executable, "-m", "tests.chaos.outage_seed", *args], cwd=ROOT,
                              env={**os.environ, **self.env}, check=True, capture_output=True, text=True,
                              timeout=120).stdout


@pytest.fixture
def world(sim: EngineSimProcess, redis_url: str) -> Iterator[World]:
    sim.set_faults(health_fail=False, error_500=False, stall=False, error_500_marker="")
    postgres = PrivatePostgres()
    gateway = worker = None
    try:
        postgres.start()
        postgres.create_database()
        # A kept connection (CONN_MAX_AGE) is what an outage breaks: recovery must make a new one.
        env = gateway_env(postgres.url(), DB_CONN_MAX_AGE="60", GP_DATABASE_CONNECT_TIMEOUT=str(CONNECT_TIMEOUT),
                          GP_USAGE_FLUSH_SECONDS="0.5", GP_POLL_SECONDS="0.5")
        postgres.migrate(env)
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        worker = WorkerProcess(env, LOG_DIR / f"outage-worker-{free_port()}.log")
        gateway = start_gateway(postgres.url(), name="outage-gateway", **{k: v for k, v in env.items()
                                                                          if k.startswith(("GP_", "DB_"))})
        world = World(postgres, gateway, worker, env, {})
        world.secrets = json.loads(world.seed(sim.url, MODEL).strip().splitlines()[-1])
        yield world
    finally:
        for process in (gateway, worker):
            if process is not None:
                process.stop()
        postgres.destroy()


async def chat(client: httpx.AsyncClient, world: World, who: str) -> Answer:
    started = time.monotonic()
    response = await client.post(
        world.gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {world.secrets[who]}"},
        json={"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4},
    )
    code = None
    if response.status_code != 200:
        error = response.json()["error"]
        code = error["code"]
        if response.status_code == 503:
            assert error["type"] == "service_unavailable", error
            assert error["message"], error
    return Answer(who, response.status_code, code, response.headers["x-request-id"], started, time.monotonic(),
                  response.headers.get("retry-after"))


def page_headers(world: World) -> dict[str, str]:
    return {"Cookie": f"sessionid={world.secrets['session']}"}


async def test_a_database_outage_keeps_known_keys_answering_and_loses_no_usage(
    world: World, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway_pid = world.gateway.process.pid
    answers: list[Answer] = []
    answered = asyncio.Event()
    finished = asyncio.Event()

    async with httpx.AsyncClient(timeout=60) as client:
        async def load(who: str) -> None:
            while not finished.is_set():
                answers.append(await chat(client, world, who))
                answered.set()

        async def next_answer() -> None:
            """The warm keys go on answering: a load that stalls fails here."""
            answered.clear()
            await asyncio.wait_for(answered.wait(), timeout=15)

        # Before: dave's key served, then revoked (which empties the gateway's caches); each warm
        # key read (and cached) by the gateway; the pages answer.
        answers.append(await chat(client, world, REVOKED))
        await asyncio.to_thread(world.seed, "revoke", REVOKED)
        for who in WARM:
            answers.append(await chat(client, world, who))
        me = await client.get(world.gateway.url + "/me/", headers=page_headers(world))
        assert me.status_code == 200, me.text[:500]
        loads = [asyncio.ensure_future(load(who)) for who in WARM for _ in range(2)]
        try:
            await async_wait_for(lambda: _ready(answers), timeout=30, what="the load under way")

            await asyncio.to_thread(world.postgres.stop)
            began = time.monotonic()
            cold: list[Answer] = []
            revoked: list[Answer] = []
            pages: list[httpx.Response] = []
            apis: list[httpx.Response] = []
            next_probe = began
            while (now := time.monotonic()) < began + OUTAGE_SECONDS:
                if now >= next_probe:
                    cold.append(await chat(client, world, COLD))
                    revoked.append(await chat(client, world, REVOKED))
                    pages.append(await client.get(world.gateway.url + "/me/", headers=page_headers(world)))
                    pages.append(await client.get(world.gateway.url + "/capacity/"))
                    apis.append(await client.get(world.gateway.url + "/api/replicas"))
                    next_probe = now + PROBE_EVERY
                await next_answer()

            # Usage of the requests answered during the outage waits in Redis: the worker can write none.
            during = [a for a in answers if a.started >= began and a.status == 200]
            await async_wait_for(lambda: _queued_at_least(redis_client, len(during)), timeout=10,
                                 what=f"{len(during)} usage events waiting in Redis")
            queued = int(redis_client.llen(keyspace.USAGE_EVENTS))
            ended = time.monotonic()
            await asyncio.to_thread(world.postgres.start)

            # The key nobody had used works now, on the same gateway process, and so do the pages.
            tries: list[Answer] = []
            recovered = await async_wait_for(lambda: _answered(client, world, COLD, tries), timeout=15,
                                             what="the cold key answered once the database is back")
            me_again = await client.get(world.gateway.url + "/me/", headers=page_headers(world))
            revoked_again = await chat(client, world, REVOKED)
            await next_answer()
        finally:
            finished.set()
            outcomes = await asyncio.gather(*loads, return_exceptions=True)

    assert [outcome for outcome in outcomes if outcome is not None] == []  # no load ended in an error
    assert world.gateway.process.poll() is None and world.gateway.process.pid == gateway_pid

    # Known keys never failed, before, during or after the outage; many answered while it lasted.
    assert [a for a in answers if a.status != 200] == []
    assert answers[0].who == REVOKED
    during = [a for a in answers if a.started >= began and a.ended <= ended]
    assert len(during) >= 10, f"only {len(during)} requests ran while the database was away"

    # The key not yet cached was told why, promptly, and when to retry.
    assert cold, "no probe ran during the outage"
    assert {(a.status, a.code) for a in cold} == {(503, "database_unavailable")}
    assert all(a.retry_after and int(a.retry_after) > 0 for a in cold)
    slowest = max(a.ended - a.started for a in cold)
    assert slowest < ANSWER_BOUND, f"a cold key waited {slowest:.1f} s for its 503"
    # The outage never serves a key revoked before it from what the gateway knew of it earlier.
    assert {(a.status, a.code) for a in revoked} == {(503, "database_unavailable")}
    assert (revoked_again.status, revoked_again.code) == (401, "revoked_api_key")

    # The pages said so in a page of their own, the JSON API in JSON; no traceback anywhere.
    for page in pages:
        assert page.status_code == 503, page.text[:500]
        assert page.headers["content-type"].startswith("text/html")
        assert "database" in page.text and "Traceback" not in page.text
        assert int(page.headers["retry-after"]) > 0
    for api in apis:
        assert api.status_code == 503, api.text[:500]
        assert api.json()["error"]["code"] == "database_unavailable"
    assert me_again.status_code == 200
    assert {(a.status, a.code) for a in tries} <= {(200, None), (503, "database_unavailable")}
    assert recovered.status == 200
    answers.append(recovered)

    # Every completed request's usage is written once the database is back: one row each, no more.
    completed = {a.request_id for a in answers if a.status == 200}
    wait_for(lambda: _written(world.postgres) == len(completed) and redis_client.llen(keyspace.USAGE_EVENTS) == 0,
             timeout=60, what=f"{len(completed)} usage rows written",
             evidence=lambda: f"rows: {_written(world.postgres)}, worker:\n{world.worker.log_tail()}")
    rows = world.postgres.rows("SELECT request_id FROM fairness_usagerecord")
    assert sorted(r for (r,) in rows) == sorted(completed)
    with capsys.disabled():  # the figures, for docs/operations.md
        print(f"\ndatabase away {ended - began:.1f} s: {len(during)} requests answered meanwhile, "
              f"{len(cold)} cold-key 503s (slowest {slowest * 1000:.0f} ms), {queued} usage events waiting "
              f"at its end; after: the cold key answered in {recovered.ended - ended:.2f} s, "
              f"{len(completed)} usage rows written once")

    # Said once in the log, as a warning without a traceback.
    gateway_log = world.gateway.log_path.read_text(errors="replace")
    assert "database unavailable (" in gateway_log
    assert "Traceback" not in gateway_log, world.gateway.log_tail()
    # The worker's frequent tasks, the flush and the poll, say it the same way (not a traceback each run).
    worker_log = world.worker.log_path.read_text(errors="replace")
    assert "database unavailable (" in worker_log
    for task in ("fairness.flush_usage", "fairness.poll_engines"):
        assert not re.search(re.escape(task) + r"\[[^]]*\] raised unexpected", worker_log), task


async def _ready(answers: list[Answer]) -> bool:
    return all(sum(a.who == who for a in answers) >= 3 for who in WARM)


async def _queued_at_least(client: redis.Redis, count: int) -> bool:
    return int(client.llen(keyspace.USAGE_EVENTS)) >= count


async def _answered(client: httpx.AsyncClient, world: World, who: str, tries: list[Answer]) -> Answer | None:
    tries.append(await chat(client, world, who))
    return tries[-1] if tries[-1].status == 200 else None


def _written(postgres: PrivatePostgres) -> int:
    (count, distinct), = postgres.rows("SELECT count(*), count(DISTINCT request_id) FROM fairness_usagerecord")
    assert count == distinct, f"{count - distinct} requests written twice"
    return int(count)
