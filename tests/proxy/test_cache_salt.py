"""A tier that isolates the prefix cache sends one unguessable cache salt per user to the engine."""

from __future__ import annotations

import hashlib
import importlib
import json

import httpx
from django.contrib.auth import get_user_model

from fairness.actions.keys import issue_key
from fairness.gateway import request_parsing
from fairness.models import Tier
from tests.support.cast import MODEL

BODY = json.dumps(
    {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "cache_salt": "someone-elses"}
).encode()


def test_the_owners_salt_overwrites_a_clients_own():
    parsed = request_parsing.parse(BODY, request_parsing.CHAT)
    sent = json.loads(request_parsing.upstream_body(parsed, BODY, None, "the-owners-salt"))
    assert sent["cache_salt"] == "the-owners-salt"
    assert request_parsing.upstream_body(parsed, BODY, None, None) == BODY  # no isolation: as sent


def test_the_salt_is_stable_per_owner_distinct_between_owners_and_keyed_by_the_secret(settings):
    first = request_parsing.owner_cache_salt(1)
    assert first == request_parsing.owner_cache_salt(1) != request_parsing.owner_cache_salt(2)
    assert first != hashlib.sha256(b"1").hexdigest()
    request_parsing.owner_cache_salt.cache_clear()
    try:
        settings.SECRET_KEY = "another deployment's secret"
        assert request_parsing.owner_cache_salt(1) != first  # not computable without SECRET_KEY
    finally:
        request_parsing.owner_cache_salt.cache_clear()


def test_an_isolating_tier_sends_one_salt_per_owner_and_others_send_theirs(gateway, replica, sim, cast, tiers):
    batch = tiers["batch"]
    batch.isolate_prefix_cache = False  # a tier whose users chose to share
    batch.save()
    alice = get_user_model().objects.get(username="alice")
    _, alices_second = issue_key(alice, tiers["interactive"], label="alice's laptop")
    sim.reset_peak()  # empties the engine's request log

    def send(secret: str, user: str, **extra: str) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Same opening for all"}],
                "max_tokens": 2, "user": user, **extra}
        response = httpx.post(gateway.url + "/v1/chat/completions", json=body,
                              headers={"authorization": f"Bearer {secret}"}, timeout=30)
        assert response.status_code == 200, response.text

    send(cast["alice"].secret, "alice-1")
    send(alices_second, "alice-2", cache_salt="bobs-guessed-salt")
    send(cast["bob"].secret, "bob-1")
    send(cast["carol"].secret, "carol-1", cache_salt="carols-own")  # batch does not isolate
    salts = {entry["user"]: entry["cache_salt"] for entry in sim.requests()}
    assert salts["alice-1"] and salts["bob-1"]
    assert salts["alice-1"] == salts["alice-2"] != salts["bob-1"]  # per owner, not per key
    assert "bobs-guessed-salt" not in salts.values()
    assert salts["carol-1"] == "carols-own"


def test_every_seeded_tier_and_a_new_one_isolate_unless_staff_turn_it_off(staff_client, tiers):
    from django.apps import apps

    step = importlib.import_module("fairness.migrations.0017_isolate_prefix_cache_by_default")
    Tier.objects.update(isolate_prefix_cache=False)  # as the seed left them before
    Tier.objects.create(name="lab", isolate_prefix_cache=False)  # staff's own: kept as it is
    step.isolate_seeded_tiers(apps, None)
    assert dict(Tier.objects.values_list("name", "isolate_prefix_cache")) == {
        "interactive": True, "batch": True, "lab": False}
    assert Tier.objects.create(name="new").isolate_prefix_cache is True
    response = staff_client.post("/api/admin/tiers", data=json.dumps({"name": "api-made"}),
                                 content_type="application/json")
    assert response.status_code == 201, response.content
    assert Tier.objects.get(name="api-made").isolate_prefix_cache is True


def test_the_staff_form_and_the_admin_api_set_it(staff_client, tiers):
    page = staff_client.get("/staff/tiers/batch/edit/").content.decode()
    assert 'name="isolate_prefix_cache"' in page
    fields = {"name": "batch", "per_key_concurrency": 2, "pool_concurrency": 2, "head_start_seconds": 0,
              "max_queue_wait_seconds": 300, "max_queued_per_key": 64, "engine_priority": 0,
              "fairshare_weight_seconds": 300}  # the box unticked
    assert "prefilled once per user" in page  # the form says what it costs
    assert staff_client.post("/staff/tiers/batch/edit/", fields).status_code == 302
    assert Tier.objects.get(name="batch").isolate_prefix_cache is False
    response = staff_client.patch("/api/admin/tiers/batch", data=json.dumps({"isolate_prefix_cache": True}),
                                  content_type="application/json")
    assert response.status_code == 200 and response.json()["isolate_prefix_cache"] is True
    assert Tier.objects.get(name="batch").isolate_prefix_cache is True
