"""A key lookup that was under way when the cache was cleared serves its request but is not kept:
otherwise a revocation that commits while it runs would leave the key alive for a whole TTL."""

import asyncio
import dataclasses

import pytest

from fairness.gateway.api_keys import KeyCache, KeyInfo, TierPolicy
from fairness.gateway.errors import ApiError
from fairness.models import Tier

SECRET = "gp-" + "s" * 43
LIVE = KeyInfo(
    id=1, prefix=SECRET[:11], owner_id=1, tier=TierPolicy.of(Tier(name="interactive")), expires_at=None,
    revoked=False, owner_active=True,
)


class SlowLoader:
    """The database, one row: each lookup reads it when it starts and answers when released."""

    def __init__(self, row: KeyInfo) -> None:
        self.row = row
        self.calls = 0
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, secret_hash: str) -> KeyInfo:
        self.calls += 1
        row = self.row  # what the query saw
        self.started.set()
        await self.release.wait()
        return row


async def test_a_lookup_that_straddles_a_clear_is_not_cached():
    loader = SlowLoader(LIVE)
    cache = KeyCache(ttl=60.0, clock=lambda: 0.0, loader=loader)
    lookup = asyncio.ensure_future(cache.authenticate(f"Bearer {SECRET}"))
    await loader.started.wait()
    # The revocation commits and the config epoch clears the cache while the lookup runs.
    loader.row = dataclasses.replace(LIVE, revoked=True)
    cache.clear()
    loader.release.set()
    assert (await lookup).revoked is False  # the request that asked is answered as it started

    with pytest.raises(ApiError) as caught:
        await cache.authenticate(f"Bearer {SECRET}")
    assert caught.value.code == "revoked_api_key"
    assert loader.calls == 2  # looked up afresh, not served from the stale answer


async def test_a_lookup_with_no_clear_meanwhile_is_cached():
    loader = SlowLoader(LIVE)
    loader.release.set()
    cache = KeyCache(ttl=60.0, clock=lambda: 0.0, loader=loader)
    for _ in range(3):
        assert (await cache.authenticate(f"Bearer {SECRET}")).id == LIVE.id
    assert loader.calls == 1


async def test_a_deactivated_owner_is_refused_with_its_own_code():
    loader = SlowLoader(dataclasses.replace(LIVE, owner_active=False))
    loader.release.set()
    cache = KeyCache(ttl=60.0, loader=loader)
    with pytest.raises(ApiError) as caught:
        await cache.authenticate(f"Bearer {SECRET}")
    assert (caught.value.status, caught.value.code) == (401, "owner_inactive")
