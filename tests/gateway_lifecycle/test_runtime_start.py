"""What a gateway process does before it takes its first request."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import redis.asyncio
from asgiref.sync import sync_to_async

from fairness.gateway import engine_client
from fairness.gateway.runtime import GatewayRuntime, RuntimeSettings
from fairness.store import keyspace

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_outbound_client_is_made_at_start_not_at_the_first_probe(redis_url):
    """Making it imports the HTTP stack, which once held a busy host's event loop for 2 s: done
    at the first probe, every request that came in meanwhile waited that long, before its key was
    even checked."""

    async def scenario() -> bool:
        runtime = GatewayRuntime(RuntimeSettings.from_django(), redis.asyncio.Redis.from_url(redis_url))
        try:
            await runtime.start()  # no replica yet, so nothing has probed
            return await engine_client.prepare()
        finally:
            await runtime.close()

    made_by_prepare = asyncio.run(scenario())
    assert made_by_prepare is False, "the runtime started without making its outbound client"


def test_it_starts_while_the_database_is_away_and_loads_the_replicas_once_it_is_back(redis_url, monkeypatch):
    """The database away at start-up (or at a reload the config epoch asked for): the process
    starts all the same, and the next refresh reads the replicas again, though the epoch it saw
    has not changed since."""
    from django.db.utils import OperationalError

    from fairness.gateway import runtime as runtime_module
    from fairness.models import Replica

    Replica.objects.create(name="sim-a", base_url="http://127.0.0.1:9", model="sim", max_num_seqs=4)
    real_load, away = runtime_module.load_directory, [True]

    async def load_directory(include_draining: bool = False):
        if away[0]:
            raise OperationalError("connection failed: Connection refused")
        return await real_load(include_draining)

    monkeypatch.setattr(runtime_module, "load_directory", load_directory)

    async def scenario() -> tuple[list[str], list[str]]:
        config = dataclasses.replace(RuntimeSettings.from_django(), epoch_check_seconds=0)
        client = redis.asyncio.Redis.from_url(redis_url)
        runtime = GatewayRuntime(config, client)
        try:
            await runtime.start()  # does not raise: the lifespan completes
            assert runtime.directory is None
            with pytest.raises(OperationalError):  # a request meanwhile is answered 503 (asgi.py)
                await runtime.refresh()
            away[0] = False
            at_start = [replica.name for replica in (await runtime.refresh()).all]

            # A change, then the database away as the process reloads for it.
            await sync_to_async(Replica.objects.create)(name="sim-b", base_url="http://127.0.0.1:9", model="sim",
                                                        max_num_seqs=4)
            await client.set(keyspace.CONFIG_EPOCH, "changed")
            away[0] = True
            with pytest.raises(OperationalError):
                await runtime.refresh()
            away[0] = False
            return at_start, [replica.name for replica in (await runtime.refresh()).all]
        finally:
            await runtime.close()

    assert asyncio.run(scenario()) == (["sim-a"], ["sim-a", "sim-b"])
