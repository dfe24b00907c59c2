"""A gateway process that serves no request follows the config epoch all the same (its health loop
reads it every interval): a revoked key is refused within that interval of its revocation,
however long the process was idle."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.actions.keys import issue_key
from fairness.gateway.errors import ApiError
from fairness.gateway.runtime import GatewayRuntime, RuntimeSettings
from tests.support.polling import async_wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_idle_process_drops_a_revoked_key_within_its_health_interval(redis_url, tiers):
    user = get_user_model().objects.create(username="ida")
    key, secret = issue_key(user, tiers["interactive"])

    def revoke() -> None:
        key.revoked_at = timezone.now()
        key.save()  # bumps the config epoch once committed

    async def scenario() -> None:
        runtime = GatewayRuntime(RuntimeSettings.from_django(), redis.asyncio.Redis.from_url(redis_url))
        try:
            await runtime.start()
            assert (await runtime.keys.authenticate(f"Bearer {secret}")).revoked is False
            await sync_to_async(revoke)()

            async def refused() -> bool:  # asks the key cache only: no request reads the epoch
                try:
                    await runtime.keys.authenticate(f"Bearer {secret}")
                except ApiError as exc:
                    return exc.code == "revoked_api_key"
                return False

            await async_wait_for(refused, timeout=runtime.config.health_interval + runtime.epoch.interval + 2,
                                 what="the idle process to see the revocation")
        finally:
            await runtime.close()

    asyncio.run(scenario())
