"""A live gateway in front of enginesim: a key asking for a model its tier or account does not
allow gets an OpenAI-shaped 403 model_not_allowed, /v1/models lists only what it may use, staff's
changes reach the gateway through the config epoch, and one key's restriction stays its own."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from fairness.models import Account, Replica
from tests.support.cast import MODEL
from tests.support.model_access import OTHER_MODEL, restrict
from tests.support.polling import wait_for
from tests.support.v1_calls import CHAT, assert_error, post

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def two_models(replica, sim) -> Replica:
    """A second model beside "sim" (only listed and refused here: nothing is sent to it)."""
    return Replica.objects.create(name="sim-b", base_url=sim.url, model=OTHER_MODEL, max_num_seqs=8)


def own_account(member) -> Account:
    return Account.objects.get(name=member.username)  # each of the cast starts in an account of their own


def listed(client: openai.OpenAI) -> list[str]:
    return sorted(model.id for model in client.models.list())


def get(gateway, secret: str, path: str) -> dict:
    response = httpx.get(gateway.url + path, headers={"authorization": f"Bearer {secret}"}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_model_the_account_does_not_allow_is_an_openai_shaped_403(cast, two_models, gateway, openai_for):
    restrict(own_account(cast["alice"]), OTHER_MODEL)
    error = assert_error(post(gateway, cast["alice"].secret, CHAT), 403, "model_not_allowed")
    assert (error["type"], error["param"]) == ("permission_error", "model")
    assert f"'{MODEL}'" in error["message"] and "account 'alice'" in error["message"]
    with pytest.raises(openai.PermissionDeniedError) as refused:
        openai_for(cast["alice"]).chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)
    assert refused.value.code == "model_not_allowed"


def test_a_missing_model_stays_404_and_one_not_served_to_the_tier_stays_its_own_403(
    cast, tiers, two_models, gateway
):
    restrict(tiers["batch"], OTHER_MODEL)  # carol's tier allows only the other model...
    two_models.tiers.set([tiers["interactive"]])  # ...which is not served to her tier
    carol = cast["carol"].secret
    wait_for(lambda: post(gateway, carol, CHAT).status_code == 403, what="the restriction")
    assert_error(post(gateway, carol, {**CHAT, "model": "nowhere"}), 404, "model_not_found")
    assert_error(post(gateway, carol, {**CHAT, "model": OTHER_MODEL}), 403, "model_not_available_for_tier")
    error = assert_error(post(gateway, carol, CHAT), 403, "model_not_allowed")
    assert "batch tier" in error["message"]
    completions = {"model": MODEL, "prompt": "hi", "max_tokens": 4}
    assert_error(post(gateway, carol, completions, path="/v1/completions"), 403, "model_not_allowed")


def test_models_lists_and_retrieves_only_what_the_key_may_use(cast, two_models, openai_for):
    restrict(own_account(cast["alice"]), MODEL)
    alice, bob = openai_for(cast["alice"]), openai_for(cast["bob"])
    assert listed(alice) == [MODEL]
    assert listed(bob) == sorted([MODEL, OTHER_MODEL])
    assert alice.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError) as missing:  # as if it did not exist: the listing agrees
        alice.models.retrieve(OTHER_MODEL)
    assert missing.value.code == "model_not_found"
    assert bob.models.retrieve(OTHER_MODEL).id == OTHER_MODEL


def test_an_ancestors_restriction_reaches_its_accounts_keys(cast, two_models, gateway, openai_for):
    lab = Account.objects.create(name="lab", allowed_models=[OTHER_MODEL])
    alices = own_account(cast["alice"])
    alices.parent = lab
    alices.save()
    assert listed(openai_for(cast["alice"])) == [OTHER_MODEL]
    error = assert_error(post(gateway, cast["alice"].secret, CHAT), 403, "model_not_allowed")
    assert "account 'lab'" in error["message"]


def test_a_staff_change_takes_effect_within_the_epoch_check(cast, two_models, gateway, staff_client):
    alice = cast["alice"].secret
    assert post(gateway, alice, CHAT).status_code == 200
    response = staff_client.post("/staff/accounts/alice/shares/", {"shares": "1", "allowed_models": OTHER_MODEL})
    assert response.status_code == 302
    wait_for(lambda: post(gateway, alice, CHAT).status_code == 403, what="the page's restriction")

    response = staff_client.patch("/api/admin/accounts/alice", data=json.dumps({"allowed_models": []}),
                                  content_type="application/json")
    assert response.status_code == 200 and response.json()["allowed_models"] == []
    wait_for(lambda: post(gateway, alice, CHAT).status_code == 200, what="the API's lifting it")

    response = staff_client.patch("/api/admin/tiers/interactive", data=json.dumps({"allowed_models": ["x"]}),
                                  content_type="application/json")
    assert response.status_code == 200
    wait_for(lambda: post(gateway, alice, CHAT).status_code == 403, what="the tier's restriction")
    assert "interactive tier" in post(gateway, alice, CHAT).json()["error"]["message"]


def test_one_keys_restriction_does_not_leak_to_another_accounts_key(cast, two_models, gateway):
    # alice and bob share a tier and one gateway's key cache; only alice's account is restricted.
    restrict(own_account(cast["alice"]), OTHER_MODEL)
    alice, bob = cast["alice"].secret, cast["bob"].secret
    for _ in range(2):  # interleaved, so each answer follows a lookup of the other key
        assert_error(post(gateway, alice, CHAT), 403, "model_not_allowed")
        assert post(gateway, bob, CHAT).status_code == 200
    listing = [m["id"] for m in get(gateway, bob, "/v1/models")["data"]]
    assert sorted(listing) == sorted([MODEL, OTHER_MODEL])
    assert [m["id"] for m in get(gateway, alice, "/v1/models")["data"]] == [OTHER_MODEL]
