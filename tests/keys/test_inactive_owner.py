"""A deactivated user's keys stop as fast as a revoked key, start again when they are reactivated,
and no new key is issued to them."""

import io
import json
import time

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError

from fairness.actions.audit import Actor
from fairness.actions.keys import issue
from fairness.models import ApiKey
from fairness.store.keyspace import CONFIG_EPOCH
from tests.support.polling import wait_for
from tests.support.processes import start_gateway

pytestmark = pytest.mark.django_db(transaction=True)


def models_call(gateway, secret: str) -> httpx.Response:
    return httpx.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {secret}"}, timeout=10)


def set_active(username: str, active: bool) -> None:
    user = get_user_model().objects.get(username=username)
    user.is_active = active
    user.save()  # as the Django admin's user page does


def test_deactivating_a_user_stops_their_keys_within_a_second(live_db_url, redis_url, cast):
    # The production setting: a gateway looks for changes at most every 0.5 s.
    gateway = start_gateway(live_db_url, name="deactivation", GP_AUTH_EPOCH_CHECK_SECONDS="0.5")
    try:
        alice = cast["alice"].secret
        assert models_call(gateway, alice).status_code == 200  # cached as a live key

        set_active("alice", False)
        deactivated_at = time.monotonic()
        wait_for(lambda: models_call(gateway, alice).status_code == 401, timeout=3, interval=0.05,
                 what="the deactivation")
        assert time.monotonic() - deactivated_at < 1.0
        error = models_call(gateway, alice).json()["error"]
        assert (error["code"], error["type"]) == ("owner_inactive", "authentication_error")
        assert models_call(gateway, cast["bob"].secret).status_code == 200  # nobody else's

        set_active("alice", True)
        wait_for(lambda: models_call(gateway, alice).status_code == 200, timeout=3, interval=0.05,
                 what="the reactivation")
    finally:
        gateway.stop()


def test_a_save_that_cannot_change_activation_leaves_the_gateways_caches_alone(redis_client, cast):
    user = get_user_model().objects.get(username="alice")
    redis_client.set(CONFIG_EPOCH, "before")
    user.save(update_fields=["last_login"])  # what every sign-in does
    assert redis_client.get(CONFIG_EPOCH) == b"before"
    user.save(update_fields=["is_active"])
    assert redis_client.get(CONFIG_EPOCH) != b"before"


def test_the_admin_api_refuses_a_key_for_a_deactivated_user(staff_client, cast):
    set_active("carol", False)
    response = staff_client.post("/api/admin/keys", data=json.dumps({"owner": "carol", "tier": "batch"}),
                                 content_type="application/json")
    assert response.status_code == 422, response.content
    assert response.json()["detail"].startswith("owner:") and "deactivated" in response.json()["detail"]
    assert ApiKey.objects.filter(owner__username="carol").count() == 1  # the cast's own


def test_the_action_and_the_command_refuse_too(staff, cast, tiers):
    set_active("carol", False)
    carol = get_user_model().objects.get(username="carol")
    with pytest.raises(ValidationError, match="deactivated"):
        issue(Actor(staff), carol, tiers["batch"])
    with pytest.raises(CommandError, match="deactivated"):
        call_command("issue_key", "--user", "carol", "--tier", "batch", stdout=io.StringIO())
    assert ApiKey.objects.filter(owner__username="carol").count() == 1
