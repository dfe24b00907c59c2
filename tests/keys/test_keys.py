import datetime as dt
import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from fairness.actions.keys import issue_key, mint_secret
from fairness.gateway.api_keys import KeyCache, hash_secret
from fairness.gateway.errors import ApiError
from fairness.models import ApiKey, Replica
from fairness.store.config_epoch import NO_EPOCH, EpochWatch
from fairness.store.keyspace import CONFIG_EPOCH

pytestmark = pytest.mark.django_db(transaction=True)


def test_secrets_are_long_random_and_prefixed():
    secrets = {mint_secret() for _ in range(100)}
    assert len(secrets) == 100
    for secret in secrets:
        assert secret.startswith("gp-")
        assert len(secret) >= 3 + 43  # 32 bytes, URL-safe base64


def test_only_the_hash_is_stored(tiers):
    user = get_user_model().objects.create(username="alice")
    key, secret = issue_key(user, tiers["interactive"])
    stored = ApiKey.objects.get(pk=key.pk)
    assert stored.secret_hash == hash_secret(secret)
    assert secret not in {str(getattr(stored, f.attname)) for f in ApiKey._meta.fields}
    assert secret.startswith(stored.prefix)


def test_issue_key_command_prints_the_secret_alone_on_the_last_line(tiers):
    out = io.StringIO()
    call_command("issue_key", "--user", "dora", "--create-user", "--tier", "batch", "--label", "nightly",
                 stdout=out)
    secret = out.getvalue().strip().splitlines()[-1]
    key = ApiKey.objects.get(secret_hash=hash_secret(secret))
    assert (key.owner.username, key.tier.name, key.label) == ("dora", "batch", "nightly")


def test_issue_key_command_rejects_an_unknown_tier(tiers):
    with pytest.raises(CommandError, match="No tier named 'gold'"):
        call_command("issue_key", "--user", "dora", "--tier", "gold", stdout=io.StringIO())


def test_revoke_key_command_revokes_by_prefix(tiers):
    user = get_user_model().objects.create(username="bob")
    key, _ = issue_key(user, tiers["interactive"])
    call_command("revoke_key", key.prefix, stdout=io.StringIO())
    key.refresh_from_db()
    assert key.revoked_at is not None
    with pytest.raises(CommandError):
        call_command("revoke_key", "gp-nothere", stdout=io.StringIO())


def test_add_replica_command_validates_and_saves(tiers):
    call_command(
        "add_replica", "--name", "r1", "--url", "http://127.0.0.1:9/", "--model", "tiny",
        "--max-num-seqs", "8", stdout=io.StringIO(),
    )
    replica = Replica.objects.get(name="r1")
    assert (replica.base_url, replica.max_num_seqs, replica.engine_kind) == ("http://127.0.0.1:9", 8, "vllm")
    with pytest.raises(CommandError, match="max_num_seqs"):
        call_command(
            "add_replica", "--name", "r2", "--url", "http://127.0.0.1:9", "--model", "tiny",
            "--max-num-seqs", "0", stdout=io.StringIO(),
        )
    # Moving a batch-only replica onto r1's model would make r1's slots count twice.
    batch_only = Replica.objects.create(name="r3", base_url="http://127.0.0.1:8", model="other")
    batch_only.tiers.set([tiers["batch"]])
    with pytest.raises(CommandError, match="count r1's slots as its own"):
        call_command(
            "add_replica", "--name", "r3", "--url", "http://127.0.0.1:8", "--model", "tiny",
            "--max-num-seqs", "8", stdout=io.StringIO(),
        )
    assert Replica.objects.get(name="r3").model == "other"


@pytest.fixture
def keycache():
    return KeyCache(ttl=60.0)


async def test_cache_authenticates_and_refuses_what_it_should(tiers, keycache):
    User = get_user_model()
    user = await User.objects.acreate(username="carol")
    _, good = await _issue(user, tiers["batch"])
    revoked, revoked_secret = await _issue(user, tiers["batch"])
    await ApiKey.objects.filter(pk=revoked.pk).aupdate(revoked_at=timezone.now())
    _, expired_secret = await _issue(user, tiers["batch"], expires_at=timezone.now() - dt.timedelta(seconds=1))

    info = await keycache.authenticate(f"Bearer {good}")
    assert info.tier.name == "batch" and info.tier.pool_concurrency == 2
    cases = {
        None: "missing_api_key",
        "Basic abc": "invalid_api_key",
        "Bearer sk-not-ours-at-all-xxxxxxxx": "invalid_api_key",
        f"Bearer {mint_secret()}": "invalid_api_key",
        f"Bearer {revoked_secret}": "revoked_api_key",
        f"Bearer {expired_secret}": "expired_api_key",
    }
    for header, code in cases.items():
        with pytest.raises(ApiError) as caught:
            await keycache.authenticate(header)
        assert (caught.value.status, caught.value.code) == (401, code)


async def test_a_cached_key_needs_no_database_until_cleared(tiers, keycache, django_db_blocker):
    user = await get_user_model().objects.acreate(username="alice")
    _, secret = await _issue(user, tiers["interactive"])
    await keycache.authenticate(f"Bearer {secret}")
    with django_db_blocker.block():
        for _ in range(5):
            await keycache.authenticate(f"Bearer {secret}")
        keycache.clear()
        with pytest.raises(Exception, match="Database access not allowed"):
            await keycache.authenticate(f"Bearer {secret}")


@pytest.mark.parametrize("through", ["redis-py", "the lane"])
async def test_epoch_watch_sees_a_bump_once_per_interval(redis_url, through):
    import redis.asyncio

    from fairness.store.redis_lane import RedisLane

    now = [0.0]
    watch = EpochWatch(interval=1.0, clock=lambda: now[0])
    client = redis.asyncio.Redis.from_url(redis_url)
    reader = client if through == "redis-py" else RedisLane.like(client)  # a gateway reads it on its lane
    assert watch.seen is None  # not looked yet
    assert await watch.changed(reader)  # first look always counts as a change
    assert watch.seen == NO_EPOCH  # (the test's Redis is empty)
    await client.set(CONFIG_EPOCH, "changed")
    assert not await watch.changed(reader)  # not due yet
    now[0] = 1.0
    assert await watch.changed(reader) and watch.seen == "changed"
    now[0] = 2.0
    assert not await watch.changed(reader)
    if isinstance(reader, RedisLane):
        await reader.aclose()
    await client.aclose()


async def _issue(user, tier, **kwargs):
    from asgiref.sync import sync_to_async

    return await sync_to_async(issue_key)(user, tier, **kwargs)
